-- Microsoft's tutorial "Completing a Conversation Between Instances" (spec 12.3), written
-- from the statements' documented syntax. Run each lesson on the instance it names; the
-- certificates are exchanged as files through C:\storedcerts\$ampleSSBCerts\, and
-- MyTargetComputer / MyInitiatorComputer are the two instances' hosts (replace them, and
-- the ports, with yours).
--
-- The endpoints authenticate with certificates (transport security): there is no Windows
-- authentication here (docs/sql.md). Each instance makes a certificate for its endpoint
-- in master and trusts the other's through a login granted CONNECT on its endpoint.
--
-- Lesson 1, on the target instance: the endpoint, the target database, its master key,
-- user and certificate, and the target's conversation objects.
USE master;
GO
CREATE MASTER KEY
       ENCRYPTION BY PASSWORD = N'<EnterStrongPassword1Here>';
GO
CREATE CERTIFICATE InstTargetEndpointCertificate
       WITH SUBJECT = N'Target instance endpoint';
GO
CREATE ENDPOINT InstTargetEndpoint
STATE = STARTED
AS TCP ( LISTENER_PORT = 4022 )
FOR SERVICE_BROKER (AUTHENTICATION = CERTIFICATE InstTargetEndpointCertificate,
                    ENCRYPTION = REQUIRED);
GO
BACKUP CERTIFICATE InstTargetEndpointCertificate
  TO FILE = N'C:\storedcerts\$ampleSSBCerts\InstTargetEndpointCertificate.cer';
GO
CREATE DATABASE InstTargetDB;
GO
USE InstTargetDB;
GO
CREATE MASTER KEY
       ENCRYPTION BY PASSWORD = N'<EnterStrongPassword2Here>';
GO
CREATE USER TargetUser WITHOUT LOGIN;
GO
CREATE CERTIFICATE InstTargetCertificate
     AUTHORIZATION TargetUser
     WITH SUBJECT = 'Target Certificate',
          EXPIRY_DATE = N'12/31/2040';

BACKUP CERTIFICATE InstTargetCertificate
  TO FILE = N'C:\storedcerts\$ampleSSBCerts\InstTargetCertificate.cer';
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
CREATE QUEUE InstTargetQueue;

CREATE SERVICE [//TgtDB/2InstSample/TargetService]
       AUTHORIZATION TargetUser
       ON QUEUE InstTargetQueue
       ([//BothDB/2InstSample/SimpleContract]);
GO
