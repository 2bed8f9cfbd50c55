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


def _type_checking_imports(module):
    """Names imported under ``if TYPE_CHECKING:`` at the top of ``module``."""
    names = set()
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in ast.walk(node):
                if isinstance(statement, ast.ImportFrom | ast.Import):
                    names.update(a.asname or a.name for a in statement.names)
    return names


@pytest.mark.parametrize(
    "name", ["locus_sklearn", "locus_sklearn.metrics", "locus_sklearn.serve"]
)
def test_lazy_public_names_are_imported_for_static_tools(name):
    module = importlib.import_module(name)
    assert callable(vars(module).get("__getattr__")), f"{name} loads nothing lazily"
    lazy = {n for n in module.__all__ if n not in vars(module)}
    assert lazy, f"{name} binds every public name at import"
    missing = lazy - _type_checking_imports(module)
    assert not missing, (
        f"{name} loads {sorted(missing)} lazily, unseen by type checkers"
    )


def test_package_is_marked_typed():
    # PEP 561: without the marker, mypy refuses `import locus_sklearn`
    # ("missing library stubs or py.typed marker").
    assert importlib.resources.files("locus_sklearn").joinpath("py.typed").is_file()
