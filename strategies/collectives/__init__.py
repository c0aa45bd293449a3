"""Collectives: both halves of one way to exchange updates, one module each, in a table.

Adding one is a module with a class that follows ``base.Collective`` and a line here.
"""

from __future__ import annotations

from strategies.collectives.allgather import Allgather
from strategies.collectives.allreduce import Allreduce
from strategies.collectives.base import Collective
from strategies.collectives.dense import Dense

COLLECTIVES: dict[str, type[Collective]] = {c.name: c for c in (Dense, Allgather, Allreduce)}
