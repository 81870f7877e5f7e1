"""The whole job in one command (`make demo`): a trained model, export, serving, translation.

1. takes the bundled pretrained model (`pretrained/es-en`, see its README.md), or with
   `--train PRESET` (`make demo-train`) builds the embedded corpus if missing and trains that
   preset (`demo`: a few minutes on 2 cores) into `--run_dir`, or reuses it;
2. exports the two signatures it calls to `exports/demo/<run>/translator/<version>` (its own
   base, so it never shadows the versions `make export` writes to `exports/translator`), unless
   the newest version there already holds them and is newer than every file of the run;
3. starts the serving stack (`tensorflow_model_server` if installed, else `serving.server`) in
   the background on 127.0.0.1, waits until it is healthy;
4. translates a few Spanish sentences over gRPC with `TranslationClient` and prints them;
5. stops the server.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from common.serving_contract import BEAM_SIGNATURE, EXPORT_INFO_PATH, GREEDY_SIGNATURE
from run_directory import artifacts
from serving.client import TranslationClient

# Written as people type: modern spelling (of a name too), then lowercase and without accents, in
# capitals, and with a name and a figure the corpus never holds.
BIBLE_SENTENCES = [
    "En el principio creó Dios los cielos y la tierra.",
    "¿Dónde está Abel tu hermano?",
    "Subieron a Jerusalén para la fiesta.",
    "bienaventurados los pobres en espiritu",
    "amaras a tu projimo como a ti mismo",
    "no tengas miedo, yo estoy contigo",
    "DIOS ES AMOR",
    "Kalomir vino a la ciudad con 47 hombres.",
]
# Today's Spanish, as typed: none is one of the everyday test sentences (training/everyday).
EVERYDAY_SENTENCES = [
    "¿Dónde está la estación de tren?",
    "no se donde esta mi telefono",
    "Hace mucho frío hoy.",
    "El archivo no se puede abrir.",
    "LA REUNIÓN EMPIEZA A LAS 9.",
]
SENTENCES = BIBLE_SENTENCES + EVERYDAY_SENTENCES


# What the demo calls: exported alone, they trace and warm up in a quarter of a full export's time.
DEMO_SIGNATURES = (GREEDY_SIGNATURE, BEAM_SIGNATURE)


def up_to_date_version(model_dir, run_dir, signatures):
    """The newest version directory under `model_dir` if it exports exactly `signatures` and is
    newer than every file of `run_dir`, else None (export again)."""
    versions = (
        [name for name in os.listdir(model_dir) if name.isdigit()]
        if os.path.isdir(model_dir)
        else []
    )
    if not versions:
        return None
    newest = os.path.join(model_dir, max(versions, key=int))
    try:
        with open(os.path.join(newest, EXPORT_INFO_PATH), encoding="utf-8") as handle:
            exported = tuple(json.load(handle)["signatures"])
    except (OSError, ValueError, KeyError):
        return None
    run_files = [
        os.path.join(folder, name) for folder, _, names in os.walk(run_dir) for name in names
    ]
    newest_run_file = max((os.path.getmtime(path) for path in run_files), default=0)
    if exported != tuple(signatures) or os.path.getmtime(newest) <= newest_run_file:
        return None
    return newest


def run(command):
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def wait_until_serving(address, model_name, process, timeout=180):
    """Polls the health service until the model is loaded; fails fast if the server died."""
    channel = grpc.insecure_channel(address)
    stub = health_pb2_grpc.HealthStub(channel)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode}")
        try:
            status = stub.Check(health_pb2.HealthCheckRequest(), timeout=2).status
            if status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{model_name} was not served at {address} within {timeout} s")


def export_for_demo(run_dir, export_base, model_name, signatures):
    """Exports `signatures` of `run_dir` under `export_base` (default
    `exports/demo/<the run directory's name>`), unless an up-to-date version holds them; returns
    the model's base path (absolute), as the server takes it."""
    export_base = export_base or os.path.join(
        "exports", "demo", os.path.basename(os.path.normpath(run_dir))
    )
    base_path = os.path.abspath(os.path.join(export_base, model_name))
    reused = up_to_date_version(base_path, run_dir, signatures)
    if reused:
        print(f"serving {reused}, exported from {run_dir} since it last changed", flush=True)
        return base_path
    run(
        [
            sys.executable,
            "-m",
            "inference.export",
            "--run_dir",
            run_dir,
            "--export_base",
            export_base,
            "--model_name",
            model_name,
            "--signatures",
            ",".join(signatures),
        ]
    )
    return base_path


def start_server(base_path, model_name, port, rest_port=0):
    """The serving stack (`tensorflow_model_server` if installed, else `serving.server`) on
    127.0.0.1:`port` for gRPC and `rest_port` for REST (0: none), started in the background;
    the caller waits for it (`wait_until_serving`) and stops it (`stop_server`)."""
    server_binary = shutil.which("tensorflow_model_server")
    command = ([server_binary] if server_binary else [sys.executable, "-m", "serving.server"]) + [
        f"--port={port}",
        f"--rest_api_port={rest_port}",
        f"--model_name={model_name}",
        f"--model_base_path={base_path}",
    ]
    print("$", " ".join(command), flush=True)
    return subprocess.Popen(command)


def stop_server(server):
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=60)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m inference.demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--run_dir",
        default=artifacts.PRETRAINED_RUN,
        help="the trained run to serve (default: the bundled pretrained model)",
    )
    parser.add_argument(
        "--train",
        metavar="PRESET",
        help="train this preset into --run_dir first, unless it is trained",
    )
    parser.add_argument(
        "--export_base",
        help="where to export (default: exports/demo/<the run directory's name>)",
    )
    parser.add_argument("--model_name", default="translator")
    parser.add_argument("--port", type=int, default=8500, help="the server's gRPC port")
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536:
        # The demo's client must know the port before the server binds it.
        parser.error(
            f"--port {args.port}: give the server a port from 1 to 65535 (make demo PORT=...)"
        )
    python = sys.executable

    if os.path.exists(os.path.join(args.run_dir, artifacts.MODEL_FILE)):
        print(f"serving the trained model in {args.run_dir}", flush=True)
    elif args.train:
        run([python, "-m", "training.prepare_data", "--out", os.path.join("data", "bible")])
        resume = (
            ["--resume"]
            if os.path.isdir(os.path.join(args.run_dir, artifacts.CHECKPOINT_DIR))
            else []
        )
        run(
            [
                python,
                "-m",
                "training.train",
                "--preset",
                args.train,
                "--data",
                "bible",
                "--run_dir",
                args.run_dir,
                *resume,
            ]
        )
    else:
        parser.error(
            f"{args.run_dir} holds no trained model ({artifacts.MODEL_FILE}); give "
            "--train PRESET to train one (make demo-train)"
        )
    base_path = export_for_demo(args.run_dir, args.export_base, args.model_name, DEMO_SIGNATURES)
    server = start_server(base_path, args.model_name, args.port)
    address = f"127.0.0.1:{args.port}"
    try:
        wait_until_serving(address, args.model_name, server)
        client = TranslationClient(address, args.model_name, timeout=60)
        for signature in DEMO_SIGNATURES:
            print(f"\n{signature}:")
            translations = iter(client.translate(SENTENCES, signature))
            for title, sentences in (("Bible", BIBLE_SENTENCES), ("everyday", EVERYDAY_SENTENCES)):
                print(f" {title}:")
                for source, translation in zip(sentences, translations):
                    print(f"  {source}\n    → {translation}")
        client.close()
    finally:
        stop_server(server)
    print("\nTry it in a browser, with the attention drawn: make demo-web")
    return 0


if __name__ == "__main__":
    sys.exit(main())
