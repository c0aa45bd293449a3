from benchmarks.payload_bytes import bytes_per_instruction, instructions


def _row(payloads, bytes_down):
    return {"model_payloads": payloads, "phases": [{"bytes_down": bytes_down}]}


def test_only_rounds_with_one_payload_are_counted_per_node():
    rows = [
        _row({"full": 4}, 800),
        _row({"patch": 2}, 100),
        _row({"delta": 1, "patch": 3}, 999),  # mixed: counted in instructions only
        _row({"patch": 4}, 400),
        _row(None, 123),  # dense: no payloads
    ]
    assert bytes_per_instruction(rows) == {"full": [200.0], "patch": [50.0, 100.0]}
    assert instructions(rows) == {"full": 4, "patch": 9, "delta": 1}
