"""Writing a file so that no reader, and no crash, ever leaves or sees half of it."""

import os


def write_atomically(path, data):
    """Writes `data` (bytes, or str encoded as UTF-8) to `path` through `path.tmp` and a rename.

    The one helper of the project for files other processes may read while they are written
    (vocabularies, corpora, the best-checkpoint record).
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    path = os.fspath(path)
    temporary = f"{path}.tmp"
    with open(temporary, "wb") as out_file:
        out_file.write(data)
    os.replace(temporary, path)
