"""Names shared by the ServerApp and the ClientApp: record keys, metric keys, message actions."""

from __future__ import annotations

# Record keys
ARRAYS_KEY = "arrays"  # dense: full model (server -> client) or update (client -> server)
CONFIG_KEY = "config"
METRICS_KEY = "metrics"
MODEL_KEY = "model"  # Top-k: the full model as one raw vector
DELTA_KEY = "delta"  # Top-k: the last aggregated sparse update
INDEX_SET_KEY = "index-set"  # Allreduce: the shared indices
SPARSE_KEY = "sparse"  # a client's sparse reply (values and/or indices)

# Metric keys
NUM_EXAMPLES = "num-examples"
PARTITION_ID = "partition-id"
TRAIN_LOSS = "train-loss"
COMPRESS_S = "compress-s"
TOPK_NORM2 = "topk-norm2"
GAIN_GRID = "gain-grid"  # compression gain at each ratio of the scheduler's grid

# Message actions inside one Top-k round (Flower message types "train", "train.<action>")
INDICES_ACTION = "indices"
VALUES_ACTION = "values"
