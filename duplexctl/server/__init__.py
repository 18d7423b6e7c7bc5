"""The reference duplex server (``duplexctl serve``): protocol-faithful, simulated model."""
