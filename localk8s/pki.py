"""The local cluster's certificates: one CA, one serving certificate, and client identities.

As kwokctl does, one serving certificate serves the apiserver, every webhook and the
aggregated APIs: its SANs name each ``<service>.<namespace>.svc`` the apiserver dials (the
webhooks' Services are ExternalName Services pointing at 127.0.0.1, and TLS still checks the
service's DNS name). Clients are certificates signed by the same CA, the user in CN and the
groups in O, as with any kube-apiserver started with ``--client-ca-file``.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Services whose webhooks or APIs the apiserver calls (localk8s/addons.py makes them).
WEBHOOK_SERVICES = (
    "kueue-webhook-service.kueue-system",
    "kueue-visibility-server.kueue-system",
    "jobset-webhook-service.jobset-system",
    "kubeflow-trainer-controller-manager.kubeflow-system",
    "training-operator.kubeflow",
)

_VALID = datetime.timedelta(days=3650)


def _key() -> rsa.RSAPrivateKey:
    # RSA, not ECDSA: the Training Operator's cert rotator only accepts RSA keys.
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


class Authority:
    """A CA on disk that signs the cluster's certificates."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.pair = Pair(folder / f"{name}.crt", folder / f"{name}.key")
        if self.pair.cert.exists() and self.pair.key.exists():
            self._key = serialization.load_pem_private_key(self.pair.key.read_bytes(), None)
            self._cert = x509.load_pem_x509_certificate(self.pair.cert.read_bytes())
            return
        folder.mkdir(parents=True, exist_ok=True)
        self._key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"gpuhub-{name}")])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
            .sign(self._key, hashes.SHA256())
        )
        _write_key(self.pair.key, self._key)
        _write_cert(self.pair.cert, self._cert)

    @property
    def pem(self) -> bytes:
        return self.pair.cert.read_bytes()

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        server: bool = False,
        client: bool = False,
    ) -> Pair:
        """A key and certificate signed by this CA (kept if already on disk)."""
        pair = Pair(self.folder / f"{name}.crt", self.folder / f"{name}.key")
        if pair.cert.exists() and pair.key.exists():
            return pair
        key = _key()
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())  # type: ignore[arg-type]
        _write_key(pair.key, key)
        _write_cert(pair.cert, cert)
        return pair


@dataclass(frozen=True)
class ClusterPKI:
    """Everything the components need, under one folder."""

    ca: Authority
    front_proxy_ca: Authority
    serving: Pair  # the apiserver, webhooks, aggregated APIs, the node agent
    admin: Pair  # CN=gpuhub-admin, O=system:masters
    front_proxy_client: Pair  # the apiserver's identity towards aggregated APIs
    kubelet_client: Pair  # the apiserver's identity towards node servers
    service_account: Pair  # signs and verifies ServiceAccount tokens

    @classmethod
    def create(cls, folder: Path) -> ClusterPKI:
        ca = Authority(folder, "ca")
        front = Authority(folder, "front-proxy-ca")
        services = [s for ws in WEBHOOK_SERVICES for s in (f"{ws}.svc", f"{ws}.svc.cluster.local")]
        serving = ca.issue(
            "serving",
            "gpuhub-cluster",
            dns=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                *services,
            ),
            ips=("127.0.0.1", "::1"),
            server=True,
            client=True,
        )
        admin = ca.issue("admin", "gpuhub-admin", organizations=("system:masters",), client=True)
        # kube-apiserver checks this name with --requestheader-allowed-names.
        proxy = front.issue("front-proxy-client", "front-proxy-client", client=True)
        kubelet = ca.issue(
            "kubelet-client",
            "kube-apiserver-kubelet-client",
            organizations=("system:masters",),
            client=True,
        )
        sa = Pair(folder / "sa.pub", folder / "sa.key")
        if not sa.key.exists():
            key = _key()
            _write_key(sa.key, key)
            sa.cert.write_bytes(
                key.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                )
            )
        return cls(ca, front, serving, admin, proxy, kubelet, sa)
