"""Export the capability-based fallback order as a LiteLLM router configuration."""

import os
from numbers import Integral
from urllib.parse import urlsplit

from sklearn.utils.validation import check_is_fitted

from .._base import _normal_form_hint
from .._evals import _preview

__all__ = ["litellm_config"]


class _NoQueries:
    """The query encoder a router file is loaded with here: the export reads
    only the pool and its model embeddings and never encodes a query, so the
    saved encoder is not needed (a file saved with
    ``include_query_text=False``, or whose encoder model directory is on
    another machine, exports too) and not loaded."""

    def encode(self, texts):
        raise RuntimeError(
            "litellm_config loads a router file without its query encoder; it "
            "encodes no query."
        )


def litellm_config(router, gateway, *, n_fallbacks=None):
    """A LiteLLM proxy configuration with ``model_list`` and ``fallbacks``.

    Each pool model with a backend in ``gateway`` becomes a LiteLLM model
    (an ``openai/`` model at the backend's ``base_url``, its key read from
    the same environment variable; a backend without ``api_key_env`` gets the
    placeholder key ``"no-key"``, as LiteLLM would otherwise send it
    ``OPENAI_API_KEY``), and falls back to the other such models
    in their fallback order (nearest model embeddings first, see
    :func:`~locus_sklearn.inspection.fallback_order`), the order
    ``locus serve``'s gateway uses. Write it with ``yaml.safe_dump(config,
    sort_keys=False, allow_unicode=True)`` (without ``allow_unicode`` a
    non-ASCII model name is written as escapes, ``"mod\\xE8le"``) to a UTF-8
    file and pass it to ``litellm --config``;
    ``router_settings["fallbacks"]`` is also the ``fallbacks=`` argument of
    ``litellm.Router``.

    ``router_settings["num_retries"]`` is 0: LiteLLM retries a failed model
    (its model group) ``num_retries`` times before it falls back, where the
    gateway tries each model once, so here too a failing model is left at
    once for the next one. The gateway's ``fallback.deadline`` has no
    counterpart in the export; each model keeps its backend's ``timeout``.

    Parameters
    ----------
    router : fitted router, str or path-like
        A router with ``classes_`` and ``model_embeddings_``, or a router
        file (:meth:`~locus_sklearn.LocusRouter.save`). Only the pool and
        the model embeddings of a file are used: its query encoder is not
        loaded, so a file saved with ``include_query_text=False`` needs no
        encodings here.
    gateway : str, path-like, mapping or GatewayConfig
        The gateway configuration (see :func:`load_gateway_config`).
    n_fallbacks : int, default=None
        Fallbacks per model; None uses ``fallback.max_attempts - 1``.

    Returns
    -------
    config : dict
        ``{"model_list": [...], "router_settings": {"num_retries": 0,
        "fallbacks": [...]}}``.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If ``router`` is not fitted.

    Examples
    --------
    >>> from locus_sklearn import LocusEmbedder, LocusRouter
    >>> from locus_sklearn.datasets import make_model_pool
    >>> from locus_sklearn.serve import litellm_config
    >>> pool = make_model_pool(n_models=5, n_queries=40, evals_per_model=30,
    ...                        random_state=0)
    >>> router = LocusRouter(LocusEmbedder(pool.encodings, embedding_dim=8,
    ...     n_latents=2, n_blocks=1, n_heads=2, max_epochs=1, enc_size=(16, 64),
    ...     random_state=0)
    ... ).fit(pool.evals)
    >>> names = list(router.classes_)
    >>> gateway = {"backends": {
    ...     name: {"base_url": f"http://127.0.0.1:{9001 + i}/v1",
    ...            "api_key_env": "MY_KEY"} for i, name in enumerate(names)}}
    >>> config = litellm_config(router, gateway, n_fallbacks=1)
    >>> config["model_list"][0]["litellm_params"]["api_key"]
    'os.environ/MY_KEY'
    >>> [len(fallback[name]) for fallback, name in zip(
    ...     config["router_settings"]["fallbacks"], names)]
    [1, 1, 1, 1, 1]
    >>> config["router_settings"]["num_retries"]
    0
    """
    from .._cli._io import load_estimator
    from ..inspection import fallback_order
    from ._config import load_gateway_config

    if isinstance(router, (str, os.PathLike)):
        router = load_estimator(router, encoder=_NoQueries())
    # Before classes_ is read: an unfitted router raised AttributeError.
    check_is_fitted(router)
    gateway = load_gateway_config(gateway)
    pool = [str(m) for m in router.classes_]
    missing = [m for m in gateway.backends if m not in set(pool)]
    if missing:
        raise ValueError(
            f"The gateway configuration has backends for {len(missing)} model(s) "
            f"that are not in the router's pool: {_preview(missing)}; its models "
            f"are {_preview(pool)}." + _normal_form_hint(missing, pool)
        )
    if n_fallbacks is None:
        n_fallbacks = gateway.fallback.max_attempts - 1
    if isinstance(n_fallbacks, bool) or not isinstance(n_fallbacks, Integral):
        raise TypeError(
            f"n_fallbacks must be an int >= 0; got {n_fallbacks!r} "
            f"({type(n_fallbacks).__name__})."
        )
    if n_fallbacks < 0:
        raise ValueError(f"n_fallbacks must be an int >= 0; got {n_fallbacks!r}.")
    n_fallbacks = int(n_fallbacks)
    served = [m for m in pool if m in gateway.backends]
    model_list = []
    for name in served:
        backend = gateway.backends[name]
        if urlsplit(str(backend.base_url)).query:
            # LiteLLM's api_base is a prefix: the OpenAI client appends
            # /chat/completions to it, after the query string.
            raise ValueError(
                f"The backend of {name!r} has base_url={str(backend.base_url)!r}, "
                "with a query string, which a LiteLLM api_base cannot carry (the "
                "request path would be appended after it). Configure that "
                "deployment in LiteLLM by hand (e.g. its azure/ provider with "
                "api_version), or give the gateway a base_url without a query."
            )
        params = {
            "model": f"openai/{gateway.backend_model(name)}",
            "api_base": str(backend.base_url).rstrip("/"),
            "timeout": backend.timeout,
        }
        # Without a key of its own, LiteLLM's openai/ provider would send the
        # OPENAI_API_KEY of its environment to this backend.
        params["api_key"] = (
            f"os.environ/{backend.api_key_env}" if backend.api_key_env else "no-key"
        )
        model_list.append({"model_name": name, "litellm_params": params})
    fallbacks = []
    if len(pool) > 1:
        order = fallback_order(router, metric=gateway.fallback.metric)
        for name in served:
            others = [m for m in order.loc[name] if m in gateway.backends]
            fallbacks.append({name: others[:n_fallbacks]})
    else:
        fallbacks = [{name: []} for name in served]
    # num_retries 0: each model once, as the gateway tries it (LiteLLM would
    # retry a model num_retries times before falling back).
    router_settings = {"num_retries": 0, "fallbacks": fallbacks}
    return {"model_list": model_list, "router_settings": router_settings}
