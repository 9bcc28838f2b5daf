"""A fake OpenAI-compatible server for the LLM policy's fault tests, one behaviour per mode.

    with FakeLLM("http500") as server:
        main(["tune", ..., "--policy", "llm", "--llm-url", server.url])
    with FakeLLM("texts", texts=["reply 1", "reply 2"]) as server:   # canned replies
        ...; path, body = server.requests[0]

Modes: ok (every choice a reply holding `program`), texts (the first n of `texts`, one a
choice), not_json, wrong_schema, http500, drop (the connection closes with no reply),
non_object_choices (`choices` holds a number, null and a list), stall (answers after
STALL_S seconds). GET /v1/models lists one model, MODEL. A choice carries its text both
as a chat `message` and as a completion's `text`, so either endpoint reads it.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ("ok", "texts", "not_json", "wrong_schema", "http500", "drop", "non_object_choices", "stall")
STALL_S = 3.0
DEAD_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
MODEL = "fake"


class FakeLLM:
    """Serves `mode` on 127.0.0.1 (a free port) until closed; `requests` holds the
    (path, JSON body) of each POST. `program_json`: the Program JSON an "ok" reply
    carries; `texts`: the replies of the "texts" mode."""

    def __init__(self, mode: str, program_json: dict | None = None,
                 texts: list[str] = ()):
        if mode not in MODES:
            raise ValueError(f"mode: {mode!r} is not one of {MODES}")
        self.mode, self.program_json, self.texts = mode, program_json, list(texts)
        self.requests: list[tuple[str, dict]] = []
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def choices(self, n: int) -> list:
        if self.mode == "non_object_choices":
            return [5, None, [1]]
        if self.mode == "texts":
            return [_choice(t) for t in self.texts[:n]]
        text = {"ok": json.dumps({"analysis": "ok", "program": self.program_json}),
                "not_json": "this is not JSON",
                "wrong_schema": json.dumps({"analysis": "x", "program": {"backend": "nope"}}),
                }.get(self.mode, "{}")
        return [_choice(text)] * n

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _choice(text: str) -> dict:
    return {"message": {"role": "assistant", "content": text}, "text": text}


class _QuietServer(ThreadingHTTPServer):
    """A client that gave up (a timeout) leaves a broken pipe: not worth a traceback on
    stderr, where a later test would read it."""

    def handle_error(self, request, client_address) -> None:
        pass


def _handler(server: FakeLLM):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status: int, obj) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send(200, {"data": [{"id": MODEL}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            server.requests.append((self.path, body))
            if server.mode == "drop":
                self.close_connection = True
                return
            if server.mode == "http500":
                self._send(500, {"error": "boom"})
                return
            if server.mode == "stall":
                time.sleep(STALL_S)
            self._send(200, {"choices": server.choices(int(body.get("n", 1)))})
    return Handler
