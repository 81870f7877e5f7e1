"""`make test`'s pytest-xdist workers (tests/xdist_groups.py): a test file runs on one worker,
and the files sharing a slow session fixture run on the same one."""

import os
import re
import subprocess
import sys

from tests.xdist_groups import SHARED_FIXTURES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_each_file_and_each_shared_fixtures_files_stay_on_one_worker(tmp_path):
    # A pytest or pytest-xdist upgrade that drops the groups would spread a file over both
    # workers, each building its module fixtures (pytest 9.2 did: pytest-xdist#1386).
    shared = SHARED_FIXTURES[0]
    (tmp_path / "conftest.py").write_text(
        "import pytest\n"
        "from tests.xdist_groups import pytest_collection_modifyitems  # noqa: F401\n\n\n"
        f"@pytest.fixture(scope='session')\ndef {shared}():\n    return 1\n"
    )
    tests = "".join(f"def test_{i}():\n    pass\n\n\n" for i in range(6))
    using_shared = "".join(f"def test_{i}({shared}):\n    pass\n\n\n" for i in range(6))
    files = {"test_a.py": tests, "test_b.py": tests, "test_c.py": using_shared,
             "test_d.py": using_shared}  # fmt: skip
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist",
         "loadgroup", "-v", *files],
        cwd=tmp_path, capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )  # fmt: skip
    workers = {}
    for line in result.stdout.splitlines():
        match = re.match(r"\[(gw\d)\] .*PASSED (test_\w\.py)::", line)
        if match:
            workers.setdefault(match.group(2), set()).add(match.group(1))
    assert sorted(workers) == sorted(files)
    assert all(len(names) == 1 for names in workers.values()), workers
    assert workers["test_c.py"] == workers["test_d.py"]
