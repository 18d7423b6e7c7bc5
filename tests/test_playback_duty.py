"""PlaybackDuty alone, without sockets: what a client owes the server as a reply plays.

The duty reads a real ClientSession fed with server frames and a real PlaybackClock driven
with hand-made times, so every decision of docs/protocol.md §6.5 is checked exactly: the
cadence (0 at the first delta, every 200 ms played, a final exact one rounded up), the heard
position after an interruption (ack while the reply runs, truncate once it is done), the
capabilities rule, the item id, the journal acks, and what happens when a send fails.
"""

from __future__ import annotations

import base64
from typing import Any

from duplexctl.audio.playback import PlaybackClock
from duplexctl.protocol.client_state import ClientSession
from duplexctl.protocol.playback_duty import NOTHING, EventAckDuty, PlaybackDuty

SID = "duplex-" + "b" * 32
RID = f"resp-{SID}-0-00000001"


class Server:
    """Feeds a ClientSession the frames a server would send, numbered."""

    def __init__(self, caps: dict[str, Any] | None = None) -> None:
        self.cs = ClientSession()
        self.seq = 0
        self.cs.on_frame(
            {
                "type": "session.created",
                "session": {"id": SID, "capabilities": caps or {}},
                "resume_token": "t",
            },
            0,
        )

    def send(self, frame: dict[str, Any], t_s: float) -> None:
        self.seq += 1
        self.cs.on_frame({**frame, "server_event_seq": self.seq}, int(t_s * 1e9))

    def audio(self, ms: float, t_s: float, rid: str = RID) -> None:
        samples = int(24 * ms)
        self.send(
            {
                "type": "response.output_audio.delta",
                "response_id": rid,
                "delta": base64.b64encode(b"\0\0" * samples).decode(),
                "format": "pcm16",
                "sample_rate_hz": 24000,
            },
            t_s,
        )

    def done(self, t_s: float, status: str = "completed", rid: str = RID) -> None:
        self.send({"type": "response.done", "response": {"id": rid, "status": status}}, t_s)


def shape(events: Any) -> list[tuple[Any, ...]]:
    out = []
    for e in events:
        if e["type"] == "playback.ack":
            out.append(("ack", e["response_id"], e["item_id"], e["played_ms"], e["committed_ms"]))
        elif e["type"] == "conversation.item.truncate":
            out.append(("truncate", e["item_id"], e["audio_end_ms"]))
        else:
            out.append((e["type"],))
    return out


def playing_reply(caps: dict[str, Any] | None = None) -> tuple[Server, PlaybackClock, PlaybackDuty]:
    """A 600 ms reply received at t=10 s (three 200 ms chunks), prebuffer 0."""
    server = Server(caps)
    clock = PlaybackClock(0.0)
    duty = PlaybackDuty(server.cs, event_ack_every_s=None)
    server.send({"type": "response.created", "response": {"id": RID}}, 10.0)
    for i in range(3):
        server.audio(200, 10.0 + i * 0.01)
        clock.receive(10.0 + i * 0.01, 200)
    duty.playing(RID, clock)
    return server, clock, duty


def test_cadence_first_zero_every_200_ms_played_then_final_exact() -> None:
    server, _clock, duty = playing_reply()
    item = f"item_{RID}"
    assert shape(duty.due(10.0)) == [("ack", RID, item, 0, 0)]
    assert duty.due(10.1) == NOTHING  # only 100 ms played
    assert shape(duty.due(10.25)) == [("ack", RID, item, 250, 250)]
    assert duty.due(10.3) == NOTHING
    server.done(10.31)
    assert shape(duty.due(10.46)) == [("ack", RID, item, 460, 460)]
    # everything played at 10.6: the final ack is the whole reply, and the reply is over
    assert shape(duty.due(10.6)) == [("ack", RID, item, 600, 600)]
    assert duty.played_out == [RID]
    assert duty.due(11.0) == NOTHING and not duty.is_live(RID)


def test_final_ack_rounds_up_to_what_the_server_sent() -> None:
    server = Server()
    clock = PlaybackClock(0.0)
    duty = PlaybackDuty(server.cs, event_ack_every_s=None)
    server.send(
        {
            "type": "response.output_audio.delta",
            "response_id": RID,
            "delta": base64.b64encode(b"\0\0" * 24).decode(),
            "metadata": {"audio_duration_ms": 200.4},
        },
        1.0,
    )
    clock.receive(1.0, 200.4)
    duty.playing(RID, clock)
    duty.due(1.0)
    server.done(1.01)
    assert shape(duty.due(2.0))[-1][3] == 201  # ceil: committed >= sent releases the record


def test_interruption_while_running_acks_heard_then_truncates_after_done() -> None:
    server, clock, duty = playing_reply()
    duty.due(10.0)
    heard = clock.flush(10.125)
    duty.interrupted(RID, heard)
    assert shape(duty.due(10.126)) == [("ack", RID, f"item_{RID}", 125, 125)]
    assert duty.due(10.2) == NOTHING  # no periodic acks after a flush, no truncate yet
    server.done(10.13, status="cancelled")
    assert shape(duty.due(10.14)) == [("truncate", f"item_{RID}", 125)]
    assert duty.due(10.2) == NOTHING and duty.played_out == []


def test_interruption_after_done_truncates_only() -> None:
    server, clock, duty = playing_reply()
    duty.due(10.0)
    server.done(10.0625, status="cancelled")
    duty.interrupted(RID, clock.flush(10.0625))
    assert shape(duty.due(10.07)) == [("truncate", f"item_{RID}", 62)]


def test_an_interruption_after_the_reply_played_out_owes_nothing() -> None:
    server, _clock, duty = playing_reply()
    duty.due(10.0)
    server.done(10.1)
    duty.due(10.7)
    duty.interrupted(RID, 600.0)
    assert duty.due(10.8) == NOTHING


def test_capabilities_false_mean_not_owed() -> None:
    server, clock, duty = playing_reply(
        {"supports_playback_ack": False, "supports_audio_truncate": False}
    )
    assert duty.due(10.0) == NOTHING
    assert duty.due(10.3) == NOTHING
    duty.interrupted(RID, clock.flush(10.3))
    server.done(10.31, status="cancelled")
    assert duty.due(10.4) == NOTHING
    # acks only off: the truncate is still owed
    server, clock, duty = playing_reply({"supports_playback_ack": False})
    duty.interrupted(RID, clock.flush(10.25))
    server.done(10.26, status="cancelled")
    assert shape(duty.due(10.3)) == [("truncate", f"item_{RID}", 250)]


def test_played_out_is_reported_even_when_acks_are_not_owed() -> None:
    server, _clock, duty = playing_reply({"supports_playback_ack": False})
    server.done(10.05)
    assert duty.due(10.7) == NOTHING and duty.played_out == [RID]


def test_unsent_acks_are_owed_again() -> None:
    server, _clock, duty = playing_reply()
    first = duty.due(10.0)
    duty.unsent(first[0])
    assert shape(duty.due(10.01)) == [("ack", RID, f"item_{RID}", 0, 0)]
    periodic = duty.due(10.25)
    duty.unsent(periodic[0])
    assert shape(duty.due(10.375))[0][3] == 375  # again, from where the server last heard
    server.done(10.3)
    final = duty.due(10.7)
    duty.unsent(final[0])
    assert duty.played_out == [RID]
    assert shape(duty.due(10.8)) == [("ack", RID, f"item_{RID}", 600, 600)]
    assert duty.played_out == [RID]  # told once


def test_event_acks_by_interval_and_batch_and_unsent() -> None:
    server = Server()
    acks = EventAckDuty(server.cs, every_s=0.25, batch=3)
    assert acks.due(0.0) is None  # nothing sequenced yet (checked: next check at 0.25)
    server.send({"type": "rate_limits.updated"}, 0.01)
    assert acks.due(0.1) is None  # within the interval, below the batch
    event = acks.due(0.25)
    assert event is not None and event["server_event_seq"] == 1
    for t in (0.26, 0.27, 0.28):
        server.send({"type": "rate_limits.updated"}, t)
    event = acks.due(0.29)  # three waiting: the batch, within the interval
    assert event is not None and event["server_event_seq"] == 4
    acks.unsent()  # it never left: owed again
    assert server.cs.acked_seq == 1
    event = acks.due(0.6)
    assert event is not None and event["server_event_seq"] == 4
    assert server.cs.acked_seq == 4


def test_the_duty_sends_event_acks_after_the_playback_events() -> None:
    server, clock, _ = playing_reply()
    duty = PlaybackDuty(server.cs, event_ack_every_s=0.25, event_ack_batch=None)
    duty.playing(RID, clock)
    assert shape(duty.due(10.0)) == [
        ("ack", RID, f"item_{RID}", 0, 0),
        ("session.event_ack",),
    ]
