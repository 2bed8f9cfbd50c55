"""What static tools (mypy, pyright, IDEs) see of the public names.

The packages load some public names on first use (PEP 562 ``__getattr__``),
which a type checker cannot follow: each such name must also be imported
under ``if TYPE_CHECKING:``, or pyright typed ``create_app`` as the union of
every function the ``__getattr__`` returns (and flagged the documented
one-argument call). ``py.typed`` (PEP 561) lets mypy read the package at all.
"""

import ast
import importlib
import importlib.resources
import inspect

import pytest


def _top_level_names(module):
    """(names bound when ``module`` runs, names imported under ``if
    TYPE_CHECKING:``), read from its source: what ``vars(module)`` holds
    depends on which lazy names earlier code asked for."""
    bound, static = set(), set()

    def visit(body, names):
        for node in body:
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                visit(node.body, static)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names.update(a.asname or a.name.partition(".")[0] for a in node.names)
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = (
                    node.targets if isinstance(node, ast.Assign) else [node.target]
                )
                names.update(t.id for t in targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.If | ast.Try):
                for part in (node.body, getattr(node, "orelse", [])):
                    visit(part, names)

    visit(ast.parse(inspect.getsource(module)).body, bound)
    return bound, static


@pytest.mark.parametrize(
    "name", ["locus_sklearn", "locus_sklearn.metrics", "locus_sklearn.serve"]
)
def test_lazy_public_names_are_imported_for_static_tools(name):
    module = importlib.import_module(name)
    assert callable(vars(module).get("__getattr__")), f"{name} loads nothing lazily"
    bound, static = _top_level_names(module)
    lazy = set(module.__all__) - bound
    assert lazy, f"{name} binds every public name at import"
    missing = lazy - static
    assert not missing, (
        f"{name} loads {sorted(missing)} lazily, unseen by type checkers"
    )


def test_package_is_marked_typed():
    # PEP 561: without the marker, mypy refuses `import locus_sklearn`
    # ("missing library stubs or py.typed marker").
    assert importlib.resources.files("locus_sklearn").joinpath("py.typed").is_file()
