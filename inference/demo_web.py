"""The translator page on the bundled model (`make demo-web`): export, serve, open in a browser.

1. exports the signatures the page calls (greedy, beam search, alignments) of `--run_dir` (the
   bundled pretrained model by default) to `exports/demo-web/<run>/translator/<version>`, unless
   an up-to-date version is there (`inference.demo.export_for_demo`);
2. starts the serving stack (`tensorflow_model_server` if installed, else `serving.server`) on
   127.0.0.1, gRPC on `--port` and REST on `--rest_port`, and waits until it serves;
3. serves the page (`inference.web`) on `--host`:`--web_port`, printing its address, until
   interrupted (Ctrl+C), then stops the server.
"""

import argparse
import os
import signal
import sys

from common.serving_contract import ALIGNMENTS_SIGNATURE, BEAM_SIGNATURE, GREEDY_SIGNATURE
from inference.demo import export_for_demo, start_server, stop_server, wait_until_serving
from inference.web import add_page_arguments, serve_page
from run_directory import artifacts

# In the export's order (common.serving_contract.SIGNATURES), as export_info.json lists them.
PAGE_SIGNATURES = (GREEDY_SIGNATURE, BEAM_SIGNATURE, ALIGNMENTS_SIGNATURE)


def _exit_on_sigterm(signum, frame):
    # SIGTERM (a supervisor, `kill`) stops the page and the model server as Ctrl+C does; without
    # this the model server outlived the page.
    raise SystemExit(128 + signum)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m inference.demo_web", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--run_dir",
        default=artifacts.PRETRAINED_RUN,
        help="the trained run to serve (default: the bundled pretrained model)",
    )
    parser.add_argument(
        "--export_base",
        help="where to export (default: exports/demo-web/<the run directory's name>)",
    )
    parser.add_argument("--port", type=int, default=8500, help="the model server's gRPC port")
    parser.add_argument("--rest_port", type=int, default=8501, help="the model server's REST port")
    add_page_arguments(parser, port_flag="--web_port")
    args = parser.parse_args(argv)
    for flag, port in (("--port", args.port), ("--rest_port", args.rest_port)):
        if not 0 < port < 65536:
            # The page and the readiness check must know the server's ports before it binds them.
            parser.error(f"{flag} {port}: give the model server a port from 1 to 65535")
    if not os.path.exists(os.path.join(args.run_dir, artifacts.MODEL_FILE)):
        parser.error(f"{args.run_dir} holds no trained model ({artifacts.MODEL_FILE})")
    export_base = args.export_base or os.path.join(
        "exports", "demo-web", os.path.basename(os.path.normpath(args.run_dir))
    )
    base_path = export_for_demo(args.run_dir, export_base, args.model_name, PAGE_SIGNATURES)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    server = start_server(base_path, args.model_name, args.port, rest_port=args.rest_port)
    try:
        wait_until_serving(f"127.0.0.1:{args.port}", args.model_name, server)
        print("Open the page below in a browser; Ctrl+C stops the page and the server.", flush=True)
        serve_page(args, f"http://127.0.0.1:{args.rest_port}")
    finally:
        stop_server(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
