"""Sphinx configuration of the locus_sklearn documentation.

Build (warnings are errors, no network needed)::

    sphinx-build -W --keep-going -b html docs docs/_build/html

Environment variables:

- ``LOCUS_DOCS_PLOT_GALLERY=0`` builds the gallery without running the
  examples (faster; no figures).
- ``LOCUS_DOCS_INTERSPHINX=1`` links to the Python, NumPy, scikit-learn,
  pandas and PyTorch docs (fetches their inventories: needs network).
"""

import os
import re
import sys
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive, directives

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The gallery's tiny networks run fastest on one thread, and one thread
# avoids OpenMP spin-waiting when the build shares a busy machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import locus_sklearn  # noqa: E402

project = "locus_sklearn"
author = "The locus_sklearn developers"
copyright = "The locus_sklearn developers"
version = release = locus_sklearn.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py"]
root_doc = "index"

# -- autodoc / autosummary / numpydoc ------------------------------------------
autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False}
autodoc_typehints = "none"
numpydoc_show_class_members = False  # the class template lists members itself
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True

# -- intersphinx: off unless asked for, so an offline build passes -W ----------
intersphinx_mapping = {}
if os.environ.get("LOCUS_DOCS_INTERSPHINX") == "1":
    intersphinx_mapping = {
        "python": ("https://docs.python.org/3", None),
        "numpy": ("https://numpy.org/doc/stable", None),
        "sklearn": ("https://scikit-learn.org/stable", None),
        "pandas": ("https://pandas.pydata.org/docs", None),
        "torch": ("https://docs.pytorch.org/docs/stable", None),
    }

# -- sphinx-gallery -------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",  # run every plot_*.py
    "plot_gallery": os.environ.get("LOCUS_DOCS_PLOT_GALLERY", "True"),
    "download_all_examples": False,
    "within_subsection_order": "FileNameSortKey",
    "remove_config_comments": True,
    "matplotlib_animations": False,
    "reference_url": {"locus_sklearn": None},
}

# -- HTML -----------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"locus_sklearn {release}"
html_static_path = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"cli": [], "benchmarks": [], "getting_started": []}


# -- local directives -----------------------------------------------------------
class LocusHelp(Directive):
    """``.. locus-help:: [COMMAND]``: the ``--help`` text of the ``locus`` CLI,
    generated from the parser at build time so the page never drifts."""

    optional_arguments = 1

    def run(self):
        from locus_sklearn._cli import build_parser

        os.environ["COLUMNS"] = "88"
        parser = build_parser()
        if self.arguments:
            choices = next(
                action.choices
                for action in parser._actions
                if getattr(action, "choices", None) and isinstance(action.choices, dict)
            )
            parser = choices[self.arguments[0]]
        text = parser.format_help()
        node = nodes.literal_block(text, text)
        node["language"] = "text"
        return [node]


class BenchmarkResults(Directive):
    """``.. benchmark-results::``: ``benchmarks/results/README.md`` verbatim if it
    exists, else a note saying that results are not in yet."""

    option_spec = {"path": directives.unchanged}

    def run(self):
        path = ROOT / self.options.get("path", "benchmarks/results/README.md")
        if not path.is_file():
            text = (
                f"No benchmark results yet ({path.relative_to(ROOT)} is absent). "
                "Run the scripts in benchmarks/ to produce them."
            )
            return [nodes.paragraph(text, text)]
        text = path.read_text(encoding="utf-8")
        node = nodes.literal_block(text, text)
        node["language"] = "markdown"
        return [node]


def _check_api_page(app):
    """Fail the build (a warning, and -W) when a public name is missing from
    api.rst, so the reference keeps up with the package's ``__all__``."""
    import importlib

    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    text = (Path(app.srcdir) / "api.rst").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\s{3,}([A-Za-z_][\w.]*)\s*$", text, flags=re.M))
    for module_name in (
        "locus_sklearn",
        "locus_sklearn.metrics",
        "locus_sklearn.datasets",
        "locus_sklearn.baselines",
        "locus_sklearn.inspection",
    ):
        module = importlib.import_module(module_name)
        prefix = module_name.removeprefix("locus_sklearn").lstrip(".")
        prefix += "." if prefix else ""
        for name in module.__all__:
            if name.startswith("__"):
                continue
            if prefix + name not in listed and name not in listed:
                logger.warning(
                    f"api.rst does not list {module_name}.{name} (in __all__)"
                )


_LITERAL = re.compile(r"(``.*?``|`[^`]*`)")
_TRAILING_UNDERSCORE = re.compile(r"\b([A-Za-z]\w*[A-Za-z0-9])_(?![\w`])")
_BARS = re.compile(r"(?<![\\\w])\|(\w+)\|(?!\w)")


def _escape_docstring(app, what, name, obj, options, lines):
    """Escape two reStructuredText traps of scikit-learn-style docstrings,
    outside inline literals: a trailing underscore (``n_features_in_`` read as
    a hyperlink reference) and ``|S_enc|`` (read as a substitution)."""
    for i, line in enumerate(lines):
        parts = _LITERAL.split(line)
        for j in range(0, len(parts), 2):  # even parts are outside literals
            part = _TRAILING_UNDERSCORE.sub(r"\1\\_", parts[j])
            parts[j] = _BARS.sub(r"\\|\1\\|", part)
        lines[i] = "".join(parts)


def _skip_member(app, what, name, obj, skip, options):
    """Leave out scikit-learn's generated metadata-routing setters
    (``set_fit_request`` & co.): their docstrings point into sklearn's docs."""
    if re.fullmatch(r"set_\w+_request", name):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
    # After numpydoc (priority 500) has turned sections into reST.
    app.connect("autodoc-process-docstring", _escape_docstring, priority=600)
    app.add_directive("locus-help", LocusHelp)
    app.add_directive("benchmark-results", BenchmarkResults)
    app.connect("builder-inited", _check_api_page)
