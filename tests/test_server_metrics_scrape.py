"""Scraping a server's ``/metrics`` during a run (issue 19, item 2): endpoints from ``--url``,
real hostile HTTP endpoints on loopback (absent, slow, failing, HTML, garbage), the JSONL
file and report.json's ``server_metrics`` section of a real ``load`` run.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from support.cli import invoke, one_line
from support.commands import ROOT, SHORT, duplexctl_cmd, free_port

from duplexctl.errors import BadInput
from duplexctl.prometheus.endpoints import default_endpoint, parse_endpoint, resolve
from duplexctl.prometheus.scraper import Scraper
from duplexctl.prometheus.store import Store

pytestmark = pytest.mark.realtime

GOOD_BODY = (
    b"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
    b"# TYPE vllm:num_requests_waiting gauge\n"
    b'vllm:num_requests_waiting{model_name="m"} 3.0\n'
)


DCGM_BODY = (
    b"# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
    b"# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
    b'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",modelName="NVIDIA H100"} 80\n'
    b'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",modelName="NVIDIA H100"} 90\n'
)


class _Hostile(http.server.BaseHTTPRequestHandler):
    """What a misbehaving /metrics does, chosen by the path."""

    seen_headers: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen_headers.append(dict(self.headers))
        path = self.path
        if path.startswith("/slow"):
            time.sleep(3.0)
            body, ctype = GOOD_BODY, "text/plain"
        elif path.startswith("/html"):
            body, ctype = b"<!DOCTYPE html><html><body>Login</body></html>", "text/html"
        elif path.startswith("/garbage"):
            body, ctype = b"\x00\x01 this is not { an exposition\nfoo bar baz\n", "text/plain"
        elif path.startswith("/fail"):
            self.send_error(500, "boom")
            return
        elif path.startswith("/dcgm"):  # what NVIDIA's DCGM exporter publishes, two GPUs
            body, ctype = DCGM_BODY, "text/plain; version=0.0.4"
        elif path.startswith("/metrics"):
            body, ctype = GOOD_BODY, "text/plain; version=0.0.4"
        else:
            self.send_error(404)
            return
        try:
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: object) -> None:
        return


@contextlib.contextmanager
def hostile_http() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_default_endpoint_is_the_servers_own_host_and_port() -> None:
    plain = default_endpoint("ws://10.0.0.5:8000/v1/realtime?duplex=1", "sk-1")
    assert plain.url == "http://10.0.0.5:8000/metrics"
    assert plain.headers == {"Authorization": "Bearer sk-1"}
    secure = default_endpoint("wss://gpu.example:443/v1/duplex")
    assert secure.url == "https://gpu.example:443/metrics"
    assert secure.headers == {}


def test_flagged_endpoints_are_checked_and_get_no_api_key() -> None:
    options = resolve(["http://127.0.0.1:9400", "http://127.0.0.1:9100/metrics"])
    found = options.endpoints("ws://127.0.0.1:8000/v1/realtime", "sk-1")
    assert [e.url for e in found] == [
        "http://127.0.0.1:8000/metrics",
        "http://127.0.0.1:9400/metrics",
        "http://127.0.0.1:9100/metrics",
    ]
    assert [bool(e.headers) for e in found] == [True, False, False]
    assert resolve([], enabled=False).endpoints("ws://h:1/x") == ()
    for bad in ("ftp://h/metrics", "127.0.0.1:9400", "http:///metrics", "http://h:99999/m"):
        with pytest.raises(BadInput):
            parse_endpoint(bad)
    with pytest.raises(BadInput):
        resolve([], interval_s=0.0)


def test_bad_options_are_one_line_and_exit_2() -> None:
    for args in (["--server-metrics", "ftp://x"], ["--scrape-interval", "0"]):
        done = invoke("load", SHORT, "--sessions", "1", "--duration", "1s", *args)
        assert done.code == 2, done.stderr
        one_line(done.stderr)


def test_hostile_endpoints_warn_once_each_and_scraping_goes_on() -> None:
    warnings: list[str] = []
    with hostile_http() as base:
        options = resolve(
            [f"{base}/{p}" for p in ("metrics", "slow", "html", "garbage", "fail", "absent")],
            interval_s=0.2,
        )
        closed = f"ws://127.0.0.1:{free_port()}/v1/realtime"  # the default: nothing listens
        scraper = Scraper(options.endpoints(closed), 0.2, warn=warnings.append)
        started = time.monotonic()
        scraper.start()
        time.sleep(2.5)
        scraper.stop()
        stopped_in = time.monotonic() - started - 2.5
    assert len(warnings) == 5  # the default endpoint's refusal is held back …
    scraper.release_held()  # … until the command knows it reached its server
    by_url = {w.split(": ", 1)[0]: w for w in warnings}
    assert len(warnings) == len(by_url) == 6, warnings  # one line per failing endpoint
    assert "HTML" in by_url[f"{base}/html"]
    assert "not a Prometheus exposition" in by_url[f"{base}/garbage"]
    assert "HTTP 500" in by_url[f"{base}/fail"]
    assert "no answer within" in by_url[f"{base}/slow"]
    assert "HTTP 404" in by_url[f"{base}/absent"]
    assert (
        "ConnectionRefused"
        in by_url[closed.replace("ws:", "http:").replace("/v1/realtime", "/metrics")]
    )
    ok, failed = scraper.store.scrapes[f"{base}/metrics"]
    assert ok >= 5 and failed == 0  # the good endpoint was never held up by the others
    assert scraper.store.scrapes[f"{base}/html"][1] >= 5  # failing ones are still tried
    assert scraper.store.scrapes[f"{base}/absent"] == [0, 1]  # a 404 is not asked again
    assert scraper.store.latest("vllm:num_requests_waiting") == [3.0]
    assert stopped_in < 15.0  # every thread stopped within its bounded timeout


def test_the_default_endpoint_sends_the_duplex_servers_auth_header() -> None:
    _Hostile.seen_headers.clear()
    with hostile_http() as base:
        options = resolve([f"{base}/metrics?flagged=1"], interval_s=0.2)
        url = base.replace("http:", "ws:") + "/v1/realtime"
        scraper = Scraper(options.endpoints(url, "sk-secret"), 0.2)
        scraper.start()
        time.sleep(0.5)
        scraper.stop()
    auth = {h.get("Authorization") for h in _Hostile.seen_headers}
    assert auth == {"Bearer sk-secret", None}


def _load(*args: str) -> subprocess.CompletedProcess[str]:
    """A short ``load`` against the embedded server (one worker, plain lines)."""
    return subprocess.run(
        duplexctl_cmd(
            "load", SHORT, "--workers", "1", "--plain", "--server-option", "reply_seconds=1",
            *args,
        ),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )  # fmt: skip


def test_a_load_run_writes_server_metrics_jsonl_and_its_report_section(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = _load(
        "--sessions", "3", "--duration", "6s", "--out", str(out), "--server-gpu-slots", "1",
        "--server-unit-compute-ms", "100", "--scrape-interval", "0.25",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "server metrics (scraped every 0.25 s)" in run.stdout
    assert "         server: running requests" in run.stdout  # the dashboard's server line
    assert "vllm:time_to_first_token_seconds:" in run.stdout
    lines = [json.loads(x) for x in (out / "server_metrics.jsonl").read_text().splitlines()]
    kinds = {x["kind"] for x in lines}
    assert kinds >= {"header", "family", "sample", "scrape"}
    families = {x["name"]: x for x in lines if x["kind"] == "family"}
    assert families["vllm:num_requests_waiting"]["type"] == "gauge"
    assert families["vllm:num_requests_waiting"]["help"]
    samples = [x for x in lines if x["kind"] == "sample"]
    assert all(0.0 <= x["t"] <= 60.0 for x in samples)
    section = json.loads((out / "report.json").read_text())["server_metrics"]
    assert section["endpoints"][0]["origin"] == "default"
    assert section["endpoints"][0]["scrapes"] >= 8
    ttft = next(h for h in section["histograms"] if h["name"] == "vllm:time_to_first_token_seconds")
    assert ttft["count"] >= 5 and ttft["mean"] > 0.1
    assert ttft["p50"]["low"] < ttft["mean"] <= ttft["p99"]["high"]  # bucket bounds, not points
    queue = next(h for h in section["histograms"] if h["name"] == "vllm:request_queue_time_seconds")
    if not queue["sum"]:  # no reply waited for the slot: no positive queue-time percentile
        assert queue["p50"] == {"low": 0.0, "high": 0.0}
    success = [c for c in section["counters"] if c["name"] == "vllm:request_success_total"]
    assert sum(c["delta"] for c in success) >= 3
    assert {"running", "waiting", "kv_cache_usage"} <= set(section["key"])
    assert section["slices"] and "key" in section["slices"][0]
    # the store reads the file back to the same samples (what `duplexctl report` re-renders)
    again = Store.read(out / "server_metrics.jsonl")
    assert sum(len(v) for v in again.values.values()) == len(samples)


def test_no_server_metrics_turns_it_off(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = _load("--sessions", "1", "--duration", "3s", "--out", str(out), "--no-server-metrics")
    assert run.returncode == 0, run.stderr
    assert not (out / "server_metrics.jsonl").exists()
    assert "server_metrics" not in json.loads((out / "report.json").read_text())


def test_a_broken_extra_endpoint_is_one_warning_and_the_run_goes_on() -> None:
    with hostile_http() as base:
        run = _load(
            "--sessions", "1", "--duration", "3s", "--server-metrics", f"{base}/html",
            "--scrape-interval", "0.2",
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    warned = [x for x in run.stderr.splitlines() if "server metrics" in x]
    assert len(warned) == 1 and "HTML" in warned[0], run.stderr


def test_a_dcgm_endpoint_adds_gpu_utilisation_to_the_live_line_and_the_report(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    with hostile_http() as base:
        run = _load(
            "--sessions", "1", "--duration", "3s", "--out", str(out),
            "--server-metrics", f"{base}/dcgm", "--scrape-interval", "0.2",
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "GPU utilisation % 85" in run.stdout  # the dashboard: the mean of the two GPUs
    section = json.loads((out / "report.json").read_text())["server_metrics"]
    assert section["key"]["gpu_util"]["mean"] == 85.0
    assert [e["origin"] for e in section["endpoints"]] == ["default", "flag"]


def test_an_endpoint_that_does_not_speak_http_is_one_warning_not_a_traceback() -> None:
    """Found by bench/hostile_commands.py: a server answering with an SSH banner raised
    http.client.BadStatusLine out of the last scrape (a traceback, load exiting 1)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def banner() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    threading.Thread(target=banner, daemon=True).start()
    warnings: list[str] = []
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
        scraper = Scraper(resolve([url]).endpoints(""), 0.2, warn=warnings.append)
        (endpoint,) = [e for e in scraper.endpoints if e.url == url]
        assert scraper.scrape_once(endpoint) is True
        assert scraper.scrape_once(endpoint) is True
    finally:
        listener.close()
    assert len(warnings) == 1 and "BadStatusLine" in warnings[0], warnings
    assert scraper.store.scrapes[url] == [0, 2]
