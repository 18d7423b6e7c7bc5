"""Identifier formats of the G2 protocol (docs/protocol.md §2).

Kept in one place so that the server mints ids of exactly the shape real servers use and the
client can recognise them (for example the assistant item of a response is always
``item_<response_id>``).
"""

from __future__ import annotations

import itertools
import os
import secrets
import uuid


def _hex32() -> str:
    return uuid.uuid4().hex


def session_id() -> str:
    """``duplex-<32 hex>``: always allocated by the server in G2."""
    return f"duplex-{_hex32()}"


def server_event_id() -> str:
    """``event_<32 hex>``, fresh per server event (replays keep the original)."""
    return f"event_{_hex32()}"


# Client event ids: a random 64-bit prefix per process plus a 64-bit counter, so an id costs
# a counter step and one format instead of a uuid4 (os.urandom, a syscall) per send; a load
# process stamps thousands per second. Same shape as before (32 hex digits). The prefix is
# drawn again in a forked child, so worker processes never share a sequence.
_client_prefix = ""
_U64 = 0xFFFFFFFFFFFFFFFF
_client_counter: itertools.count[int] = itertools.count()


def _reseed_client_ids() -> None:
    global _client_prefix, _client_counter
    _client_prefix = secrets.token_hex(8)
    _client_counter = itertools.count()


_reseed_client_ids()
os.register_at_fork(after_in_child=_reseed_client_ids)


def client_event_id() -> str:
    """``evt_<32 hex>``, fresh and unique per call: what the first-party client stamps on
    every send. Ids only correlate the server's errors with the event that caused them, so
    they need uniqueness, not unpredictability (the server's own ids stay uuid4)."""
    # bytes.hex(), not a ``:016x`` format spec: the generic formatter costs twice as much
    return "evt_" + _client_prefix + (next(_client_counter) & _U64).to_bytes(8, "big").hex()


def user_item_id() -> str:
    """``item_<32 hex>`` for user items created by commits."""
    return f"item_{_hex32()}"


def response_id(session: str, epoch: int) -> str:
    """``resp-<session_id>-<epoch>-<8 hex>``: the epoch is readable from the id."""
    return f"resp-{session}-{epoch}-{secrets.token_hex(4)}"


def tool_response_id() -> str:
    """``resp_<32 hex>``: the synthetic response that carries a tool call (§13.4)."""
    return f"resp_{_hex32()}"


def call_id() -> str:
    """``call_<32 hex>``: a tool call's id, which its ``function_call_output`` names."""
    return f"call_{_hex32()}"


def assistant_item_id(response: str) -> str:
    """The assistant item of a response is always ``item_<response_id>``."""
    return f"item_{response}"


def resume_token() -> str:
    """Opaque URL-safe token, 43 characters like the real server's."""
    return secrets.token_urlsafe(32)


def epoch_of_response_id(response: str) -> int | None:
    """Read the epoch out of a G2 response id, or None when the id has another shape."""
    parts = response.rsplit("-", 2)
    if len(parts) != 3 or not parts[0].startswith("resp-"):
        return None
    try:
        return int(parts[1])
    except ValueError:
        return None
