"""``duplexctl load``: many sessions, latency distributions, admission limits and capacity.

The pure pieces (no sockets, unit-tested on their own): ``arrivals`` (seedable constant /
Poisson / gamma inter-arrivals and linear ramps) and ``capacity`` (the step-then-bisect
capacity search). What a run counts and how its report is built live below, in
``duplexctl.report`` (``tally``, ``slices``, ``concurrency``, ``load_report``), so that
``duplexctl report`` re-renders and merges saved runs without importing this package. The
runner (``run`` → ``search`` / ``step`` → ``workers`` → ``engine`` → ``session``) builds on
them. Nothing is imported here so that importing one piece does not import the rest.
"""
