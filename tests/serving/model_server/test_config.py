"""serving/model_server/config.py: the committed config files, errors naming file and line."""

import os

import pytest
import yaml

from serving.model_server import config as config_lib
from serving.model_server.server import ModelServer, ServerOptions, parse_flags
from serving.model_server.session_bundle_config_pb2 import BatchingParameters
from tests.model_server_fixtures import SERVING_DIR

# ----------------------------------------------------------------- config and flags


def test_committed_config_files_parse_and_match_the_deployment():
    config = config_lib.load_model_server_config(os.path.join(SERVING_DIR, "models.config"))
    (model,) = config.model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == (
        "translator",
        "/models/translator",
        "tensorflow",
    )
    assert model.model_version_policy.WhichOneof("policy_choice") == "latest"

    parameters = config_lib.read_text_proto(
        os.path.join(SERVING_DIR, "batching.config"), BatchingParameters
    )
    options = config_lib.BatchingOptions.from_proto(parameters)
    assert options.max_batch_size == parameters.max_batch_size.value > 1
    assert options.batch_timeout_micros == parameters.batch_timeout_micros.value
    assert options.num_batch_threads == parameters.num_batch_threads.value
    assert options.enable_large_batch_splitting == parameters.enable_large_batch_splitting.value
    assert options.execution_batch_size == parameters.max_execution_batch_size.value

    with open(os.path.join(SERVING_DIR, "docker-compose.yml")) as compose_file:
        service = yaml.safe_load(compose_file)["services"]["translator"]
    assert service["image"].startswith("tensorflow/serving:")
    assert {"8500:8500", "8501:8501"} <= set(service["ports"])
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in service["volumes"]}
    assert mounts["/models"] == "../exports"
    flags = dict(arg.lstrip("-").split("=", 1) for arg in service["command"])
    assert flags["enable_batching"] == "true"
    # The config files the container reads are the committed ones, at the mounted paths,
    # and the model base path in models.config lies inside the /models mount.
    assert mounts[flags["model_config_file"]] == "./models.config"
    assert mounts[flags["batching_parameters_file"]] == "./batching.config"
    assert mounts[flags["monitoring_config_file"]] == "./monitoring.config"
    assert model.base_path.startswith("/models/")
    # Every flag the compose file passes is one this server accepts too.
    parse_flags(service["command"])


def test_bad_config_files_name_the_file_and_line(tmp_path):
    broken = tmp_path / "models.config"
    broken.write_text('model_config_list {\n  config { name: "x" base_path: "/m" bogus: 1 }\n}\n')
    with pytest.raises(config_lib.ConfigError, match=r"models.config.*2:\d+.*bogus"):
        config_lib.load_model_server_config(str(broken))
    other_platform = tmp_path / "other.config"
    other_platform.write_text(
        'model_config_list { config { name: "x" base_path: "/m" model_platform: "pytorch" } }'
    )
    with pytest.raises(config_lib.ConfigError, match="model_platform 'pytorch' is not supported"):
        config_lib.load_model_server_config(str(other_platform))
    bad_sizes = tmp_path / "batching.config"
    bad_sizes.write_text(
        "max_batch_size { value: 8 } allowed_batch_sizes: 4 allowed_batch_sizes: 6"
    )
    with pytest.raises(config_lib.ConfigError, match="final entry in allowed_batch_sizes"):
        config_lib.load_batching_options(str(bad_sizes))


def test_batching_parameters_file_requires_enable_batching(tmp_path):
    server = ModelServer(
        ServerOptions(
            port=0,
            model_base_path=str(tmp_path),
            batching_parameters_file=str(tmp_path / "b.config"),
        )
    )
    with pytest.raises(config_lib.ConfigError, match="without setting --enable_batching"):
        server.start()
