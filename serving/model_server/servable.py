"""One loaded version of a SavedModel: its SignatureDefs and runnable signatures.

TF Serving serves the SignatureDefs stored in the SavedModel's MetaGraphDef
(that is what GetModelMetadata returns and what Predict validates against) and
runs them as it does: the MetaGraphDef is imported into a `tf.compat.v1.Session`
(variables restored, init op run with the asset paths), and a call is one
`Session.run` of the signature's tensors. A request's deadline becomes the run's
`RunOptions.timeout_in_ms`, so TensorFlow stops the step at the deadline instead
of finishing work nobody waits for.
"""

import ctypes
import functools
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import grpc
import numpy as np
import tensorflow as tf

# Registers the tensorflow-text ops (NormalizeUTF8, FastWordpiece, ...) that the translator's
# graph uses; tensorflow_model_server links the same ops into its binary.
import tensorflow_text  # noqa: F401
from google.protobuf import message, text_format
from tensorflow.core.framework import tensor_shape_pb2, types_pb2
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from common import cpu
from common.serving_contract import MAX_WARMUP_RECORDS, WARMUP_PATH
from serving.model_server import errors
from serving.model_server.metrics import ServerMetrics

logger = logging.getLogger("serving.servable")

SAVED_MODEL_FILENAMES = ("saved_model.pb", "saved_model.pbtxt")
# What TF Serving answers (INTERNAL) when a graph reaches an XLA-compiled function and the server
# runs without --xla_cpu_compilation_enabled (TF's DisableXlaCompilation()).
XLA_DISABLED_MESSAGE = "XLA compilation disabled"
_XLA_MUST_COMPILE = "_XlaMustCompile"
# The signature holding a TF2 SavedModel's init op (TF's INIT_OP_SIGNATURE_KEY): not a function.
INIT_OP_SIGNATURE_KEY = "__saved_model_init_op"


def is_complete_version_dir(path: str) -> bool:
    """True when a version directory holds a SavedModel proto (a finished export), or cannot
    be read: its load then fails and GetModelStatus says why, as TF Serving, which loads every
    numbered directory, reports it (a half-written export, without its proto yet, is skipped).
    """
    try:
        names = set(os.listdir(path))
    except PermissionError:
        return True
    except OSError:  # Not a directory, or gone.
        return False
    return any(
        name in names and os.path.isfile(os.path.join(path, name)) for name in SAVED_MODEL_FILENAMES
    )


def read_meta_graph(export_dir: str, tags: Sequence[str]) -> meta_graph_pb2.MetaGraphDef:
    """Reads the MetaGraphDef whose tag set equals `tags`.

    Raises:
        ServingError: with the code TF's SavedModel loader gives (so TF Serving reports):
            NOT_FOUND for no SavedModel proto or no MetaGraphDef with the tags,
            PERMISSION_DENIED for an unreadable one, DATA_LOSS for one that does not parse.
    """
    saved_model = saved_model_pb2.SavedModel()
    pb_path = os.path.join(export_dir, "saved_model.pb")
    pbtxt_path = os.path.join(export_dir, "saved_model.pbtxt")
    try:
        if os.path.isfile(pb_path):
            with open(pb_path, "rb") as proto_file:
                saved_model.ParseFromString(proto_file.read())
        elif os.path.isfile(pbtxt_path):
            with open(pbtxt_path, encoding="utf-8") as proto_file:
                text_format.Parse(proto_file.read(), saved_model)
        else:
            os.listdir(export_dir)  # An unreadable directory hides its files: say so.
            raise errors.not_found(
                "SavedModel file does not exist at: "
                f"{export_dir}/{{saved_model.pbtxt|saved_model.pb}}"
            )
    except PermissionError as error:
        raise errors.ServingError(grpc.StatusCode.PERMISSION_DENIED, str(error)) from None
    except FileNotFoundError as error:
        raise errors.not_found(str(error)) from None
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as error:
        raise errors.ServingError(
            grpc.StatusCode.DATA_LOSS, f"Can't parse the SavedModel proto in {export_dir}: {error}"
        ) from None
    for meta_graph in saved_model.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == set(tags):
            return meta_graph
    available = [sorted(m.meta_info_def.tags) for m in saved_model.meta_graphs]
    raise errors.not_found(
        f"Could not find meta graph def matching supplied tags: "
        f"{{ {' '.join(sorted(tags))} }}. Available tag-sets: {available}. "
        "To inspect available tag-sets in the SavedModel, please use the "
        "SavedModel CLI: `saved_model_cli`"
    )


def read_warmup_requests(export_dir: str) -> list[predict_pb2.PredictRequest]:
    """Reads `assets.extra/tf_serving_warmup_requests` (TFRecord of PredictionLog).

    Returns:
        The PredictRequests of the file's `predict_log` records; [] when there is
        no warmup file.

    Raises:
        ServingError: INVALID_ARGUMENT for more than MAX_WARMUP_RECORDS records or an
            unparsable record, UNIMPLEMENTED for a record type other than predict_log
            (this server replays Predict only), as TF Serving's warmup reports them.
    """
    path = os.path.join(export_dir, WARMUP_PATH)
    if not os.path.isfile(path):
        return []
    requests = []
    for index, record in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator()):
        if index >= MAX_WARMUP_RECORDS:
            raise errors.invalid_argument(
                f"Number of warmup records exceeds the maximum ({MAX_WARMUP_RECORDS}) at {path}"
            )
        log = prediction_log_pb2.PredictionLog()
        try:
            log.ParseFromString(record)
        except message.DecodeError as error:
            raise errors.invalid_argument(
                f"Failed to parse warmup record {index} of {path}: {error}"
            ) from None
        log_type = log.WhichOneof("log_type")
        if log_type != "predict_log":
            raise errors.unimplemented(
                f"Warmup record {index} of {path} is a {log_type}; this server "
                "replays predict_log records only"
            )
        requests.append(log.predict_log.request)
    return requests


def _called_functions(attrs):
    """Names of the functions an attr map refers to (`f`, `body`, `then_branch`, lists...)."""
    for value in attrs.values():
        if value.HasField("func"):
            yield value.func.name
        elif value.HasField("list"):
            yield from (function.name for function in value.list.func)


def _must_compile(attrs) -> bool:
    return _XLA_MUST_COMPILE in attrs and attrs[_XLA_MUST_COMPILE].b


def xla_signature_names(meta_graph: meta_graph_pb2.MetaGraphDef) -> set[str]:
    """The signatures whose computation reaches an XLA-compiled function (`_XlaMustCompile`).

    Walks back from each signature's outputs through the main graph's inputs, then through
    every function those nodes call, transitively: the functions TF Serving's Session would run.
    """
    graph = meta_graph.graph_def
    library = {function.signature.name: function for function in graph.library.function}
    nodes = {node.name: node for node in graph.node}
    compiles = {}  # function name -> whether it or a function it calls is XLA-compiled

    def node_compiles(node):
        return _must_compile(node.attr) or any(map(function_compiles, _called_functions(node.attr)))

    def function_compiles(name):
        if name not in compiles:
            compiles[name] = False  # a recursive call sees False: no cycle is followed twice
            function = library.get(name)
            compiles[name] = function is not None and (
                _must_compile(function.attr) or any(map(node_compiles, function.node_def))
            )
        return compiles[name]

    names = set()
    for key, signature in meta_graph.signature_def.items():
        pending = [info.name.split(":")[0] for info in signature.outputs.values()]
        seen = set()
        while pending and key not in names:
            node = nodes.get(pending.pop())
            if node is None or node.name in seen:
                continue
            seen.add(node.name)
            if node_compiles(node):
                names.add(key)
            pending += [name.lstrip("^").split(":")[0] for name in node.input]
    return names


def holds_bfloat16_variables(meta_graph: meta_graph_pb2.MetaGraphDef) -> bool:
    """Whether the graph stores any variable in bfloat16 (`inference.export --compute_dtype
    bfloat16`), whose products are slow on CPUs without bfloat16 instructions."""
    return any(
        node.op == "VarHandleOp" and node.attr["dtype"].type == types_pb2.DT_BFLOAT16
        for node in meta_graph.graph_def.node
    )


def _session_style_message(message: str) -> str:
    """Strips the eager runtime's wrapper from a TF error message.

    Function calls report "Graph execution error:\n\nDetected at node N defined at
    (most recent call last):\n<frames>\n<message> [Op:__inference_...]";
    Session::Run in TF Serving reports just "<message>".
    """
    if not message.startswith("Graph execution error:"):
        return message
    kept = [
        line
        for line in message.split("\n")[1:]
        if line.strip()
        and not line.startswith(("Detected at node", "  File "))
        and line.strip() != "<stack traces unavailable>"
    ]
    cleaned = "\n".join(kept) or message
    return re.sub(r"\s*\[Op:__inference_[^\]]*\]$", "", cleaned)


def _feedable_at_any_shape(meta_graph: meta_graph_pb2.MetaGraphDef) -> meta_graph_pb2.MetaGraphDef:
    """A copy whose signature input placeholders have unknown shapes.

    Session::Run in TF Serving checks no feed shape (the model decides what it accepts);
    Python's Session.run refuses a feed that does not fit the placeholder's static shape.
    """
    meta_graph = meta_graph_pb2.MetaGraphDef.FromString(meta_graph.SerializeToString())
    inputs = {
        info.name.split(":")[0]
        for signature in meta_graph.signature_def.values()
        for info in signature.inputs.values()
    }
    for node in meta_graph.graph_def.node:
        if node.name in inputs and node.op == "Placeholder":
            node.attr["shape"].shape.CopyFrom(tensor_shape_pb2.TensorShapeProto(unknown_rank=True))
            if "_output_shapes" in node.attr:
                del node.attr["_output_shapes"]
    return meta_graph


def _init_op_name(meta_graph: meta_graph_pb2.MetaGraphDef) -> str | None:
    """The op TF's SavedModel loader runs after restoring the variables (tables, assets)."""
    signature = meta_graph.signature_def.get(INIT_OP_SIGNATURE_KEY)
    if signature is not None:
        return signature.outputs[INIT_OP_SIGNATURE_KEY].name
    for key in (tf.compat.v1.saved_model.MAIN_OP_KEY, tf.compat.v1.saved_model.LEGACY_INIT_OP_KEY):
        if key in meta_graph.collection_def:
            return meta_graph.collection_def[key].node_list.value[0]
    return None


def _asset_paths(export_dir: str, meta_graph: meta_graph_pb2.MetaGraphDef) -> dict[str, str]:
    """Asset tensor name -> absolute path of its file, fed to the init op."""
    asset_defs = list(meta_graph.asset_file_def)
    assets_key = tf.compat.v1.saved_model.ASSETS_KEY
    if not asset_defs and assets_key in meta_graph.collection_def:
        for packed in meta_graph.collection_def[assets_key].any_list.value:
            asset_defs.append(meta_graph_pb2.AssetFileDef())
            packed.Unpack(asset_defs[-1])
    directory = os.path.join(export_dir, tf.saved_model.ASSETS_DIRECTORY)
    return {asset.tensor_info.name: os.path.join(directory, asset.filename) for asset in asset_defs}


def load_session(
    export_dir: str,
    meta_graph: meta_graph_pb2.MetaGraphDef,
    record_stage: Callable[[str, float], None] | None = None,
    config: tf.compat.v1.ConfigProto | None = None,
) -> tf.compat.v1.Session:
    """Imports a MetaGraphDef into a new Session, restores its variables and runs its init op,
    as TF's SavedModel loader (and so TF Serving) does; signature inputs take any shape.

    A load that fails closes the Session it made before raising.

    Args:
        record_stage: called with TF's stage names and their seconds: "restore_graph"
            (import and variables), then "init_graph" (the init op).
        config: the Session's `ConfigProto` (its thread pools, say); None: TensorFlow's
            defaults, as the server runs.
    """
    start = time.monotonic()
    graph = tf.Graph()
    with graph.as_default():
        saver = tf.compat.v1.train.import_meta_graph(_feedable_at_any_shape(meta_graph))
    session = tf.compat.v1.Session(graph=graph, config=config)
    variables = os.path.join(
        export_dir, tf.saved_model.VARIABLES_DIRECTORY, tf.saved_model.VARIABLES_FILENAME
    )
    try:
        if saver is not None and tf.io.gfile.exists(variables + ".index"):
            with graph.as_default():
                saver.restore(session, variables)
        restored = time.monotonic()
        init_op = _init_op_name(meta_graph)
        if init_op is not None:
            session.run(init_op, feed_dict=_asset_paths(export_dir, meta_graph))
    except BaseException:
        # Closed now, not by the garbage collector: repeated failed loads of a version with
        # truncated variables each left about 100 MB behind until it ran.
        session.close()
        raise
    if record_stage is not None:
        record_stage("restore_graph", restored - start)
        record_stage("init_graph", time.monotonic() - restored)
    return session


class Servable:
    """A loaded model version.

    Args:
        model_name: name the version is served under.
        version: integer version (the directory name).
        export_dir: the version directory `<base_path>/<version>`.
        tags: MetaGraphDef tag set to load (TF Serving's `--saved_model_tags`).
        xla_compilation_enabled: TF Serving's `--xla_cpu_compilation_enabled`; when false, a
            signature that reaches an XLA-compiled function fails with INTERNAL
            `XLA_DISABLED_MESSAGE`, as there.
        record_load_stage: see `load_session`'s `record_stage`.

    Attributes:
        signature_defs: SignatureDef protos by signature key, as stored in the
            SavedModel (including `__saved_model_init_op` like TF Serving's
            metadata).
        xla_signatures: keys of the signatures that run XLA-compiled functions.
    """

    def __init__(
        self,
        model_name: str,
        version: int,
        export_dir: str,
        tags: Sequence[str] = ("serve",),
        xla_compilation_enabled: bool = False,
        record_load_stage: Callable[[str, float], None] | None = None,
    ):
        self.model_name = model_name
        self.version = version
        self.export_dir = export_dir
        meta_graph = read_meta_graph(export_dir, tags)
        self.signature_defs = dict(meta_graph.signature_def)
        self.xla_signatures = xla_signature_names(meta_graph)
        self.holds_bfloat16_weights = holds_bfloat16_variables(meta_graph)
        self._xla_compilation_enabled = xla_compilation_enabled
        self._session = load_session(export_dir, meta_graph, record_load_stage)
        self._release_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{{name: {self.model_name} version: {self.version}}}"

    def runnable(self, signature_name: str) -> bool:
        return signature_name in self.signature_defs and signature_name != INIT_OP_SIGNATURE_KEY

    def run(
        self,
        signature_name: str,
        inputs: Mapping[str, np.ndarray],
        output_aliases: Iterable[str],
        deadline: float | None = None,
    ) -> dict[str, np.ndarray]:
        """Runs one signature.

        Args:
            signature_name: a key of `signature_defs` that is runnable.
            inputs: numpy arrays by input alias, already validated against the
                SignatureDef (dtype, rank).
            output_aliases: outputs to return.
            deadline: `time.monotonic()` value at which the run is aborted (TF
                Serving's RunOptions.timeout_in_ms); None runs to the end.

        Returns:
            numpy arrays by output alias.

        Raises:
            ServingError: the model raised a TensorFlow error (DEADLINE_EXCEEDED when
                the run was aborted at the deadline, CANCELLED when the servable was
                released meanwhile); its canonical code and message are kept, as TF
                Serving passes Session::Run errors on.
        """
        if signature_name in self.xla_signatures and not self._xla_compilation_enabled:
            raise errors.ServingError(grpc.StatusCode.INTERNAL, XLA_DISABLED_MESSAGE)
        signature = self.signature_defs[signature_name]
        feeds = {
            signature.inputs[alias].name: np.asarray(
                array, dtype=tf.as_dtype(signature.inputs[alias].dtype).as_numpy_dtype
            )
            for alias, array in inputs.items()
        }
        fetches = {alias: signature.outputs[alias].name for alias in output_aliases}
        options = None
        if deadline is not None:
            remaining_ms = math.ceil((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                raise errors.deadline_exceeded("Deadline Exceeded")
            options = tf.compat.v1.RunOptions(timeout_in_ms=remaining_ms)
        session = self._session
        if session is None:
            raise errors.ServingError(grpc.StatusCode.CANCELLED, f"Servable {self} was unloaded")
        try:
            return session.run(fetches, feeds, options=options)
        except tf.errors.OpError as error:
            raise errors.ServingError(
                errors.code_from_number(error.error_code), _session_style_message(error.message)
            ) from None
        except RuntimeError as error:  # "Attempted to use a closed Session."
            raise errors.ServingError(grpc.StatusCode.CANCELLED, str(error)) from None

    def release(self) -> None:
        """Closes the Session, which cancels runs still under way, so its memory can be
        reclaimed at unload."""
        with self._release_lock:  # A shutdown's cancellation and the unload may race.
            session, self._session = self._session, None
            if session is not None:
                session.close()


def release_memory_to_system() -> bool:
    """Hands the free pages of the C heap back to the system (glibc's `malloc_trim`), as TF
    Serving's BasicManager calls `MallocExtension_ReleaseToSystem` after each unload.

    A released version's memory goes back to malloc, which keeps it for the process: loading,
    running and releasing the bundle's export in one process left 1,585 MiB resident, 775 MiB
    after this (701 MiB before the load). The served soak, where many threads allocate, did not
    shrink with it (BENCHMARKS.md, "Serving soak"). Returns False where the C library has no `malloc_trim`
    (not glibc), which changes nothing.
    """
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def load_servable(
    model_name: str,
    version: int,
    export_dir: str,
    tags: Sequence[str] = ("serve",),
    xla_compilation_enabled: bool = False,
    metrics: ServerMetrics | None = None,
) -> Servable:
    """Loads a version and logs like TF Serving's SavedModel loader; `metrics` gets the
    attempt, its latency and its stages, as TF's loader records them."""
    logger.info("Reading SavedModel from: %s", export_dir)
    start = time.monotonic()
    record_stage = (
        functools.partial(metrics.record_load_stage, export_dir) if metrics is not None else None
    )
    try:
        servable = Servable(
            model_name, version, export_dir, tags, xla_compilation_enabled, record_stage
        )
    except BaseException:
        if metrics is not None:
            metrics.record_load(export_dir, succeeded=False, seconds=time.monotonic() - start)
        raise
    if metrics is not None:
        metrics.record_load(export_dir, succeeded=True, seconds=time.monotonic() - start)
    if servable.holds_bfloat16_weights and (warning := cpu.bfloat16_slow_warning()):
        logger.warning("%s holds bfloat16 weights, but %s", export_dir, warning)
    logger.info(
        "SavedModel load for tags { %s }; Status: success: OK. Took %d microseconds.",
        " ".join(tags),
        int((time.monotonic() - start) * 1e6),
    )
    return servable
