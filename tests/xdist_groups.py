"""How `make test` spreads the test files over its pytest-xdist workers (`--dist loadgroup`).

Every test file runs on one worker, so its module fixtures are built once; the files that use
one of SHARED_FIXTURES (session fixtures that take long to build) run on the same worker, so
each of those is built once per test run. Other session fixtures (`tiny_run`, `exports`) build
in seconds and are used by the heaviest files, so each worker builds its own rather than
putting those files on one worker.

Nothing heavy is imported here: tests/conftest.py takes the hook from this module, and
tests/test_workers.py checks it in pytest-xdist workers that start in a second.
"""

import pytest

SHARED_FIXTURES = ("trained_reverse_model", "tiny_export_run")


# First: pytest-xdist's own hook reads the markers (it suffixes each node id with its group), and
# pluggy calls later-registered plugins first, so without tryfirst the markers came too late and
# every file's tests were spread over both workers, each building the file's fixtures.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    files = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    for path, file_items in files.items():
        used = set().union(*(item.fixturenames for item in file_items))
        group = next((name for name in SHARED_FIXTURES if name in used), path)
        for item in file_items:
            item.add_marker(pytest.mark.xdist_group(group))
