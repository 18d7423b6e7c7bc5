"""How big is the load page of an hour-long run? (the issue's bound: under ~5 MB)

A synthetic hour is recorded into a real ``RunTally`` — the same object a load run fills —
and turned into report.json by the load command's own ``build_report``: 100 sessions at
once for 3600 s, each a minute long (6,000 sessions, their exact intervals), a turn every
0.1 s (36,000 turns, six latency figures each), send lag for every 100 ms append of every
session (3.6 million samples), loop lag every 100 ms, a rejection every 30 s. The page is
then built by ``duplexctl.report.html.load_page`` and its size printed, with the report.json
size for reference. Run:

    .venv/bin/python bench/html_size.py

tests/test_report_html.py runs :func:`hour_report` through the page builder and holds the
bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from duplexctl.report.load_report import build_report
from duplexctl.report.tally import RunTally

HOUR_S = 3600.0
SESSIONS = 100
SESSION_S = 60.0


def hour_report(seed: int = 7) -> dict[str, Any]:
    """A load report.json of a synthetic hour (see the module docstring)."""
    rng = np.random.default_rng(seed)
    tally = RunTally(origin=0.0, slice_s=10.0)
    slicer = tally.slicer
    for k in range(int(HOUR_S / SESSION_S) * SESSIONS):
        start = (k // SESSIONS) * SESSION_S + rng.uniform(0, 1)
        tally.intervals.append((start, min(start + SESSION_S, HOUR_S)))
        slicer.add_admission(start, "admitted")
        tally.admissions["admitted"] += 1
    for t in np.arange(0, HOUR_S, 30.0):
        slicer.add_admission(float(t), "rejected_capacity")
        tally.admissions["rejected_capacity"] += 1
        tally.codes["rejected_capacity:session_limit"] += 1
    turn_t = np.arange(0.05, HOUR_S, 0.1)
    ttfa = rng.lognormal(np.log(500), 0.25, turn_t.size)
    for t, v in zip(turn_t.tolist(), ttfa.tolist(), strict=True):
        slicer.add_turn(
            t,
            {
                "ttfa_ms": v,
                "ttft_ms": v + 5,
                "first_audible_ms": v + 100,
                "turn_ms": v + 1500,
                "ttfa_commit_ms": v - 200,
                "ttfa_created_ms": v - 210,
            },
            "spoke",
        )
        tally.outcomes["spoke"] += 1
        slicer.add_audio(t, 2.0)
    tally.counts["turns"] = turn_t.size
    appends = np.arange(0, HOUR_S, 0.1)
    for _ in range(SESSIONS):
        slicer.add_figures(appends, "send_lag_ms", rng.exponential(1.0, appends.size))
    slicer.add_figures(appends, "loop_lag_ms", rng.exponential(0.5, appends.size))
    return build_report(
        tally,
        config={"sessions": SESSIONS, "duration_s": HOUR_S, "slos": ["ttfa_p95<=800ms"]},
        workers=[{"worker": 0, "cpu_percent": 40.0, "sessions_started": 6000}],
        wall_s=HOUR_S,
        chunk_ms=100,
        url="ws://127.0.0.1:8000/v1/realtime?duplex=1",
    )


def main() -> None:
    import json

    from duplexctl.report.html import load_page

    report = hour_report()
    html = load_page.build(report)
    print(f"slices: {len(report['slices'])} (slice {report['slicing']['slice_s']} s)")
    print(f"report.json: {len(json.dumps(report, indent=1)) / 1e6:.2f} MB")
    print(f"report.html: {len(html.encode()) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
