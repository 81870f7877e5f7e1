"""How the suite is collected: which tests are large, and how `make test` spreads the test files
over its pytest-xdist workers (`--dist loadgroup`).

**Large tests** (marker `large`, pytest.ini) are those that take ten seconds or more: they train
a run, export one through the command line, run a notebook, a CLI's process or a benchmark end to
end. `make test` leaves them out and stays within ten minutes on two cores; `make test-large` runs
them, and CI runs both. A test is large if it is marked so, or if it uses one of LARGE_FIXTURES
(trained runs that take a minute to build: a test that needs one is end to end).

**Workers:** every test file runs on one worker, so its module fixtures are built once; the tests
that use one of SHARED_FIXTURES (session fixtures that take long to build) run on the same
worker, so each of those is built once per test run (a file's other tests stay with the file). Other session fixtures (`tiny_run`,
`exports`) build in seconds and are used by the heaviest files, so each worker builds its own
rather than putting those files on one worker.

Nothing heavy is imported here: tests/conftest.py takes the hook from this module, and
tests/test_collection.py checks it in pytest-xdist workers that start in a second.
"""

import pytest

LARGE_FIXTURES = ("trained_reverse_model", "tiny_export_run")
SHARED_FIXTURES = (*LARGE_FIXTURES, "half_trained_model")
LARGE = "large"


# First: pytest-xdist's own hook reads the markers (it suffixes each node id with its group), and
# pytest's `-m` deselects by them; pluggy calls later-registered plugins first, so without
# tryfirst the markers came too late and every file's tests were spread over both workers, each
# building the file's fixtures.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(name in item.fixturenames for name in LARGE_FIXTURES):
            item.add_marker(getattr(pytest.mark, LARGE))
        # Per test, not per file: the tests of a file that need no shared fixture (those that
        # `make test` keeps, as every user of one is large) stay free to run beside other files.
        shared = (name for name in SHARED_FIXTURES if name in item.fixturenames)
        item.add_marker(pytest.mark.xdist_group(next(shared, item.nodeid.split("::")[0])))
