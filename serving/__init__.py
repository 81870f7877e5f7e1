"""Serving: the TF-Serving-compatible model server (`serving/model_server/`) and the gRPC client."""

from common.startup import import_tensorflow_quietly

# First, before any serving module imports TensorFlow; not `import model`, which would load the
# model code into the model server (serving/model_server/ depends on TensorFlow only).
import_tensorflow_quietly()
