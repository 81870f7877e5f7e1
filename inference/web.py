"""The translator page: serves `inference/web/` and forwards `/v1/...` to a model server's REST API.

    .venv/bin/python -m inference.web --rest_url http://127.0.0.1:8501 --model_name translator

The page and the model's API come from one origin, so the browser needs no CORS, and the model
server (this project's `serving.server` or the real TensorFlow Serving: both speak TF Serving's
REST API) stays where it is. `make demo-web` exports and serves the bundled model, then runs this.

What it forwards, and what it answers itself:

| request | answer |
| --- | --- |
| `GET /`, `/index.html`, `/app.js`, `/style.css` | the page's files (nothing else of the disk) |
| `GET /page_config.json` | `{"model_name", "max_body_bytes"}`, what the page needs to know |
| `GET`, `POST /v1/...` | the model server's answer, status and body as they are |
| a body over `max_body_bytes`, or without a Content-Length | 413 or 411, unread |
| the model server unreachable | 502, `{"error": ...}` in plain words |
| the model server silent for `timeout_seconds` | 504, `{"error": ...}` |

Errors are `{"error": message}`, TF Serving's own shape, so the page reads one kind.
"""

import argparse
import http.server
import json
import os
import sys
import urllib.error
import urllib.request

WEB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "web")
PAGE_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
PAGE_CONFIG_PATH = "/page_config.json"
API_PREFIX = "/v1/"
JSON_TYPE = "application/json"
# The line a caller (make demo-web, the tests) reads the bound address from.
READY_LINE = "The translator page is at {url}"
# Nothing of the page may come from elsewhere: the page works offline, and a script injected
# through a translation could not load code or send text anywhere.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class PageServer(http.server.ThreadingHTTPServer):
    """The page's files and the forwarding of `/v1/...` to `rest_url`.

    Args:
        address: `(host, port)` to bind; port 0 picks a free one (`server_address` has it).
        rest_url: the model server's REST root, e.g. `http://127.0.0.1:8501`.
        model_name: the model the page asks for.
        max_body_bytes: the largest request body forwarded.
        timeout_seconds: how long a client may take to send a request, and the model server to
            answer one.
    """

    daemon_threads = True

    def __init__(self, address, rest_url, model_name, max_body_bytes=1 << 20, timeout_seconds=120):
        self.rest_url = rest_url.rstrip("/")
        self.model_name = model_name
        self.max_body_bytes = max_body_bytes
        self.timeout_seconds = timeout_seconds
        super().__init__(address, PageHandler)

    @property
    def url(self):
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


class PageHandler(http.server.BaseHTTPRequestHandler):
    server_version = "TranslatorPage"
    protocol_version = "HTTP/1.1"

    def setup(self):
        self.timeout = self.server.timeout_seconds  # Each read of a request: a slow client ends.
        super().setup()

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path.startswith(API_PREFIX):
            self._forward(None)
        elif path == PAGE_CONFIG_PATH:
            config = {
                "model_name": self.server.model_name,
                "max_body_bytes": self.server.max_body_bytes,
            }
            self._send(200, json.dumps(config).encode(), JSON_TYPE)
        elif path in PAGE_FILES:
            name, content_type = PAGE_FILES[path]
            with open(os.path.join(WEB_DIR, name), "rb") as handle:
                self._send(200, handle.read(), content_type)
        else:
            self._send_error(404, f"No such page: {path}")

    def do_POST(self):
        if not self.path.startswith(API_PREFIX):
            self._send_error(404, f"Nothing to post at {self.path}")
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self._send_error(411, "A request to translate needs a Content-Length")
            return
        if int(length) > self.server.max_body_bytes:
            self.close_connection = True  # Its body is left unread.
            self._send_error(
                413,
                f"The request is {int(length)} bytes, over this page's limit of "
                f"{self.server.max_body_bytes} bytes",
            )
            return
        self._forward(self.rfile.read(int(length)))

    def _forward(self, body):
        request = urllib.request.Request(
            self.server.rest_url + self.path,
            data=body,
            method="GET" if body is None else "POST",
            headers={"Content-Type": self.headers.get("Content-Type", JSON_TYPE)},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.server.timeout_seconds) as answer:
                self._send(answer.status, answer.read(), answer.headers.get("Content-Type"))
        except urllib.error.HTTPError as refusal:
            # The model server's own answer (a refused request, an unknown model): passed on.
            with refusal:
                self._send(refusal.code, refusal.read(), refusal.headers.get("Content-Type"))
        except TimeoutError:
            self._send_error(
                504,
                f"The model server at {self.server.rest_url} did not answer within "
                f"{self.server.timeout_seconds:g} s",
            )
        except (urllib.error.URLError, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            if isinstance(reason, TimeoutError):
                self._send_error(504, f"The model server at {self.server.rest_url} timed out")
                return
            self._send_error(
                502,
                f"The model server at {self.server.rest_url} is not answering ({reason}). "
                "Is it running?",
            )

    def _send_error(self, status, message):
        self._send(status, json.dumps({"error": message}).encode(), JSON_TYPE)

    def _send(self, status, payload, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type or JSON_TYPE)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)


def add_page_arguments(parser, port_flag="--port"):
    """The page server's flags (`inference.demo_web` takes them too, its port as `port_flag`)."""
    parser.add_argument(
        "--host", default="127.0.0.1", help="the address to bind (default: 127.0.0.1 only)"
    )
    parser.add_argument(
        port_flag,
        dest="web_port",
        type=int,
        default=8080,
        help="the page's port (0: a free one, printed)",
    )
    parser.add_argument("--model_name", default="translator", help="the served model's name")
    parser.add_argument(
        "--max_body_bytes", type=int, default=1 << 20, help="the largest request forwarded"
    )
    parser.add_argument(
        "--timeout_seconds",
        type=float,
        default=120,
        help="how long a request may take to arrive, and the model server to answer it",
    )


def serve_page(args, rest_url):
    """Runs the page server of `args` (add_page_arguments) until interrupted; prints READY_LINE."""
    server = PageServer(
        (args.host, args.web_port),
        rest_url,
        args.model_name,
        max_body_bytes=args.max_body_bytes,
        timeout_seconds=args.timeout_seconds,
    )
    print(READY_LINE.format(url=server.url), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m inference.web", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--rest_url",
        default="http://127.0.0.1:8501",
        help="the model server's REST root (serving.server or tensorflow_model_server)",
    )
    add_page_arguments(parser)
    args = parser.parse_args(argv)
    serve_page(args, args.rest_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
