"""Storage: the bottom layer.

The catalog as typed SQLAlchemy models (``models``, ``types``) and its Alembic migrations
(``schema``); per-queue internal tables (``queue_tables``); prepared statements and the
write-behind buffer of the hot path (``statements``, ``pending``, ``rows``); engines and
the one place that knows SQLite from PostgreSQL (``engine``, ``backends``, ``waiting``,
``driver_errors``); and what a transaction works with (``catalog`` snapshot, ``state``,
``context``). It imports nothing of the layers above it.
"""
