"""Reporting: lossless histograms, summaries, SLO thresholds, load-run reports, artefacts.

``histogram`` (HDR, mergeable across processes and hosts), ``summary`` (every percentile with
its n, low-n p99 marked), ``slo`` (``--slo`` parsing and evaluation), ``slices`` /
``concurrency`` / ``tally`` (what a load run counts, merged exactly) and ``load_report`` (the
load report built from a tally) are pure code; modules that write report.json / JSONL / plots
live beside them. This package imports nothing of ``load``, the client or the scenario runner
(docs/architecture.md: imports run downward). Nothing is imported here so that importing one
piece does not pull in the others (rich, numpy) on the CLI's hot path.
"""
