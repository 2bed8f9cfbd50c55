"""The argument parser of the ``locus`` command: one builder per subcommand.

Each ``_add_*`` function adds one subcommand and sets its ``func`` (the
function of :mod:`._commands` that runs it). Subcommands defined elsewhere
(``locus serve``) are added by ``locus_sklearn.serve._cli.add_subparsers``
when that module is installed.
"""

import argparse
import ast
import re
import sys

from . import _commands
from ._errors import EXIT_IO
from ._types import (
    fraction,
    int_at_least,
    model_list,
    nonnegative_float,
    open_fraction,
    path,
    positive_int,
    seed,
    threads,
)

__all__ = ["PROG", "build_parser"]

PROG = "locus"


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, like every error.

    Its subcommands are parsed by :class:`_CommandParser`.
    """

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def _print_message(self, message, file=None):
        # argparse ignores a failed write: ``locus --help > /dev/full`` exited
        # 0 with the help lost. A failed write to stdout is an error (status
        # 3) as in the commands, reported on stderr; one to stderr has nowhere
        # to be reported. A reader that closed its pipe is left alone.
        if not message:
            return
        file = sys.stderr if file is None else file
        try:
            file.write(message)
            file.flush()
        except BrokenPipeError:
            pass
        except OSError as exc:
            if file is sys.stderr:
                return
            self.exit(EXIT_IO, f"{self.prog}: error: {' '.join(str(exc).split())}\n")

    def add_subparsers(self, **kwargs):
        kwargs.setdefault("parser_class", _CommandParser)
        return super().add_subparsers(**kwargs)


class _CommandParser(_Parser):
    """A subcommand's parser: an argument it does not know is its own usage
    error (``locus neighbors: error: unrecognized arguments: --bogus (see
    `locus neighbors --help`)``). argparse hands such arguments back to the
    top-level parser, whose error would name ``locus`` and its help.

    ``queries_dest``, where set (:func:`_router_and_queries`), names a
    ``nargs="*"`` positional that may also stand after options: argparse
    fills it with the arguments before the first option (none in ``locus
    route R --top 2 q1``) and leaves the later ones over; those are added to
    it, in order, unless one looks like an option.
    """

    queries_dest = None

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and self.queries_dest is not None:
            values, options = _split_extras(extras)
            if not options:
                queries = getattr(namespace, self.queries_dest) or []
                setattr(namespace, self.queries_dest, [*queries, *values])
            extras = options  # the queries among them are not unrecognized
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


# argparse's own test: an argument starting with "-" is a positional where it
# is "-" alone, a negative number (no option here looks like one) or holds a
# space; anything after "--" is one too.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _split_extras(extras):
    """(values, options): the arguments argparse left over that are
    positional values, in order, and those that look like options."""
    values, options = [], []
    for i, arg in enumerate(extras):
        if arg == "--":
            return values + extras[i + 1 :], options
        looks_like_option = (
            arg.startswith("-")
            and arg != "-"
            and " " not in arg
            and not _NEGATIVE_NUMBER.match(arg)
        )
        (options if looks_like_option else values).append(arg)
    return values, options


# ------------------------------------------------------------------ arg types
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


def _shrinkage(text):
    """LocusRouter's ``shrinkage``: ``auto``, ``none`` or a number in [0, 1]."""
    if text.lower() in ("auto", "none"):
        return None if text.lower() == "none" else "auto"
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(
            f"expected auto, none or a number in [0, 1], got {text!r}"
        )
    return value + 0.0  # "-0" is 0, not -0.0


def _device(text):
    """A torch device this machine has and locus_sklearn can compute on
    (``cpu``, ``cuda``, ``cuda:1``, ``mps`` where available, ...): the
    rules of :func:`locus_sklearn._device.resolve_device`, as a command-line
    error that names the option."""
    import torch

    from .._device import resolve_device

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a torch device; use e.g. cpu or cuda"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = "has no CUDA" if torch.version.cuda is None else "sees no GPU"
            raise argparse.ArgumentTypeError(
                f"{text!r} is not available: this torch ({torch.__version__}) "
                f"{build}; use --device cpu"
            )
        n = torch.cuda.device_count()
        if device.index is not None and device.index >= n:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not available: this machine has {n} CUDA device(s)"
            )
    try:
        resolve_device(text)  # the estimators' own rules: meta, mps, xpu, ...
    except ValueError:
        if device.type == "meta":
            why = "meta tensors hold no data, so nothing could be computed there"
        elif device.type == "mps":
            why = "Apple's MPS backend is not available here"
        else:
            why = f"this torch ({torch.__version__}) cannot compute on it"
        raise argparse.ArgumentTypeError(
            f"{text!r} is not available: {why}; use --device cpu"
        ) from None
    return text


# -------------------------------------------------------------- shared options
def _common_parent(threads_default="torch's own choice"):
    """The options of every command, ``--threads`` saying what it defaults to."""
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: the value given before the subcommand is kept when the
    # option is not repeated after it.
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the full traceback on errors",
    )
    common.add_argument(
        "--threads",
        type=threads,
        metavar="N",
        default=argparse.SUPPRESS,
        help=f"number of CPU threads torch uses (default: {threads_default})",
    )
    return common


def _shared_parents():
    """Parent parsers: ``common`` (every subcommand), ``encoding`` (commands
    that encode queries), ``output`` (commands that print a table)."""
    common = _common_parent()
    encoding = argparse.ArgumentParser(add_help=False)
    exclusive = encoding.add_mutually_exclusive_group()
    exclusive.add_argument(
        "--encoder",
        type=path,
        metavar="DIR",
        help="a local sentence-transformers model directory, or the name of a hub "
        "model already in the local Hugging Face cache (never downloaded; "
        "default: the bundled all-MiniLM-L6-v2, or what the router was fitted "
        "with)",
    )
    exclusive.add_argument(
        "--encodings",
        type=path,
        metavar="FILE.npz",
        help="precomputed query vectors: an npz file with arrays 'queries' (strings) "
        "and 'vectors' (n, d); added to those saved in a router fitted with them",
    )
    encoding.add_argument(
        "--device",
        type=_device,
        help="torch device, e.g. cpu or cuda (default: CUDA if available)",
    )
    output = argparse.ArgumentParser(add_help=False)
    how = output.add_mutually_exclusive_group()
    how.add_argument(
        "--tsv", action="store_true", help="tab-separated output instead of a table"
    )
    how.add_argument("--json", action="store_true", help="output as JSON")
    return common, encoding, output


def _json_option(parser, what):
    parser.add_argument(
        "--json", action="store_true", help=f"print {what} as JSON on stdout"
    )


# ----------------------------------------------------------------- subcommands
def _add_demo(sub):
    # The demo's own --threads default: one thread without CUDA (run_demo).
    common = _common_parent(
        "1 on a machine without CUDA, as the demo's network is small; "
        "torch's own choice with CUDA"
    )
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
        type=path,
        metavar="PATH",
        help="your own long-format evaluations "
        "(csv/parquet/jsonl with columns model, query, score) instead of "
        "the built-in data; queries are encoded with MiniLM",
    )
    p.add_argument(
        "--output",
        type=path,
        metavar="DIR",
        default="locus_demo_output",
        help="folder for the figures (default: %(default)s)",
    )
    # default None: cmd_demo refuses either with --evals (not the built-in data).
    weights = p.add_mutually_exclusive_group()
    weights.add_argument(
        "--open-weights",
        dest="open_weights",
        action="store_const",
        const=True,
        help="the built-in data's 27 open-weights models (default)",
    )
    weights.add_argument(
        "--all-models",
        dest="open_weights",
        action="store_const",
        const=False,
        help="all 32 models of the built-in data, API models included",
    )
    p.add_argument(
        "--epochs",
        type=positive_int,
        metavar="N",
        help="maximum training epochs (default: 40, with early stopping; with "
        "--quick 2, without)",
    )
    p.add_argument("--seed", type=seed, default=0, help="random seed (default: 0)")
    p.add_argument(
        "--quick", action="store_true", help="tiny settings that run in seconds"
    )
    _json_option(p, "the summary (the report then goes to stderr)")
    p.set_defaults(func=_commands.cmd_demo)


def _add_fit(sub, common, encoding):
    p = sub.add_parser(
        "fit",
        parents=[common, encoding],
        help="train a router on evaluations and save it",
        description="Train a LocusRouter on long-format evaluations (csv, parquet or "
        "jsonl with columns model, query, score) and save it in the safe format. "
        "Progress goes to stderr.",
    )
    p.add_argument("evals", metavar="EVALS", help="evaluation file")
    p.add_argument(
        "-o",
        "--output",
        type=path,
        required=True,
        metavar="ROUTER",
        help="where to save the router (e.g. router.safetensors)",
    )
    p.add_argument(
        "--costs", type=path, metavar="FILE", help="csv with columns model,cost"
    )
    p.add_argument(
        "--epochs",
        type=positive_int,
        metavar="N",
        help="maximum epochs (default 100; early stopping usually ends sooner)",
    )
    p.add_argument(
        "--embedding-dim",
        # LocusEmbedder's own bound (its embedding_dim constraint), as a
        # command-line error like the other options' ranges.
        type=int_at_least(3),
        metavar="D",
        help="size of a model embedding, at least 3 (default 128)",
    )
    p.add_argument("--seed", type=seed, metavar="S", help="random seed")
    p.add_argument(
        "--shrinkage",
        type=_shrinkage,
        default="auto",
        metavar="S",
        help="shrink P(correct) toward each model's mean score: auto (default; "
        "chosen by cross-fitted routing on the training queries), none, or a "
        "number in [0, 1]",
    )
    p.add_argument(
        "--shrinkage-repeats",
        type=positive_int,
        metavar="N",
        help="with --shrinkage auto only: judge each value on N shuffles of the "
        "5 folds together (default 1; more take out the choice's dependence on "
        "which queries share a fold, at N times its cost)",
    )
    p.add_argument(
        "--set",
        type=_assignment,
        action="append",
        metavar="NAME=VALUE",
        help="any other LocusEmbedder hyper-parameter, e.g. --set "
        "n_latents=16 --set 'enc_size=(32, 512)'; repeatable",
    )
    p.add_argument(
        "--cache",
        type=path,
        metavar="DIR",
        help="cache the query encoder's encodings in the folder DIR (not with "
        "--encodings, which are precomputed already)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    _json_option(p, "a summary of the saved router")
    p.set_defaults(func=_commands.cmd_fit)


def _add_route(sub, common, encoding, output):
    p = sub.add_parser(
        "route",
        parents=[common, encoding, output],
        help="route queries to the best model of a saved router",
        description="Print the model each query is routed to, with its P(correct) "
        "(or the top K models).",
    )
    _router_and_queries(p)
    p.add_argument(
        "--top",
        type=positive_int,
        default=1,
        metavar="K",
        help="show the K best models per query (default: 1)",
    )
    p.add_argument(
        "--cost-weight",
        type=nonnegative_float,
        metavar="L",
        help="route on P(correct) - L * cost (needs a router fitted "
        "with --costs; default: the router's own, usually 0)",
    )
    p.add_argument(
        "--models",
        type=model_list,
        metavar="A,B,...",
        help="route only among these models (an outage, a portfolio); "
        "comma-separated, read as a csv line (quote a name that holds a comma: "
        "'\"a,b\",c'); spaces around a name are ignored unless the pool has the "
        "name with them",
    )
    p.set_defaults(func=_commands.cmd_route)


def _add_embed(sub, common, encoding):
    p = sub.add_parser(
        "embed",
        parents=[common, encoding],
        help="embed models from their evaluations into a csv",
        description="Embed every model of EVALS (no training) with a saved router "
        "or embedder; write a csv with a model column and one column per dimension.",
    )
    p.add_argument("model", metavar="ROUTER_OR_EMBEDDER")
    p.add_argument("evals", metavar="EVALS", help="evaluation file")
    p.add_argument("-o", "--output", type=path, required=True, metavar="EMBEDDINGS.csv")
    _json_option(p, "the embeddings (as well as writing the csv)")
    p.set_defaults(func=_commands.cmd_embed)


def _add_onboard(sub, common, encoding):
    p = sub.add_parser(
        "onboard",
        parents=[common, encoding],
        help="add (or refresh) models in a saved router, no training",
        description="Embed the models of EVALS and add them to the router's pool "
        "(or refresh models it has; a refreshed model keeps its cost unless the "
        "costs file gives a new one). The file is replaced atomically: a failed "
        "run leaves it as it was.",
    )
    p.add_argument("router", metavar="ROUTER")
    p.add_argument("evals", metavar="EVALS", help="evaluations of the models to add")
    p.add_argument(
        "--costs",
        type=path,
        metavar="FILE",
        help="csv with columns model,cost (required for new models when the "
        "router has costs)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=path,
        metavar="ROUTER",
        help="write the updated router here instead of in place",
    )
    _json_option(p, "a summary (models added and refreshed)")
    p.set_defaults(func=_commands.cmd_onboard)


def _add_select(sub, common, output):
    p = sub.add_parser(
        "select",
        parents=[common, output],
        help="choose a portfolio of models from their embeddings",
        description="Choose K models that cover the pool (k-medoids or k-center on "
        "the embeddings), or the models that cover it best within a cost budget.",
    )
    p.add_argument(
        "embeddings", metavar="EMBEDDINGS.csv", help="as written by locus embed"
    )
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--k", type=positive_int, metavar="N", help="number of models")
    how.add_argument(
        "--budget",
        type=nonnegative_float,
        metavar="B",
        help="largest total cost, >= 0 (with --costs; 0 selects the free models "
        "only; without, a number of models, a whole number >= 1)",
    )
    p.add_argument(
        "--costs", type=path, metavar="FILE", help="csv with columns model,cost"
    )
    p.add_argument(
        "--method",
        choices=["kcenter", "kmedoids"],
        help="for --k: k-medoids (default; best total coverage) or "
        "k-center (no model left far from the portfolio)",
    )
    _metric_option(p)
    p.set_defaults(func=_commands.cmd_select)


def _add_portfolio(sub, common, encoding, output):
    p = sub.add_parser(
        "portfolio",
        parents=[common, encoding, output],
        help="choose a portfolio for expected routing accuracy on given queries",
        description="Choose K models of a saved router, greedily, for the expected "
        "accuracy of routing the given queries among them (the router's "
        "P(correct); no scores needed).",
    )
    _router_and_queries(p)
    p.add_argument(
        "--k", type=positive_int, required=True, metavar="N", help="number of models"
    )
    p.set_defaults(func=_commands.cmd_portfolio)


def _add_neighbors(sub, common, encoding, output):
    p = sub.add_parser(
        "neighbors",
        parents=[common, encoding, output],
        help="the models nearest to a model (proxies, fallbacks)",
        description="List the K models nearest to MODEL in embedding space.",
    )
    p.add_argument(
        "router", metavar="ROUTER", help="a saved router, or an embeddings csv"
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument(
        "--k",
        type=positive_int,
        default=5,
        metavar="N",
        help="number of neighbors (default: %(default)s)",
    )
    _metric_option(p)
    p.set_defaults(func=_commands.cmd_neighbors)


def _add_match(sub, common, output):
    p = sub.add_parser(
        "match",
        parents=[common, output],
        help="which known model does each endpoint repeat? (from scores)",
        description="For each model of ENDPOINTS, the known model of KNOWN whose "
        "scores on the queries both answered differ least (the disagreement: the "
        "mean absolute difference of their scores on those queries, which for "
        "0/1 scores is the share of them on which correctness differs), and "
        "whether that is a match: under "
        "--threshold, or by default under a threshold that lets "
        "--false-match-rate of the pairs of different known models through on "
        "random sets of as many known queries as the endpoint with the fewest "
        "queries of KNOWN has.",
    )
    p.add_argument(
        "known", metavar="KNOWN", help="evaluations (csv, parquet) of the known models"
    )
    p.add_argument(
        "endpoints",
        metavar="ENDPOINTS",
        help="evaluations of the endpoints to identify, on queries of KNOWN",
    )
    how = p.add_mutually_exclusive_group()
    how.add_argument(
        "--threshold",
        type=fraction,
        metavar="D",
        help="a disagreement in [0, 1] under which an endpoint matches (default: "
        "calibrated)",
    )
    how.add_argument(
        "--false-match-rate",
        type=open_fraction,
        default=0.01,
        metavar="P",
        help="the calibrated threshold's share of different-model pairs let "
        "through, in (0, 1) (default: %(default)s)",
    )
    p.add_argument(
        "--min-shared",
        type=positive_int,
        default=32,
        metavar="N",
        help="fewest common queries to compare two models on (default: %(default)s)",
    )
    p.add_argument(
        "--random-state",
        type=seed,
        default=0,
        metavar="SEED",
        help="seeds the calibration's query sets (default: %(default)s)",
    )
    p.set_defaults(func=_commands.cmd_match)


def _router_and_queries(parser):
    """ROUTER, then queries as arguments, from stdin ('-') or from --file."""
    parser.add_argument("router", metavar="ROUTER", help="a router saved by locus fit")
    parser.add_argument(
        "queries",
        metavar="QUERY",
        nargs="*",
        help="query texts, before or after the options; '-' reads one query per "
        "line from stdin",
    )
    parser.queries_dest = "queries"  # QUERY may also follow options
    parser.add_argument(
        "--file", type=path, metavar="FILE", help="read one query per line from FILE"
    )


def _metric_option(parser):
    parser.add_argument(
        "--metric",
        choices=["cosine", "euclidean"],
        default="cosine",
        help="distance between embeddings (default: %(default)s)",
    )


def _add_external(sub):
    """Subcommands of optional parts of the package (``locus serve``)."""
    try:
        from ..serve._cli import add_subparsers
    except ModuleNotFoundError as exc:
        if exc.name not in ("locus_sklearn.serve", "locus_sklearn.serve._cli"):
            raise  # the module is there but something it needs is not
        return
    add_subparsers(sub)


def build_parser():
    """The argument parser of the ``locus`` command.

    Returns
    -------
    parser : argparse.ArgumentParser
        Parsed arguments carry ``func``, the function that runs the
        subcommand.

    Examples
    --------
    >>> args = build_parser().parse_args(["neighbors", "router.locus", "gpt-4o"])
    >>> args.k, args.func.__name__
    (5, 'cmd_neighbors')
    """
    from .. import __version__

    common, encoding, output = _shared_parents()
    parser = _Parser(
        prog=PROG,
        parents=[common],
        description="LOCUS model embeddings: route queries to LLMs, onboard models, "
        "compare them and choose portfolios.",
        epilog="Run `locus COMMAND --help` for a command's options. Exit status: "
        "0 success, 1 invalid data or values, 2 bad command line, 3 a file that "
        "cannot be read or written or a port that cannot be opened, 130 "
        "interrupted, 141 the reader of stdout closed it early.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_demo(sub)
    _add_fit(sub, common, encoding)
    _add_route(sub, common, encoding, output)
    _add_embed(sub, common, encoding)
    _add_onboard(sub, common, encoding)
    _add_select(sub, common, output)
    _add_portfolio(sub, common, encoding, output)
    _add_neighbors(sub, common, encoding, output)
    _add_match(sub, common, output)
    _add_external(sub)
    return parser
