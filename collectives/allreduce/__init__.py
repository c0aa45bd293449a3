"""Allreduce-compatible Top-k (collective.py), as a package: its client half (client.py), where
a shared index set comes from (index_policies.py), who leads and how a leader is judged
(leaders.py), and its names on the wire (names.py)."""

from collectives.allreduce.collective import Allreduce
from collectives.allreduce.index_policies import INDEX_POLICIES
from collectives.allreduce.leaders import LEADERS

__all__ = ["INDEX_POLICIES", "LEADERS", "Allreduce"]
