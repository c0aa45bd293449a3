"""Seconds: the collectives' alpha-beta cost models (``cost``, also read by the client halves'
modules), and on the server the virtual edge clock, device profiles and network schedules, the
timed grid and measured exchanges, and online link estimation."""
