"""Data-parallel training: two CPU processes (gloo) against one, same quality?

Protocol: a synthetic pool (``make_model_pool``: 40 models, 2,000 queries,
256 evaluations per model, ground-truth probabilities known). A quarter of
the queries are held out (test queries) and 8 models are held out of
training entirely (unseen models). A small :class:`LocusEmbedder` is fitted
on the other models' rows of the training queries

- in one process (1 thread), and
- data-parallel in two processes of 1 thread each, launched with
  ``python -m torch.distributed.run --nproc_per_node 2`` (gloo on
  127.0.0.1; ``accelerate launch`` needs a config file for several CPU
  processes, torchrun does not), passing ``accelerator=Accelerator(cpu=True)``.

Same hyper-parameters in both (``batch_size`` counts a step's episodes over
all processes, so both take the same number of steps of the same size).
Every model, seen or not, is then embedded from its training-query rows and
its P(correct) predicted on the test queries. Reported per seed: AUC of
P(correct) against the observed test scores (all models; unseen models),
correlation with the true probabilities, routing accuracy on the test
queries, epochs and the fit's wall time (inside the processes, so without
the launch) and the launch-to-exit wall time of the two-process run.

Writes ``results/ddp.md`` and ``results/ddp.json``.

Run: ``HF_HUB_OFFLINE=1 python benchmarks/ddp_train.py`` (a few minutes on 2
cores; ``--quick`` for a smoke run).
"""

import argparse
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
from _provenance import git_commit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
sys.path.insert(0, ROOT)

SETTINGS = dict(
    embedding_dim=32, n_latents=8, n_blocks=1, n_heads=2, hidden_dim=32,
    enc_size=(32, 128), dec_size=64, episodes_per_epoch=128, batch_size=16,
    lr=2e-3, max_epochs=30, patience=5,
)  # fmt: skip
QUICK = dict(SETTINGS, max_epochs=3, episodes_per_epoch=32)
POOL = dict(n_models=40, n_queries=2000, evals_per_model=256)
QUICK_POOL = dict(n_models=12, n_queries=300, evals_per_model=100)
N_UNSEEN = 8


def make_split(seed, quick):
    """The pool and its split: (pool, train rows, test rows, unseen models)."""
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(**(QUICK_POOL if quick else POOL), random_state=seed)
    rng = np.random.RandomState(seed)
    queries = pool.queries["query"].to_numpy()
    test_queries = rng.choice(queries, len(queries) // 4, replace=False)
    models = pool.models["model"].to_numpy()
    unseen = np.sort(rng.choice(models, 2 if quick else N_UNSEEN, replace=False))
    is_test = pool.evals["query"].isin(test_queries)
    train = pool.evals[~is_test].reset_index(drop=True)
    test = pool.evals[is_test].reset_index(drop=True)
    return pool, train, test, unseen


def embedder(pool, seed, quick, accelerator=None):
    from locus_sklearn import LocusEmbedder

    return LocusEmbedder(
        pool.encodings,
        random_state=seed,
        accelerator=accelerator,
        **(QUICK if quick else SETTINGS),
    )


def fit(pool, train, unseen, seed, quick, accelerator=None):
    """Fit on the seen models' training rows; (embedder, fit seconds)."""
    start = time.perf_counter()
    model = embedder(pool, seed, quick, accelerator)
    model.fit(train[~train["model"].isin(unseen)])
    return model, time.perf_counter() - start


def evaluate(model, pool, train, test, unseen):
    """Quality on the test queries of every model embedded from its train rows."""
    from sklearn.metrics import roc_auc_score

    from locus_sklearn.metrics import routing_accuracy

    models = np.sort(train["model"].unique())
    queries = np.sort(test["query"].unique())
    proba = model.predict_proba(model.transform(train), queries, evals=train)
    q_index = np.searchsorted(queries, test["query"].to_numpy())
    m_index = np.searchsorted(models, test["model"].to_numpy())
    predicted = proba[q_index, m_index]
    observed = test["score"].to_numpy()
    is_unseen = np.isin(test["model"].to_numpy(), unseen)
    y_true = np.full(proba.shape, np.nan)
    y_true[q_index, m_index] = observed
    truth = pool.probabilities.loc[queries, models].to_numpy()
    return {
        "auc": float(roc_auc_score(observed, predicted)),
        "auc_unseen": float(roc_auc_score(observed[is_unseen], predicted[is_unseen])),
        "corr_true_p": float(np.corrcoef(proba.ravel(), truth.ravel())[0, 1]),
        "routing_accuracy": float(routing_accuracy(y_true, proba)),
    }


# ------------------------------------------------------------------ worker
def worker(args):
    """One of the two processes (run by torch.distributed.run)."""
    import torch
    from accelerate import Accelerator

    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    pool, train, _, unseen = make_split(args.seed, args.quick)
    model, seconds = fit(pool, train, unseen, args.seed, args.quick, accelerator)
    if accelerator.is_main_process:
        model.save(os.path.join(args.out, "embedder.safetensors"))
        with open(os.path.join(args.out, "fit.json"), "w", encoding="utf-8") as f:
            json.dump(
                {
                    "fit_s": seconds,
                    "n_processes": accelerator.num_processes,
                    "epochs": model.n_epochs_,
                },
                f,
            )


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_two_processes(seed, quick, out):
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "GLOO_SOCKET_IFNAME": "lo",
    }
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
        os.path.abspath(__file__), "--worker", "--seed", str(seed), "--out", out,
    ] + (["--quick"] if quick else [])  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    with open(os.path.join(out, "fit.json"), encoding="utf-8") as f:
        info = json.load(f)
    return info, wall


def run_seed(seed, quick):
    import torch

    from locus_sklearn import LocusEmbedder

    torch.set_num_threads(1)
    pool, train, test, unseen = make_split(seed, quick)
    one, seconds = fit(pool, train, unseen, seed, quick)
    rows = [
        {
            "seed": seed,
            "setting": "1 process x 1 thread",
            "epochs": one.n_epochs_,
            "fit_s": seconds,
            **evaluate(one, pool, train, test, unseen),
        }
    ]
    with tempfile.TemporaryDirectory() as out:
        info, wall = run_two_processes(seed, quick, out)
        two = LocusEmbedder.load(os.path.join(out, "embedder.safetensors"))
    assert info["n_processes"] == 2
    rows.append(
        {
            "seed": seed,
            "setting": "2 processes x 1 thread (gloo)",
            "epochs": info["epochs"],
            "fit_s": info["fit_s"],
            "launch_to_exit_s": wall,
            **evaluate(two, pool, train, test, unseen),
        }
    )
    return rows


METRICS = ("auc", "auc_unseen", "corr_true_p", "routing_accuracy", "epochs", "fit_s")


def summarise(rows):
    summary = {}
    for setting in dict.fromkeys(r["setting"] for r in rows):
        chosen = [r for r in rows if r["setting"] == setting]
        summary[setting] = {
            m: {
                "mean": float(np.mean([r[m] for r in chosen])),
                "std": float(np.std([r[m] for r in chosen], ddof=1))
                if len(chosen) > 1
                else 0.0,
            }
            for m in METRICS
        }
    return summary


def write_markdown(result, path):
    lines = [
        "# Data-parallel training: 2 CPU processes (gloo) vs 1",
        "",
        f"Date {result['date']}, commit `{result['commit']}`, {result['machine']}.",
        f"Pool: `make_model_pool({result['pool']})`, a quarter of the queries "
        f"held out, {result['n_unseen']} models held out of training. "
        f"Settings: `{result['settings']}`. Seeds {result['seeds']}.",
        "Timings are from a machine shared with other work (1-minute load "
        f"average {result.get('load_average_1min_at_end', 'not recorded')} at "
        "the end): noisy.",
        "",
        "| setting | seed | AUC | AUC unseen models | corr. with true P "
        "| routing acc. | epochs | fit s | s per epoch |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['setting']} | {r['seed']} | {r['auc']:.4f} | "
            f"{r['auc_unseen']:.4f} | {r['corr_true_p']:.4f} | "
            f"{r['routing_accuracy']:.4f} | {r['epochs']} | {r['fit_s']:.1f} | "
            f"{r['fit_s'] / r['epochs']:.2f} |"
        )
    lines += ["", "Mean ± sample standard deviation over seeds (ddof=1):", ""]
    lines += [
        "| setting | AUC | AUC unseen models | corr. with true P | routing acc. "
        "| epochs | fit s |",
        "|---|---|---|---|---|---|---|",
    ]
    for setting, s in result["summary"].items():
        cells = " | ".join(
            f"{s[m]['mean']:.4f} ± {s[m]['std']:.4f}" for m in METRICS[:4]
        )
        lines.append(
            f"| {setting} | {cells} | {s['epochs']['mean']:.1f} | "
            f"{s['fit_s']['mean']:.1f} ± {s['fit_s']['std']:.1f} |"
        )
    lines += ["", result["verdict"], ""]
    if result.get("note"):
        lines += [result["note"], ""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def verdict(rows):
    """Is the two-process quality within the seed spread of one process?"""
    one = [r for r in rows if r["setting"].startswith("1 process")]
    two = [r for r in rows if r["setting"].startswith("2 processes")]
    parts = []
    for metric in ("auc", "auc_unseen", "corr_true_p", "routing_accuracy"):
        diff = np.array([b[metric] - a[metric] for a, b in zip(one, two, strict=True)])
        spread = float(np.std([r[metric] for r in one], ddof=1)) if len(one) > 1 else 0
        parts.append(
            f"{metric}: mean difference (2 processes - 1) {diff.mean():+.4f}, "
            f"seed spread (sample std, 1 process) {spread:.4f}"
        )
    return "; ".join(parts) + "."


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)

    # Warm up (first-use costs of torch) so the first seed's time is fair.
    import torch

    torch.set_num_threads(1)
    pool, train, _, unseen = make_split(0, quick=True)
    fit(pool, train, unseen, 0, quick=True)
    rows = []
    for seed in args.seeds:
        rows += run_seed(seed, args.quick)
        print(json.dumps(rows[-2:]), flush=True)
    result = {
        "date": datetime.date.today().isoformat(),
        "commit": git_commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}",
        "pool": QUICK_POOL if args.quick else POOL,
        "n_unseen": 2 if args.quick else N_UNSEEN,
        "settings": {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in (QUICK if args.quick else SETTINGS).items()
        },
        "seeds": args.seeds,
        # Other work on the machine makes every timing here noisy: say how much.
        "load_average_1min_at_end": os.getloadavg()[0],
        "runs": rows,
        "summary": summarise(rows),
        "verdict": verdict(rows),
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ddp.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    write_markdown(result, os.path.join(args.out, "ddp.md"))
    return result


if __name__ == "__main__":
    main()
