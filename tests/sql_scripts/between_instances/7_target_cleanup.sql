-- Dropping the objects, on the target instance: the conversation objects, the
-- references to the initiator, dialog security's users and certificates, the msdb
-- route, then transport security's endpoint, login, user and certificates in master.
USE InstTargetDB;
GO
IF EXISTS (SELECT * FROM sys.services
           WHERE name = N'//TgtDB/2InstSample/TargetService')
     DROP SERVICE [//TgtDB/2InstSample/TargetService];
IF EXISTS (SELECT * FROM sys.service_queues
           WHERE name = N'InstTargetQueue')
     DROP QUEUE InstTargetQueue;
IF EXISTS (SELECT * FROM sys.service_contracts
           WHERE name = N'//BothDB/2InstSample/SimpleContract')
     DROP CONTRACT [//BothDB/2InstSample/SimpleContract];
IF EXISTS (SELECT * FROM sys.service_message_types
           WHERE name = N'//BothDB/2InstSample/RequestMessage')
     DROP MESSAGE TYPE [//BothDB/2InstSample/RequestMessage];
IF EXISTS (SELECT * FROM sys.service_message_types
           WHERE name = N'//BothDB/2InstSample/ReplyMessage')
     DROP MESSAGE TYPE [//BothDB/2InstSample/ReplyMessage];
IF EXISTS (SELECT * FROM sys.routes
           WHERE name = N'InstInitiatorRoute')
     DROP ROUTE InstInitiatorRoute;
IF EXISTS (SELECT * FROM sys.certificates
           WHERE name = N'InstInitiatorCertificate')
     DROP CERTIFICATE InstInitiatorCertificate;
IF EXISTS (SELECT * FROM sys.database_principals
           WHERE name = N'InitiatorUser')
     DROP USER InitiatorUser;
IF EXISTS (SELECT * FROM sys.certificates
           WHERE name = N'InstTargetCertificate')
     DROP CERTIFICATE InstTargetCertificate;
IF EXISTS (SELECT * FROM sys.database_principals
           WHERE name = N'TargetUser')
     DROP USER TargetUser;
IF EXISTS (SELECT * FROM sys.symmetric_keys
           WHERE name = N'##MS_DatabaseMasterKey##')
     DROP MASTER KEY;
GO
USE msdb;
GO
IF EXISTS (SELECT * FROM sys.routes
           WHERE name = N'InstTargetRoute')
     DROP ROUTE InstTargetRoute;
GO
USE master;
GO
DROP ENDPOINT InstTargetEndpoint;
DROP CERTIFICATE InstInitiatorEndpointCertificate;
DROP USER InstInitiatorLoginUser;
DROP LOGIN InstInitiatorLogin;
DROP CERTIFICATE InstTargetEndpointCertificate;
DROP MASTER KEY;
GO
