"""Decoding benchmark: `make bench-decode` (numbers into BENCHMARKS.md, section "Decoding").

On one model (random weights: the output length is forced, so what the weights say does not
matter), times for a batch of 1 and of 32 sentences:

- the naive greedy decoder (`model.decoding.naive_greedy_decode`: the whole prefix through the
  decoder at every step, the classic tutorial's loop),
- cached greedy decoding (`greedy_decode`: one token per step through the key/value cache),
  in a plain graph and with XLA,
- beam search (`beam_search_decode`, beam 4, with the cache),
- the floor: only the matrix products of a cached step, same weights, with XLA (`matmul_floor`),
  and those of a beam search step (beam-width rows a sentence) with XLA and in a plain graph,

each compiled with `tf.function`, warmed up, then timed `--repeats` rounds (median reported), for
exactly `--output_tokens` output tokens (min_length = max_decoding_length). Then the same model
exported by `inference.export` (text in, text out, tokenizer and detokenizer in the graph) is loaded
as the model server loads it, into a TF1 `Session` as TF Serving does (`SessionSignatures`), and its
`serving_default` and `beam_search` signatures are timed the same way; its output length is
forced by a -1e4 bias on the [END] logit and `max_length_ratio=0`,
`max_length_offset=output_tokens`, and checked through the `alignments` signature. With
`--export_dir` an existing export is timed instead (its own output lengths, reported). Each
export's Session runs in a worker process of its own (`SessionWorker`), which the timed rounds
call in turn: Sessions of several exports in one process slowed each other's plain graph
(`SessionWorker`).

The anchor: the same weights converted by `inference.export_ctranslate2` and run by CTranslate2
(float32, and int8 weights), greedy and beam 4, on the same number of threads
(`intra_threads`; one batch at a time), `min_decoding_length = max_decoding_length =
output_tokens`, timed in the same interleaved rounds. The report gives every project decoder's
time as a multiple of CTranslate2's.

Goals (issue 18): the exported SavedModel at least as fast as CTranslate2 float32 at batch 32
(greedy and beam 4), and no slower at batch 1; the `--jit_compile` export's greedy signature
(what TF Serving runs with `--xla_cpu_compilation_enabled`) at batch 1 in at most half
CTranslate2 float32's time; batch 32 ≥ 8× batch 1 in sentences/s for cached greedy.
"""

import argparse
import contextlib
import functools
import itertools
import multiprocessing
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import ctranslate2
import keras
import numpy as np
import tensorflow as tf
from tqdm.auto import tqdm

from benchmarks.report import machine_description, write_section
from benchmarks.sentences import SPANISH_SENTENCES
from common.serving_contract import (
    ALIGNMENTS_SIGNATURE,
    BEAM_SIGNATURE,
    GREEDY_SIGNATURE,
    TARGET_TOKENS_OUTPUT,
    TEXT_INPUT,
)
from inference import export
from inference.export_ctranslate2 import TransformerConverter, decoding_options, source_pieces
from model import Transformer
from model.decoding import beam_search_decode, greedy_decode, naive_greedy_decode
from model.dense import FROZEN_WEIGHTS_VARIABLE
from model.special_tokens import END_ID, RESERVED_TOKENS, START_ID
from model.tokenizer import WordPieceTokenizer
from run_directory.artifacts import COMPUTE_DTYPES
from serving.model_server.servable import load_session, read_meta_graph, read_warmup_requests
from training import decoding_flags

SECTION_TITLE = "Decoding"
NAIVE, CACHED, BEAM = "naive greedy (no cache)", "cached greedy", "beam search (beam {beam})"
# The served beam search skips alignments; this row keeps them, as exports before 344a34e did.
BEAM_ALIGNED = "beam search with alignments (beam {beam})"
CACHED_XLA = "cached greedy, XLA (jit_compile)"
FLOOR = "floor: a cached step's matmuls alone, XLA"
BEAM_FLOOR = "floor: a beam step's matmuls alone ({beam} rows a sentence), XLA"
BEAM_FLOOR_PLAIN = "floor: a beam step's matmuls alone ({beam} rows a sentence), plain graph"
SAVED_GREEDY = "SavedModel serving_default (greedy), TF1 Session"
SAVED_BEAM = "SavedModel beam_search (beam {beam}), TF1 Session"
SAVED_XLA_GREEDY = "SavedModel serving_default (greedy), --jit_compile export, TF1 Session"
SAVED_XLA_BEAM = "SavedModel beam_search (beam {beam}), --jit_compile export, TF1 Session"
SAVED_BF16_GREEDY = "SavedModel serving_default (greedy), bfloat16 export, TF1 Session"
SAVED_BF16_BEAM = "SavedModel beam_search (beam {beam}), bfloat16 export, TF1 Session"
SAVED_BF16_XLA_GREEDY = (
    "SavedModel serving_default (greedy), bfloat16 --jit_compile export, TF1 Session"
)
SAVED_BF16_XLA_BEAM = (
    "SavedModel beam_search (beam {beam}), bfloat16 --jit_compile export, TF1 Session"
)
# The hybrid exports: `--jit_compile --xla_max_batch 1`, so batch 1 runs XLA and batch 32 the
# plain graph (inference.export --xla_max_batch).
HYBRID_MAX_BATCH = 1
# The statistics of a case's calls in `time_cases`' results, by position.
MEDIAN, FASTEST = 0, 1
SAVED_HYBRID_GREEDY = (
    f"SavedModel serving_default (greedy), --jit_compile --xla_max_batch {HYBRID_MAX_BATCH} "
    "export, TF1 Session"
)
SAVED_HYBRID_BEAM = (
    "SavedModel beam_search (beam {beam}), --jit_compile --xla_max_batch "
    f"{HYBRID_MAX_BATCH} export, TF1 Session"
)
SAVED_BF16_HYBRID_GREEDY = (
    "SavedModel serving_default (greedy), bfloat16 --jit_compile --xla_max_batch "
    f"{HYBRID_MAX_BATCH} export, TF1 Session"
)
SAVED_BF16_HYBRID_BEAM = (
    "SavedModel beam_search (beam {beam}), bfloat16 --jit_compile --xla_max_batch "
    f"{HYBRID_MAX_BATCH} export, TF1 Session"
)
# Issue 25's goals: the most time a served decoder may take, as a multiple of CTranslate2
# float32's, at the smallest and the largest batch size.
PLAIN_BEAM_GOAL = (1.3, 1.3)
SERVED_BEAM_GOAL = (1.0, 1.0)
COMPILED_GREEDY_GOAL = (0.5, 0.8)
CT2_GREEDY = "CTranslate2 {precision} greedy"
CT2_BEAM = "CTranslate2 {precision} beam search (beam {beam})"
CT2_PRECISIONS = ("float32", "int8")


def synthetic_vocab(size):
    """A WordPiece vocabulary of `size` tokens: reserved, letters (alone and "##"), then
    made-up lowercase words ("aa", "ab", ..., "aaa", ...), so every word of it is one token."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = list(RESERVED_TOKENS) + list(letters) + ["##" + letter for letter in letters]
    words = (
        "".join(chars)
        for length in itertools.count(2)
        for chars in itertools.product(letters, repeat=length)
    )
    while len(vocab) < size:
        vocab.append(next(words))
    return vocab


def build_model(args, dtype=None):
    """The benchmarked Transformer, built, with [END] made (practically) impossible. `dtype`:
    a Keras dtype policy (`bfloat16_copy`'s is what `inference.export --compute_dtype bfloat16`
    exports)."""
    model = Transformer(
        num_layers=args.num_layers,
        d_model=args.d_model,
        num_heads=args.num_heads,
        dff=args.dff,
        input_vocab_size=args.vocab_size,
        target_vocab_size=args.vocab_size,
        pe_input=args.max_positions,
        pe_target=args.max_positions,
        rate=0.0,
        tie_embeddings=False,  # the matmul floor reads the output layer's own (d_model, vocab) kernel
        dtype=dtype,
    )
    model.build(((None, None), (None, None)))
    # Forced lengths for the exported graph, which has no min_length: no greedy or beam step
    # picks a token 1e4 nats below the others. The Python decoders force it with min_length too.
    bias = model.named_weights()["pre_softmax_linear"]["b"]
    bias.assign(tf.tensor_scatter_nd_update(bias, [[END_ID]], [-1e4]))
    return model


def random_sentences(vocab, count, words, seed):
    """`count` sentences of `words` made-up words (one token each)."""
    rng = np.random.default_rng(seed)
    word_pool = [token for token in vocab[len(RESERVED_TOKENS) :] if not token.startswith("##")]
    return [" ".join(rng.choice(word_pool, words)) for _ in range(count)]


def time_cases(cases, repeats, warmup):
    """Seconds per call of each case, outputs fetched: `{(name, batch): (median, minimum)}`.

    The timed calls go round-robin (one call of every case per round) after every case is
    warmed up, so a slow spell of this shared machine hits all cases alike instead of one.
    """

    def call(function, argument):
        # Eager tensors are fetched; Session and CTranslate2 results arrive as host values.
        for value in tf.nest.flatten(function(argument)):
            if isinstance(value, tf.Tensor):
                value.numpy()

    for _name, function, _batch, argument in tqdm(cases, desc="warm-up", unit=" case"):
        for _ in range(warmup):
            call(function, argument)
    durations = {(name, batch): [] for name, _, batch, _ in cases}
    for _ in tqdm(range(repeats), desc="timing", unit=" round"):
        for name, function, batch, argument in cases:
            started = time.perf_counter()
            call(function, argument)
            durations[(name, batch)].append(time.perf_counter() - started)
    return {case: (statistics.median(times), min(times)) for case, times in durations.items()}


def python_decoders(model, args):
    """name -> `tf.function(source_ids) -> dict`, each forcing `args.output_tokens` tokens."""
    forced = dict(max_decoding_length=args.output_tokens, min_length=args.output_tokens)
    ids_spec = [tf.TensorSpec([None, None], tf.int32)]
    return {
        NAIVE: tf.function(
            lambda ids: naive_greedy_decode(model, ids, START_ID, END_ID, **forced)["tokens"],
            input_signature=ids_spec,
        ),
        CACHED: tf.function(
            lambda ids: greedy_decode(model, ids, START_ID, END_ID, **forced)["tokens"],
            input_signature=ids_spec,
        ),
        CACHED_XLA: tf.function(
            lambda ids: greedy_decode(model, ids, START_ID, END_ID, jit_compile=True, **forced)[
                "tokens"
            ],
            input_signature=ids_spec,
        ),
        BEAM.format(beam=args.beam_width): tf.function(
            lambda ids: beam_search_decode(
                model,
                ids,
                START_ID,
                END_ID,
                beam_width=args.beam_width,
                with_alignment=False,
                **forced,
            )["tokens"],
            input_signature=ids_spec,
        ),
        BEAM_ALIGNED.format(beam=args.beam_width): tf.function(
            lambda ids: beam_search_decode(
                model, ids, START_ID, END_ID, beam_width=args.beam_width, **forced
            )["tokens"],
            input_signature=ids_spec,
        ),
    }


def step_kernels(model):
    """The kernels a cached decoding step multiplies by, in order, grouped by shared input.

    Per decoder layer: the self-attention query, key and value projections (one group: they
    read the same input), its output projection, the cross-attention query and output
    projections (its keys and values are projected once, before the loop), the two
    feed-forward layers; then the output layer.
    """
    weights = model.named_weights()
    groups = []
    for layer in weights["decoder"]["layers"]:
        self_attention, cross_attention = (
            layer["self_attention"],
            layer["encoder_decoder_attention"],
        )
        groups.append([self_attention["W_Q"], self_attention["W_K"], self_attention["W_V"]])
        groups += [[self_attention["W_O"]], [cross_attention["W_Q"]], [cross_attention["W_O"]]]
        groups += [[layer["feed_forward"]["W_1"]], [layer["feed_forward"]["W_2"]]]
    return groups + [[weights["pre_softmax_linear"]["W"]]]


def matmul_floor(model, steps, rows_per_sentence=1, jit_compile=True):
    """`tf.function(source_ids)`: `steps` rounds of only the matrix products of a cached decoding
    step (`step_kernels`), on the model's own weights, compiled with XLA (or not, as
    `jit_compile` says): what a step costs at the least, since it reads every one of those
    weights once. Attention over the cache, layer norms, biases, softmaxes and the token choice
    are left out. `rows_per_sentence`: the rows a sentence decodes, its beam width in beam search.
    """
    *hidden_groups, (output_kernel,) = step_kernels(model)

    def step(index, x):
        for group in hidden_groups:  # Q, K and V are summed, so none is optimized away.
            x = tf.add_n([tf.matmul(x, kernel) for kernel in group])
        logits = tf.matmul(x, output_kernel)
        # The next round depends on these logits, so none is skipped; normalized to stay finite.
        x += 1e-30 * tf.reduce_max(logits, axis=-1, keepdims=True)
        return index + 1, tf.math.l2_normalize(x, axis=-1)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], jit_compile=jit_compile)
    def floor(ids):
        start = tf.ones([tf.shape(ids)[0] * rows_per_sentence, model.d_model])
        return tf.while_loop(lambda i, x: i < steps, step, (0, start))[1]

    return floor


def bfloat16_copy(model, args):
    """`model` computing in bfloat16 as `inference.export --compute_dtype bfloat16` exports it
    (weights stored in bfloat16, `model.precision`), with the same weights."""
    copy = build_model(args, dtype=COMPUTE_DTYPES["bfloat16"])
    copy.set_weights(model.get_weights())
    return copy


def export_benchmark_model(
    model, tokenizer, args, export_base, jit_compile=False, xla_max_batch=None
):
    options = export.DecodingOptions(
        beam_width=args.beam_width,
        max_length_ratio=0.0,
        max_length_offset=args.output_tokens,
        jit_compile=jit_compile,
        xla_max_batch=xla_max_batch,
    )
    name = f"bench-{model.compute_dtype}" + ("-xla" if jit_compile else "")
    name += "" if xla_max_batch is None else f"-upto{xla_max_batch}"
    return export.export_translator(model, tokenizer, tokenizer, export_base, name, options)


class SessionSignatures:
    """An exported version loaded as the model server loads it (`serving.model_server.servable`:
    its MetaGraphDef imported into a `tf.compat.v1.Session`, the variables restored and the init
    op run, as TF's SavedModel loader and so TF Serving do); a call is one `Session.run` of a
    signature's tensors.

    Args:
        export_dir: a version directory written by `inference.export`.
        threads: the Session's intra-op and inter-op threads (0: TensorFlow's choice).
    """

    def __init__(self, export_dir, threads=0):
        import tensorflow_text  # noqa: F401  (the exported tokenizer's ops)

        config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads
        )
        meta_graph = read_meta_graph(export_dir, [tf.saved_model.SERVING])
        self._session = load_session(export_dir, meta_graph, config=config)
        self._signatures = meta_graph.signature_def
        self._export_dir = export_dir

    def __call__(self, signature_name, texts, **run_arguments):
        """`texts`: list of str → `{output name: NumPy array}`; `run_arguments` go to
        `Session.run` (`options`, `run_metadata`)."""
        feed = np.array([text.encode("utf-8") for text in texts], dtype=object)
        return self._run(signature_name, {TEXT_INPUT: feed}, **run_arguments)

    def replay_warmup(self):
        """Runs the export's warmup requests (`assets.extra/tf_serving_warmup_requests`), as TF
        Serving does before it serves a version; returns how many it ran. Where a product's
        first call decides how its weights stay packed (`TF_ONEDNN_ASSUME_FROZEN_WEIGHTS`),
        a server's first calls are these. (The local server's `run_warmup` replays them on its
        own servable, through its request checks; this is the plain Session the bench times.)"""
        requests = read_warmup_requests(self._export_dir)
        for request in requests:
            inputs = {alias: tf.make_ndarray(proto) for alias, proto in request.inputs.items()}
            signature = request.model_spec.signature_name
            self._run(signature or tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY, inputs)
        return len(requests)

    def _run(self, signature_name, inputs, **run_arguments):
        signature = self._signatures[signature_name]
        fetches = {name: info.name for name, info in signature.outputs.items()}
        feed = {signature.inputs[alias].name: value for alias, value in inputs.items()}
        return self._session.run(fetches, feed, **run_arguments)


class SessionWorker:
    """`SessionSignatures` of one export in a worker process of its own (spawned, so it shares
    no TensorFlow state with this one), called as `SessionSignatures` is: each call sends the
    request and waits for the outputs.

    With the four exports' Sessions in one process, their interleaved rounds timed the plain
    graph 1.2–1.4× (and in full `make bench-decode` runs 2–3×) slower than the same export
    alone in a fresh process; a raised ONEDNN_PRIMITIVE_CACHE_CAPACITY did not change that
    (docs/benchmark-log.md, "Session workers in bench-decode"). One process per export keeps the
    interleaved rounds of `time_cases` and times each export as if alone. The request's round
    trip (the texts and outputs pickled through a pipe) is timed with it, well under a
    millisecond.

    Args:
        export_dir, threads: as `SessionSignatures`'s; `threads` also sets the worker's
            TensorFlow threads, as `main` sets this process's.
        preload: a shared library the worker's dynamic linker loads first (`LD_PRELOAD`, in
            place of this process's), as for a `tensorflow_model_server` started with it: say
            `libjemalloc.so.2`, whose `malloc` then replaces glibc's (`check_preload`). None:
            the worker inherits this process's `LD_PRELOAD`, if any.
        environment: optional `{name: value}` set in the worker's environment, say
            `{model.dense.FROZEN_WEIGHTS_VARIABLE: "1"}` (serving/DEPLOY.md).
        replay_warmup: whether the worker runs the export's warmup requests once loaded
            (`SessionSignatures.replay_warmup`); `warmup_records` then says how many it ran.

    Use it as a context manager, or `close` it: the worker ends then (or with this process).
    """

    def __init__(self, export_dir, threads=0, preload=None, environment=None, replay_warmup=False):
        context = multiprocessing.get_context("spawn")
        self._connection, worker_end = context.Pipe()
        self._process = context.Process(
            target=_serve_signatures,
            args=(worker_end, export_dir, threads, replay_warmup),
            daemon=True,
        )
        # A spawned worker is a new interpreter started with this process's environment (so is
        # multiprocessing's resource tracker, if this is the first start: preloaded too, and
        # harmless).
        with _environment(**{**(environment or {}), "LD_PRELOAD": preload}):
            self._process.start()
        worker_end.close()
        # The export is loaded and warmed up (or its loader's error is raised here).
        self.warmup_records = self._receive()

    def __call__(self, signature_name, texts):
        self._connection.send((signature_name, list(texts)))
        return self._receive()

    @property
    def pid(self):
        """The worker process's id."""
        return self._process.pid

    def _receive(self):
        succeeded, value = self._connection.recv()
        if not succeeded:
            raise RuntimeError(f"The Session worker failed:\n{value}")
        return value

    def close(self):
        if self._process.is_alive():
            self._connection.send(None)
            self._process.join(timeout=60)
        self._connection.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def bench_session_worker(export_dir, args):
    """The bench's `SessionWorker` for `export_dir`: `args.threads` and `args.preload`, and with
    `--assume_frozen_weights` the variable set and the export's warmup requests replayed first,
    as a TF Serving started with it would run them (the first call decides how each product's
    weights stay packed: serving/DEPLOY.md)."""
    frozen = args.assume_frozen_weights
    return SessionWorker(
        export_dir,
        args.threads,
        args.preload,
        environment={FROZEN_WEIGHTS_VARIABLE: "1"} if frozen else {},
        replay_warmup=frozen,
    )


@contextlib.contextmanager
def _environment(**variables):
    """This process's environment with `variables` set (those given as None left alone), for
    the processes started inside the block."""
    saved = {name: os.environ.get(name) for name in variables}
    try:
        os.environ.update({name: value for name, value in variables.items() if value is not None})
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def check_preload(library):
    """Raises ValueError unless the dynamic linker can preload `library` (a name it finds in
    its search path, or a path): it only warns, and starts the program without it, otherwise."""
    started = subprocess.run(
        [sys.executable, "-c", ""],
        env={**os.environ, "LD_PRELOAD": library},
        capture_output=True,
        text=True,
    )
    if started.returncode != 0 or "LD_PRELOAD" in started.stderr:
        reason = started.stderr.strip().splitlines()[0] if started.stderr.strip() else ""
        raise ValueError(
            f"cannot preload {library!r} ({reason or 'the interpreter failed'}); for jemalloc "
            "on Debian or Ubuntu: apt-get install libjemalloc2"
        )


def _serve_signatures(connection, export_dir, threads, replay_warmup):
    """`SessionWorker`'s process: loads the export (and replays its warmup requests if
    `replay_warmup`), sends `(True, warmup records run)`, then answers `(signature, texts)`
    requests with `(True, outputs)` (or `(False, traceback)`) until it receives None."""
    try:
        if threads:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        signatures = SessionSignatures(export_dir, threads)
        warmup_records = signatures.replay_warmup() if replay_warmup else 0
    except Exception:
        connection.send((False, traceback.format_exc()))
        return
    connection.send((True, warmup_records))
    while (request := connection.recv()) is not None:
        try:
            connection.send((True, signatures(*request)))
        except Exception:
            connection.send((False, traceback.format_exc()))


def mean_output_tokens(signatures, texts):
    """Mean output tokens ([END] included) per sentence, from the `alignments` signature."""
    target_tokens = signatures(ALIGNMENTS_SIGNATURE, texts)[TARGET_TOKENS_OUTPUT]
    return float(np.mean(np.sum(target_tokens != b"", axis=1)))


def ctranslate2_decoders(model, vocab, args, directory):
    """The model converted by `inference.export_ctranslate2` into `directory`, float32 and int8.

    Returns:
        `{name: function(pieces) -> list of TranslationResult}`, greedy and beam search for each
        precision, forcing exactly `args.output_tokens` tokens, on `args.threads` threads (all
        cores when 0, as TensorFlow's default).
    """
    threads = args.threads or os.cpu_count()
    forced = dict(
        min_decoding_length=args.output_tokens,
        max_decoding_length=args.output_tokens,
        length_penalty=export.DecodingOptions().alpha,
        **decoding_options(vocab),
    )
    decoders = {}
    for precision in CT2_PRECISIONS:
        path = os.path.join(directory, precision)
        TransformerConverter(model, vocab, vocab).convert(path, quantization=precision)
        translator = ctranslate2.Translator(
            path, device="cpu", compute_type=precision, inter_threads=1, intra_threads=threads
        )
        decoders[CT2_GREEDY.format(precision=precision)] = functools.partial(
            translator.translate_batch, beam_size=1, **forced
        )
        decoders[CT2_BEAM.format(precision=precision, beam=args.beam_width)] = functools.partial(
            translator.translate_batch, beam_size=args.beam_width, **forced
        )
    return decoders


def parse_args(argv=None):
    """The benchmark's options (the model's sizes among them), validated."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_decode",
        description="Time naive vs cached greedy vs beam decoding, the exported SavedModel and "
        "CTranslate2 on the same weights at batch 1 and 32 (see the module "
        "docstring).",
    )
    parser.add_argument("--num_layers", type=int, default=3, help="encoder and decoder layers")
    parser.add_argument("--d_model", type=int, default=256)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--dff", type=int, default=1024)
    parser.add_argument("--vocab_size", type=int, default=8000, help="source and target vocab")
    parser.add_argument(
        "--max_positions",
        type=int,
        default=128,
        help="positional encodings (must exceed --output_tokens)",
    )
    parser.add_argument(
        "--source_words",
        type=int,
        default=20,
        help="words per source sentence (one token each, plus [START]/[END])",
    )
    parser.add_argument("--output_tokens", type=int, default=64, help="forced output length")
    decoding_flags.add_decoding_arguments(parser, ("beam_width",), decoding_flags.FIELD_DEFAULTS)
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per case (median)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls per case first")
    parser.add_argument(
        "--export_dir",
        help="time this exported version directory instead of exporting the "
        "random-weight model (its output lengths are reported as they come)",
    )
    parser.add_argument(
        "--output",
        help="write the results as the 'Decoding' section of "
        "this Markdown file (created if missing)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="TensorFlow intra-op and inter-op threads (default 0: TensorFlow's "
        "choice, one per core); 1 steadies timings on a machine whose "
        "cores other processes keep busy",
    )
    parser.add_argument(
        "--preload",
        metavar="LIBRARY",
        help="a shared library preloaded (LD_PRELOAD) into every SavedModel's Session worker, "
        "as into a tensorflow_model_server started with it: libjemalloc.so.2 serves the "
        "--jit_compile --xla_max_batch exports' plain-graph calls from jemalloc instead of "
        "glibc's malloc (serving/DEPLOY.md, XLA); CTranslate2 and the in-process decoders "
        "keep this process's allocator",
    )
    parser.add_argument(
        "--assume_frozen_weights",
        action="store_true",
        help=f"start every SavedModel's Session worker with {FROZEN_WEIGHTS_VARIABLE}=1, as a "
        "tensorflow_model_server started with it: the decoding step's fused products keep their "
        "weights packed between calls (model/dense.py, serving/DEPLOY.md); each worker then "
        "replays the export's warmup requests before anything else, as such a server does, "
        "since the first call decides how the weights stay packed (without this flag they "
        "replay none)",
    )
    parser.add_argument(
        "--compute_dtypes",
        nargs="+",
        choices=COMPUTE_DTYPES,
        default=list(COMPUTE_DTYPES),
        help="which exports to time besides the float32 plain one (default: all): "
        "`--compute_dtypes float32` skips the bfloat16 exports, which a process with "
        "ONEDNN_MAX_CPU_ISA=AVX2 (an AVX2-only CPU's kernels on a newer CPU) cannot run",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.max_positions <= args.output_tokens:
        parser.error("--max_positions must be larger than --output_tokens.")
    if args.preload:
        try:
            check_preload(args.preload)
        except ValueError as error:
            parser.error(f"--preload: {error}")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    command = shlex.join(
        ["python", "-m", "benchmarks.bench_decode", *(argv if argv is not None else sys.argv[1:])]
    )
    load_before = os.getloadavg()
    keras.utils.set_random_seed(args.seed)

    vocab = synthetic_vocab(args.vocab_size)
    tokenizer = WordPieceTokenizer(vocab)
    model = build_model(args)
    max_batch = max(args.batch_sizes)
    texts = random_sentences(vocab, max_batch, args.source_words, args.seed)
    source_ids = tf.cast(tokenizer.tokenize(tf.constant(texts)).to_tensor(), tf.int32)

    # (name, function, batch, input): in-graph decoders take token ids, SavedModel signatures
    # text, CTranslate2 subword pieces.
    decoders = python_decoders(model, args)
    decoders[FLOOR] = matmul_floor(model, args.output_tokens)
    beam_rows = dict(steps=args.output_tokens, rows_per_sentence=args.beam_width)
    decoders[BEAM_FLOOR.format(beam=args.beam_width)] = matmul_floor(model, **beam_rows)
    decoders[BEAM_FLOOR_PLAIN.format(beam=args.beam_width)] = matmul_floor(
        model, **beam_rows, jit_compile=False
    )
    cases = [
        (name, decoder, batch, source_ids[:batch])
        for name, decoder in decoders.items()
        for batch in args.batch_sizes
    ]
    with tempfile.TemporaryDirectory() as work_dir, contextlib.ExitStack() as workers:
        if args.export_dir:
            export_dir, served_texts = args.export_dir, list(SPANISH_SENTENCES)
        else:
            export_dir = export_benchmark_model(model, tokenizer, args, work_dir)
            served_texts = texts
            # CTranslate2 needs the weights: not timed against an outside --export_dir.
            pieces = source_pieces(tokenizer, texts)
            for name, decoder in ctranslate2_decoders(model, vocab, args, work_dir).items():
                lengths = {len(result.hypotheses[0]) for result in decoder(pieces)}
                if lengths != {args.output_tokens}:
                    raise RuntimeError(
                        f"{name} produced {sorted(lengths)} tokens per sentence, "
                        f"not the forced {args.output_tokens}."
                    )
                cases += [(name, decoder, batch, pieces[:batch]) for batch in args.batch_sizes]

        signatures = workers.enter_context(bench_session_worker(export_dir, args))
        served_texts = [served_texts[i % len(served_texts)] for i in range(max_batch)]
        if not args.export_dir:
            # What TF Serving runs with --xla_cpu_compilation_enabled, and the bfloat16 exports.
            other_exports = []
            if "float32" in args.compute_dtypes:
                other_exports += [
                    (model, True, None, (SAVED_XLA_GREEDY, SAVED_XLA_BEAM)),
                    (model, True, HYBRID_MAX_BATCH, (SAVED_HYBRID_GREEDY, SAVED_HYBRID_BEAM)),
                ]
            if "bfloat16" in args.compute_dtypes:
                bfloat16_model = bfloat16_copy(model, args)
                other_exports += [
                    (bfloat16_model, False, None, (SAVED_BF16_GREEDY, SAVED_BF16_BEAM)),
                    (bfloat16_model, True, None, (SAVED_BF16_XLA_GREEDY, SAVED_BF16_XLA_BEAM)),
                    (
                        bfloat16_model,
                        True,
                        HYBRID_MAX_BATCH,
                        (SAVED_BF16_HYBRID_GREEDY, SAVED_BF16_HYBRID_BEAM),
                    ),
                ]
            for exported_model, jit_compile, xla_max_batch, labels in other_exports:
                other_signatures = workers.enter_context(
                    bench_session_worker(
                        export_benchmark_model(
                            exported_model, tokenizer, args, work_dir, jit_compile, xla_max_batch
                        ),
                        args,
                    )
                )
                cases += [
                    (
                        label.format(beam=args.beam_width),
                        functools.partial(other_signatures, signature),
                        batch,
                        served_texts[:batch],
                    )
                    for signature, label in zip((GREEDY_SIGNATURE, BEAM_SIGNATURE), labels)
                    for batch in args.batch_sizes
                ]
        output_tokens = mean_output_tokens(signatures, served_texts)
        if not args.export_dir and output_tokens != args.output_tokens:
            raise RuntimeError(
                f"The export produced {output_tokens} tokens per sentence, "
                f"not the forced {args.output_tokens}."
            )
        for signature, label in (
            (GREEDY_SIGNATURE, SAVED_GREEDY),
            (BEAM_SIGNATURE, SAVED_BEAM),
        ):
            cases += [
                (
                    label.format(beam=args.beam_width),
                    functools.partial(signatures, signature),
                    batch,
                    served_texts[:batch],
                )
                for batch in args.batch_sizes
            ]

        results = time_cases(cases, args.repeats, args.warmup)

    step_weight_bytes = sum(
        int(np.prod(kernel.shape)) * np.dtype(kernel.dtype).itemsize
        for group in step_kernels(model)
        for kernel in group
    )
    body = report(
        args, command, results, output_tokens, step_weight_bytes, load_before, os.getloadavg()
    )
    print(body)
    if args.output:
        write_section(args.output, SECTION_TITLE, body)


def side_by_side(args, results):
    """Markdown lines: greedy and beam search at each batch size, CTranslate2's rows first, then
    each project decoder's time and its multiple of CTranslate2 float32's and int8's."""
    beam = args.beam_width
    columns = [(kind, batch) for kind in ("greedy", "beam") for batch in args.batch_sizes]
    ct2 = {
        precision: {
            "greedy": CT2_GREEDY.format(precision=precision),
            "beam": CT2_BEAM.format(precision=precision, beam=beam),
        }
        for precision in CT2_PRECISIONS
    }
    rows = [
        (f"CTranslate2 {ctranslate2.__version__}, {precision}", names)
        for precision, names in ct2.items()
    ]
    rows += [
        (
            "exported SavedModel, TF1 Session (what TF Serving runs)",
            {"greedy": SAVED_GREEDY, "beam": SAVED_BEAM.format(beam=beam)},
        ),
        (
            "exported with --jit_compile, TF1 Session (TF Serving with "
            "--xla_cpu_compilation_enabled)",
            {"greedy": SAVED_XLA_GREEDY, "beam": SAVED_XLA_BEAM.format(beam=beam)},
        ),
        (
            "exported with --compute_dtype bfloat16, TF1 Session",
            {"greedy": SAVED_BF16_GREEDY, "beam": SAVED_BF16_BEAM.format(beam=beam)},
        ),
        (
            "exported with --compute_dtype bfloat16 --jit_compile, TF1 Session",
            {"greedy": SAVED_BF16_XLA_GREEDY, "beam": SAVED_BF16_XLA_BEAM.format(beam=beam)},
        ),
        (
            f"exported with --jit_compile --xla_max_batch {HYBRID_MAX_BATCH}, TF1 Session",
            {"greedy": SAVED_HYBRID_GREEDY, "beam": SAVED_HYBRID_BEAM.format(beam=beam)},
        ),
        (
            "exported with --compute_dtype bfloat16 --jit_compile --xla_max_batch "
            f"{HYBRID_MAX_BATCH}, TF1 Session",
            {
                "greedy": SAVED_BF16_HYBRID_GREEDY,
                "beam": SAVED_BF16_HYBRID_BEAM.format(beam=beam),
            },
        ),
        ("in-process, plain graph", {"greedy": CACHED, "beam": BEAM.format(beam=beam)}),
        ("in-process, XLA", {"greedy": CACHED_XLA}),
    ]

    def milliseconds(name, batch, statistic=MEDIAN):
        return 1000 * results[(name, batch)][statistic]

    lines = [
        "| decoder | "
        + " | ".join(
            f"{'greedy' if kind == 'greedy' else f'beam {beam}'} b={batch}"
            for kind, batch in columns
        )
        + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    timed = {name for name, _ in results}
    for label, names in rows:
        if not set(names.values()) <= timed:
            continue  # an export left out by --compute_dtypes
        cells = []
        for kind, batch in columns:
            if kind not in names:
                cells.append("–")
                continue
            ours = milliseconds(names[kind], batch)
            if label.startswith("CTranslate2"):
                cells.append(f"{ours:,.0f} ms")
            else:
                multiples = " / ".join(
                    f"{ours / milliseconds(ct2[precision][kind], batch):.2f}×"
                    for precision in CT2_PRECISIONS
                )
                cells.append(f"{ours:,.0f} ms ({multiples})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    return "\n".join(lines), "\n".join(served_goals(args, milliseconds, timed))


def served_goals(args, milliseconds, timed):
    """Markdown lines: issue #25's goals, each served time as a multiple of CTranslate2's.

    A goal is judged on the medians; the multiple of the fastest calls follows it, since at
    batch 1 a median can sit far above its fastest call (CTranslate2's most of all).

    Args:
        milliseconds: `(case name, batch, statistic=MEDIAN) -> ms per batch`, `statistic`
            `MEDIAN` or `FASTEST` (a KeyError for a case not timed).
        timed: the names of the cases timed; a goal of an export not among them is left out.
    """
    beam = args.beam_width
    small, large = min(args.batch_sizes), max(args.batch_sizes)
    reference = {
        (kind, precision): (CT2_GREEDY if kind == "greedy" else CT2_BEAM).format(
            precision=precision, beam=beam
        )
        for kind in ("greedy", "beam")
        for precision in CT2_PRECISIONS
    }

    def multiple(name, batch, kind, precision="float32", statistic=MEDIAN):
        return milliseconds(name, batch, statistic) / milliseconds(
            reference[(kind, precision)], batch, statistic
        )

    def goal(name, kind, limits):
        if name not in timed:
            return None  # an export left out by --compute_dtypes
        parts = []
        for batch, limit in zip((small, large), limits):
            ratio = multiple(name, batch, kind)
            fastest = multiple(name, batch, kind, statistic=FASTEST)
            verdict = "met" if ratio <= limit else "not met"
            parts.append(
                f"batch {batch} **{ratio:.2f}×** (fastest calls {fastest:.2f}×; "
                f"goal ≤ {limit}: {verdict})"
            )
        return f"- {name}, against CTranslate2 float32: " + "; ".join(parts) + "."

    plain_beam, xla_beam = SAVED_BEAM.format(beam=beam), SAVED_XLA_BEAM.format(beam=beam)
    hybrid = f"--jit_compile --xla_max_batch {HYBRID_MAX_BATCH}"
    lines = [
        goal(plain_beam, "beam", PLAIN_BEAM_GOAL),
        goal(xla_beam, "beam", SERVED_BEAM_GOAL),
        goal(SAVED_XLA_GREEDY, "greedy", COMPILED_GREEDY_GOAL),
        # One export for both batch sizes: XLA at batch 1, the plain graph at 32.
        goal(SAVED_HYBRID_BEAM.format(beam=beam), "beam", SERVED_BEAM_GOAL),
        goal(SAVED_BF16_HYBRID_BEAM.format(beam=beam), "beam", SERVED_BEAM_GOAL),
        # The bfloat16 plain export against the served beam goal (a plain graph, it has the
        # plain graph's too), the bfloat16 hybrid against the compiled greedy goal.
        goal(SAVED_BF16_BEAM.format(beam=beam), "beam", SERVED_BEAM_GOAL),
        goal(SAVED_BF16_HYBRID_GREEDY, "greedy", COMPILED_GREEDY_GOAL),
    ]
    lines = [line for line in lines if line]
    served = {
        "greedy": {
            SAVED_GREEDY: "plain",
            SAVED_XLA_GREEDY: "--jit_compile",
            SAVED_BF16_GREEDY: "bfloat16",
            SAVED_BF16_XLA_GREEDY: "bfloat16 --jit_compile",
            SAVED_HYBRID_GREEDY: hybrid,
            SAVED_BF16_HYBRID_GREEDY: f"bfloat16 {hybrid}",
        },
        "beam": {
            plain_beam: "plain",
            xla_beam: "--jit_compile",
            SAVED_BF16_BEAM.format(beam=beam): "bfloat16",
            SAVED_BF16_XLA_BEAM.format(beam=beam): "bfloat16 --jit_compile",
            SAVED_HYBRID_BEAM.format(beam=beam): hybrid,
            SAVED_BF16_HYBRID_BEAM.format(beam=beam): f"bfloat16 {hybrid}",
        },
    }
    best = []
    for kind, names in served.items():
        for batch in (small, large):
            name = min(
                (name for name in names if name in timed),
                key=lambda name: milliseconds(name, batch),
            )
            best.append(
                f"{kind} batch {batch} **{multiple(name, batch, kind, 'int8'):.2f}×** "
                f"({names[name]})"
            )
    lines.append("- The fastest served graph against CTranslate2 int8: " + "; ".join(best) + ".")
    # What the goals leave for the rest of a step: the matrix products alone, as a multiple of
    # CTranslate2 float32's whole decoding.
    floors = [
        (FLOOR, "greedy", "greedy, XLA"),
        (BEAM_FLOOR.format(beam=beam), "beam", f"beam {beam}, XLA"),
        (BEAM_FLOOR_PLAIN.format(beam=beam), "beam", f"beam {beam}, plain graph"),
    ]
    parts = [
        f"{label} "
        + " and ".join(f"{multiple(name, batch, kind):.2f}×" for batch in (small, large))
        for name, kind, label in floors
    ]
    lines.append(
        f"- The step's matrix products alone (`matmul_floor`), at batch {small} and {large}, "
        "against CTranslate2 float32's whole decoding: " + "; ".join(parts) + "."
    )
    return lines


def report(args, command, results, served_tokens, step_weight_bytes, load_before, load_after):
    """The Markdown section: setup, the table and the goals.

    Args:
        results: `{(case name, batch): (median seconds, fastest seconds)}` per call.
        served_tokens: mean output tokens per sentence of the SavedModel rows.
        step_weight_bytes: the size of `step_kernels`.
    """
    saved_names = {
        SAVED_GREEDY,
        SAVED_XLA_GREEDY,
        SAVED_BEAM.format(beam=args.beam_width),
        SAVED_XLA_BEAM.format(beam=args.beam_width),
    }
    rows = []
    for (name, batch), (median, fastest) in results.items():
        tokens = served_tokens if name in saved_names else args.output_tokens
        rows.append(
            f"| {name} | {batch} | {batch / median:,.2f} | {1000 * median / batch:,.1f} "
            f"| {batch * tokens / median:,.0f} | {1000 * median:,.0f} "
            f"({1000 * fastest:,.0f}) |"
        )

    def sentences_per_second(name, batch):
        median, _ = results[(name, batch)]
        return batch / median

    small, large = min(args.batch_sizes), max(args.batch_sizes)
    step_ms = {
        name: 1000 * results[(name, small)][MEDIAN] / args.output_tokens
        for name in (CACHED_XLA, FLOOR)
    }
    notes = [
        f"- {FLOOR} at batch {small}: {step_ms[FLOOR]:.2f} ms per step, so the cached XLA step "
        f"is {step_ms[CACHED_XLA] / step_ms[FLOOR]:.2f}× its matmuls, which read "
        f"{step_weight_bytes / 1e6:.0f} MB of float32 weights per step."
    ]
    if large != small:
        for name in (CACHED, CACHED_XLA, BEAM.format(beam=args.beam_width), NAIVE, SAVED_GREEDY):
            ratio = sentences_per_second(name, large) / sentences_per_second(name, small)
            goal = " (goal ≥ 8× for 32 vs 1)" if name == CACHED else ""
            notes.append(
                f"- {name}: batch {large} vs batch {small}: **{ratio:.1f}×** sentences/s{goal}."
            )
    comparison = ""
    if (CT2_GREEDY.format(precision=CT2_PRECISIONS[0]), small) in results:
        table, goals = side_by_side(args, results)
        comparison = f"""
Side by side (ms per batch, median; in parentheses the time as a multiple of CTranslate2
float32's / int8's, so below 1× is faster):

{table}

{goals}
"""
    exported = (
        (
            f"the export at `{args.export_dir}` ({served_tokens:.1f} output tokens per "
            "sentence on average)"
        )
        if args.export_dir
        else (
            f"the same weights exported by `inference.export` (tokenization and detokenization in the "
            f"graph; {served_tokens:.0f} tokens forced through the [END] bias and "
            "max_decoding_length)"
        )
    )
    threads = args.threads or os.cpu_count()
    worker_note = f", in processes started with LD_PRELOAD={args.preload}" if args.preload else ""
    if os.environ.get("LD_PRELOAD"):
        worker_note += f" (this process, CTranslate2's: LD_PRELOAD={os.environ['LD_PRELOAD']})"
    if args.assume_frozen_weights:
        worker_note += (
            f", with {FROZEN_WEIGHTS_VARIABLE}=1 in their environment and the export's warmup "
            "requests replayed first"
        )
    return f"""Command: `{command}`
Machine: {machine_description()}; CTranslate2 {ctranslate2.__version__}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after (other processes share the cores).
Model: {args.num_layers}+{args.num_layers} layers, d_model {args.d_model}, {args.num_heads} heads, dff {args.dff}, vocab {args.vocab_size}, random weights; sources of {args.source_words + 2} tokens; exactly {args.output_tokens} output tokens per sentence (min_length = max_decoding_length). TensorFlow threads (intra-op, inter-op): {args.threads or "default (one per core)"}; CTranslate2: {threads} intra-op threads, one batch at a time. Every decoder is warmed up {args.warmup}×, then timed {args.repeats}× in interleaved rounds (median; fastest in parentheses). SavedModel rows: {exported}, loaded into a TF1 Session by the model server's loader, as TF Serving loads it{worker_note}. CTranslate2 rows: the same weights converted by `inference.export_ctranslate2` (float32, and int8 weights), `translate_batch` on the same subword pieces, length penalty {export.DecodingOptions().alpha} (no effect on forced lengths).

| decoder | batch | sentences/s | ms/sentence | output tokens/s | ms/batch |
| --- | ---: | ---: | ---: | ---: | ---: |
{chr(10).join(rows)}
{comparison}
{chr(10).join(notes)}
"""


if __name__ == "__main__":
    main()
