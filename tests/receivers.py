"""A real HTTP receiver for alert tests: a server in a thread that records each POST,
answers from a script, and verifies loopboard's webhook signature as a receiver would."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """An HTTP server in a thread that records each POST and answers from a script: a list of
    status codes (the last repeats), optionally after a delay or with a redirect. With a
    secret, it verifies loopboard's signature the way a real receiver would."""

    def __init__(self, answers=(200,), *, secret: str = "", delay: float = 0, location: str = ""):
        self.answers = list(answers)
        self.secret = secret
        self.delay = delay
        self.location = location
        self.requests: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.record(dict(self.headers), body)
                time.sleep(receiver.delay)
                code = receiver.answers.pop(0) if len(receiver.answers) > 1 else receiver.answers[0]
                self.send_response(code)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok" if code < 300 else b"nope: " + b"x" * 100_000)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/hook"

    def record(self, headers: dict, body: bytes) -> None:
        entry = {"headers": headers, "body": body, "json": json.loads(body or b"null")}
        if self.secret:
            stamp = headers.get("X-Loopboard-Timestamp", "")
            expected = hmac.new(
                self.secret.encode(), stamp.encode() + b"." + body, hashlib.sha256
            ).hexdigest()
            given = headers.get("X-Loopboard-Signature", "")
            entry["verified"] = hmac.compare_digest(given, f"sha256={expected}")
            entry["fresh"] = abs(time.time() - int(stamp or 0)) < 300
        self.requests.append(entry)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
