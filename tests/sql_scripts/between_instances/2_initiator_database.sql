-- Lesson 2, on the initiator instance: its endpoint, which trusts the target instance's
-- endpoint (a login, a user in master owning the target endpoint's certificate, CONNECT
-- on the endpoint); the initiator database, its master key, user, certificate and
-- conversation objects; and what it knows of the target: a user owning the target's
-- certificate, a route to the target instance and a remote service binding.
USE master;
GO
CREATE MASTER KEY
       ENCRYPTION BY PASSWORD = N'<EnterStrongPassword3Here>';
GO
CREATE CERTIFICATE InstInitiatorEndpointCertificate
       WITH SUBJECT = N'Initiator instance endpoint';
GO
CREATE ENDPOINT InstInitiatorEndpoint
STATE = STARTED
AS TCP ( LISTENER_PORT = 4022 )
FOR SERVICE_BROKER (AUTHENTICATION = CERTIFICATE InstInitiatorEndpointCertificate,
                    ENCRYPTION = REQUIRED);
GO
BACKUP CERTIFICATE InstInitiatorEndpointCertificate
  TO FILE = N'C:\storedcerts\$ampleSSBCerts\InstInitiatorEndpointCertificate.cer';
GO
CREATE LOGIN InstTargetLogin
       WITH PASSWORD = N'<EnterStrongPassword4Here>';
CREATE USER InstTargetLoginUser FOR LOGIN InstTargetLogin;
CREATE CERTIFICATE InstTargetEndpointCertificate
     AUTHORIZATION InstTargetLoginUser
     FROM FILE = N'C:\storedcerts\$ampleSSBCerts\InstTargetEndpointCertificate.cer';
GRANT CONNECT ON ENDPOINT::InstInitiatorEndpoint TO InstTargetLogin;
GO
CREATE DATABASE InstInitiatorDB;
GO
USE InstInitiatorDB;
GO
CREATE MASTER KEY
       ENCRYPTION BY PASSWORD = N'<EnterStrongPassword5Here>';
GO
CREATE USER InitiatorUser WITHOUT LOGIN;
GO
CREATE CERTIFICATE InstInitiatorCertificate
     AUTHORIZATION InitiatorUser
     WITH SUBJECT = N'Initiator Certificate',
          EXPIRY_DATE = N'12/31/2040';

BACKUP CERTIFICATE InstInitiatorCertificate
  TO FILE = N'C:\storedcerts\$ampleSSBCerts\InstInitiatorCertificate.cer';
GO
CREATE MESSAGE TYPE [//BothDB/2InstSample/RequestMessage]
       VALIDATION = WELL_FORMED_XML;
CREATE MESSAGE TYPE [//BothDB/2InstSample/ReplyMessage]
       VALIDATION = WELL_FORMED_XML;
GO
CREATE CONTRACT [//BothDB/2InstSample/SimpleContract]
      ([//BothDB/2InstSample/RequestMessage]
         SENT BY INITIATOR,
       [//BothDB/2InstSample/ReplyMessage]
         SENT BY TARGET
      );
GO
CREATE QUEUE InstInitiatorQueue;

CREATE SERVICE [//InstDB/2InstSample/InitiatorService]
       AUTHORIZATION InitiatorUser
       ON QUEUE InstInitiatorQueue;
GO
CREATE USER TargetUser WITHOUT LOGIN;

CREATE CERTIFICATE InstTargetCertificate
   AUTHORIZATION TargetUser
   FROM FILE = N'C:\storedcerts\$ampleSSBCerts\InstTargetCertificate.cer';
GO
CREATE ROUTE InstTargetRoute
WITH SERVICE_NAME = N'//TgtDB/2InstSample/TargetService',
     ADDRESS = N'TCP://MyTargetComputer:4022';
GO
USE msdb;
GO
CREATE ROUTE InstInitiatorRoute
WITH SERVICE_NAME = N'//InstDB/2InstSample/InitiatorService',
     ADDRESS = N'LOCAL';
GO
USE InstInitiatorDB;
GO
CREATE REMOTE SERVICE BINDING TargetBinding
      TO SERVICE N'//TgtDB/2InstSample/TargetService'
      WITH USER = TargetUser;
GO
