-- Lesson 3: delete the conversation objects
IF EXISTS (SELECT * FROM sys.services
           WHERE name =
           N'//AWDB/InternalAct/TargetService')
     DROP SERVICE
     [//AWDB/InternalAct/TargetService];

IF EXISTS (SELECT * FROM sys.service_queues
           WHERE name = N'TargetQueueIntAct')
     DROP QUEUE TargetQueueIntAct;

IF EXISTS (SELECT * FROM sys.services
           WHERE name =
           N'//AWDB/InternalAct/InitiatorService')
     DROP SERVICE
     [//AWDB/InternalAct/InitiatorService];

IF EXISTS (SELECT * FROM sys.service_queues
           WHERE name = N'InitiatorQueueIntAct')
     DROP QUEUE InitiatorQueueIntAct;

IF EXISTS (SELECT * FROM sys.service_contracts
           WHERE name =
           N'//AWDB/InternalAct/SampleContract')
     DROP CONTRACT
     [//AWDB/InternalAct/SampleContract];

IF EXISTS (SELECT * FROM sys.service_message_types
           WHERE name =
           N'//AWDB/InternalAct/RequestMessage')
     DROP MESSAGE TYPE
     [//AWDB/InternalAct/RequestMessage];

IF EXISTS (SELECT * FROM sys.service_message_types
           WHERE name =
           N'//AWDB/InternalAct/ReplyMessage')
     DROP MESSAGE TYPE
     [//AWDB/InternalAct/ReplyMessage];

IF EXISTS (SELECT * FROM sys.procedures
           WHERE name = N'TargetActivProc')
     DROP PROCEDURE TargetActivProc;
GO
