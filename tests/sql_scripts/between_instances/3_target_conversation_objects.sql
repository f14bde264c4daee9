-- Lesson 3, on the target instance: trust the initiator instance's endpoint, then what
-- the target database knows of the initiator: a user owning the initiator's certificate,
-- a route to the initiator instance, and SEND on the target service for that user.
USE master;
GO
CREATE LOGIN InstInitiatorLogin
       WITH PASSWORD = N'<EnterStrongPassword6Here>';
CREATE USER InstInitiatorLoginUser FOR LOGIN InstInitiatorLogin;
CREATE CERTIFICATE InstInitiatorEndpointCertificate
     AUTHORIZATION InstInitiatorLoginUser
     FROM FILE = N'C:\storedcerts\$ampleSSBCerts\InstInitiatorEndpointCertificate.cer';
GRANT CONNECT ON ENDPOINT::InstTargetEndpoint TO InstInitiatorLogin;
GO
USE InstTargetDB
GO
CREATE USER InitiatorUser WITHOUT LOGIN;

CREATE CERTIFICATE InstInitiatorCertificate
     AUTHORIZATION InitiatorUser
     FROM FILE = N'C:\storedcerts\$ampleSSBCerts\InstInitiatorCertificate.cer';
GO
CREATE ROUTE InstInitiatorRoute
WITH SERVICE_NAME = N'//InstDB/2InstSample/InitiatorService',
     ADDRESS = N'TCP://MyInitiatorComputer:4022';
GO
USE msdb;
GO
CREATE ROUTE InstTargetRoute
WITH SERVICE_NAME = N'//TgtDB/2InstSample/TargetService',
     ADDRESS = N'LOCAL';
GO
USE InstTargetDB;
GO
GRANT SEND
      ON SERVICE::[//TgtDB/2InstSample/TargetService]
      TO InitiatorUser;
GO
