"""Simulators that are programs: an external command run per sample or per chunk."""
