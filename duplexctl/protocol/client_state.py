"""The client's view of one duplex session, free of I/O (docs/protocol.md §2, §4, §6.4–6.6).

Like ``h11`` or ``wsproto``, :class:`ClientSession` never touches a socket: the transport
hands it every decoded server frame together with the moment the frame was read off the
socket, and gets back a list of typed *happenings*. It also builds every client event the
commands send. Keeping this pure is what lets replay, load, talk and probe share one protocol
implementation, and lets the golden transcripts be replayed through it without a server.

What it owns, and why here:

* **Sequencing.** The highest processed ``server_event_seq`` is what a resume must name and
  the most the client may acknowledge (acking more and then resuming below it is a
  ``journal_gap``). Replayed frames at or below it are dropped (``duplicates_dropped``); a
  jump is counted (``seq_gaps`` — must stay 0). Frames without a seq (session.created, errors
  of the transport, resume answers) bypass both.
* **Identity.** ``session_id``, the rotating ``resume_token``, ``attachment_generation`` and
  ``capabilities`` come from ``session.created`` / ``session.resumed``.
* **Lifecycle.** One :class:`~duplexctl.protocol.lifecycle.Phase` (opening, open, replaying,
  replaced, resync required, closed, expired), moved only through the transition table of
  :mod:`duplexctl.protocol.lifecycle`; ``created``, ``ended``, ``can_resume`` … are read
  from it.
* **Responses.** One :class:`ResponseTrack` per response id with the receive times every turn
  figure of docs/metrics.md needs (created, speak, first/last audio, first text, done), the
  assistant timeline (``audio_ms``) and the chunk gaps.
* **Audio decoding.** Deltas are decoded in the format and rate *they* state (pcm16, wav,
  G.711, f32) into PCM16 so that everything downstream handles one format.
* **Speech, not packets** (docs/protocol.md §13.2). Every delta is marked audible or silent.
  A model-native session whose response opens with silent packets streams one packet per
  model frame, silence included (``continuous_output``): there each answer is found in the
  audio and text — :class:`AnswerStarted` at a response's first non-empty text or audible
  packet, :class:`AnswerEnded` at its ``response.done`` (or after a second of silence) —
  because ``response.created`` / ``response.done`` say nothing about the model's speech.
* **Lane cadence and tool calls** (§13.1, §13.4). The append length the lane wants
  (:meth:`ClientSession.packet_ms`, from ``chunk_period_ms`` and any refusal of longer
  appends), and each ``response.function_call_arguments.done`` as a :class:`FunctionCall`
  whose synthetic response is a call, not an answer.
* **Validation** (issue 16.1). Every message is checked before anything uses it: a binary
  frame, text that is not JSON, JSON that is not an object, a frame that breaks
  :mod:`duplexctl.protocol.server_events` (required fields missing or mistyped) or a seq at
  or below one already processed outside a resume's replay is a recorded violation with the
  frame as evidence — never an exception — and the frame is not acted on (a broken required
  field: :class:`Malformed`; a mistyped optional field is ignored, the rest is used). The
  checker's ``on_violation`` hook lets a transport log each one where it happened.

Both dialects are accepted: beta audio names are canonicalised with ``names.canonical``.
Unknown event types become :class:`Other` — servers add events freely (``duplex.*``).

Public API::

    cs = ClientSession(output_format="pcm16", output_rate=24000, checker=None)
    cs = ClientSession.resuming(session_id, resume_token, last_seq)   # another process's session
    cs.begin_connection()                      # the transport opened a new socket
    cs.on_message(data: str | bytes, recv_ns: int) -> list[Happening]   # a websocket message
    cs.on_frame(frame: dict, recv_ns: int) -> list[Happening]           # an already decoded one
    cs.pending_ack() -> int | None;  cs.mark_acked(seq)
    cs.session_id, cs.resume_token, cs.attachment_generation, cs.capabilities, cs.epoch,
    cs.last_seq, cs.duplicates_dropped, cs.seq_gaps, cs.phase, cs.created, cs.ended,
    cs.responses: dict[str, ResponseTrack], cs.active_response_id, cs.checker,
    cs.continuous_output, cs.model_native, cs.max_append_samples, cs.packet_ms(asked, rate),
    cs.unsupported_input()
    builders (each stamps event_id): session_update, append, commit, response_create,
    response_cancel, input_audio_buffer_clear, output_audio_buffer_clear, barge_in,
    playback_ack, item_truncate, text_item, function_call_output, heartbeat, event_ack,
    close, resume
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from duplexctl.audio import pcm
from duplexctl.errors import SessionStateError
from duplexctl.protocol import cadence, codec, ids, names, server_events
from duplexctl.protocol.errors import WireError, parse_error
from duplexctl.protocol.frames import FrameLedger
from duplexctl.protocol.invariants import InvariantChecker, Violation
from duplexctl.protocol.lifecycle import ENDED, NOT_RESUMABLE, Phase, Signal, next_phase

# --------------------------------------------------------------------------------------------
# Happenings: what a server frame meant, typed. Every one carries the frame's receive time
# (monotonic ns, read off the socket), its server_event_seq (None when unsequenced), the
# canonical wire type and the decoded frame itself (for recorders and probes).
# --------------------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class Happening:
    type: str
    recv_ns: int
    seq: int | None = None
    epoch: int | None = None  # the session epoch this event states, when it states one
    frame: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(slots=True, kw_only=True)
class SessionCreated(Happening):
    session_id: str | None
    resume_token: str | None
    attachment_generation: int | None
    capabilities: dict[str, Any]
    session: dict[str, Any] = field(repr=False)


@dataclass(slots=True, kw_only=True)
class SessionUpdated(Happening):
    session: dict[str, Any] = field(repr=False)


@dataclass(slots=True, kw_only=True)
class SessionResumed(Happening):
    session_id: str | None
    resume_token: str | None
    attachment_generation: int | None
    session: dict[str, Any] = field(repr=False)


@dataclass(slots=True, kw_only=True)
class SessionClosed(Happening):
    reason: str | None


@dataclass(slots=True, kw_only=True)
class SessionExpired(Happening):
    reason: str | None


@dataclass(slots=True, kw_only=True)
class SessionReplaced(Happening):
    attachment_generation: int | None


@dataclass(slots=True, kw_only=True)
class ResyncRequired(Happening):
    reason: str | None


@dataclass(slots=True, kw_only=True)
class HeartbeatAck(Happening):
    pass


@dataclass(slots=True, kw_only=True)
class ErrorReceived(Happening):
    error: WireError


@dataclass(slots=True, kw_only=True)
class SpeechStarted(Happening):
    audio_start_ms: float | None
    item_id: str | None


@dataclass(slots=True, kw_only=True)
class SpeechStopped(Happening):
    audio_end_ms: float | None
    item_id: str | None


@dataclass(slots=True, kw_only=True)
class Committed(Happening):
    item_id: str | None
    previous_item_id: str | None
    empty: bool
    no_response: bool
    overlap_deferred: bool


@dataclass(slots=True, kw_only=True)
class ResponseCreated(Happening):
    response_id: str
    # the reference server marks the backchannels of ``serve --behaviour backchannel-rate``
    # (response.metadata.backchannel): an "mm-hm" answers no turn
    backchannel: bool = False


@dataclass(slots=True, kw_only=True)
class ResponseSpeak(Happening):
    response_id: str


@dataclass(slots=True, kw_only=True)
class AudioDelta(Happening):
    """One output chunk, decoded to PCM16 mono at ``sample_rate_hz``.

    ``audio_start_ms``/``audio_end_ms`` place it on the response's assistant timeline
    (``metadata.audio_duration_ms`` when the server states it, else the byte count), so a
    chunk whose payload was cut (the golden transcripts) still advances the timeline
    correctly. ``decode_error`` is set when the bytes do not decode as stated.
    """

    response_id: str
    item_id: str | None
    pcm: bytes = field(repr=False)
    format: str
    sample_rate_hz: int
    audio_start_ms: float
    audio_end_ms: float
    end_of_turn: bool
    decode_error: str | None = None
    audible: bool = True  # above the silence floor (pcm.SILENCE_RMS): the model's voice


@dataclass(slots=True, kw_only=True)
class AnswerStarted(Happening):
    """On a lane that streams audio whether or not the model speaks
    (:attr:`ClientSession.continuous_output`): the model began to speak in ``response_id`` —
    its first non-empty transcript or text delta, or its first audible audio, whichever came
    first (docs/protocol.md §13.2). Follows the happening of the frame that showed it."""

    response_id: str


@dataclass(slots=True, kw_only=True)
class AnswerEnded(Happening):
    """On such a lane: the model's answer in ``response_id`` is over — ``by`` its
    ``response.done``, or by ``silence``: :data:`ANSWER_END_SILENCE_MS` of silent packets
    after its last audible one."""

    response_id: str
    by: str


@dataclass(slots=True, kw_only=True)
class FunctionCall(Happening):
    """The model called a tool (``response.function_call_arguments.done``): the client
    owes a ``function_call_output`` for ``call_id`` (docs/protocol.md §13.4)."""

    response_id: str
    call_id: str
    name: str | None
    arguments: str | None
    item_id: str | None


@dataclass(slots=True, kw_only=True)
class TranscriptDelta(Happening):
    response_id: str
    delta: str
    standalone: bool  # carries its own metadata: a text-only unit, not paired with audio


@dataclass(slots=True, kw_only=True)
class TextDelta(Happening):
    response_id: str
    delta: str


@dataclass(slots=True, kw_only=True)
class ResponseDone(Happening):
    response_id: str
    status: str | None  # completed | cancelled | failed
    reason: str | None
    track: ResponseTrack = field(repr=False)


@dataclass(slots=True, kw_only=True)
class Listen(Happening):
    response_id: str | None  # set only when it terminates a created response
    reason: str | None


@dataclass(slots=True, kw_only=True)
class OverlapDecision(Happening):
    action: str | None  # drop | listen | barge_in
    reason: str | None
    cancel_reason: str | None


@dataclass(slots=True, kw_only=True)
class PlaybackAcknowledged(Happening):
    response_id: str | None
    item_id: str | None
    played_ms: float | None
    committed_ms: float | None
    history_committed: bool


@dataclass(slots=True, kw_only=True)
class Other(Happening):
    """Any other event (item events, cleared, rate_limits.updated, duplex.*, unknown)."""


@dataclass(slots=True, kw_only=True)
class ViolationRecorded(Happening):
    """Local happening: the session's checker recorded ``violation`` (with its evidence).
    The transport adds it after the happening of the frame that caused it, if that frame
    meant anything; :mod:`duplexctl.protocol.handshake` reads it to end a handshake."""

    violation: Violation

    @property
    def reason(self) -> str:
        """One line, for traces that show a local happening's ``reason``."""
        return f"{self.violation.name}: {self.violation.detail}"


@dataclass(slots=True, kw_only=True)
class Malformed(Happening):
    """A frame whose required fields are missing or mistyped: recorded, not acted on.
    ``type`` is the frame's (canonical) type, or ``<missing type>``."""

    problems: list[str]


# --------------------------------------------------------------------------------------------
# Response tracking
# --------------------------------------------------------------------------------------------


#: on a lane that streams silence too, this much silence after the model's last audible packet
#: (and its last text) ends its answer when no ``response.done`` has (docs/protocol.md §13.2)
ANSWER_END_SILENCE_MS: Final = 1000.0
#: a model-native lane whose response opens with this many silent packets streams silence
#: too (one quiet first chunk of a reply is no such lane)
CONTINUOUS_AFTER: Final = 2


@dataclass(slots=True)
class ResponseTrack:
    """Everything received for one response, with receive times (monotonic ns).

    ``deltas`` holds (recv, start ms, end ms, audible) of every audio delta. The speech
    fields say where the model's voice is in it: its first and last audible delta, their
    places on the response's timeline and, on a lane that streams silence too, when the
    answer began and ended (docs/protocol.md §13.2)."""

    response_id: str
    epoch: int | None = None
    item_id: str | None = None
    created_ns: int | None = None
    speak_ns: int | None = None
    first_audio_ns: int | None = None
    last_audio_ns: int | None = None
    first_text_ns: int | None = None  # first non-empty transcript or text delta
    done_ns: int | None = None
    listen_ns: int | None = None
    listen_reason: str | None = None
    status: str | None = None
    reason: str | None = None
    audio_ms: float = 0.0  # assistant timeline end (cumulative output ms)
    first_chunk_ms: float = 0.0  # duration of the first chunk (docs/metrics.md rtf)
    audio_bytes: int = 0  # decoded PCM16 bytes actually received
    audio_deltas: int = 0
    decode_errors: int = 0
    chunk_gaps_ms: list[float] = field(default_factory=list)
    deltas: list[tuple[int, float, float, bool]] = field(default_factory=list, repr=False)
    transcript: str = ""
    text: str = ""
    kind: str = "audio"  # "function_call": a synthetic response that carries a tool call
    text_ns: list[int] = field(default_factory=list, repr=False)  # recv of non-empty text
    first_audible_ns: int | None = None
    last_audible_ns: int | None = None
    speech_start_ms: float | None = None  # timeline start of the first audible delta
    speech_end_ms: float = 0.0  # timeline end of the last audible delta
    answer_start_ns: int | None = None  # continuous lanes: AnswerStarted
    answer_end_ns: int | None = None  # continuous lanes: AnswerEnded
    answer_end_by: str | None = None
    silent_since_ms: float | None = None  # timeline start of the silence after speech
    leading_silent: int = 0  # silent packets before any speech or text

    @property
    def done(self) -> bool:
        return self.done_ns is not None

    def audio_ms_after(self, t_ns: int) -> float:
        """Assistant audio ms received after ``t_ns`` (docs/metrics.md ``leaked_audio_ms``)."""
        return sum(end - start for recv, start, end, _ in self.deltas if recv > t_ns)


# --------------------------------------------------------------------------------------------
# Audio delta decoding
# --------------------------------------------------------------------------------------------


def _b64(text: str) -> tuple[bytes, str | None]:
    """Strict base64; a payload cut at a non-quantum boundary decodes its whole prefix."""
    try:
        return pcm.b64decode(text), None
    except pcm.AudioDecodeError:
        cut = text[: len(text) - len(text) % 4]
        try:
            return pcm.b64decode(cut), "audio delta is not valid base64"
        except pcm.AudioDecodeError:
            return b"", "audio delta is not valid base64"


def _unwrap_wav(data: bytes, stated_rate: int) -> tuple[bytes, str | None]:
    """The PCM16 payload of a wav-wrapped delta (a complete little RIFF file per chunk)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return b"", "wav audio delta has no RIFF/WAVE header"
    pos, error, payload = 12, None, None
    while pos + 8 <= len(data):
        chunk_id, size = data[pos : pos + 4], int.from_bytes(data[pos + 4 : pos + 8], "little")
        body = data[pos + 8 : pos + 8 + size]
        if chunk_id == b"fmt " and len(body) >= 16:
            tag = int.from_bytes(body[0:2], "little")
            channels = int.from_bytes(body[2:4], "little")
            rate = int.from_bytes(body[4:8], "little")
            bits = int.from_bytes(body[14:16], "little")
            if tag != 1 or channels != 1 or bits != 16:
                error = f"wav delta is not mono PCM16 (tag {tag}, {channels} ch, {bits} bit)"
            elif rate != stated_rate:
                error = f"wav header says {rate} Hz but the delta states {stated_rate} Hz"
        elif chunk_id == b"data":
            payload = body  # may be short when the frame was cut: keep what is there
            break
        pos += 8 + size + (size & 1)
    if payload is None:
        return b"", error or "wav audio delta has no data chunk"
    return payload, error


def decode_audio_payload(b64: str, fmt: str, rate: int) -> tuple[bytes, str | None]:
    """``(pcm16 bytes, error)`` for a delta's base64 payload in canonical format ``fmt``."""
    data, error = _b64(b64)
    if fmt == "wav":
        data, wav_error = _unwrap_wav(data, rate)
        error = error or wav_error
        fmt = "pcm16"
    if fmt == "pcm16":
        if len(data) % 2:
            return data[:-1], error or "pcm16 audio delta has an odd number of bytes"
        return data, error
    try:
        usable = len(data) - len(data) % pcm.BYTES_PER_SAMPLE[fmt]
        return pcm.float_to_pcm16(pcm.decode(data[:usable], fmt)), error
    except (pcm.AudioDecodeError, KeyError) as exc:
        return b"", str(exc)


# --------------------------------------------------------------------------------------------
# The state machine
# --------------------------------------------------------------------------------------------


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _response_id_of_item(item_id: str | None) -> str | None:
    if item_id and item_id.startswith("item_resp"):
        return item_id[len("item_") :]
    return None


def client_event(etype: str, **fields: Any) -> dict[str, Any]:
    """A client event: its ``type``, the fields given (None ones left out) and a fresh
    ``event_id``. Every well-formed event the client sends is built here: ClientSession's
    builders, and the probe's raw connection, which keeps its own state on purpose."""
    event: dict[str, Any] = {"type": etype}
    event.update({k: v for k, v in fields.items() if v is not None})
    event["event_id"] = ids.client_event_id()
    return event


class ClientSession:
    """One duplex session as the client sees it: pure state, no I/O (see module docstring)."""

    def __init__(
        self,
        *,
        output_format: str = "pcm16",
        output_rate: int = 24000,
        checker: InvariantChecker | None = None,
    ) -> None:
        self.output_format = pcm.normalize_format(output_format, output=True) or "pcm16"
        self.output_rate = output_rate
        self.checker = checker if checker is not None else InvariantChecker()
        self.session_id: str | None = None
        self.resume_token: str | None = None
        self.attachment_generation: int | None = None
        self.capabilities: dict[str, Any] = {}
        self.session: dict[str, Any] = {}
        self.epoch = 0
        self.last_seq = 0  # highest processed server_event_seq (session.updated is 1)
        self.acked_seq = 0
        self.duplicates_dropped = 0
        self.seq_gaps = 0
        self.missing_events = 0
        self.connections = 0
        # where the session stands: one phase, moved only by lifecycle.TRANSITIONS
        self.phase = Phase.OPENING
        self.close_reason: str | None = None
        self.resync_reason: str | None = None  # why the server asked for a resync
        self.responses: dict[str, ResponseTrack] = {}
        self.response_order: list[str] = []
        # the most samples an append may carry, learned from a refusal (protocol/cadence.py)
        self.max_append_samples: int | None = None
        # the lane streams audio whether or not the model speaks (a response's first packet
        # was silence, docs/protocol.md §13.2): answers are found in the audio and text
        self.continuous_output = False
        # frames in and out (protocol/frames.py): kept from session.created on whenever the
        # lane states its step, kept across resumes; :attr:`frames` shows it once the lane
        # proved frame-locked
        self._frames: FrameLedger | None = None
        self._function_names: dict[str, str | None] = {}  # function_call item id -> name
        self._derived: list[Happening] = []  # happenings a handler adds after its own

    @classmethod
    def resuming(
        cls,
        session_id: str,
        resume_token: str,
        last_seq: int,
        *,
        output_format: str = "pcm16",
        output_rate: int = 24000,
    ) -> ClientSession:
        """State for resuming a session opened elsewhere (another process, a probe)."""
        self = cls(
            output_format=output_format,
            output_rate=output_rate,
            checker=InvariantChecker(start_seq=last_seq, knows_history=False),
        )
        self.session_id = session_id
        self.resume_token = resume_token
        self.last_seq = self.acked_seq = last_seq
        self._move(Signal.RESUMED)  # opened elsewhere: as good as resumed
        return self

    # -- connection bookkeeping ----------------------------------------------------------

    def _move(self, signal: Signal) -> None:
        self.phase = next_phase(self.phase, signal)

    def begin_connection(self) -> None:
        """The transport opened a new socket for this session (the first one or a resume)."""
        self.connections += 1
        self._move(Signal.CONNECTION)
        self.checker.new_connection()

    @property
    def created(self) -> bool:
        """``session.created`` (or ``session.resumed``) came: the server holds a session."""
        return self.phase is not Phase.OPENING

    @property
    def closed(self) -> bool:
        return self.phase is Phase.CLOSED

    @property
    def replaced(self) -> bool:
        return self.phase is Phase.REPLACED

    @property
    def can_resume(self) -> bool:
        """A resume is worth attempting: we have credentials and the session has not ended."""
        return (
            self.session_id is not None
            and self.resume_token is not None
            and self.phase not in NOT_RESUMABLE
            and self.capabilities.get("supports_session_resume", True) is not False
        )

    @property
    def ended(self) -> bool:
        return self.phase in ENDED

    @property
    def active_response_id(self) -> str | None:
        """The most recent response that has no ``response.done`` yet."""
        for rid in reversed(self.response_order):
            if not self.responses[rid].done:
                return rid
        return None

    # -- acks ------------------------------------------------------------------------------

    def pending_ack(self) -> int | None:
        """The seq to send in ``session.event_ack`` now, or None when nothing is due.

        Everything processed is acked (docs/protocol.md §6.6: the journal is capped at 8 MiB, about
        two minutes of audio), never more; once the session has ended there is nothing to trim.
        """
        if self.ended or self.last_seq <= self.acked_seq:
            return None
        return self.last_seq

    def mark_acked(self, seq: int) -> None:
        self.acked_seq = max(self.acked_seq, seq)

    # -- receiving -------------------------------------------------------------------------

    def on_message(self, data: str | bytes, recv_ns: int) -> list[Happening]:
        """Digest one websocket message as received (text or binary); never raises.

        A transport calls this from its receive path, where an exception would end the
        connection without a word: should digesting ever raise (a duplexctl bug — the
        property suites feed :meth:`on_frame` directly so they see it), the exception is
        recorded as a ``client_error`` violation with the frame instead."""
        try:
            return self._on_message(data, recv_ns)
        except Exception as exc:
            self.checker.violate(
                "client_error",
                f"duplexctl failed on this frame ({type(exc).__name__}: {exc}); please report it",
                recv_ns=recv_ns,
                frame=data,
            )
            return []

    def _on_message(self, data: str | bytes, recv_ns: int) -> list[Happening]:
        if isinstance(data, bytes):
            return self._garbage(
                "binary_frame", "a binary frame (the protocol sends JSON text only)", data, recv_ns
            )
        try:
            frame = codec.loads(data)
        except codec.FrameDecodeError:
            return self._garbage("not_json", "a text frame that is not JSON", data, recv_ns)
        if not isinstance(frame, dict):
            kind = type(frame).__name__
            return self._garbage(
                "not_object", f"JSON that is not an object (a {kind})", data, recv_ns
            )
        return self.on_frame(frame, recv_ns)

    def _garbage(self, name: str, detail: str, data: str | bytes, recv_ns: int) -> list[Happening]:
        self.checker.violate(name, detail, recv_ns=recv_ns, frame=data)
        return []

    def on_frame(self, frame: dict[str, Any], recv_ns: int) -> list[Happening]:
        """Digest one decoded server frame; returns what it meant (nothing for a dropped
        duplicate). What breaks the protocol is recorded in ``checker``, never raised."""
        verdict = server_events.check(frame)
        clean = verdict.clean  # a mistyped seq is not in it: the frame counts as unsequenced
        seq: int | None = clean.get("server_event_seq")
        raw_type = frame.get("type")
        etype = names.canonical(raw_type) if isinstance(raw_type, str) else "<missing type>"
        if seq is not None:
            if seq <= self.last_seq:
                self.duplicates_dropped += 1
                if self.phase is not Phase.REPLAYING:
                    self.checker.violate(
                        "seq_out_of_order",
                        f"server_event_seq {seq} after {self.last_seq} ({etype}): a duplicate "
                        "or out of order, outside a resume's replay; dropped",
                        recv_ns=recv_ns,
                        seq=seq,
                        frame=frame,
                    )
                return []
            if self.phase is Phase.REPLAYING:  # the one phase a new seq moves (lifecycle.py):
                self._move(Signal.NEW_SEQ)  # no table lookup per frame on the hot path
            if seq > self.last_seq + 1:
                self.seq_gaps += 1
                self.missing_events += seq - self.last_seq - 1
            self.last_seq = seq
        if verdict.problems:
            self.checker.violate(
                "malformed_event",
                f"{etype}: {'; '.join(verdict.problems)}"
                + ("; not acted on" if verdict.broken else ""),
                recv_ns=recv_ns,
                seq=seq,
                frame=frame,
            )
        happening: Happening
        if verdict.broken:
            happening = Malformed(
                type=etype, recv_ns=recv_ns, seq=seq, frame=frame, problems=verdict.problems
            )
            self.checker.check_envelope(happening)
            return [happening]
        happening = self._interpret(etype, clean, recv_ns, seq, frame)
        if happening.epoch is not None and happening.epoch > self.epoch:
            self.epoch = happening.epoch
        self.checker.check(happening)
        if self._derived:
            derived, self._derived = self._derived, []
            return [happening, *derived]
        return [happening]

    def _interpret(
        self,
        etype: str,
        frame: dict[str, Any],
        recv_ns: int,
        seq: int | None,
        received: dict[str, Any],
    ) -> Happening:
        """The happening ``frame`` (validated) means; ``received`` is the frame as it came."""
        base: dict[str, Any] = {"type": etype, "recv_ns": recv_ns, "seq": seq, "frame": received}
        handler = _HANDLERS.get(etype)
        if handler is not None:
            return handler(self, frame, base)
        epoch = _int(frame.get("epoch"))
        if epoch is None:
            epoch = _int(_dict(frame.get("event")).get("epoch"))
        return Other(**base, epoch=epoch)

    def _track(self, response_id: str) -> ResponseTrack:
        track = self.responses.get(response_id)
        if track is None:
            track = ResponseTrack(
                response_id=response_id,
                epoch=ids.epoch_of_response_id(response_id),
                item_id=ids.assistant_item_id(response_id),
            )
            self.responses[response_id] = track
            self.response_order.append(response_id)
        return track

    @staticmethod
    def _rid(frame: dict[str, Any]) -> str:
        rid = _str(frame.get("response_id")) or _str(_dict(frame.get("response")).get("id"))
        return rid or "<unknown response>"

    # session lifecycle

    def _on_created(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        session = _dict(frame.get("session"))
        self._move(Signal.CREATED)
        self.session = session
        self.session_id = _str(session.get("id")) or _str(frame.get("session_id"))
        self.resume_token = _str(frame.get("resume_token")) or self.resume_token
        self.attachment_generation = _int(frame.get("attachment_generation"))
        self.capabilities = _dict(session.get("capabilities"))
        step = cadence.frame_ms(self.capabilities)
        if step is not None and self._frames is None:
            self._frames = FrameLedger(step)
        return SessionCreated(
            **base,
            epoch=_int(session.get("epoch")),
            session_id=self.session_id,
            resume_token=self.resume_token,
            attachment_generation=self.attachment_generation,
            capabilities=self.capabilities,
            session=session,
        )

    def _on_updated(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        session = _dict(frame.get("session"))
        self.session = session or self.session
        if "capabilities" in session:
            self.capabilities = _dict(session.get("capabilities"))
        return SessionUpdated(**base, epoch=_int(session.get("epoch")), session=session)

    def _on_resumed(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        session = _dict(frame.get("session"))
        self.session = session or self.session
        self.session_id = _str(frame.get("session_id")) or self.session_id
        self.resume_token = _str(frame.get("resume_token")) or self.resume_token
        self.attachment_generation = _int(frame.get("attachment_generation"))
        if "capabilities" in session:
            self.capabilities = _dict(session.get("capabilities"))
        self._move(Signal.RESUMED)
        return SessionResumed(
            **base,
            epoch=_int(session.get("epoch")),
            session_id=self.session_id,
            resume_token=self.resume_token,
            attachment_generation=self.attachment_generation,
            session=session,
        )

    def _on_closed(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        reason = _str(frame.get("reason")) or _str(_dict(frame.get("event")).get("reason"))
        self.close_reason = reason
        self._move(Signal.CLOSED)
        return SessionClosed(**base, reason=reason)

    def _on_expired(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        self._move(Signal.EXPIRED)
        return SessionExpired(**base, reason=_str(frame.get("reason")))

    def _on_replaced(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        self._move(Signal.REPLACED)
        return SessionReplaced(
            **base, attachment_generation=_int(frame.get("attachment_generation"))
        )

    def _on_resync(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        self.resync_reason = _str(frame.get("reason")) or "unknown"
        self._move(Signal.RESYNC)
        return ResyncRequired(**base, reason=self.resync_reason)

    def _on_heartbeat_ack(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        return HeartbeatAck(**base)

    def _on_error(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        error = parse_error(frame)
        limit = cadence.refused_samples(error)
        if limit is not None and (self.max_append_samples or limit + 1) > limit:
            self.max_append_samples = limit
        return ErrorReceived(**base, error=error)

    def packet_ms(self, asked_ms: int, rate: int, *, asked_by: str = "chunk_ms") -> cadence.Cadence:
        """The append length this lane wants for ``asked_ms`` at input ``rate``: its step
        (``chunk_period_ms``) and any refusal of longer appends decide
        (:func:`duplexctl.protocol.cadence.packet_ms`)."""
        return cadence.packet_ms(
            asked_ms,
            rate,
            step_ms=cadence.frame_ms(self.capabilities),
            max_samples=self.max_append_samples,
            asked_by=asked_by,
        )

    # input

    def _on_speech_started(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        return SpeechStarted(
            **base,
            audio_start_ms=_num(frame.get("audio_start_ms")),
            item_id=_str(frame.get("item_id")),
        )

    def _on_speech_stopped(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        return SpeechStopped(
            **base,
            audio_end_ms=_num(frame.get("audio_end_ms")),
            item_id=_str(frame.get("item_id")),
        )

    def _on_committed(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        event = _dict(frame.get("event"))
        return Committed(
            **base,
            epoch=_int(event.get("epoch")),
            item_id=_str(frame.get("item_id")),
            previous_item_id=_str(frame.get("previous_item_id")),
            empty=bool(event.get("empty")),
            no_response=bool(event.get("no_response")),
            overlap_deferred=bool(event.get("overlap_deferred")),
        )

    # responses

    def _on_response_created(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        rid = self._rid(frame)
        track = self._track(rid)
        if track.created_ns is None:
            track.created_ns = base["recv_ns"]
        metadata = _dict(_dict(frame.get("response")).get("metadata"))
        meta = _dict(metadata.get("duplex_event"))
        if track.epoch is None:
            track.epoch = _int(meta.get("epoch"))
        backchannel = metadata.get("backchannel") is True
        return ResponseCreated(**base, epoch=track.epoch, response_id=rid, backchannel=backchannel)

    def _on_speak(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        rid = self._rid(frame)
        track = self._track(rid)
        if track.speak_ns is None:
            track.speak_ns = base["recv_ns"]
        epoch = _int(_dict(frame.get("metadata")).get("epoch"))
        if track.epoch is None:
            track.epoch = epoch
        return ResponseSpeak(**base, epoch=epoch, response_id=rid)

    def _on_audio_delta(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        rid = self._rid(frame)
        track = self._track(rid)
        meta = _dict(frame.get("metadata"))
        stated_fmt = _str(frame.get("format"))
        fmt = pcm.normalize_format(stated_fmt, output=True) if stated_fmt else self.output_format
        rate = _int(frame.get("sample_rate_hz")) or _int(frame.get("sample_rate"))
        rate = rate or self.output_rate
        payload = frame.get("delta")
        if payload is None:
            payload = frame.get("audio")  # G1 native dialect spelling
        error: str | None
        if fmt is None:
            data, error = b"", f"unsupported audio delta format {stated_fmt!r}"
            fmt = stated_fmt or "?"
        elif not isinstance(payload, str):
            data, error = b"", "audio delta has no base64 payload"
        else:
            data, error = decode_audio_payload(payload, fmt, rate)
        recv_ns: int = base["recv_ns"]
        start_ms = track.audio_ms
        stated_end = _num(meta.get("audio_duration_ms"))
        end_ms = stated_end if stated_end is not None else start_ms + len(data) / (2 * rate) * 1e3
        audible = pcm.pcm16_audible(data)
        if track.first_audible_ns is None and data and not audible and not track.transcript:
            track.leading_silent += 1
            if track.leading_silent >= CONTINUOUS_AFTER and self.model_native:
                self.continuous_output = True  # a response that opens with silence (§13.2)
        if track.last_audio_ns is not None:
            track.chunk_gaps_ms.append((recv_ns - track.last_audio_ns) / 1e6)
        if track.first_audio_ns is None:
            track.first_audio_ns = recv_ns
            track.first_chunk_ms = end_ms - start_ms
        track.last_audio_ns = recv_ns
        track.audio_ms = max(track.audio_ms, end_ms)
        track.audio_bytes += len(data)
        track.audio_deltas += 1
        track.decode_errors += error is not None
        if self._frames is not None:
            self._frames.received(end_ms - start_ms)
        track.deltas.append((recv_ns, start_ms, end_ms, audible))
        self._speech(track, recv_ns, start_ms, end_ms, audible)
        epoch = _int(meta.get("epoch"))
        if epoch is None:
            epoch = track.epoch
        elif track.epoch is None:
            track.epoch = epoch
        return AudioDelta(
            **base,
            epoch=epoch,
            response_id=rid,
            item_id=_str(frame.get("item_id")),
            pcm=data,
            format=fmt,
            sample_rate_hz=rate,
            audio_start_ms=start_ms,
            audio_end_ms=end_ms,
            end_of_turn=bool(meta.get("end_of_turn")),
            decode_error=error,
            audible=audible,
        )

    def input_sent(self, audio_ms: float) -> None:
        """The shell sent an append of ``audio_ms`` of input (frame accounting)."""
        if self._frames is not None:
            self._frames.sent(audio_ms)

    @property
    def frames(self) -> FrameLedger | None:
        """The frames in and out, on a **frame-locked** lane only: one that states its step
        (``chunk_period_ms``) and answers every frame with a packet, silence included (its
        output proved continuous, docs/protocol.md §13.2: Nemotron VoiceChat). A lane with
        a step whose model speaks only when it has something to say (MiniCPM-o's 1 s units)
        has nothing to account: None."""
        return self._frames if self.continuous_output else None

    def unsupported_input(self) -> str | None:
        """Why this client cannot drive the session, or None: its capabilities require input
        modalities besides audio on every append (``video_frames``: AURA Omni in vLLM-Omni
        0.30, docs/protocol.md §13.5), and duplexctl sends audio only."""
        required = self.capabilities.get("required_input_modalities")
        if not isinstance(required, list):
            return None
        missing = sorted({m for m in required if isinstance(m, str)} - {"audio"})
        if not missing:
            return None
        what = "video_frames" if missing == ["video"] else ", ".join(missing)
        return (
            f"the server requires {what} on every append (required_input_modalities "
            f"{sorted(m for m in required if isinstance(m, str))}) and duplexctl sends audio "
            "only; the session was closed (docs/protocol.md §13.5)"
        )

    @property
    def model_native(self) -> bool:
        """The model decides when to speak (a response may open before it does)."""
        caps = self.capabilities
        return (
            caps.get("implementation_level") == "model_native_duplex"
            or caps.get("supports_model_native_turn_policy") is True
        )

    def _speech(
        self, track: ResponseTrack, recv_ns: int, start_ms: float, end_ms: float, audible: bool
    ) -> None:
        """Where the model's voice is in ``track``; on a continuous lane, the answer's start
        (first audible packet) and its end by silence (docs/protocol.md §13.2)."""
        if audible:
            if track.first_audible_ns is None:
                track.first_audible_ns = recv_ns
                track.speech_start_ms = start_ms
            track.last_audible_ns = recv_ns
            track.speech_end_ms = end_ms
            track.silent_since_ms = None
            if self.continuous_output:
                self._answer_started(track, recv_ns)
            return
        if track.first_audible_ns is None:
            return
        if track.silent_since_ms is None:
            track.silent_since_ms = start_ms
        if (
            self.continuous_output
            and track.answer_start_ns is not None
            and track.answer_end_ns is None
            and end_ms - track.silent_since_ms >= ANSWER_END_SILENCE_MS
        ):
            self._answer_ended(track, recv_ns, "silence")

    def _answer_started(self, track: ResponseTrack, recv_ns: int) -> None:
        if track.answer_start_ns is None and track.kind == "audio":
            track.answer_start_ns = recv_ns
            self._derived.append(
                AnswerStarted(type="answer.started", recv_ns=recv_ns, response_id=track.response_id)
            )

    def _answer_ended(self, track: ResponseTrack, recv_ns: int, by: str) -> None:
        track.answer_end_ns = recv_ns
        track.answer_end_by = by
        self._derived.append(
            AnswerEnded(type="answer.ended", recv_ns=recv_ns, response_id=track.response_id, by=by)
        )

    def _on_transcript_delta(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        rid = self._rid(frame)
        track = self._track(rid)
        delta = _str(frame.get("delta")) or ""
        self._text(track, delta, base["recv_ns"])
        track.transcript += delta
        meta = frame.get("metadata")
        epoch = _int(meta.get("epoch")) if isinstance(meta, dict) else None
        return TranscriptDelta(
            **base,
            epoch=epoch if epoch is not None else track.epoch,
            response_id=rid,
            delta=delta,
            standalone=isinstance(meta, dict),
        )

    def _on_text_delta(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        rid = self._rid(frame)
        track = self._track(rid)
        delta = _str(frame.get("delta")) or ""
        self._text(track, delta, base["recv_ns"])
        track.text += delta
        return TextDelta(**base, epoch=track.epoch, response_id=rid, delta=delta)

    def _text(self, track: ResponseTrack, delta: str, recv_ns: int) -> None:
        """A transcript or text delta: the first non-empty one is when the model decided to
        speak (on a continuous lane, the answer's start)."""
        if not delta:
            return
        track.text_ns.append(recv_ns)
        track.silent_since_ms = None  # still speaking (its text runs ahead of its audio)
        if track.first_text_ns is None:
            track.first_text_ns = recv_ns
        if self.continuous_output:
            self._answer_started(track, recv_ns)

    def _on_response_done(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        rid = self._rid(frame)
        track = self._track(rid)
        response = _dict(frame.get("response"))
        details = response.get("status_details")
        status = _str(response.get("status"))
        reason = _str(details.get("reason")) if isinstance(details, dict) else None
        if track.done_ns is None:
            track.done_ns = base["recv_ns"]
            track.status = status
            track.reason = reason
        meta = _dict(response.get("metadata"))
        # A cancellation record states the *new* epoch; a completion's metadata the response's.
        new_epoch = _int(meta.get("epoch")) if status == "cancelled" else None
        if track.answer_start_ns is not None and track.answer_end_ns is None:
            self._answer_ended(track, base["recv_ns"], "response.done")
        return ResponseDone(
            **base, epoch=new_epoch, response_id=rid, status=status, reason=reason, track=track
        )

    def _on_listen(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        response = _dict(frame.get("response"))
        rid = _str(frame.get("response_id"))
        reason = _str(_dict(response.get("metadata")).get("reason"))
        if rid is not None:
            track = self._track(rid)
            track.listen_ns = base["recv_ns"]
            track.listen_reason = reason
        return Listen(**base, epoch=_int(frame.get("epoch")), response_id=rid, reason=reason)

    def _on_output_item_added(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        """``response.output_item.added``: a ``function_call`` item makes its response a
        tool call, not a spoken answer (docs/protocol.md §13.4)."""
        item = _dict(frame.get("item"))
        rid = _str(frame.get("response_id"))
        if item.get("type") == "function_call":
            item_id = _str(item.get("id"))
            if item_id is not None:
                self._function_names[item_id] = _str(item.get("name"))
            if rid is not None:
                self._track(rid).kind = "function_call"
        return Other(**base)

    def _on_function_call(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        rid = self._rid(frame)
        self._track(rid).kind = "function_call"
        item_id = _str(frame.get("item_id"))
        name = _str(frame.get("name")) or self._function_names.get(item_id or "")
        return FunctionCall(
            **base,
            response_id=rid,
            call_id=_str(frame.get("call_id")) or "",
            name=name,
            arguments=_str(frame.get("arguments")),
            item_id=item_id,
        )

    def _on_overlap(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        meta = _dict(frame.get("metadata"))
        return OverlapDecision(
            **base,
            epoch=_int(frame.get("epoch")),
            action=_str(frame.get("action")) or _str(meta.get("action")),
            reason=_str(frame.get("reason")) or _str(meta.get("reason")),
            cancel_reason=_str(meta.get("cancel_reason")),
        )

    def _on_playback_acknowledged(self, frame: dict[str, Any], base: dict[str, Any]) -> Happening:
        event = _dict(frame.get("event"))
        item_id = _str(event.get("item_id")) or _str(frame.get("item_id"))
        return PlaybackAcknowledged(
            **base,
            epoch=_int(event.get("epoch")),
            response_id=_str(frame.get("response_id")) or _response_id_of_item(item_id),
            item_id=item_id,
            played_ms=_num(event.get("played_ms")),
            committed_ms=_num(event.get("committed_ms")),
            history_committed=bool(event.get("history_committed")),
        )

    # -- builders: every client event the commands send (through client_event) --------

    def session_update(self, session: dict[str, Any]) -> dict[str, Any]:
        """``session.update`` with a session object (see settings.SessionSettings)."""
        return client_event("session.update", session=session)

    def append(
        self,
        audio: bytes | str,
        *,
        audio_start_ms: float | None = None,
        audio_end_ms: float | None = None,
        duration_ms: float | None = None,
        format: str | None = None,
        sample_rate_hz: int | None = None,
        **hints: Any,
    ) -> dict[str, Any]:
        """``input_audio_buffer.append``; the ms fields are the client's media clock
        (echoed into VAD events), ``hints`` any of §3.2's optional fields. ``audio`` is the
        encoded bytes, or a str already in base64: a load run encodes each chunk of a shared
        clip once per process, not once per session and append."""
        return client_event(
            "input_audio_buffer.append",
            audio=audio if isinstance(audio, str) else pcm.b64encode(audio),
            format=format,
            sample_rate_hz=sample_rate_hz,
            audio_start_ms=audio_start_ms,
            audio_end_ms=audio_end_ms,
            duration_ms=duration_ms,
            **hints,
        )

    @staticmethod
    def append_text(audio_b64: str, *, audio_end_ms: int, duration_ms: int) -> str:
        """The JSON text of ``append(audio_b64, audio_end_ms=…, duration_ms=…)``, formatted
        directly: byte for byte what ``codec.dumps`` of that dict gives, without building
        the dict or re-scanning the ~2.7 kB base64 string (a load process sends thousands
        of appends a second). base64 needs no JSON escaping; the ints are checked so the
        text cannot differ from orjson's (no bools, no floats)."""
        if type(audio_end_ms) is not int or type(duration_ms) is not int:
            raise TypeError("append_text takes int audio_end_ms and duration_ms")
        return (
            '{"type":"input_audio_buffer.append","audio":"'
            f'{audio_b64}","audio_end_ms":{audio_end_ms},"duration_ms":{duration_ms},'
            f'"event_id":"{ids.client_event_id()}"}}'
        )

    def commit(self, *, response_create: bool = False, final: bool = True) -> dict[str, Any]:
        if self._frames is not None:
            self._frames.committed()
        return client_event(
            "input_audio_buffer.commit", final=final, response_create=response_create
        )

    def response_create(self, response: dict[str, Any] | None = None) -> dict[str, Any]:
        # Always send a response object: without one a refusal comes without the event_id echo.
        return client_event("response.create", response=response if response is not None else {})

    def response_cancel(self, response_id: str | None = None) -> dict[str, Any]:
        return client_event("response.cancel", response_id=response_id)

    def input_audio_buffer_clear(self) -> dict[str, Any]:
        if self._frames is not None:
            self._frames.cleared()
        return client_event("input_audio_buffer.clear")

    def output_audio_buffer_clear(self, response_id: str | None = None) -> dict[str, Any]:
        return client_event("output_audio_buffer.clear", response_id=response_id)

    def barge_in(self) -> dict[str, Any]:
        return client_event("barge_in")

    def playback_ack(
        self, response_id: str, played_ms: float, committed_ms: float | None = None
    ) -> dict[str, Any]:
        """``playback.ack``; ``played_ms`` must come from a playback clock, never from bytes
        received (docs/metrics.md). ``committed_ms`` defaults to ``played_ms`` as on the server."""
        played = int(played_ms)
        return client_event(
            "playback.ack",
            response_id=response_id,
            item_id=ids.assistant_item_id(response_id),
            played_ms=played,
            committed_ms=int(committed_ms) if committed_ms is not None else played,
        )

    def item_truncate(
        self, item_id: str, audio_end_ms: float, content_index: int = 0
    ) -> dict[str, Any]:
        """``conversation.item.truncate``, clamped to the audio received for that item: the
        listener cannot have heard more than arrived (and the server rejects a cut beyond the
        item's audio)."""
        rid = _response_id_of_item(item_id)
        track = self.responses.get(rid) if rid else None
        end = max(0.0, audio_end_ms)
        if track is not None:
            end = min(end, track.audio_ms)
        return client_event(
            "conversation.item.truncate",
            item_id=item_id,
            content_index=content_index,
            audio_end_ms=int(end),
        )

    def text_item(self, text: str, role: str = "user") -> dict[str, Any]:
        """``conversation.item.create`` with one text part (a text-only turn)."""
        part = "input_text" if role == "user" else "text"
        item = {"type": "message", "role": role, "content": [{"type": part, "text": text}]}
        return client_event("conversation.item.create", item=item)

    def function_call_output(self, call_id: str, output: str) -> dict[str, Any]:
        """``conversation.item.create`` answering tool call ``call_id`` (§13.4): ``output`` is
        a string (JSON text or not); no ``response.create`` follows it."""
        item = {"type": "function_call_output", "call_id": call_id, "output": output}
        return client_event("conversation.item.create", item=item)

    def heartbeat(self) -> dict[str, Any]:
        return client_event("session.heartbeat")

    def event_ack(self, seq: int | None = None) -> dict[str, Any]:
        """``session.event_ack`` for ``seq`` (default: everything processed)."""
        value = self.last_seq if seq is None else min(seq, self.last_seq)
        return client_event("session.event_ack", server_event_seq=value)

    def close(self, reason: str = "client_close") -> dict[str, Any]:
        return client_event("session.close", reason=reason)

    def resume(self) -> dict[str, Any]:
        """``session.resume`` naming the last *processed* seq (never more, §6.6)."""
        if self.session_id is None or self.resume_token is None:
            raise SessionStateError("cannot resume: no session id or resume token yet")
        return client_event(
            "session.resume",
            session_id=self.session_id,
            resume_token=self.resume_token,
            last_received_server_event_seq=self.last_seq,
        )


_HANDLERS: Final = {
    "session.created": ClientSession._on_created,
    "session.updated": ClientSession._on_updated,
    "session.resumed": ClientSession._on_resumed,
    "session.closed": ClientSession._on_closed,
    "session.expired": ClientSession._on_expired,
    "session.replaced": ClientSession._on_replaced,
    "session.resync_required": ClientSession._on_resync,
    "session.heartbeat_ack": ClientSession._on_heartbeat_ack,
    "error": ClientSession._on_error,
    "input_audio_buffer.speech_started": ClientSession._on_speech_started,
    "input_audio_buffer.speech_stopped": ClientSession._on_speech_stopped,
    "input_audio_buffer.committed": ClientSession._on_committed,
    "response.created": ClientSession._on_response_created,
    "response.speak": ClientSession._on_speak,
    names.AUDIO_DELTA: ClientSession._on_audio_delta,
    names.TRANSCRIPT_DELTA: ClientSession._on_transcript_delta,
    names.TEXT_DELTA: ClientSession._on_text_delta,
    "response.done": ClientSession._on_response_done,
    "response.listen": ClientSession._on_listen,
    "response.output_item.added": ClientSession._on_output_item_added,
    "response.function_call_arguments.done": ClientSession._on_function_call,
    "overlap.decision": ClientSession._on_overlap,
    "playback.acknowledged": ClientSession._on_playback_acknowledged,
}
