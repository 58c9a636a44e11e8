"""The official OpenAI SDK through tollgate's TLS listener, trusting a private CA.

The CA and the gateway's certificate are made here with the openssl command line (the venv
has no `cryptography`); the gateway serves them with --tls-cert-path / --tls-key-path in
front of engine A of the session's fleet.
"""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

import harness

PROMPT = [{"role": "user", "content": "Name three colours of the rainbow."}]


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)


def make_pki(d: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate signed by it for localhost and 127.0.0.1."""
    ca_key, ca = d / "ca.key", d / "ca.pem"
    key, csr, cert, ext = d / "server.key", d / "server.csr", d / "server.pem", d / "server.ext"
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(ca_key), "-out", str(ca), "-days", "2", "-subj", "/CN=tollgate test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )
    openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(csr), "-subj", "/CN=tollgate",
    )
    ext.write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
    )
    openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext),
    )
    return ca, cert, key


def wait_ready(gw: harness.Proc, ca: Path, timeout: float = 30) -> None:
    """Proc.wait_http over TLS: until /readiness answers 200."""
    ctx = ssl.create_default_context(cafile=str(ca))
    gw.wait_http("/readiness", timeout, base=f"https://127.0.0.1:{gw.port}", verify=ctx)


@pytest.fixture(scope="module")
def tls_gateway(fleet):
    d = fleet.logdir / "tls"
    d.mkdir(exist_ok=True)
    ca, cert, key = make_pki(d)
    gw = harness.gateway(
        fleet.logdir,
        "tollgate-tls",
        [fleet.a.url],
        ["--tls-cert-path", str(cert), "--tls-key-path", str(key)],
    )
    gw.start()
    try:
        wait_ready(gw, ca)
        yield gw, ca
    finally:
        gw.stop()


def sdk(gw: harness.Proc, http: httpx.Client, retries: int = 2) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="unused",
        base_url=f"https://127.0.0.1:{gw.port}/v1",
        http_client=http,
        max_retries=retries,
    )


def test_openai_sdk_over_tls_with_a_private_ca(tls_gateway):
    gw, ca = tls_gateway
    with httpx.Client(verify=ssl.create_default_context(cafile=str(ca)), timeout=60) as http:
        client = sdk(gw, http)
        done = client.chat.completions.create(
            model=harness.MODEL_ALIAS, messages=PROMPT, max_tokens=16
        )
        assert done.choices[0].message.content, done
        stream = client.chat.completions.create(
            model=harness.MODEL_ALIAS, messages=PROMPT, max_tokens=16, stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text, "the stream carried no text"


def test_client_without_the_ca_is_refused(tls_gateway):
    gw, _ = tls_gateway
    with httpx.Client(timeout=10) as http:
        with pytest.raises(openai.APIConnectionError):
            sdk(gw, http, retries=0).models.list()
    assert gw.alive()
