"""benchmarks/bench_decode.py: the step kernels and the bandwidth floor, the side-by-side table
against CTranslate2, the Session workers (preloaded library, variable, warmup)."""

import argparse
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import bench_decode
from benchmarks.bench_decode import matmul_floor, step_kernels
from model import Transformer


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


BEAM = 4


def _side_by_side_results():
    """`{(case, batch): (median s, fastest s)}` for every case of `side_by_side`'s table."""
    beam = BEAM
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

    return {
        (name, batch): (ms / 1000, ms / 1000 * fastest_share(name, batch))
        for name, pair in times.items()
        for batch, ms in zip((1, 32), pair)
    }


def test_bench_decode_side_by_side_gives_each_decoder_as_a_multiple_of_ctranslate2():
    args = argparse.Namespace(beam_width=BEAM, batch_sizes=[1, 32])
    beam = BEAM
    results = _side_by_side_results()
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


def test_bench_decode_side_by_side_leaves_out_the_exports_not_timed():
    # `--compute_dtypes float32`: no bfloat16 export was timed.
    args = argparse.Namespace(beam_width=BEAM, batch_sizes=[1, 32])
    results = {
        key: value for key, value in _side_by_side_results().items() if "bfloat16" not in key[0]
    }
    table, goals = bench_decode.side_by_side(args, results)
    assert "bfloat16" not in table and "bfloat16" not in goals
    assert any(line.startswith("| exported with --jit_compile --") for line in table.splitlines())
    goal_lines = goals.splitlines()
    # The plain, compiled, compiled greedy and hybrid goals, the fastest served, the floors.
    assert len(goal_lines) == 6
    # Without bfloat16, greedy batch 32's fastest served graph is the compiled one: 380 / 400.
    assert "greedy batch 32 **0.95×** (--jit_compile)" in goal_lines[4]


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


@pytest.mark.large
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


@pytest.mark.large
def test_bench_decode_worker_runs_every_warmup_record_and_raises_its_error(exports, tmp_path):
    from tensorflow_serving.apis import prediction_log_pb2

    from common.serving_contract import GREEDY_SIGNATURE, TEXT_INPUT, WARMUP_PATH

    export_dir = tmp_path / "1"
    shutil.copytree(exports[1], export_dir)
    log = prediction_log_pb2.PredictionLog()
    request = log.predict_log.request
    request.model_spec.signature_name = GREEDY_SIGNATURE
    # A matrix where the signature takes a vector of texts: the graph's tokenizer refuses it
    # (the server's loader feeds any shape, as TF Serving's Session does).
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
        RuntimeError,
        match="Session worker failed(.|\n)*input must be a vector, got shape: \\[1,1\\]",
    ):
        bench_decode.SessionWorker(str(export_dir), threads=1, replay_warmup=True)


def test_bench_decode_refuses_a_library_it_cannot_preload(capsys):
    bench_decode.parse_args(["--preload", UNUSED_GLIBC_LIBRARY])
    with pytest.raises(SystemExit):
        bench_decode.parse_args(["--preload", "libno-such-allocator.so.1"])
    error = capsys.readouterr().err
    assert "--preload: cannot preload 'libno-such-allocator.so.1'" in error
    assert "cannot open shared object file" in error
