"""training.corpus.debian: saying what a corpus build will download before it starts."""

import logging
import re
import shutil

import pytest

from training.corpus.catalogs import TEST_PACKAGES
from training.corpus.debian import DEFAULT_CACHE_DIR, announce_downloads, download_megabytes


def test_the_download_is_announced_with_its_size_unless_every_package_is_cached(tmp_path, caplog):
    """The test packages are in the cache (`make data-test`); copied into an empty cache but
    one, only that one is announced."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for deb in (DEFAULT_CACHE_DIR / "catalogs").glob("*.deb"):
        if not deb.name.startswith(f"{TEST_PACKAGES[0]}_"):
            shutil.copy(deb, cache)
    with caplog.at_level(logging.INFO, logger="training.corpus.debian"):
        announce_downloads(DEFAULT_CACHE_DIR / "catalogs", TEST_PACKAGES, "catalogs corpus")
        assert "nothing to download" in caplog.text
        caplog.clear()
        announce_downloads(cache, TEST_PACKAGES, "catalogs corpus")
    message = caplog.text
    assert "catalogs corpus: downloading 1 Debian package(s)" in message
    # apt's package lists are here: `make data-test` downloaded through them.
    size = download_megabytes([TEST_PACKAGES[0]])
    shown = float(re.search(r"package\(s\), ([\d,.]+) MB", message)[1].replace(",", ""))
    assert shown == round(size, 1) and 0 < size < 1


def test_download_size_is_the_sum_of_apts_sizes():
    one, two = download_megabytes(["hello"]), download_megabytes(["konsole"])
    assert download_megabytes(["hello", "konsole"]) == pytest.approx(one + two)
    assert download_megabytes([]) == 0.0
    assert download_megabytes(["no-such-package-anywhere"]) is None
