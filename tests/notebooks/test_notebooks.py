"""Executes every notebook in notebooks/ top to bottom, in fast mode, and checks what it shows.

Each notebook runs in a fresh IPython kernel of this interpreter (the .venv's python, whatever
kernels Jupyter has registered elsewhere), with `NOTEBOOK_FAST=1` so the training notebooks train
the `tiny` preset on a toy corpus instead of reading runs/ or the Bible corpus, and with TMPDIR
inside pytest's tmp_path so whatever a notebook leaves behind is cleaned up. The notebooks check
their own numbers with asserts: a failing cell fails the test. Outputs are kept in memory only; the
committed .ipynb files are never written.
"""

import sys

import nbclient
import nbformat
import pytest
from ipykernel.kernelspec import write_kernel_spec
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from tests.paths import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
KERNEL_NAME = "transformer-notebook-test"
# Per cell; fast mode's slowest cells (tiny training, tracing the export) take well under a minute.
CELL_TIMEOUT_S = 300


def test_every_notebook_is_collected():
    names = [path.stem for path in NOTEBOOKS]
    assert names == [
        "01_attention",
        "02_positional_encoding",
        "03_training",
        "04_translate_and_attend",
    ]


def _kernel_manager(kernel_dir):
    """A KernelManager whose only kernelspec runs ipykernel on this interpreter.

    Looking up "python3" through Jupyter's usual paths could find a kernelspec of another Python
    (a user-wide Jupyter, a conda env) without TensorFlow; a private spec directory cannot.
    """
    write_kernel_spec(str(kernel_dir / KERNEL_NAME), overrides={"display_name": KERNEL_NAME})
    specs = KernelSpecManager(kernel_dirs=[str(kernel_dir)], ensure_native_kernel=False)
    assert specs.get_kernel_spec(KERNEL_NAME).argv[0] == sys.executable
    return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)


def _image_outputs(notebook):
    return [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") in ("display_data", "execute_result")
        and "image/png" in output.get("data", {})
    ]


@pytest.mark.large
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_runs_in_fast_mode(path, tmp_path, monkeypatch):
    monkeypatch.setenv("NOTEBOOK_FAST", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    kernel_dir = tmp_path / "kernels"
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        km=_kernel_manager(kernel_dir),
        timeout=CELL_TIMEOUT_S,
        allow_errors=False,
        # The notebooks' working directory is notebooks/, as under `make notebooks`.
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.execute()  # raises CellExecutionError (with the cell and traceback) on any error

    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.get("execution_count") for cell in code_cells), "a code cell did not run"
    errors = [
        output
        for cell in code_cells
        for output in cell.outputs
        if output.get("output_type") == "error"
    ]
    assert not errors
    assert _image_outputs(notebook), f"{path.name} displayed no image"
