"""duplexctl: test full-duplex speech servers speaking the vLLM-Omni duplex Realtime protocol."""

__version__ = "0.1.0"
