"""Reporting: lossless histograms, summaries, SLO thresholds, and (elsewhere) artefacts.

``histogram`` (HDR, mergeable across processes and hosts), ``summary`` (every percentile with
its n, low-n p99 marked), ``slo`` (``--slo`` parsing and evaluation) are pure code; modules that
write report.json / JSONL / plots live beside them. Nothing is imported here so that importing
one piece does not pull in the others (rich, numpy) on the CLI's hot path.
"""
