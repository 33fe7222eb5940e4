-- Run once by the postgres image when its volume is new: the example shop's own database,
-- next to the dispatcher's (POSTGRES_DB). A destination never shares the dispatcher's tables.
CREATE DATABASE shop;
