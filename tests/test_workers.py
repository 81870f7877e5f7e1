"""`make test`'s two pytest-xdist workers: each test file's fixtures are built on one of them."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_make_tests_xdist_groups_keep_each_file_on_one_worker(tmp_path):
    # tests/conftest.py groups the files so that each builds its module fixtures once; a pytest
    # or pytest-xdist upgrade that drops the groups would spread a file over both workers.
    files = ["tests/test_masks.py", "tests/test_positional_encoding.py"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist",
         "loadgroup", "-v", *files],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    workers = {}
    for line in result.stdout.splitlines():
        match = re.match(r"\[(gw\d)\] .*PASSED (tests/\S+?)::", line)
        if match:
            workers.setdefault(match.group(2), set()).add(match.group(1))
    assert sorted(workers) == files
    assert all(len(names) == 1 for names in workers.values()), workers
