"""Certificates and keys for the local control plane, made with PyPI's `cryptography`.

Why not a static token: the components authenticate the way a real cluster's do — client
certificates signed by one CA, identity in the subject (CN = user, O = groups) — so RBAC sees
`system:kube-controller-manager` and `system:kube-scheduler` and their bootstrap roles apply.
ECDSA P-256 keys keep generation instant. Everything is written once into the state directory
and reused, so the kubeconfig stays valid across `down`/`up`.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=3650)


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate's subject: `user` becomes the CN, `groups` the O entries."""

    file_stem: str
    user: str
    groups: tuple[str, ...] = ()


# Who talks to the API server, and as whom.
CLIENTS: tuple[ClientIdentity, ...] = (
    ClientIdentity("admin", "llmop-admin", ("system:masters",)),
    ClientIdentity("controller-manager", "system:kube-controller-manager"),
    ClientIdentity("scheduler", "system:kube-scheduler"),
    # kwok plays every kubelet and patches node and pod status broadly.
    ClientIdentity("kwok", "kwok-controller", ("system:masters",)),
    # The real node's kubelet and kube-proxy, bound to the bootstrap roles system:node and
    # system:node-proxier when the node starts (realnode.node_rbac).
    ClientIdentity("kubelet", "system:node:llmop-node-0", ("system:nodes",)),
    ClientIdentity("kube-proxy", "system:kube-proxy"),
    # The API server itself, calling the kubelet for logs and exec (the kubelet checks it with the CA).
    ClientIdentity("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",)),
)


def serving_sans(service_ip: str) -> tuple[list[str], list[str]]:
    """DNS names and IPs the API server certificate must carry (loopback plus the in-cluster
    `kubernetes` Service, so pods that reach it by that name would verify too)."""
    dns = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    return dns, ["127.0.0.1", service_ip]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
    )


def make_ca(common_name: str = "llmop-dev-ca") -> tuple[bytes, bytes]:
    """Returns (cert PEM, key PEM) of a self-signed CA."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return _pem_cert(cert), _pem_key(key)


def make_leaf(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    common_name: str,
    organizations: tuple[str, ...] = (),
    dns_names: list[str] | None = None,
    ips: list[str] | None = None,
    server: bool = False,
) -> tuple[bytes, bytes]:
    """Returns (cert PEM, key PEM) signed by the CA: a serving cert when `server`, else a client cert."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = _key()
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        _builder(x509.Name(attrs), ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if dns_names or ips:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names or []]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips or []]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return _pem_cert(builder.sign(ca_key, hashes.SHA256())), _pem_key(key)


def make_keypair() -> tuple[bytes, bytes]:
    """Returns (public PEM, private PEM) — the service-account token signing pair."""
    key = _key()
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pub, _pem_key(key)


def ensure_pki(pki_dir: Path, service_ip: str) -> None:
    """Write CA, API server serving cert, client certs and SA keys into pki_dir unless present;
    a complete directory only gains the client certificates added to CLIENTS since it was made."""
    pki_dir.mkdir(parents=True, exist_ok=True)

    def write(name: str, data: bytes, private: bool = False) -> None:
        path = pki_dir / name
        path.write_bytes(data)
        if private:
            path.chmod(0o600)

    if (pki_dir / ".complete").exists():
        ca_cert, ca_key = (pki_dir / "ca.crt").read_bytes(), (pki_dir / "ca.key").read_bytes()
        for client in CLIENTS:
            if not (pki_dir / f"{client.file_stem}.crt").exists():
                cert, key = make_leaf(ca_cert, ca_key, client.user, client.groups)
                write(f"{client.file_stem}.key", key, private=True)
                write(f"{client.file_stem}.crt", cert)
        return

    ca_cert, ca_key = make_ca()
    write("ca.crt", ca_cert)
    write("ca.key", ca_key, private=True)
    dns, ips = serving_sans(service_ip)
    cert, key = make_leaf(ca_cert, ca_key, "kube-apiserver", dns_names=dns, ips=ips, server=True)
    write("apiserver.crt", cert)
    write("apiserver.key", key, private=True)
    for client in CLIENTS:
        cert, key = make_leaf(ca_cert, ca_key, client.user, client.groups)
        write(f"{client.file_stem}.crt", cert)
        write(f"{client.file_stem}.key", key, private=True)
    pub, priv = make_keypair()
    write("sa.pub", pub)
    write("sa.key", priv, private=True)
    (pki_dir / ".complete").write_text("ok\n")
