"""Self-contained HTML pages of a run: one file per run, every script and style inline.

``page.py`` renders Jinja2 templates with the Vega-Lite runtime inlined; ``charts.py`` builds
the charts (Altair: Vega-Lite specs); one module per kind of page builds what its template
shows (``load_page.py``, ``replay_page.py``, ``probe_page.py``, ``compare_page.py``).
"""
