"""The parts of ``--prometheus-rw`` without a Prometheus: native histograms from HDR ones,
the WriteRequest as a receiver decodes it, the push thread against a loopback HTTP server,
and the options' one-line refusals."""

from __future__ import annotations

import http.server
import math
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import cramjam
import numpy as np
import pytest
from support.commands import ROOT, SHORT, duplexctl_cmd

from duplexctl.errors import BadInput
from duplexctl.export import names, native, prompb
from duplexctl.export.options import Endpoint, PushOptions
from duplexctl.export.remote_write import Batch, Pusher, Stats, Zeros, encode, refuses_native
from duplexctl.export.state import ExportState, of_tally, total
from duplexctl.report.histogram import LatencyHistogram
from duplexctl.report.tally import RunTally


def _expand(spans: list[tuple[int, int]], deltas: list[int]) -> dict[int, int]:
    """Native spans and delta-encoded counts → bucket index: count."""
    out, index, count, k = {}, 0, 0, 0
    for i, (offset, length) in enumerate(spans):
        index = offset if i == 0 else index + offset
        for _ in range(length):
            count += deltas[k]
            k += 1
            out[index] = count
            index += 1
        index -= 1
        index += 1
    return out


def test_native_buckets_hold_the_samples_of_their_bounds() -> None:
    rng = np.random.default_rng(3)
    samples = np.concatenate(
        [rng.lognormal(5.5, 1.2, 20_000), -rng.lognormal(3, 0.5, 500), [0.0] * 7]
    )
    hist = LatencyHistogram()
    hist.record_array(samples)
    n = native.native(hist, 1e-3)  # ms → s
    assert n.count == samples.size and n.zero_count == 7
    pos = _expand(n.positive_spans, n.positive_deltas)
    neg = _expand(n.negative_spans, n.negative_deltas)
    assert sum(pos.values()) + sum(neg.values()) + n.zero_count == samples.size
    # each sample's exact bucket: ceil(log2(v) * 2^schema); HDR's 0.1 % buckets may put a
    # sample that lies within 0.1 % of a bound in the neighbour
    seconds = samples / 1000
    exact_pos = np.unique(native.bucket_index(seconds[seconds > 0]), return_counts=True)
    moved = sum(abs(pos.get(int(i), 0) - int(c)) for i, c in zip(*exact_pos, strict=True))
    assert moved <= samples.size * 0.02  # a displaced sample counts twice: under 1 % moved
    assert math.isclose(n.sum, float(seconds.sum()), rel_tol=1e-3)
    assert set(neg) == set(np.unique(native.bucket_index(-seconds[seconds < 0])).tolist())


def test_percentiles_are_the_reports() -> None:
    hist = LatencyHistogram()
    hist.record_array(np.linspace(1, 1000, 997))
    got = native.percentiles(hist, 1e-3)
    report = hist.to_dict()
    assert got == pytest.approx(
        {q: report[f"p{int(p)}"] / 1000 for q, p in native.QUANTILES.items()}, rel=1e-12
    )


def _decode(body: bytes) -> Any:
    request = prompb.messages()["WriteRequest"]()
    request.ParseFromString(bytes(cramjam.snappy.decompress_raw(body)))
    return request


def _state(turns: int) -> ExportState:
    tally = RunTally(origin=0.0)
    tally.admissions["admitted"] = 2
    tally.outcomes["spoke"] = turns
    tally.slicer.add_turn(1.0, {"ttfa_ms": 310.0, "turn_ms": 2100.0}, "spoke")
    return of_tally(tally, active=1, admitted_now=1)


def test_the_write_request_as_a_receiver_reads_it() -> None:
    labels = (("command", "load"), ("job", "duplexctl"), ("run_id", "r1"), ("target", "ws://h/x"))
    batch = Batch({0: ("n1", _state(3)), 1: ("n1", _state(4)), 2: (None, _state(1))})
    zeros = Zeros(set(), at_ms=1000)
    body, count = encode(batch, labels, "native", 5000, Stats(), zeros)
    request = _decode(body)
    assert count == len(request.timeseries)
    by_name: dict[str, list[Any]] = {}
    for ts in request.timeseries:
        keys = [label.name for label in ts.labels]
        assert keys == sorted(keys) and keys[0] == "__name__"
        by_name.setdefault(ts.labels[0].value, []).append(ts)
    turns = {
        dict((lb.name, lb.value) for lb in ts.labels).get("node"): [
            (s.timestamp, s.value) for s in ts.samples
        ]
        for ts in by_name["duplexctl_turns_total"]
    }
    # per node, summed; a new counter starts from a zero at the last accepted push
    assert turns == {"n1": [(1000, 0.0), (5000, 7.0)], None: [(1000, 0.0), (5000, 1.0)]}
    (ttfa,) = [
        ts
        for ts in by_name["duplexctl_ttfa_seconds"]
        if ("node", "n1") in {(lb.name, lb.value) for lb in ts.labels}
    ]
    assert [h.count_int for h in ttfa.histograms] == [0, 2] and not ttfa.samples
    assert ttfa.histograms[1].schema == native.SCHEMA and ttfa.histograms[1].timestamp == 5000
    # gauges get no zero; nothing of the known series is repeated on the next push
    active = {
        dict((lb.name, lb.value) for lb in ts.labels).get("node"): [s.value for s in ts.samples]
        for ts in by_name["duplexctl_sessions_active"]
    }
    assert active == {"n1": [2.0], None: [1.0]}
    again = _decode(encode(batch, labels, "native", 6000, Stats(), Zeros(zeros.added, 5000))[0])
    assert all(len(ts.samples) + len(ts.histograms) == 1 for ts in again.timeseries)
    kinds = {m.metric_family_name: m.type for m in request.metadata}
    assert kinds["duplexctl_turns_total"] == prompb.COUNTER
    assert kinds["duplexctl_ttfa_seconds"] == prompb.HISTOGRAM


def test_percentiles_mode_writes_a_summary() -> None:
    body, _ = encode(Batch({0: (None, _state(1))}), (), "percentiles", 5000)
    request = _decode(body)
    found = {
        (
            ts.labels[0].value,
            dict((lb.name, lb.value) for lb in ts.labels).get("quantile"),
        ): ts.samples[-1].value
        for ts in request.timeseries
        if ts.labels[0].value.startswith("duplexctl_ttfa_seconds")
    }
    assert found[("duplexctl_ttfa_seconds_count", None)] == 1
    assert found[("duplexctl_ttfa_seconds", "0.99")] == pytest.approx(0.31, rel=1e-3)
    assert {m.metric_family_name: m.type for m in request.metadata}[
        "duplexctl_ttfa_seconds"
    ] == prompb.SUMMARY


def test_states_add_up() -> None:
    both = total([_state(3), _state(4)])
    assert both.counter_value(names.TURNS, outcome="spoke") == 7
    assert both.histograms[("ttfa_ms", (("phase", "steady"),))].count == 2


class _Receiver(http.server.BaseHTTPRequestHandler):
    """A remote-write receiver that keeps every body (each test makes its own subclass)."""

    bodies: ClassVar[list[bytes]] = []
    status: ClassVar[int] = 204
    answer: ClassVar[bytes] = b""
    delay_s: ClassVar[float] = 0.0

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).bodies.append(self.rfile.read(length))
        time.sleep(type(self).delay_s)
        self.send_response(type(self).status)
        self.send_header("Content-Length", str(len(type(self).answer)))
        self.end_headers()
        self.wfile.write(type(self).answer)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[_Receiver]]]:
    handler = type(
        "Receiver", (_Receiver,), {"bodies": [], "status": 204, "answer": b"", "delay_s": 0.0}
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api/v1/write", handler
    finally:
        server.shutdown()
        server.server_close()


def test_the_pusher_sends_and_drains(receiver: tuple[str, type[_Receiver]]) -> None:
    url, handler = receiver
    said: list[str] = []
    pusher = Pusher(url, (("job", "duplexctl"),), interval_s=1.0, warn=said.append).start()
    pusher.offer(Batch({0: (None, _state(2))}))
    assert pusher.drain(5.0)
    pusher.stop()
    assert pusher.stats.sent == 1 and len(handler.bodies) == 1 and not said
    assert _decode(handler.bodies[0]).timeseries


def test_a_slow_receiver_drops_the_oldest_waiting_push_said_once(
    receiver: tuple[str, type[_Receiver]],
) -> None:
    url, handler = receiver
    handler.delay_s = 0.5
    said: list[str] = []
    pusher = Pusher(url, (), interval_s=1.0, warn=said.append).start()
    started = time.monotonic()
    for turns in range(10):  # far faster than the receiver answers
        pusher.offer(Batch({0: (None, _state(turns))}))
    assert time.monotonic() - started < 0.5  # offering never waits for the receiver
    assert pusher.drain(10.0)
    pusher.stop()
    assert pusher.stats.dropped >= 4 and pusher.stats.sent >= 1
    assert pusher.stats.sent + pusher.stats.dropped == 10
    assert len(said) == 1 and "queue full" in said[0]
    # the last offered state is the one the receiver got last: nothing newer was dropped
    last = _decode(handler.bodies[-1])
    turns = [ts for ts in last.timeseries if ts.labels[0].value == "duplexctl_turns_total"]
    assert turns[0].samples[-1].value == 9


def test_a_refusal_of_native_histograms_sends_percentiles_instead(
    receiver: tuple[str, type[_Receiver]],
) -> None:
    url, handler = receiver
    handler.status, handler.answer = 500, b"native histograms are disabled\n"
    said: list[str] = []
    pusher = Pusher(url, (), interval_s=1.0, warn=said.append).start()
    pusher.offer(Batch({0: (None, _state(1))}))
    assert pusher.drain(5.0)
    pusher.stop()
    assert pusher.mode == "percentiles" and len(handler.bodies) == 2
    assert any("takes no native histograms" in line for line in said)
    assert refuses_native("HTTP 400: native histogram support is off")
    assert not refuses_native("HTTP 400: out of order sample")


def test_credentials_in_the_url_become_basic_auth_and_are_never_shown() -> None:
    endpoint = Endpoint("https://me:s%40cret@prom.example:443/api/v1/write")
    assert endpoint.url == "https://prom.example:443/api/v1/write"
    assert endpoint.headers["Authorization"] == "Basic bWU6c0BjcmV0"
    echoed = PushOptions.resolve("https://me:secret@prom.example/api/v1/write")
    assert echoed is not None and "secret" not in str(echoed.echo())
    assert (
        names.target_label("wss://u:p@gpu:8000/v1/realtime?duplex=1&autostart=0")
        == "wss://gpu:8000/v1/realtime"
    )


@pytest.mark.parametrize(
    ("args", "names_it"),
    [
        (["ftp://prom/write"], "--prometheus-rw"),
        (["http://prom/write", 0.1], "--prometheus-rw-interval"),
        (["http://prom/write", 5.0, "classic"], "--prometheus-rw-histograms"),
        ([None, 5.0], "need --prometheus-rw"),
    ],
)
def test_bad_options_are_one_line(args: list[Any], names_it: str) -> None:
    with pytest.raises(BadInput, match=names_it):
        PushOptions.resolve(*args)


def test_a_bad_url_is_exit_2_before_any_socket() -> None:
    run = subprocess.run(
        duplexctl_cmd("load", SHORT, "--sessions", "1", "--duration", "1s", "--prometheus-rw", "prom:9090"),
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("duplexctl: error: --prometheus-rw 'prom:9090'")
