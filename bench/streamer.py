"""The bare streamer: the cheapest client that still does a duplex session's real work.

It opens N sessions with plain ``websockets``, sends pre-encoded 100 ms appends of real
speech (then silence) on an absolute schedule, counts what comes back and closes each
session with ``session.close``. No protocol state, no playback clock, one ack per answer: it
is the practical floor against which ``duplexctl load`` and vLLM-Omni's ``DuplexClient`` are
compared (issue 7), and the load generator of the ``serve`` capacity benchmark.

    python bench/streamer.py --url ws://127.0.0.1:8765/v1/realtime?duplex=1 --sessions 100
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf
from websockets.asyncio.client import connect

try:
    from bench.phase_grid import phase_start
except ImportError:  # run as a script: bench/ itself is on the path
    from phase_grid import phase_start

# the top-level "type" is the first key every server here writes; reading it by regex keeps
# the floor honest (replies are read) without paying for a full JSON decode per frame
_TYPE_RE = re.compile(r'"type":\s*"([^"]+)"')
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WAV = ROOT / "recordings" / "hello.wav"


def append_frames(wav: Path, chunk_ms: int, silence_s: float) -> list[str]:
    """JSON text of every append of one utterance followed by ``silence_s`` of silence."""
    samples, rate = sf.read(str(wav), dtype="int16")
    if samples.ndim > 1:
        samples = samples[:, 0]
    if rate != 16000:
        raise SystemExit(f"{wav}: needs 16 kHz audio, got {rate} Hz")
    samples = np.concatenate([samples, np.zeros(int(16000 * silence_s), dtype=np.int16)])
    step = 16 * chunk_ms
    frames = []
    for k in range(0, len(samples), step):
        chunk = samples[k : k + step].astype("<i2").tobytes()
        frames.append(
            json.dumps(
                {
                    "type": "input_audio_buffer.append",
                    "audio": base64.b64encode(chunk).decode(),
                    "audio_end_ms": (k + len(samples[k : k + step])) // 16,
                }
            )
        )
    return frames


@dataclass
class SessionStats:
    admitted: bool = False
    rejected: str | None = None
    sent: int = 0
    received: int = 0
    responses_done: int = 0
    first_audio_after_stop_ms: list[float] = field(default_factory=list)
    send_lag_ms: list[float] = field(default_factory=list)


SESSION = {
    "modalities": ["audio", "text"],
    "input_audio_format": "pcm16",
    "sample_rate_hz": 16000,
    "output_audio_format": "pcm16",
    "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
    "extra_body": {"auto_response": False},
}


#: ``--commit-at-ms``: the client ends each turn (no server VAD), as ``duplexctl load
#: --turn-detection none`` and the DuplexClient driver do, so the three carry equal traffic.
COMMIT = '{"type": "input_audio_buffer.commit", "response_create": true}'
#: The server forces ``playback_commit_policy: ack_only``: an unacknowledged answer keeps the
#: turn, so a committing client acks once after the answer. (``load`` and the DuplexClient
#: driver ack as they play, ~10 acks and replies per 2 s answer: the floor stays a floor.)
ACK_ALL = '{"type": "playback.ack", "played_ms": 1000000000, "committed_ms": 1000000000}'


async def run_session(
    url: str,
    frames: list[str],
    duration_s: float,
    chunk_ms: int,
    start_at: float,
    commit_at_ms: float | None = None,
    phase: tuple[int, int] | None = None,
) -> SessionStats:
    stats = SessionStats()
    # time.monotonic, not loop.time(): uvloop's clock has 1 ms resolution
    clock = time.monotonic
    await asyncio.sleep(max(0.0, start_at - clock()))
    session = SESSION if commit_at_ms is None else {**SESSION, "turn_detection": None}
    commit_chunk = None if commit_at_ms is None else int(commit_at_ms // chunk_ms)
    async with connect(url, compression=None, max_size=None, proxy=None, open_timeout=30) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        first = json.loads(await ws.recv())
        if first.get("type") != "session.created":
            stats.rejected = str((first.get("error") or {}).get("code", first.get("type")))
            return stats
        stats.admitted = True
        stopped_at: list[float] = []
        closed = asyncio.Event()

        async def reader() -> None:
            async for raw in ws:
                stats.received += 1
                match = _TYPE_RE.search(raw)
                kind = match.group(1) if match else None
                if kind == "input_audio_buffer.speech_stopped" and commit_at_ms is None:
                    stopped_at.append(clock())
                elif kind == "response.output_audio.delta" and stopped_at:
                    stats.first_audio_after_stop_ms.append(1000 * (clock() - stopped_at.pop()))
                elif kind == "response.done":
                    stats.responses_done += 1
                    if commit_at_ms is not None:
                        await ws.send(ACK_ALL)
                elif kind == "session.closed":
                    closed.set()
                    return

        read_task = asyncio.create_task(reader())
        period = chunk_ms / 1000
        t0 = clock() if phase is None else phase_start(clock(), phase[0], phase[1], period)
        n_chunks = int(duration_s / period)
        for k in range(n_chunks):
            due = t0 + k * period
            delay = due - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            await ws.send(frames[k % len(frames)])
            stats.send_lag_ms.append(1000 * (clock() - due))
            stats.sent += 1
            if k % len(frames) == commit_chunk:
                await ws.send(COMMIT)
                stopped_at.append(clock())
        await ws.send(json.dumps({"type": "session.close"}))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(closed.wait(), 10)
        read_task.cancel()
    return stats


async def run(
    url: str,
    sessions: int,
    duration_s: float,
    chunk_ms: int,
    ramp_s: float,
    wav: Path,
    commit_at_ms: float | None = None,
    phases: int | None = None,
) -> dict[str, float]:
    frames = append_frames(wav, chunk_ms, silence_s=2.5)
    t = time.monotonic() + 0.1
    tasks = [
        asyncio.create_task(
            run_session(
                url,
                frames,
                duration_s,
                chunk_ms,
                t + ramp_s * i / sessions,
                commit_at_ms,
                None if phases is None else (i, phases),
            )
        )
        for i in range(sessions)
    ]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    ok = [r for r in results if isinstance(r, SessionStats)]
    lags = np.array([x for r in ok for x in r.send_lag_ms] or [0.0])
    ttfa = np.array([x for r in ok for x in r.first_audio_after_stop_ms] or [np.nan])
    return {
        "sessions": sessions,
        "admitted": sum(r.admitted for r in ok),
        "rejected": sum(r.rejected is not None for r in ok),
        "failed": len(results) - len(ok),
        "appends_sent": int(sum(r.sent for r in ok)),
        "events_received": int(sum(r.received for r in ok)),
        "responses_done": int(sum(r.responses_done for r in ok)),
        "send_lag_p50_ms": float(np.percentile(lags, 50)),
        "send_lag_p99_ms": float(np.percentile(lags, 99)),
        "send_lag_max_ms": float(lags.max()),
        "stop_to_first_audio_p50_ms": float(np.nanpercentile(ttfa, 50)),
        "stop_to_first_audio_p99_ms": float(np.nanpercentile(ttfa, 99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of streaming")
    parser.add_argument("--chunk-ms", type=int, default=100)
    parser.add_argument("--ramp", type=float, default=5.0, help="seconds to start all sessions")
    parser.add_argument("--wav", type=Path, default=DEFAULT_WAV)
    parser.add_argument("--uvloop", action="store_true")
    parser.add_argument(
        "--phases", type=int, help="start each schedule on one of N send phases (as load does)"
    )
    parser.add_argument(
        "--commit-at-ms",
        type=float,
        help="client commits: turn_detection null, commit after the append reaching this "
        "position of each cycle (e.g. speech end + 200), ack each answer",
    )
    args = parser.parse_args()
    if not args.url.startswith(("ws://127.", "ws://localhost", "ws://[::1]")):
        raise SystemExit("benchmarks only send traffic to loopback")
    coro = run(
        args.url,
        args.sessions,
        args.duration,
        args.chunk_ms,
        args.ramp,
        args.wav,
        args.commit_at_ms,
        args.phases,
    )
    if args.uvloop:
        import uvloop

        result = uvloop.run(coro)
    else:
        result = asyncio.run(coro)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
