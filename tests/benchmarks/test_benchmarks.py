"""The benchmarks' own logic: what the decoding floor reads, how bench-serve reports its rounds."""

import argparse
import json
import os
import re
import shutil
import time

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import bench_decode, bench_serve
from benchmarks.bench_decode import matmul_floor, step_kernels
from model import Transformer
from tests.paths import REPO_ROOT


def small_model():
    model = Transformer(
        num_layers=2,
        d_model=16,
        num_heads=2,
        dff=24,
        input_vocab_size=30,
        target_vocab_size=40,
        pe_input=32,
        pe_target=32,
        rate=0.0,
        tie_embeddings=False,
    )
    model.build(((None, None), (None, None)))
    return model


def test_step_kernels_are_the_decoder_kernels_but_the_cross_attention_keys_and_values():
    model = small_model()
    decoder_kernels = [weight for weight in model.decoder.weights if weight.name == "kernel"]
    cross_key_value = {
        kernel.path
        for layer in model.decoder.dec_layers
        for kernel in (layer.mha2.wk.kernel, layer.mha2.wv.kernel)
    }
    expected = [kernel.path for kernel in decoder_kernels if kernel.path not in cross_key_value]
    read = [kernel.path for group in step_kernels(model) for kernel in group]
    assert sorted(read) == sorted(expected + [model.final_layer.kernel.path])
    assert len(read) == len(set(read))


def test_matmul_floor_reads_the_step_kernels_and_stays_finite():
    model = small_model()
    floor = matmul_floor(model, steps=5)
    out = floor(tf.ones([3, 7], tf.int32))
    assert out.shape == (3, model.d_model)
    assert np.all(np.isfinite(out.numpy()))
    # A beam search step's: beam-width rows a sentence, compiled or not, the same products.
    beam_rows = matmul_floor(model, steps=5, rows_per_sentence=4, jit_compile=False)
    beam_out = beam_rows(tf.ones([3, 7], tf.int32))
    assert beam_out.shape == (12, model.d_model)
    np.testing.assert_allclose(beam_out.numpy()[:3], out.numpy(), atol=1e-5)
    captured = {id(variable) for variable in floor.get_concrete_function().variables}
    for group in step_kernels(model):
        for kernel in group:
            assert id(kernel.value) in captured, kernel.path
    assert id(model.decoder.dec_layers[0].mha2.wk.kernel.value) not in captured


def report_args(**overrides):
    args = dict(
        concurrency=[1, 32],
        soak_requests=0,
        soak_concurrency=32,
        batching_parameters_file=os.path.join(bench_serve.SERVING_DIR, "batching.config"),
        model_base_path="exports/translator",
        signature_name="serving_default",
        sentences_file=None,
        sentences_per_request=1,
        requests=8,
        rounds=2,
        server_flags=[],
        adversarial_idle=0,
        adversarial_slowloris=0,
        adversarial_slow_body=0,
        adversarial_crlf_flood=0,
    )
    args.update(overrides)
    return argparse.Namespace(**args)


def load(rps):
    """A `Load` of one request per 1/rps seconds, 4 requests."""
    return bench_serve.Load([1.0 / rps] * 4, 4.0 / rps, 0)


def rows(unbatched_rounds, batched_rounds):
    """measure_interleaved-shaped rows whose rounds ran at the given requests/s."""
    table = []
    for setup, rounds in (
        (bench_serve.IN_PROCESS, [10.0, 10.0]),
        (bench_serve.NO_BATCHING, unbatched_rounds),
        (bench_serve.BATCHING, batched_rounds),
    ):
        for concurrency in (1, 32):
            runs = [load(rps) for rps in rounds]
            table.append(
                (
                    setup,
                    concurrency,
                    sum(runs, bench_serve.Load()).summary(),
                    [run.summary()["rps"] for run in runs],
                )
            )
    return table


def test_bench_serve_reports_round_ratios_the_aggregate_and_output_lengths():
    # Two rounds of 4 requests each: 20 and 40 req/s batched against 10 and 10 unbatched.
    body = bench_serve.report(
        report_args(),
        "cmd",
        rows([10.0, 10.0], [20.0, 40.0]),
        bench_serve.Load(),
        (100, 100),
        (0.0, 0.0, 0.0),
        [4, 8, 3, 5],
    )
    # 8 requests in 0.2 + 0.1 s = 26.7 req/s; against 10 req/s that is 2.7×, not the mean 3.0×.
    assert "**2.7×** requests/s (26.7 vs 10.0; round by round 2.0×, 4.0×)" in body
    assert "Goal ≥ 3×: not met" in body
    assert "- Soak: skipped (--soak_requests 0)." in body
    assert "mean 5.0, longest 8. A merged batch steps until its longest" in body


def test_bench_serve_reports_the_soak_when_one_ran():
    soak = bench_serve.Load([0.01] * 50, 1.0, 0)
    body = bench_serve.report(
        report_args(soak_requests=50),
        "cmd",
        rows([10.0, 10.0], [40.0, 40.0]),
        soak,
        (100 * 2**20, 104 * 2**20),
        (0.0, 0.0, 0.0),
    )
    assert "Soak (batching server, 50 requests at concurrency 32): 50.0 requests/s" in body
    assert "100 → 104 MiB (**+4.0%**; goal < 10%: met)" in body
    assert "**4.0×** requests/s" in body and "Goal ≥ 3×: met" in body


def test_bench_serve_reports_the_jit_compile_export_against_p99_within_twice_p50():
    """One setup more, `XLA_BATCHING`: at concurrency 1 its four latencies are 100 ms twice,
    then 150 and 180 ms, p50 125 ms and p99 179.1 ms (1.4×); at 32, 100 ms three times and a
    first request of 1 s, p99 973 ms (9.7×): the goal is met only when met at every one."""
    table = rows([10.0, 10.0], [40.0, 40.0])
    for concurrency, latencies in ((1, [0.1, 0.1, 0.15, 0.18]), (32, [1.0, 0.1, 0.1, 0.1])):
        xla = bench_serve.Load(latencies, 1.0, 0)
        table.append((bench_serve.XLA_BATCHING, concurrency, xla.summary(), [4.0]))
    xla_load = bench_serve.XlaLoad("runs/small", 224, 300.4, "every signature, batches of 1")
    body = bench_serve.report(
        report_args(), "cmd", table, bench_serve.Load(), (100, 100), (0.0, 0.0, 0.0), None, xla_load
    )
    assert "| gRPC, batching, --jit_compile export | 32 | 4.0 | 100 | 973 | 0 |" in body
    assert (
        "- `--jit_compile` export of `runs/small` (batching server; it loaded in 300 s, replaying "
        "224 warmup requests: every signature, batches of 1), from its first request after "
        "load: p99 / p50 **1.4×** at concurrency 1 (p50 125 ms, p99 179 ms), **9.7×** at concurrency 32 (p50 100 ms, p99 "
        "973 ms). Goal p99 ≤ 2× p50: not met."
    ) in body
    table[-1] = (bench_serve.XLA_BATCHING, 32, bench_serve.Load([0.1] * 4, 1.0, 0).summary(), [])
    body = bench_serve.report(
        report_args(), "cmd", table, bench_serve.Load(), (100, 100), (0.0, 0.0, 0.0), None, xla_load
    )
    assert "**1.0×** at concurrency 32 (p50 100 ms, p99 100 ms). Goal p99 ≤ 2× p50: met." in body


def adversarial(quiet_ms, held_ms, before, after):
    """An `Adversarial` whose requests all took the given ms, with threads/fds before and after."""
    return bench_serve.Adversarial(
        bench_serve.Load([quiet_ms / 1000] * 4, 1.0, 0),
        bench_serve.Load([held_ms / 1000] * 4, 1.0, 0),
        {"rss_mib": 1000.0, "threads": before[0], "fds": before[1]},
        {"rss_mib": 1020.0, "threads": before[0] + 2, "fds": before[1] + 1200},
        {"rss_mib": 1010.0, "threads": after[0], "fds": after[1]},
        0.5,
        7,
    )


def test_bench_serve_reports_the_adversarial_rows_against_the_quiet_p99_and_baseline():
    args = report_args(adversarial_idle=1000, adversarial_slowloris=200)
    table = rows([10.0, 10.0], [40.0, 40.0])
    met = bench_serve.report(args, "c", table, bench_serve.Load(), (1, 1), (0, 0, 0),
                             adversarial=adversarial(50, 90, (20, 30), (20, 30)))  # fmt: skip
    assert "| REST, batching | 1 | 4.0 | 50 | 50 | 0 |" in met
    assert (
        "| REST, batching, 1,000 idle + 200 slowloris connections held | 1 | 4.0 | 90 | 90 | 0 |"
        in met
    )
    assert "p99 **1.80×** the quiet p99 (90 vs 50 ms; goal ≤ 2×: met)" in met
    assert "threads (gRPC's own pool apart) 20 → 22 → 20, file descriptors 30 → 1230 → 30" in met
    assert "Each round's first call" not in met
    arrived = adversarial(50, 90, (20, 30), (20, 30))
    arrived.arrivals = [0.3, 0.45]
    with_arrivals = bench_serve.report(args, "c", table, bench_serve.Load(), (1, 1), (0, 0, 0),
                                       adversarial=arrived)  # fmt: skip
    assert "held every connection: 300–450 ms (it waits behind their arrival)." in with_arrivals
    assert "1,000 → 1,020 → 1,010 MiB (+1.0%)" in met
    assert "back to baseline: met" in met
    missed = bench_serve.report(args, "c", table, bench_serve.Load(), (1, 1), (0, 0, 0),
                                adversarial=adversarial(50, 110, (20, 30), (20, 31)))  # fmt: skip
    assert "goal ≤ 2×: not met" in missed and "back to baseline: not met" in missed
    every_kind = report_args(
        adversarial_idle=1000,
        adversarial_slowloris=200,
        adversarial_slow_body=200,
        adversarial_crlf_flood=20,
    )
    every = bench_serve.report(every_kind, "c", table, bench_serve.Load(), (1, 1), (0, 0, 0),
                               adversarial=adversarial(50, 90, (20, 30), (20, 30)))  # fmt: skip
    assert (
        "| REST, batching, 1,000 idle + 200 slowloris + 200 slow-body + 20 CRLF-flood connections "
        "held | 1 | 4.0 | 90 | 90 | 0 |"
    ) in every
    assert (
        "- REST under 1,000 idle, 200 slowloris, 200 slow-body and 20 CRLF-flood connections "
        "(batching server"
    ) in every
    # The runtimes' own threads, up to the margin, are no leak; one more is.
    margin = bench_serve.THREAD_MARGIN
    for extra, verdict in ((margin, "met"), (margin + 1, "not met")):
        report = bench_serve.report(args, "c", table, bench_serve.Load(), (1, 1), (0, 0, 0),
                                    adversarial=adversarial(50, 90, (20, 30), (20 + extra, 30)))  # fmt: skip
        assert f"back to baseline: {verdict}" in report


def test_bench_serve_holds_every_hostile_kind_of_connection_and_sees_the_server_let_them_go(
    exports, tmp_path
):
    import psutil

    from tests.serving_fixtures import ServerProcess, make_model_base

    base_path = make_model_base(exports, str(tmp_path))
    flags = [f"--model_base_path={base_path}", "--model_name=translator"]
    with ServerProcess(flags, rest=True) as server:
        running = bench_serve.RunningServer(
            f"127.0.0.1:{server.grpc_port}",
            psutil.Process(server.process.pid),
            0.0,
            ("127.0.0.1", server.rest_port),
        )
        rest_call = bench_serve.rest_caller(running.rest_address, "translator", [["Gracias."]])
        descriptors_at_calls = []

        def call(index):
            descriptors_at_calls.append(running.process.num_fds())
            rest_call(index)

        result = bench_serve.measure_adversarial(
            call, running, 4, 2, idle=40, slowloris=10, slow_body=10, crlf_flood=2
        )
        threads_after = bench_serve.thread_names(running.process)
    assert result.quiet.errors == 0 and result.held.errors == 0
    assert len(result.quiet.latencies) == len(result.held.latencies) == 4
    # The calls: a warm-up, then each round 2 quiet, the untimed first call while held, 2 held.
    # A held turn begins once the server has taken in every connection (CRLF floods apart), a
    # quiet one once it has let the last turn's go (the last quiet call's connection may still
    # be open): no change of phase lands in the timings.
    assert len(descriptors_at_calls) == 1 + 2 * (2 + 1 + 2) and len(result.arrivals) == 2
    baseline = result.before["fds"]
    for round_start in (1, 6):
        quiet, held = (
            descriptors_at_calls[round_start : round_start + 2],
            descriptors_at_calls[round_start + 2 : round_start + 5],
        )
        assert all(fds <= baseline + 1 for fds in quiet), descriptors_at_calls
        assert all(fds >= baseline + 60 for fds in held), descriptors_at_calls
    # The server held a descriptor for each connection (the baseline may still count the warm-up
    # call's; a CRLF flood may be refused between samples), and let every one go.
    assert result.during["fds"] >= result.before["fds"] + 60 - 1
    assert result.after["fds"] <= result.before["fds"]
    # A thread kept per connection would leave dozens (50 held, more replaced).
    assert bench_serve.back_to_baseline(result.before, result.after), (
        result.before,
        result.after,
        threads_after,
    )


def test_bench_serve_warms_every_setup_but_the_cold_ones_before_timing():
    calls = {"warmed": [], "cold": []}
    callers = {setup: made.append for setup, made in calls.items()}
    rows = bench_serve.measure_interleaved(callers, [1, 2], requests=4, rounds=2, cold=["cold"])
    # Each concurrency: one untimed call of index 0, then 2 rounds of 2 timed calls.
    assert sorted(calls["warmed"]) == sorted([0, 0, 1, 0, 1] * 2)
    assert sorted(calls["cold"]) == sorted([0, 1, 0, 1] * 2)
    assert [len(runs) for _, _, _, runs in rows] == [2] * 4


def test_bench_tokenizer_measures_losslessness_against_sacrebleu():
    from benchmarks.bench_tokenizer import learn, measure

    texts = [
        "El niño come pan.",
        "The boy eats bread.",
        "¿Dónde está? 3,5 euros",
        "A - B, 1, 2",
    ] * 30
    references = ["The boy eats bread.", "A - B, 1, 2", "don't  stop"]
    sentencepiece, _ = learn("unigram", texts, 300, lower_case=False)
    lossless = measure(sentencepiece, texts, references, lower_case=False)
    assert lossless["exact"] == 1.0 and lossless["tokens per sentence"] > 2
    # "don't  stop" comes back with one space: BLEU's 13a tokenization does not see it.
    assert lossless["bleu"] == pytest.approx(100.0) and lossless["chrf"] == pytest.approx(100.0)
    wordpiece, _ = learn("wordpiece", texts, 300, lower_case=False)
    lossy = measure(wordpiece, texts, references, lower_case=False)
    assert lossy["exact"] < 0.5 and lossy["chrf"] < 100.0


def test_bench_decode_side_by_side_gives_each_decoder_as_a_multiple_of_ctranslate2():
    args = argparse.Namespace(beam_width=4, batch_sizes=[1, 32])
    beam = 4
    # Milliseconds per batch: (batch 1, batch 32) of each case.
    times = {
        bench_decode.CT2_GREEDY.format(precision="float32"): (200, 500),
        bench_decode.CT2_BEAM.format(precision="float32", beam=beam): (300, 1400),
        bench_decode.CT2_GREEDY.format(precision="int8"): (100, 400),
        bench_decode.CT2_BEAM.format(precision="int8", beam=beam): (150, 1000),
        bench_decode.SAVED_GREEDY: (220, 400),
        bench_decode.SAVED_BEAM.format(beam=beam): (360, 2800),
        bench_decode.SAVED_XLA_GREEDY: (90, 380),
        bench_decode.SAVED_XLA_BEAM.format(beam=beam): (120, 1600),
        bench_decode.SAVED_BF16_GREEDY: (150, 300),
        bench_decode.SAVED_BF16_BEAM.format(beam=beam): (250, 2000),
        bench_decode.SAVED_BF16_XLA_GREEDY: (95, 390),
        bench_decode.SAVED_BF16_XLA_BEAM.format(beam=beam): (110, 1700),
        bench_decode.SAVED_HYBRID_GREEDY: (90, 400),
        bench_decode.SAVED_HYBRID_BEAM.format(beam=beam): (120, 1300),
        bench_decode.SAVED_BF16_HYBRID_GREEDY: (96, 300),
        bench_decode.SAVED_BF16_HYBRID_BEAM.format(beam=beam): (110, 2000),
        bench_decode.CACHED: (250, 600),
        bench_decode.BEAM.format(beam=beam): (450, 2100),
        bench_decode.CACHED_XLA: (80, 350),
        bench_decode.FLOOR: (60, 300),
        bench_decode.BEAM_FLOOR.format(beam=beam): (150, 700),
        bench_decode.BEAM_FLOOR_PLAIN.format(beam=beam): (180, 840),
    }
    # Each case's fastest call at 80% of its median, CTranslate2 float32's at batch 1 at 50%.
    ct2_greedy = bench_decode.CT2_GREEDY.format(precision="float32")
    ct2_beam = bench_decode.CT2_BEAM.format(precision="float32", beam=beam)

    def fastest_share(name, batch):
        return 0.5 if name in (ct2_greedy, ct2_beam) and batch == 1 else 0.8

    results = {
        (name, batch): (ms / 1000, ms / 1000 * fastest_share(name, batch))
        for name, pair in times.items()
        for batch, ms in zip((1, 32), pair)
    }
    table, goals = bench_decode.side_by_side(args, results)
    lines = table.splitlines()
    assert lines[0] == "| decoder | greedy b=1 | greedy b=32 | beam 4 b=1 | beam 4 b=32 |"
    saved = next(line for line in lines if line.startswith("| exported SavedModel, TF1"))
    # 220 / 200 and 220 / 100; 2800 / 1400 and 2800 / 1000.
    assert "| 220 ms (1.10× / 2.20×) |" in saved and "| 2,800 ms (2.00× / 2.80×) |" in saved
    xla = next(line for line in lines if line.startswith("| in-process, XLA"))
    assert xla.endswith("| 350 ms (0.70× / 0.88×) | – | – |")
    saved_xla = next(line for line in lines if line.startswith("| exported with --jit_compile"))
    assert saved_xla.endswith("| 90 ms (0.45× / 0.90×) | 380 ms (0.76× / 0.95×) "
                              "| 120 ms (0.40× / 0.80×) | 1,600 ms (1.14× / 1.60×) |")  # fmt: skip
    bf16 = next(
        line for line in lines if line.startswith("| exported with --compute_dtype bfloat16, ")
    )
    assert bf16.endswith("| 150 ms (0.75× / 1.50×) | 300 ms (0.60× / 0.75×) "
                         "| 250 ms (0.83× / 1.67×) | 2,000 ms (1.43× / 2.00×) |")  # fmt: skip
    assert any(
        line.startswith("| exported with --compute_dtype bfloat16 --jit_compile") for line in lines
    )
    goal_lines = goals.splitlines()
    # Issue #25: the plain graph's beam ≤ 1.3× CTranslate2 float32 (360 / 300, 2800 / 1400)...
    assert goal_lines[0] == (
        f"- {bench_decode.SAVED_BEAM.format(beam=beam)}, against CTranslate2 float32: "
        "batch 1 **1.20×** (fastest calls 1.92×; goal ≤ 1.3: met); batch 32 **2.00×** "
        "(fastest calls 2.00×; goal ≤ 1.3: not met)."
    )
    # ... the compiled beam ≤ 1.0× (120 / 300, 1600 / 1400), greedy ≤ 0.5× and ≤ 0.8×.
    assert (
        "batch 1 **0.40×** (fastest calls 0.64×; goal ≤ 1.0: met); batch 32 **1.14×** "
        "(fastest calls 1.14×; goal ≤ 1.0: not met)." in (goal_lines[1])
    )
    assert goal_lines[2].endswith(
        "batch 1 **0.45×** (fastest calls 0.72×; goal ≤ 0.5: met); batch 32 **0.76×** "
        "(fastest calls 0.76×; goal ≤ 0.8: met)."
    )
    # The matrix products alone: 60 / 200, 300 / 500; 150 / 300, 700 / 1400; 180 / 300, 840 / 1400.
    assert goal_lines[-1].endswith(
        "against CTranslate2 float32's whole decoding: greedy, XLA 0.30× and 0.60×; "
        "beam 4, XLA 0.50× and 0.50×; beam 4, plain graph 0.60× and 0.60×."
    )
    # One export for both batch sizes (120 / 300, 1300 / 1400; 110 / 300, 2000 / 1400).
    assert goal_lines[3] == (
        f"- {bench_decode.SAVED_HYBRID_BEAM.format(beam=beam)}, against CTranslate2 float32: "
        "batch 1 **0.40×** (fastest calls 0.64×; goal ≤ 1.0: met); batch 32 **0.93×** "
        "(fastest calls 0.93×; goal ≤ 1.0: met)."
    )
    assert goal_lines[4].endswith(
        "batch 1 **0.37×** (fastest calls 0.59×; goal ≤ 1.0: met); batch 32 **1.43×** "
        "(fastest calls 1.43×; goal ≤ 1.0: not met)."
    )
    # bfloat16: the plain beam against the served goal (250 / 300, 2000 / 1400), the hybrid's
    # greedy against the compiled greedy's (96 / 200, 300 / 500).
    assert goal_lines[5] == (
        f"- {bench_decode.SAVED_BF16_BEAM.format(beam=beam)}, against CTranslate2 float32: "
        "batch 1 **0.83×** (fastest calls 1.33×; goal ≤ 1.0: met); batch 32 **1.43×** "
        "(fastest calls 1.43×; goal ≤ 1.0: not met)."
    )
    assert goal_lines[6] == (
        f"- {bench_decode.SAVED_BF16_HYBRID_GREEDY}, against CTranslate2 float32: "
        "batch 1 **0.48×** (fastest calls 0.77×; goal ≤ 0.5: met); batch 32 **0.60×** "
        "(fastest calls 0.60×; goal ≤ 0.8: met)."
    )
    hybrid = next(line for line in lines if line.startswith("| exported with --jit_compile --"))
    assert hybrid.endswith("| 1,300 ms (0.93× / 1.30×) |")
    # The fastest served graph of each kind and batch against int8: 90 / 100 (compiled),
    # 300 / 400 (bfloat16, the first of a tie), 110 / 150 (bfloat16 compiled), 1300 / 1000
    # (hybrid).
    assert goal_lines[7] == (
        "- The fastest served graph against CTranslate2 int8: greedy batch 1 **0.90×** "
        "(--jit_compile); greedy batch 32 **0.75×** (bfloat16); beam batch 1 **0.73×** "
        "(bfloat16 --jit_compile); beam batch 32 **1.30×** (--jit_compile --xla_max_batch 1)."
    )


def test_bench_decode_session_worker_answers_as_a_session_in_this_process_and_raises_its_errors(
    exports,
):
    from common.serving_contract import BEAM_SIGNATURE, GREEDY_SIGNATURE

    texts = ["Gracias.", "Buenas noches."]
    here = bench_decode.SessionSignatures(exports[1], threads=1)
    with bench_decode.SessionWorker(exports[1], threads=1) as worker:
        for signature in (GREEDY_SIGNATURE, BEAM_SIGNATURE):
            expected, answered = here(signature, texts), worker(signature, texts)
            assert answered.keys() == expected.keys()
            for name, value in expected.items():
                np.testing.assert_array_equal(answered[name], value)
        with pytest.raises(RuntimeError, match="Session worker failed"):
            worker("no_such_signature", texts)
        # The worker still answers after a failed request.
        assert worker(GREEDY_SIGNATURE, texts).keys() == expected.keys()


# A library of glibc's own package (so on every glibc system) that nothing here loads otherwise.
UNUSED_GLIBC_LIBRARY = "libBrokenLocale.so.1"


def _mapped_libraries(pid):
    with open(f"/proc/{pid}/maps") as maps:
        return {os.path.basename(line.split()[-1]) for line in maps if "/" in line}


def test_bench_decode_session_worker_runs_with_the_preloaded_library(exports):
    from common.serving_contract import GREEDY_SIGNATURE

    with bench_decode.SessionWorker(exports[1], threads=1, preload=UNUSED_GLIBC_LIBRARY) as worker:
        assert UNUSED_GLIBC_LIBRARY in _mapped_libraries(worker.pid)
        assert worker(GREEDY_SIGNATURE, ["Gracias."])
    assert "LD_PRELOAD" not in os.environ or UNUSED_GLIBC_LIBRARY not in os.environ["LD_PRELOAD"]
    assert UNUSED_GLIBC_LIBRARY not in _mapped_libraries(os.getpid())


def test_bench_decode_workers_set_the_variable_and_replay_the_warmup_only_when_asked(exports):
    from model.dense import FROZEN_WEIGHTS_VARIABLE
    from serving.model_server.servable import read_warmup_requests
    from tests.frozen_weights import process_environment

    setting = f"{FROZEN_WEIGHTS_VARIABLE}=1".encode()
    records = len(read_warmup_requests(exports[1]))
    assert records > 0
    for flags, expected in (([], (False, 0)), (["--assume_frozen_weights"], (True, records))):
        args = bench_decode.parse_args([*flags, "--threads", "1"])
        with bench_decode.bench_session_worker(exports[1], args) as worker:
            assert (setting in process_environment(worker.pid), worker.warmup_records) == expected


def test_bench_decode_worker_runs_every_warmup_record_and_raises_its_error(exports, tmp_path):
    from tensorflow_serving.apis import prediction_log_pb2

    from common.serving_contract import GREEDY_SIGNATURE, TEXT_INPUT, WARMUP_PATH

    export_dir = tmp_path / "1"
    shutil.copytree(exports[1], export_dir)
    log = prediction_log_pb2.PredictionLog()
    request = log.predict_log.request
    request.model_spec.signature_name = GREEDY_SIGNATURE
    # A matrix where the signature takes a vector of texts: the Session refuses it.
    request.inputs[TEXT_INPUT].CopyFrom(tf.make_tensor_proto([[b"Hola."]], tf.string))
    path = str(export_dir / WARMUP_PATH)
    valid = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
    assert len(valid) > 1
    with tf.io.TFRecordWriter(path) as writer:
        for record in [*valid, log.SerializeToString()]:
            writer.write(record)
    with bench_decode.SessionWorker(str(export_dir), threads=1) as worker:
        assert worker.warmup_records == 0  # Not asked to.
    # The refused record comes last: the replay ran each one before it.
    with pytest.raises(
        RuntimeError, match="Session worker failed(.|\n)*Cannot feed value of shape"
    ):
        bench_decode.SessionWorker(str(export_dir), threads=1, replay_warmup=True)


def test_bench_decode_refuses_a_library_it_cannot_preload(capsys):
    bench_decode.parse_args(["--preload", UNUSED_GLIBC_LIBRARY])
    with pytest.raises(SystemExit):
        bench_decode.parse_args(["--preload", "libno-such-allocator.so.1"])
    error = capsys.readouterr().err
    assert "--preload: cannot preload 'libno-such-allocator.so.1'" in error
    assert "cannot open shared object file" in error


def test_profile_decode_sums_a_traced_session_run_by_op_type():
    from benchmarks.profile_decode import op_times

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8])
        y = tf.nn.relu(tf.matmul(x, tf.ones([8, 8])))
        z = tf.matmul(y, tf.ones([8, 4]))
    with tf.compat.v1.Session(graph=graph) as session:
        run_metadata = tf.compat.v1.RunMetadata()
        session.run(
            z,
            {x: np.ones([2, 8], np.float32)},
            options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
            run_metadata=run_metadata,
        )
    times = op_times(run_metadata)
    matmuls = {op: value for op, value in times.items() if "MatMul" in op}
    assert sum(count for _, count in matmuls.values()) == 2
    assert all(micros >= 0 for micros, _ in times.values())


XLA_PROFILE_SCRIPT = """
import json, os
from benchmarks.profile_decode import XLA_TRACE_FLAG, traced_xla_call
os.environ["XLA_FLAGS"] = XLA_TRACE_FLAG
import tensorflow as tf

@tf.function(jit_compile=True)
def loop(x, w):
    return tf.while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, tf.tanh(x @ w)), [0, x])[1]

x, w = tf.ones([64, 256]), tf.ones([256, 256]) / 256
loop(x, w)  # compiled before the trace, as the profile's warm-up calls do
print(json.dumps(traced_xla_call(lambda: loop(x, w).numpy())))
"""


def test_profile_decode_sums_a_traced_xla_program_by_instruction():
    import subprocess
    import sys

    from benchmarks.profile_decode import MATRIX_PRODUCT

    # A fresh process: XLA reads XLA_FLAGS once, at its first compilation.
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    environment.pop("XLA_FLAGS", None)
    completed = subprocess.run(
        [sys.executable, "-c", XLA_PROFILE_SCRIPT],
        capture_output=True,
        text=True,
        env=environment,
        cwd=str(REPO_ROOT),
        check=True,
    )
    times = json.loads(completed.stdout.strip().splitlines()[-1])
    products = {name: value for name, value in times.items() if MATRIX_PRODUCT.search(name)}
    # The loop's body multiplies once an iteration; the loop itself is one instruction.
    assert sum(count for _, count in products.values()) == 5
    assert times["while"][1] == 1
    assert all(micros >= 0 for micros, _ in times.values())
    # Self times: the loop's own excludes its body's, of which the products alone take more.
    assert times["while"][0] < sum(micros for micros, _ in products.values())
    # Only the program's instructions: no Python, TensorFlow or XLA runtime events.
    runtime = re.compile(r"::|Execute|lambda|^end: |BlockUntilReady")
    assert not [name for name in times if runtime.search(name)]


def test_bench_robustness_writes_a_section_with_a_row_per_perturbation(tiny_run, tmp_path):
    from benchmarks.bench_robustness import main as bench_robustness
    from training.noise import PERTURBATIONS

    # Written into a copy of the results page: the section lands in its area, the rest stays.
    output = tmp_path / "BENCHMARKS.md"
    shutil.copyfile(RESULTS_PAGE, output)
    section = "Robustness to how people type: a run of mine"
    argv = ["--run_dir", tiny_run["run_dir"], "--limit", "4", "--output", str(output)]
    bench_robustness([*argv, "--section", section])
    text = output.read_text(encoding="utf-8")
    written = section_text(text, section)
    assert "the 4 sentences of its test split" in written
    assert area_around(text, section) == "Translation quality"
    assert text.replace(written, "") == read_results_page()
    # The command as a shell runs it: the section title quoted.
    assert f"--section '{section}'`." in text
    for name in ["none", *PERTURBATIONS]:
        report = json.loads(
            open(
                f"{tiny_run['run_dir']}/eval/test.greedy"
                + ("" if name == "none" else f".{name}")
                + ".report.json"
            ).read()
        )
        assert f"| {name} | {report['bleu']:.2f} | {report['chrf']:.2f} |" in text
    copy_report = json.loads(
        open(f"{tiny_run['run_dir']}/eval/test.greedy.copy.report.json").read()
    )
    for kind in ("names", "numbers"):
        rates = copy_report[kind]
        assert f"| {kind} | {rates['sentences']} | {100 * rates['rate']:.1f}% |" in text


RESULTS_PAGE = os.path.join(str(REPO_ROOT), "BENCHMARKS.md")
SECTION_HEADING = re.compile(r"^(#{2,3}) (.+?)[ \t]*$", re.M)


def read_results_page():
    with open(RESULTS_PAGE, encoding="utf-8") as handle:
        return handle.read()


def section_text(text, title):
    """The section `title` of a results page, from its heading to the next heading of its level
    or above, found independently of benchmarks.report."""
    headings = list(SECTION_HEADING.finditer(text))
    (found,) = [match for match in headings if match.group(2) == title]
    level = len(found.group(1))
    ends = [
        match.start()
        for match in headings
        if match.start() > found.start() and len(match.group(1)) <= level
    ]
    return text[found.start() : ends[0] if ends else len(text)]


def area_around(text, title):
    """The `## ` area whose part of the page holds the `### ` section `title`."""
    area = None
    for match in SECTION_HEADING.finditer(text):
        if match.group(1) == "##":
            area = match.group(2)
        elif match.group(2) == title:
            return area
    raise AssertionError(f"no ### {title} in the page")


def test_write_section_replaces_its_section_of_the_results_page_and_nothing_else(tmp_path):
    from benchmarks.report import write_section

    page = read_results_page()
    output = tmp_path / "BENCHMARKS.md"
    output.write_text(page, encoding="utf-8")
    old = section_text(page, "Decoding")
    write_section(str(output), "Decoding", "A new table.\n")
    text = output.read_text(encoding="utf-8")
    # Same heading level, same place in its area; every other byte of the page as it was.
    assert section_text(text, "Decoding") == "### Decoding\n\nA new table.\n\n"
    assert area_around(text, "Decoding") == "Decoding speed"
    assert text == page.replace(old, "### Decoding\n\nA new table.\n\n")
    # A section's own subsections (`#### `) go with it.
    presets = "Training: the presets on the embedded corpus"
    old = section_text(text, presets)
    assert "\n#### `small`\n" in old
    write_section(str(output), presets, "Two presets.")
    assert output.read_text(encoding="utf-8") == text.replace(
        old, f"### {presets}\n\nTwo presets.\n\n"
    )


def test_write_section_puts_a_new_section_at_the_end_of_its_area(tmp_path):
    from benchmarks.report import write_section

    page = read_results_page()
    output = tmp_path / "BENCHMARKS.md"
    output.write_text(page, encoding="utf-8")
    write_section(str(output), "Everyday sentences: another-model", "Its table.")
    text = output.read_text(encoding="utf-8")
    quality = section_text(text, "Translation quality")
    assert quality.endswith("### Everyday sentences: another-model\n\nIts table.\n\n")
    assert text.replace("### Everyday sentences: another-model\n\nIts table.\n\n", "") == page
    # A title of no area goes at the end, as its own `## ` part; an area's title is refused.
    write_section(str(output), "Something else", "Its text.")
    assert output.read_text(encoding="utf-8").endswith("\n## Something else\n\nIts text.\n")
    with pytest.raises(ValueError, match="an area"):
        write_section(str(output), "Training", "Would replace the whole area.")


def test_write_section_starts_a_page_with_the_area_of_its_first_section(tmp_path):
    from benchmarks.report import write_section

    output = tmp_path / "BENCHMARKS.md"
    write_section(str(output), "Decoding", "Decoders.")
    write_section(str(output), "Robustness to how people type: x", "Scores.")
    write_section(str(output), "Decoding cost as work grows", "Curves.")
    text = output.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n")
    assert [match.group(0) for match in SECTION_HEADING.finditer(text)] == [
        "## Decoding speed",
        "### Decoding",
        "### Decoding cost as work grows",
        "## Translation quality",
        "### Robustness to how people type: x",
    ]


def test_every_benchmark_writes_into_an_area_of_the_results_page():
    from benchmarks import (
        bench_everyday,
        bench_length,
        bench_robustness,
        bench_soak,
        bench_tokenizer,
        bench_translate,
    )
    from benchmarks.report import AREAS, area_of

    page = read_results_page()
    # The page: the summary, then the areas in order, each `###` section in the area it belongs
    # to, so that a benchmark rerun replaces it in place.
    areas = [match.group(2) for match in SECTION_HEADING.finditer(page) if match.group(1) == "##"]
    assert areas == ["Current figures", *[area for area, _ in AREAS]]
    for match in SECTION_HEADING.finditer(page):
        if match.group(1) == "###":
            assert area_of(match.group(2)) == area_around(page, match.group(2)), match.group(2)
    # Every benchmark's default section has an area (profile_decode, sweep_recipe and bench_train
    # build theirs in place: "Op profile: <signature>, batch <n>", "Training recipe sweep[, preset]").
    defaults = [
        bench_decode.SECTION_TITLE,
        bench_length.SECTION_TITLE,
        bench_serve.SECTION,
        bench_soak.SECTION,
        bench_tokenizer.SECTION_TITLE,
        bench_translate.SECTION,
        bench_robustness.default_section("pretrained/bible-es-en"),
        f"{bench_everyday.SECTION_PREFIX}: bible-es-en",
        "Op profile: beam_search, batch 32",
        "Training recipe sweep, demo",
        "Training pipeline",
        "Training step: XLA and bfloat16",
    ]
    assert [title for title in defaults if area_of(title) is None] == []
    assert bench_robustness.default_section("runs/mine/") == "Robustness to how people type: mine"


def test_sweep_table_adds_the_perturbed_dev_columns_when_every_point_has_them():
    from benchmarks.sweep_recipe import markdown

    result = {
        "name": "source_noise=0.1",
        "settings": {"source_noise": 0.1},
        "steps": 10,
        "minutes": 1,
        "cpus": "all",
        "bleu_signature": "sig",
        "test_bleu": 5.0,
        "test_chrf": 20.0,
        "dev_curve": [(1.0, 10, 4.0)],
    }
    assert "dev BLEU perturbed" not in markdown([result], "cmd", "plot.png", "small")
    robust = {**result, "dev_bleu": 4.5, "dev_bleu_perturbed": 3.25, "dev_looping": 0.125}
    assert "| 5.00 | 20.00 | 4.00 | 4.50 | 3.25 | 12.5% |" in markdown(
        [robust], "cmd", "plot.png", "small"
    )


def test_bench_translate_repeats_the_sources_with_each_variation_in_turn():
    from benchmarks.bench_translate import generated_lines

    sources = ["Hola, amigo.", "¿Dónde?"]
    assert generated_lines(sources, 9) == [
        "Hola, amigo.",
        "¿Dónde?",
        "hola, amigo.",
        "¿dónde?",
        "Hola, amigo",
        "¿Dónde",
        "Hola",
        "¿Dónde?",
        "Hola, amigo.",
    ]


def test_bench_translate_reports_throughput_past_start_up_and_the_growth_of_peak_memory():
    from benchmarks.bench_translate import markdown

    mib = 2**20
    body = markdown("pretrained/bible-es-en", [(500, 35.0, 1200 * mib), (2000, 65.0, 1210 * mib)],
                    500, "cmd")  # fmt: skip
    assert "| 500 | 35.0 | 14.3 | 1200 |" in body and "| 2,000 | 65.0 | 30.8 | 1210 |" in body
    assert "Past start-up (the difference of the two runs): 50.0 sentences/s" in body
    assert "Peak RSS from 500 to 2,000 lines: +10 MiB." in body


def test_bench_translate_counts_written_lines_incrementally_across_appends(tmp_path):
    from benchmarks.bench_translate import ProgressSampler

    output = tmp_path / "out.txt"
    sampler = ProgressSampler(os.getpid(), str(output), seconds=60)
    assert sampler.lines_written() == 0  # not created yet
    output.write_bytes(b"one\ntwo\nhalf")
    assert sampler.lines_written() == 2
    with open(output, "ab") as handle:
        handle.write(b" a line\n\nfour\n")
    assert sampler.lines_written() == 5
    assert sampler.lines_written() == 5


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


def test_bench_length_tabulates_ms_per_sentence_and_per_output_token_and_plots_both_curves(
    tmp_path,
):
    from benchmarks import bench_length

    args = bench_length.parse_args(
        ["--output_lengths", "16", "32", "--source_lengths", "8", "64", "--fixed_output", "32"]
    )
    names = [bench_length.SERVED_GREEDY, bench_length.CT2_GREEDY]
    # Output curve: served 2 ms a token, CTranslate2 1; source curve: served flat, CT2 rising.
    results = {}
    for length in args.output_lengths:
        results[(bench_length.OUTPUT, length, names[0])] = 2.0 * length
        results[(bench_length.OUTPUT, length, names[1])] = 1.0 * length
    for length in args.source_lengths:
        results[(bench_length.SOURCE, length, names[0])] = 64.0
        results[(bench_length.SOURCE, length, names[1])] = 30.0 + length
    body = bench_length.markdown(args, results, "cmd", "docs/plot.png")
    lines = body.splitlines()
    assert "| output tokens | served greedy | CTranslate2 float32 greedy |" in lines
    assert "| 32 | 64.0 (2.00) | 32.0 (1.00) |" in lines
    assert "| 64 | 64.0 | 94.0 |" in lines
    assert "![decoding cost against output and source length](docs/plot.png)" in lines
    path = tmp_path / "plot.png"
    bench_length.plot(args, results, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
