"""Unit constants, defined once and imported everywhere (one name per concept).

Times inside duplexctl are monotonic nanoseconds (``time.monotonic_ns``, receive and send
stamps) or seconds (the playback clock, the pacer); sizes are bytes.
"""

from __future__ import annotations

from typing import Final

#: nanoseconds in a second
NS_PER_S: Final = 1_000_000_000
#: nanoseconds in a millisecond
NS_PER_MS: Final = 1_000_000
#: bytes in a mebibyte
MiB: Final = 1024 * 1024
