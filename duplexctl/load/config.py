"""What one ``duplexctl load`` run is asked to do, validated before any socket opens.

:class:`LoadConfig` is a plain, picklable dataclass of parts, one per concern — the target,
what sessions say, the load's shape, its judging (SLOs, the capacity search), the output, the
embedded server and the workers — so code that needs one concern takes that part. The CLI
builds it, worker processes receive their share of it (:meth:`LoadConfig.share`), and
``report.json`` echoes it in full (:meth:`LoadConfig.echo`), so a run can be reproduced from
its report. Session and turn
settings are resolved when it is built, by the one resolver every command uses
(:mod:`duplexctl.resolver`: defaults < scenario < ``--session`` < flags); every other check
that can fail on user input happens in :meth:`LoadConfig.validate`. Both raise ``BadInput``
with one line, before a ten-minute run starts.

Behaviour mix (``--mix barge_in=0.2,cancel=0.1,drop_resume=0.05,tool_call=0.3``): per
*turn*, with those probabilities, the answer is interrupted by speech (barge-in), cancelled
with ``response.cancel``, or the socket is dropped during it and the session resumed, or the
turn is a tool-call turn (the model is expected to call one of ``--tools``, answered from
``--tool-outputs``: docs/protocol.md §13.4); the rest of the turns are plain. Draws come from a per-session generator seeded from the run's seed, so
the same seed gives the same behaviour sequence.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from duplexctl.client.target import TlsPolicy
from duplexctl.errors import BadInput
from duplexctl.export.options import PushOptions
from duplexctl.prometheus.endpoints import ScrapeOptions
from duplexctl.report.continuity import DEFAULT_THRESHOLDS_MS, RATE_PREFIX
from duplexctl.resolver import FLAGS, Command, RunSettings, resolve
from duplexctl.values import input_file

MIX_KINDS: Final = ("barge_in", "cancel", "drop_resume", "tool_call")
#: sessions joining each level of a sweep, one after the other, once the level is steady:
#: ten give a p50 and a p90 that are distinct order statistics, and ten joins of one turn
#: (about 4 s each with the bundled turns) fit in a 60 s step after the level is steady
JOIN_SAMPLES: Final = 10
MAX_SWEEP_LEVELS: Final = 32
# The session and turn settings load takes as flags (Conversation.flags).
SETTING_FIELDS: Final = FLAGS[Command.LOAD]


@dataclass(frozen=True, slots=True)
class Mix:
    """Per-turn probabilities of each scripted interruption (the rest: plain turns)."""

    barge_in: float = 0.0
    cancel: float = 0.0
    drop_resume: float = 0.0
    tool_call: float = 0.0

    @classmethod
    def parse(cls, text: str | None) -> Mix:
        """``"barge_in=0.2,cancel=0.1"`` → Mix; ``BadInput`` naming the problem."""
        if text is None or not text.strip():
            return cls()
        values: dict[str, float] = {}
        for item in text.split(","):
            name, sep, raw = item.strip().partition("=")
            name = name.strip()
            if not sep:
                raise BadInput(f"--mix {text!r}: {item.strip()!r} is not name=probability")
            if name not in MIX_KINDS:
                raise BadInput(f"--mix: unknown behaviour {name!r} (known: {', '.join(MIX_KINDS)})")
            try:
                p = float(raw)
            except ValueError:
                raise BadInput(f"--mix: {name}={raw.strip()!r} is not a number") from None
            if not (0.0 <= p <= 1.0) or not math.isfinite(p):
                raise BadInput(f"--mix: {name}={p:g} is not a probability (0..1)")
            values[name] = p
        mix = cls(**values)
        if mix.total > 1.0 + 1e-9:
            raise BadInput(f"--mix: probabilities add up to {mix.total:g} > 1")
        return mix

    @property
    def total(self) -> float:
        return self.barge_in + self.cancel + self.drop_resume + self.tool_call

    def pick(self, u: float) -> str | None:
        """The behaviour for a uniform draw ``u`` in [0, 1): a MIX_KINDS name or None."""
        edge = 0.0
        for name in MIX_KINDS:
            edge += getattr(self, name)
            if u < edge:
                return name
        return None

    def __str__(self) -> str:
        parts = [f"{n}={getattr(self, n):g}" for n in MIX_KINDS if getattr(self, n) > 0]
        return ",".join(parts) or "none"


def parse_sweep(text: str) -> tuple[int, ...]:
    """``"1,2,4,8,16"`` → (1, 2, 4, 8, 16): whole numbers of sessions ≥ 1, rising, at most
    :data:`MAX_SWEEP_LEVELS`; ``BadInput`` naming the problem."""
    levels: list[int] = []
    for item in text.split(","):
        raw = item.strip()
        if not raw.isdigit() or int(raw) < 1:
            raise BadInput(
                f"--sweep {text!r}: {raw!r} is not a number of sessions (whole, >= 1), "
                "e.g. --sweep 1,2,4,8,16"
            )
        levels.append(int(raw))
    if sorted(set(levels)) != levels:
        raise BadInput(f"--sweep {text!r}: levels must rise, each once, e.g. --sweep 1,2,4,8,16")
    if len(levels) > MAX_SWEEP_LEVELS:
        raise BadInput(f"--sweep {text!r}: at most {MAX_SWEEP_LEVELS} levels")
    return tuple(levels)


def workers_for(
    workers: int | None, *, ray: str | None, workers_per_node: int | None
) -> dict[str, Any]:
    """``workers`` and ``workers_per_node`` from the flags, the one place their defaults are
    decided: locally one worker per core; on a Ray cluster ``--workers N`` actors spread
    over the nodes, or ``--workers-per-node K`` on every node (default: one per node, the
    count fixed by :func:`duplexctl.load.cluster.connect.place` once the nodes are known)."""
    if ray is None:
        import os

        if workers_per_node is not None:
            raise BadInput("--workers-per-node needs --ray (it places Ray workers)")
        return {"workers": workers if workers is not None else (os.cpu_count() or 1)}
    if workers is not None and workers_per_node is not None:
        raise BadInput("give --workers N or --workers-per-node K, not both")
    if workers is not None:
        return {"workers": workers, "workers_per_node": None}
    return {"workers": 1, "workers_per_node": workers_per_node or 1}


def split_ramp(spec: str, index: int, workers: int, *, closed_loop: bool) -> str:
    """Worker ``index`` of ``workers``'s part of a ``--ramp``, so that the workers together
    offer exactly the ramp asked for.

    Open loop: the rate divided by ``workers`` (each worker thins the arrival process with
    its own seed; the union is the requested process). Closed loop: the users are dealt
    round-robin (global user ``j = k·workers + index`` is the worker's user ``k``) and user
    ``j`` runs while ``floor(target) > j`` (:meth:`Ramp.level_at`), so the worker's target
    is ``(target − index − 1)/workers + 1``: its ``floor`` exceeds ``k`` exactly when the
    whole ramp's exceeds ``j``. Dividing the target instead lost users (a peak of 5 over 2
    workers ran 2 + 2) and started them late. Where that line drops below 0 it is cut at 0
    (a ramp's targets are >= 0), with the crossing point added so the rise keeps its time.
    """
    from duplexctl.load.arrivals import Ramp

    points = Ramp.parse(spec).points
    if not closed_loop:
        mine = [(t, target / workers) for t, target in points]
    else:
        line = [(t, (target - index - 1) / workers + 1) for t, target in points]
        mine = [line[0]]
        for (t0, v0), (t1, v1) in itertools.pairwise(line):
            if (v0 < 0) != (v1 < 0):  # crosses 0 between the two points
                mine.append((t0 + (t1 - t0) * (0 - v0) / (v1 - v0), 0.0))
            mine.append((t1, v1))
    return ",".join(f"{t:.12g}s:{max(0.0, target):.12g}" for t, target in mine)


@dataclass(frozen=True, slots=True)
class Target:
    """Which server: ``--url`` (None: the embedded reference server) and its credential."""

    url: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never echoed, never written
    # how wss:// servers are trusted (--ca-file, --insecure): carried to every worker
    # process and Ray actor with the rest of the run, which install it there (use_tls)
    tls: TlsPolicy = field(default_factory=TlsPolicy)

    def check(self) -> None:
        if self.url is not None and not self.url.startswith(("ws://", "wss://")):
            raise BadInput(f"--url must be a ws:// or wss:// URL, not {self.url!r}")


@dataclass(frozen=True, slots=True)
class Conversation:
    """What each session says and the session settings it says it with.

    ``flags`` are the command line's session and turn settings by name (:data:`SETTING_FIELDS`;
    None = not given); :class:`LoadConfig` resolves them with the scenario and ``--session``.
    """

    inputs: tuple[str, ...] = ()  # WAVs or one scenario; () = the bundled turns
    flags: Mapping[str, Any] = field(default_factory=dict)
    session_file: str | None = None

    def check(self) -> None:
        takes = "WAV files or one scenario .toml (a directory of scenarios runs in replay)"
        for path in self.inputs:
            try:
                input_file(path, takes=takes)
            except ValueError as exc:
                raise BadInput(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Shape:
    """The load offered: closed loop (``sessions`` at once) or open loop (``rate`` new
    sessions per second, ``arrival`` process), a ``ramp`` of either, how the run ends
    (``duration_s`` after ``warmup_s``, ``count``, the ramp's end) and the per-turn ``mix``."""

    sessions: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    seed: int | None = None
    max_concurrency: int | None = None
    ramp: str | None = None
    duration_s: float | None = None
    count: int | None = None
    warmup_s: float = 0.0
    mix: Mix = field(default_factory=Mix)
    # --stagger: each user's first session begins elsewhere in its conversation
    stagger: bool = False
    # a worker's users among all (share): (first, step, of) = its users are the global users
    # first, first+step, … of ``of``; None: this process runs them all
    user_numbering: tuple[int, int, int] | None = None
    # the step a config runs (set by load/search.py): (level, try); its JSONL lines say so
    step: tuple[int, int] | None = None

    @property
    def closed_loop(self) -> bool:
        return self.rate is None

    def check(self, *, stepped: bool) -> None:
        """BadInput (one line) for a shape no run could take (``stepped``: a capacity search
        or a sweep sets the level of each step itself)."""
        if self.sessions is not None and self.rate is not None:
            raise BadInput("--sessions (closed loop) and --rate (open loop) exclude each other")
        if self.stagger and (self.rate is not None or self.ramp is not None):
            raise BadInput("--stagger staggers the N users of a closed loop: drop --rate / --ramp")
        find_capacity = stepped
        if not find_capacity and self.sessions is None and self.rate is None:
            if self.ramp is not None:
                raise BadInput(
                    f"--ramp {self.ramp} needs --sessions or --rate to say what its targets "
                    "count: with --sessions, sessions at once (closed loop); with --rate, new "
                    "sessions per second (open loop); the ramp then sets the level over time"
                )
            raise BadInput(
                "give --sessions N (closed loop), --rate R (open loop) or --sweep LEVELS"
            )
        if self.sessions is not None and self.sessions < 1:
            raise BadInput(f"--sessions must be at least 1, not {self.sessions}")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise BadInput(f"--rate must be > 0 sessions/s, not {self.rate:g}")
        ends = self.duration_s is not None or self.count is not None or self.ramp is not None
        if not find_capacity and not ends:
            raise BadInput("give --duration or --count so the run ends by itself")
        if self.duration_s is not None and self.duration_s <= 0:
            raise BadInput(f"--duration must be > 0, not {self.duration_s:g}")
        if self.count is not None and self.count < 1:
            raise BadInput(f"--count must be at least 1, not {self.count}")
        if self.warmup_s < 0:
            raise BadInput("--warmup must be >= 0")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise BadInput(f"--max-concurrency must be at least 1, not {self.max_concurrency}")
        if self.arrival not in ARRIVALS:
            raise BadInput(f"--arrival must be {', '.join(ARRIVALS)}, not {self.arrival!r}")
        if self.arrival != "gamma" and self.burstiness != 1.0:
            raise BadInput("--burstiness applies to --arrival gamma only")
        if self.ramp is not None:
            from duplexctl.load.arrivals import Ramp

            try:
                Ramp.parse(self.ramp)
            except ValueError as exc:
                raise BadInput(f"--ramp: {exc}") from None

    def share(self, index: int, workers: int) -> Shape:
        """Worker ``index``'s part (sessions, rate, count, concurrency split as evenly as
        integers allow; each worker its own seed stream)."""

        def split(total: int) -> int:
            return total // workers + (1 if index < total % workers else 0)

        return dataclasses.replace(
            self,
            sessions=None if self.sessions is None else split(self.sessions),
            # user k of worker index is the global user index + k*workers (as split_ramp)
            user_numbering=None if self.sessions is None else (index, workers, self.sessions),
            rate=None if self.rate is None else self.rate / workers,
            count=None if self.count is None else split(self.count),
            max_concurrency=None
            if self.max_concurrency is None
            else max(1, split(self.max_concurrency)),
            ramp=None
            if self.ramp is None
            else split_ramp(self.ramp, index, workers, closed_loop=self.rate is None),
            seed=None if self.seed is None else self.seed + 1_000_003 * index,
        )


ARRIVALS: Final = ("constant", "poisson", "gamma")


@dataclass(frozen=True, slots=True)
class Capacity:
    """How the run is judged: ``slos`` (k6-style thresholds), and the capacity search
    (``find_capacity``: step the level up from ``capacity_start``, at most ``max_level``,
    ``step_duration_s`` a step, then bisect; the slot-release measurement)."""

    slos: tuple[str, ...] = ()
    find_capacity: bool = False
    step_duration_s: float = 20.0
    max_level: int = 256
    capacity_start: int = 1
    measure_slot_release: bool = False
    no_slot_release: bool = False  # --find-capacity without its slot-release measurement
    # level sweep (--sweep 1,2,4,8,16): fixed levels, each a step (load/search.py)
    sweep: tuple[int, ...] | None = None
    # sessions that join N in steady state, one after the other (engine.py); None: the
    # default (JOIN_SAMPLES with --sweep, none otherwise)
    join_samples: int | None = None
    # continuity-OK thresholds, ms (report/continuity.py)
    continuity_thresholds_ms: tuple[int, ...] = DEFAULT_THRESHOLDS_MS

    @property
    def stepped(self) -> bool:
        """The run is a capacity search or a sweep: steps set their own level."""
        return self.find_capacity or self.sweep is not None

    @property
    def joins(self) -> int:
        """Sessions that join the N running ones (0: none), the default resolved."""
        if self.join_samples is not None:
            return self.join_samples
        return JOIN_SAMPLES if self.sweep else 0

    def check(self, shape: Shape) -> None:
        if self.sweep is not None:
            given = [
                flag
                for flag, value in (
                    ("--find-capacity", self.find_capacity),
                    ("--sessions", shape.sessions is not None),
                    ("--rate", shape.rate is not None),
                    ("--ramp", shape.ramp is not None),
                    ("--count", shape.count is not None),
                    ("--duration", shape.duration_s is not None),
                )
                if value
            ]
            if given:
                raise BadInput(
                    f"--sweep runs fixed levels of --step-duration each: drop {', '.join(given)}"
                )
            if not self.sweep:
                raise BadInput("--sweep needs levels, e.g. --sweep 1,2,4,8,16")
        if self.join_samples is not None:
            if self.join_samples < 0:
                raise BadInput("--join-samples must be >= 0 (0: no joining session)")
            if shape.rate is not None or self.find_capacity or shape.ramp is not None:
                raise BadInput(
                    "--join-samples joins N sessions in steady state: it needs --sweep or "
                    "--sessions N (closed loop, no --ramp)"
                )
        if self.find_capacity and shape.count is not None:
            raise BadInput("--find-capacity runs timed steps: drop --count")
        if self.no_slot_release and self.measure_slot_release:
            raise BadInput("--no-slot-release and --measure-slot-release exclude each other")
        if self.step_duration_s <= 0:
            raise BadInput("--step-duration must be > 0")
        if self.max_level < 1:
            raise BadInput(f"--max-level must be at least 1, not {self.max_level}")
        if self.slos:
            from duplexctl.report.slo import parse_slos

            try:
                parsed = parse_slos(list(self.slos))
            except ValueError as exc:
                raise BadInput(str(exc)) from None
            for slo in parsed:  # a threshold the run does not judge: no run could pass it
                if slo.metric.startswith(RATE_PREFIX):
                    t = int(slo.metric.removeprefix(RATE_PREFIX))
                    if t not in self.continuity_thresholds_ms:
                        raise BadInput(
                            f"SLO {slo.expr!r}: {t} ms is not a --continuity-thresholds value "
                            f"({','.join(map(str, self.continuity_thresholds_ms))})"
                        )


@dataclass(frozen=True, slots=True)
class Output:
    """What the run writes and prints: the ``--out`` directory, ``--json``, the live view,
    the time slices, ``--junit``, the server's /metrics scraped, ``--prometheus-rw``."""

    out: Path | None = None
    overwrite: bool = False  # --out: replace the run in a non-empty directory (rundir)
    json_output: bool = False
    live: bool | None = None  # None: rich dashboard when stdout is a TTY
    slice_s: float = 10.0
    status_interval_s: float = 1.0
    junit: Path | None = None  # --junit FILE: a test case per SLO and per capacity level
    # server metrics: --server-metrics / --no-server-metrics / --scrape-interval, checked
    scrape: ScrapeOptions = field(default_factory=ScrapeOptions)
    # --prometheus-rw URL (+ interval, histograms): the figures pushed as the run goes
    push: PushOptions | None = None

    def check(self) -> None:
        if not (self.slice_s > 0 and math.isfinite(self.slice_s)):
            raise BadInput(f"--slice must be > 0, not {self.slice_s:g}")


@dataclass(frozen=True, slots=True)
class EmbeddedServer:
    """The reference server started in-process when there is no ``--url``: ServerConfig
    fields (``--server-option``, ``--server-max-sessions`` …), echoed in the report;
    ``spelled`` names the option that set each (for a message about its value)."""

    settings: Mapping[str, Any] = field(default_factory=dict)
    spelled: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Execution:
    """Where and how the sessions run: ``workers`` processes (or Ray actors on ``ray``),
    the event loop, the append grid, the open and close timeouts."""

    workers: int = 1
    # --ray ADDRESS: the workers are Ray actors on that cluster (load/cluster); None: local
    ray: str | None = None
    workers_per_node: int | None = None  # --ray: pin this many workers on every node
    uvloop: bool = True
    send_phases: int = 10  # appends go out on this many instants per chunk (audio.sendgrid)
    open_timeout_s: float = 30.0
    close_timeout_s: float = 10.0

    def check(self, chunk_ms: int) -> None:
        if self.workers < 1:
            raise BadInput(f"--workers must be at least 1, not {self.workers}")
        if self.workers_per_node is not None:
            if self.ray is None:
                raise BadInput("--workers-per-node needs --ray (it places Ray workers)")
            if self.workers_per_node < 1:
                raise BadInput("--workers-per-node must be at least 1")
        if self.ray is not None and not self.ray.strip():
            raise BadInput("--ray needs an address: auto, HOST:PORT or ray://HOST:PORT")
        if not 1 <= self.send_phases <= chunk_ms:
            raise BadInput(
                f"--send-phases must be between 1 and the chunk ({chunk_ms} ms), "
                f"got {self.send_phases}"
            )


@dataclass(slots=True)
class LoadConfig:
    """One load run, by concern: :class:`Target`, :class:`Conversation` (what sessions say),
    :class:`Shape` (the load offered), :class:`Capacity` (SLOs and the capacity search),
    :class:`Output`, :class:`EmbeddedServer`, :class:`Execution` (workers). Code that needs
    one concern takes that part. Times in seconds unless the name says otherwise.

    Building it resolves the session and turn settings (``conversation.flags`` with the
    scenario and ``--session``) into ``settings``, the values every session uses, with the
    origin of each; a copy made with ``dataclasses.replace`` keeps that resolution.
    """

    target: Target = field(default_factory=Target)
    conversation: Conversation = field(default_factory=Conversation)
    shape: Shape = field(default_factory=Shape)
    capacity: Capacity = field(default_factory=Capacity)
    output: Output = field(default_factory=Output)
    server: EmbeddedServer = field(default_factory=EmbeddedServer)
    execution: Execution = field(default_factory=Execution)
    # the resolved settings (resolver): set by __post_init__, kept by dataclasses.replace
    settings: RunSettings = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.settings is None:
            from duplexctl.load.script import scenario_for  # decodes nothing: parse only

            self.conversation.check()
            unknown = set(self.conversation.flags) - SETTING_FIELDS
            if unknown:
                raise TypeError(f"load has no setting {sorted(unknown)[0]!r}")  # a caller's bug
            self.settings = resolve(
                Command.LOAD,
                flags=dict(self.conversation.flags),
                scenario=scenario_for(list(self.conversation.inputs)).settings,
                session_file=self.conversation.session_file,
            )

    @property
    def chunk_ms(self) -> int:
        """The append size every session uses (resolved: load's default is 100)."""
        return int(self.settings["chunk_ms"])

    def validate(self) -> LoadConfig:
        """Raise ``BadInput`` (one line) for anything a run could not do."""
        self.target.check()
        self.shape.check(stepped=self.capacity.stepped)
        self.capacity.check(self.shape)
        self.output.check()
        self.execution.check(self.chunk_ms)
        if self.shape.mix.tool_call > 0 and (
            not self.settings["tools"] or not self.settings["tool_outputs"]
        ):
            raise BadInput(
                "--mix tool_call needs --tools FILE.json (the tools the model may call) and "
                "--tool-outputs FILE.json (what each one answers)"
            )
        return self

    # -- views ---------------------------------------------------------------------------

    def echo(self) -> dict[str, Any]:
        """The full configuration for report.json (the API key left out), one flat object
        as every report has shown it: each part's fields by name, then the settings used
        (with ``origin`` of each)."""
        out: dict[str, Any] = {"url": self.target.url}
        out["inputs"] = list(self.conversation.inputs)
        out["session_file"] = (
            None if self.conversation.session_file is None else str(self.conversation.session_file)
        )
        for part in (self.shape, self.capacity, self.output, self.execution):
            for f in dataclasses.fields(part):
                value = getattr(part, f.name)
                if isinstance(value, ScrapeOptions):
                    out.update(value.echo())
                elif isinstance(value, PushOptions):  # its URL without credentials
                    out[f.name] = value.echo()
                elif isinstance(value, Mix | Path):
                    out[f.name] = str(value)
                elif isinstance(value, tuple):
                    out[f.name] = list(value)
                else:
                    out[f.name] = value
        out["server_overrides"] = dict(self.server.settings)
        out.update(self.settings.echo())  # the settings used, with ``origin`` of each
        out["api_key_given"] = self.target.api_key is not None
        return out

    def share(self, index: int, workers: int) -> LoadConfig:
        """Worker ``index``'s part of the offered load (:meth:`Shape.share`), run by one."""
        return dataclasses.replace(
            self,
            shape=self.shape.share(index, workers),
            execution=dataclasses.replace(self.execution, workers=1),
        )


def embedded_server(
    *,
    max_sessions: int,
    gpu_slots: int,
    unit_compute_ms: float,
    options: list[str] | None = None,
    behaviour: Mapping[str, Any] | None = None,
) -> EmbeddedServer:
    """The embedded server's part from ``--server-max-sessions``, ``--server-gpu-slots``,
    ``--server-unit-compute-ms``, ``--server-option KEY=VALUE`` (each value typed as its
    field is; an unknown key is BadInput listing the keys) and ``--server-behaviour``
    (``behaviour``: as duplexctl.client.target.server_behaviour parsed it)."""
    from duplexctl.server.config import parse_option

    settings: dict[str, Any] = {
        "max_sessions": max_sessions,
        "gpu_slots": gpu_slots,
        "unit_compute_ms": unit_compute_ms,
    }
    spelled = {
        "max_sessions": "--server-max-sessions",
        "gpu_slots": "--server-gpu-slots",
        "unit_compute_ms": "--server-unit-compute-ms",
    }
    for item in options or []:
        key, value = parse_option(item)
        settings[key] = value
        spelled[key] = f"--server-option {key}"
    settings.update(behaviour or {})
    return EmbeddedServer(settings=settings, spelled=spelled)
