"""The packages import one way, benchmarks -> inference -> serving -> training -> run_directory ->
model -> common, no cycles.

Read from the source with `ast`, nothing is imported: every `import` statement counts, at
module level or inside a function (a lazy import is still a dependency).
"""

import ast
import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
# Each package may import those after it, never those before it.
LAYERS = ("benchmarks", "inference", "serving", "training", "run_directory", "model", "common")


def module_name(path, root=REPO_ROOT):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root=REPO_ROOT):
    """`{module name: path}` of every .py file of the layered packages."""
    return {
        module_name(path, root): path
        for package in LAYERS
        for path in sorted((root / package).rglob("*.py"))
        if ".ipynb_checkpoints" not in path.parts
    }


def imported_names(source, module, is_package=False):
    """Every dotted name `source` imports, as the module it names or `module.attribute`.

    `from a.b import c` gives `a.b.c` (a submodule or a name in `a.b`, decided by the caller);
    relative imports are resolved against `module`.
    """
    package = module if is_package else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            names += [f"{prefix}.{alias.name}" for alias in node.names]
    return names


def resolve(name, modules):
    """The project module `name` refers to (its longest prefix that is one), or None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def import_graph(modules):
    """`{module: set of project modules it imports}`."""
    graph = {}
    for module, path in modules.items():
        names = imported_names(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
        graph[module] = {
            target
            for target in (resolve(name, modules) for name in names)
            if target is not None and target != module
        }
    return graph


def layer_violations(graph):
    """`(importer, imported)` pairs where a package imports one to its left in LAYERS."""
    rank = {package: index for index, package in enumerate(LAYERS)}
    return sorted(
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if rank[target.split(".")[0]] < rank[module.split(".")[0]]
    )


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


@pytest.fixture(scope="module")
def graph():
    return import_graph(project_modules())


def test_every_package_is_walked(graph):
    for package in LAYERS:
        assert package in graph
    assert "training.corpus.loading" in graph and "serving.model_server.server" in graph


def test_no_package_imports_one_to_its_left(graph):
    violations = layer_violations(graph)
    assert not violations, (
        "imports against "
        + " -> ".join(LAYERS)
        + ":\n"
        + "\n".join(f"  {module} imports {target}" for module, target in violations)
    )


def test_serving_imports_only_itself_and_common(graph):
    """serving/ (the model server and the client) serves and queries any SavedModel: it needs no
    model, training or export code (tests/serving/model_server/test_server_imports.py checks the
    running server's modules)."""
    foreign = sorted(
        (module, target)
        for module, targets in graph.items()
        if module == "serving" or module.startswith("serving.")
        for target in targets
        if not (target == "serving" or target.startswith(("serving.", "common")))
    )
    assert not foreign, "\n".join(f"  {module} imports {target}" for module, target in foreign)


def test_no_import_cycles(graph):
    found = cycles(graph)
    assert not found, "modules importing each other:\n" + "\n".join(
        "  " + " <-> ".join(component) for component in found
    )


def test_the_checks_see_imports_inside_functions_and_relative_ones():
    source = "import os\ndef f():\n    from serving.client import x\n    from . import sibling\n"
    names = imported_names(source, "training.corpus.tsv")
    assert names == ["os", "serving.client.x", "training.corpus.sibling"]
    modules = {"training.corpus.tsv": None, "serving.client": None, "training.corpus": None}
    graph = {"training.corpus.tsv": {resolve(name, modules) for name in names} - {None}}
    assert graph == {"training.corpus.tsv": {"serving.client", "training.corpus"}}
    graph.update({"serving.client": {"training.corpus.tsv"}, "training.corpus": set()})
    assert layer_violations(graph) == [("training.corpus.tsv", "serving.client")]
    assert cycles(graph) == [["serving.client", "training.corpus.tsv"]]


# A function a maintainer reads in one screen; a command's `main` and argument parser are lists
# of steps and flags, read one at a time.
MAX_FUNCTION_LINES = 80
COMMAND_FUNCTIONS = ("main", "build_arg_parser")
# A file of the server a reviewer reads whole (TF Serving's front-end files are of this order).
MAX_SERVING_FILE_BYTES = 40_000


def long_functions(source, limit=MAX_FUNCTION_LINES):
    """`(name, lines)` of every function or method in `source` longer than `limit` lines (from
    `def` to the last line: the docstring counts, decorators do not), commands' `main` and
    argument parsers left out."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name not in COMMAND_FUNCTIONS
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_function_of_the_product_is_longer_than_a_screen():
    found = [
        f"  {module}.{name}: {lines} lines"
        for module, path in project_modules().items()
        if not module.startswith("benchmarks") and not module.endswith("_pb2")
        for name, lines in long_functions(path.read_text(encoding="utf-8"))
    ]
    assert not found, f"longer than {MAX_FUNCTION_LINES} lines:\n" + "\n".join(found)


def test_the_length_check_counts_whole_functions_and_spares_commands():
    source = (
        "def short():\n"
        "    pass\n"
        "def main():\n" + "    x = 1\n" * 9 + "class A:\n"
        "    @staticmethod\n"
        "    def method():\n"
        '        """Doc."""\n'
        "        x = 1\n"
        "        return x\n"
    )
    assert long_functions(source, limit=3) == [("method", 4)]
    assert long_functions(source, limit=4) == []


def test_no_file_of_serving_is_larger_than_a_reviewer_reads_whole():
    large = [
        f"  {path.relative_to(REPO_ROOT)}: {path.stat().st_size:,} bytes"
        for path in sorted((REPO_ROOT / "serving").rglob("*.py"))
        if not path.name.endswith("_pb2.py") and path.stat().st_size > MAX_SERVING_FILE_BYTES
    ]
    assert not large, f"over {MAX_SERVING_FILE_BYTES:,} bytes:\n" + "\n".join(large)
