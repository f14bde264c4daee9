"""Benchmarks of servicebroker against persist-queue, huey, litequeue and raw sqlite3.

Run ``python bench/run.py`` (see docs/benchmarks.md). Everything here measures through
the public API only and uses real SQLite files in fresh temporary directories.
"""
