"""Conversations: Service Broker's statements inside one database.

Dialogs, SEND, RECEIVE, delivery, conversation endpoints and groups, system messages,
body validation, broker priorities, poison messages and the timers and lifetimes that
fall due. Each function works on one transaction (``storage.context.TxContext``) and
imports only ``storage`` and the leaf modules (``broker.errors``, ``broker.arguments``,
``broker.events``).
"""
