"""Make a certificate authority and a SuperLink server certificate for TLS.

    python -m commands.make_certificates certs/                       # localhost only
    python -m commands.make_certificates certs/ --host 192.168.1.10 --host edge-server.local

Writes, in the output directory:
- ``ca.crt`` / ``ca.key``: a self-signed CA. Copy ``ca.crt`` (never ``ca.key``) to every device
  and to the machine that runs ``flwr run``: it is what they verify the SuperLink against.
- ``server.pem`` / ``server.key``: the SuperLink's certificate, signed by the CA, valid for
  ``localhost``, ``127.0.0.1`` and every ``--host`` (a DNS name or an IP address).
Keys are ECDSA P-384; the private keys are written with mode 0600.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
CERTIFICATE_FILES = ("ca.crt", "ca.key", "server.pem", "server.key")  # make_certificates' order


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "edgeflex"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _alt_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def write_private_key(
    path: Path,
    key: ec.EllipticCurvePrivateKey,
    fmt: serialization.PrivateFormat = serialization.PrivateFormat.TraditionalOpenSSL,
) -> None:
    """Write ``key`` unencrypted as PEM, readable by its owner only (mode 0600)."""
    data = key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def make_certificates(out_dir: Path, hosts: Sequence[str] = (), days: int = 365) -> list[Path]:
    """Write ca.crt, ca.key, server.pem and server.key into ``out_dir``; return their paths."""
    if days <= 0:
        raise ValueError(f"days must be positive, got {days}")
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys([*DEFAULT_HOSTS, *hosts]))  # ordered, no repeats
    alt_names = [_alt_name(h) for h in names]  # raises on nothing: every string is a DNS name
    now = datetime.datetime.now(datetime.UTC)
    not_after = now + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = _name("edgeflex CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA384())
    )

    server_key = ec.generate_private_key(ec.SECP384R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA384())
    )

    paths = [out_dir / name for name in CERTIFICATE_FILES]
    paths[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    write_private_key(paths[1], ca_key)
    paths[2].write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    write_private_key(paths[3], server_key)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path, help="where to write the four files")
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        help="a DNS name or IP address the SuperLink is reached at (repeatable)",
    )
    parser.add_argument("--days", type=int, default=365, help="validity (default 365)")
    args = parser.parse_args(argv)
    for path in make_certificates(args.out_dir, args.host, args.days):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
