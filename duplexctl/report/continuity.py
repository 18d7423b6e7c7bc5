"""Audio continuity as vLLM-Omni defines it, per response and per session (docs/metrics.md
"Audio continuity").

Per response: ``audio_underrun_ms`` (the worst deficit of a player that starts at the first
chunk: :mod:`duplexctl.audio.playback`), and for each threshold T whether it stayed at or
under T (vLLM-Omni's ``is_continuous``: ``max_underrun_s <= threshold_s``). A response that
was never measured — no audio at all, or audio cut before any of it played — is **not
measured**: counted apart, by why, and in no OK rate. vLLM-Omni's bench counted such a
response as continuous by default, so a path that recorded no chunk times printed 100 % for
every tree (vllm-project/vllm-omni#6914); here no response is ever OK without a measurement.

Per session: its real-time factor, the mean of its responses' ``rtf_omni`` (vLLM-Omni's
duplex session ``rtf``, a mean over the session's audio responses), and whether it is below
1; a session with no audio response has none and is counted apart.

Everything is counts in the run's tally (``continuity.*``), so workers and saved runs add
up exactly and every rate is recomputed from them. A frame-accounting block for frame-locked
lanes goes beside this one the same way: its own module, its own ``frames.*`` counts and
report section, its per-response and per-session blocks next to ``continuity`` in
``turns.jsonl`` and ``sessions.jsonl``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from duplexctl.report.histogram import HistogramSet
from duplexctl.report.turns import TurnRecord

#: the thresholds of vLLM-Omni's default (100 ms) and the rival engine's (50 / 100 / 200 ms)
DEFAULT_THRESHOLDS_MS: Final = (50, 100, 200)
#: vLLM-Omni's ``AUDIO_CONTINUITY_DEFAULT_THRESHOLD_S`` (its one "Streaming continuity OK rate")
VLLM_OMNI_THRESHOLD_MS: Final = 100
MAX_THRESHOLDS: Final = 8
NO_AUDIO: Final = "no_audio"
CUT_BEFORE_PLAYING: Final = "cut_before_playing"
PREFIX: Final = "continuity."
#: the run-level scalar of a threshold (``--slo "continuity_ok_rate_100>=99%"``)
RATE_PREFIX: Final = "continuity_ok_rate_"
SESSION_RTF_RATE: Final = "session_rtf_below_1_rate"


def parse_thresholds(text: str | Sequence[int] | None) -> tuple[int, ...]:
    """``"50,100,200"`` → (50, 100, 200); ``ValueError`` naming the problem (whole ms,
    1 to 60000, at most :data:`MAX_THRESHOLDS`, no repeats)."""
    if text is None:
        return DEFAULT_THRESHOLDS_MS
    items = [str(x).strip() for x in (text.split(",") if isinstance(text, str) else text)]
    values: list[int] = []
    for item in items:
        raw = item.removesuffix("ms").strip()
        if not raw.isdigit() or not 1 <= int(raw) <= 60000:
            raise ValueError(
                f"{item!r} is not a threshold: whole milliseconds from 1 to 60000, e.g. 50,100,200"
            )
        values.append(int(raw))
    if not values:
        raise ValueError("give at least one threshold, e.g. 50,100,200")
    if len(set(values)) != len(values):
        raise ValueError(f"{','.join(items)}: a threshold is repeated")
    if len(values) > MAX_THRESHOLDS:
        raise ValueError(f"at most {MAX_THRESHOLDS} thresholds")
    return tuple(sorted(values))


@dataclass(frozen=True, slots=True)
class Verdict:
    """One response's continuity: measured or why not, its worst underrun, OK per threshold."""

    audio_underrun_ms: float | None
    not_measured: str | None  # NO_AUDIO | CUT_BEFORE_PLAYING | None (measured)
    ok: Mapping[int, bool] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The response's ``continuity`` block of ``turns.jsonl``."""
        return {
            "measured": self.not_measured is None,
            "not_measured": self.not_measured,
            "audio_underrun_ms": self.audio_underrun_ms,
            "ok": {str(t): v for t, v in self.ok.items()} if self.not_measured is None else None,
        }


def judge(record: TurnRecord, thresholds: Iterable[int]) -> Verdict:
    """A response's verdict from its figures (``report/turns.py`` computes
    ``audio_underrun_ms`` only for a response whose audio played)."""
    figure = record.figures.get("audio_underrun_ms")
    if figure is None:
        why = NO_AUDIO if "audio_ms" not in record.figures else CUT_BEFORE_PLAYING
        return Verdict(None, why)
    worst = float(figure.value)
    return Verdict(worst, None, {t: worst <= t for t in thresholds})


def count(counts: Counter[str], verdict: Verdict) -> None:
    """Add one response's verdict to the tally's counts."""
    counts[PREFIX + "responses"] += 1
    if verdict.not_measured is not None:
        counts[f"{PREFIX}not_measured.{verdict.not_measured}"] += 1
        return
    counts[PREFIX + "measured"] += 1
    for t, ok in verdict.ok.items():
        counts[f"{PREFIX}judged.{t}"] += 1
        counts[f"{PREFIX}ok.{t}"] += int(ok)


@dataclass(slots=True)
class SessionContinuity:
    """What one session adds up of its responses: the ``continuity`` block of its
    ``sessions.jsonl`` line (frame accounting's block goes beside it)."""

    responses: int = 0
    not_measured: int = 0
    worst_audio_underrun_ms: float | None = None
    rtf_sum: float = 0.0
    rtf_n: int = 0

    def add(self, record: TurnRecord, verdict: Verdict) -> None:
        self.responses += 1
        if verdict.not_measured is not None:
            self.not_measured += 1
        elif verdict.audio_underrun_ms is not None:
            worst = self.worst_audio_underrun_ms
            self.worst_audio_underrun_ms = max(worst or 0.0, verdict.audio_underrun_ms)
        rtf = record.figures.get("rtf_omni")
        if rtf is not None and math.isfinite(float(rtf.value)):
            self.rtf_sum += float(rtf.value)
            self.rtf_n += 1

    @property
    def rtf(self) -> float | None:
        """The session's real-time factor: the mean of its responses' ``rtf_omni``."""
        return self.rtf_sum / self.rtf_n if self.rtf_n else None

    def to_json(self) -> dict[str, Any]:
        rtf = self.rtf
        return {
            "responses": self.responses,
            "not_measured": self.not_measured,
            "worst_audio_underrun_ms": self.worst_audio_underrun_ms,
            "rtf": None if rtf is None else round(rtf, 6),
            "rtf_responses": self.rtf_n,
        }


def count_session(counts: Counter[str], session: SessionContinuity) -> float | None:
    """Add one finished session to the counts; returns its RTF (None: not measured)."""
    rtf = session.rtf
    if rtf is None:
        counts[PREFIX + "sessions_rtf_not_measured"] += 1
        return None
    counts[PREFIX + "sessions_rtf"] += 1
    counts[PREFIX + "sessions_rtf_below_1"] += int(rtf < 1.0)
    return rtf


def thresholds_in(counts: Mapping[str, int]) -> list[int]:
    """The thresholds the counts were judged at (a merged run: every one any run used)."""
    out = set()
    for key in counts:
        if key.startswith(PREFIX + "judged."):
            out.add(int(key.rsplit(".", 1)[1]))
    return sorted(out)


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def scalars(counts: Mapping[str, int]) -> dict[str, float | None]:
    """The run-level rates ``--slo`` can name: ``continuity_ok_rate_<T>`` per threshold
    judged, ``session_rtf_below_1_rate``; None where nothing was measured."""
    out: dict[str, float | None] = {
        f"{RATE_PREFIX}{t}": _rate(counts.get(f"{PREFIX}ok.{t}", 0), counts[f"{PREFIX}judged.{t}"])
        for t in thresholds_in(counts)
    }
    out[SESSION_RTF_RATE] = _rate(
        counts.get(PREFIX + "sessions_rtf_below_1", 0), counts.get(PREFIX + "sessions_rtf", 0)
    )
    return out


def section(counts: Mapping[str, int], headline: HistogramSet) -> dict[str, Any]:
    """report.json's ``continuity`` section: the counts each rate is taken over, the rates,
    and the percentiles of the two distributions (over responses, over sessions)."""
    thresholds = thresholds_in(counts)
    not_measured = {
        key.removeprefix(PREFIX + "not_measured."): n
        for key, n in sorted(counts.items())
        if key.startswith(PREFIX + "not_measured.") and n
    }
    rates = scalars(counts)

    def summary(name: str) -> dict[str, Any] | None:
        hist = headline.get(name)
        if hist is None or not hist.count:
            return None
        d = hist.to_dict()
        return {k: d[k] for k in ("n", "p50", "p90", "p95", "p99", "max", "mean", "p99_low_n")}

    return {
        "thresholds_ms": thresholds,
        "responses": counts.get(PREFIX + "responses", 0),
        "measured": counts.get(PREFIX + "measured", 0),
        "not_measured": not_measured,
        "ok": {str(t): counts.get(f"{PREFIX}ok.{t}", 0) for t in thresholds},
        "judged": {str(t): counts.get(f"{PREFIX}judged.{t}", 0) for t in thresholds},
        "ok_rate": {str(t): rates[f"{RATE_PREFIX}{t}"] for t in thresholds},
        "audio_underrun_ms": summary("audio_underrun_ms"),
        "sessions": {
            "with_rtf": counts.get(PREFIX + "sessions_rtf", 0),
            "rtf_below_1": counts.get(PREFIX + "sessions_rtf_below_1", 0),
            "not_measured": counts.get(PREFIX + "sessions_rtf_not_measured", 0),
            "rtf_below_1_rate": rates[SESSION_RTF_RATE],
        },
        "session_rtf": summary("session_rtf"),
    }


def server_lines(audio: Mapping[str, Any] | None) -> list[str]:
    """The server's own continuity figures (``server_metrics.audio``), one line, beside the
    client's; nothing when the server exposes none."""
    if not audio:
        return []
    from duplexctl.prometheus.summary import histogram_text
    from duplexctl.report.summary import format_value

    bits = []
    if audio.get("audio_underrun_s"):
        bits.append("audio_underrun_s " + histogram_text(audio["audio_underrun_s"], unit="s"))
    for t, rate in sorted(audio.get("continuity_ok_rate", {}).items()):
        text = "not measured" if rate is None else f"{format_value(rate * 100)}%"
        bits.append(f"continuity OK at {t} ms {text}")
    if audio.get("audio_rtf"):
        bits.append("audio_rtf " + histogram_text(audio["audio_rtf"], unit=""))
    return ["the server's own (vllm_omni:*): " + "; ".join(bits)]


def lines(cont: Mapping[str, Any], server: Mapping[str, Any] | None = None) -> list[str]:
    """The summary's continuity lines: the worst-underrun percentiles, each threshold's OK
    rate with its n, what was not measured, the sessions' RTF; then the server's own."""
    if not cont or not cont.get("responses"):
        return server_lines(server)
    from duplexctl.report.summary import format_value

    out = []
    worst = cont.get("audio_underrun_ms")
    measured = cont.get("measured", 0)
    head = "audio continuity (vLLM-Omni's definition): "
    if worst:
        head += (
            f"audio_underrun_ms p50 {format_value(worst['p50'])} · p95 "
            f"{format_value(worst['p95'])} · max {format_value(worst['max'])} (n={worst['n']})"
        )
    else:
        head += "audio_underrun_ms not measured (no response played audio)"
    out.append(head)
    oks = []
    for t in cont.get("thresholds_ms", []):
        rate = cont["ok_rate"].get(str(t))
        text = "not measured" if rate is None else f"{format_value(rate * 100)}%"
        oks.append(f"{t} ms {text}")
    nm = cont.get("not_measured") or {}
    not_measured = sum(nm.values())
    tail = f" of {measured} measured response{'' if measured == 1 else 's'}"
    if not_measured:
        why = ", ".join(f"{k.replace('_', ' ')} {n}" for k, n in nm.items())
        tail += f"; {not_measured} not measured ({why}), counted in no rate"
    if oks:
        out.append("continuity OK at " + ", ".join(oks) + tail)
    s = cont.get("sessions") or {}
    rtf = cont.get("session_rtf")
    if s.get("with_rtf") or s.get("not_measured"):
        rate = s.get("rtf_below_1_rate")
        line = (
            f"session RTF < 1: {'not measured' if rate is None else f'{format_value(rate * 100)}%'}"
            f" of {s.get('with_rtf', 0)} session{'' if s.get('with_rtf', 0) == 1 else 's'}"
        )
        if rtf:
            line += (
                f" (session_rtf p50 {format_value(rtf['p50'])} · p95 {format_value(rtf['p95'])})"
            )
        if s.get("not_measured"):
            n = s["not_measured"]
            line += f"; {n} session{'' if n == 1 else 's'} without an audio response, not counted"
        out.append(line)
    return out + server_lines(server)
