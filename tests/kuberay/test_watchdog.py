"""KubeRay's idle teardown: the head pod's watchdog container (scripts/node/autostop.py,
rendered by scripts/providers/kuberay/watchdog.py) deletes its own RayCluster through
the in-cluster API once no job has run for autostop_minutes.

The API server is a stand-in on loopback that speaks what the watchdog sends (a DELETE
over TLS, with the pod's bearer token, checked against the pod's CA); the job API is a
real Ray head (conftest.standin_head). The watchdog is started with the very command the
rendered RayCluster gives its container. The Role `make render` writes for it, bound to
the head's account, is tried on a real API server in test_real_apiserver.py (its own
RayCluster deleted, the pods with it; another refused)."""

import datetime
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import REPO, load_example
from scripts.build import build, build_text
from scripts.node import autostop
from scripts.providers.kuberay import rayjob, watchdog

import yaml

TOKEN = "pod-token-123"


def certificate(folder):
    """A self-signed CA certificate for 127.0.0.1 and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    (folder / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return folder / "ca.crt", folder / "key.pem"


@pytest.fixture
def api(tmp_path):
    """A stand-in API server over TLS: DELETEs of RayClusters are recorded; `answers`
    (HTTP codes) are given first, then 200 (404 for a name in `gone`)."""
    cert, key = certificate(tmp_path)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN + "\n")
    (account / "ca.crt").write_bytes(cert.read_bytes())
    (account / "namespace").write_text("ray")
    seen, answers = [], []

    class Handler(BaseHTTPRequestHandler):
        def do_DELETE(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "auth": self.headers["Authorization"],
                         "type": self.headers["Content-Type"], "body": body})
            code = answers.pop(0) if answers else (404 if "gone" in self.path else 200)
            if self.headers["Authorization"] != f"Bearer {TOKEN}":
                code = 401
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.url, server.seen, server.answers, server.account = (
        f"https://127.0.0.1:{server.server_address[1]}", seen, answers, account)
    yield server
    server.shutdown()


def test_the_watchdog_deletes_its_raycluster_over_verified_tls(api):
    assert autostop.delete_raycluster(api.url, "ray", "k8s-hetero", str(api.account), retry_s=0)
    (delete,) = api.seen
    assert delete["path"] == "/apis/ray.io/v1/namespaces/ray/rayclusters/k8s-hetero"
    assert delete["auth"] == f"Bearer {TOKEN}"
    assert delete["body"]["propagationPolicy"] == "Background"  # the pods go with it


def test_the_delete_is_retried_through_api_errors_and_ends_on_a_gone_cluster(api, capsys):
    api.answers += [500, 429, 403]  # 403: a RoleBinding applied late
    assert autostop.delete_raycluster(api.url, "ray", "k8s-hetero", str(api.account), retry_s=0)
    assert len(api.seen) == 4
    assert "HTTP 429" in capsys.readouterr().out
    assert autostop.delete_raycluster(api.url, "ray", "gone", str(api.account), retry_s=0)
    assert len(api.seen) == 5  # a 404 is not retried: it is gone, which is what was wanted
    api.answers += [403, 403]
    assert not autostop.delete_raycluster(api.url, "ray", "k8s-hetero", str(api.account), attempts=2, retry_s=0)
    assert "its pods bill until `make down`" in capsys.readouterr().out


def test_the_watchdog_never_gives_up_its_delete(api, capsys, monkeypatch):
    """It gave up after 20 refusals (and its pod is never restarted): a RoleBinding fixed
    an hour later found nothing left to delete the idle cluster. Now it tries until it is
    deleted, saying so every 20 tries, the wait doubling to a bound."""
    waits = []
    monkeypatch.setattr(autostop.time, "sleep", waits.append)
    api.answers += [403] * 45
    assert autostop.delete_raycluster(api.url, "ray", "k8s-hetero", str(api.account), retry_s=1)
    assert len(api.seen) == 46
    assert capsys.readouterr().out.count("still not deleted after") == 2
    assert waits[:4] == [1, 2, 4, 8] and max(waits) == autostop.RETRY_MAX_S


def test_an_api_server_the_pods_ca_does_not_vouch_for_gets_nothing(api, tmp_path):
    """The token goes only to the server the pod's CA certifies: another CA, no request."""
    other = tmp_path / "other"
    other.mkdir()
    certificate(other)
    (other / "token").write_text(TOKEN)
    assert not autostop.delete_raycluster(api.url, "ray", "k8s-hetero", str(other), attempts=2, retry_s=0)
    assert api.seen == []


def test_the_watchdog_command_runs_in_real_bash_and_restarts_the_program_after_a_crash(tmp_path):
    """The container's command as the kubelet runs it (bash, its loop, python -c BOOT with
    the base64 program): autostop.py itself answers (here --help, in place of its flags),
    and a crash (a stand-in python that fails once, then is the real one) is restarted
    after RESTART_S; the program's exit 0 (its teardown) ends the loop."""
    (_, dog) = build("k8s_hetero").config["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    command = dog["command"][:5] + ["--help"]
    bin_dir, marker = tmp_path / "bin", tmp_path / "crashed"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/bash\nif [ ! -e {marker} ]; then touch {marker}; exit 137; fi\n'
                                    f'exec {sys.executable} "$@"\n')
    (bin_dir / "python").chmod(0o755)
    run = subprocess.run(command, capture_output=True, text=True, timeout=60,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.count(f"autostop: the watchdog exited (137); restarting in {watchdog.RESTART_S} s") == 1
    assert "--kuberay" in run.stdout and "--minutes" in run.stdout  # autostop.py's own --help


def test_the_head_pod_runs_the_watchdog_and_a_rayjobs_cluster_does_not():
    spec = build("k8s_hetero").config["spec"]
    head = spec["headGroupSpec"]["template"]["spec"]
    ray, dog = head["containers"]
    assert ray["name"] == "ray-head" and dog["name"] == watchdog.NAME  # Ray's container stays first
    assert dog["image"] == ray["image"]
    assert dog["command"][:3] == ["bash", "-c", watchdog.LOOP]  # restarted if it exits: the pod is never
    assert dog["command"][5:] == ["--address", "http://127.0.0.1:8265", "--minutes", "60",
                                  "--kuberay", "ray", "k8s-hetero"]
    assert {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "k8s-hetero", "key": "auth_token"}}} \
        in dog["env"]
    assert dog["resources"]["requests"] == dog["resources"]["limits"]  # the pod stays Guaranteed
    assert all(c["name"] != watchdog.NAME for g in spec["workerGroupSpecs"]
               for c in g["template"]["spec"]["containers"])
    _, job = rayjob.resources(build("k8s_hetero"), "smoke", [], 600, False, "pip", "upload")
    assert [c["name"] for c in job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"]] \
        == ["ray-head"]
    values = load_example("k8s_hetero") | {"autostop_minutes": 0}  # off: it still ends jobs past TIMEOUT
    off = build_text("k8s_hetero", yaml.safe_dump(values).encode()).config["spec"]
    (_, dog) = off["headGroupSpec"]["template"]["spec"]["containers"]
    assert dog["command"][dog["command"].index("--minutes") + 1] == "0"


def test_an_idle_kuberay_cluster_is_deleted_by_its_own_watchdog(api, standin_head):
    """The rendered container's own command (under its restart loop, with .venv's Python
    first on PATH, its minutes as seconds), against a real Ray head with no job: the
    RayCluster is deleted, and the loop ends with it."""
    head = build("k8s_hetero").config["spec"]["headGroupSpec"]["template"]["spec"]
    command = next(c for c in head["containers"] if c["name"] == watchdog.NAME)["command"]
    command[command.index("--address") + 1] = f"http://127.0.0.1:{standin_head}"
    command[command.index("--minutes") + 1] = "0.05"  # 3 s
    env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=api.url.rsplit(":", 1)[1],
               RAYKIT_AUTOSTOP_POLL_S="0.5", RAY_AUTH_MODE="disabled",  # the stand-in head runs without auth
               PATH=f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}")
    done = subprocess.run(command + ["--service-account-dir", str(api.account)], env=env, cwd="/",
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "autostop: the cluster stops after 3 s with no job" in done.stdout
    assert "RayCluster ray/k8s-hetero deleted; its pods go with it" in done.stdout
    # first a dry run, proving the right to delete at the watchdog's start, then the DELETE
    assert "autostop: may delete RayCluster ray/k8s-hetero (a dry-run DELETE was allowed)" in done.stdout
    # (the API server reads a DELETE's options from its body where it has one: the dry run's
    # there, or it deletes; test_real_apiserver.py shows it)
    path = "/apis/ray.io/v1/namespaces/ray/rayclusters/k8s-hetero"
    assert [(p["path"], p["body"].get("dryRun")) for p in api.seen] == [(f"{path}?dryRun=All", ["All"]), (path, None)]


def test_a_watchdog_that_exits_is_restarted_in_its_container():
    """The pod's restartPolicy is Never: the container's own loop restarts the watchdog
    (here one refused its arguments, exit 2), its pause shortened."""
    head = build("k8s_hetero").config["spec"]["headGroupSpec"]["template"]["spec"]
    command = next(c for c in head["containers"] if c["name"] == watchdog.NAME)["command"]
    command[2] = command[2].replace(f"sleep {watchdog.RESTART_S};", "sleep 0.2;")
    command[command.index("--minutes") + 1] = "nope"
    env = dict(os.environ, PATH=f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}")
    loop = subprocess.Popen(command, env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out = loop.communicate(timeout=6)[0]
    except subprocess.TimeoutExpired:
        os.killpg(loop.pid, signal.SIGKILL)
        out = loop.communicate()[0]
    assert out.count("autostop: the watchdog exited (2); restarting in 10 s") >= 2, out


def test_a_cluster_its_watchdog_deleted_says_so_and_make_down_forgets_it(tmp_path):
    """What the user sees after the watchdog's delete: `make status` and `make submit` say
    in one line that it is gone and why it may be, `make down` forgets the record."""
    log, store = tmp_path / "kubectl.log", tmp_path / "kube"
    env = dict(os.environ, RAYKIT_BUILD_DIR=str(tmp_path / "build"), STANDIN_LOG=str(log),
               STANDIN_KUBE_DIR=str(store), RAYKIT_KUBECTL_POLL_S="0.05",
               PATH=f"{REPO / 'tests' / 'standins'}:{REPO / '.venv' / 'bin'}:{os.environ['PATH']}")

    def kit(*args, **extra):
        return subprocess.run([sys.executable, "-m", "scripts.kit", *args, "--cluster", "k8s_hetero"],
                              cwd=REPO, env=env | extra, capture_output=True, text=True, timeout=120)
    refused = kit("up", STANDIN_NO_WATCHDOG_BINDING="1")  # the admin has not applied its Role yet
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert ("autostop_minutes: 60 needs the watchdog's RoleBinding raykit-k8s-hetero-watchdog in "
            "namespace ray, which does not exist") in refused.stderr
    assert not list(store.glob("ray.RayCluster.*"))
    stale = kit("up", STANDIN_WATCHDOG_SUBJECT="old-cluster")  # exists by name, grants the head nothing
    assert stale.returncode == 2 and len(stale.stderr.splitlines()) == 1, stale.stderr
    assert ("which does not bind the head pod's account (ServiceAccount k8s-hetero; a binding left "
            "from another cluster or account)") in stale.stderr
    assert not list(store.glob("ray.RayCluster.*"))
    assert kit("up").returncode == 0
    for path in store.glob("ray.*"):  # the watchdog's delete, and the garbage collector's
        path.unlink()
    status = kit("status")
    assert status.returncode == 2 and len(status.stderr.splitlines()) == 1
    assert "RayCluster k8s-hetero is gone: after 60 min with no job its watchdog deletes it" in status.stderr
    submitted = kit("submit", "--job", "smoke")
    assert submitted.returncode == 2 and "is gone" in submitted.stderr
    down = kit("down")
    assert down.returncode == 0, down.stderr
    assert not (tmp_path / "build" / "launched" / "k8s_hetero.json").exists()


def test_render_writes_the_watchdogs_role_for_the_head_pods_account():
    from scripts.providers import kuberay

    values = load_example("k8s_hetero")
    text = kuberay.companion_files("k8s_hetero", values)["kubectl-role.yaml"]
    user_role, role, binding = yaml.safe_load_all(text)
    assert user_role["metadata"]["name"] == "raykit-k8s-hetero"
    assert role["rules"] == [{"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["delete"],
                              "resourceNames": ["k8s-hetero"]}]
    # the operator's autoscaler account: named after the cluster, or the values' own
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "k8s-hetero", "namespace": "ray"}]
    values["kubernetes"]["service_account"] = "ml-s3-reader"
    _, _, binding = yaml.safe_load_all(kuberay.companion_files("k8s_hetero", values)["kubectl-role.yaml"])
    assert binding["subjects"][0]["name"] == "ml-s3-reader"
