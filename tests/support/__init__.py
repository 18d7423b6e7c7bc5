"""The test suite's shared helpers: the one place they live, imported one way (``from
support.X import …``; pytest puts ``tests/`` on ``sys.path`` because ``tests/conftest.py`` is
a rootdir conftest, and the bench scripts insert it themselves).

* ``paths``: the checkout, the recordings and wire transcripts, a free loopback port.
* ``commands``: ``duplexctl`` as a real process (``serve``, short saved load runs, Ctrl-C,
  the hostile peers a load run's failure causes need, process-tree checks).
* ``server`` / ``engine``: the reference server's transport and engine without the CLI.
* ``hostile_servers`` / ``hostile_clients``: the misbehaving peers of both sides.
* ``browser``: headless Chromium (one per test session) opening a page offline.
* ``pulse``: a private PulseAudio daemon.
* ``peer``: the real vLLM-Omni peer, started once per argument set.
* ``cluster``: the Ray cluster the ``--ray`` tests share.

Test modules never import each other or ``conftest``: what two of them need lives here.
"""
