"""Routing: which database or instance a conversation's messages go to (spec 8).

Route addresses (``addresses``) and the matching rules (``matching``): pure functions of
a routing table and a directory of the reachable databases. It sits between storage and
conversations: a SEND asks it whether its target is in the sender's own database.
"""
