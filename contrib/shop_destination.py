"""A tiny example destination for the demo: inventory, payments and shipping in one process.

It dedupes on Idempotency-Key (replaying the first answer) and checks the argument hash, in
memory. It shows the protocol; the destination kit (effectusd.destination) is what a real
service uses to do the same durably, atomically with its own writes.

    python contrib/shop_destination.py --port 8765
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHARGE_LIMIT = 10_000  # charges above this are declined: a permanent failure


class Shop:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answers: dict[str, tuple[str, int, dict[str, Any], dict[str, str]]] = {}
        self.log: list[str] = []

    def handle(self, path: str, key: str, arg_hash: str, body: dict[str, Any]):  # type: ignore[no-untyped-def]
        with self.lock:
            seen = self.answers.get(key)
            if seen is not None:
                if seen[0] != arg_hash:
                    return (
                        422,
                        {"error": "key reused with other arguments"},
                        {"X-Effectus-Outcome": "permanent_failure"},
                    )
                return seen[1], seen[2], seen[3]
            status, result, headers = self._mutate(path, body)
            self.answers[key] = (arg_hash, status, result, headers)
            return status, result, headers

    def _mutate(self, path: str, body: dict[str, Any]):  # type: ignore[no-untyped-def]
        if path == "/inventory/reserve":
            self.log.append(f"reserved {body['quantity']} x {body['sku']} for {body['order']}")
            return 200, {"reservation_id": f"res-{uuid.uuid4().hex[:8]}"}, {}
        if path == "/inventory/release":
            self.log.append(f"released {body['reservation_id']}")
            return 200, {"released": True}, {}
        if path == "/payments/charge":
            if body["amount"] > CHARGE_LIMIT:
                self.log.append(f"declined {body['amount']} {body['currency']}")
                return 402, {"error": "declined"}, {"X-Effectus-Outcome": "permanent_failure"}
            self.log.append(f"charged {body['amount']} {body['currency']} to {body['account_id']}")
            return 200, {"charge_id": f"ch-{uuid.uuid4().hex[:8]}"}, {}
        if path == "/payments/refund":
            self.log.append(f"refunded {body['charge_id']}")
            return 200, {"refunded": True}, {}
        if path == "/shipping/schedule":
            self.log.append(f"shipping scheduled for {body['order']}")
            return 200, {"tracking": f"trk-{uuid.uuid4().hex[:8]}"}, {}
        return 404, {"error": "no such endpoint"}, {"X-Effectus-Outcome": "permanent_failure"}


def make_server(port: int, shop: Shop) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            arg_hash = self.headers.get("X-Effectus-Argument-Hash", "")
            if hashlib.sha256(raw).hexdigest() != arg_hash:
                status, result, headers = (
                    422,
                    {"error": "argument hash mismatch"},
                    {"X-Effectus-Outcome": "permanent_failure"},
                )
            else:
                key = self.headers.get("Idempotency-Key", "")
                status, result, headers = shop.handle(self.path, key, arg_hash, json.loads(raw))
            payload = json.dumps(result).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = make_server(args.port, Shop())
    print(f"shop destination on http://127.0.0.1:{args.port}")
    server.serve_forever()


if __name__ == "__main__":
    main()
