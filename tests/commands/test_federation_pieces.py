"""The launcher's pieces that need no running federation: node configs and certificates."""

from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from commands.federation import deployment_overrides, node_config
from commands.make_certificates import make_certificates
from commands.run_config import parse_overrides, resolve_settings
from common.rates import client_rate


def test_each_supernode_is_told_its_partition_and_stream_rate() -> None:
    settings = resolve_settings(parse_overrides("num-clients=4 stream-rates=S2 seed=3"))
    expected = client_rate("S2", 2, 4, 3, 0)
    assert node_config(settings, 2) == f"partition-id=2 num-partitions=4 stream-rate={expected!r}"
    # A rate redrawn every round cannot be a device setting; without streams there is none.
    varying = resolve_settings(
        parse_overrides("num-clients=4 stream-rates=S2 stream-rates-vary=true")
    )
    assert node_config(varying, 1) == "partition-id=1 num-partitions=4"
    static = resolve_settings(parse_overrides("num-clients=4"))
    assert node_config(static, 0) == "partition-id=0 num-partitions=4"


def test_deployment_measures_unless_told_otherwise() -> None:
    assert deployment_overrides({"seed": 1}) == {
        "timing": "measured",
        "lr-scale-max": 1.0,
        "seed": 1,
    }
    assert deployment_overrides({"timing": "modelled"})["timing"] == "modelled"
    assert deployment_overrides({"lr-scale-max": 0.0})["lr-scale-max"] == 0.0


def test_server_certificate_is_signed_by_the_ca_for_the_given_hosts(tmp_path: Path) -> None:
    ca_path, ca_key_path, cert_path, key_path = make_certificates(
        tmp_path, ["192.168.1.10", "edge-server.local"]
    )
    ca = x509.load_pem_x509_certificate(ca_path.read_bytes())
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    assert cert.issuer == ca.subject
    public = ca.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(ca)  # raises if the signature does not check out
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "edge-server.local"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == [
        "127.0.0.1",
        "192.168.1.10",
    ]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert (key_path.stat().st_mode & 0o777) == 0o600
    assert (ca_key_path.stat().st_mode & 0o777) == 0o600
