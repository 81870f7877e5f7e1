"""Debian packages as corpus sources: `apt-get download` into a cache, unpack without installing.

Both corpora built from Debian (the Bible, `training.corpus.bible`; the message catalogs,
`training.corpus.catalogs`) fetch their packages here. A package already in the cache is
never downloaded again, so a rebuild runs offline.
"""

from __future__ import annotations

import collections
import fnmatch
import logging
import re
import shutil
import subprocess
import tarfile
import urllib.parse
from collections.abc import Iterable
from pathlib import Path

from training.corpus.tsv import CorpusError

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
# Where downloaded .deb files are kept (gitignored).
DEFAULT_CACHE_DIR = PROJECT_ROOT / ".debs"
# Written into an unpacked directory last: its presence marks a complete unpacking.
UNPACKED_STAMP = ".unpacked"


def run_tool(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Runs an apt or dpkg tool, its output captured as text.

    Raises:
      CorpusError: the tool is not installed (building a corpus from Debian packages needs
        Debian's apt and dpkg tools).
    """
    try:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise CorpusError(
            f"{command[0]} not found: building a corpus from Debian packages needs Debian's "
            "apt and dpkg tools"
        ) from exc


def cached_deb(cache_dir: Path, package: str) -> Path | None:
    """The newest cached .deb of `package` in `cache_dir`, or None."""
    debs = sorted(Path(cache_dir).glob(f"{package}_*.deb"))
    return debs[-1] if debs else None


def download_deb(cache_dir: Path, package: str) -> Path:
    """The package's .deb in `cache_dir`, downloaded with `apt-get download` unless cached.

    `apt-get download` needs no root, but if the package lists are missing (fresh container)
    it fails with "Unable to locate package"; then `apt-get update` (root) is run once and the
    download retried.

    Raises:
      CorpusError: the package cannot be downloaded (the message holds apt's own).
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    deb = cached_deb(cache_dir, package)
    if deb is not None:
        return deb
    result = run_tool(["apt-get", "download", package], cache_dir)
    if result.returncode != 0 and "Unable to locate package" in result.stderr:
        logger.info("apt package lists missing; running apt-get update")
        update = run_tool(["apt-get", "update"], cache_dir)
        if update.returncode != 0:
            raise CorpusError(f"apt-get update failed: {update.stderr.strip()[-500:]}")
        result = run_tool(["apt-get", "download", package], cache_dir)
    if result.returncode != 0:
        raise CorpusError(f"apt-get download {package} failed: {result.stderr.strip()[-500:]}")
    deb = cached_deb(cache_dir, package)
    if deb is None:
        raise CorpusError(f"apt-get download {package} produced no .deb in {cache_dir}")
    return deb


def deb_version(deb: Path) -> str:
    """The Debian version in a .deb file name (`apt-get download` writes an epoch's colon
    as `%3a`: `wesnoth-1.16-dw_1%3a1.16.9-1_all.deb` is version `1:1.16.9-1`)."""
    return urllib.parse.unquote(Path(deb).name.split("_")[1])


def unpack_deb(deb: Path, destination: Path, members: Iterable[str] | None = None) -> Path:
    """Unpacks a .deb's files into `destination`; nothing is installed.

    Args:
      deb: the package file.
      destination: the directory the package's tree (`usr/...`) is written under.
      members: `fnmatch` patterns of the paths to keep (e.g. `*/LC_MESSAGES/*.mo`); None
        unpacks everything with `dpkg-deb -x`. With patterns, the data archive is streamed
        through `dpkg-deb --fsys-tarfile` and only matching regular files are written, so a
        400 MB game data package costs its catalogs' size on disk, not its own.

    Returns:
      `destination`.

    Raises:
      CorpusError: dpkg-deb fails or the archive is unreadable.
    """
    deb, destination = Path(deb).resolve(), Path(destination).resolve()
    destination.mkdir(parents=True, exist_ok=True)
    if members is None:
        result = run_tool(["dpkg-deb", "-x", str(deb), str(destination)], destination)
        if result.returncode != 0:
            raise CorpusError(f"dpkg-deb -x {deb} failed: {result.stderr.strip()}")
        return destination
    patterns = tuple(members)
    try:
        process = subprocess.Popen(
            ["dpkg-deb", "--fsys-tarfile", str(deb)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except FileNotFoundError as exc:
        raise CorpusError("dpkg-deb not found: unpacking a Debian package needs dpkg") from exc
    try:
        with tarfile.open(fileobj=process.stdout, mode="r|") as archive:
            for member in archive:
                name = member.name.removeprefix("./")
                if member.isfile() and any(fnmatch.fnmatch(name, p) for p in patterns):
                    member.name = name
                    archive.extract(member, destination, filter="data")
    except tarfile.TarError as exc:
        raise CorpusError(f"{deb}: unreadable data archive ({exc})") from exc
    finally:
        stderr = process.stderr.read().decode("utf-8", "replace")
        process.stdout.close()
        process.stderr.close()
    if process.wait() != 0:
        raise CorpusError(f"dpkg-deb --fsys-tarfile {deb} failed: {stderr.strip()}")
    return destination


def unpack_cached(deb: Path, destination: Path, members: Iterable[str]) -> Path:
    """`unpack_deb` once per .deb: a complete earlier unpacking of the same file is reused.

    The stamp file records the .deb's name, so a newer package version is unpacked afresh.
    """
    stamp = Path(destination) / UNPACKED_STAMP
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == Path(deb).name:
        return Path(destination)
    if Path(destination).exists():
        shutil.rmtree(destination)
    unpack_deb(deb, destination, members)
    stamp.write_text(Path(deb).name, encoding="utf-8")
    return Path(destination)


_LICENSE_FIELD = re.compile(r"^License:[ \t]*(\S[^\n]*)$", re.MULTILINE)
# What a free-form copyright file (one without `License:` fields) is searched for.
_FREE_FORM_LICENCES = (
    ("GPL", re.compile(r"GNU General Public License|\bGPL\b")),
    ("LGPL", re.compile(r"GNU (?:Lesser|Library) General Public License|\bLGPL\b")),
    ("MPL", re.compile(r"Mozilla Public License|\bMPL\b")),
    ("CC-BY-SA", re.compile(r"Creative Commons Attribution[- ]Share[- ]?Alike|CC-BY-SA")),
    ("GFDL", re.compile(r"GNU Free Documentation License|\bGFDL\b")),
)


def package_licence(copyright_text: str) -> str:
    """The licence a Debian copyright file gives: the `License:` short names of a
    machine-readable file, most common first, joined by "; "; for a free-form file (no
    `License:` field), the licence families its text names, marked "(free-form copyright file)"."""
    names = collections.Counter(name.strip() for name in _LICENSE_FIELD.findall(copyright_text))
    if not names:
        mentioned = [
            name for name, pattern in _FREE_FORM_LICENCES if pattern.search(copyright_text)
        ]
        return f"{', '.join(mentioned) or 'unnamed'} (free-form copyright file)"
    return "; ".join(name for name, _ in names.most_common())


def download_megabytes(packages: Iterable[str]) -> float | None:
    """What `apt-get download` of `packages` fetches, in MB, by `apt-cache show`'s `Size:`
    fields (the candidate versions), or None when apt cannot say (no package lists)."""
    packages = list(packages)
    if not packages:
        return 0.0
    try:
        result = subprocess.run(
            ["apt-cache", "show", "--no-all-versions", *packages], capture_output=True, text=True
        )
    except FileNotFoundError:
        return None
    sizes = re.findall(r"^Size:\s*(\d+)$", result.stdout, re.MULTILINE)
    if len(sizes) < len(packages):
        return None
    return sum(int(size) for size in sizes) / 1e6


def announce_downloads(cache_dir: Path, packages: Iterable[str], what: str) -> None:
    """Says, before a build starts, what it will download for `what` ("catalogs corpus"): the
    packages not yet in `cache_dir` and their size (`download_megabytes`), or that everything
    is cached."""
    missing = [package for package in packages if cached_deb(Path(cache_dir), package) is None]
    if not missing:
        logger.info("%s: every package is in %s already; nothing to download", what, cache_dir)
        return
    megabytes = download_megabytes(missing)
    size = f"{megabytes:,.1f} MB" if megabytes is not None else "a size apt cannot tell yet"
    logger.info(
        "%s: downloading %d Debian package(s), %s, into %s (once: later builds reuse "
        "them); Ctrl-C stops it, and the same command goes on where it stopped",
        what,
        len(missing),
        size,
        cache_dir,
    )
