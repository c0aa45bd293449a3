"""benchmarks.cpu_load's accounting: CPU by kind of process between two snapshots."""

from __future__ import annotations

import os
import time

from benchmarks.cpu_load import cpu_seconds, cpu_used


def test_cpu_used_sums_by_kind_and_counts_what_started_inside_the_window() -> None:
    before = {1: ("raylet", 2.0), 2: ("ray::ClientAppActor", 1.0), 3: ("gone", 5.0)}
    after = {
        1: ("raylet", 2.5),
        2: ("ray::ClientAppActor", 1.25),
        4: ("ray::ClientAppActor", 0.5),  # started inside the window: all of it
    }
    used = cpu_used(before, after)
    assert used == {"raylet": 0.5, "ray::ClientAppActor": 0.75}
    assert "gone" not in used  # ended inside the window: nothing of it is known


def test_cpu_by_process_sees_the_cpu_this_process_uses() -> None:
    _, before = cpu_seconds({os.getpid()})[os.getpid()]
    began = time.process_time()
    while time.process_time() - began < 0.2:  # 0.2 s of CPU of our own
        pass
    label, after = cpu_seconds({os.getpid()})[os.getpid()]
    assert label and after - before >= 0.15
