"""A local model server speaking TensorFlow Serving's gRPC and REST APIs, for any SavedModel.

Nothing here knows the translator: it is the stand-in for `tensorflow_model_server` on a
developer machine (command line: `python -m serving.server`, the same flags). One concern
per module:

* `server`: `ModelServer`, its options and flags, the gRPC and REST listeners.
* `grpc_service`: the PredictionService and ModelService.
* The REST API in TF Serving's three parts: `http_server` (the HTTP/1.1 transport),
  `rest_api` (routing, errors to HTTP statuses), `json_tensor` (JSON <-> tensors).
* `core`: what both front ends share (model lookup, predict, classify and regress checks,
  status, metadata); `memory_budget`: what the requests in flight may hold.
* `manager`: the versions of each model on disk, loaded, swapped and unloaded.
* `servable`: one loaded SavedModel version; `predict`: a Predict call on it.
* `batching`: merging concurrent requests into batches; `config`: the config files.
* `tensors`: TensorProto <-> NumPy; `errors`: gRPC status codes as exceptions;
  `metrics`: the Prometheus metrics.
* `session_bundle_config_pb2`: the BatchingParameters message the wheel lacks.
"""
