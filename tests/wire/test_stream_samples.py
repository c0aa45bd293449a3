import json
import random

import numpy as np
import pytest

from wire.stream_samples import (
    DEFAULT_TOPIC_PREFIX,
    FEATURES,
    LABEL,
    SAMPLE_KEYS,
    SENT_AT,
    SEQ,
    SampleError,
    StreamSample,
    decode_sample,
    encode_sample,
    sample_topic,
)

FEATURES_N, CLASSES = 4, 10
X = np.array([0.0, 0.1, -3.5e-30, 3.4e38], dtype=np.float32)


def _decode(payload: bytes, **kwargs: int) -> StreamSample:
    return decode_sample(payload, features=FEATURES_N, classes=CLASSES, **kwargs)


def _payload(**changes: object) -> bytes:
    body: dict[str, object] = {
        SEQ: 3,
        SENT_AT: 1767225600.125,
        FEATURES: [0.0, 0.5, 1, 2],
        LABEL: 7,
    }
    body.update(changes)
    return json.dumps(body).encode()


def test_round_trip_is_exact() -> None:
    sample = StreamSample(seq=12, sent_at=1767225600.123456, x=X, y=9)
    back = _decode(encode_sample(sample))
    assert (back.seq, back.sent_at, back.y) == (12, 1767225600.123456, 9)
    assert back.x.dtype == np.float32 and np.array_equal(back.x, X)


def test_the_documented_encoding() -> None:
    payload = encode_sample(StreamSample(0, 1.5, np.array([0.25, 1.0], dtype=np.float32), 2))
    assert payload == b'{"seq":0,"t":1.5,"x":[0.25,1.0],"y":2}'
    assert SAMPLE_KEYS == ("seq", "t", "x", "y")
    # integers are numbers too: what a sensor writes by hand
    sample = decode_sample(b'{"y": 1, "x": [1, 2], "t": 5, "seq": 0}', features=2, classes=2)
    assert sample.sent_at == 5.0 and sample.x.tolist() == [1.0, 2.0]


def test_topic() -> None:
    assert sample_topic(DEFAULT_TOPIC_PREFIX, 3) == "edgeflex/node-3/samples"
    for prefix, pid in [("", 0), ("a/+", 0), ("a/#", 0), ("edgeflex", -1)]:
        with pytest.raises(ValueError):
            sample_topic(prefix, pid)


def test_encode_refuses_what_json_cannot_carry() -> None:
    with pytest.raises(SampleError, match="finite"):
        encode_sample(StreamSample(0, 1.0, np.array([np.nan], dtype=np.float32), 0))
    with pytest.raises(SampleError, match="one-dimensional"):
        encode_sample(StreamSample(0, 1.0, np.zeros((2, 2), dtype=np.float32), 0))


BAD = [
    # (payload, words the message must contain)
    (b"x" * 101, ["101 bytes", "100 limit"]),
    (b'{"seq": 1, "t": "\xff"}', ["not UTF-8"]),
    (b"{not json", ["not JSON"]),
    (b"", ["not JSON"]),
    (b"[1, 2]", ["JSON object", "list"]),
    (b"null", ["JSON object", "NoneType"]),
    (b'{"seq": 1, "t": 2.0, "x": [0, 0, 0, 0]}', ["missing", "'y'"]),
    (_payload(z=1), ["unknown", "'z'"]),
    (b'{"seq": 1, "seq": 2, "t": 2.0, "x": [0, 0, 0, 0], "y": 1}', ["repeats", "'seq'"]),
    (_payload(seq=-1), ["'seq'", "-1"]),
    (_payload(seq=1.0), ["'seq'", "1.0"]),
    (_payload(seq=True), ["'seq'", "True"]),
    (_payload(seq="1"), ["'seq'"]),
    (_payload(seq=2**63), ["'seq'"]),
    (_payload(t="now"), ["'t'", "finite"]),
    (_payload(t=False), ["'t'", "False"]),
    (_payload(t=None), ["'t'"]),
    (_payload(t=10**400), ["'t'"]),
    (_payload(t=1e308).replace(b"1e+308", b"1e999"), ["'t'", "inf"]),
    (_payload().replace(b"1767225600.125", b"NaN"), ["NaN"]),
    (_payload().replace(b"1767225600.125", b"-Infinity"), ["-Infinity"]),
    (_payload(x=[0, 0, 0]), ["'x'", "3 values", "4 features"]),
    (_payload(x="0000"), ["'x'", "list"]),
    (_payload(x={"0": 1}), ["'x'", "list"]),
    (_payload(x=[0, 0, True, 0]), ["'x'[2]", "True"]),
    (_payload(x=[0, 0, 0, "1"]), ["'x'[3]", "'1'"]),
    (_payload(x=[0, [1], 0, 0]), ["'x'[1]"]),
    (_payload(x=[0, 0, 0, None]), ["'x'[3]", "None"]),
    (_payload(x=[0, 1e300, 0, 0]), ["'x'[1]", "float32"]),
    (_payload(x=[0, 10**400, 0, 0]), ["'x'[1]"]),
    (_payload(x=[0, 0, 0, 0]).replace(b"0, 0]", b"0, 1e999]"), ["'x'[3]"]),
    (_payload(y=10), ["'y'", "0..9"]),
    (_payload(y=-1), ["'y'"]),
    (_payload(y=1.0), ["'y'", "1.0"]),
    (_payload(y=True), ["'y'", "True"]),
    (b"[" * 100 + b"]" * 100, ["JSON object"]),
    (b"1" * 90, ["JSON object", "int"]),
]


@pytest.mark.parametrize(("payload", "words"), BAD, ids=[" ".join(w) for _, w in BAD])
def test_bad_payloads_are_refused_naming_what_is_wrong(payload: bytes, words: list[str]) -> None:
    with pytest.raises(SampleError) as caught:
        _decode(payload, max_bytes=100) if payload.startswith(b"x") else _decode(payload)
    for word in words:
        assert word in str(caught.value), (word, str(caught.value))


def test_deep_nesting_and_huge_integers_are_sample_errors() -> None:
    with pytest.raises(SampleError, match="deeply"):
        _decode(b"[" * 200_000 + b"]" * 200_000)
    with pytest.raises(SampleError, match="not JSON"):
        _decode(_payload(seq=0).replace(b'"seq": 0', b'"seq": ' + b"9" * 5000))


def test_not_bytes() -> None:
    with pytest.raises(SampleError, match="bytes"):
        _decode("{}")  # type: ignore[arg-type]


def _mutations(rng: random.Random, valid: bytes) -> bytes:
    """Random bytes, or the valid payload with bytes flipped, cut, inserted or spliced with
    JSON tokens."""
    tokens = [
        b"NaN",
        b"1e999",
        b"-0",
        b"true",
        b"null",
        b'"x"',
        b"[",
        b"]",
        b"{",
        b"}",
        b",",
        b":",
        b"\\u0000",
        b"\xff",
        b"\xc3",
        b"9" * 30,
        b'"seq"',
        b"[[[[",
        b"1.5",
        b"-1",
    ]
    data = bytearray(valid)
    kind = rng.randrange(5)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(len(data) + 1)
        if kind == 1 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif kind == 2:
            del data[pos : pos + rng.randint(1, 8)]
        else:
            data[pos:pos] = rng.choice(tokens)
    return bytes(data)


def _random_value(rng: random.Random, depth: int = 0) -> object:
    choices = [
        lambda: rng.randint(-(2**70), 2**70),
        lambda: rng.uniform(-1e40, 1e40),
        lambda: rng.choice([True, False, None, "", "y", 0, 1, -1, 9, 10, 2**63]),
        lambda: [_random_value(rng, depth + 1) for _ in range(rng.choice([0, 3, 4, 5]))],
        lambda: {str(rng.randrange(3)): _random_value(rng, depth + 1)},
    ]
    return rng.choice(choices[: 3 if depth > 2 else 5])()


def test_fuzz_only_ever_raises_sample_error() -> None:
    rng = random.Random(20240611)
    valid = encode_sample(StreamSample(5, 1767225600.5, X, 3))
    accepted = refused = 0
    for case in range(10_000):
        if case % 2:
            payload = _mutations(rng, valid)
        else:
            body: dict[str, object] = json.loads(valid)
            key = rng.choice([*SAMPLE_KEYS, "extra"])
            body[key] = _random_value(rng)
            payload = json.dumps(body).encode()
        try:
            sample = _decode(payload)
        except SampleError:
            refused += 1
            continue
        accepted += 1
        assert 0 <= sample.y < CLASSES and sample.x.shape == (FEATURES_N,)
        assert np.isfinite(sample.x).all() and np.isfinite(sample.sent_at) and sample.seq >= 0
    assert refused > 2500 and accepted > 250  # both paths were exercised
