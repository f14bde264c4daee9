-- Lesson 1, continued: the target's conversation objects
USE TargetDB;
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
CREATE QUEUE TargetQueue2DB;

CREATE SERVICE [//TgtDB/2DBSample/TargetService]
       ON QUEUE TargetQueue2DB
       ([//BothDB/2DBSample/SimpleContract]);
GO
