"""Frame accounting over a run's sessions (docs/metrics.md "Frame accounting"): the counts
that merge exactly (sums over sessions, in the recorder's ``counts``), report.json's
``frames`` section and the summary's line.

A run on a lane that is not frame-locked has no section at all: "not a frame-locked lane" is
said once, not a row of zeros that would read as "no frame lost".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

PREFIX: Final = "frames."
#: one count per session that ended ``n`` frames short: ``frames.deficit_of.<n>`` (exact, and
#: merged by adding, where a histogram would give bucket bounds: 11.007 for 11)
DEFICIT_OF: Final = PREFIX + "deficit_of."


def count_session(counts: Counter[str], frames: Mapping[str, Any] | None) -> None:
    """Add one finished session's ``frames`` block (nothing: not a frame-locked lane)."""
    if not frames:
        return
    deficit = int(frames["frame_deficit"])
    counts[PREFIX + "sessions"] += 1
    counts[PREFIX + "sent"] += int(frames["frames_sent"])
    counts[PREFIX + "received"] += int(frames["frames_received"])
    counts[PREFIX + "deficit"] += deficit
    counts[PREFIX + "inserted"] += int(frames["frames_inserted"])
    counts[PREFIX + "sessions_short"] += int(deficit > 0)
    counts[PREFIX + "sessions_inserted"] += int(frames["frames_inserted"] > 0)
    counts[PREFIX + "commits_padded"] += int(frames.get("commits_padded", 0))
    counts[f"{DEFICIT_OF}{deficit}"] += 1


def _deficit_max(counts: Mapping[str, int]) -> int | None:
    seen = [
        int(k.removeprefix(DEFICIT_OF)) for k, n in counts.items() if k.startswith(DEFICIT_OF) and n
    ]
    return max(seen) if seen else None


def scalars(counts: Mapping[str, int]) -> dict[str, float | None]:
    """The run-level figures ``--slo`` can name: ``frame_coverage`` (frames received / sent
    over all sessions) and ``frame_deficit_max`` (the largest deficit one session ended
    with); None when no session was on a frame-locked lane."""
    sent = counts.get(PREFIX + "sent", 0)
    worst = _deficit_max(counts)
    return {
        "frame_coverage": counts.get(PREFIX + "received", 0) / sent if sent else None,
        "frame_deficit_max": None if worst is None else float(worst),
    }


def section(counts: Mapping[str, int]) -> dict[str, Any] | None:
    """report.json's ``frames`` section; None when no session was on a frame-locked lane."""
    sessions = counts.get(PREFIX + "sessions", 0)
    if not sessions:
        return None
    sent, received = counts.get(PREFIX + "sent", 0), counts.get(PREFIX + "received", 0)
    by_deficit = {
        int(k.removeprefix(DEFICIT_OF)): n
        for k, n in counts.items()
        if k.startswith(DEFICIT_OF) and n
    }
    return {
        "sessions": sessions,
        "frames_sent": sent,
        "frames_received": received,
        "frame_deficit": counts.get(PREFIX + "deficit", 0),
        "frames_inserted": counts.get(PREFIX + "inserted", 0),
        "coverage": round(received / sent, 6) if sent else None,
        "sessions_with_deficit": counts.get(PREFIX + "sessions_short", 0),
        "sessions_with_inserted": counts.get(PREFIX + "sessions_inserted", 0),
        "commits_padded": counts.get(PREFIX + "commits_padded", 0),
        # sessions by the deficit they ended with: {"0": 3, "11": 1}
        "sessions_by_deficit": {str(d): by_deficit[d] for d in sorted(by_deficit)},
        "frame_deficit_max": max(by_deficit) if by_deficit else None,
    }


def session_lines(block: Mapping[str, Any] | None) -> list[str]:
    """One session's frames (replay's summary): nothing when the lane is not frame-locked."""
    if not block:
        return []
    from duplexctl.report.summary import format_value

    coverage = block.get("coverage")
    cov = "not measured (no frame sent)" if coverage is None else f"{format_value(coverage * 100)}%"
    deficit = block["frame_deficit"]
    return [
        f"frames (frame-locked lane, {block['frame_ms']} ms): {block['frames_sent']} sent, "
        f"{block['frames_received']} received, coverage {cov}; deficit at end of call "
        f"{deficit} frame{'' if deficit == 1 else 's'}; "
        f"{block['frames_inserted']} inserted by the server"
    ]


def lines(frames: Mapping[str, Any] | None) -> list[str]:
    """The summary's frame-accounting line (nothing when the lane is not frame-locked)."""
    if not frames:
        return []
    from duplexctl.report.summary import format_value

    n = frames["sessions"]
    coverage = frames.get("coverage")
    cov = "not measured (no frame sent)" if coverage is None else f"{format_value(coverage * 100)}%"
    line = (
        f"frames (frame-locked lane): {frames['frames_sent']} sent, "
        f"{frames['frames_received']} received, coverage {cov}; deficit at end of call "
        f"{frames['frame_deficit']} frame{'' if frames['frame_deficit'] == 1 else 's'} in "
        f"{frames['sessions_with_deficit']} of {n} session{'' if n == 1 else 's'}"
    )
    if frames["frame_deficit"]:
        line += f" (at most {frames['frame_deficit_max']} in one)"
    line += f"; {frames['frames_inserted']} inserted by the server"
    return [line]
