"""DDL: CREATE / ALTER / DROP of the broker's objects and ALTER DATABASE's broker options.

Each statement runs in the caller's transaction, checks before it writes, and ends with
``ctx.catalog_changed()``. It builds on ``conversations`` (DDL can deliver held messages
or end open dialogs) and ``storage``.
"""
