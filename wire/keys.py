"""Every name on the wire, spelled once: record keys, config and metric keys, message types.

Both the ServerApp and the ClientApp import these; nothing else in the project spells them.
"""

from __future__ import annotations

# --- record keys (RecordDict entries) --------------------------------------------------------
ARRAYS_KEY = "arrays"  # dense: full model (server -> client) or update (client -> server)
CONFIG_KEY = "config"  # a ConfigRecord of instructions
METRICS_KEY = "metrics"  # a MetricRecord with every reply
MODEL_KEY = "model"  # compressed collectives: the full model as one raw vector
DELTA_KEY = "delta"  # compressed collectives: the last aggregated sparse update
# a delta that travels as low-rank factors (compress/low_rank.py Factored) has this array
FACTORED_TABLE = "factored-table"
PATCH_KEY = "patch"  # compressed collectives: the model's values where it changed since a base
INDEX_SET_KEY = "index-set"  # a shared index set (an instruction's or a phase request's)
SPARSE_KEY = "sparse"  # a client's compressed reply (values and/or indices)
INJECT_KEY = "injected"  # data injection: shared samples (client -> server -> other clients)
PACKED_KEY = "packed"  # a whole content in one ConfigRecord (wire/packing.py)

# --- arrays inside records -------------------------------------------------------------------
VALUES = "values"  # float32 values of a sparse vector (or of the whole model)
INDICES = "indices"  # int32 indices of a sparse vector
MASK = "mask"  # the same as a packed bitmask of the vector's length
SAMPLES_X = "x"  # injected samples: features
SAMPLES_Y = "y"  # injected samples: labels
RAW_STYPE = "edgeflex.raw"  # raw little-endian bytes, no .npy header
NUMPY_STYPE = "numpy.ndarray"  # Flower's own: .npy bytes (header, then data)

# --- instruction config keys -----------------------------------------------------------------
SERVER_ROUND = "server-round"
LEARNING_RATE = "learning-rate"
LOCAL_STEPS = "local-steps"
BATCH_SIZE = "batch-size"
SEED = "seed"
ROUND_START_S = "round-start-s"  # virtual time at which the round starts
INJECT_PARTITIONS = "inject-partitions"  # data injection: who shares this round
INJECT_BETA = "inject-beta"  # data injection: the share of its batch a chosen client sends
# compressed collectives
MODEL_VERSION = "model-version"  # the version the replica is at after this instruction
BASE_VERSION = "base-version"  # the version a delta or patch applies to
PAYLOAD = "payload"  # which model payload came: see PAYLOADS
COMPRESSION_RATIO = "compression-ratio"
COLLECTIVE = "collective"  # the round's collective (its client half answers)
REPORT_GAIN = "report-gain"  # cr-schedule = nsga2: report the gain at every grid ratio
ADAPTIVE_RATIO = "adaptive-ratio"  # adaptive-delta > 0: the c whose residual share to report

# Model payloads of a compressed collective's instruction
FULL, DELTA, PATCH, CURRENT = "full", "delta", "patch", "current"
PAYLOADS = (FULL, DELTA, PATCH, CURRENT)

# --- reply metric keys -----------------------------------------------------------------------
NUM_EXAMPLES = "num-examples"
PARTITION_ID = "partition-id"
TRAIN_LOSS = "train-loss"
COMPRESS_S = "compress-s"  # wall seconds the client spent compressing
GAIN_GRID = "gain-grid"  # compression gain at each ratio of the scheduler's grid
RESIDUAL_SHARE = "residual-share"  # adaptive: smoothed |‖e‖² − ‖TopK(e, c)‖²| / ‖e‖²
# Streaming clients (with every training reply when stream-rates is not "off")
STREAM_RATE = "stream-rate"  # samples/s this round
WAIT_S = "wait-s"  # virtual seconds spent waiting for samples before training
BUFFER_SAMPLES = "buffer-samples"  # samples buffered when the batch was drawn (peak of the round)
BUFFER_BYTES = "buffer-bytes"  # the same in bytes (features and label)
STREAM_SAMPLES = "stream-samples"  # own stream samples trained on (relayed ones not counted)
STREAM_METRICS = (STREAM_RATE, WAIT_S, BUFFER_SAMPLES, BUFFER_BYTES, STREAM_SAMPLES)
# A live stream (MQTT, in the device's agent) adds its running counts since the agent started
LIVE_PUBLISHED = "live-published"  # samples the publisher says it sent (from their seq)
LIVE_RECEIVED = "live-received"  # valid samples that reached the buffer
LIVE_INVALID = "live-invalid"  # messages refused by the sample decoder (dropped)
LIVE_TRAINED = "live-trained"  # samples drawn into batches
LIVE_DROPPED = "live-dropped"  # samples the buffer policy dropped (capacity, truncation)
LIVE_BUFFERED = "live-buffered"  # samples in the buffer after the round
LIVE_METRICS = (
    LIVE_PUBLISHED,
    LIVE_RECEIVED,
    LIVE_INVALID,
    LIVE_TRAINED,
    LIVE_DROPPED,
    LIVE_BUFFERED,
)
# timing = "measured": the client's wall clock (Unix seconds) when its handler began and when
# its reply was made, with every reply
RECEIVED_AT = "received-at"
SENT_AT = "sent-at"
TRAIN_S = "train-s"  # wall seconds of local SGD (training replies), part of the busy time
MEASURED_METRICS = (RECEIVED_AT, SENT_AT, TRAIN_S)

# --- message types ---------------------------------------------------------------------------
TRAIN = "train"  # Flower's MessageType.TRAIN
IDENTIFY_ACTION = "identify"  # clients-per-round: a node's partition id, asked before sampling
IDENTIFY = f"query.{IDENTIFY_ACTION}"
# Checkpoints in simulation (clients and server share a file system): each client writes its
# context.state at a checkpoint round and reads it back when the run resumes
SAVE_STATE_ACTION = "save_state"  # an action name: a Python identifier (Flower)
SAVE_STATE = f"query.{SAVE_STATE_ACTION}"
RESTORE_STATE_ACTION = "restore_state"
RESTORE_STATE = f"query.{RESTORE_STATE_ACTION}"
STATE_DIR = "state-dir"  # where the round's client states are
CLIENT_STATE_DIR = "client-state"  # in the results directory: round-R/partition-P.state
RESTORED = "restored"  # a restore reply: 1 when the client took its saved state

# --- node config keys (flower-supernode --node-config) ---------------------------------------
NODE_PARTITION_ID = "partition-id"
NODE_NUM_PARTITIONS = "num-partitions"
NODE_STREAM_RATE = "stream-rate"  # the device's own stream rate, samples/s
