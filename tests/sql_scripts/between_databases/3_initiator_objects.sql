-- Lesson 1, continued: the initiator's conversation objects
USE InitiatorDB;
GO
CREATE MESSAGE TYPE [//BothDB/2DBSample/RequestMessage]
       VALIDATION = WELL_FORMED_XML;
CREATE MESSAGE TYPE [//BothDB/2DBSample/ReplyMessage]
       VALIDATION = WELL_FORMED_XML;
GO
CREATE CONTRACT [//BothDB/2DBSample/SimpleContract]
      ([//BothDB/2DBSample/RequestMessage]
         SENT BY INITIATOR,
       [//BothDB/2DBSample/ReplyMessage]
         SENT BY TARGET
      );
GO
CREATE QUEUE InitiatorQueue2DB;

CREATE SERVICE [//InitDB/2DBSample/InitiatorService]
       ON QUEUE InitiatorQueue2DB;
GO
