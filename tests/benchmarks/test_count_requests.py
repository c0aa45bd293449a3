"""The request counter the CPU-load script runs the SuperLink with."""

import json
from collections import Counter
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from benchmarks.count_requests import count_fastapi_requests, read_counts


def test_every_request_is_counted_by_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FastAPI, "__call__", FastAPI.__call__)  # restored after the test
    counts: Counter[str] = Counter()
    count_fastapi_requests(counts)
    app = FastAPI()
    app.post("/v1/fleet/pull-object")(lambda: {"ok": True})
    client = TestClient(app)
    for _ in range(3):
        assert client.post("/v1/fleet/pull-object").status_code == 200
    assert client.post("/v1/missing").status_code == 404  # refused requests cost too
    assert counts == {"/v1/fleet/pull-object": 3, "/v1/missing": 1}


def test_counts_are_read_back_and_a_missing_file_counts_nothing(tmp_path: Path) -> None:
    path = tmp_path / "counts.json"
    assert read_counts(path) == {}
    path.write_text(json.dumps({"/v1/fleet/push-object": 7}))
    assert read_counts(path)["/v1/fleet/push-object"] == 7
