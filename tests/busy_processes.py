"""Runs a command beside processes that keep the cores busy (`make test-under-load`).

    .venv/bin/python -m tests.busy_processes 2 -- make test

starts 2 processes that spin until the command ends (each at the command's own priority, so
they take a core each as a shared machine's other work would), runs the command, stops them
and exits with the command's status. A test that passes alone but fails here depends on the
machine being idle: a timeout too short, a race, a wall-clock assumption.
"""

import argparse
import os
import subprocess
import sys
import time

SPIN = "while True: pass"


def run_beside_busy_processes(command, busy_processes):
    """Runs `command` (argv list) with `busy_processes` spinning processes beside it; returns
    its exit status. The spinners are stopped however the command ends."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL)
        for _ in range(busy_processes)
    ]
    started = time.monotonic()
    try:
        print(
            f"busy_processes: {busy_processes} spinning (pids "
            f"{', '.join(str(s.pid) for s in spinners)}), running: {' '.join(command)}",
            file=sys.stderr,
            flush=True,
        )
        status = subprocess.call(command)
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()
    load = os.getloadavg()[0]
    print(
        f"busy_processes: the command exited {status} after {time.monotonic() - started:.0f} s "
        f"(load average {load:.1f} at its end)",
        file=sys.stderr,
    )
    return status


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("busy_processes", type=int, help="how many processes spin beside it")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    if args.busy_processes < 0:
        parser.error("busy_processes must be >= 0")
    return run_beside_busy_processes(command, args.busy_processes)


if __name__ == "__main__":
    sys.exit(main())
