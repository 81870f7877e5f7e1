"""A run's translation path traced once and kept on disk, so that a later process loads it
instead of tracing it again (`load_or_trace`; `translate-text`, `training.evaluate` and
`translate-score` start with it, `--no_cache` (`add_no_cache_argument`) to trace and keep
nothing).

Tracing `Translator.greedy` (or `beam_search`, `n_best`) into a graph is most of what a fresh
process spends before its first translation, after loading the model (BENCHMARKS.md, "First run:
translate-text from a cold start"). The traced function is written once as a SavedModel holding
only that signature, the run's weights and its tokenizers' tables, and loaded by later processes
with `tf.saved_model.load`, which neither builds the Keras model nor runs the Python that traced
it. The export TF Serving serves (`inference.export`) is another thing and stays as it is.

An entry is named by a SHA-256 over everything the traced graph depends on, so a stale one is
never used: the bytes of the run's config, its tokenizer directory and the weights
`artifacts.select_weights` picks; the signature and every `DecodingOptions` field; the source of
the packages the graph is traced from (`model`, `run_directory`, `common`); and the versions of
TensorFlow, Keras, keras-hub and tensorflow-text. Anything else gives another name, and a new
entry, traced anew.

Where: `<run_dir>/.traced/` (`TRACED_DIR`), or, where the run directory cannot be written (a
read-only checkout, another user's run), `$XDG_CACHE_HOME/attention-translate/traced/` (default
`~/.cache/...`); without either, the traced function is used and nothing is kept. An entry is
written into a staging directory beside its place and renamed into it, so a reader sees a whole
entry or none, and two processes writing the same entry leave one. Writing an entry deletes the
entries of the same run whose files, code or libraries have changed since (they can never be
used again); those of other decoding settings stay.
"""

import dataclasses
import hashlib
import importlib.metadata
import json
import logging
import os
import pathlib
import shutil
import time
import uuid

import tensorflow as tf

from common.serving_contract import (
    BEAM_SIGNATURE,
    GREEDY_SIGNATURE,
    N_BEST_SIGNATURE,
    SIGNATURES_BY_NAME,
    TEXT_INPUT,
)
from model.translator import Translator, input_signature, traced
from run_directory import artifacts

logger = logging.getLogger(__name__)

TRACED_DIR = ".traced"
# Under $XDG_CACHE_HOME (default ~/.cache): where entries go when the run directory is read-only.
USER_CACHE_PATH = os.path.join("attention-translate", "traced")
ENTRY_INFO_FILE = "traced.json"
# Bumped when an entry's layout changes, so that older entries are not read as new ones.
ENTRY_FORMAT = 1
# The packages whose source the traced graph is built from: a change to any of them may change
# the graph, so it names a new entry.
TRACED_PACKAGES = ("model", "run_directory", "common")
LIBRARIES = ("tensorflow", "keras", "keras-hub", "tensorflow-text")
REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
# A staging directory this old was left by a process that died while writing it.
STALE_STAGING_SECONDS = 3600
_STAGING_PREFIX = ".staging-"


def signature_name(beam_width=1, num_hypotheses=None):
    """The signature a command that picks it by beam width translates with: `n_best` when it
    asks for `num_hypotheses`, else `serving_default` (greedy) at width 1, `beam_search` above."""
    if num_hypotheses is not None:
        return N_BEST_SIGNATURE
    return GREEDY_SIGNATURE if beam_width == 1 else BEAM_SIGNATURE


def _digest_files(digest, paths, root):
    for path in paths:
        digest.update(os.path.relpath(path, root).encode("utf-8") + b"\0")
        with open(path, "rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())


def run_files(run_dir):
    """The files of `run_dir` that the traced graph is built from: its config, every file of its
    tokenizer directory, and the weights `artifacts.select_weights` picks (`model.keras`, or a
    checkpoint's index and data files), sorted."""
    checkpoint, _ = artifacts.select_weights(run_dir)
    if checkpoint is None:
        weights = [os.path.join(run_dir, artifacts.MODEL_FILE)]
    else:
        directory, prefix = os.path.split(checkpoint)
        weights = [
            os.path.join(directory, name)
            for name in os.listdir(directory)
            if name.startswith(prefix + ".")
        ]
    tokenizer_dir = os.path.join(run_dir, artifacts.TOKENIZER_DIR)
    tokenizer = [
        os.path.join(root, name) for root, _, names in os.walk(tokenizer_dir) for name in names
    ]
    return sorted([os.path.join(run_dir, artifacts.CONFIG_FILE), *tokenizer, *weights])


def code_digest(root=REPO_ROOT):
    """SHA-256 of the source of `TRACED_PACKAGES` under `root` (every .py file, with its path
    from `root`)."""
    root = pathlib.Path(root)
    digest = hashlib.sha256()
    paths = sorted(
        str(path) for package in TRACED_PACKAGES for path in (root / package).rglob("*.py")
    )
    _digest_files(digest, paths, str(root))
    return digest.hexdigest()


def run_files_digest(run_dir):
    """SHA-256 (hex) of the `run_files` of `run_dir`, each with its path from `run_dir`: it
    changes when the run's config, tokenizer or the weights `artifacts.select_weights` picks
    change, or when it picks others."""
    run_digest = hashlib.sha256()
    _digest_files(run_digest, run_files(run_dir), run_dir)
    return run_digest.hexdigest()


def entry_info(run_dir, name, options):
    """What names an entry: a dict of the parts its key is the hash of (`entry_key`)."""
    return {
        "format": ENTRY_FORMAT,
        "signature": name,
        "options": dataclasses.asdict(options),
        "run_files": run_files_digest(run_dir),
        "code": code_digest(),
        "libraries": {library: importlib.metadata.version(library) for library in LIBRARIES},
        "run_dir": os.path.abspath(run_dir),
    }


def entry_key(info):
    """SHA-256 of `info` without its `run_dir` (a copy of a run may share its entries)."""
    named = {part: value for part, value in info.items() if part != "run_dir"}
    return hashlib.sha256(json.dumps(named, sort_keys=True).encode("utf-8")).hexdigest()


def cache_directories(run_dir):
    """Where entries of `run_dir` are looked for and written, in that order."""
    user_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [os.path.join(run_dir, TRACED_DIR), os.path.join(user_cache, USER_CACHE_PATH)]


def add_no_cache_argument(parser):
    """`--no_cache` on `parser` (an argparse parser) of a command that loads runs through
    `load_or_trace`: `args.no_cache` True traces in the process and keeps nothing."""
    parser.add_argument(
        "--no_cache",
        action="store_true",
        help="a run directory's translation path is traced in this process and not kept "
        f"(default: traced once and kept in <run>/{TRACED_DIR}/, or under "
        f"~/.cache/{USER_CACHE_PATH}/ when the run cannot be written; later starts load it "
        "instead of tracing it again)",
    )


def load_or_trace(run_dir, beam_width=1, cache=True, **overrides):
    """`[batch]` tf.string → the dict of the signature's outputs, for a training run: the
    signature `signature_name` picks, with the run's decoding options and `overrides` in their
    place, through `load_or_trace_signature` (`training.evaluate.run_signature` calls it).

    Raises:
        ValueError: an invalid decoding option.
    """
    options = artifacts.decoding_options(run_dir, beam_width=beam_width, **overrides)
    name = signature_name(beam_width, overrides.get("num_hypotheses"))
    return load_or_trace_signature(run_dir, name, options, cache)


def load_or_trace_signature(run_dir, name, options, cache=True):
    """A `TranslationCall` of the run's signature `name` (any of
    `common.serving_contract.SIGNATURES`: its inputs in order, `[batch]` each, → the dict of its
    outputs) under `options` (a `DecodingOptions`): loaded from a cache entry when one matches,
    else traced (and, with `cache`, written as an entry for the next process)."""
    if not cache:
        function = _trace(run_dir, name, options)[0]
        return TranslationCall(function.get_concrete_function(), _input_names(name))
    info = entry_info(run_dir, name, options)
    entry_name = f"{name}-{entry_key(info)}"
    for directory in cache_directories(run_dir):
        entry = os.path.join(directory, entry_name)
        if os.path.isdir(entry):
            loaded = _load_entry(entry, name)
            if loaded is not None:
                return loaded
    function, module = _trace(run_dir, name, options)
    _keep(function, module, entry_name, info)
    return TranslationCall(function.get_concrete_function(), _input_names(name))


def _keep(function, module, entry_name, info):
    """Writes the entry in the first of `cache_directories` that can be written; warns, and
    writes nothing, where none can."""
    directories = cache_directories(info["run_dir"])
    for directory in directories:
        try:
            write_entry(directory, entry_name, module, function, info)
            return
        except OSError as error:
            logger.info("cannot keep the traced translation in %s: %s", directory, error)
        # Nor must a cache that cannot be written: the translation goes on, traced.
        except Exception as error:
            logger.warning("the traced translation of %s is not kept: %s", info["run_dir"], error)
            return
    logger.warning(
        "the traced translation of %s is not kept: neither %s can be written; the next start "
        "traces it again",
        info["run_dir"],
        " nor ".join(directories),
    )


def start_up_config():
    """The `ConfigProto` a translation graph is optimized with at its first call: TensorFlow's
    graph optimizations (Grappler) as by default, without what costs that call time and
    changes nothing that the graph runs again and again.

    One round of the passes, not two: on the bundle's greedy and beam graphs the second round
    only merged a few more duplicate constants and shape ops, all outside the decoding loop.
    No memory optimizer (swapping and recomputation for accelerators' memory), no layout
    optimizer (for convolutions), no TFG passes (attributes and topological order): on those
    graphs they changed nothing. The first call then optimizes in about half the time, every
    later call runs as fast, and every translation is the same, byte for byte
    (BENCHMARKS.md, "First run: translate-text from a cold start").
    """
    config = tf.compat.v1.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.meta_optimizer_iterations = rewrite.ONE
    rewrite.memory_optimization = rewrite.NO_MEM_OPT
    rewrite.layout_optimizer = rewrite.OFF
    rewrite.disable_tfg_optimizer = True
    return config


class TranslationCall:
    """Calls a traced or loaded signature function (a `ConcreteFunction` of a signature's
    `[batch]` inputs) with tensors of them, in the signature's order (`text` first), optimized
    with `start_up_config`.

    Through the `StatefulPartitionedCall` op, whose `config_proto` holds the config of this
    function's graph optimization alone: the process's own settings
    (`tf.config.optimizer.set_experimental_options`) cover neither the number of rounds nor
    the memory and TFG passes, and would reach every other graph of the process.

    Args:
        function: the `ConcreteFunction`.
        input_names: the signature's inputs, in its order (`Signature.input_names`).
        owner: what must outlive it (a loaded SavedModel owns the variables and tables its
            signatures read: a signature outliving it finds them deleted), or None.
    """

    def __init__(self, function, input_names=(TEXT_INPUT,), owner=None):
        self.function = function
        self.owner = owner
        self._output_types = [output.dtype for output in function.outputs]
        self._config = start_up_config().SerializeToString()
        # The function's own argument order: a traced one takes the signature's order, a
        # loaded signature its inputs sorted by name ("target" before "text").
        self._argument_names = [
            spec.name for spec in tf.nest.flatten(function.structured_input_signature)
        ]
        self._input_names = input_names

    def __call__(self, *inputs):
        by_name = dict(zip(self._input_names, inputs, strict=True))
        outputs = tf.raw_ops.StatefulPartitionedCall(
            args=[
                *(by_name[name] for name in self._argument_names),
                *self.function.captured_inputs,
            ],
            Tout=self._output_types,
            f=self.function,
            config_proto=self._config,
        )
        return tf.nest.pack_sequence_as(self.function.structured_outputs, outputs)


def _input_names(name):
    return SIGNATURES_BY_NAME[name].input_names


def _load_entry(entry, name):
    """The `TranslationCall` of signature `name` of the SavedModel `entry`, or None when it does
    not load (the entry is then deleted, with a warning, so that the caller writes it anew)."""
    import tensorflow_text  # noqa: F401  (registers the tokenizers' ops the graph holds)

    try:
        loaded = tf.saved_model.load(entry)
        return TranslationCall(loaded.signatures[name], _input_names(name), owner=loaded)
    # A cache must not stop the command: whatever a damaged entry raises, it is traced again.
    except Exception as error:
        logger.warning("ignoring the traced translation %s, which does not load: %s", entry, error)
        shutil.rmtree(entry, ignore_errors=True)
        return None


def _trace(run_dir, name, options):
    """`(function, module)`: the `Translator` method of signature `name` traced for its
    `[None]` inputs (`input_signature`), and a `tf.Module` tracking what it reads
    (`traced_resources`)."""
    model, source_tokenizer, target_tokenizer, _ = artifacts.load_trained(run_dir)
    translator = Translator(model, source_tokenizer, target_tokenizer, options)
    method = getattr(translator, SIGNATURES_BY_NAME[name].method)
    function = traced(method, *input_signature(name))
    function.get_concrete_function()
    module = tf.Module()
    module.resources = traced_resources(model, source_tokenizer, target_tokenizer)
    return function, module


def traced_resources(model, *tokenizers):
    """What a translation graph reads besides its input: the tf.Variables under the model's
    Keras variables, and the resources (SentencePiece models, lookup tables) that the tokenizers
    and their submodules hold.

    Not the Keras model nor the tokenizers themselves: saving those walked every layer, and
    kept every function they had traced, which the entry's load then rebuilt, for the same
    variables and tables.
    """
    resources = [variable.value for variable in model.variables]
    for tokenizer in tokenizers:
        for module in (tokenizer, *tokenizer.submodules):
            resources.extend(
                value
                for value in vars(module).values()
                if isinstance(value, tf.saved_model.experimental.TrackableResource)
                and not any(value is known for known in resources)
            )
    return resources


def write_entry(directory, entry_name, module, function, info):
    """Writes `function` (a traced `tf.function`) as the SavedModel `<directory>/<entry_name>/`,
    its signature `info["signature"]`, with what `module` tracks and `info` as
    `ENTRY_INFO_FILE`, atomically; then deletes the entries of `directory` that `info` makes
    stale (`stale_entries`).

    Raises:
        OSError: `directory` cannot be created or written.
    """
    os.makedirs(directory, exist_ok=True)
    # Beside the entry, on the same file system, so that the rename below is atomic; a plain
    # mkdir (not mkdtemp's 0700) leaves it readable by whom the umask allows, as the run is.
    staging = os.path.join(directory, f"{_STAGING_PREFIX}{uuid.uuid4().hex}")
    os.mkdir(staging)
    try:
        tf.saved_model.save(
            module,
            staging,
            signatures={info["signature"]: function.get_concrete_function()},
            # Loading restores the variables without the save and restore functions.
            options=tf.saved_model.SaveOptions(experimental_skip_saver=True),
        )
        with open(os.path.join(staging, ENTRY_INFO_FILE), "w", encoding="utf-8") as handle:
            json.dump(info, handle, indent=2, sort_keys=True)
        entry = os.path.join(directory, entry_name)
        try:
            os.rename(staging, entry)
        except OSError:
            # Another process wrote the same entry first (a rename does not replace a directory
            # that holds files): theirs is as good.
            if not os.path.isdir(entry):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for stale in stale_entries(directory, info):
        shutil.rmtree(stale, ignore_errors=True)


def stale_entries(directory, info):
    """The paths in `directory` that no process will load again: the entries of the run of
    `info` (every entry, in the run's own `TRACED_DIR`; those `info["run_dir"]` wrote,
    elsewhere) traced from other run files, code or libraries, and staging directories left
    for `STALE_STAGING_SECONDS` (their writer died)."""
    own = os.path.abspath(directory) == os.path.join(info["run_dir"], TRACED_DIR)
    stale = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.startswith(_STAGING_PREFIX):
            if time.time() - os.path.getmtime(path) > STALE_STAGING_SECONDS:
                stale.append(path)
            continue
        try:
            with open(os.path.join(path, ENTRY_INFO_FILE), encoding="utf-8") as handle:
                other = json.load(handle)
        except (OSError, ValueError):
            continue
        if (own or other.get("run_dir") == info["run_dir"]) and any(
            other.get(part) != info[part] for part in ("format", "run_files", "code", "libraries")
        ):
            stale.append(path)
    return stale
