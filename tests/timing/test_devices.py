from pathlib import Path

import pytest

from common.settings import PROJECT_ROOT
from timing.devices import MBPS, DeviceConfigError, load_catalog

GOOD = """
[preset.pi]
source = "a test"
train-gflops = 2.0
step-overhead-ms = 5.0
uplink-mbps = 8.0
downlink-mbps = 16.0
latency-ms = 20.0
hardware = "cpu"

[preset.jetson]
source = "a test"
train-gflops = 200.0
step-overhead-ms = 1.0
uplink-mbps = 80.0
downlink-mbps = 80.0
latency-ms = 1.0
hardware = "gpu"

[mix.two]
presets = ["pi", "jetson"]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "devices.toml"
    path.write_text(text)
    return path


def test_shipped_presets_load_and_mix_cycles_over_clients() -> None:
    catalog = load_catalog(PROJECT_ROOT / "configs" / "devices.toml")
    assert {"rpi4-wifi", "rpi4-lte", "jetson-ethernet"} <= set(catalog.presets)
    profiles = catalog.assign("edge-mix", 5)
    assert [p.name for p in profiles.values()] == [
        "rpi4-wifi",
        "rpi4-lte",
        "jetson-ethernet",
        "rpi4-wifi",
        "rpi4-lte",
    ]


def test_every_shipped_preset_cites_its_source() -> None:
    text = (PROJECT_ROOT / "configs" / "devices.toml").read_text()
    catalog = load_catalog(PROJECT_ROOT / "configs" / "devices.toml")
    for name in catalog.presets:
        block = text.split(f"[preset.{name}]")[1].split("[")[0]
        assert "source = " in block and ("http" in block or "benchmarks.bench_device" in block), (
            name
        )


def test_units_are_converted_to_bytes_and_seconds(tmp_path: Path) -> None:
    pi = load_catalog(_write(tmp_path, GOOD)).presets["pi"]
    assert pi.train_flops_per_s == 2e9
    assert pi.step_overhead_s == pytest.approx(0.005)
    assert pi.uplink_bytes_per_s == 8.0 * MBPS == 1_000_000.0
    assert pi.downlink_bytes_per_s == 2_000_000.0
    assert pi.latency_s == pytest.approx(0.020)
    assert pi.hardware == "cpu"


def test_every_shipped_preset_says_its_hardware_and_jetsons_charge_their_gpu() -> None:
    presets = load_catalog(PROJECT_ROOT / "configs" / "devices.toml").presets
    assert {name: p.hardware for name, p in presets.items() if "jetson" in name} == {
        "jetson-ethernet": "gpu",
        "jetson-cpu-ethernet": "cpu",
    }
    assert {p.hardware for name, p in presets.items() if name.startswith("rpi")} == {"cpu"}


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "uplink-mbps = 8.0",
            "uplink-mbps = -8.0",
            r"devices.toml:2: preset 'pi': field 'uplink-mbps' must be > 0",
        ),
        ("latency-ms = 20.0", "latency = 20.0", r":2: preset 'pi': unknown field 'latency'"),
        ("latency-ms = 20.0", "", r":2: preset 'pi': missing field 'latency-ms'"),
        (
            'presets = ["pi", "jetson"]',
            'presets = ["pi", "tpu"]',
            r":20: mix 'two': field 'presets' names unknown preset 'tpu'",
        ),
        ("uplink-mbps = 8.0", 'uplink-mbps = "fast"', r"field 'uplink-mbps' must be a float"),
        ("train-gflops = 2.0", "train-gflops = 0.0", r"'train-gflops' must be > 0, got 0.0"),
        ("step-overhead-ms = 5.0", "step-overhead-ms = -1", r"'step-overhead-ms' must be >= 0"),
        ('source = "a test"', 'source = " "', r":2: preset 'pi': field 'source' is empty"),
        ('source = "a test"\n', "", r":2: preset 'pi': missing field 'source'"),
        ('hardware = "cpu"\n', "", r":2: preset 'pi': missing field 'hardware'"),
        (
            'hardware = "cpu"',
            'hardware = "tpu"',
            r":2: preset 'pi': field 'hardware' = 'tpu' is not allowed; allowed values: cpu, gpu",
        ),
        (
            "train-gflops = 2.0",
            "compute-samples-per-s = 2000.0",
            r"unknown field 'compute-samples-per-s'; allowed fields: description, source, "
            "train-gflops, step-overhead-ms",
        ),
    ],
)
def test_malformed_files_name_file_line_and_field(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = _write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(DeviceConfigError, match=message):
        load_catalog(path)


def test_unknown_mix_lists_the_known_ones(tmp_path: Path) -> None:
    catalog = load_catalog(_write(tmp_path, GOOD))
    with pytest.raises(
        DeviceConfigError, match="device-mix = 'three' is not defined; allowed values: two"
    ):
        catalog.assign("three", 4)
