"""Command line of the local TF-Serving-compatible model server (serving/model_server/).

    python -m serving.server --port=8500 --rest_api_port=8501 \\
        --model_name=translator --model_base_path=exports/translator

Flags are tensorflow_model_server's; `python -m serving.server --help` lists them and
serving/model_server/server.py documents the local additions.
"""

import sys

from serving.model_server.server import main

if __name__ == "__main__":
    sys.exit(main())
