"""The wire protocol, free of I/O.

Everything here is pure: event names and their dialect spellings, error envelopes, ids and
JSON encoding. Both the reference server and the client core build on it, so the two sides
cannot disagree about spelling, and it is tested without sockets.
"""
