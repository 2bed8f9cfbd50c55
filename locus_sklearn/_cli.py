"""The ``locus`` command line (also ``python -m locus_sklearn``).

Subcommands::

    locus demo      [--evals PATH] [--output DIR] [--quick] ...
    locus fit       EVALS -o ROUTER [--costs FILE] [--epochs N] [--set NAME=VALUE] ...
    locus route     ROUTER QUERY... [--top K] [--cost-weight L] [--models A,B]
    locus embed     ROUTER_OR_EMBEDDER EVALS -o EMBEDDINGS.csv
    locus onboard   ROUTER EVALS [--costs FILE]
    locus select    EMBEDDINGS.csv (--k N | --budget B --costs FILE)
    locus neighbors ROUTER MODEL [--k 5]

Errors are one line on stderr (``locus: error: ...``) with exit status 1, or 2
for a bad command line; ``--debug`` shows the traceback instead.
"""

import argparse
import ast
import difflib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["main", "build_parser", "read_costs", "read_encodings", "format_table"]

PROG = "locus"


# ----------------------------------------------------------------------------- io
def format_table(header, rows, *, tsv=False, aligns=None, indent=""):
    """Format rows as tab-separated or aligned text.

    Parameters
    ----------
    header : sequence of str
        Column names.
    rows : sequence of sequences
        Cells, converted with ``str``.
    tsv : bool, default=False
        Tab-separated values (tabs and newlines in cells become spaces)
        instead of aligned columns.
    aligns : sequence of {"<", ">"}, default=None
        Alignment per column; text left, everything else right by default.
    indent : str, default=""
        Prefix of every line of an aligned table.

    Returns
    -------
    lines : list of str

    Examples
    --------
    >>> print("\\n".join(format_table(["model", "p"], [["a", "0.5"]])))
    model    p
    -----  ---
    a      0.5
    """
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    if tsv:
        clean = str.maketrans({"\t": " ", "\n": " ", "\r": " "})
        return ["\t".join(cell.translate(clean) for cell in row) for row in cells]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    if aligns is None:
        aligns = ["<" if not _is_number(rows, i) else ">" for i in range(len(header))]
    lines = []
    for n, row in enumerate(cells):
        padded = zip(row, aligns, widths, strict=True)
        text = "  ".join(f"{c:{a}{w}}" for c, a, w in padded)
        lines.append(indent + text.rstrip())
        if n == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return lines


def _is_number(rows, i):
    values = [str(row[i]) for row in rows if str(row[i]) != ""]
    try:
        [float(v.replace(",", "")) for v in values]
    except ValueError:
        return False
    return bool(values)


def _echo(lines, stream=None):
    stream = sys.stdout if stream is None else stream
    for line in [lines] if isinstance(lines, str) else lines:
        print(line, file=stream)


def _note(message):
    """Progress and notes go to stderr, so stdout stays parseable."""
    print(message, file=sys.stderr, flush=True)


def read_costs(path):
    """Read per-model costs from a csv file with columns ``model`` and ``cost``.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    costs : dict of str to float

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        For missing columns, duplicate models, or costs that are not finite
        numbers >= 0.
    """
    import numpy as np
    import pandas as pd

    try:
        frame = pd.read_csv(path, dtype={"model": str})
    except FileNotFoundError:
        raise FileNotFoundError(f"No such costs file: {str(path)!r}.") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"Could not read the costs file {str(path)!r}: {exc}"
        ) from None
    missing = [c for c in ("model", "cost") if c not in frame.columns]
    if missing:
        raise ValueError(
            f"The costs file {str(path)!r} must be a csv with columns model,cost; it "
            f"has {list(frame.columns)}."
        )
    duplicated = frame["model"][frame["model"].duplicated()].unique().tolist()
    if duplicated:
        raise ValueError(
            f"The costs file {str(path)!r} lists {len(duplicated)} model(s) more "
            f"than once: {duplicated[:5]}."
        )
    cost = pd.to_numeric(frame["cost"], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(cost) | (cost < 0)
    if bad.any():
        raise ValueError(
            f"The costs file {str(path)!r} has {int(bad.sum())} cost(s) that are not "
            f"finite numbers >= 0, e.g. for {frame['model'][bad].tolist()[:5]}."
        )
    return dict(zip(frame["model"].tolist(), cost.tolist(), strict=True))


def read_encodings(path):
    """Read precomputed query encodings from an ``.npz`` file.

    The file holds two arrays: ``queries`` (strings, shape (n,)) and
    ``vectors`` (numbers, shape (n, d)), as written by
    ``numpy.savez(path, queries=np.array(texts, dtype=str), vectors=X)``.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    encodings : dict of str to ndarray of shape (d,)
        Usable as ``encoder=`` of any estimator.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        If it is not an npz file with those two arrays of matching length.
    """
    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such encodings file: {str(path)!r}.")
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise ValueError("it holds a single array, not an npz archive")
            missing = [k for k in ("queries", "vectors") if k not in data.files]
            if missing:
                raise ValueError(
                    f"it has arrays {data.files}; it needs 'queries' and 'vectors'"
                )
            queries, vectors = data["queries"], data["vectors"]
    except (ValueError, OSError, EOFError) as exc:
        reason = str(exc)
        if "allow_pickle" in reason:
            reason = (
                "'queries' is an object array; save it as np.array(texts, dtype=str)"
            )
        raise ValueError(
            f"{str(path)!r} is not a valid encodings file ({reason}). Write one with "
            "numpy.savez(path, queries=np.array(texts, dtype=str), vectors=X)."
        ) from None
    if queries.ndim != 1 or queries.dtype.kind not in "US":
        raise ValueError(
            f"{str(path)!r}: 'queries' must be a 1-d array of strings; got dtype "
            f"{queries.dtype} and shape {queries.shape}."
        )
    if (
        vectors.ndim != 2
        or len(vectors) != len(queries)
        or vectors.dtype.kind not in "fiu"
    ):
        raise ValueError(
            f"{str(path)!r}: 'vectors' must be numbers of shape ({len(queries)}, d), "
            f"one row per query; got dtype {vectors.dtype} and shape {vectors.shape}."
        )
    queries = queries.astype(str).tolist()
    if len(set(queries)) != len(queries):
        raise ValueError(f"{str(path)!r}: 'queries' has duplicates.")
    return dict(zip(queries, vectors.astype(np.float32), strict=True))


def _read_evals(path):
    from .datasets import load_evals

    return load_evals(path)


def _encoder_arg(args):
    """The ``encoder=`` value from ``--encoder``/``--encodings`` (None if neither)."""
    if getattr(args, "encodings", None):
        return read_encodings(args.encodings)
    if getattr(args, "encoder", None):
        return args.encoder
    return None


def _file_kind(path):
    """The estimator kind stored in a locus_sklearn file, or None if unreadable."""
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt", device="cpu") as handle:
            kind = (handle.metadata() or {}).get("kind")
        return json.loads(kind) if kind else None
    except Exception:  # any unreadable file: let load() give its own message
        return None


def _load(path, args, *, embedder_ok=False):
    """Load a router (or, with ``embedder_ok``, an embedder) honouring the
    ``--encoder``/``--encodings``/``--device`` options.

    Precomputed encodings given with ``--encodings`` are added to those saved
    in a file fitted with precomputed encodings (the new vectors win).
    """
    from . import LocusEmbedder, LocusRouter

    cls = LocusRouter
    if embedder_ok and _file_kind(path) == "LocusEmbedder":
        cls = LocusEmbedder
    encoder = _encoder_arg(args)
    device = getattr(args, "device", None)
    if encoder is None:
        return cls.load(path, device=device)
    if isinstance(encoder, Mapping):
        try:
            saved = cls.load(path, device=device)
        except ValueError:  # e.g. saved with a custom encoder object
            saved = None
        if saved is not None:
            saved = (saved.embedder_ if cls is LocusRouter else saved).encoder
        if isinstance(saved, Mapping):
            encoder = {**saved, **encoder}
    return cls.load(path, encoder=encoder, device=device)


# ------------------------------------------------------------------- arg types
def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer, got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _nonnegative_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number >= 0, got {text!r}"
        ) from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def _positive_float(text):
    value = _nonnegative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _model_list(text):
    models = [m.strip() for m in text.split(",") if m.strip()]
    if not models:
        raise argparse.ArgumentTypeError("expected comma-separated model names")
    return models


def _assignment(text):
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        parsed = value  # a bare word, e.g. early_stopping=valid_loss
    if value in ("None", "none", "null"):
        parsed = None
    return name.strip().replace("-", "_"), parsed


# -------------------------------------------------------------------- commands
def _cmd_demo(args):
    from ._demo import run_demo

    run_demo(
        args.evals,
        output=args.output,
        open_weights=args.open_weights,
        epochs=args.epochs,
        seed=args.seed,
        quick=args.quick,
    )
    return 0


def _embedder_params(args):
    from . import LocusEmbedder

    valid = LocusEmbedder().get_params()
    params = {}
    for name, value in args.set or []:
        if name not in valid or name in ("encoder", "memory", "device", "verbose"):
            close = difflib.get_close_matches(name, list(valid), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ValueError(
                f"--set {name}=...: {name!r} is not a LocusEmbedder hyper-parameter "
                f"that --set can change{hint} (see `locus fit --help`)."
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


def _pool_costs(costs, models, path):
    """Costs of ``models`` from a costs file (extra models in the file are fine)."""
    missing = [m for m in models if m not in costs]
    if missing:
        raise ValueError(
            f"The costs file {str(path)!r} has no cost for {len(missing)} model(s): "
            f"{missing[:5]}{' ...' if len(missing) > 5 else ''}."
        )
    return {m: costs[m] for m in models}


def _cmd_fit(args):
    from . import LocusEmbedder, LocusRouter
    from ._encoders import QueryEncoder

    evals = _read_evals(args.evals)
    costs = read_costs(args.costs) if args.costs else None
    params = _embedder_params(args)
    encoder = _encoder_arg(args)
    if not isinstance(encoder, Mapping):
        # Show the encoding progress of a sentence-transformers model.
        encoder = QueryEncoder(encoder, show_progress_bar=not args.quiet)
        encoder.fit()  # resolve the model directory now: a bad path fails at once
    embedder = LocusEmbedder(
        encoder,
        memory=args.cache,
        device=args.device,
        verbose=0 if args.quiet else 1,
        **params,
    )
    embedder._validate_params()  # bad --set values fail before any work
    models = sorted(evals["model"].unique())
    model_costs = None if costs is None else _pool_costs(costs, models, args.costs)
    if not args.quiet:
        _note(
            f"Training LOCUS on {len(models)} models, {len(evals):,} evaluations, "
            f"{evals['query'].nunique():,} queries ..."
        )
    router = LocusRouter(embedder).fit(evals, model_costs=model_costs)
    router.save(args.output)
    _note(
        f"Saved a LocusRouter ({len(router.classes_)} models, "
        f"{router.model_embeddings_.shape[1]}-d embeddings, "
        f"{router.embedder_.n_epochs_} epochs"
        f"{', with costs' if model_costs else ''}) to {args.output}"
    )
    return 0


def _read_queries(args):
    queries = []
    for query in args.queries:
        if query == "-":
            queries.extend(line.rstrip("\r\n") for line in sys.stdin)
        else:
            queries.append(query)
    if args.file:
        with open(args.file, encoding="utf-8") as handle:
            queries.extend(line.rstrip("\r\n") for line in handle)
    queries = [q for q in queries if q.strip()]
    if not queries:
        raise ValueError(
            "No queries given: pass them as arguments, '-' to read one per line "
            "from stdin, or --file FILE."
        )
    return queries


def _cmd_route(args):
    import numpy as np

    from ._base import check_model_subset

    router = _load(args.router, args)
    queries = _read_queries(args)
    cost_weight = router.cost_weight if args.cost_weight is None else args.cost_weight
    has_costs = router.model_costs_ is not None
    if cost_weight > 0 and not has_costs:
        raise ValueError(
            f"--cost-weight {cost_weight:g} needs model costs, but {args.router!r} was "
            "fitted without them; fit with --costs FILE (or use --cost-weight 0)."
        )
    classes = router.classes_
    available = np.ones(len(classes), dtype=bool)
    if args.models:
        available = check_model_subset(args.models, classes, name="--models")
    top = min(args.top, int(available.sum()))
    proba = router.predict_proba(queries)
    utility = proba - cost_weight * router.model_costs_ if cost_weight > 0 else proba
    utility = np.where(available, utility, -np.inf)
    # Stable sort on -utility: ties go to the first model, as in predict().
    order = np.argsort(-utility, axis=1, kind="stable")[:, :top]
    header = ["query"] + (["rank"] if top > 1 else []) + ["model", "P(correct)"]
    if has_costs:
        header.append("cost")
    rows = []
    for i, query in enumerate(queries):
        shown = query if args.tsv else _shorten(query, 48)
        for rank, j in enumerate(order[i], start=1):
            row = [shown if rank == 1 or args.tsv else ""]
            row += [rank] if top > 1 else []
            row += [classes[j], f"{proba[i, j]:.3f}"]
            if has_costs:
                row.append(f"{router.model_costs_[j]:g}")
            rows.append(row)
    _echo(format_table(header, rows, tsv=args.tsv))
    return 0


def _shorten(text, width):
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _cmd_embed(args):
    import pandas as pd

    from . import LocusRouter

    estimator = _load(args.model, args, embedder_ok=True)
    evals = _read_evals(args.evals)
    if isinstance(estimator, LocusRouter):
        embeddings = estimator.embed(evals)
    else:
        embeddings = estimator.transform(evals)
    models = sorted(evals["model"].unique())
    frame = pd.DataFrame(
        embeddings,
        index=pd.Index(models, name="model"),
        columns=[f"locus{i}" for i in range(embeddings.shape[1])],
    )
    frame.to_csv(args.output)
    _note(
        f"Wrote {len(frame)} embeddings of dimension {frame.shape[1]} to {args.output}"
    )
    return 0


def _cmd_onboard(args):
    import numpy as np

    router = _load(args.router, args)
    evals = _read_evals(args.evals)
    models = sorted(evals["model"].unique())
    is_new = ~np.isin(models, router.classes_)
    new = [m for m, n in zip(models, is_new, strict=True) if n]
    old = [m for m, n in zip(models, is_new, strict=True) if not n]
    model_costs = None
    if args.costs:
        if router.model_costs_ is None:
            raise ValueError(
                f"--costs was given, but {args.router!r} was fitted without costs; "
                "refit it with locus fit --costs FILE to use costs."
            )
        model_costs = _pool_costs(read_costs(args.costs), models, args.costs)
    elif router.model_costs_ is not None and new:
        raise ValueError(
            f"{args.router!r} has model costs, so the new model(s) "
            f"{new[:5]} need costs: pass --costs FILE."
        )
    router.add_models(evals, model_costs=model_costs)
    output = args.output or args.router
    router.save(output)  # atomic: a temporary file renamed over the old one
    parts = []
    if new:
        parts.append(f"added {len(new)} model(s): {', '.join(new)}")
    if old:
        parts.append(f"refreshed {len(old)}: {', '.join(old)}")
    _note(
        f"{'; '.join(parts).capitalize()}. The pool now has {len(router.classes_)} "
        f"models; saved to {output}"
    )
    return 0


def _read_embeddings(path):
    import numpy as np
    import pandas as pd

    try:
        frame = pd.read_csv(path, index_col=0)
    except FileNotFoundError:
        raise FileNotFoundError(f"No such embeddings file: {str(path)!r}.") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"Could not read the embeddings file {str(path)!r}: {exc}"
        ) from None
    values = frame.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    if frame.shape[1] == 0 or len(frame) == 0 or not np.isfinite(values).all():
        raise ValueError(
            f"{str(path)!r} is not an embeddings csv: expected a model column followed "
            "by numeric columns (as written by locus embed)."
        )
    names = frame.index.astype(str).to_numpy(dtype=object)
    if len(set(names)) != len(names):
        raise ValueError(f"{str(path)!r} lists some models more than once.")
    return names, values


def _cmd_select(args):
    import numpy as np

    from . import BudgetGreedySelector, KCenterSelector, KMedoidsSelector

    names, X = _read_embeddings(args.embeddings)
    costs = None
    if args.costs:
        costs = np.array(
            list(_pool_costs(read_costs(args.costs), names, args.costs).values())
        )
    if args.budget is not None:
        if args.method:
            raise ValueError(
                "--method applies to --k; --budget always selects greedily."
            )
        selector = BudgetGreedySelector(budget=args.budget, metric=args.metric)
        selector.fit(X, costs=costs)
    else:
        if args.k > len(names):
            raise ValueError(
                f"--k {args.k} is larger than the number of models ({len(names)})."
            )
        cls = KCenterSelector if args.method == "kcenter" else KMedoidsSelector
        selector = cls(n_select=args.k, metric=args.metric).fit(X)
    selected = selector.selected_indices_
    covers = np.bincount(selector.labels_, minlength=len(selected))
    header = ["rank", "model", "covers"] + (["cost"] if costs is not None else [])
    rows = []
    for rank, (i, n) in enumerate(zip(selected, covers, strict=True), start=1):
        rows.append(
            [rank, names[i], n] + ([f"{costs[i]:g}"] if costs is not None else [])
        )
    _echo(format_table(header, rows, tsv=args.tsv))
    if not args.tsv:
        total = f"; total cost {costs[selected].sum():g}" if costs is not None else ""
        _note(
            f"Selected {len(selected)} of {len(names)} models "
            f"(coverage objective {selector.objective_:.3f}{total}); 'covers' counts "
            "the models nearest to each selected one."
        )
    return 0


def _cmd_neighbors(args):
    from .inspection import nearest_models

    if str(args.router).lower().endswith(".csv"):
        names, X = _read_embeddings(args.router)
        table = nearest_models(X, args.model, k=args.k, metric=args.metric, names=names)
    else:
        router = _load(args.router, args)
        n_others = len(router.classes_) - 1
        if args.model in set(router.classes_) and args.k > n_others:
            raise ValueError(
                f"--k {args.k} is larger than the other models ({n_others})."
            )
        table = nearest_models(router, args.model, k=args.k, metric=args.metric)
    rows = [[rank, m, f"{d:.4f}"] for rank, (m, d) in table.iterrows()]
    _echo(format_table(["rank", "model", "distance"], rows, tsv=args.tsv))
    return 0


# ---------------------------------------------------------------------- parser
def build_parser():
    """The argument parser of the ``locus`` command.

    Returns
    -------
    parser : argparse.ArgumentParser
    """
    from . import __version__

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the full traceback on errors",
    )
    encoding = argparse.ArgumentParser(add_help=False)
    exclusive = encoding.add_mutually_exclusive_group()
    exclusive.add_argument(
        "--encoder",
        metavar="DIR",
        help="a local sentence-transformers model directory (default: the bundled "
        "all-MiniLM-L6-v2, or what the router was fitted with)",
    )
    exclusive.add_argument(
        "--encodings",
        metavar="FILE.npz",
        help="precomputed query vectors: an npz file with arrays 'queries' (strings) "
        "and 'vectors' (n, d); added to those saved in a router fitted with them",
    )
    encoding.add_argument(
        "--device", help="torch device, e.g. cpu or cuda (default: CUDA if available)"
    )
    output_format = argparse.ArgumentParser(add_help=False)
    output_format.add_argument(
        "--tsv", action="store_true", help="tab-separated output instead of a table"
    )

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="LOCUS model embeddings: route queries to LLMs, onboard models, "
        "compare them and choose portfolios.",
        epilog="Run `locus COMMAND --help` for a command's options.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks on errors"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser(
        "demo",
        parents=[common],
        help="route, onboard and pick a portfolio on built-in real data",
        description="Train a LocusRouter on the built-in MMLU-Pro subset (or your "
        "own evaluations) and compare it with the single best model, the oracle "
        "and a kNN router; onboard held-out models; pick a portfolio; write figures.",
    )
    p.add_argument(
        "--evals",
        metavar="PATH",
        help="your own long-format evaluations "
        "(csv/parquet/jsonl with columns model, query, score) instead of "
        "the built-in data; queries are encoded with MiniLM",
    )
    p.add_argument(
        "--output",
        metavar="DIR",
        default="locus_demo_output",
        help="folder for the figures (default: %(default)s)",
    )
    weights = p.add_mutually_exclusive_group()
    weights.add_argument(
        "--open-weights",
        dest="open_weights",
        action="store_true",
        default=True,
        help="the 27 open-weights models (default)",
    )
    weights.add_argument(
        "--all-models",
        dest="open_weights",
        action="store_false",
        help="all 32 models, API models included",
    )
    p.add_argument(
        "--epochs",
        type=_positive_int,
        metavar="N",
        help="maximum training epochs (default: 40, with early stopping)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny settings that run in seconds (a smoke test)",
    )
    p.set_defaults(handler=_cmd_demo)

    p = sub.add_parser(
        "fit",
        parents=[common, encoding],
        help="train a router on evaluations and save it",
        description="Train a LocusRouter on long-format evaluations (csv, parquet or "
        "jsonl with columns model, query, score) and save it in the safe format.",
    )
    p.add_argument("evals", metavar="EVALS", help="evaluation file")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="ROUTER",
        help="where to save the router (e.g. router.safetensors)",
    )
    p.add_argument("--costs", metavar="FILE", help="csv with columns model,cost")
    p.add_argument(
        "--epochs",
        type=_positive_int,
        metavar="N",
        help="maximum epochs (default 100; early stopping usually ends sooner)",
    )
    p.add_argument(
        "--embedding-dim",
        type=_positive_int,
        metavar="D",
        help="size of a model embedding (default 128)",
    )
    p.add_argument("--seed", type=int, metavar="S", help="random seed")
    p.add_argument(
        "--set",
        type=_assignment,
        action="append",
        metavar="NAME=VALUE",
        help="any other LocusEmbedder hyper-parameter, e.g. --set "
        "n_latents=16 --set 'enc_size=(32, 512)'; repeatable",
    )
    p.add_argument("--cache", metavar="DIR", help="cache query encodings in DIR")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.set_defaults(handler=_cmd_fit)

    p = sub.add_parser(
        "route",
        parents=[common, encoding, output_format],
        help="route queries to the best model of a saved router",
        description="Print the model each query is routed to, with its P(correct) "
        "(or the top K models).",
    )
    p.add_argument("router", metavar="ROUTER", help="a router saved by locus fit")
    p.add_argument(
        "queries",
        metavar="QUERY",
        nargs="*",
        help="query texts; '-' reads one query per line from stdin",
    )
    p.add_argument("--file", metavar="FILE", help="read one query per line from FILE")
    p.add_argument(
        "--top",
        type=_positive_int,
        default=1,
        metavar="K",
        help="show the K best models per query (default: 1)",
    )
    p.add_argument(
        "--cost-weight",
        type=_nonnegative_float,
        metavar="L",
        help="route on P(correct) - L * cost (needs a router fitted "
        "with --costs; default: the router's own, usually 0)",
    )
    p.add_argument(
        "--models",
        type=_model_list,
        metavar="A,B,...",
        help="route only among these models (an outage, a portfolio)",
    )
    p.set_defaults(handler=_cmd_route)

    p = sub.add_parser(
        "embed",
        parents=[common, encoding],
        help="embed models from their evaluations into a csv",
        description="Embed every model of EVALS (no training) with a saved router "
        "or embedder; write a csv with a model column and one column per dimension.",
    )
    p.add_argument("model", metavar="ROUTER_OR_EMBEDDER")
    p.add_argument("evals", metavar="EVALS", help="evaluation file")
    p.add_argument("-o", "--output", required=True, metavar="EMBEDDINGS.csv")
    p.set_defaults(handler=_cmd_embed)

    p = sub.add_parser(
        "onboard",
        parents=[common, encoding],
        help="add (or refresh) models in a saved router, no training",
        description="Embed the models of EVALS and add them to the router's pool "
        "(or refresh models it has). The file is replaced atomically: a failed run "
        "leaves it as it was.",
    )
    p.add_argument("router", metavar="ROUTER")
    p.add_argument("evals", metavar="EVALS", help="evaluations of the models to add")
    p.add_argument(
        "--costs",
        metavar="FILE",
        help="csv with columns model,cost (required when the router has costs)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="ROUTER",
        help="write the updated router here instead of in place",
    )
    p.set_defaults(handler=_cmd_onboard)

    p = sub.add_parser(
        "select",
        parents=[common, output_format],
        help="choose a portfolio of models from their embeddings",
        description="Choose K models that cover the pool (k-medoids or k-center on "
        "the embeddings), or the models that cover it best within a cost budget.",
    )
    p.add_argument(
        "embeddings", metavar="EMBEDDINGS.csv", help="as written by locus embed"
    )
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--k", type=_positive_int, metavar="N", help="number of models")
    how.add_argument(
        "--budget",
        type=_positive_float,
        metavar="B",
        help="largest total cost (with --costs; without, a model count)",
    )
    p.add_argument("--costs", metavar="FILE", help="csv with columns model,cost")
    p.add_argument(
        "--method",
        choices=["kcenter", "kmedoids"],
        help="for --k: k-medoids (default; best total coverage) or "
        "k-center (no model left far from the portfolio)",
    )
    p.add_argument(
        "--metric",
        choices=["cosine", "euclidean"],
        default="cosine",
        help="distance between embeddings (default: %(default)s)",
    )
    p.set_defaults(handler=_cmd_select)

    p = sub.add_parser(
        "neighbors",
        parents=[common, encoding, output_format],
        help="the models nearest to a model (proxies, fallbacks)",
        description="List the K models nearest to MODEL in embedding space.",
    )
    p.add_argument(
        "router", metavar="ROUTER", help="a saved router, or an embeddings csv"
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument(
        "--k",
        type=_positive_int,
        default=5,
        metavar="N",
        help="number of neighbours (default: %(default)s)",
    )
    p.add_argument(
        "--metric",
        choices=["cosine", "euclidean"],
        default="cosine",
        help="distance between embeddings (default: %(default)s)",
    )
    p.set_defaults(handler=_cmd_neighbors)
    return parser


def _one_line(exc):
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    message = " ".join(str(message).split()) or type(exc).__name__
    return message


def main(argv=None):
    """Run the ``locus`` command line.

    Parameters
    ----------
    argv : list of str, default=None
        Arguments without the program name; defaults to ``sys.argv[1:]``.

    Returns
    -------
    status : int
        0 on success, 1 on an error (reported as one line on stderr), 130 when
        interrupted. A bad command line exits with status 2 (from argparse).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # No "Loading weights" bars when the query encoder loads; encoding
    # progress (sentence-transformers' own bar) is still shown by fit.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = getattr(args, "debug", False)
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, KeyError, OSError, ImportError, RuntimeError) as exc:
        if debug:
            raise
        print(f"{PROG} {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
