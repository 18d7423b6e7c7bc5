"""What every part of one engine session shares: who it is, what was negotiated, the
counters that fence its output, its turn state, and the one way out (``emit``).

The parts (input lane, conversation, responses, playback ledger) each own their own state;
this object holds only what they must all read or advance, so that there is exactly one
epoch, one turn counter and one turn state per session (docs/protocol.md §2, §6.4).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Final

from duplexctl.protocol import ids
from duplexctl.protocol.errors import realtime_error
from duplexctl.server.behaviour import SessionBehaviour
from duplexctl.server.config import Fault, ServerConfig
from duplexctl.server.session_object import NegotiatedSettings

Emit = Callable[[dict[str, Any]], None]


class TurnState(StrEnum):
    """``turn_state`` in the session object and in ``turn.event`` (§4.3)."""

    IDLE = "idle"
    USER_SPEAKING = "user_speaking"
    USER_COMMITTED = "user_committed"
    ASSISTANT_GENERATING = "assistant_generating"
    ASSISTANT_PLAYING = "assistant_playing"
    BARGE_IN = "barge_in"


# What the engine observes -> the turn state it leads to.
OBSERVED: Final[dict[str, TurnState]] = {
    "speech_started": TurnState.USER_SPEAKING,
    "input_committed": TurnState.USER_COMMITTED,
    "response_started": TurnState.ASSISTANT_GENERATING,
    "response_done_unheard": TurnState.ASSISTANT_PLAYING,  # completed, audio not all acked
    "response_done_heard": TurnState.IDLE,
    "response_cancelled": TurnState.IDLE,
    "response_failed": TurnState.IDLE,
}
# Observations that move the turn only out of one state.
OBSERVED_FROM: Final[dict[tuple[str, TurnState], TurnState]] = {
    ("playback_released", TurnState.ASSISTANT_PLAYING): TurnState.IDLE,
}
# ``turn.signal`` event names a client may send (§3.4) -> the turn state they set; any other
# name leaves the state as it is (and is still answered by ``turn.event``).
SIGNALLED: Final[dict[str, TurnState]] = {
    "user_started": TurnState.USER_SPEAKING,
    "user_committed": TurnState.USER_COMMITTED,
    "assistant_started": TurnState.ASSISTANT_GENERATING,
    "assistant_done": TurnState.ASSISTANT_PLAYING,
    "playback_ack": TurnState.IDLE,
    "timeout": TurnState.IDLE,
    "close": TurnState.IDLE,
    "barge_in": TurnState.BARGE_IN,
}


class TurnMachine:
    """The session's turn state, moved only through the tables above."""

    def __init__(self) -> None:
        self.state = TurnState.IDLE

    def observe(self, happening: str) -> None:
        after = OBSERVED_FROM.get((happening, self.state)) or OBSERVED.get(happening)
        if after is not None:
            self.state = after

    def signal(self, name: str) -> None:
        self.state = SIGNALLED.get(name, self.state)


class SessionContext:
    """Identity, negotiated settings, epoch/turn counters, turn state, and the output."""

    def __init__(
        self,
        *,
        session_id: str,
        config: ServerConfig,
        settings: NegotiatedSettings,
        capabilities: dict[str, Any],
        emit: Emit,
    ) -> None:
        self.id = session_id
        self.config = config
        self.settings = settings
        self.capabilities = capabilities
        self.epoch = 0  # interruption fence (§2): advanced by every cut
        self.turn_id = 0  # answered model turns
        self.turn = TurnMachine()
        self.closed = False
        self.output_started = False  # the first reply audio went out (voice is fixed now)
        self.last_activity = time.monotonic()
        self.behaviour = SessionBehaviour(config.behaviour, seed=config.seed, session_id=session_id)
        self._emit = emit

    @property
    def native(self) -> bool:
        """The model-native lane (``extra_body.auto_response``, §6.1)."""
        return self.settings.auto_response

    def fault(self, name: str) -> Fault | None:
        return self.config.fault(name)

    def disconnect(self) -> None:
        """The session's last event went out: drop the transport's ``emit``. The transport
        holds this session and ``emit`` holds the transport's session, a reference cycle;
        cutting it lets both be freed as soon as the transport lets go, without waiting for
        the cyclic collector (which journals and audio buffers do not prompt)."""
        self._emit = _discard

    def ev(self, etype: str, **fields: Any) -> None:
        """Emit one server event (a fresh ``event_id``; the transport adds the seq)."""
        event: dict[str, Any] = {"type": etype, "event_id": ids.server_event_id()}
        event.update(fields)
        self._emit(event)

    def err(
        self, code: str, message: str, client_event_id: str | None = None, **extra: Any
    ) -> None:
        """Emit a sequenced error (one raised inside the session, §2)."""
        self._emit(
            realtime_error(code, message, client_event_id=client_event_id, extra=extra or None)
        )

    def listen(self, reason: str, **meta: Any) -> None:
        """A ``response.listen`` beat: the model listens (silence, or a native unit)."""
        metadata = {
            "type": "response.listen",
            "session_id": self.id,
            "epoch": self.epoch,
            "reason": reason,
            **meta,
        }
        self.ev(
            "response.listen",
            session_id=self.id,
            epoch=self.epoch,
            response={"object": "realtime.response", "status": "listening", "metadata": metadata},
        )


def _discard(event: dict[str, Any]) -> None:
    """Where a finished session's events go: nowhere (none is emitted after the last)."""
