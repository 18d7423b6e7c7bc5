"""``duplexctl load``: many sessions, latency distributions, admission limits and capacity.

The pure pieces (no sockets, unit-tested on their own): ``arrivals`` (seedable constant /
Poisson / gamma inter-arrivals and linear ramps), ``capacity`` (exact observed-capacity sweep
and the step-then-bisect capacity search), ``slices`` (time slices and warm-up / ramp / steady
windows). The runner and workers that drive real sessions build on them. Nothing is imported
here so that importing one piece does not import the rest.
"""
