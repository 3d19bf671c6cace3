"""A stand-in for llama-server's command line and GET /health, for tests of how the proxy runs its child:
`python tests/fakes/fake_llama_server.py -m MODEL --host H --port P ...` (other flags ignored)."""

from __future__ import annotations

import argparse
from http.server import BaseHTTPRequestHandler, HTTPServer


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        ok = self.path == "/health"
        self.send_response(200 if ok else 404)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}' if ok else b"{}")

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args, _ = p.parse_known_args()
    HTTPServer((args.host, args.port), Health).serve_forever()


if __name__ == "__main__":
    main()
