"""audio/writers.py: incremental WAVs that are valid at every instant, and aligned stereo."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from duplexctl.audio.pcm import float_to_pcm16, pcm16_to_float
from duplexctl.audio.writers import ConversationWavWriter, WavWriter, write_wav

ROOT = Path(__file__).resolve().parent.parent
RATE = 16000


def ramp(n: int, scale: float = 0.5) -> np.ndarray:
    return (scale * np.sin(np.arange(n) / 7.0)).astype(np.float32)


def test_wav_writer_is_readable_before_close(tmp_path: Path) -> None:
    path = tmp_path / "out.wav"
    writer = WavWriter(path, RATE)
    try:
        blocks = [ramp(1600) * (k + 1) / 4 for k in range(3)]
        for block in blocks:
            writer.write(block)
        # Read back while the writer is still open: header already says 4800 frames.
        data, rate = sf.read(path, dtype="int16")
        assert rate == RATE and data.shape == (4800,)
        expected = np.frombuffer(float_to_pcm16(np.concatenate(blocks)), dtype="<i2")
        np.testing.assert_array_equal(data, expected)
        assert writer.duration_ms == 300.0
    finally:
        writer.close()
    writer.close()  # idempotent
    assert sf.info(path).frames == 4800


def test_context_manager_and_write_after_close(tmp_path: Path) -> None:
    with WavWriter(tmp_path / "a.wav", 24000) as writer:
        writer.write(np.zeros(240, dtype=np.float32))
    assert writer.closed
    with pytest.raises(ValueError, match="closed"):
        writer.write(np.zeros(10, dtype=np.float32))
    assert sf.info(tmp_path / "a.wav").samplerate == 24000


def test_scaling_matches_the_wire_codec(tmp_path: Path) -> None:
    x = np.array([-1.5, -1.0, -0.5, 0.0, 0.25, 0.999, 1.0, 2.0], dtype=np.float32)
    with WavWriter(tmp_path / "s.wav", RATE) as writer:
        writer.write(x)
    raw = (tmp_path / "s.wav").read_bytes()[44:]
    assert raw == float_to_pcm16(x)
    np.testing.assert_array_equal(
        sf.read(tmp_path / "s.wav", dtype="float32")[0], pcm16_to_float(raw)
    )


def test_conversation_clicks_land_on_the_right_samples(tmp_path: Path) -> None:
    path = tmp_path / "conv.wav"
    click = np.array([0.9, -0.9], dtype=np.float32)
    with ConversationWavWriter(path, RATE) as writer:
        writer.write_assistant(click, at_ms=1200.0)  # written first, further out
        writer.write_user(click, at_ms=500.0)  # lands inside the already written region
        data, rate = sf.read(path, dtype="float32")  # readable before close, too
        assert data.shape == (1200 * 16 + 2, 2)
    data, rate = sf.read(path, dtype="float32")
    assert rate == RATE and data.shape[1] == 2
    user, assistant = data[:, 0], data[:, 1]
    assert np.flatnonzero(user).tolist() == [8000, 8001]
    assert np.flatnonzero(assistant).tolist() == [19200, 19201]
    assert user[8000] == pytest.approx(0.9, abs=1e-4) and user[8001] == pytest.approx(
        -0.9, abs=1e-4
    )


def test_conversation_gaps_are_zero_and_overlaps_add(tmp_path: Path) -> None:
    path = tmp_path / "mix.wav"
    with ConversationWavWriter(path, RATE) as writer:
        writer.write_user(np.full(1600, 0.25, np.float32), at_ms=0)
        writer.write_user(np.full(1600, 0.25, np.float32), at_ms=200)  # gap 100..200 ms
        writer.write_assistant(np.full(800, 0.5, np.float32), at_ms=50)
        writer.write_assistant(np.full(800, 0.75, np.float32), at_ms=75)  # overlaps 75..100
        writer.write_assistant(np.full(16, 0.5, np.float32), at_ms=-0.5)  # 8 samples dropped
    data, _ = sf.read(path, dtype="float32")
    assert data.shape[0] == 4800
    user, assistant = data[:, 0], data[:, 1]
    assert np.all(user[:1600] == 0.25) and not user[1600:3200].any()
    assert np.all(user[3200:] == 0.25)
    assert np.all(assistant[:8] == 0.5) and not assistant[8:800].any()
    assert np.all(assistant[800:1200] == 0.5)
    assert np.all(assistant[1200:1600] == pytest.approx(1.0, abs=1e-4))  # 0.5 + 0.75, clipped
    assert np.all(assistant[1600:2000] == 0.75) and not assistant[2000:].any()


def test_conversation_rejects_unknown_channel(tmp_path: Path) -> None:
    with ConversationWavWriter(tmp_path / "c.wav", RATE) as writer, pytest.raises(ValueError):
        writer.write(2, np.zeros(4, np.float32), 0)


def test_write_wav_one_shot(tmp_path: Path) -> None:
    mono = ramp(1000)
    write_wav(tmp_path / "m.wav", mono, 8000)
    data, rate = sf.read(tmp_path / "m.wav", dtype="int16")
    assert rate == 8000
    np.testing.assert_array_equal(data, np.frombuffer(float_to_pcm16(mono), dtype="<i2"))
    write_wav(tmp_path / "st.wav", np.stack([mono, -mono], axis=1), 8000)
    info = sf.info(tmp_path / "st.wav")
    assert (info.channels, info.frames, info.subtype) == (2, 1000, "PCM_16")


CHILD = textwrap.dedent(
    """
    import signal, sys, time
    import numpy as np
    # a child started from a shell's background job inherits SIGINT ignored: restore it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, {root!r})
    from duplexctl.audio.writers import ConversationWavWriter, WavWriter
    mono = WavWriter({mono!r}, 16000)
    conv = ConversationWavWriter({conv!r}, 16000)
    try:
        for k in range(5):
            mono.write(np.full(1600, 0.1 * (k + 1), np.float32))
            conv.write_user(np.full(1600, 0.2, np.float32), at_ms=100 * k)
            conv.write_assistant(np.full(800, 0.3, np.float32), at_ms=100 * k + 250)
        print("written", flush=True)
        time.sleep(60)
    finally:
        if {close_in_finally!r}:
            mono.close()
            conv.close()
    """
)


@pytest.mark.parametrize(
    ("sig", "close_in_finally"), [(signal.SIGINT, True), (signal.SIGKILL, False)]
)
def test_interrupted_run_leaves_readable_wavs(
    tmp_path: Path, sig: signal.Signals, close_in_finally: bool
) -> None:
    mono, conv = tmp_path / "mono.wav", tmp_path / "conv.wav"
    code = CHILD.format(
        root=str(ROOT), mono=str(mono), conv=str(conv), close_in_finally=close_in_finally
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "written"
        proc.send_signal(sig)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0

    data, rate = sf.read(mono, dtype="float32")
    assert rate == 16000 and data.shape == (8000,)
    np.testing.assert_allclose(data[-1600:], 0.5, atol=1e-4)
    stereo, _ = sf.read(conv, dtype="float32")
    assert stereo.shape == (11200, 2)  # the last assistant block ends at 650 + 50 ms
    np.testing.assert_allclose(stereo[:8000, 0], 0.2, atol=1e-4)
    assert not stereo[8000:, 0].any()
    for k in range(5):
        start = 4000 + 1600 * k
        np.testing.assert_allclose(stereo[start : start + 800, 1], 0.3, atol=1e-4)
        assert not stereo[start + 800 : start + 1600, 1].any()
