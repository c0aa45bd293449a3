"""Seconds: the virtual edge clock, device profiles and network schedules, the timed grid and
measured exchanges, and online link estimation (server side)."""
