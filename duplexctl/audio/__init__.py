"""Audio: wire formats, resampling, files, pacing and playback clocks."""
