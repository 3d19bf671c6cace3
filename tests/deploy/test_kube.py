"""The Kubernetes manifests of deploy/k8s under `podman kube play`: the ConfigMap, Redis and the two proxy
replicas of the Deployment, beside a fake Ollama pod. A decision one replica learns (an auto-mode fallback to
prompted calling, after Ollama refuses `tools` for a model) reaches the other through Redis.

What stands in for a cluster, and what podman 4.3 (Debian bookworm's) needs changed, is done here to a copy,
never to the files: hostAliases stand in for the cluster DNS of the Services and of the Ollama StatefulSet
(`sanctum-redis`, `ollama-0.ollama`, `ollama-1.ollama`: kube play has no Services); the container's `ports` are
dropped (podman 4.3 publishes every containerPort on the host, which two replicas cannot share); the admin key
is given as a value instead of a secretKeyRef, and the Secret is made with `podman secret create` (4.3 reads a
secretKeyRef as a flat JSON map of base64 values but a secret volume from a Secret's `data` strings undecoded,
so one secret cannot serve both, and it does not turn `kind: Secret` in a kube file into a secret). Requests
go to each replica from inside its own pod, on its loopback, as the kubelet's probes do."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import podman
from tests.polling import wait_until
from tests.tools import WEATHER_DESCRIBED as WEATHER

K8S = podman.ROOT / "deploy" / "k8s"
# gemma has no tools in its Ollama template: Ollama answers 400 "does not support tools" (tests/fakes/upstream.py).
ASK = {"model": "gemma:2b", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
REPLICAS = ("sanctum-proxy-pod-0", "sanctum-proxy-pod-1")  # podman's names for the Deployment's two pods
# A request from inside a pod to its own proxy: (method, path, key, body) in argv, the answer as JSON on stdout.
CLIENT = """
import json, sys, urllib.error, urllib.request
method, path, key, body = sys.argv[1:5]
req = urllib.request.Request("http://127.0.0.1:8100" + path, method=method, data=body.encode() or None,
                             headers={"authorization": "Bearer " + key, "content-type": "application/json"})
try:
    r = urllib.request.urlopen(req, timeout=60)
except urllib.error.HTTPError as e:
    r = e
print(json.dumps({"status": r.status, "headers": dict(r.headers), "body": r.read().decode()}))
"""


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def one(name: str, kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs(name) if d["kind"] == kind]
    return found


def fake_ollama_pod(image: str) -> dict[str, Any]:
    """tests/fakes/upstream.py as a server in a pod of its own, on the proxy image's Python (which has its
    dependencies), the tests folder mounted read-only."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sanctum-test-ollama"}, "spec": {
        "containers": [{"name": "ollama", "image": image, "workingDir": "/src",
                        "command": ["python", "-m", "tests.fakes.upstream", "--host", "0.0.0.0", "--port", "11434"],
                        "volumeMounts": [{"name": "tests", "mountPath": "/src/tests", "readOnly": True}]}],
        "volumes": [{"name": "tests", "hostPath": {"path": str(podman.ROOT / "tests"), "type": "Directory"}}]}}


def proxy_deployment(hosts: dict[str, list[str]], admin_key: str) -> dict[str, Any]:
    deployment = one("deployment.yaml", "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    pod["hostAliases"] = [{"ip": ip, "hostnames": names} for ip, names in hosts.items()]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container.pop("ports")}
    for probe in ("livenessProbe", "readinessProbe"):
        container[probe]["httpGet"]["port"] = ports[container[probe]["httpGet"]["port"]]
    for env in container["env"]:
        if env["name"] == "SANCTUM_ADMIN_KEY":
            env.pop("valueFrom")
            env["value"] = admin_key
    return deployment


def play(*documents: dict[str, Any], tmp: Path) -> None:
    path = tmp / f"play-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    podman.podman("kube", "play", str(path), timeout=300)


def ip_of(pod: str) -> str:
    infra = podman.podman("pod", "inspect", pod, "--format", "{{.InfraContainerID}}").stdout.strip()
    ips = podman.podman("inspect", infra, "--format",
                        "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}").stdout.split()
    assert ips, f"{pod} has no address"
    return ips[0]


def call(pod: str, method: str, path: str, key: str, body: Any = None) -> dict[str, Any]:
    payload = "" if body is None else json.dumps(body)
    out = podman.podman("exec", f"{pod}-sanctum-proxy", "python", "-c", CLIENT, method, path, key, payload,
                        timeout=90)
    answer: dict[str, Any] = json.loads(out.stdout)
    answer["headers"] = {k.lower(): v for k, v in answer["headers"].items()}
    return answer


# what `call` raises while a pod is not serving yet
NOT_YET = (RuntimeError, ValueError, KeyError)


@pytest.fixture
def cluster(proxy_image: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    version = proxy_image_tag()
    podman.podman("tag", proxy_image, f"localhost/sanctum-proxy:{version}")  # the Deployment's image
    podman.redis_image()  # redis.yaml's redis:7-alpine, made locally
    secret = one("secret.example.yaml", "Secret")["stringData"]
    pods = ["sanctum-test-ollama", "sanctum-redis-pod-0", *REPLICAS]
    volumes = ["sanctum-proxy-config", "sanctum-proxy-secrets", "data", "tmp"]  # kube play's named volumes
    cleanup(pods, volumes)
    # podman 4.3 writes a secret volume's files from the `data` strings as they are (no base64 decoding;
    # stringData is ignored): the example Secret's values go there in clear.
    podman_secret = {**one("secret.example.yaml", "Secret"), "data": secret}
    podman_secret.pop("stringData")
    podman.podman("secret", "create", "sanctum-proxy-secrets", "-", stdin=yaml.safe_dump(podman_secret))
    try:
        play(fake_ollama_pod(proxy_image), *docs("redis.yaml"), tmp=tmp_path)
        hosts = {ip_of("sanctum-redis-pod-0"): ["sanctum-redis"],
                 ip_of("sanctum-test-ollama"): ["ollama-0.ollama", "ollama-1.ollama"]}
        play(one("configmap.yaml", "ConfigMap"), proxy_deployment(hosts, secret["admin-key"]), tmp=tmp_path)
        keys = {"client": secret["api-keys"].split()[0], "admin": secret["admin-key"]}
        for pod in REPLICAS:
            wait_until(lambda pod=pod: call(pod, "GET", "/readyz", "")["status"] == 200, 60, f"{pod} /readyz",
                       every=0.5, ignoring=NOT_YET)
        yield keys
    finally:
        cleanup(pods, volumes)


def proxy_image_tag() -> str:
    image = one("deployment.yaml", "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    return str(image).rsplit(":", 1)[1]


def cleanup(pods: list[str], volumes: list[str]) -> None:
    podman.remove(*pods, kind=("pod", "rm", "-f", "-t", "2"))
    podman.remove(*volumes, kind=("volume", "rm", "-f"))
    podman.remove("sanctum-proxy-secrets", kind=("secret", "rm"))


def test_two_replicas_share_an_auto_mode_fallback_through_redis(cluster):
    first, second = REPLICAS
    for pod in REPLICAS:  # both up as the manifests make them: non-root, Redis reached, the ConfigMap's pools
        assert podman.podman("exec", f"{pod}-sanctum-proxy", "id", "-u").stdout.strip() == "10001"
        status = json.loads(call(pod, "GET", "/sanctum/status", cluster["admin"])["body"])
        assert status["shared_state"]["connected"] is True, status["shared_state"]
        assert call(pod, "GET", "/healthz", "")["status"] == 200
    refused = call(first, "POST", "/v1/chat/completions", "not-a-key", ASK)
    assert refused["status"] == 401  # the Secret's keys file is read

    r = call(first, "POST", "/v1/chat/completions", cluster["client"], ASK)
    assert r["status"] == 200, r["body"]
    answer = json.loads(r["body"])
    assert answer["sanctum"]["omens"][0]["type"] == "SpellCallingFallback"
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"

    def seen_by_second() -> bool:
        modes = json.loads(call(second, "GET", "/sanctum/status", cluster["admin"])["body"])["modes"]
        return [(m["model"], m["mode"]) for m in modes] == [("gemma:2b", "prompted")]

    wait_until(seen_by_second, 20, "the second replica to see the first one's fallback", every=0.5, ignoring=NOT_YET)
    r = call(second, "POST", "/v1/chat/completions", cluster["client"], ASK)
    assert r["status"] == 200 and r["headers"]["x-sanctum-spell-calling"] == "prompted", r
    answer = json.loads(r["body"])
    assert [o["type"] for o in answer["sanctum"]["omens"]] == ["SpellCallRepaired"]  # no fallback of its own
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris"}'
