"""The replay page: the conversation on one timeline — the user's channel as sent and the
assistant's as heard, from ``conversation.wav``, with the wire events of ``events.jsonl``
marked where they happened — then each turn's figures with their measurement origins, the
expectations, and the conversation playable from the page.

Built from a replay ``--out`` directory alone, so ``replay --out`` (at the end, or on
Ctrl-C with what was recorded) and ``duplexctl report DIR --html FILE`` give the same page.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np

from duplexctl.behaviour.figures import ORIGINS as BEHAVIOUR_ORIGINS
from duplexctl.errors import BadInput
from duplexctl.report.html import charts, page
from duplexctl.rundir import Writes

USER: Final = "user (as sent)"
ASSISTANT: Final = "assistant (as heard)"
#: envelope bins across the whole conversation (min and max per bin and channel)
BINS: Final = 1200
#: (direction, event type) -> (mark, lane); the first audio delta of each response and
#: speech that starts while a response is live (a barge-in) are found in :func:`marks`
MARKS: Final = {
    ("recv", "input_audio_buffer.speech_started"): ("speech started", USER),
    ("recv", "input_audio_buffer.speech_stopped"): ("speech stopped", USER),
    ("send", "input_audio_buffer.commit"): ("commit", USER),
    ("recv", "response.created"): ("response.created", ASSISTANT),
    ("send", "response.cancel"): ("cancel", ASSISTANT),
    ("send", "conversation.item.truncate"): ("truncate", ASSISTANT),
    ("note", "playback.flush"): ("playback flushed", ASSISTANT),
    ("recv", "response.done"): ("response.done", ASSISTANT),
    ("note", "drop"): ("drop", USER),
    ("send", "session.resume"): ("resume sent", USER),
    ("recv", "session.resumed"): ("resumed", USER),
}
#: each behaviour figure's n: (the section's count, or the trials' list, and what it counts)
BEHAVIOUR_N: Final = {
    "takeover": ("pause_trials", "pauses"),
    "takeover_rate": ("pause_trials", "pauses"),
    "response_gap_ms": ("response_gaps_ms", "answered turn ends"),
    "no_response_rate": ("turn_ends", "real turn ends"),
    "stop_latency_ms": ("interruptions", "interruptions"),
    "backchannels_per_min": ("user_speech_ms", "ms of user speech"),
}
#: the conversation is embedded as FLAC: lossless, and the long silences cost next to nothing
AUDIO_MIME: Final = "audio/flac"


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """events.jsonl, line by line; a last line cut by a kill is skipped (the rest stands)."""
    if not path.is_file():
        return
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict) and "t_ms" in event:
                yield event


def marks(events: list[dict[str, Any]], turn_of: Mapping[str, int]) -> list[dict[str, Any]]:
    """The events worth seeing on the timeline, each with its lane, time and turn."""
    out: list[dict[str, Any]] = []
    live: str | None = None
    heard: set[str] = set()
    for e in events:
        key = (e.get("dir"), e.get("type"))
        body = e.get("event") or {}
        rid = str((body.get("response") or {}).get("id") or body.get("response_id") or live or "")
        name, lane = MARKS.get(key, (None, None))  # type: ignore[arg-type]
        if key == ("recv", "response.output_audio.delta") and rid and rid not in heard:
            heard.add(rid)
            name, lane = "first audio", ASSISTANT
        if key == ("recv", "input_audio_buffer.speech_started") and live is not None:
            name = "barge-in (speech started)"
        if key == ("recv", "response.created"):
            live = rid
        if name is None:
            continue
        detail = ""
        if key == ("recv", "response.done"):
            detail = str((body.get("response") or {}).get("status", ""))
            live = None
        out.append(
            {
                "t_s": round(float(e["t_ms"]) / 1000, 4),
                "event": name,
                "lane": lane,
                "turn": f"turn {turn_of[rid]}" if rid in turn_of else "",
                "detail": detail,
            }
        )
    return out


def turn_spans(events: list[dict[str, Any]], turn_of: Mapping[str, int]) -> list[dict[str, Any]]:
    """Each answered turn from response.created to response.done (or the run's end)."""
    start: dict[str, float] = {}
    spans = []
    end = max((float(e["t_ms"]) for e in events), default=0.0) / 1000
    for e in events:
        body = e.get("event") or {}
        rid = (body.get("response") or {}).get("id")
        if rid is None:
            continue
        if e.get("type") == "response.created":
            start[rid] = float(e["t_ms"]) / 1000
        elif e.get("type") == "response.done" and rid in start:
            t = float(e["t_ms"]) / 1000
            spans.append(
                {"start_s": start.pop(rid), "end_s": t, "turn": f"turn {turn_of.get(rid, '?')}"}
            )
    spans.extend(
        {"start_s": s, "end_s": end, "turn": f"turn {turn_of.get(r, '?')}"}
        for r, s in start.items()
    )
    return spans


def envelope(wav: Path) -> tuple[list[dict[str, Any]], float, int]:
    """Min/max per time bin of both channels of conversation.wav (-1..1), its length, rate."""
    import soundfile as sf

    data, rate = sf.read(str(wav), dtype="float32", always_2d=True)
    seconds = data.shape[0] / rate
    if data.shape[0] == 0:
        return [], 0.0, rate
    bins = min(BINS, data.shape[0])
    edges = np.linspace(0, data.shape[0], bins + 1).astype(int)
    rows = []
    for ch, channel in enumerate((USER, ASSISTANT)):
        if ch >= data.shape[1]:
            break
        col = data[:, ch]
        lo = np.minimum.reduceat(col, edges[:-1])
        hi = np.maximum.reduceat(col, edges[:-1])
        for i in range(bins):
            rows.append(
                {
                    "channel": channel,
                    "t_s": round(edges[i] / rate, 4),
                    "lo": round(float(lo[i]), 3),
                    "hi": round(float(hi[i]), 3),
                }
            )
    return rows, seconds, rate


def audio_uri(wav: Path) -> str:
    """conversation.wav as a FLAC data: URI, playable from the page with no file beside it."""
    import soundfile as sf

    data, rate = sf.read(str(wav), dtype="int16", always_2d=True)
    buf = io.BytesIO()
    sf.write(buf, data, rate, format="FLAC", subtype="PCM_16")
    return f"data:{AUDIO_MIME};base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def build(run_dir: Path) -> str:
    """The page of one replay --out directory."""
    report_path = run_dir / "report.json"
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"{report_path}: not a readable replay report ({exc})") from None
    turns = report.get("turns") or []
    turn_of = {t["response_id"]: t["index"] for t in turns if t.get("response_id")}
    events = list(read_events(run_dir / "events.jsonl"))
    wav = run_dir / "conversation.wav"
    rows: list[dict[str, Any]] = []
    seconds, audio = 0.0, None
    if wav.is_file() and wav.stat().st_size > 44:
        rows, seconds, _rate = envelope(wav)
        audio = audio_uri(wav)
    found = marks(events, turn_of)
    x_max = max([seconds, *(m["t_s"] for m in found)], default=1.0) or 1.0
    specs = {}
    if rows or found:
        specs["timeline"] = charts.waveform_timeline(
            rows, found, turn_spans(events, turn_of), x_max=x_max
        )
    verdict, flags = verdict_of(report)
    return page.render_verdict(
        "replay.html.j2",
        command="replay",
        charts=specs,
        r=report,
        verdict=verdict,
        flags=flags,
        turns=turns,
        audio=audio,
        seconds=seconds,
        mark_counts=_counts(found),
        failures=[
            *(expectation_text(e) for e in (report.get("expectations") or {}).get("failed") or []),
            *(
                expectation_text(e, reached=False)
                for e in (report.get("expectations") or {}).get("not_reached") or []
            ),
        ],
        behaviour=behaviour_rows(report.get("behaviour") or {}),
    )


def behaviour_rows(section: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's ``behaviour`` section as rows (figure, value, n, note, origin), in the order
    of docs/metrics.md; a figure with no trial (no pause, no interruption) is shown as such."""
    if not section:
        return []
    trials = section.get("trials") or {}
    origins = {**BEHAVIOUR_ORIGINS, **(section.get("measurement_origins") or {})}
    rows = []
    for name, origin in origins.items():
        count, of = BEHAVIOUR_N.get(name, ("", ""))
        n = section.get(count, len(trials.get(count) or [])) if count else None
        note = ""
        if name == "stop_latency_ms" and trials.get("interrupt_overlap_ms"):
            overlaps = ", ".join(f"{v:g}" for v in trials["interrupt_overlap_ms"])
            note = f"both spoke for {overlaps} ms of it"
        elif name not in section:
            note = "no trial"
        explained = (section.get("notes") or {}).get(name)
        if explained:  # e.g. a stop latency larger than configured: the output unit
            note = f"{note}; {explained}" if note else explained
        rows.append(
            {
                "name": name,
                "value": section.get(name),
                "n": n,
                "n_of": of,
                "note": note,
                "origin": origin,
            }
        )
    return rows


def expectation_text(e: Mapping[str, Any], *, reached: bool = True) -> str:
    """A failed (or not reached) expectation as a reader says it: ``step 2, turn 1: outcome
    expected spoke, was cancelled``; the run's own ``[expect]``: ``the run: …``."""
    where = "the run" if e.get("step") is None else f"step {e['step']}"
    if e.get("turn") is not None:
        where += f", turn {e['turn']}"
    if not reached:
        return f"{where}: {e['name']} expected {e['expected']}: not reached (the run stopped first)"
    actual = e.get("actual")
    was = "nothing (no such figure in the run)" if actual is None else page.format_number(actual)
    text = f"{where}: {e['name']} expected {e['expected']}, was {was}"
    return text + (f" — {e['why']}" if e.get("why") else "")


def write(run_dir: Path, writes: Writes | None = None) -> Path | None:
    """``replay --out DIR``: DIR/report.html (see :func:`page.write_beside`)."""
    return page.write_beside(lambda: build(run_dir), run_dir, writes)


def verdict_of(report: Mapping[str, Any]) -> tuple[tuple[str, str], list[tuple[str, str]]]:
    flags: list[tuple[str, str]] = []
    exp = report.get("expectations") or {}
    failed, unreached = exp.get("failed") or [], exp.get("not_reached") or []
    if report.get("status") == "interrupted":
        flags.append(("interrupted: this page shows the run up to Ctrl-C", "warn"))
    if (report.get("pacing") or {}).get("invalid_pacing"):
        flags.append(("invalid_pacing: the client could not keep real time", "bad"))
    for what in ("errors", "violations", "problems"):
        if report.get(what):
            flags.append((f"{len(report[what])} {what}", "bad"))
    if report.get("error"):
        flags.append((str(report["error"]), "bad"))
    if failed:
        flags.append((f"{len(failed)} expectations failed", "bad"))
    if unreached:
        flags.append((f"{len(unreached)} expectations not reached", "bad"))
    code = report.get("exit_code")
    if failed:
        return ("FAIL", "fail"), flags
    if report.get("status") == "interrupted":  # what was not reached was cut by the stop
        return ("INTERRUPTED", "warn"), flags
    if unreached or code not in (None, 0):
        return ("FAIL", "fail"), flags
    checked = exp.get("checked", 0)
    if checked:
        flags.insert(0, (f"{checked} expectations checked, all held", "ok"))
        return ("PASS", "pass"), flags
    return ("DONE", "info"), flags


def _counts(found: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in found:
        counts[m["event"]] = counts.get(m["event"], 0) + 1
    return counts
