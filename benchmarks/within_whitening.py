"""Identity read through the within-model noise (TUNING.md session 44; a measurement).

Self-identification and group retrieval read each model's nearest by the
centred cosine. Here the same fingerprints are also read through the inverse
square root of the *within-model* covariance Sigma_w (the covariance of
f(A) - f(B) for two disjoint row sets A, B of one model: Fisher's metric),
estimated for each of two seeded folds of the models from the *other* fold's
models only. Per pool and seed: the default LocusRouter (``embedding_quality``'s
"baseline" variant and settings) fitted on 256 training rows per model, and for
LOCUS's z (``router.embed``) and the task-, probe- and 16-NN-profiles:

- plain: ``self_identification`` at every n of ``self_id_pairs`` and
  ``group_recall`` on the fingerprint of all training rows;
- pool-whitened: ``whitened_measures`` (session 21's read);
- within-whitened: Sigma_w of the other fold at each n (8 extra draws
  ``pair_sets(split, n, default_rng([seed, 44, n, r]))``, r = 0..7, the
  differences pooled over the other fold's models and draws,
  ``LedoitWolf(assume_centered=True)``), W = Sigma_w^-1/2; a query model's
  self-identification with its own fold's W at the same n, candidates and
  centre whitened the same way; group recall with W from the largest n that
  has pairs, per query model, as ``similarity_recall`` reads it.

The rows, pairs and measures are ``embedding_quality.py``'s; no test query is
read. Nothing is trained differently and nothing is tuned.

Usage: python benchmarks/within_whitening.py [--pools bfcl routerbench mmlu-open shaberi]
       [--seeds 0 1 2] [--out DIR] [--tag T]
"""

# ruff: noqa: E501

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import embedding_quality as eq  # noqa: E402
import routing  # noqa: E402
from _provenance import git_commit  # noqa: E402

POOLS = ("bfcl", "routerbench", "mmlu-open", "shaberi")
N_TRAIN = 256
N_DRAWS = 8
FINGERPRINTS = ("LOCUS", "task-profile", "probe-profile", "16-NN-profile")
READS = ("plain", "pool-whitened", "within-whitened")
OUT = os.path.join(HERE, "results", "embedding_quality_2026-12-05_within_whitening")


def cached(fingerprint, keep):
    """``fingerprint`` remembering its value on the frames of ``keep`` (by
    identity): the plain, pool-whitened and within-whitened reads use the same
    arrays of the evaluated pairs, computed once."""
    memo = {}
    ids = {id(x) for x in keep}

    def f(rows):
        key = id(rows)
        if key not in ids:
            return fingerprint(rows)
        if key not in memo:
            memo[key] = np.asarray(fingerprint(rows), dtype=np.float64)
        return memo[key]

    return f


def inverse_sqrt(cov):
    values, vectors = np.linalg.eigh(cov)
    return vectors / np.sqrt(np.maximum(values, 1e-12)) @ vectors.T


def within_whiteners(diffs, folds):
    """fold index -> (W, shrinkage, n_samples): Sigma_w^-1/2 of the other
    fold's differences (``diffs`` (draws, models, d))."""
    from sklearn.covariance import LedoitWolf

    out = {}
    for k, fold in enumerate(folds):
        other = np.setdiff1d(np.arange(diffs.shape[1]), fold)
        X = diffs[:, other, :].reshape(-1, diffs.shape[2])
        lw = LedoitWolf(assume_centered=True).fit(X)
        out[k] = (inverse_sqrt(lw.covariance_), float(lw.shrinkage_), len(X))
    return out


def within_self_id(Z1, Z2, folds, whiteners):
    """Share of models whose own second fingerprint is nearest to its first,
    each query model read through its fold's W; centre = mean of all rows of
    Z1 and Z2 whitened by that W (as ``self_identification``)."""
    hits = np.zeros(len(Z1), dtype=bool)
    for k, fold in enumerate(folds):
        W = whiteners[k][0]
        A, B = Z1 @ W, Z2 @ W
        centre = np.concatenate([A, B]).mean(0)
        S = eq.cosine_matrix(A[fold], B, centre)
        hits[fold] = S.argmax(1) == fold
    return float(hits.mean())


def within_group_recall(Z, models, groups, folds, whiteners):
    """``group_recall`` with each query model's row of the similarity read
    through its fold's W (centre = mean of the whitened Z)."""
    if not groups:
        return None
    S = np.zeros((len(Z), len(Z)))
    for k, fold in enumerate(folds):
        Zw = Z @ whiteners[k][0]
        S[fold] = eq.cosine_matrix(Zw)[fold]
    return eq.similarity_recall(S, models, groups)


def run(pool, seed, log):
    t0 = time.perf_counter()
    data = eq.load_pool(pool, seed)
    split = routing.Split(data, seed)
    fp = eq.Fingerprints(data, split, seed=seed)
    groups = data.info.get("groups", {})
    models = split.models
    train = split.training_rows(N_TRAIN)
    pairs = eq.self_id_pairs(split, seed)
    tv = time.perf_counter()
    router = eq.fit_locus(data, seed, "baseline", train)
    fit_s = time.perf_counter() - tv
    assert list(router.classes_) == list(models), "router's models are not split.models"
    embed_check = float(np.abs(router.embed(train) - router.model_embeddings_).max())
    log(f"{pool} seed {seed}: LOCUS fit {fit_s:.0f}s, {len(models)} models, "
        f"pairs at n {[k for k, ab in pairs.items() if ab is not None]}, "
        f"|embed(train) - model_embeddings_| max {embed_check:.2e}")  # fmt: skip
    keep = [train] + [x for ab in pairs.values() if ab is not None for x in ab]
    fingerprints = {
        "LOCUS": cached(router.embed, keep),
        "task-profile": cached(fp.task_profile, keep),
        "probe-profile": cached(fp.probe_profile, keep),
        "16-NN-profile": cached(fp.knn_profile, keep),
    }
    full = {
        name: (np.asarray(router.model_embeddings_, dtype=np.float64)
               if name == "LOCUS" else f(train))
        for name, f in fingerprints.items()
    }  # fmt: skip
    perm = np.random.default_rng([seed, 44]).permutation(len(models))
    half = len(models) // 2
    folds = [np.sort(perm[:half]), np.sort(perm[half:])]
    ns = [k for k, ab in pairs.items() if ab is not None]
    # The extra draws, shared by every fingerprint (generators seeded apart
    # from the evaluated pairs' [seed, 31, n]).
    draws = {
        k: [eq.pair_sets(split, k, np.random.default_rng([seed, 44, k, r]))
            for r in range(N_DRAWS)]
        for k in ns
    }  # fmt: skip
    out = {
        "n_models": len(models),
        "folds": [[str(models[i]) for i in fold] for fold in folds],
        "fit_s": fit_s,
        "embed_check_max_abs": embed_check,
        "n_epochs": int(router.embedder_.n_epochs_),
        "ns": ns,
        "group_n": max(ns) if ns else None,
        "fingerprints": {},
    }
    for name, f in fingerprints.items():
        tf = time.perf_counter()
        Z = full[name]
        row = {"dim": int(Z.shape[1])}
        plain = {"groups": eq.group_recall(Z, models, groups)}
        plain |= eq.identity_measures(f, pairs)
        row["plain"] = plain
        row["pool-whitened"] = eq.whitened_measures(Z, f, pairs, models, groups)
        whiteners, lw = {}, {}
        self_id = {}
        for k in ns:
            diffs = np.stack(
                [np.asarray(f(a), float) - np.asarray(f(b), float) for a, b in draws[k]]
            )
            whiteners[k] = within_whiteners(diffs, folds)
            lw[str(k)] = [
                {"shrinkage": w[1], "n_samples": w[2]} for w in whiteners[k].values()
            ]
            a, b = pairs[k]
            self_id[str(k)] = within_self_id(f(a), f(b), folds, whiteners[k])
        within = {
            "groups": (
                within_group_recall(Z, models, groups, folds, whiteners[max(ns)])
                if ns else None
            ),
            "self_id": self_id,
            "ledoit_wolf": lw,
        }  # fmt: skip
        row["within-whitened"] = within
        row["seconds"] = time.perf_counter() - tf
        out["fingerprints"][name] = row
        log(f"  {pool} seed {seed} {name} (d={row['dim']}, {row['seconds']:.0f}s): "
            + "; ".join(f"{r} self-id {row[r]['self_id']} groups "
                        f"{_short(row[r]['groups'])}" for r in READS))  # fmt: skip
    out["wall_s"] = time.perf_counter() - t0
    return out


def _short(g):
    return (
        None
        if g is None
        else {k: round(v, 3) for k, v in g.items() if k != "n_queries"}
    )


# ------------------------------------------------------------- summary
def summarise(pool_runs):
    """fingerprint -> read -> measure -> mean/std/n over seeds."""
    runs = list(pool_runs.values())
    out = {}
    for name in FINGERPRINTS:
        out[name] = {}
        for read in READS:
            blocks = [r["fingerprints"][name][read] for r in runs]
            s = {}
            keys = sorted({k for b in blocks for k in b["self_id"]}, key=int)
            for key in keys:
                s[f"self-id@{key}"] = routing.mean_std(
                    [b["self_id"].get(key) for b in blocks]
                )
            # Each seed at the largest n its split allows (MMLU-Pro open's
            # split 0 stops at 256: TUNING.md session 41's reading).
            s["self-id@largest"] = routing.mean_std(
                [
                    b["self_id"][max(b["self_id"], key=int)]
                    for b in blocks
                    if b["self_id"]
                ]
            )
            if blocks[0]["groups"] is not None:
                for k in ("recall@1", "recall@3"):
                    s[k] = routing.mean_std([b["groups"][k] for b in blocks])
            out[name][read] = s
    return out


def verdict(summary, runs):
    """Session 44's rule, read mechanically on the three-seed means, and issue
    12's identity target (reported, not chosen on)."""
    rule = {"pools": {}}
    gains, worst_ok, groups_ok = 0, True, True
    for pool, s in summary.items():
        locus = s["LOCUS"]
        top = "self-id@largest"
        d = locus["within-whitened"][top]["mean"] - locus["plain"][top]["mean"]
        entry = {"largest_n": [r["ns"][-1] for r in runs[pool].values()],
                 "self_id_plain": locus["plain"][top]["mean"],
                 "self_id_within": locus["within-whitened"][top]["mean"],
                 "self_id_diff": d}  # fmt: skip
        gains += d >= 0.03 - 1e-12
        worst_ok &= d >= -0.02 - 1e-12
        if "recall@1" in locus["plain"]:
            dr = (
                locus["within-whitened"]["recall@1"]["mean"]
                - locus["plain"]["recall@1"]["mean"]
            )
            entry |= {"recall@1_plain": locus["plain"]["recall@1"]["mean"],
                      "recall@1_within": locus["within-whitened"]["recall@1"]["mean"],
                      "recall@1_diff": dr}  # fmt: skip
            groups_ok &= dr >= -0.02 - 1e-12
        rule["pools"][pool] = entry
    rule |= {
        "pools_gaining_0.03": int(gains),
        "no_pool_below_-0.02": bool(worst_ok),
        "recall@1_not_below_-0.02": bool(groups_ok),
    }
    rule["adopt"] = bool(gains >= 3 and worst_ok and groups_ok)
    target = {}
    for pool, s in summary.items():
        target[pool] = {}
        measures = [
            k for k in s["LOCUS"]["within-whitened"] if k.startswith("self-id@")
        ]
        measures = [k for k in measures if k != "self-id@largest"] + ["self-id@largest"]
        measures += [k for k in ("recall@1", "recall@3") if k in s["LOCUS"]["plain"]]
        for m in measures:
            best, where = -1.0, None
            for name in FINGERPRINTS[1:]:
                for read in READS:
                    v = s[name][read].get(m)
                    if v is not None and v["mean"] > best:
                        best, where = v["mean"], f"{name} {read}"
            mine = s["LOCUS"]["within-whitened"][m]["mean"]
            target[pool][m] = {"locus_within": mine, "best_simple": best,
                               "best_simple_is": where,
                               "at_or_above": bool(mine >= best - 1e-12)}  # fmt: skip
    return {"rule": rule, "identity_target": target}


def markdown(results):
    lines = [
        "# Identity read through the within-model noise (TUNING.md session 44)",
        "",
        f"`python benchmarks/within_whitening.py` ({results['date']}, commit "
        f"`{results['commit']}`, {results['wall_s'] / 60:.1f} min, one thread). "
        "Three-seed means ± population std (ddof=0; seeds "
        f"{results['seeds']}); {N_TRAIN} training rows per model, the default "
        "LocusRouter (`embedding_quality.py`'s baseline), its rows and "
        "self-identification pairs. plain = centred cosine; pool-whitened = "
        "session 21's read (Ledoit-Wolf of the pool's fingerprints); "
        "within-whitened = each query model read through Σ_w^-1/2 of the other "
        "fold's models (8 draws of two disjoint row sets per model at each n, "
        "Ledoit-Wolf, assume_centered); group recall with Σ_w of the largest n. "
        "Raw numbers in `within_whitening.json`.",
        "",
    ]
    for pool, s in results["summary"].items():
        cols = [k for k in s["LOCUS"]["plain"]]
        lines += [f"## {pool}", "", "| fingerprint | read | " + " | ".join(cols) + " |",
                  "|---|---|" + "---|" * len(cols)]  # fmt: skip
        for name in FINGERPRINTS:
            for read in READS:
                cells = []
                for c in cols:
                    v = s[name][read].get(c)
                    cells.append(
                        "–"
                        if v is None
                        else f"{v['mean']:.3f} ± {v['std']:.3f}"
                        + (
                            ""
                            if v["n"] == len(results["seeds"])
                            else f" ({v['n']} seeds)"
                        )
                    )
                lines.append(f"| {name} | {read} | " + " | ".join(cells) + " |")
        lines.append("")
    v = results["verdict"]
    rule = v["rule"]
    lines += ["## Rule (session 44)", "",
              "| pool | largest n per seed | LOCUS self-id plain | within | diff | recall@1 plain | within | diff |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for pool, e in rule["pools"].items():
        r = (f"{e['recall@1_plain']:.3f} | {e['recall@1_within']:.3f} | {e['recall@1_diff']:+.3f}"
             if "recall@1_diff" in e else "– | – | –")  # fmt: skip
        lines.append(f"| {pool} | {e['largest_n']} | {e['self_id_plain']:.3f} | "
                     f"{e['self_id_within']:.3f} | {e['self_id_diff']:+.3f} | {r} |")  # fmt: skip
    lines += [
        "",
        f"Pools with self-id gain >= 0.03: {rule['pools_gaining_0.03']} of "
        f"{len(rule['pools'])}; none below -0.02: {rule['no_pool_below_-0.02']}; "
        f"recall@1 none below -0.02: {rule['recall@1_not_below_-0.02']}. "
        f"**Verdict: {'adopt as inspection option' if rule['adopt'] else 'not adopted'}.**",
        "",
        "## Issue 12's identity target (reported, not chosen on)",
        "",
        "LOCUS within-whitened against the best simple fingerprint (any of its three reads).",
        "",
        "| pool | measure | LOCUS within | best simple | which | at or above |",
        "|---|---|---|---|---|---|",
    ]
    for pool, t in v["identity_target"].items():
        for m, e in t.items():
            lines.append(f"| {pool} | {m} | {e['locus_within']:.3f} | {e['best_simple']:.3f} | "
                         f"{e['best_simple_is']} | {'yes' if e['at_or_above'] else 'no'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pools", nargs="+", default=list(POOLS), choices=eq.POOLS)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--out", default=OUT)
    p.add_argument("--tag", default="")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    log = lambda *a: print(*a, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "commit": git_commit(),
        "settings": {
            k: list(v) if isinstance(v, tuple) else v for k, v in eq.SETTINGS.items()
        },
        "n_train": N_TRAIN,
        "n_draws": N_DRAWS,
        "self_ns": list(eq.SELF_NS),
        "seeds": args.seeds,
        "pools": {},
    }
    os.makedirs(args.out, exist_ok=True)
    stem = f"within_whitening_{args.tag}" if args.tag else "within_whitening"
    for pool in args.pools:
        results["pools"][pool] = {}
        for seed in args.seeds:
            results["pools"][pool][str(seed)] = run(pool, seed, log)
            results["wall_s"] = time.perf_counter() - t0
            with open(
                os.path.join(args.out, f"{stem}.json"), "w", encoding="utf-8"
            ) as f:
                json.dump(results, f, indent=1)
    results["summary"] = {pool: summarise(r) for pool, r in results["pools"].items()}
    results["verdict"] = verdict(results["summary"], results["pools"])
    results["wall_s"] = time.perf_counter() - t0
    with open(os.path.join(args.out, f"{stem}.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, f"{stem}.md"), "w", encoding="utf-8") as f:
        f.write(markdown(results))
    log(f"wrote {args.out}/{stem}.json/.md ({results['wall_s'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
