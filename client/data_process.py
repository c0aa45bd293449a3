"""A node's partition, made in a short-lived child process.

Making a partition imports scikit-learn (and SciPy), Hugging Face ``datasets`` and pyarrow:
about 200 MB that a process keeps until it ends. The edge agent lives for days on a board of
1 GB, and needs the partition once (it keeps it in ``context.state``), so it asks a child:

    echo '{"run_config": {...}, "partition_id": 2}' | python -m client.data_process

The child writes the partition as an ``.npz`` of two arrays to its stdout; the agent reads each
with the project's one ``.npy`` reader (``wire.codec.read_npz``: no pickle, the header checked
before anything is allocated), and checks what it read as it checks anything from outside.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from typing import Any

import numpy as np

from common.data import ArrayData
from wire.codec import PayloadError, read_npz

CHILD_TIMEOUT_S = 600.0  # a first import of the data libraries on a Pi takes tens of seconds


def partition_in_child(run_config: dict[str, Any], partition_id: int) -> ArrayData:
    """``client_partition`` for this run's settings, computed by a child process;
    RuntimeError with the child's last words when it fails."""
    request = json.dumps({"run_config": run_config, "partition_id": partition_id})
    done = subprocess.run(
        [sys.executable, "-m", "client.data_process"],
        input=request.encode(),
        capture_output=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"making partition {partition_id} failed: {' / '.join(tail)}")
    try:
        with zipfile.ZipFile(io.BytesIO(done.stdout)) as archive:
            arrays = read_npz(archive, ["x", "y"], len(done.stdout))
    except (zipfile.BadZipFile, PayloadError) as exc:
        raise RuntimeError(f"the partition's child wrote no partition: {exc}") from None
    x, y = arrays["x"], arrays["y"]
    if x.ndim != 2 or y.ndim != 1 or len(x) != len(y):
        raise RuntimeError(f"the partition's arrays have shapes {x.shape} and {y.shape}")
    return ArrayData(x=x.astype(np.float32, copy=False), y=y.astype(np.int64, copy=False))


def main() -> int:
    from common.data import client_partition
    from common.settings import Settings

    request = json.load(sys.stdin)
    settings = Settings.from_run_config(request["run_config"], tables=False)
    data = client_partition(settings, int(request["partition_id"]))
    out = io.BytesIO()
    np.savez(out, x=data.x, y=data.y)
    sys.stdout.buffer.write(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
