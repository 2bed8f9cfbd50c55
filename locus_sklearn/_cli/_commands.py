"""What each ``locus`` subcommand does, given its parsed arguments.

Each ``cmd_*`` function takes the ``argparse.Namespace`` of its subcommand,
prints its results (a table, tab-separated values or, with ``--json``, one
JSON document) on stdout and notes on stderr, and returns the exit status.
The estimators validate everything they can; the commands only translate
their messages into the command line's terms.
"""

import contextlib
import difflib
import re
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ._errors import EXIT_USAGE, CommandError, interrupts_kept
from ._io import (
    check_folder_writable,
    check_not_an_input,
    check_writable,
    costs_for,
    echo,
    emit_json,
    format_table,
    load_estimator,
    note,
    progress_to_stderr,
    read_costs,
    read_embeddings,
    read_encodings,
    read_evals,
    read_queries,
    shorten,
    write_csv,
    write_estimator,
)
from ._types import resolve_models

__all__ = [
    "cmd_demo",
    "cmd_embed",
    "cmd_fit",
    "cmd_neighbors",
    "cmd_portfolio",
    "cmd_onboard",
    "cmd_route",
    "cmd_select",
    "routing_scores",
]

# Estimator parameters and the options that set them, for error messages.
_OPTION_OF = [
    ("model_costs=", "--costs FILE"),
    ("model_costs", "--costs"),
    ("cost_weight=", "--cost-weight "),
    ("cost_weight", "--cost-weight"),
]


# Precomputed encodings (a router fitted with them, --encodings) and the
# query encoder (--encoder), as the estimators name them.
_ENCODER_TERMS = [
    (
        "encoder (a mapping of precomputed encodings) has no vector",
        "The precomputed encodings (saved in the router, or given with "
        "--encodings) have no vector",
    ),
    ("must be a key of the mapping (it has", "must have one there (they have"),
    ("or use an encoder that encodes text", "or add it with --encodings FILE.npz"),
    (
        "Pass the path of a local sentence-transformers model directory (e.g. one "
        "saved with SentenceTransformer.save(path)), a cached hub name, an "
        "object with an encode(list_of_str) method, or a mapping "
        "{query_id: vector}; encoder=None uses the bundled all-MiniLM-L6-v2.",
        "Give --encoder the path of a local sentence-transformers model directory "
        "(e.g. one saved with SentenceTransformer.save(path)) or a cached hub "
        "name, or precomputed vectors with --encodings FILE.npz; without either, "
        "the bundled all-MiniLM-L6-v2 is used.",
    ),
    # A file saved without query text, or with a custom encoder object: the
    # way out in the command's terms (before the generic pair below).
    (
        "pass them again as a mapping with load(path, encoder=mapping)",
        "give them again with --encodings FILE.npz (its queries and vectors arrays)",
    ),
    (
        "pass it again with load(path, encoder=...)",
        "such a file cannot be used from the command line: load it in Python "
        "and pass the encoder object again",
    ),
    # A query encoder of another dimension than the one the file was fitted
    # with (an --encoder folder, or --encodings vectors).
    (
        "encoder gives",
        "The query encoder (--encoder, or the vectors of --encodings) gives",
    ),
    (
        "pass the encoder it was fitted with",
        "give the one it was fitted with: --encodings vectors of that "
        "dimension, or, where the file saved its encoder, neither --encoder "
        "nor --encodings",
    ),
    ("encoder=", "--encoder "),
]


def _in_terms(message, pairs):
    """``message`` with each (parameter text, option text) pair replaced
    where the parameter text stands on its own (``evals`` but not
    ``n_evals``, ``model=`` but not ``n_model=``), and not where it stands
    in its option form already: with the pair ("name=", "--set name="),
    "--set name=1", written by an earlier pair, stays as it is."""
    for parameter, option in pairs:
        before = r"(?<![\w-])" if re.match(r"\w", parameter) else ""
        if option != parameter and option.endswith(parameter):
            before += f"(?<!{re.escape(option[: -len(parameter)])})"
        after = r"(?!\w)" if re.search(r"\w$", parameter) else ""
        pattern = before + re.escape(parameter) + after
        message = re.sub(pattern, option.replace("\\", r"\\"), message)
    return message


@contextlib.contextmanager
def _in_option_terms(*more, common=True):
    """Re-raise an estimator's ValueError/TypeError naming options, not
    parameters ("pass model_costs=" becomes "pass --costs FILE").

    ``more`` holds further (parameter text, option text) pairs, replaced
    before the common ones (the costs and the cost weight; left out with
    ``common=False``, where those words name something else, such as a
    gateway configuration's ``cost_weight``).
    """
    try:
        yield
    except (ValueError, TypeError) as exc:
        # scikit-learn's "The 'name' parameter of ... must be" is an
        # InvalidParameterError, made from its message as these two are.
        from sklearn.utils._param_validation import InvalidParameterError

        message = _in_terms(str(exc), [*more, *(_OPTION_OF if common else [])])
        plain = (ValueError, TypeError, InvalidParameterError)
        if message == str(exc) or type(exc) not in plain:
            raise
        raise type(exc)(message) from None


@contextlib.contextmanager
def _warnings_in_option_terms(*pairs):
    """Show the warnings raised in the block with ``pairs`` replaced, as
    :func:`_in_option_terms` does for errors (after the block, by the
    warning handler in place outside it)."""
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            yield
    finally:
        for warning in caught:
            warnings.warn_explicit(
                _in_terms(str(warning.message), pairs),
                warning.category,
                warning.filename,
                warning.lineno,
            )


def _encoder_arg(args):
    """The ``encoder=`` value from ``--encoder``/``--encodings`` (None if neither).

    ``--encoder`` is a folder or, as for the estimators, the name of a hub
    model in the local Hugging Face cache. One that is neither is a missing
    file (exit status 3), as a missing ``--encodings`` file is; the
    estimators refuse it as a bad value.
    """
    if getattr(args, "encodings", None):
        return read_encodings(args.encodings)
    if getattr(args, "encoder", None):
        from .._encoders import _cached_hub_model

        if not Path(args.encoder).expanduser().exists():
            # The estimators' own look-up (offline): one found in the cache
            # but incomplete is a bad value (1), as a folder with no model is.
            with _in_option_terms(*_ENCODER_TERMS, common=False):
                cached = _cached_hub_model(args.encoder)
            if cached is None:
                raise FileNotFoundError(
                    f"No such --encoder folder: {str(args.encoder)!r}, nor a model "
                    "of that name in the local Hugging Face cache. Models are "
                    "never downloaded, so a hub name such as "
                    "'sentence-transformers/all-mpnet-base-v2' is used only once "
                    "it is in the cache (downloaded before, e.g. by "
                    "huggingface_hub.snapshot_download(name)): give --encoder the "
                    "path of a local sentence-transformers model folder (e.g. one "
                    "saved with SentenceTransformer.save(path)) or a cached hub "
                    "name, or precomputed vectors with --encodings FILE.npz."
                )
        return args.encoder
    return None


def _load(path, args, *, embedder_ok=False):
    encoder = _encoder_arg(args)
    with _in_option_terms(*_ENCODER_TERMS, common=False):
        return load_estimator(
            path,
            encoder=encoder,
            device=getattr(args, "device", None),
            embedder_ok=embedder_ok,
        )


def routing_scores(router, queries):
    """P(correct) and the routing utility (what ``predict`` maximises) of
    ``router`` for ``queries``, both of shape (n_queries, n_models).

    The utility comes from the router's own rule (``BaseRouter._utility``,
    which its ``decision_function`` applies), computed from one prediction.
    """
    proba = router.predict_proba(queries)
    return proba, router._utility(proba)


# ------------------------------------------------------------------------ demo
def cmd_demo(args):
    from ._demo import run_demo

    if args.evals is not None and args.open_weights is not None:
        option = "--open-weights" if args.open_weights else "--all-models"
        raise CommandError(
            f"{option} chooses among the built-in data's models; with --evals "
            "the demo uses every model of the file: give only one of them.",
            status=EXIT_USAGE,
        )
    check_folder_writable(args.output, "--output")  # before any work
    summary = run_demo(
        args.evals,
        output=args.output,
        open_weights=args.open_weights is not False,
        epochs=args.epochs,
        seed=args.seed,
        quick=args.quick,
        stream=sys.stderr if args.json else None,
        threads=getattr(args, "threads", None),
    )
    if args.json:
        emit_json(summary)
    return 0


# ------------------------------------------------------------------------- fit
# The options of ``fit`` that set a LocusEmbedder hyper-parameter, by name.
_FIT_OPTIONS = {
    "max_epochs": ("--epochs", "epochs"),
    "embedding_dim": ("--embedding-dim", "embedding_dim"),
    "random_state": ("--seed", "seed"),
}


def _check_set_conflicts(args):
    """Refuse ``--set NAME=...`` together with the option that sets NAME
    (``--set max_epochs=5 --epochs 1``), or twice (``--set max_epochs=1
    --set max_epochs=2``): neither may silently win."""
    seen = {}
    for name, value in args.set or []:
        if name in seen:
            raise CommandError(
                f"--set {name}={seen[name]!r} and --set {name}={value!r} both set "
                f"{name}; give it once.",
                status=EXIT_USAGE,
            )
        seen[name] = value
    for name, value in args.set or []:
        if name not in _FIT_OPTIONS:
            continue
        option, dest = _FIT_OPTIONS[name]
        given = getattr(args, dest, None)
        if given is not None:
            raise CommandError(
                f"--set {name}={value!r} and {option} {given} both set {name}; "
                "give only one of them.",
                status=EXIT_USAGE,
            )


# LocusEmbedder parameters that --set does not change: fit's own options do.
_SET_BY_OPTION = {
    "encoder": "--encoder DIR or --encodings FILE.npz",
    "memory": "--cache DIR",
    "device": "--device",
    "verbose": "-q/--quiet",
}

# The warnings of a fitted router's add_models and embed (and of fit), in the
# commands' terms. No command removes a model, and route has no shrinkage
# option: the plain router is a refit. Each pair is tested against the
# warning the library gives (tests/test_cli.py, "warnings_name_options").
_ROUTER_WARNING_TERMS = [
    ('(chosen by shrinkage="auto")', "(chosen by --shrinkage auto)"),
    ("shrinkage_=", "shrinkage "),
    ("predict_proba blends", "the router blends"),
    ("remove it (remove_models), ", ""),
    ("route with shrinkage=None", "refit with `locus fit --shrinkage none`"),
    # The router's enc_size is fixed: the number is what can be acted on.
    ("enc_size[0]=", ""),
]

# fit's own: phrases that need more than ``name=`` -> ``--set name=``.
_FIT_WARNING_TERMS = [
    (
        "LocusEmbedder(agreement_weight=0.1, refine_steps=10)",
        "--set agreement_weight=0.1 --set refine_steps=10",
    ),
    ("Another random_state", "Another --seed"),
    ("Set validation_fraction=", "Give --set validation_fraction="),
    # LocusRouter.fit adds models with one evaluation; it refuses a table
    # where every model has one.
    ("as add_models adds them", "as `locus onboard` adds them"),
]  # fmt: skip


# LocusRouter parameters that fit's options set.
_ROUTER_OPTIONS = {
    "shrinkage": "--shrinkage",
    "shrinkage_repeats": "--shrinkage-repeats",
}


def _fit_terms(embedder, set_names=()):
    """The (parameter text, option text) pairs of ``fit``'s errors and
    warnings: LocusEmbedder's ``name=`` as ``--set name=`` (or as the option
    that sets it: ``max_epochs=`` is ``--epochs``), and its ``enc_size[0]``
    as the ``--set`` that gives it. scikit-learn's "The 'name' parameter of
    LocusEmbedder must be ..." names the ``--set name=VALUE`` given (the
    names in ``set_names``) or the option with its value."""
    pairs = list(_FIT_WARNING_TERMS)
    params = embedder.get_params(deep=False)
    for name in params:
        if name in _SET_BY_OPTION:  # encoder= is in _ENCODER_TERMS
            continue
        option = f"{_FIT_OPTIONS[name][0]} " if name in _FIT_OPTIONS else None
        pairs.append((f"{name}=", option or f"--set {name}="))
    # After the ``name=`` pairs, which would rewrite the "max_epochs=" of
    # "--set max_epochs=0" written here.
    for name, value in params.items():
        if name in _SET_BY_OPTION:
            continue
        if name in _FIT_OPTIONS and name not in set_names:
            given = f"{_FIT_OPTIONS[name][0]} {value!r}"
        else:
            given = f"--set {name}={value!r}"
        pairs.append((f"The {name!r} parameter of LocusEmbedder", given))
    for name, option in _ROUTER_OPTIONS.items():
        pairs.append((f"The {name!r} parameter of LocusRouter", option))
    enc_size = embedder.enc_size
    if isinstance(enc_size, tuple) and len(enc_size) == 2:  # else fit refuses it
        low, high = enc_size
        given = f"--set 'enc_size=({low}, {high})'"
        pairs += [
            (f"enc_size[0]={low} evaluations (",
             f"{low} evaluations (the low end of {given}: "),
            (f"enc_size[0]={low}", f"{low}, the low end of {given}"),
        ]  # fmt: skip
    return [*pairs, *_ROUTER_WARNING_TERMS, *_ENCODER_TERMS]


def _embedder_params(args):
    from .. import LocusEmbedder

    valid = LocusEmbedder().get_params()
    params = {}
    for name, value in args.set or []:
        if name not in valid or name in _SET_BY_OPTION:
            close = difflib.get_close_matches(
                name, [n for n in valid if n not in _SET_BY_OPTION], n=1
            )
            hint = f"; did you mean {close[0]}?" if close else ""
            if name in _SET_BY_OPTION:
                hint = f"; fit sets it with {_SET_BY_OPTION[name]}"
            raise CommandError(
                f"--set {name}=...: {name!r} is not a LocusEmbedder hyper-parameter "
                f"that --set can change{hint} (see `locus fit --help`).",
                status=EXIT_USAGE,
            )
        if name == "enc_size" and isinstance(value, list):
            value = tuple(value)
        params[name] = value
    if args.epochs is not None:
        params["max_epochs"] = args.epochs
    if args.embedding_dim is not None:
        params["embedding_dim"] = args.embedding_dim
    if args.seed is not None:
        params["random_state"] = args.seed
    return params


def cmd_fit(args):
    from .. import LocusEmbedder, LocusRouter
    from .._encoders import QueryEncoder

    _check_set_conflicts(args)
    if args.shrinkage_repeats is not None and args.shrinkage != "auto":
        shown = "none" if args.shrinkage is None else f"{args.shrinkage:g}"
        raise CommandError(
            f"--shrinkage-repeats {args.shrinkage_repeats} applies to --shrinkage "
            f"auto only; with --shrinkage {shown} there is nothing to choose. "
            "Leave out one of them.",
            status=EXIT_USAGE,
        )
    if args.cache and args.encodings:
        raise CommandError(
            f"--cache {args.cache!r} caches what the query encoder computes; with "
            "--encodings nothing is encoded, so there is nothing to cache. Leave "
            "out one of them.",
            status=EXIT_USAGE,
        )
    check_writable(args.output, "ROUTER")
    check_not_an_input(
        args.output,
        "ROUTER",
        {"EVALS": args.evals, "--costs": args.costs, "--encodings": args.encodings},
    )
    if args.cache:
        check_folder_writable(args.cache, "--cache")  # before any work
    evals = read_evals(args.evals)
    models = sorted(evals["model"].unique())
    model_costs = None
    if args.costs:
        costs = costs_for(read_costs(args.costs), models, args.costs)
        model_costs = dict(zip(models, costs.tolist(), strict=True))
    encoder = _encoder_arg(args)
    if not isinstance(encoder, Mapping):
        # Show the encoding progress of a sentence-transformers model.
        encoder = QueryEncoder(encoder, show_progress_bar=not args.quiet)
        with _in_option_terms(*_ENCODER_TERMS, common=False):
            encoder.fit()  # resolve the model directory now: a bad path fails at once
    embedder = LocusEmbedder(
        encoder,
        memory=args.cache,
        device=args.device,
        verbose=0 if args.quiet else 1,
        **_embedder_params(args),
    )
    terms = _fit_terms(embedder, {name for name, _ in args.set or []})
    with _in_option_terms(*terms):
        embedder._validate_params()  # bad --set values fail before any work
    if not args.quiet:
        note(
            f"Training LOCUS on {len(models)} models, {len(evals):,} evaluations, "
            f"{evals['query'].nunique():,} queries ..."
        )
    with (
        progress_to_stderr(),
        _warnings_in_option_terms(*terms),
        _in_option_terms(*terms),
        interrupts_kept(),
    ):
        router = LocusRouter(
            embedder,
            shrinkage=args.shrinkage,
            shrinkage_repeats=args.shrinkage_repeats or 1,
        ).fit(evals, model_costs=model_costs)
    write_estimator(router, args.output, "ROUTER")
    dim = router.model_embeddings_.shape[1]
    note(
        f"Saved a LocusRouter ({len(router.classes_)} models, {dim}-d embeddings, "
        f"{router.embedder_.n_epochs_} epochs, shrinkage {router.shrinkage_:g}"
        f"{', with costs' if model_costs else ''}) to {args.output}"
    )
    if args.json:
        emit_json(
            {
                "output": str(args.output),
                "models": router.classes_.tolist(),
                "embedding_dim": dim,
                "n_epochs": router.embedder_.n_epochs_,
                "shrinkage": router.shrinkage_,
                "costs": model_costs,
            }
        )
    return 0


# ----------------------------------------------------------------------- route
def _ranking(router, queries, args):
    """(proba, order): P(correct) and, per query, the indices of the best
    ``--top`` models among those ``--models`` allows, best first."""
    from .._base import check_model_subset

    if args.cost_weight is not None:
        _check_cost_weight_finite(args.cost_weight, router.model_costs_)
        router.set_params(cost_weight=args.cost_weight)
    else:
        _check_cost_weight_finite(router.cost_weight, router.model_costs_, given=False)
    allowed = np.arange(len(router.classes_))
    if args.models:
        models = resolve_models(args.models, router.classes_)
        mask = check_model_subset(models, router.classes_, name="--models")
        allowed = np.flatnonzero(mask)
    with _in_option_terms(*_ENCODER_TERMS):
        proba, utility = routing_scores(router, queries)
    # Stable sort on -utility: ties go to the first model, as in predict().
    best = np.argsort(-utility[:, allowed], axis=1, kind="stable")
    return proba, allowed[best[:, : args.top]]


def _check_cost_weight_finite(cost_weight, costs, *, given=True):
    """Refuse a cost weight so large that ``cost_weight * cost`` overflows
    for some model: the utilities of those models would all be -inf, and
    ranked by pool order instead of by cost (as ``locus serve`` refuses
    it). ``given``: from ``--cost-weight``, else the router's own."""
    if costs is None or not len(costs) or not cost_weight:
        return  # no costs: the router reports that --cost-weight needs them
    largest = float(np.max(costs))
    with np.errstate(over="ignore"):
        product = float(cost_weight) * largest
    if not np.isfinite(product):
        what = "--cost-weight" if given else "The router's saved cost weight"
        fix = (
            "give a smaller --cost-weight"
            if given
            else "pass a smaller --cost-weight, or refit or recalibrate the router"
        )
        raise ValueError(
            f"{what} {float(cost_weight):g} is too large for the router's costs: "
            f"times the largest cost ({largest:g}) it is not a finite number; "
            f"{fix}."
        )


def cmd_route(args):
    router = _load(args.router, args)
    queries = read_queries(args.queries, args.file)
    proba, order = _ranking(router, queries, args)
    classes, costs = router.classes_, router.model_costs_
    if args.json:
        emit_json(
            [
                {
                    "query": query,
                    "model": classes[order[i, 0]],
                    "ranking": [
                        {
                            "model": classes[j],
                            "p_correct": float(proba[i, j]),
                            "cost": None if costs is None else float(costs[j]),
                        }
                        for j in order[i]
                    ],
                }
                for i, query in enumerate(queries)
            ]
        )
        return 0
    top = order.shape[1]
    header = ["query"] + (["rank"] if top > 1 else []) + ["model", "P(correct)"]
    header += ["cost"] if costs is not None else []
    rows = []
    for i, query in enumerate(queries):
        # 48 terminal columns, as written: a wide character takes two.
        shown = query if args.tsv else shorten(query, 48)
        for rank, j in enumerate(order[i], start=1):
            row = [shown if rank == 1 or args.tsv else ""]
            row += [rank] if top > 1 else []
            row += [classes[j], f"{proba[i, j]:.3f}"]
            row += [f"{costs[j]:g}"] if costs is not None else []
            rows.append(row)
    echo(format_table(header, rows, tsv=args.tsv))
    return 0


# ----------------------------------------------------------------------- embed
def cmd_embed(args):
    from .. import LocusRouter

    check_writable(args.output, "EMBEDDINGS")
    check_not_an_input(
        args.output,
        "EMBEDDINGS",
        {
            "ROUTER_OR_EMBEDDER": args.model,
            "EVALS": args.evals,
            "--encodings": args.encodings,
        },
    )
    if not str(args.output).lower().endswith(".csv"):
        # select and neighbors read embeddings from csv files only.
        raise CommandError(
            f"-o/--output {str(args.output)!r}: embeddings are written as csv; "
            "give a file name ending in .csv.",
            status=EXIT_USAGE,
        )
    estimator = _load(args.model, args, embedder_ok=True)
    if not isinstance(estimator, LocusRouter):
        # The file's own set_output (load restores it) is for a user's
        # transform; the command writes a csv from an array, and a saved
        # "polars" output would need polars installed for nothing. This
        # loaded copy is the command's alone.
        estimator.set_output(transform="default")
    evals = read_evals(args.evals)
    with (
        _warnings_in_option_terms(*_ROUTER_WARNING_TERMS),
        _in_option_terms(*_ENCODER_TERMS, common=False),
    ):
        if isinstance(estimator, LocusRouter):
            embeddings = estimator.embed(evals)
        else:
            embeddings = estimator.transform(evals)
    models = sorted(evals["model"].unique())
    frame = pd.DataFrame(
        embeddings,
        # Object, not pandas' inferred str dtype (lone surrogates).
        index=pd.Index(models, dtype=object, name="model"),
        columns=[f"locus{i}" for i in range(embeddings.shape[1])],
    )
    write_csv(frame, args.output, "EMBEDDINGS")
    note(
        f"Wrote {len(frame)} embeddings of dimension {frame.shape[1]} to {args.output}"
    )
    if args.json:
        emit_json(
            {
                "output": str(args.output),
                "models": models,
                "embeddings": frame.to_numpy().tolist(),
            }
        )
    return 0


# --------------------------------------------------------------------- onboard
def _onboard_costs(router, models, path):
    """``model_costs`` for ``add_models``: the costs file's, and for a model
    already in the pool that the file does not list, the cost it has (a
    refresh keeps its cost). None when there is nothing to pass, so that the
    estimator's own rules (new models need costs) decide."""
    given = read_costs(path) if path else {}
    if router.model_costs_ is not None:
        pool = dict(zip(router.classes_, router.model_costs_.tolist(), strict=True))
        given = {**{m: pool[m] for m in models if m in pool}, **given}
    wanted = {m: given[m] for m in models if m in given}
    if not path and len(wanted) < len(models):
        return None
    costs = costs_for(wanted, models, path) if path else list(wanted.values())
    return dict(zip(models, np.asarray(costs).tolist(), strict=True))


def cmd_onboard(args):
    router = _load(args.router, args)
    evals = read_evals(args.evals)
    output = args.output or args.router
    check_writable(output, "ROUTER")
    # Writing over ROUTER is what onboard does without -o; not over the others.
    check_not_an_input(
        output,
        "-o/--output" if args.output else "ROUTER",
        {"EVALS": args.evals, "--costs": args.costs, "--encodings": args.encodings},
    )
    models = sorted(evals["model"].unique())
    before = set(router.classes_)
    with (
        _warnings_in_option_terms(*_ROUTER_WARNING_TERMS),
        _in_option_terms(*_ENCODER_TERMS),
    ):
        router.add_models(evals, model_costs=_onboard_costs(router, models, args.costs))
    write_estimator(router, output, "ROUTER")  # atomic: the old file or the new
    new = [m for m in models if m not in before]
    old = [m for m in models if m in before]
    parts = []
    if new:
        parts.append(f"added {len(new)} model(s): {', '.join(new)}")
    if old:
        parts.append(f"refreshed {len(old)}: {', '.join(old)}")
    summary = "; ".join(parts)
    # The first letter only: str.capitalize() lowercased the model names.
    note(
        f"{summary[:1].upper()}{summary[1:]}. The pool now has "
        f"{len(router.classes_)} models; saved to {output}"
    )
    if args.json:
        emit_json(
            {
                "output": str(output),
                "added": new,
                "refreshed": old,
                "models": router.classes_.tolist(),
            }
        )
    return 0


# ---------------------------------------------------------------------- select
def _selector(args, names, X, costs):
    from .. import BudgetGreedySelector, KCenterSelector, KMedoidsSelector
    from .._selectors import _within_budget

    if args.budget is not None:
        if args.method:
            raise CommandError(
                f"--method {args.method} applies to --k; --budget always selects "
                "greedily. Leave out one of them.",
                status=EXIT_USAGE,
            )
        if costs is None and (args.budget != int(args.budget) or args.budget < 1):
            raise CommandError(
                f"--budget {args.budget:g}: without --costs the budget is a number "
                "of models, a whole number >= 1; give --costs FILE for a budget in "
                "cost units.",
                status=EXIT_USAGE,
            )
        # The selector's own test: a budget within rounding of a cost fits.
        if (
            costs is not None
            and len(costs)
            and not _within_budget([costs.min()], args.budget)
        ):
            cheapest = int(np.argmin(costs))
            raise ValueError(
                f"--budget {args.budget:g} is below the cheapest model's cost in "
                f"--costs ({costs[cheapest]:g}, {names[cheapest]!r}); no model fits."
            )
        selector = BudgetGreedySelector(budget=args.budget, metric=args.metric)
        return selector.fit(X, costs=costs)
    if args.k > len(X):
        raise ValueError(
            f"--k {args.k} is larger than the number of models ({len(X)})."
        )
    cls = KCenterSelector if args.method == "kcenter" else KMedoidsSelector
    return cls(n_select=args.k, metric=args.metric).fit(X)


def cmd_select(args):
    names, X = read_embeddings(args.embeddings)
    costs = None
    if args.costs:
        costs = costs_for(read_costs(args.costs), names, args.costs)
    selector = _selector(args, names, X, costs)
    selected = selector.selected_indices_
    covers = np.bincount(selector.labels_, minlength=len(selected))
    # The selector's exactly rounded sum: summed in selection order, 0.1,
    # 0.3 and 0.2 came out 0.6000000000000001, over --budget 0.6.
    total = None if costs is None else selector.total_cost_
    if args.json:
        emit_json(
            {
                "selected": [
                    {
                        "model": names[i],
                        "covers": int(n),
                        "cost": None if costs is None else float(costs[i]),
                    }
                    for i, n in zip(selected, covers, strict=True)
                ],
                "objective": float(selector.objective_),
                "total_cost": total,
                "n_models": len(names),
            }
        )
        return 0
    header = ["rank", "model", "covers"] + (["cost"] if costs is not None else [])
    rows = []
    for rank, (i, n) in enumerate(zip(selected, covers, strict=True), start=1):
        rows.append(
            [rank, names[i], n] + ([f"{costs[i]:g}"] if costs is not None else [])
        )
    echo(format_table(header, rows, tsv=args.tsv))
    if not args.tsv:
        spent = f"; total cost {total:g}" if costs is not None else ""
        note(
            f"Selected {len(selected)} of {len(names)} models "
            f"(coverage objective {selector.objective_:.3f}{spent}); 'covers' counts "
            "the models nearest to each selected one."
        )
    return 0


# ------------------------------------------------------------------- portfolio
# ExpectedAccuracySelector's words (its X is the router's P(correct) here).
_PORTFOLIO_TERMS = [
    (
        "If X holds one value per model on every query (a LocusRouter at "
        "shrinkage_ 1 predicts each model's mean score), take X from a router "
        "with shrinkage=None",
        "If the router's P(correct) is one value per model on every query (a "
        "router at shrinkage 1 predicts each model's mean score), refit it with "
        "`locus fit --shrinkage none`",
    ),
    ("taken in row order", "taken in the pool's order"),
    ("(F stays", "(the expected accuracy stays"),
    ("the same F", "the same expected accuracy"),
    ("a smaller n_select", "a smaller --k"),
    ("n_select=", "--k "),
]


def cmd_portfolio(args):
    from .. import ExpectedAccuracySelector

    router = _load(args.router, args)
    queries = read_queries(args.queries, args.file)
    names = router.classes_
    if args.k > len(names):
        raise ValueError(
            f"--k {args.k} is larger than the number of models ({len(names)})."
        )
    with _in_option_terms(*_ENCODER_TERMS):
        predicted = router.predict_proba(queries).T  # (n_models, n_queries)
    with (
        _warnings_in_option_terms(*_PORTFOLIO_TERMS),
        _in_option_terms(*_PORTFOLIO_TERMS),
    ):
        selector = ExpectedAccuracySelector(n_select=args.k).fit(predicted)
    selected, path = selector.selected_indices_, selector.objective_path_
    if args.json:
        emit_json(
            {
                "selected": [
                    {"model": names[i], "expected_accuracy": float(value)}
                    for i, value in zip(selected, path, strict=True)
                ],
                "full_pool_expected_accuracy": selector.full_objective_,
                "n_queries": len(queries),
                "n_models": len(names),
            }
        )
        return 0
    rows = [
        [rank, names[i], f"{value:.3f}"]
        for rank, (i, value) in enumerate(zip(selected, path, strict=True), start=1)
    ]
    echo(format_table(["rank", "model", "expected accuracy"], rows, tsv=args.tsv))
    if not args.tsv:
        note(
            f"Selected {len(selected)} of {len(names)} models for {len(queries)} "
            "queries; 'expected accuracy' is that of routing among the models up to "
            "that rank, by the router's P(correct) (all models: "
            f"{selector.full_objective_:.3f})."
        )
    return 0


# ------------------------------------------------------------------- neighbors
def cmd_neighbors(args):
    from ..inspection import nearest_models

    terms = [("model=", "MODEL "), ("k=", "--k "), ("metric=", "--metric ")]
    if str(args.router).lower().endswith((".csv", ".csv.gz")):
        for option in ("encoder", "encodings", "device"):
            if getattr(args, option, None) is not None:
                raise CommandError(
                    f"--{option} {getattr(args, option)}: ROUTER "
                    f"{str(args.router)!r} is an embeddings csv, read as it is (no "
                    f"query encoder, no device); --{option} applies to a saved "
                    "router only.",
                    status=EXIT_USAGE,
                )
        names, X = read_embeddings(args.router)
        if args.model in set(names) and args.k > len(names) - 1:
            raise ValueError(
                f"--k {args.k} is larger than the other models ({len(names) - 1})."
            )
        with _in_option_terms(*terms, common=False):
            table = nearest_models(
                X, args.model, k=args.k, metric=args.metric, names=names
            )
    else:
        router = _load(args.router, args)
        n_others = len(router.classes_) - 1
        if args.model in set(router.classes_) and args.k > n_others:
            raise ValueError(
                f"--k {args.k} is larger than the other models ({n_others})."
            )
        with _in_option_terms(*terms, common=False):
            table = nearest_models(router, args.model, k=args.k, metric=args.metric)
    if args.json:
        emit_json(
            [
                {"rank": int(rank), "model": m, "distance": float(d)}
                for rank, (m, d) in table.iterrows()
            ]
        )
        return 0
    rows = [[rank, m, f"{d:.4f}"] for rank, (m, d) in table.iterrows()]
    echo(format_table(["rank", "model", "distance"], rows, tsv=args.tsv))
    return 0


# match_models_by_scores(ENDPOINTS, KNOWN) and calibrate_score_threshold(KNOWN)
# name their parameters; match names its arguments and options.
_MIN_SHARED_TERMS = [("min_shared=", "--min-shared "), ("min_shared", "--min-shared")]
_MATCH_TERMS = [
    ("reference_evals", "KNOWN"),
    ("evals", "ENDPOINTS"),
    ("threshold=", "--threshold "),
    *_MIN_SHARED_TERMS,
]
_CALIBRATE_THRESHOLD_TERMS = [
    ("raise n_evals or lower min_shared", "score the endpoints on more queries, or "
     "lower --min-shared"),
    ("of n_evals=", "of "),
    # n_evals is the fewest known queries an endpoint has (not an option).
    ("queries (a larger n_evals)", "queries (score the endpoints on more of "
     "KNOWN's queries)"),
    ("pass an explicit threshold= to the matching function "
     "(match_models_by_scores, or match_models for embeddings)",
     "pass an explicit --threshold"),
    ("false_match_rate=", "--false-match-rate "),
    ("false_match_rate", "--false-match-rate"),
    *_MIN_SHARED_TERMS,
    ("evals", "KNOWN"),
]  # fmt: skip


def cmd_match(args):
    from ..inspection import calibrate_score_threshold, match_models_by_scores

    known = read_evals(args.known)
    endpoints = read_evals(args.endpoints)
    threshold = args.threshold
    if threshold is None:
        n_known = known["query"].nunique()
        if n_known < args.min_shared:
            raise ValueError(
                f"KNOWN has scores on {n_known} queries, fewer than --min-shared "
                f"{args.min_shared}: score the known models on more queries, or "
                "lower --min-shared."
            )
        # Calibrate for the smallest probe: its rates are the noisiest, so a
        # threshold that lets few different-model pairs through there lets
        # fewer through for the larger probes. A probe is the endpoint's
        # queries that KNOWN has too: only those are compared, and counting
        # the others would calibrate on larger, less noisy sets than are
        # compared, a threshold too loose (false matches).
        in_known = endpoints["query"].isin(set(known["query"])).to_numpy()
        # Grouped by codes (in order of appearance), ids as objects: pandas
        # would infer its str dtype for them, which refuses a lone surrogate.
        codes, names = pd.factorize(endpoints["model"].to_numpy(dtype=object))
        queries = endpoints["query"].to_numpy(dtype=object)
        sizes = (
            pd.Series(queries[in_known], dtype=object)
            .groupby(codes[in_known])
            .nunique()
            .reindex(range(len(names)), fill_value=0)
            .set_axis(pd.Index(names, dtype=object))
        )
        n_evals = int(sizes.min())  # at most n_known: queries of KNOWN only
        if n_evals < args.min_shared:
            raise ValueError(
                f"Endpoint {sizes.idxmin()!r} has scores on {n_evals} of KNOWN's "
                f"queries, fewer than --min-shared {args.min_shared}: score it on "
                "more of the known queries, or lower --min-shared."
            )
        with _in_option_terms(*_CALIBRATE_THRESHOLD_TERMS, common=False):
            calibration = calibrate_score_threshold(
                known,
                n_evals=n_evals,
                false_match_rate=args.false_match_rate,
                min_shared=args.min_shared,
                random_state=args.random_state,
            )
        threshold = calibration.threshold
        note(
            f"threshold {threshold:.4f}: lets {calibration.false_match_rate:.1%} of "
            f"the pairs of different known models through on random sets of "
            f"{n_evals} known queries, the fewest any endpoint shares with KNOWN "
            f"(target {args.false_match_rate:.1%})"
        )
    with _in_option_terms(*_MATCH_TERMS, common=False):
        table = match_models_by_scores(
            endpoints, known, threshold=threshold, min_shared=args.min_shared
        )
    if args.json:
        emit_json(
            {
                "threshold": float(threshold),
                "matches": [
                    {
                        "endpoint": endpoint,
                        "nearest": row["nearest"],
                        "distance": float(row["distance"]),
                        "n_shared": int(row["n_shared"]),
                        "is_match": bool(row["is_match"]),
                    }
                    for endpoint, row in table.iterrows()
                ],
            }
        )
        return 0
    rows = [
        [
            endpoint,
            row["nearest"],
            f"{row['distance']:.4f}",
            int(row["n_shared"]),
            "yes" if row["is_match"] else "no",
        ]
        for endpoint, row in table.iterrows()
    ]
    header = ["endpoint", "nearest known model", "disagreement", "queries", "match"]
    echo(format_table(header, rows, tsv=args.tsv))
    return 0
