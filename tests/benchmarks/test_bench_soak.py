"""benchmarks/bench_soak.py: good requests counted as lost, the retry budget, a short soak end to
end."""

import json
import time

import pytest


def test_bench_soak_counts_wrong_and_unanswered_good_requests_as_lost(exports, tmp_path):
    from benchmarks.bench_soak import (
        GRPC_GOOD,
        REST_GOOD,
        Outcome,
        RetryPolicy,
        lost_good_requests,
        translate_over_grpc,
        translate_over_rest,
    )
    from serving.client import TranslationClient
    from tests.serving_fixtures import ServerProcess, expected_greedy, make_model_base

    texts = ["Gracias.", "Buenas noches."]
    right = {text: expected_greedy(text, 1) for text in texts}
    wrong = {**right, "Gracias.": "Thanks."}
    retry = RetryPolicy(seconds=0.05, backoff=0.01, max_backoff=0.01)
    base_path = make_model_base(exports, str(tmp_path))
    with ServerProcess(
        [f"--model_base_path={base_path}", "--model_name=translator"], rest=True
    ) as server:
        address, rest = f"127.0.0.1:{server.grpc_port}", ("127.0.0.1", server.rest_port)
        with TranslationClient(address, retries=0, backoff=0.01) as client:
            grpc_codes = [translate_over_grpc(client, texts, right, retry),
                          translate_over_grpc(client, texts, wrong, retry)]  # fmt: skip
        rest_codes = [translate_over_rest(rest, "translator", texts, references, retry, 30)
                      for references in (right, wrong)]  # fmt: skip
    # The server is gone: its ports refuse connections, after the retries.
    with TranslationClient(address, retries=0, backoff=0.01) as client:
        grpc_codes.append(translate_over_grpc(client, texts, right, retry))
    rest_codes.append(translate_over_rest(rest, "translator", texts, right, retry, 30))
    assert grpc_codes == ["OK", "WRONG ANSWER", "UNAVAILABLE"]
    assert rest_codes == ["OK", "WRONG ANSWER", "ConnectionRefusedError"]
    outcomes = [Outcome(GRPC_GOOD, code, 0.0, 0.0) for code in grpc_codes] + [
        Outcome(REST_GOOD, code, 0.0, 0.0) for code in rest_codes
    ]
    expected = {"sent": 3, "answered": 1, "lost": 2}
    assert lost_good_requests(outcomes) == {GRPC_GOOD: expected, REST_GOOD: expected}


def test_bench_soak_retries_for_its_time_budget_with_a_capped_backoff():
    from benchmarks.bench_soak import RetryPolicy

    def attempts(codes):
        sent = []

        def attempt():
            sent.append(time.monotonic())
            code = codes[min(len(sent), len(codes)) - 1]
            return code, code == "UNAVAILABLE"

        return sent, attempt

    policy = RetryPolicy(seconds=60, backoff=0.001, max_backoff=0.004)
    sent, attempt = attempts(["UNAVAILABLE"] * 12 + ["OK"])
    assert policy.run(attempt) == "OK" and len(sent) == 13
    # Doubling from 1 ms, the 12 delays would add up to 2 s at least: the cap keeps each at
    # 4 ms (a busy machine's scheduler may add some).
    assert sent[-1] - sent[0] < 1.0
    sent, attempt = attempts(["INVALID_ARGUMENT"])
    assert policy.run(attempt) == "INVALID_ARGUMENT" and len(sent) == 1
    # A spent budget returns the last code: the request is lost.
    sent, attempt = attempts(["UNAVAILABLE"])
    assert RetryPolicy(0.05, 0.001, 0.004).run(attempt) == "UNAVAILABLE"
    assert len(sent) > 1 and sent[-1] - sent[0] < 1.0


@pytest.mark.large
def test_bench_soak_answers_every_good_request_through_roll_out_reloads_and_kill(exports, tmp_path):
    from benchmarks import bench_soak
    from benchmarks.sentences import SPANISH_SENTENCES
    from tests.serving_fixtures import expected_greedy

    output, plot, report = tmp_path / "BENCHMARKS.md", tmp_path / "soak.png", tmp_path / "soak.json"
    status = bench_soak.main(
        ["--export_dir", exports[1], "--duration", "6", "--idle_connections", "5",
         "--slowloris_connections", "3", "--slow_body_connections", "3",
         "--crlf_flood_connections", "1", "--plot", str(plot), "--report_json", str(report),
         "--output", str(output)]
    )  # fmt: skip
    data = json.loads(report.read_text())
    assert status == 0
    # Every version directory holds version 1's export: its translations throughout.
    assert data["references"] == {text: expected_greedy(text, 1) for text in SPANISH_SENTENCES}
    restart = data["chaos"]["restart"]
    for kind in bench_soak.GOOD_KINDS:
        good = data["good"][kind]
        assert good["sent"] > 0 and good["answered"] == good["sent"] and good["lost"] == 0
        assert data["codes"][kind] == {"OK": good["sent"]}
        after_restart = [o for o in data["outcomes"]
                         if o["kind"] == kind and o["start"] > restart["at"] + restart["first_answer_seconds"]]  # fmt: skip
        assert after_restart and all(o["code"] == "OK" for o in after_restart)
    for kind, codes in data["codes"].items():
        assert sum(codes.values()) == sum(o["kind"] == kind for o in data["outcomes"])
    codes = data["codes"]
    assert codes["malformed JSON"]["400"] > 0
    assert codes["REST body above the limit"]["429"] > 0
    assert codes["gRPC message above the limit"]["RESOURCE_EXHAUSTED"] > 0
    assert codes["malformed request line"]["505"] > 0
    assert codes["smuggled body framing"]["400"] > 0
    assert codes["ReloadConfig"] == {"OK": 6}
    # Refused before any run; the other outcomes are those of the deliberate kill.
    while_killed = {"UNAVAILABLE", "connection refused", "connection reset"}
    for kind, refused in (
        ("gRPC tensor of rank 33", "INVALID_ARGUMENT"),
        ("REST tensor of rank 33", "400"),
        ("REST string over the limit", "400"),
    ):
        assert set(codes.get(kind, {})) <= {refused} | while_killed, (kind, codes.get(kind))
    assert [name for _, name in data["events"]] == [
        "load begins", "version 2 copied in", "version 2 AVAILABLE, the previous one unloaded",
        "reload storm: 6 ReloadConfig calls", "reload storm settled", "server killed (SIGKILL)",
        "restarted server answers", "load ends",
    ]  # fmt: skip
    moments = [moment for moment, _ in data["events"]]
    assert moments == sorted(moments)
    assert 0 < restart["unavailable_seconds"] < restart["first_answer_seconds"]
    assert restart["longest_good_call_seconds"] > restart["unavailable_seconds"] / 2
    assert data["resources"] and all(
        sample["rss_mib"] > 100 and sample["threads"] > 1 and sample["fds"] > 2
        for sample in data["resources"]
    )
    assert plot.read_bytes().startswith(b"\x89PNG")
    text = output.read_text()
    assert "## Serving soak" in text and "**Lost good requests: 0** of" in text
    assert "(soak.png)" in text
