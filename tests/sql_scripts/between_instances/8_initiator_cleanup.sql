-- Dropping the objects, on the initiator instance.
USE InstInitiatorDB;
GO
IF EXISTS (SELECT * FROM sys.services
           WHERE name = N'//InstDB/2InstSample/InitiatorService')
     DROP SERVICE [//InstDB/2InstSample/InitiatorService];
IF EXISTS (SELECT * FROM sys.service_queues
           WHERE name = N'InstInitiatorQueue')
     DROP QUEUE InstInitiatorQueue;
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
           WHERE name = N'InstTargetRoute')
     DROP ROUTE InstTargetRoute;
IF EXISTS (SELECT * FROM sys.remote_service_bindings
           WHERE name = N'TargetBinding')
     DROP REMOTE SERVICE BINDING TargetBinding;
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
           WHERE name = N'InstInitiatorRoute')
     DROP ROUTE InstInitiatorRoute;
GO
USE master;
GO
DROP ENDPOINT InstInitiatorEndpoint;
DROP CERTIFICATE InstTargetEndpointCertificate;
DROP USER InstTargetLoginUser;
DROP LOGIN InstTargetLogin;
DROP CERTIFICATE InstInitiatorEndpointCertificate;
DROP MASTER KEY;
GO
