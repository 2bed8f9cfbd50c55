"""Command-line commands for deploying a router (also ``python -m locus_sklearn.serve``).

::

    locus serve          ROUTER [--config gateway.yaml] [--host 127.0.0.1] [--port 8000]
    locus calibrate      ROUTER EVALS (--target-cost C | --target-share S --models A,B
                         | --min-accuracy A) [--cv K] [-o ROUTER_OUT]
    locus litellm-config ROUTER --config gateway.yaml [-o litellm.yaml]

:func:`add_subparsers` registers them on the ``locus`` parser; each parser's
``func`` (also ``handler``) runs its command and returns the exit status.
Only ``serve`` and ``litellm-config`` need the serving extra; nothing heavy is
imported until a command runs.
"""

import argparse
import math
import os
import socket
import sys
from pathlib import Path

from .._cli._commands import (
    _ENCODER_TERMS,
    _encoder_arg,
    _in_option_terms,
    _warnings_in_option_terms,
)
from .._cli._errors import EXIT_IO, EXIT_USAGE, CommandError, interrupts_kept
from .._cli._io import (
    check_not_an_input,
    check_writable,
    emit_json,
    load_estimator,
    read_evals,
    read_lines,
    write_estimator,
    write_text,
)
from .._cli._parser import _device, _Parser
from .._cli._types import (
    fraction,
    int_at_least,
    model_list,
    nonnegative_float,
    nonnegative_int,
    path,
    positive_float,
    positive_int,
    resolve_models,
    threads,
)
from ._batching import MAX_WINDOW_MS

__all__ = ["add_subparsers", "build_parser", "main"]

PROG = "locus"


def _port(text):
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port in [1, 65535], got {text!r}")
    return value


def _batch_window(text):
    value = nonnegative_float(text)
    if value > MAX_WINDOW_MS:
        raise argparse.ArgumentTypeError(
            f"expected milliseconds in [0, {MAX_WINDOW_MS}], got {text!r}"
        )
    return value


def _url(host, port):
    """Where ``locus serve`` listens, as said on its "serving" line: an IPv6
    address in brackets (``http://[::1]:8000``); no host is every interface."""
    if not host:
        return f"port {port} of every interface"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _log_config(level):
    """uvicorn's logging configuration, with the service's own logger
    (``locus_sklearn.serve``: reloads, errors) at ``level`` too: uvicorn
    configures only its loggers, which left the service's INFO lines unseen."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["locus_sklearn.serve"] = {
        "handlers": ["default"],
        "level": level.upper(),
        "propagate": False,
    }
    return config


def _load_router(args, encoder):
    with _in_option_terms(*_ENCODER_TERMS, common=False):
        return load_estimator(args.router, encoder=encoder, device=args.device)


def _json_number(value):
    """JSON has no NaN or infinity: an unbounded end or a value not computed
    is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _read_calibration_set(path):
    """Scored evaluations (csv/parquet/jsonl), or queries, one per line (.txt)."""
    path = Path(path)
    if path.suffix.lower() == ".txt":
        queries = [line for line in read_lines(path, "EVALS") if line.strip()]
        if not queries:
            raise ValueError(f"{str(path)!r} holds no queries.")
        return queries
    return read_evals(path)


# -------------------------------------------------------------------- commands
# calibrate_cost_weight's parameters, as calibrate's options.
_CALIBRATE_OPTIONS = [
    ("min_accuracy needs", "--min-accuracy needs"),
    ("models has", "--models has"),
    ("target_share needs models=", "--target-share needs --models"),
    ("models repeats", "--models repeats"),
    ("fit it with model_costs=", "fit it with `locus fit --costs FILE`"),
    ("shrinkage='auto'", "--shrinkage auto"),
    ("shrinkage=None", "--shrinkage none"),
    ("a fixed shrinkage below 1", "a --shrinkage below 1"),
    ("cv=", "--cv "),
    ("evals", "EVALS"),
    *_ENCODER_TERMS,
]

# calibrate_cost_weight's warning at shrinkage 1, whose way out is a refit.
_CALIBRATE_WARNING_TERMS = [
    ("LocusRouter.shrinkage_", "The router's shrinkage"),
    ("fit with shrinkage='auto'", "refit with `locus fit --shrinkage auto`"),
    *_CALIBRATE_OPTIONS,
]

# The router file and the gateway configuration, as create_app and
# litellm_config name them: cost_weight there is the configuration's key.
_SERVE_TERMS = [
    ("serve a router fitted with model_costs=", "serve a router fitted with "
     "`locus fit --costs FILE`"),
    # The query encoder's backend, which --encoder-backend sets.
    ("backend='onnx'", "--encoder-backend onnx"),
    ("backend='torch'", "--encoder-backend torch"),
    *_ENCODER_TERMS,
]  # fmt: skip


def _cmd_calibrate(args):
    from ..inspection import calibrate_cost_weight

    if args.target_share is not None and not args.models:
        raise CommandError("--target-share needs --models", status=EXIT_USAGE)
    if args.refit and args.cv is None:
        raise CommandError("--refit needs --cv", status=EXIT_USAGE)
    if args.output is not None:
        check_writable(args.output, "ROUTER_OUT")  # before any work
        check_not_an_input(
            args.output,
            "ROUTER_OUT",
            {"EVALS": args.evals, "--encodings": args.encodings},
        )
    router = _load_router(args, _encoder_arg(args))
    evals = _read_calibration_set(args.evals)
    models = args.models and resolve_models(args.models, router.classes_)
    # With --cv, copies of the router are refitted: a Ctrl-C there must stop
    # the command, not leave a fold trained part-way.
    with (
        interrupts_kept(),
        _warnings_in_option_terms(*_CALIBRATE_WARNING_TERMS),
        _in_option_terms(*_CALIBRATE_OPTIONS),
    ):
        result = calibrate_cost_weight(
            router,
            evals,
            target_cost=args.target_cost,
            target_share=args.target_share,
            models=models,
            min_accuracy=args.min_accuracy,
            cv=args.cv,
            refit=args.refit,
        )
    if args.output is not None:
        router.set_params(cost_weight=result.cost_weight)
        write_estimator(router, args.output, "ROUTER_OUT")
    if args.json:
        emit_json({key: _json_number(value) for key, value in result.items()})
    else:
        print(f"cost_weight  {result.cost_weight:.6g}")
        # The λ that route the calibration queries as cost_weight does.
        print(f"same routing [{result.lower:.6g}, {result.upper:.6g})")
        print(f"mean_cost    {result.mean_cost:.6g}")
        if args.models:
            print(f"share        {result.share:.4f}  (of calls to {','.join(models)})")
        if result.accuracy == result.accuracy:
            # Over the queries whose routed model has a score (all of them on
            # a complete table).
            print(
                f"accuracy     {result.accuracy:.4f}  (over {result.n_scored} "
                "queries whose routed model has a score)"
            )
        print(f"n_queries    {result.n_queries}")
    if args.output is not None:
        print(
            f"{PROG}: wrote {args.output} with cost_weight={result.cost_weight:.6g}",
            file=sys.stderr,
        )
    return 0


def _listen(host, port):
    """Sockets bound and listening on ``host:port``, one per address the host
    resolves to (as uvicorn itself would bind them).

    Raises a CommandError (exit status 3, a port that cannot be opened)
    naming the address: a port in use, an address this machine does not
    have, a host name that does not resolve.
    """
    sockets = []
    try:
        infos = socket.getaddrinfo(
            host or None,
            port,
            type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE,
        )
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            if os.name != "nt":
                # Lets a restarted server bind at once, past the last one's
                # TIME_WAIT connections. Not on Windows, where it lets a
                # second socket bind a port in use (CPython's
                # socket.create_server and asyncio leave it unset there).
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(2048)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        reason = exc.strerror or str(exc)
        raise CommandError(
            f"cannot listen on {host}:{port}: {reason}", status=EXIT_IO
        ) from None
    return sockets


def _run_server(server, sockets):
    """Run the uvicorn ``server`` on the bound ``sockets`` until it stops."""
    server.run(sockets=sockets)


def _cmd_serve(args):
    from ._deps import require

    uvicorn = require("uvicorn")
    # --threads is applied by the runner (locus_sklearn._cli.run) around
    # the whole command, the server's lifetime included.
    from ._app import _check_admin_token, create_app

    # Checked before the router loads, naming the option (create_app checks
    # it too, naming its parameter): unset, or with a character no request
    # can carry, every reload would be refused.
    if args.admin_token_env is not None:
        token = os.environ.get(args.admin_token_env)
        if not token:
            raise ValueError(
                f"--admin-token-env {args.admin_token_env}: the environment "
                "variable is not set (or is empty); set it to the token POST "
                "/admin/reload is to require."
            )
        _check_admin_token(token, f"--admin-token-env {args.admin_token_env}")

    encoder = _encoder_arg(args)
    with _in_option_terms(*_SERVE_TERMS, common=False):
        app = create_app(
            args.router,
            gateway=args.config,
            encoder=encoder,
            encoder_backend=args.encoder_backend,
            device=args.device,
            max_batch=args.max_batch,
            batch_window_ms=args.batch_window_ms,
            max_queries=args.max_queries,
            max_body_bytes=args.max_body_bytes,
            watch_interval=args.watch,
            admin_token_env=args.admin_token_env,
        )
    # Bound here, before saying so: a port in use is one error line (exit
    # 3), not uvicorn's own exit after a "serving" line.
    sockets = _listen(args.host, args.port)
    try:
        config = uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            log_config=_log_config(args.log_level),
            timeout_keep_alive=args.keep_alive,
        )
        server = uvicorn.Server(config)
        print(
            f"{PROG}: serving {args.router} on {_url(args.host, args.port)} "
            f"(API docs at /docs)",
            file=sys.stderr,
            flush=True,
        )
        _run_server(server, sockets)
    finally:
        for sock in sockets:
            sock.close()
    return 0


def _cmd_litellm(args):
    from ._deps import require
    from ._litellm import litellm_config

    yaml = require("yaml")
    if args.output is not None:
        check_writable(args.output, "FILE.yaml")  # before any work
        check_not_an_input(
            args.output,
            "-o/--output",
            {"ROUTER": args.router, "--config": args.config},
        )
    # The export reads the pool and its embeddings only: from the path,
    # litellm_config loads no query encoder, so a router saved with
    # include_query_text=False needs no --encodings. Encoder options given
    # are still read (and their files checked), as by every command.
    router = args.router
    encoder = _encoder_arg(args)
    if encoder is not None:
        router = _load_router(args, encoder)
    with _in_option_terms(*_SERVE_TERMS, common=False):
        config = litellm_config(router, args.config, n_fallbacks=args.fallbacks)
    text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
    if args.output is not None:
        write_text(text, args.output, "FILE.yaml")  # atomic
        print(f"{PROG}: wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


# ---------------------------------------------------------------------- parser
def _router_options(p):
    p.add_argument("router", metavar="ROUTER", help="a router file (locus fit -o)")
    exclusive = p.add_mutually_exclusive_group()
    exclusive.add_argument(
        "--encoder",
        type=path,
        metavar="DIR",
        help="a local sentence-transformers model directory (default: what the "
        "router was fitted with)",
    )
    exclusive.add_argument(
        "--encodings",
        type=path,
        metavar="FILE.npz",
        help="precomputed query vectors: npz with arrays 'queries' and 'vectors'; "
        "added to those saved in a router fitted with them",
    )
    p.add_argument(
        "--device",
        type=_device,
        help="torch device, e.g. cpu or cuda (default: CUDA if available)",
    )
    p.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the full traceback on errors",
    )
    # SUPPRESS: a value given before the command name (`locus --threads 2
    # serve ...`) is kept when the option is not repeated after it.
    p.add_argument(
        "--threads",
        type=threads,
        metavar="N",
        default=argparse.SUPPRESS,
        help="torch threads for encoding and scoring (default: torch's; 1 is "
        "faster on a CPU shared with other processes)",
    )


def _add_serve(subparsers):
    """The ``serve`` subcommand's parser."""
    p = subparsers.add_parser(
        "serve",
        help="serve a router over HTTP (routing service and OpenAI-compatible gateway)",
        description="Serve ROUTER with FastAPI/uvicorn: POST /route, GET /models, "
        "GET /healthz, POST /admin/reload; with --config also the OpenAI-compatible "
        "POST /v1/chat/completions and GET /v1/models. Needs "
        "`pip install locus_sklearn[serve]`.",
    )
    _router_options(p)
    p.add_argument(
        "--config",
        type=path,
        metavar="GATEWAY.yaml",
        help="backends of the pool's models (YAML or JSON); enables the gateway",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to listen on (default: %(default)s)",
    )
    p.add_argument(
        "--port", type=_port, default=8000, help="port (default: %(default)s)"
    )
    p.add_argument(
        "--max-batch",
        type=positive_int,
        default=64,
        help="queries per micro-batch (default: %(default)s)",
    )
    p.add_argument(
        "--batch-window-ms",
        type=_batch_window,
        default=0.0,
        metavar="MS",
        help="how long a batch waits for more requests after its first, at "
        f"most {MAX_WINDOW_MS} ms; with 0 it holds what arrived while "
        "the previous one computed (default: %(default)s)",
    )
    p.add_argument(
        "--max-queries",
        type=positive_int,
        default=256,
        help="queries per /route request (default: %(default)s)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=1_000_000,
        help="largest request body (default: %(default)s)",
    )
    p.add_argument(
        "--keep-alive",
        type=positive_float,
        default=65.0,
        metavar="SECONDS",
        help="how long an idle client connection stays open; longer than the "
        "clients' own pool timeout, so that a client never reuses a connection "
        "the server is closing (default: %(default)s)",
    )
    p.add_argument(
        "--watch",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="reload ROUTER when its file changes, checking every SECONDS "
        "(a number > 0; default: reload only on POST /admin/reload)",
    )
    p.add_argument(
        "--admin-token-env",
        metavar="VAR",
        help="environment variable holding a token that POST /admin/reload "
        "then requires as 'Authorization: Bearer TOKEN' (it must be set, "
        "without control characters or a space at either end)",
    )
    p.add_argument(
        "--encoder-backend",
        choices=["torch", "onnx"],
        default="torch",
        help="what runs the query encoder: PyTorch, or ONNX Runtime on the CPU "
        "(same encodings, faster per text query; needs `pip install "
        "locus_sklearn[onnx]`; default: %(default)s)",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
    )
    p.set_defaults(func=_cmd_serve, handler=_cmd_serve)
    return p


def _add_calibrate(subparsers):
    """The ``calibrate`` subcommand's parser."""
    p = subparsers.add_parser(
        "calibrate",
        help="tune the cost weight to a target mean cost, call share or accuracy",
        # ASCII "lambda", not the Greek letter: help is printed on any stdout,
        # one whose encoding cannot write it too.
        description="Find the cost weight lambda that meets one target on the queries "
        "of EVALS: the smallest lambda whose mean cost is <= --target-cost, or the "
        "smallest lambda that sends at most --target-share of calls to --models, or "
        "the largest lambda (the cheapest routing) whose accuracy is >= "
        "--min-accuracy (needs scores). The smallest lambda is the one that weighs "
        "cost least among those meeting the target, not necessarily the most "
        "accurate: accuracy need not fall as lambda grows. "
        "EVALS is a long-format evaluations file "
        "(csv/parquet/jsonl) or, for cost and share targets, a .txt file of queries, "
        "one per line. Use queries the router was not fitted on, or its training "
        "evaluations with --cv.",
    )
    _router_options(p)
    p.add_argument("evals", metavar="EVALS", help="calibration evaluations or queries")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--target-cost",
        type=nonnegative_float,
        metavar="C",
        help="largest mean cost per query (units of the router's costs)",
    )
    target.add_argument(
        "--target-share",
        type=fraction,
        metavar="S",
        help="largest fraction of calls to --models",
    )
    target.add_argument(
        "--min-accuracy", type=fraction, metavar="A", help="smallest routing accuracy"
    )
    p.add_argument(
        "--models",
        type=model_list,
        metavar="A,B",
        help="the models --target-share caps (comma-separated, read as a csv line: "
        "quote a name that holds a comma; spaces around a name are ignored unless "
        "the pool has the name with them); with another target, their share of "
        "calls is reported (share)",
    )
    p.add_argument(
        "--cv",
        type=int_at_least(2),
        metavar="K",
        help="EVALS are the router's training evaluations: route each query by a "
        "P(correct) predicted without its fold's answers, in K folds (K >= 2); a "
        "LocusRouter reuses its network, which saw every fold (optimistic), "
        "unless --refit",
    )
    p.add_argument(
        "--refit",
        action="store_true",
        help="with --cv, refit a LocusRouter (its network too) on each fold's "
        "rows: one network trained per fold, slower, not optimistic",
    )
    p.add_argument(
        "-o",
        "--output",
        type=path,
        metavar="ROUTER_OUT",
        help="write the router with this cost weight (serve that file)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the result as one JSON document; [lower, upper) is the "
        "interval of cost weights that route the calibration queries as "
        "cost_weight does (the text output's 'same routing'), not of all those "
        "meeting the target (upper is null for the last, unbounded interval; a "
        "share or accuracy not computed is null too)",
    )
    p.set_defaults(func=_cmd_calibrate, handler=_cmd_calibrate)
    return p


def _add_litellm_config(subparsers):
    """The ``litellm-config`` subcommand's parser."""
    p = subparsers.add_parser(
        "litellm-config",
        help="export the fallback order as a LiteLLM proxy configuration",
        description="Write a LiteLLM configuration (model_list and "
        "router_settings.fallbacks) for the pool models with a backend in --config, "
        "each falling back along the capability-based fallback order.",
    )
    _router_options(p)
    p.add_argument(
        "--config",
        type=path,
        metavar="GATEWAY.yaml",
        required=True,
        help="the gateway configuration (backends)",
    )
    p.add_argument(
        "--fallbacks",
        type=nonnegative_int,
        default=None,
        metavar="N",
        help="fallbacks per model (default: fallback.max_attempts - 1)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=path,
        metavar="FILE.yaml",
        help="write here instead of stdout",
    )
    p.set_defaults(func=_cmd_litellm, handler=_cmd_litellm)
    return p


def add_subparsers(subparsers):
    """Register ``serve``, ``calibrate`` and ``litellm-config``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The ``locus`` parser's subcommands (``parser.add_subparsers()``).

    Returns
    -------
    parsers : dict of str to argparse.ArgumentParser

    Examples
    --------
    >>> import argparse
    >>> from locus_sklearn.serve._cli import add_subparsers
    >>> parser = argparse.ArgumentParser(prog="locus")
    >>> parsers = add_subparsers(parser.add_subparsers(dest="command"))
    >>> args = parser.parse_args(["calibrate", "r.safetensors", "evals.csv",
    ...                           "--target-cost", "0.5"])
    >>> args.target_cost, args.func.__name__
    (0.5, '_cmd_calibrate')
    """
    return {
        "serve": _add_serve(subparsers),
        "calibrate": _add_calibrate(subparsers),
        "litellm-config": _add_litellm_config(subparsers),
    }


def build_parser():
    """A stand-alone parser with these commands (``python -m locus_sklearn.serve``)."""
    parser = _Parser(prog=PROG, description="Deploy a locus_sklearn router.")
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show tracebacks on errors",
    )
    parser.add_argument(
        "--threads",
        type=threads,
        metavar="N",
        default=argparse.SUPPRESS,
        help="number of CPU threads torch uses (default: torch's own choice)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    add_subparsers(sub)
    return parser


def main(argv=None):
    """Run ``serve``, ``calibrate`` or ``litellm-config``.

    Returns
    -------
    status : int
        The statuses of ``locus`` (it runs the commands the same way): 0 on
        success, 1 for invalid data or values, 3 for a file that cannot be
        read or written or a port that cannot be opened (each one line on
        stderr), 130 when interrupted, 141 when the reader of stdout closed
        it early (``... | head``). A bad command line exits with status 2
        (from argparse).
    """
    from .._cli import _offline_environment, _standard_streams, run

    # Around the parse too, as locus does: --help and --version write to
    # stdout, and a failed write there names it. Offline as locus is, and the
    # caller's environment as it was afterwards.
    with _offline_environment(), _standard_streams():
        return run(build_parser().parse_args(argv))
