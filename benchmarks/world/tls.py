"""A self-signed serving certificate for the admission webhook's HTTPS server: the tests
(tests/admissionsupport.py) and the admission benchmark use this one helper."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path


def certificate(tmp: Path, name: str, at: datetime, days: int = 3650) -> tuple[Path, Path]:
    """tls.crt and tls.key in `tmp`: ECDSA P-256, for `name` and localhost, valid from a day
    before `at` for `days` days."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(at - timedelta(days=1))
        .not_valid_after(at + timedelta(days=days))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.DNSName(name)]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    crt, pem = tmp / "tls.crt", tmp / "tls.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return crt, pem
