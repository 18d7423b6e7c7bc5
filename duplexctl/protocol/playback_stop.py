"""Which server signals stop the client's playback: one rule for replay, load and talk.

A duplex server stops *generating* at an interruption, but audio it already delivered is in
the client's buffer, and "audio already delivered must be stopped by the client"
(docs/protocol.md §6.3). Two server signals say the answer being played was interrupted:

* ``overlap.decision`` with ``action: barge_in`` — the server heard the user over the answer.
  Under ``ack_only`` the answer's response may already be done while its audio still plays,
  so the signal stops whatever is still playing, not one response;
* the cancelled ``response.done`` — that response's playback stops.

In the recorded vLLM-Omni 0.30.0 barge-in (tests/fixtures/wire/server_vad_barge_in.jsonl) the
decision comes first and the cancelled ``response.done`` 0.1 ms after it; a server may send
either alone (a cancel without a decision, a decision whose done is late). The first to
arrive stops playback; the second finds it stopped. ``talk`` used to stop at both and
``replay`` and ``load`` only at the second: one function now decides for all three, and
tests/test_playback_duty_shells.py holds them to the same frames.
"""

from __future__ import annotations

from duplexctl.protocol.client_state import Happening, OverlapDecision, ResponseDone


def stops_playback(h: Happening) -> bool:
    """Whether ``h`` is a server stop signal: a barge-in decision (it stops whatever still
    plays) or a cancelled ``response.done`` (it stops its response)."""
    if isinstance(h, OverlapDecision):
        return h.action == "barge_in"
    return isinstance(h, ResponseDone) and h.status == "cancelled"
