"""How the suite is collected (tests/collection.py): the large tests, those marked so and those
that use a large fixture, and `make test`'s pytest-xdist workers: a test file runs on one worker,
and the files sharing a slow session fixture run on the same one."""

import os
import re
import subprocess
import sys

from tests.collection import LARGE, LARGE_FIXTURES, SHARED_FIXTURES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_each_file_and_each_shared_fixtures_files_stay_on_one_worker(tmp_path):
    # A pytest or pytest-xdist upgrade that drops the groups would spread a file over both
    # workers, each building its module fixtures (pytest 9.2 did: pytest-xdist#1386).
    shared = SHARED_FIXTURES[0]
    (tmp_path / "conftest.py").write_text(
        "import pytest\n"
        "from tests.collection import pytest_collection_modifyitems  # noqa: F401\n\n\n"
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


def _collected(directory, *arguments):
    """The test names pytest collects in `directory` (with the suite's hook) for `arguments`."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
         *arguments],
        cwd=directory, capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": ROOT},
    )  # fmt: skip
    assert result.returncode in (0, 5), result.stdout + result.stderr  # 5: none collected
    return sorted(re.findall(r"::(test_\w+)", result.stdout))


def test_large_tests_are_those_marked_and_those_using_a_large_fixture(tmp_path):
    fixture = LARGE_FIXTURES[-1]
    (tmp_path / "conftest.py").write_text(
        "import pytest\n"
        "from tests.collection import pytest_collection_modifyitems  # noqa: F401\n\n\n"
        f"@pytest.fixture(scope='session')\ndef {fixture}():\n    return 1\n"
    )
    (tmp_path / "pytest.ini").write_text(f"[pytest]\nmarkers =\n    {LARGE}: large\n")
    (tmp_path / "test_a.py").write_text(
        "import pytest\n\n\n"
        "def test_unit():\n    pass\n\n\n"
        f"@pytest.mark.{LARGE}\ndef test_marked():\n    pass\n\n\n"
        f"def test_using_the_fixture({fixture}):\n    pass\n"
    )
    assert _collected(tmp_path, "-m", f"not {LARGE}") == ["test_unit"]
    assert _collected(tmp_path, "-m", LARGE) == ["test_marked", "test_using_the_fixture"]
