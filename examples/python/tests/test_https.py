"""The MCP Python SDK's Streamable HTTP client against `aci serve --http` over TLS.

The certificate authority and the server certificate are made here (the
`cryptography` package); the client trusts that CA only.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import ipaddress
import secrets
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from conftest import _free_port, _stop


@dataclass
class HttpsAci:
    url: str
    token: str
    ca: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _make_pki(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1: (ca, cert, key) PEM files."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("aci python test CA"))
        .issuer_name(_name("aci python test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("aci python test server"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.crt", directory / "server.crt", directory / "server.key"
    paths[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@pytest.fixture(scope="module")
def aci_https(aci_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsAci]:
    """One `aci serve --http` replica serving TLS on a free loopback port."""
    workdir = tmp_path_factory.mktemp("aci-https")
    ca, cert, key = _make_pki(workdir)
    token = secrets.token_urlsafe(24)
    config = workdir / "aci.toml"
    config.write_text(
        f'[serve]\ntls_cert_file = "{cert}"\ntls_key_file = "{key}"\n'
        f'[auth.tokens.py-tests]\nsha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
    )
    log = workdir / "serve.log"
    port = _free_port()
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [aci_bin, "serve", "--http", f"127.0.0.1:{port}", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        while b"serving MCP over HTTPS" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"aci serve --http did not start: {log.read_text()}", pytrace=False)
            time.sleep(0.05)
        yield HttpsAci(url=f"https://127.0.0.1:{port}/mcp", token=token, ca=ca)
    finally:
        _stop(proc)


async def _lookup(aci: HttpsAci, ca: Path | None, run_id: str) -> dict:
    """One `lookup_knowledge` call; the client trusts `ca` (None: the system's CAs)."""
    context = ssl.create_default_context(cafile=str(ca)) if ca else ssl.create_default_context()
    headers = {"Authorization": f"Bearer {aci.token}", "Aci-Run-Id": run_id}
    async with httpx.AsyncClient(headers=headers, verify=context) as http:
        async with streamable_http_client(aci.url, http_client=http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool(
                    "lookup_knowledge", {"query": "connection pool exhausted"}
                )
                return result.structuredContent


def test_the_python_sdk_calls_over_https(aci_https, run_id):
    observation = asyncio.run(_lookup(aci_https, aci_https.ca, run_id))
    assert observation["evidence_status"] == "EVIDENCE_FOUND", observation


def test_a_client_that_does_not_trust_the_ca_reaches_nothing(aci_https, run_id):
    with pytest.raises(Exception):  # noqa: B017 - the SDK's own (grouped) connection error
        asyncio.run(_lookup(aci_https, None, run_id))
