"""A real Prometheus for the tests: Debian's ``prometheus`` binary (install.sh) on loopback.

:func:`running` starts one on a free loopback port with its remote-write receiver
(``--web.enable-remote-write-receiver``) and, unless asked otherwise, native histograms
(``--enable-feature=native-histograms``: the flag of Prometheus 2.x, which Debian 12 ships),
its storage in a temporary directory, and optionally scraping some ``/metrics`` endpoints
every second; it yields a :class:`Prometheus` with the query API, and stops the process it
started by its PID. A missing binary fails the test, naming install.sh.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.paths import free_port, with_parent

BINARY = "prometheus"
READY_TIMEOUT_S = 60.0


@dataclass
class Prometheus:
    base: str  # http://127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def write_url(self) -> str:
        return f"{self.base}/api/v1/write"

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result (vector or scalar rows), now or ``at`` (epoch s)."""
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        data = self.api("/api/v1/query", **params)
        result = data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return list(result)

    def value(self, expr: str) -> float:
        """The one value of an instant query that returns one series (a float sample)."""
        rows = self.query(expr)
        assert len(rows) == 1, (expr, rows)
        return float(rows[0]["value"][1])

    def wait_for(self, expr: str, timeout_s: float = 20.0) -> list[dict[str, Any]]:
        """Poll ``expr`` until it returns something (the receiver may lag a moment)."""
        deadline = time.monotonic() + timeout_s
        rows: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            rows = self.query(expr)
            if rows:
                return rows
            time.sleep(0.25)
        raise AssertionError(f"no data for {expr!r} within {timeout_s:g} s")


def _config(scrape: Sequence[str]) -> str:
    lines = ["global:", "  scrape_interval: 1s", "  evaluation_interval: 1s", "scrape_configs:"]
    if scrape:
        lines += [
            "  - job_name: duplexctl-serve",
            "    static_configs:",
            "      - targets: [" + ", ".join(f"'{t}'" for t in scrape) + "]",
        ]
    else:
        lines[-1] = "scrape_configs: []"
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def running(*, scrape: Sequence[str] = (), native_histograms: bool = True) -> Iterator[Prometheus]:
    """A Prometheus for the block (see the module docstring); ``scrape``: HOST:PORT targets."""
    binary = shutil.which(BINARY)
    assert binary is not None, "Debian's prometheus is not installed: run bash install.sh"
    tmp = Path(tempfile.mkdtemp(prefix="duplexctl-prometheus-"))
    (tmp / "prometheus.yml").write_text(_config(scrape))
    port = free_port()
    args = [
        binary,
        f"--config.file={tmp / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-remote-write-receiver",
        "--storage.tsdb.retention.time=1d",
    ]
    if native_histograms:
        args.append("--enable-feature=native-histograms")
    log = tmp / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(with_parent(args), stdout=out, stderr=subprocess.STDOUT)
    server = Prometheus(f"http://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"prometheus exited: {log.read_text()[-2000:]}"
            try:
                with urllib.request.urlopen(f"{server.base}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not get ready"
            time.sleep(0.2)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
