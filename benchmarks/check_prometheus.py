"""Opt-in check: a real Prometheus (Debian's `prometheus` package) scrapes the local model
server's metrics.

    make check-prometheus              (after `apt-get install prometheus` and `make export`)

Starts `python -m serving.server` on ports it picks, with serving/monitoring.config, batching
and --model_base_path (default exports/translator); sends it --requests translations over gRPC;
then runs `prometheus` on serving/prometheus.yml's job, aimed at the server's REST port and
scraping every second, with its storage in a temporary directory and its web API on a free
loopback port. It asks Prometheus's HTTP API until the target is up and
`:tensorflow:serving:request_count` holds the requests sent (at most --timeout seconds).

Exit status: 0 when Prometheus saw them, 1 (with what it saw) when not, 2 when `prometheus` is
not installed. Loopback only.
"""

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

from benchmarks.bench_serve import REPO_ROOT, SERVING_DIR, start_server
from serving.client import TranslationClient

REQUEST_COUNT = ":tensorflow:serving:request_count"


def free_loopback_port() -> int:
    """A port free on 127.0.0.1 now (Prometheus does not report the port it binds for :0)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def prometheus_config(rest_port: int) -> dict:
    """serving/prometheus.yml with its job aimed at `rest_port`, scraped every second."""
    with open(os.path.join(SERVING_DIR, "prometheus.yml"), encoding="utf-8") as config_file:
        config = yaml.safe_load(config_file)
    config["global"]["scrape_interval"] = "1s"
    (job,) = config["scrape_configs"]
    job["static_configs"] = [{"targets": [f"127.0.0.1:{rest_port}"]}]
    return config


def query(api: str, expression: str) -> list:
    """The result of an instant query (Prometheus's HTTP API), [] while it cannot answer."""
    url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)["data"]["result"]
    except OSError:  # Not listening yet.
        return []


def target_health(api: str) -> list[str]:
    try:
        with urllib.request.urlopen(f"{api}/api/v1/targets", timeout=5) as response:
            targets = json.load(response)["data"]["activeTargets"]
    except OSError:
        return []
    return [target["health"] for target in targets]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.check_prometheus",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model_base_path", default=os.path.join(REPO_ROOT, "exports", "translator")
    )
    parser.add_argument("--model_name", default="translator")
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("prometheus not found: install Debian's package (apt-get install prometheus)")
        return 2
    flags = [
        "--port=0",
        "--rest_api_free_port",
        f"--model_name={args.model_name}",
        f"--model_base_path={os.path.abspath(args.model_base_path)}",
        f"--monitoring_config_file={os.path.join(SERVING_DIR, 'monitoring.config')}",
        "--enable_batching",
        f"--batching_parameters_file={os.path.join(SERVING_DIR, 'batching.config')}",
    ]
    with contextlib.ExitStack() as stack:
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="check-prometheus-"))
        log = stack.enter_context(open(os.path.join(workdir, "server.log"), "w+b"))
        scraper_log = stack.enter_context(open(os.path.join(workdir, "prometheus.log"), "w+b"))
        server, grpc_port, rest_port = start_server(flags, log, rest=True)
        scraper = None
        try:
            with TranslationClient(f"127.0.0.1:{grpc_port}", args.model_name) as client:
                for _ in range(args.requests):
                    client.translate(["Hola."])
            config_path = os.path.join(workdir, "prometheus.yml")
            with open(config_path, "w", encoding="utf-8") as config_file:
                yaml.safe_dump(prometheus_config(rest_port), config_file)
            web_port = free_loopback_port()
            scraper = subprocess.Popen(
                [prometheus, f"--config.file={config_path}",
                 f"--storage.tsdb.path={os.path.join(workdir, 'data')}",
                 f"--web.listen-address=127.0.0.1:{web_port}"],
                stdout=subprocess.DEVNULL, stderr=scraper_log,
            )  # fmt: skip
            api = f"http://127.0.0.1:{web_port}"
            expression = f'sum({REQUEST_COUNT}{{status="OK"}})'
            deadline = time.monotonic() + args.timeout
            seen, health = [], []
            while time.monotonic() < deadline and scraper.poll() is None:
                health = target_health(api)
                seen = query(api, expression)
                if health == ["up"] and seen and float(seen[0]["value"][1]) >= args.requests:
                    print(
                        f"Prometheus scraped the server: target up, {expression} = "
                        f"{seen[0]['value'][1]} after {args.requests} requests."
                    )
                    return 0
                time.sleep(0.5)
            scraper_log.seek(0)
            print(f"Prometheus did not see the requests: targets {health}, {expression} = {seen}")
            print(scraper_log.read().decode(errors="replace")[-2000:])
            return 1
        finally:
            if scraper is not None:
                scraper.terminate()
                scraper.wait(timeout=30)
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
