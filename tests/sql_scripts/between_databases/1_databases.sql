-- Microsoft's tutorial "Completing a Conversation Between Databases" (spec 12.2),
-- written from the statements' documented syntax. Lesson 1: the databases.
USE master;
GO
CREATE DATABASE TargetDB;
GO
CREATE DATABASE InitiatorDB;
GO
ALTER DATABASE InitiatorDB SET TRUSTWORTHY ON;
GO
