"""Settings of the reference server, one dataclass shared by the CLI, the transport, the
session engine and the simulated model.

Defaults follow vLLM-Omni 0.30.0's ``DuplexSessionRuntimeConfig`` (docs/protocol.md §6.6) except
``max_sessions`` (4, MiniCPM-o's deploy profile) and the model-native lane's 1000 ms unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from duplexctl.protocol.names import Dialect
from duplexctl.server.behaviour import Behaviour
from duplexctl.units import MiB


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault or known server bug (``--fault NAME[=VALUE]``)."""

    name: str
    value: float | None = None


KNOWN_FAULTS = {
    # a session whose session.created could not be delivered stays in disconnect grace
    # (holding its admission slot) instead of being closed at once
    "leak-undelivered-created": False,
    # a response created for an append that then fails never gets its response.done
    "orphan-response": False,
    # after a barge-in the turn gate stays closed: the next utterance is committed but
    # never answered
    "stuck-gate": False,
    # drop the connection (no close frame) after N server events on it
    "drop-after": True,
    # add this many ms to every model step (time to first audio and chunk period)
    "latency-ms": True,
    # every N-th append fails inside the session (runtime_append_failed)
    "fail-append-every": True,
}


@dataclass(slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    dialect: Dialect = Dialect.G2
    served_model: str = "duplexctl/simulated-duplex"
    # lane/model personality: "turn" = Qwen3-Omni-like turn-based plugin (refuses
    # auto_response); "native" = MiniCPM-o-like model-native plugin (accepts both lanes);
    # "frame" = Nemotron VoiceChat-like: frame-locked 80 ms, auto_response only, tool calls
    model_profile: Literal["native", "turn", "frame"] = "native"

    # admission and lifecycle (docs/protocol.md §6.6-6.8)
    max_sessions: int = 4
    disconnect_grace_s: float = 30.0
    idle_ttl_s: float | None = 300.0
    reaper_interval_s: float = 1.0
    resume_replay_ttl_s: float = 60.0
    resume_replay_max_bytes: int = 8 * MiB
    config_timeout_s: float = 10.0
    ws_idle_timeout_s: float = 300.0
    max_event_bytes: int = 15 * MiB  # event_too_large above this (socket stays open)
    ws_max_size: int = 16 * MiB  # websocket layer: close 1009 above this
    max_pending_input_bytes: int = 16 * MiB  # counted as float32 at 16 kHz
    max_pending_turns: int = 4
    max_send_backlog_bytes: int = 32 * MiB  # a connection not reading is dropped above this
    # items created by conversation.item.create, encoded (input_backpressure above this)
    max_history_bytes: int = 16 * MiB

    # simulated model (docs/architecture.md: honest about time)
    voice: Literal["tone", "echo"] = "tone"
    reply_seconds: float = 2.0
    ttfa_ms: float = 300.0
    ttfa_jitter_ms: float = 0.0
    chunk_ms: int = 1000  # output audio chunk (model unit); 80 for PersonaPlex-like
    output_rate: int = 24000
    realtime_factor: float = 1.0  # 1 = deltas paced in real time, 0 = as fast as computed
    gpu_slots: int = 0  # 0 = unlimited (no contention)
    unit_compute_ms: float = 0.0  # GPU time one output unit occupies a slot
    silence_units: int = 1  # native lane: silent units after speech before answering
    # frame profile (docs/protocol.md §13; server/engine/frame_lane.py)
    eou_ms: float = 640.0  # silence after the user's speech before the model takes its turn
    barge_in_ms: float = 240.0  # speech over the answer before the model ends its turn
    tool_call: str | None = None  # call this declared tool on a session's first turn
    tool_args: str = '{"city": "Paris"}'  # the call's arguments (a JSON object)
    seed: int | None = None

    faults: list[Fault] = field(default_factory=list)
    # conversational behaviours with known ground truth (--behaviour, server/behaviour.py)
    behaviour: Behaviour = field(default_factory=Behaviour)

    def fault(self, name: str) -> Fault | None:
        """The injected fault called ``name``, if it is on."""
        for fault in self.faults:
            if fault.name == name:
                return fault
        return None


def parse_fault(spec: str) -> Fault:
    """Parse ``NAME`` or ``NAME=VALUE``; raises ValueError naming the problem."""
    name, _, value = spec.partition("=")
    name = name.strip()
    if name not in KNOWN_FAULTS:
        known = ", ".join(sorted(KNOWN_FAULTS))
        raise ValueError(f"unknown fault {name!r} (known: {known})")
    takes_value = KNOWN_FAULTS[name]
    if takes_value and not value:
        raise ValueError(f"fault {name!r} needs a value: --fault {name}=N")
    if not takes_value and value:
        raise ValueError(f"fault {name!r} takes no value")
    try:
        return Fault(name, float(value) if value else None)
    except ValueError:
        raise ValueError(f"fault {name!r}: {value!r} is not a number") from None
