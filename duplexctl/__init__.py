"""duplexctl: test full-duplex speech servers speaking the vLLM-Omni duplex Realtime protocol."""

__version__ = "0.1.0"

# The compiled core, if installed and built from exactly these sources (see native.py).
from duplexctl import native as _native

_native.activate()
