"""One clear error when the serving extra is not installed."""

import importlib

__all__ = ["require"]


def require(module):
    """Import ``module`` (fastapi, uvicorn, httpx, pydantic, yaml) or explain."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"Serving a router needs {module!r}, which is not installed; install the "
            "serving extra with `pip install locus_sklearn[serve]` (FastAPI, "
            "uvicorn, httpx and PyYAML)."
        ) from exc
