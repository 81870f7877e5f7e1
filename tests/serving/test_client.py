"""Tests of serving/client.py (API and CLI) against a real in-process server on 127.0.0.1."""

import io
import time

import grpc
import numpy as np
import pytest

from common.serving_contract import (
    ALIGNMENT_OUTPUT,
    ALIGNMENTS_SIGNATURE,
    BEAM_SIGNATURE,
    GREEDY_SIGNATURE,
    TEXT_INPUT,
)
from serving import client as client_lib
from serving.client import TranslationClient, TranslationError
from serving.model_server.server import ModelServer, ServerOptions
from tests.serving_fixtures import (
    MODEL_NAME,
    expected_alignment,
    expected_beam,
    expected_beam_score,
    expected_greedy,
    expected_greedy_score,
    make_model_base,
    reserved_port,
)

SENTENCES = ["hello big world", "good morning", "a", ""]


@pytest.fixture(scope="module")
def server(exports, tmp_path_factory):
    root = tmp_path_factory.mktemp("client")
    model_server = ModelServer(
        ServerOptions(
            port=0,
            model_name=MODEL_NAME,
            model_base_path=make_model_base(exports, str(root), (1,)),
            file_system_poll_wait_seconds=0,
        )
    ).start()
    yield f"127.0.0.1:{model_server.grpc_port}"
    model_server.stop()


@pytest.fixture(scope="module")
def two_version_server(exports, tmp_path_factory):
    """Versions 1 and 2 both served (`all` policy); Latest is 2."""
    root = tmp_path_factory.mktemp("two_versions")
    config_path = root / "models.config"
    config_path.write_text(
        f'model_config_list {{ config {{ name: "{MODEL_NAME}" model_platform: "tensorflow" '
        f'base_path: "{make_model_base(exports, str(root), (1, 2))}" '
        "model_version_policy { all {} } } }"
    )
    model_server = ModelServer(
        ServerOptions(port=0, model_config_file=str(config_path), file_system_poll_wait_seconds=0)
    ).start()
    yield f"127.0.0.1:{model_server.grpc_port}"
    model_server.stop()


class BackoffRecorder:
    """Stands in for the client module's `time`: records each backoff delay, runs
    `before_sleep` if set, then really sleeps."""

    def __init__(self):
        self.delays = []
        self.before_sleep = None

    def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        if self.before_sleep is not None:
            self.before_sleep()
        time.sleep(seconds)


@pytest.fixture
def backoff(monkeypatch):
    recorder = BackoffRecorder()
    monkeypatch.setattr(client_lib, "time", recorder)
    return recorder


@pytest.fixture
def client(server):
    with TranslationClient(server, timeout=10) as translation_client:
        yield translation_client


def test_translate_greedy_and_beam(client):
    assert client.translate(SENTENCES) == [expected_greedy(s, 1) for s in SENTENCES]
    assert client.translate(SENTENCES, signature_name=BEAM_SIGNATURE) == [
        expected_beam(s, 1) for s in SENTENCES
    ]
    details = client.translate_with_details(SENTENCES, signature_name=BEAM_SIGNATURE)
    assert [d.score for d in details] == [expected_beam_score(s) for s in SENTENCES]
    assert all(d.alignment is None and d.source_tokens is None for d in details)


def test_translate_with_alignments(server):
    with TranslationClient(server, signature_name=ALIGNMENTS_SIGNATURE) as aligning_client:
        details = aligning_client.translate_with_details(SENTENCES)
    for sentence, result in zip(SENTENCES, details):
        words = sentence.split()
        assert result.source == sentence
        assert result.translation == expected_greedy(sentence, 1)
        assert result.score == pytest.approx(expected_greedy_score(sentence))
        # Padding of shorter sentences in the batch is stripped.
        assert result.source_tokens == words
        assert result.target_tokens == [w.upper() for w in reversed(words)]
        assert result.alignment.shape == (len(words), len(words))
        np.testing.assert_allclose(result.alignment, expected_alignment(sentence), atol=1e-6)
        assert result.most_attended() == [
            (target, source, pytest.approx(0.7 if len(words) > 1 else 1.0))
            for target, source in zip(result.target_tokens, reversed(words))
        ]


def test_metadata_and_status(client):
    metadata = client.metadata()
    assert metadata["version"] == 1
    assert set(metadata["signatures"]) == {GREEDY_SIGNATURE, BEAM_SIGNATURE, ALIGNMENTS_SIGNATURE}
    assert metadata["signatures"][GREEDY_SIGNATURE]["inputs"] == {TEXT_INPUT: ("DT_STRING", [-1])}
    assert metadata["signatures"][ALIGNMENTS_SIGNATURE]["outputs"][ALIGNMENT_OUTPUT] == (
        "DT_FLOAT",
        [-1, -1, -1],
    )
    assert client.status() == [
        {"version": 1, "state": "AVAILABLE", "error_code": 0, "error_message": ""}
    ]


def test_bad_arguments_are_rejected_before_any_call():
    with reserved_port() as port, TranslationClient(f"127.0.0.1:{port}", retries=0) as offline:
        assert offline.translate([]) == []  # No server behind the port: nothing was sent.
        with pytest.raises(TypeError, match="list of str"):
            offline.translate("a single string")
        with pytest.raises(TypeError):
            offline.translate([b"bytes"])
    with pytest.raises(ValueError, match="retries"):
        TranslationClient(retries=-1)


def test_server_errors_are_not_retried(server, backoff):
    with TranslationClient(server, model_name="nope", retries=3, backoff=5.0) as wrong_model:
        with pytest.raises(TranslationError) as error:
            wrong_model.translate(["x"])
    assert backoff.delays == []  # NOT_FOUND is final: no backoff, no second attempt.
    assert error.value.code == grpc.StatusCode.NOT_FOUND
    assert error.value.details == "Servable not found for request: Latest(nope)"
    assert str(error.value) == "NOT_FOUND: Servable not found for request: Latest(nope)"


def test_unavailable_is_retried_with_backoff(exports, tmp_path, backoff):
    with reserved_port() as port:
        with TranslationClient(f"127.0.0.1:{port}", retries=2, backoff=0.2, timeout=2) as down:
            with pytest.raises(TranslationError) as error:
                down.translate(["x"])
        assert error.value.code == grpc.StatusCode.UNAVAILABLE
        # Two backoffs of 0.2 s and 0.4 s, each with jitter in [0.5, 1.5).
        assert len(backoff.delays) == 2
        assert 0.1 <= backoff.delays[0] < 0.3 and 0.2 <= backoff.delays[1] < 0.6

        # The server comes up on that port during the first backoff: a retry succeeds.
        base_path = make_model_base(exports, str(tmp_path), (1,))
        late_server = ModelServer(
            ServerOptions(
                port=port,
                model_name=MODEL_NAME,
                model_base_path=base_path,
                file_system_poll_wait_seconds=0,
                # Shares the port with the holder's socket, as the holder's SO_REUSEPORT allows.
                grpc_channel_arguments="grpc.so_reuseport=1",
            )
        )

        def start_once():
            if late_server.grpc_port is None:
                late_server.start()

        backoff.delays.clear()
        backoff.before_sleep = start_once
        try:
            with TranslationClient(
                f"127.0.0.1:{port}", retries=8, backoff=0.2, timeout=5
            ) as patient:
                assert patient.translate(["late start"]) == [expected_greedy("late start", 1)]
            assert late_server.grpc_port == port and backoff.delays
        finally:
            late_server.stop()


def test_cli_chooses_the_model_version(two_version_server, capsys):
    assert client_lib.main(["--server", two_version_server, "--version", "1", "a b"]) == 0
    assert capsys.readouterr().out.splitlines() == [expected_greedy("a b", 1)]
    assert client_lib.main(["--server", two_version_server, "a b"]) == 0
    assert capsys.readouterr().out.splitlines() == [expected_greedy("a b", 2)]
    assert client_lib.main(["--server", two_version_server, "--version", "2", "--status"]) == 0
    assert capsys.readouterr().out.splitlines() == ["version 2: AVAILABLE"]
    assert client_lib.main(["--server", two_version_server, "--version", "7", "a"]) == 1
    assert capsys.readouterr().err.strip() == (
        "error: NOT_FOUND: Servable not found for request: Specific(translator, 7)"
    )
    with TranslationClient(two_version_server, version=1) as pinned:
        assert pinned.metadata()["version"] == 1


def test_cli_translates_arguments(server, capsys):
    assert client_lib.main(["--server", server, "hello big world", "a"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        expected_greedy("hello big world", 1),
        expected_greedy("a", 1),
    ]
    assert client_lib.main(["--server", server, "--signature_name", BEAM_SIGNATURE, "x y"]) == 0
    assert capsys.readouterr().out.splitlines() == [expected_beam("x y", 1)]


def test_cli_reads_stdin_and_files_in_batches(server, capsys, monkeypatch, tmp_path):
    lines = [f"line number {i}" for i in range(5)]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    assert client_lib.main(["--server", server, "--batch_size", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [expected_greedy(line, 1) for line in lines]

    source = tmp_path / "source.txt"
    source.write_text("\n".join(lines), encoding="utf-8")
    assert (
        client_lib.main(["--server", server, "--input_file", str(source), "--batch_size", "3"]) == 0
    )
    assert capsys.readouterr().out.splitlines() == [expected_greedy(line, 1) for line in lines]


def test_cli_prints_alignments(server, capsys):
    assert client_lib.main(["--server", server, "--alignments", "one two three"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        expected_greedy("one two three", 1),
        "  THREE <- three (0.70)",
        "  TWO <- two (0.70)",
        "  ONE <- one (0.70)",
    ]


def test_cli_status_and_metadata(server, capsys):
    assert client_lib.main(["--server", server, "--status", "--metadata"]) == 0
    output = capsys.readouterr().out
    assert "version 1: AVAILABLE" in output
    assert "serving_default: inputs {'text': ('DT_STRING', [-1])}" in output


def test_cli_errors_print_code_and_message(server, capsys, tmp_path):
    assert client_lib.main(["--server", server, "--model_name", "nope", "x"]) == 1
    assert capsys.readouterr().err.strip() == (
        "error: NOT_FOUND: Servable not found for request: Latest(nope)"
    )
    assert client_lib.main(["--server", server, "--signature_name", "greedy", "x"]) == 1
    assert (
        'FAILED_PRECONDITION: Serving signature key "greedy" not found.' in capsys.readouterr().err
    )
    assert client_lib.main(["--server", server, "--input_file", str(tmp_path / "missing.txt")]) == 1
    assert "No such file" in capsys.readouterr().err
    assert client_lib.main(["--server", server, "--batch_size", "0"]) == 2


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--n_best", "2", "--alternatives"], "--n_best and --alternatives cannot go together"),
        (["--sample", "--target_prefix", "a"], "--sample and --target_prefix cannot go together"),
        (["--alignments", "--target_file", "t"], "--alignments and --target_file cannot go"),
        (["--seed", "3"], "--seed goes with --sample"),
        (["--seed", "3", "--alternatives"], "--seed goes with --sample"),
        # --target_prefix is the alternatives signature's input: it chooses nothing itself.
        (["--alternatives", "--target_prefix", "a", "--n_best", "1"], "--n_best and --altern"),
    ],
)
def test_cli_flags_choose_one_signature_before_any_call(flags, message, capsys):
    """The signatures' client flags (`common.serving_contract.SIGNATURES`) each choose one
    signature; two, or an input's flag without its signature, are refused before connecting."""
    with reserved_port() as port:
        assert client_lib.main(["--server", f"127.0.0.1:{port}", *flags, "x"]) == 2
    assert f"error: {message}" in capsys.readouterr().err
