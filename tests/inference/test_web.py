"""inference/web.py: the page's files, and `/v1/...` forwarded to a real model server on
127.0.0.1 (`serving.server` in its own process, serving the toy translator of
tests/serving_fixtures.py), with the errors the page shows in plain words."""

import json
import os
import re
import socket
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

from common.serving_contract import (
    ALIGNMENT_OUTPUT,
    ALIGNMENTS_SIGNATURE,
    BEAM_SIGNATURE,
    GREEDY_SIGNATURE,
    SOURCE_TOKENS_OUTPUT,
    TARGET_TOKENS_OUTPUT,
    TEXT_INPUT,
    TRANSLATION_OUTPUT,
)
from inference.web import READY_LINE, WEB_DIR
from tests.model_server_fixtures import PREDICT_PATH, http, read_until_closed
from tests.serving_fixtures import (
    DIES_WITH_THE_TESTS,
    MODEL_NAME,
    REPO_ROOT,
    expected_alignment,
    expected_beam,
    expected_greedy,
)
from tests.web_fixtures import page_server, predict_body, toy_model_server

SENTENCES = ["hola mundo grande", "el gato"]


@pytest.fixture(scope="module")
def model_server(exports, tmp_path_factory):
    with toy_model_server(exports, tmp_path_factory.mktemp("web_models")) as server:
        yield server


@pytest.fixture(scope="module")
def page(model_server):
    """A page server in this process, forwarding to `model_server`'s REST port."""
    server = page_server(f"http://127.0.0.1:{model_server.rest_port}", max_body_bytes=4096)
    yield server
    server.shutdown()
    server.server_close()


def test_the_page_files_are_served_with_their_types_and_nothing_else_of_the_disk(page):
    for path, name, content_type in (
        ("/", "index.html", "text/html"),
        ("/app.js", "app.js", "text/javascript"),
        ("/style.css", "style.css", "text/css"),
    ):
        with urllib.request.urlopen(page.url.rstrip("/") + path, timeout=10) as response:
            assert response.headers["Content-Type"].startswith(content_type)
            assert "default-src 'self'" in response.headers["Content-Security-Policy"]
            with open(os.path.join(WEB_DIR, name), "rb") as handle:
                assert response.read() == handle.read()
    for path in ("/../web.py", "/web.py", "/%2e%2e/web.py", "/inference/web.py"):
        assert http("GET", page.url.rstrip("/") + path)[0] == 404


def test_the_page_config_names_the_model_and_the_limit(page):
    status, config = http("GET", page.url + "page_config.json")
    assert status == 200
    assert config == {"model_name": MODEL_NAME, "max_body_bytes": 4096}


def test_predict_is_forwarded_and_answers_as_the_model_server_does(page, model_server):
    direct = f"http://127.0.0.1:{model_server.rest_port}{PREDICT_PATH}"
    for signature, expected in (
        (GREEDY_SIGNATURE, expected_greedy),
        (BEAM_SIGNATURE, expected_beam),
    ):
        body = predict_body(signature, SENTENCES)
        status, forwarded = http("POST", page.url.rstrip("/") + PREDICT_PATH, body)
        assert status == 200
        assert forwarded == http("POST", direct, body)[1]
        assert forwarded["outputs"][TRANSLATION_OUTPUT] == [expected(s, 1) for s in SENTENCES]


def test_alignments_come_through_with_the_shapes_the_page_draws(page):
    status, answer = http(
        "POST", page.url.rstrip("/") + PREDICT_PATH, predict_body(ALIGNMENTS_SIGNATURE, SENTENCES)
    )
    assert status == 200
    outputs = answer["outputs"]
    for row, sentence in enumerate(SENTENCES):
        words = len(sentence.split())
        # The page drops the "" padding of each row: what is left is the heat map's size.
        sources = [token for token in outputs[SOURCE_TOKENS_OUTPUT][row] if token]
        targets = [token for token in outputs[TARGET_TOKENS_OUTPUT][row] if token]
        assert (len(targets), len(sources)) == (words, words)
        alignment = np.array(outputs[ALIGNMENT_OUTPUT][row])[:words, :words]
        np.testing.assert_allclose(alignment, expected_alignment(sentence), rtol=1e-6)


def test_model_status_get_is_forwarded(page):
    status, answer = http("GET", page.url + f"v1/models/{MODEL_NAME}")
    assert status == 200
    assert answer["model_version_status"][0]["state"] == "AVAILABLE"


def test_a_refused_request_passes_the_model_servers_error_on(page):
    body = {"signature_name": "no_such_signature", "inputs": {TEXT_INPUT: ["hola"]}}
    status, answer = http("POST", page.url.rstrip("/") + PREDICT_PATH, body)
    assert status == 400
    assert "no_such_signature" in answer["error"]
    status, answer = http("GET", page.url + "v1/models/no_such_model")
    assert status == 404
    assert "no_such_model" in answer["error"]


def test_a_body_over_the_limit_is_refused_unread_in_plain_words(page):
    body = predict_body(GREEDY_SIGNATURE, ["palabra " * 1000])
    status, answer = http("POST", page.url.rstrip("/") + PREDICT_PATH, body)
    assert status == 413
    assert "over this page's limit of 4096 bytes" in answer["error"]


def test_a_post_without_content_length_is_refused(page):
    host, port = page.server_address[:2]
    with socket.create_connection((host, port), timeout=10) as connection:
        connection.sendall(
            f"POST {PREDICT_PATH} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            "5\r\nhello\r\n0\r\n\r\n".encode()
        )
        reply = read_until_closed(connection)
    assert reply.startswith(b"HTTP/1.1 411 ")
    assert b"needs a Content-Length" in reply


def test_a_model_server_that_is_down_gets_a_502_in_plain_words():
    with socket.socket() as holder:  # A port nobody listens on: bound, never listening.
        holder.bind(("127.0.0.1", 0))
        server = page_server(f"http://127.0.0.1:{holder.getsockname()[1]}")
        try:
            status, answer = http(
                "POST",
                server.url.rstrip("/") + PREDICT_PATH,
                predict_body(GREEDY_SIGNATURE, ["hola"]),
            )
        finally:
            server.shutdown()
            server.server_close()
    assert status == 502
    assert "is not answering" in answer["error"] and "Is it running?" in answer["error"]


def test_a_silent_model_server_gets_a_504_within_the_timeout():
    with socket.socket() as silent:  # Accepts connections (the backlog) and never answers.
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        server = page_server(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_seconds=1)
        try:
            status, answer = http(
                "POST",
                server.url.rstrip("/") + PREDICT_PATH,
                predict_body(GREEDY_SIGNATURE, ["hola"]),
                timeout=30,
            )
        finally:
            server.shutdown()
            server.server_close()
    assert status == 504
    assert "did not answer within 1 s" in answer["error"]


def test_the_command_binds_127_0_0_1_on_a_free_port_and_prints_it(model_server):
    command = [
        *DIES_WITH_THE_TESTS,
        sys.executable,
        "-m",
        "inference.web",
        f"--rest_url=http://127.0.0.1:{model_server.rest_port}",
        "--port=0",
    ]
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=REPO_ROOT),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()  # Its first line; the process blocks nothing on it.
        pattern = re.escape(READY_LINE).replace(re.escape("{url}"), r"http://127\.0\.0\.1:(\d+)/")
        match = re.fullmatch(pattern, line.strip())
        assert match, line
        url = f"http://127.0.0.1:{match.group(1)}"
        status, answer = http("POST", url + PREDICT_PATH, predict_body(GREEDY_SIGNATURE, ["hola"]))
        assert (status, answer["outputs"][TRANSLATION_OUTPUT]) == (200, ["HOLA <v1>"])
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_page_names_the_served_signatures_and_outputs_of_the_contract():
    """app.js and index.html spell the contract's names (common/serving_contract.py)."""
    with open(os.path.join(WEB_DIR, "app.js"), encoding="utf-8") as handle:
        script = handle.read()
    with open(os.path.join(WEB_DIR, "index.html"), encoding="utf-8") as handle:
        page = handle.read()
    for name in (GREEDY_SIGNATURE, BEAM_SIGNATURE, ALIGNMENTS_SIGNATURE):
        assert f'"{name}"' in script
    for name in (GREEDY_SIGNATURE, BEAM_SIGNATURE):
        assert f'value="{name}"' in page
    for key in (TEXT_INPUT, TRANSLATION_OUTPUT, SOURCE_TOKENS_OUTPUT, TARGET_TOKENS_OUTPUT):
        assert re.search(rf"\b{key}\b", script), key
    assert f"outputs.{ALIGNMENT_OUTPUT}" in script
    assert json.dumps(MODEL_NAME) in script
