"""Serve a fitted router: a routing service and an OpenAI-compatible gateway.

Needs the serving extra: ``pip install locus_sklearn[serve]`` (FastAPI,
uvicorn, httpx, PyYAML). Run it with ``locus serve ROUTER [--config
gateway.yaml]``, or build the app with :func:`create_app` and run it with any
ASGI server.

- :func:`create_app`: ``POST /route``, ``GET /models``, ``GET /healthz``,
  ``POST /admin/reload``; with a gateway configuration also
  ``POST /v1/chat/completions`` and ``GET /v1/models``.
- :func:`load_gateway_config`: read and validate the backends file.
- :func:`litellm_config`: the fallback order as a LiteLLM configuration.
"""

from typing import TYPE_CHECKING

__all__ = ["create_app", "litellm_config", "load_gateway_config"]

if TYPE_CHECKING:  # what static tools and IDEs see (each name, not a union)
    from ._app import create_app
    from ._config import load_gateway_config
    from ._litellm import litellm_config


def __getattr__(name):
    # Imported on first use, so that ``locus calibrate`` (in this package's
    # CLI) works without the serving extra.
    if name == "create_app":
        from ._app import create_app

        return create_app
    if name == "load_gateway_config":
        from ._config import load_gateway_config

        return load_gateway_config
    if name == "litellm_config":
        from ._litellm import litellm_config

        return litellm_config
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
