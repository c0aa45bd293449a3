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
INJECT_KEY = "injected"  # data injection: shared samples (client -> server -> other clients)

# Metric keys
NUM_EXAMPLES = "num-examples"
PARTITION_ID = "partition-id"
TRAIN_LOSS = "train-loss"
COMPRESS_S = "compress-s"
TOPK_NORM2 = "topk-norm2"
GAIN_GRID = "gain-grid"  # compression gain at each ratio of the scheduler's grid
# Streaming clients (with every training reply when stream-rates is not "off")
STREAM_RATE = "stream-rate"  # samples/s this round
WAIT_S = "wait-s"  # virtual seconds spent waiting for samples before training
BUFFER_SAMPLES = "buffer-samples"  # samples buffered when the batch was drawn (peak of the round)
BUFFER_BYTES = "buffer-bytes"  # the same in bytes (features and label)
STREAM_SAMPLES = "stream-samples"  # own stream samples trained on (relayed ones not counted)
STREAM_METRICS = (STREAM_RATE, WAIT_S, BUFFER_SAMPLES, BUFFER_BYTES, STREAM_SAMPLES)
# Adaptive compression (adaptive-delta > 0): smoothed |‖e‖² − ‖TopK(e, c)‖²| / ‖e‖²
RESIDUAL_SHARE = "residual-share"
# timing = "measured": the client's wall clock (Unix seconds) when its handler began and when
# its reply was made, with every reply
RECEIVED_AT = "received-at"
SENT_AT = "sent-at"
TRAIN_S = "train-s"  # wall seconds of local SGD (training replies), part of the busy time

# Config keys the server adds to each round's instructions
ROUND_START_S = "round-start-s"  # virtual time at which the round starts
INJECT_PARTITIONS = "inject-partitions"  # data injection: who shares this round
INJECT_BETA = "inject-beta"  # data injection: the share of its batch a chosen client sends
ADAPTIVE_RATIO = "adaptive-ratio"  # adaptive-delta > 0: the c whose residual share to report

# Message actions inside one Top-k round (Flower message types "train", "train.<action>")
INDICES_ACTION = "indices"
VALUES_ACTION = "values"
