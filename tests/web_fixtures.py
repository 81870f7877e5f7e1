"""The translator page's test helpers (tests/inference/test_web.py, test_web_browser.py): a page
server in the test's process, in front of a model server's REST port."""

import threading

from common.serving_contract import TEXT_INPUT
from inference.web import PageServer
from tests.serving_fixtures import MODEL_NAME, ServerProcess, make_model_base


def toy_model_server(exports, root) -> ServerProcess:
    """`serving.server` in its own process, REST on, serving the toy translator's version 1."""
    base_path = make_model_base(exports, str(root))
    return ServerProcess(
        [f"--model_name={MODEL_NAME}", f"--model_base_path={base_path}"], rest=True
    )


def page_server(rest_url: str, **options) -> PageServer:
    """A page server on a free 127.0.0.1 port, in a thread; `shutdown()` and `server_close()`
    it after."""
    server = PageServer(("127.0.0.1", 0), rest_url, MODEL_NAME, **options)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def predict_body(signature: str, texts) -> dict:
    return {"signature_name": signature, "inputs": {TEXT_INPUT: list(texts)}}
