"""The parts of one engine session, one job each, behind ``server.session.EngineSession``."""
