"""Allreduce's own names on the wire and in a client's state."""

from __future__ import annotations

from wire.keys import TRAIN

TOPK_NORM2 = "topk-norm2"  # a leader-phase training reply's ||TopK(e)||² (the VAR score)
HINT_COUNT = "hint-count"  # residual-hints: how many residual indices to report
HINTS_KEY = "residual-hints"  # residual-hints: where a client's residual is largest
INDICES_ACTION = "indices"  # the index phase: "train.indices"
VALUES_ACTION = "values"  # the value phase: "train.values"
TRAIN_INDICES = f"{TRAIN}.{INDICES_ACTION}"
TRAIN_VALUES = f"{TRAIN}.{VALUES_ACTION}"

PENDING_KEY = "ef-pending"  # e, held between the training and the value phase
OWN_INDICES_KEY = "ef-pending-indices"  # TopK(e) outside the buffers: the leader's index set
