"""The user's current utterance: detected (server VAD), buffered, and sealed by a commit.

docs/protocol.md §3.2, §4.2, §6.2. An utterance begins with ``speech_started`` (its user item
id is announced then), collects the speech-looking input at 16 kHz, and ends with the commit
fan-out, which stores the user item and hands the sealed audio on as a :class:`Turn`. A
commit of nothing but silence is the "empty commit" quirk of vLLM-Omni 0.30.0.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from duplexctl.protocol import ids
from duplexctl.server.engine.context import SessionContext
from duplexctl.server.engine.conversation import Conversation, user_item
from duplexctl.server.engine.playback import PlaybackLedger
from duplexctl.server.engine.turns import Turn
from duplexctl.server.vadgate import VadGate


class Utterance:
    """The speech being buffered, its announced item id, and the detector that finds it."""

    def __init__(
        self, ctx: SessionContext, conversation: Conversation, playback: PlaybackLedger
    ) -> None:
        self._ctx = ctx
        self._conversation = conversation
        self._playback = playback
        td = ctx.settings.turn_detection
        self.vad: VadGate | None = VadGate(td) if td else None
        self.samples: list[np.ndarray] = []
        self.item_id: str | None = None  # announced by speech_started
        self.stopped = False  # speech_stopped already went out (native lane VAD)
        self.silence_since_commit = False  # only silence arrived since the last commit

    def retune(self, turn_detection: dict[str, Any] | None) -> None:
        """A session.update changed turn_detection: a fresh detector (or none)."""
        self.vad = VadGate(turn_detection) if turn_detection else None

    @property
    def nbytes(self) -> int:
        return sum(int(chunk.size) * 4 for chunk in self.samples)

    def keep(self, samples: np.ndarray) -> None:
        self.samples.append(samples)

    def take_audio(self) -> np.ndarray | None:
        audio = np.concatenate(self.samples) if self.samples else None
        self.samples = []
        return audio

    def start(self, audio_start_ms: float) -> None:
        """``speech_started``: a new utterance and its user item id."""
        self.item_id = ids.user_item_id()
        self.stopped = False
        self._ctx.turn.observe("speech_started")
        self._ctx.ev(
            "input_audio_buffer.speech_started",
            audio_start_ms=int(audio_start_ms),
            item_id=self.item_id,
        )

    def start_at_hint(self, hints: dict[str, Any]) -> None:
        """Start at the client's ``audio_start_ms`` hint, else 0 (no server VAD)."""
        hint = hints.get("audio_start_ms")
        self.start(hint if hint is not None else 0)

    def stop(self, audio_end_ms: float) -> None:
        """``speech_stopped`` without a commit (model-native lane with server VAD)."""
        if self.item_id is None:
            return
        self._ctx.ev(
            "input_audio_buffer.speech_stopped",
            audio_end_ms=int(audio_end_ms),
            item_id=self.item_id,
        )
        self.stopped = True

    def drop(self) -> None:
        """Forget the utterance (clear, cancel, is_speech:false commit)."""
        self.samples = []
        self.item_id = None
        self.stopped = False
        if self.vad is not None:
            self.vad.reset()

    def commit(self, *, audio_end_ms: float, deferred: bool, response_create: bool) -> Turn:
        """The commit fan-out (§4.2) for the buffered utterance; returns the sealed turn."""
        ctx = self._ctx
        conversation = self._conversation
        item_id = self.item_id or ids.user_item_id()
        if self.item_id is not None and not self.stopped:
            ctx.ev(
                "input_audio_buffer.speech_stopped", audio_end_ms=int(audio_end_ms), item_id=item_id
            )
        previous = conversation.last_item_id
        item = user_item(item_id)
        conversation.store(item, previous)
        ctx.ev("conversation.item.added", previous_item_id=previous, item=copy.deepcopy(item))
        ctx.ev("conversation.item.created", previous_item_id=previous, item=copy.deepcopy(item))
        record: dict[str, Any] = {
            "type": "input.committed",
            "session_id": ctx.id,
            "turn_id": ctx.turn_id,
            "epoch": ctx.epoch,
            "history_len": len(conversation),
            "native_audio": True,
            "message": {
                "role": "user",
                "content": [
                    {"type": "audio_url", "audio_url": {"url": "native-duplex:input-audio"}}
                ],
            },
            "realtime_item_id": item_id,
        }
        if deferred:
            record["overlap_deferred"] = True
            record["response_create_deferred"] = response_create
        ctx.ev(
            "input_audio_buffer.committed", previous_item_id=previous, item_id=item_id, event=record
        )
        ctx.ev("conversation.item.done", previous_item_id=previous, item=copy.deepcopy(item))
        audio = self.take_audio()
        self.item_id = None
        self.stopped = False
        self.silence_since_commit = False
        conversation.last_user_item = item_id
        ctx.turn.observe("input_committed")
        if not deferred:
            self._playback.supersede_finished()
        if self.vad is not None:
            self.vad.reset()
        return Turn(item_id, audio)

    def commit_empty(self) -> None:
        """Silence-only commit: the 0.30.0 quirk reports the *previous* user item."""
        ctx = self._ctx
        conversation = self._conversation
        previous_user = conversation.last_user_item
        known = conversation.get(previous_user) if previous_user is not None else None
        if previous_user is not None and known is not None:
            item_id = previous_user
            previous = conversation.previous.get(item_id)
            item = copy.deepcopy(known)
        else:
            item_id = ids.user_item_id()
            previous = conversation.last_item_id
            item = user_item(item_id)
        record = {
            "type": "input.committed",
            "session_id": ctx.id,
            "turn_id": ctx.turn_id,
            "epoch": ctx.epoch,
            "empty": True,
            "is_speech": False,
            "no_response": True,
        }
        ctx.ev(
            "input_audio_buffer.committed", previous_item_id=previous, item_id=item_id, event=record
        )
        ctx.ev("conversation.item.done", previous_item_id=previous, item=item)
        ctx.listen("silence_or_noise")
        self.silence_since_commit = False
