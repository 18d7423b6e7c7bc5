"""``duplexctl load --ray ADDRESS``: one load run spread over the nodes of a Ray cluster.

* :mod:`~duplexctl.load.cluster.connect` — the address, the optional ``ray`` extra, a bounded
  connection, and where the workers go (SPREAD, or ``--workers-per-node``);
* :mod:`~duplexctl.load.cluster.actor` — one Ray actor: the local worker's session engine
  (:func:`duplexctl.load.workers.run_share`) on its node, with a lifeline to the driver's
  heartbeat;
* :mod:`~duplexctl.load.cluster.seconds` — live per-second slices: each actor's deltas and
  the driver's cluster totals;
* :mod:`~duplexctl.load.cluster.driver` — the driver's side of a run: placement, a common
  start on the driver's clock, live slices, faults, the exact merge.

Nothing here imports ``ray`` at module level except ``driver`` (imported only with ``--ray``):
without ``--ray``, ``load`` and ``--help`` never load it (docs/cluster.md).
"""
