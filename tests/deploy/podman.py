"""Podman on a machine without an image registry: a Debian base image made locally, the project's image built
on it, containers run and removed. Used by the container tier (tests/deploy).

What works on the build machines (issue 33): `--runtime runc` (crun fails on their cgroup layout),
`--cgroup-manager cgroupfs` (no systemd), ulimits below the machine's hard limits (podman's defaults exceed
them), `--network host` for builds (pip inside reaches the registry) and the machine's CA bundle mounted
read-only over the image's. No registry answers, so the base is a Debian bookworm root filesystem that
`mmdebstrap` writes from Debian's own packages, `podman import`ed; the tar is kept under
~/.cache/sanctum-proxy/container so a fresh podman store imports it in seconds instead of two minutes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from sanctum_proxy.upstreams.embedded import cache_root

ROOT = Path(__file__).resolve().parents[2]
PODMAN = ("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs")
LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
REQUIRED_ENV = "SANCTUM_CONTAINER_REQUIRED"  # .ci/run sets it where podman runs: then setup failures fail

# A python:3.11-slim stand-in: Debian bookworm's python3 (3.11) with pip, `python` on the PATH, and pip allowed
# to install system-wide (the official image's python is its own, not Debian's, so it has no such guard).
# Documentation, manuals and locales are left out, as in the slim images.
BASE_RECIPE = (
    "mmdebstrap", "--variant=minbase", "--include=python3,python3-pip,ca-certificates",
    "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-exclude=/usr/share/info/*",
    "--customize-hook=ln -sf python3 \"$1/usr/bin/python\"",
    "--customize-hook=rm -f \"$1\"/usr/lib/python3*/EXTERNALLY-MANAGED",
    "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*",
    "bookworm",
)
# Redis for the Kubernetes layout (deploy/k8s/redis.yaml names redis:7-alpine): Debian's redis-server 7.0 on
# the same base. The official image's entrypoint turns protected mode off when no config file is given.
REDIS_CONTAINERFILE = """\
ARG BASE
FROM ${BASE}
RUN apt-get update && apt-get install -y --no-install-recommends redis-server redis-tools \\
    && rm -rf /var/lib/apt/lists/*
USER 999:999
ENTRYPOINT ["redis-server", "--protected-mode", "no"]
"""


class Unavailable(RuntimeError):
    """Podman (or what the base image needs) is not there or cannot run here."""


def required() -> bool:
    return os.environ.get(REQUIRED_ENV) == "1"


# The same settings for what takes no flags (`kube play` has no --ulimit): podman reads this file instead of
# containers.conf for the calls made here.
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""


def containers_conf() -> Path:
    path = cache_root() / "container" / "containers.conf"
    if not path.is_file() or path.read_text() != CONTAINERS_CONF:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(CONTAINERS_CONF)
    return path


def podman(*args: str, timeout: float = 300, check: bool = True, stdin: str | None = None,
           ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": str(containers_conf())}
    out = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout, input=stdin, env=env)
    if check and out.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:3])} ... exited {out.returncode}:\n{out.stderr[-3000:]}")
    return out


def unavailable() -> str | None:
    """Why the container tier cannot run here, or None."""
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install podman buildah runc mmdebstrap)"
    try:
        info = podman("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"podman info failed: {exc}"
    if info.returncode != 0:
        return f"podman cannot run here: {info.stderr.strip()[-500:]}"
    if shutil.which("mmdebstrap") is None and not base_tar().is_file() and not has_image(base_tag()):
        return "mmdebstrap not installed and no cached base image (apt-get install mmdebstrap)"
    return None


def recipe_key() -> str:
    return hashlib.sha256("\0".join(BASE_RECIPE).encode()).hexdigest()[:12]


def base_tag() -> str:
    return f"localhost/sanctum-base:bookworm-{recipe_key()}"


def base_tar() -> Path:
    return cache_root() / "container" / f"bookworm-python3-{recipe_key()}.tar"


def has_image(tag: str) -> bool:
    return podman("image", "exists", tag, check=False, timeout=60).returncode == 0


def base_image() -> str:
    """The Debian base, from podman's store, else imported from the cached tar, else made (about 2 minutes)."""
    tag = base_tag()
    if has_image(tag):
        return tag
    tar = base_tar()
    if not tar.is_file():
        tar.parent.mkdir(parents=True, exist_ok=True)
        partial = tar.with_suffix(".partial.tar")
        made = subprocess.run([*BASE_RECIPE, str(partial)], capture_output=True, text=True, timeout=900)
        if made.returncode != 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"mmdebstrap exited {made.returncode}:\n{made.stderr[-3000:]}")
        partial.replace(tar)
    podman("import", "--change", 'CMD ["python3"]', str(tar), tag, timeout=600)
    return tag


def build(tag: str, *, containerfile: Path | None = None, context: Path = ROOT, base: str | None = None,
          stdin: str | None = None) -> str:
    """`podman build` with the base as the BASE build argument (the Dockerfile's default stays
    python:3.11-slim); layers are cached, so an unchanged project rebuilds in seconds."""
    args = ["build", "--network", "host", *LIMITS, "--format", "docker", "--build-arg", f"BASE={base or base_image()}",
            "-t", tag]
    if CA_BUNDLE.is_file():
        args += ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
    args += ["-f", "-" if stdin is not None else str(containerfile or context / "Dockerfile"), str(context)]
    podman(*args, timeout=900, stdin=stdin)
    return tag


def redis_image(tag: str = "localhost/redis:7-alpine") -> str:
    """Tagged with the name deploy/k8s/redis.yaml asks for: podman finds a short name in its local store."""
    if not has_image(tag):
        build(tag, context=ROOT / "tests" / "deploy", stdin=REDIS_CONTAINERFILE)
    return tag


def image_size(tag: str) -> int:
    return int(podman("image", "inspect", tag, "--format", "{{.Size}}").stdout.strip())


def run(*args: str) -> str:
    """`podman run -d` with the machine's limits; returns the container id."""
    return podman("run", "-d", *LIMITS, *args).stdout.strip()


def remove(*names: str, kind: Sequence[str] = ("rm", "-f", "-t", "2")) -> None:
    if names:
        podman(*kind, *names, check=False, timeout=120)
