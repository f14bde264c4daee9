"""Service Broker T-SQL: run SQL Server scripts against a broker database."""
