"""One loaded version of a SavedModel: its SignatureDefs and runnable signatures.

TF Serving serves the SignatureDefs stored in the SavedModel's MetaGraphDef
(that is what GetModelMetadata returns and what Predict validates against);
this module reads them from `saved_model.pb` and runs the matching concrete
functions of `tf.saved_model.load`, which are keyed by the same input and output
aliases.
"""

import logging
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence

import grpc
import numpy as np
import tensorflow as tf

# Registers the tensorflow-text ops (NormalizeUTF8, FastWordpiece, ...) that the translator's
# graph uses; tensorflow_model_server links the same ops into its binary.
import tensorflow_text  # noqa: F401
from google.protobuf import text_format
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from serving.model_server import errors

logger = logging.getLogger("serving.servable")

SAVED_MODEL_FILENAMES = ("saved_model.pb", "saved_model.pbtxt")
# Same location and record cap as TF Serving's saved_model_warmup_util.
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
MAX_WARMUP_RECORDS = 1000
# What TF Serving answers (INTERNAL) when a graph reaches an XLA-compiled function and the server
# runs without --xla_cpu_compilation_enabled (TF's DisableXlaCompilation()).
XLA_DISABLED_MESSAGE = "XLA compilation disabled"
_XLA_MUST_COMPILE = "_XlaMustCompile"


def is_complete_version_dir(path: str) -> bool:
    """True when a version directory holds a SavedModel proto (a finished export)."""
    return any(os.path.isfile(os.path.join(path, name)) for name in SAVED_MODEL_FILENAMES)


def read_meta_graph(export_dir: str, tags: Sequence[str]) -> meta_graph_pb2.MetaGraphDef:
    """Reads the MetaGraphDef whose tag set equals `tags`.

    Raises:
        OSError / ValueError: no SavedModel proto, or no MetaGraphDef with the tags
            (worded like TF's SavedModel loader).
    """
    saved_model = saved_model_pb2.SavedModel()
    pb_path = os.path.join(export_dir, "saved_model.pb")
    pbtxt_path = os.path.join(export_dir, "saved_model.pbtxt")
    if os.path.isfile(pb_path):
        with open(pb_path, "rb") as proto_file:
            saved_model.ParseFromString(proto_file.read())
    elif os.path.isfile(pbtxt_path):
        with open(pbtxt_path, encoding="utf-8") as proto_file:
            text_format.Parse(proto_file.read(), saved_model)
    else:
        raise OSError(
            f"SavedModel file does not exist at: {export_dir}/{{saved_model.pbtxt|saved_model.pb}}"
        )
    for meta_graph in saved_model.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == set(tags):
            return meta_graph
    available = [sorted(m.meta_info_def.tags) for m in saved_model.meta_graphs]
    raise ValueError(
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
        ValueError: more than MAX_WARMUP_RECORDS records, an unparsable record, or
            a record type other than predict_log (this server replays Predict only).
    """
    path = os.path.join(export_dir, WARMUP_FILE)
    if not os.path.isfile(path):
        return []
    requests = []
    for index, record in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator()):
        if index >= MAX_WARMUP_RECORDS:
            raise ValueError(
                f"Number of warmup records exceeds the maximum ({MAX_WARMUP_RECORDS}) at {path}"
            )
        log = prediction_log_pb2.PredictionLog()
        try:
            log.ParseFromString(record)
        except Exception as error:  # DecodeError
            raise ValueError(f"Failed to parse warmup record {index} of {path}: {error}") from None
        log_type = log.WhichOneof("log_type")
        if log_type != "predict_log":
            raise ValueError(
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
    ):
        self.model_name = model_name
        self.version = version
        self.export_dir = export_dir
        meta_graph = read_meta_graph(export_dir, tags)
        self.signature_defs = dict(meta_graph.signature_def)
        self.xla_signatures = xla_signature_names(meta_graph)
        self._xla_compilation_enabled = xla_compilation_enabled
        self._loaded = tf.saved_model.load(export_dir, tags=list(tags))
        self._functions = {
            name: self._loaded.signatures[name]
            for name in self.signature_defs
            if name in self._loaded.signatures
        }

    def __repr__(self) -> str:
        return f"{{name: {self.model_name} version: {self.version}}}"

    def runnable(self, signature_name: str) -> bool:
        return signature_name in self._functions

    def run(
        self, signature_name: str, inputs: Mapping[str, np.ndarray], output_aliases: Iterable[str]
    ) -> dict[str, np.ndarray]:
        """Runs one signature.

        Args:
            signature_name: a key of `signature_defs` that is runnable.
            inputs: numpy arrays by input alias, already validated against the
                SignatureDef (dtype, rank).
            output_aliases: outputs to return.

        Returns:
            numpy arrays by output alias.

        Raises:
            ServingError: the model raised a TensorFlow error; its canonical code
                and message are kept, as TF Serving passes Session::Run errors on.
        """
        if signature_name in self.xla_signatures and not self._xla_compilation_enabled:
            raise errors.ServingError(grpc.StatusCode.INTERNAL, XLA_DISABLED_MESSAGE)
        signature = self.signature_defs[signature_name]
        feeds = {
            alias: tf.convert_to_tensor(array, dtype=tf.as_dtype(signature.inputs[alias].dtype))
            for alias, array in inputs.items()
        }
        try:
            outputs = self._functions[signature_name](**feeds)
            return {alias: outputs[alias].numpy() for alias in output_aliases}
        except tf.errors.OpError as error:
            raise errors.ServingError(
                errors.code_from_number(error.error_code), _session_style_message(error.message)
            ) from None

    def release(self) -> None:
        """Drops the TF objects so their memory can be reclaimed at unload."""
        self._functions = {}
        self._loaded = None


def load_servable(
    model_name: str,
    version: int,
    export_dir: str,
    tags: Sequence[str] = ("serve",),
    xla_compilation_enabled: bool = False,
) -> Servable:
    """Loads a version and logs like TF Serving's SavedModel loader."""
    logger.info("Reading SavedModel from: %s", export_dir)
    start = time.monotonic()
    servable = Servable(model_name, version, export_dir, tags, xla_compilation_enabled)
    logger.info(
        "SavedModel load for tags { %s }; Status: success: OK. Took %d microseconds.",
        " ".join(tags),
        int((time.monotonic() - start) * 1e6),
    )
    return servable
