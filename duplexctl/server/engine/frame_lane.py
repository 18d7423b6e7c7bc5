"""The frame-locked lane: a Nemotron VoiceChat-like model (docs/protocol.md §13), with tool
calls at a known truth.

What vLLM-Omni 0.30.0 does on this lane, reproduced so that duplexctl can be tested against
it offline (``serve --model-profile frame``):

* input is cut into **80 ms frames** (1 280 samples at 16 kHz) and the model takes **one
  step per frame**; an append longer than a frame is refused (sequenced ``bad_event``
  "… must contain at most 1280 samples"), ``pcm_f32le`` at another rate than 16 kHz too;
* every frame yields **one 80 ms output packet** (22 050 Hz pcm16), ``ttfa_ms`` after the
  frame, the model's voice or silence, for the whole session; a response opens on the first
  packet after the previous ``response.done`` (``response.listen`` on the frames no response
  is open for), and ends with the model's EOS, once its audio is sent;
* the text channel runs ahead of the audio: one transcript token per frame, at the frame;
* the model hears the user out: after speech, ``eou_ms`` of silence and it takes its turn —
  it answers, or (``tool_call`` NAME, once per session, when the session declared a tool of
  that name) calls the tool: the call's JSON goes out one token per frame on the function
  channel and becomes the synthetic ``resp_…`` response of §13.4; the result the client
  sends (``function_call_output``) is read one token per frame before the answer starts;
* speech over its answer for ``barge_in_ms`` makes the model end its turn (EOS: a
  ``completed`` response with the transcript cut) and the interruption is the next turn;
  ``response.cancel`` is a reset: a new epoch, the conversation forgotten — a tool result
  the model was reading included; one it had not taken yet (sent since its last frame) is
  taken by the new request, as 0.30.0 keeps it in the session until the model takes it.

Token counts are the reference server's own, fixed so the timing is a known truth: a JSON
string or a tool result costs one frame per two characters (:func:`tokens`).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from duplexctl.audio import pcm
from duplexctl.protocol import ids, names
from duplexctl.server.engine.context import SessionContext
from duplexctl.server.engine.conversation import Conversation
from duplexctl.server.engine.records import Response
from duplexctl.server.engine.responses import Responses, part_ids
from duplexctl.server.engine.utterance import Utterance
from duplexctl.server.model import reply_text, tone

FRAME_MS: Final = 80
FRAME_SAMPLES: Final = 1280  # at 16 kHz
OUTPUT_RATE: Final = 22050  # the codec's rate, whatever the session asked for
PACKET_SAMPLES: Final = OUTPUT_RATE * FRAME_MS // 1000  # 1764
MAX_PENDING_RESULTS: Final = 8
#: vLLM-Omni 0.30.0's codes on this lane (its Nemotron plugin's own names)
MODE_CODE: Final = "unsupported_nemotron_duplex_mode"
OUTPUT_CODE: Final = "invalid_function_call_output"
BACKLOG_CODE: Final = "function_response_backlog"


def tokens(text: str) -> int:
    """Function-channel frames ``text`` takes: one per two characters (see the docstring)."""
    return max(1, math.ceil(len(text) / 2))


def words(text: str) -> list[str]:
    """The text channel's tokens: one word (with its leading space) per frame."""
    return re.findall(r"\s*\S+", text)


@dataclass(slots=True)
class Call:
    """A tool call the model made and what became of it."""

    call_id: str
    item_id: str
    name: str
    arguments: str
    answered: bool = False


@dataclass(slots=True)
class Model:
    """The simulated model's state between frames (reset by a new epoch)."""

    epoch: int = 0
    mode: str = "listen"  # listen | call | await_result | speak
    heard_speech: bool = False
    silent_frames: int = 0
    overlap_frames: int = 0
    reply_words: list[str] = field(default_factory=list)
    reply_audio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    reply_frames: int = 0
    reply_frame: int = 0  # 0: not started (the next frame is the BOS frame)
    call_frames: int = 0  # function-channel frames still to go before the call is out
    call: tuple[str, str] | None = None  # (name, arguments) being emitted
    result_frames: int = 0  # tool-result frames still to be read
    results: list[str] = field(default_factory=list)  # results read, for the answer
    answer_next: bool = False  # the answer starts on the next frame


class FrameLane:
    """The frame-locked lane of one session (see the module docstring)."""

    def __init__(
        self,
        ctx: SessionContext,
        *,
        utterance: Utterance,
        responses: Responses,
        conversation: Conversation,
    ) -> None:
        self._ctx = ctx
        self._utterance = utterance
        self._responses = responses
        self._conversation = conversation
        self._buffer = np.zeros(0, dtype=np.float32)
        self._model = Model()
        self._announced_speech = False
        self._called = False  # the known-truth tool call happens once per session
        self._calls: dict[str, Call] = {}
        # results sent and not yet taken by the model (taken at its next frame): they live in
        # the session, so a cancel before that hands them to the new request (§13.3)
        self._queued: list[str] = []
        self._turn = 0  # answers given (the reply text names it)
        self._last_packet = time.monotonic()
        self._packets = 0  # output packets this session's frames made (sent or dropped)
        drop = ctx.config.fault("drop-output-frame-every")
        self._drop_every = int(drop.value) if drop is not None and drop.value else 0
        cfg = ctx.config
        self._eou_frames = max(1, math.ceil(cfg.eou_ms / FRAME_MS))
        self._barge_frames = max(1, math.ceil(cfg.barge_in_ms / FRAME_MS))

    # --- input ----------------------------------------------------------------------------------

    def refusal(self, fmt: str, rate: int, samples: int) -> str | None:
        """Why an append of ``samples`` samples at ``rate`` in ``fmt`` is refused, or None."""
        if fmt == "pcm_f32le" and rate != 16000:
            return "Duplex frame-locked audio sample_rate_hz must be 16000"
        if samples * 16000 / rate > FRAME_SAMPLES:
            return f"Frame-locked Realtime append must contain at most {FRAME_SAMPLES} samples"
        return None

    def append(self, raw: np.ndarray, samples: np.ndarray) -> None:
        """Buffer one append (at 16 kHz); every completed frame is one model step."""
        ctx = self._ctx
        speech = pcm.rms(raw) >= ctx.settings.overlap_silence_rms
        if speech and not self._announced_speech:
            self._announced_speech = True  # once, at the first speech-like append (§13.2)
            self._utterance.item_id = self._utterance.item_id or ids.user_item_id()
            ctx.ev(
                "input_audio_buffer.speech_started",
                audio_start_ms=0,
                item_id=self._utterance.item_id,
            )
        if speech:
            self._utterance.keep(samples)
        self._buffer = np.concatenate([self._buffer, samples.astype(np.float32)])
        while self._buffer.size >= FRAME_SAMPLES:
            frame, self._buffer = self._buffer[:FRAME_SAMPLES], self._buffer[FRAME_SAMPLES:]
            self._step(frame, final=False)

    def commit(self) -> None:
        """``input_audio_buffer.commit``: a pending partial frame is padded into a final one
        (the model takes its turn on it); with no partial frame pending it makes no frame, as
        vLLM-Omni 0.30's frame buffer does (``prepare_commit``: no payload)."""
        if not self._buffer.size:
            return
        pad = (-self._buffer.size) % FRAME_SAMPLES or FRAME_SAMPLES
        frame = np.concatenate([self._buffer, np.zeros(pad, dtype=np.float32)])[:FRAME_SAMPLES]
        self._buffer = np.zeros(0, dtype=np.float32)
        self._step(frame, final=True)

    # --- the model, one frame at a time ---------------------------------------------------------

    def _step(self, frame: np.ndarray, *, final: bool) -> None:
        ctx = self._ctx
        m = self._model
        if m.epoch != ctx.epoch:  # a cancel: a new request from the system prompt (§13.3)
            self._model = m = Model(epoch=ctx.epoch)
        for result in self._queued:  # the model takes the results sent since its last frame
            m.results.append(result)
            m.result_frames += tokens(f"<TOOL_RESPONSE>[{result}]</TOOL_RESPONSE>")
            m.mode = "await_result"
        self._queued.clear()
        speech = pcm.rms(frame) >= ctx.settings.overlap_silence_rms
        if self._responses.active is None:
            ctx.listen("model_listen", model_listen=True)
        packet: np.ndarray | None = None
        eos = False
        if m.result_frames:
            m.result_frames -= 1
            if not m.result_frames:
                m.answer_next = True  # the answer starts on the next frame
        elif m.answer_next:
            m.answer_next = False
            self._plan_answer(m)
            packet = self._speak(m, speech)
        elif m.mode == "speak":
            packet, eos = self._speak_or_stop(m, speech, frame)
        elif m.mode == "call":
            m.call_frames -= 1
            if not m.call_frames:
                m.mode = "await_result"
                self._emit_call(m)
        else:
            self._listen(m, speech, final)
            if m.mode == "speak":
                packet = self._speak(m, speech)
        self._schedule_packet(packet, eos)

    def _listen(self, m: Model, speech: bool, final: bool) -> None:
        if speech:
            m.mode = "listen"
            m.heard_speech, m.silent_frames = True, 0
        elif m.heard_speech:
            m.silent_frames += 1
        if not m.heard_speech or not (final or m.silent_frames >= self._eou_frames):
            return
        m.heard_speech, m.silent_frames = False, 0
        tool = self._tool()
        if tool is not None:
            self._called = True
            name, arguments = tool
            call_json = json.dumps([{"name": name, "arguments": json.loads(arguments)}])
            m.mode, m.call = "call", tool
            m.call_frames = tokens(call_json) + 1  # the start marker, then one per token
            return
        self._plan_answer(m)

    def _tool(self) -> tuple[str, str] | None:
        """The known-truth call (``--tool-call NAME``), once per session, if declared."""
        cfg = self._ctx.config
        if self._called or cfg.tool_call is None:
            return None
        if not any(t.get("name") == cfg.tool_call for t in self._ctx.settings.tools):
            return None
        arguments = json.dumps(json.loads(cfg.tool_args), separators=(",", ":"))
        return cfg.tool_call, arguments

    def _plan_answer(self, m: Model) -> None:
        ctx = self._ctx
        text = reply_text(self._turn, ctx.epoch)
        if m.results:
            text = f"{text[:-1]}: {m.call[0] if m.call else 'the tool'} returned {m.results[-1]}."
        self._turn += 1
        m.reply_words = words(text)
        m.reply_audio = tone(ctx.config.reply_seconds, OUTPUT_RATE)
        audio_frames = max(1, math.ceil(m.reply_audio.size / PACKET_SAMPLES))
        m.reply_frames = max(audio_frames, len(m.reply_words) + 1)
        m.reply_frame, m.overlap_frames = 0, 0
        m.results = []
        m.mode = "speak"

    def _speak(self, m: Model, speech: bool) -> np.ndarray | None:
        """One frame of the answer: its word (text channel, now) and its packet (later)."""
        index = m.reply_frame
        m.reply_frame += 1
        if index > 0 and index - 1 < len(m.reply_words):  # frame 0 is the BOS frame
            self._text(m.reply_words[index - 1])
        return m.reply_audio[index * PACKET_SAMPLES : (index + 1) * PACKET_SAMPLES]

    def _speak_or_stop(
        self, m: Model, speech: bool, frame: np.ndarray
    ) -> tuple[np.ndarray | None, bool]:
        m.overlap_frames = m.overlap_frames + 1 if speech else 0
        if m.overlap_frames >= self._barge_frames or m.reply_frame >= m.reply_frames:
            interrupted = m.overlap_frames >= self._barge_frames
            m.mode, m.reply_frame, m.overlap_frames = "listen", 0, 0
            # the user talks over the answer: the model stops, the speech is the next turn
            m.heard_speech, m.silent_frames = interrupted, 0
            return None, True
        return self._speak(m, speech), False

    # --- output ---------------------------------------------------------------------------------

    def _open(self) -> Response:
        """The open response, or a new one (its start fan-out and ``response.speak``)."""
        active = self._responses.active
        if active is not None:
            return active
        ctx = self._ctx
        r = self._responses.open_stream(output_format="pcm16", output_rate=OUTPUT_RATE)
        ctx.ev("response.speak", **part_ids(r), metadata=self._meta(r))
        return r

    def _meta(self, r: Response) -> dict[str, Any]:
        return {"session_id": self._ctx.id, "epoch": r.epoch, "model_speak": True}

    def _text(self, word: str) -> None:
        ctx = self._ctx
        r = self._open()
        r.emitted_text += word
        ctx.ev(names.TRANSCRIPT_DELTA, **part_ids(r), delta=word, metadata=self._meta(r))

    def _schedule_packet(self, audio: np.ndarray | None, eos: bool) -> None:
        """This frame's packet, ``ttfa_ms`` after the frame (the talker and codec)."""
        loop = asyncio.get_running_loop()
        delay = max(0.0, self._ctx.config.ttfa_ms) / 1000.0
        packet = np.zeros(PACKET_SAMPLES, dtype=np.float32)
        if audio is not None and audio.size:
            packet[: audio.size] = audio[:PACKET_SAMPLES]
        epoch = self._ctx.epoch
        if delay <= 0:
            self._packet(epoch, packet, eos)
        else:
            loop.call_later(delay, self._packet, epoch, packet, eos)

    def _packet(self, epoch: int, packet: np.ndarray, eos: bool) -> None:
        ctx = self._ctx
        if ctx.closed or epoch != ctx.epoch:
            return  # nothing of an old epoch follows its cut
        self._packets += 1
        if self._drop_every and self._packets % self._drop_every == 0:
            return  # --fault drop-output-frame-every=N: this frame's packet is lost
        ctx.last_activity = time.monotonic()
        r = self._open()
        r.chunks += 1
        r.ledger.generated_ms = r.ledger.sent_ms = r.ledger.generated_ms + FRAME_MS
        r.last_b64 = pcm.b64encode(pcm.encode(packet, "pcm16"))
        ctx.output_started = True
        ctx.ev(
            names.AUDIO_DELTA,
            **part_ids(r),
            delta=r.last_b64,
            format="pcm16",
            sample_rate_hz=OUTPUT_RATE,
            metadata={
                **self._meta(r),
                "end_of_turn": eos,
                "playback": r.ledger.as_dict(),
                "audio_duration_ms": r.ledger.generated_ms,
            },
        )
        ctx.ev(names.TRANSCRIPT_DELTA, **part_ids(r), delta="")
        if eos:
            self._responses.complete(r)

    # --- tool calls (§13.4) ---------------------------------------------------------------------

    def _emit_call(self, m: Model) -> None:
        """The call is out: a synthetic response of its own, all in one go."""
        ctx = self._ctx
        assert m.call is not None
        name, arguments = m.call
        rid = ids.tool_response_id()
        call = Call(ids.call_id(), ids.user_item_id(), name, arguments)
        self._calls[call.call_id] = call
        item = {
            "id": call.item_id,
            "object": "realtime.item",
            "type": "function_call",
            "status": "completed",
            "name": name,
            "call_id": call.call_id,
            "arguments": arguments,
        }
        previous = self._conversation.last_item_id
        done_details = {"type": "completed", "reason": "completed"}
        response = {
            "id": rid,
            "object": "realtime.response",
            "status": "in_progress",
            "status_details": done_details,  # 0.30.0 already says completed here
            "output": [],
            "metadata": {},
        }
        ctx.ev("response.created", response=response, response_id=rid)
        for etype in ("conversation.item.added", "conversation.item.created"):
            ctx.ev(etype, previous_item_id=previous, item=dict(item))
        self._conversation.store(dict(item), previous)
        part = {"response_id": rid, "item_id": call.item_id, "output_index": 0}
        ctx.ev("response.output_item.added", response_id=rid, output_index=0, item=dict(item))
        ctx.ev(
            "response.function_call_arguments.delta", **part, call_id=call.call_id, delta=arguments
        )
        ctx.ev(
            "response.function_call_arguments.done",
            **part,
            call_id=call.call_id,
            arguments=arguments,
        )
        ctx.ev("response.output_item.done", response_id=rid, output_index=0, item=dict(item))
        ctx.ev("conversation.item.done", previous_item_id=previous, item=dict(item))
        done = {**response, "status": "completed", "output": [dict(item)]}
        ctx.ev("response.done", response=done, response_id=rid)

    def function_output(self, item: dict[str, Any], event_id: str | None) -> None:
        """``conversation.item.create`` of a ``function_call_output``: checked as 0.30.0
        checks it, stored, and its result read by the model one token per frame."""
        ctx = self._ctx
        call = self._calls.get(item.get("call_id"))  # type: ignore[arg-type]
        if call is None:
            ctx.err(
                OUTPUT_CODE,
                "function_call_output requires the call_id of a completed function call",
                param="item.call_id",
            )
            return
        output = item.get("output")
        if not isinstance(output, str):
            ctx.err(
                OUTPUT_CODE, "function_call_output requires a string output", param="item.output"
            )
            return
        if call.answered:
            ctx.err(
                OUTPUT_CODE,
                f"function_call_output already exists for call_id {call.call_id}",
                param="item.output",
            )
            return
        m = self._model
        if len(self._queued) + len(m.results) >= MAX_PENDING_RESULTS:
            ctx.err(
                BACKLOG_CODE,
                "function results came faster than the frame-locked channel reads them",
            )
            return
        call.answered = True
        stored = {
            "type": "function_call_output",
            "call_id": call.call_id,
            "output": output,
            "id": ids.user_item_id(),
            "object": "realtime.item",
            "status": "completed",
            "content": [],
        }
        previous = self._conversation.last_item_id
        self._conversation.store(dict(stored), previous)
        for etype in (
            "conversation.item.added",
            "conversation.item.created",
            "conversation.item.done",
        ):
            ctx.ev(etype, previous_item_id=previous, item=dict(stored))
        self._queued.append(_compact(output))


def _compact(output: str) -> str:
    """A tool result as the model reads it: JSON re-serialised compactly, else a JSON string."""
    try:
        value = json.loads(output)
    except ValueError:
        value = output
    return json.dumps(value, separators=(",", ":"))
