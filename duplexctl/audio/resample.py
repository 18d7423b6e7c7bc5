"""Sample-rate conversion with libsoxr.

soxr's streaming resampler gives output that does not depend on how the input was chunked,
like vLLM-Omni's own polyphase resampler, so a server resampling 100 ms appends and a client
converting a whole file agree sample for sample (up to filter delay).
"""

from __future__ import annotations

import numpy as np
import soxr


def resample(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """Resample a whole mono float32 signal."""
    if rate_in == rate_out or samples.size == 0:
        return np.asarray(samples, dtype=np.float32)
    return soxr.resample(np.asarray(samples, dtype=np.float32), rate_in, rate_out, quality="HQ")


class StreamResampler:
    """Chunk-by-chunk resampling whose concatenated output equals a one-shot resample."""

    def __init__(self, rate_in: int, rate_out: int) -> None:
        self.rate_in = rate_in
        self.rate_out = rate_out
        self._stream = (
            None
            if rate_in == rate_out
            else soxr.ResampleStream(rate_in, rate_out, 1, dtype="float32", quality="HQ")
        )

    def process(self, samples: np.ndarray, *, last: bool = False) -> np.ndarray:
        if self._stream is None:
            return np.asarray(samples, dtype=np.float32)
        return self._stream.resample_chunk(np.asarray(samples, dtype=np.float32), last=last)
