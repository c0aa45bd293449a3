"""Collectives: both halves of one way to exchange updates, one module each, in a table.

Adding one is a module with a subclass of ``base.Collective`` and a line here.
"""

from __future__ import annotations

from collectives.allgather import Allgather
from collectives.allreduce import Allreduce
from collectives.base import Collective
from collectives.dense import Dense
from collectives.powersgd import PowerSgd

# name -> the collective's class: its client half is class-level, the server half an instance
COLLECTIVES: dict[str, type[Collective]] = {
    c.name: c for c in (Dense, Allgather, Allreduce, PowerSgd)
}
# those whose clients' values of a round sit at the same coordinates (coordinatewise defences)
ALIGNED = frozenset(name for name, c in COLLECTIVES.items() if c.aligned)
