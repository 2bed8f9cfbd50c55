"""A candidate against the baseline, paired fit by fit over several random_states.

Reads ``embedding_quality.py`` results in which every variant ran at each of
its ``random_state`` offsets (``baseline``, ``baseline-rs1000``, ...; the
candidate likewise) and pairs each candidate fit with the baseline fit of the
same split and random_state: they share the training rows, the
self-identification sets and the embedder's own validation queries, so the
paired difference ``d = candidate - baseline`` is free of the split's and of
the reseed's common part. For each measure it reports both means, ``d̄`` and
its standard error ``sd(d) / sqrt(pairs)``, and session 40's rule
(``benchmarks/results/TUNING.md``):

- (1) best validation loss: ``d̄`` at most ``+LOSS_BAR`` nats;
- (2) best validation routing: ``d̄`` not below minus the larger of the two
  sides' standard deviations over the fits;
- (3) recall@1 of the pool's groups and self-identification (at the largest n
  each pool has) are *clearly lower* only where ``d̄ < -IDENTITY_BAR`` and
  ``d̄ + 2 SE < 0``;
- (4) no more collapsed fits (relative spread under ``COLLAPSED``);
- (5) the gain the candidate is for: by default Shaberi's sibling recall@1
  ``d̄`` at least +0.03 (session 40); ``--gain POOL MEASURE BAR`` sets another,
  MEASURE one of ``recall@1`` and ``validation-routing``.

Several files of the same pools merge (:func:`merge_results`): a candidate
run alone can be paired with the baseline fits of an earlier run on the same
splits, where every router and measure both runs hold must agree.

With ``--test`` it adds the test routing read after the rule: the default
router (``shrinkage="auto"``; clearly lower where ``d̄ < -0.5`` point and
``d̄ + 2 SE < 0``), the plain router, the default with repeated folds where the
run has it (``--shrinkage-repeats``), the peers, issue 12's bars and the
shrinkage each fit chose.

Usage::

    python benchmarks/paired_random_state.py RESULTS.json [...]
        [--baseline baseline] [--candidate agreement-0.1]
        [--offsets 0 1000 2000] [--n 256] [--test]
        [--gain bfcl validation-routing 0.005]
"""

import argparse
import json
import math
import statistics
import sys

# The rules' collapsed fit (TUNING.md sessions 37-40): the harness's relative
# spread under 1.1e-2, about sqrt(128) times the package's COLLAPSE_SPREAD.
COLLAPSED = 1.1e-2
LOSS_BAR, IDENTITY_BAR, ROUTING_BAR = 0.002, 0.02, 0.005
GAIN = ("shaberi", "recall@1", 0.03)


def _differs(first, second):
    """Where two files' entries of one fit differ: ``(path, a, b)`` or None.

    A fit's measures (a dict) are compared on the keys both files hold, wall
    times (keys ending in ``_s``) left out: a rerun of the same fit on the
    same split takes another time, and a later version may record more.

    >>> _differs({"pr": 1.1, "fit_s": 30.0}, {"pr": 1.1, "fit_s": 31.5, "new": 2})
    >>> _differs({"pr": 1.1}, {"pr": 1.2})
    ("['pr']", 1.1, 1.2)
    """
    if isinstance(first, dict) and isinstance(second, dict):
        for key in first.keys() & second.keys():
            if key.endswith("_s"):
                continue
            inner = _differs(first[key], second[key])
            if inner is not None:
                return (f"[{key!r}]{inner[0]}", inner[1], inner[2])
        return None
    return None if first == second else ("", first, second)


def merge_results(results, more):
    """``more`` (an ``embedding_quality.py`` result) merged into ``results``.

    A pool only ``more`` has is added. For a pool both have, the shared
    settings and each run's seed and test size must agree, the runs are
    matched seed by seed and each training size's ``routing`` and
    ``embeddings`` entries are joined; an entry both hold must be equal (the
    peers, the fingerprints, the baselines of a rerun; a fit's measures on
    the keys both hold, wall times aside, see :func:`_differs`), else the two
    runs did not share their splits and rows, and pairing them would be
    wrong.

    >>> a = {"p": {"variants": {"baseline": {}}, "runs": [{"seed": 0, "by_n":
    ...     {"256": {"routing": {"kNN": 0.8, "LOCUS baseline": 0.81},
    ...              "embeddings": {"LOCUS baseline": {"pr": 1.1}}}}}]}}
    >>> b = {"p": {"variants": {"refine": {"refine_steps": 10}}, "runs": [{"seed": 0,
    ...     "by_n": {"256": {"routing": {"kNN": 0.8, "LOCUS refine": 0.83},
    ...                      "embeddings": {"LOCUS refine": {"pr": 1.4}}}}}]}}
    >>> merged = merge_results(a, b)["p"]
    >>> sorted(merged["runs"][0]["by_n"]["256"]["routing"])
    ['LOCUS baseline', 'LOCUS refine', 'kNN']
    >>> sorted(merged["variants"])
    ['baseline', 'refine']
    >>> b["p"]["runs"][0]["by_n"]["256"]["routing"]["kNN"] = 0.7
    >>> merge_results(a, b)
    Traceback (most recent call last):
    ...
    ValueError: pool 'p', seed 0, n 256: routing['kNN'] differs between the files (0.8 against 0.7); were they run on the same splits?
    """
    merged = dict(results)
    for name, pool in more.items():
        if name not in merged:
            merged[name] = pool
            continue
        old = merged[name]
        seeds = [[run["seed"] for run in p["runs"]] for p in (old, pool)]
        if seeds[0] != seeds[1]:
            raise ValueError(
                f"pool {name!r}: the files hold seeds {seeds[0]} and {seeds[1]}; "
                "pairing needs the same splits"
            )
        if old.get("settings") != pool.get("settings"):
            raise ValueError(
                f"pool {name!r}: the files' shared settings differ "
                f"({old.get('settings')} against {pool.get('settings')})"
            )
        runs = []
        for run, other in zip(old["runs"], pool["runs"], strict=True):
            for key in run.keys() & other.keys() - {"by_n"}:  # n_test, ...
                if run[key] != other[key]:
                    raise ValueError(
                        f"pool {name!r}, seed {run['seed']}: {key} differs "
                        f"between the files ({run[key]} against {other[key]})"
                    )
            by_n = {}
            for n in {**run["by_n"], **other["by_n"]}:  # the first file's order
                block, extra = run["by_n"].get(n, {}), other["by_n"].get(n, {})
                by_n[n] = {}
                for part in ("routing", "embeddings"):
                    joined = dict(block.get(part, {}))
                    for key, value in extra.get(part, {}).items():
                        if key in joined:
                            where = _differs(joined[key], value)
                            if where is not None:
                                raise ValueError(
                                    f"pool {name!r}, seed {run['seed']}, n {n}: "
                                    f"{part}[{key!r}]{where[0]} differs between "
                                    f"the files ({where[1]} against {where[2]}); "
                                    "were they run on the same splits?"
                                )
                            if isinstance(value, dict):
                                # One fit's measures: the first file's, and any
                                # the other file adds.
                                value = {**value, **joined[key]}
                        joined[key] = value
                    by_n[n][part] = joined
            runs.append({**run, "by_n": by_n})
        merged[name] = {
            **old,
            "variants": {**old.get("variants", {}), **pool.get("variants", {})},
            "runs": runs,
        }
    return merged


def paired(base, cand):
    """Means of both sides, the mean paired difference and its standard error.

    >>> r = paired([1.0, 2.0, 3.0], [2.0, 2.0, 5.0])
    >>> r["base"], r["cand"], r["d"], round(r["se"], 4)
    (2.0, 3.0, 1.0, 0.5774)
    """
    d = [c - b for b, c in zip(base, cand, strict=True)]
    return {
        "base": statistics.fmean(base),
        "cand": statistics.fmean(cand),
        "d": statistics.fmean(d),
        "se": statistics.stdev(d) / math.sqrt(len(d)),
        "base_sd": statistics.pstdev(base),
        "cand_sd": statistics.pstdev(cand),
    }


def clearly_lower(r, bar):
    """Whether the candidate is lower by more than ``bar`` and beyond noise.

    >>> clearly_lower({"d": -0.03, "se": 0.01}, 0.02)
    True
    >>> clearly_lower({"d": -0.03, "se": 0.02}, 0.02)
    False
    """
    return r["d"] < -bar and r["d"] + 2 * r["se"] < 0


def fits(pool, variant, offsets, n):
    """(variant name, embedding measures, test routing) of ``variant`` at
    each offset, split by split: the pairing order."""
    out = []
    for run in pool["runs"]:
        block = run["by_n"][n]
        for offset in offsets:
            emb = block["embeddings"][f"LOCUS {variant}{offset}"]
            out.append((f"{variant}{offset}", emb, block["routing"]))
    return out


def self_id(emb):
    return emb["self_id"][max(emb["self_id"], key=int)]


def judge(name, pool, baseline, candidate, offsets, n, gain=GAIN):
    """Session 40's rule on one pool: (rows, failed rule parts)."""
    B, C = fits(pool, baseline, offsets, n), fits(pool, candidate, offsets, n)
    rows, failed = [], []

    def measure(label, read):
        base, cand = [read(*f) for f in B], [read(*f) for f in C]
        if base[0] is None:
            return None
        r = paired(base, cand)
        rows.append((label, r))
        return r

    r = measure("(1) best validation loss", lambda v, e, t: e["best_valid_loss"])
    if r["d"] > LOSS_BAR:
        failed.append("(1)")
    routed = measure(
        "(2) best validation routing", lambda v, e, t: e["best_valid_routing"]
    )
    if routed["d"] < -max(routed["base_sd"], routed["cand_sd"]):
        failed.append("(2)")
    groups = lambda v, e, t: (e.get("groups") or {}).get("recall@1")  # noqa: E731
    recall = measure("(3) recall@1", groups)
    if recall is not None and clearly_lower(recall, IDENTITY_BAR):
        failed.append("(3) recall@1")
    r = measure("(3) self-identification", lambda v, e, t: self_id(e))
    if clearly_lower(r, IDENTITY_BAR):
        failed.append("(3) self-identification")
    collapsed = [sum(e["relative_spread"] < COLLAPSED for _, e, _ in F) for F in (B, C)]
    rows.append(("(4) collapsed fits", collapsed))
    if collapsed[1] > collapsed[0]:
        failed.append("(4)")
    gain_pool, gain_measure, gain_bar = gain
    if name == gain_pool:
        r = {"recall@1": recall, "validation-routing": routed}[gain_measure]
        if r["d"] < gain_bar:
            failed.append("(5)")
    measure("participation ratio", lambda v, e, t: e["participation_ratio"])
    measure("epochs run", lambda v, e, t: e["n_epochs"])
    return rows, failed


def routing_rows(pool, baseline, candidate, offsets, n):
    """Test routing, read after the rule: rows and whether the default
    router is clearly lower."""
    B, C = fits(pool, baseline, offsets, n), fits(pool, candidate, offsets, n)
    rows = []
    for label, suffix in (
        ("default router", " shrinkage=auto"),
        ("plain router", ""),
        ("default, repeated folds", " shrinkage=auto x5"),
    ):
        base = [t.get(f"LOCUS {v}{suffix}") for v, _, t in B]
        cand = [t.get(f"LOCUS {v}{suffix}") for v, _, t in C]
        if None not in base + cand:  # the run has this router for every fit
            rows.append((label, paired(base, cand)))
    lower = clearly_lower(rows[0][1], ROUTING_BAR)
    peers = {
        k: statistics.fmean(run["by_n"][n]["routing"][k] for run in pool["runs"])
        for k in ("kNN", "single best", "MF")
    }
    chosen = {
        side: ([e.get("shrinkage") for _, e, _ in F], [
            e.get("shrinkage_repeated") for _, e, _ in F
        ])
        for side, F in (("baseline", B), ("candidate", C))
    }  # fmt: skip
    return rows, lower, peers, chosen


def _cell(r, digits):
    f = f"{{:.{digits}f}}"
    return (
        f"{f.format(r['base'])} | {f.format(r['cand'])} | {r['d']:+.4f} | "
        f"{r['se']:.4f} | {r['base_sd']:.4f} / {r['cand_sd']:.4f}"
    )


def report(results, baseline, candidate, offsets, n, test=False, gain=GAIN):
    """Markdown of the rule (and with ``test`` the test reading) per pool."""
    lines = [
        f"# {candidate} against {baseline}, paired over random_state offsets "
        f"{', '.join(o.replace('-rs', '+') or '+0' for o in offsets)} (n = {n})",
        "",
    ]
    verdicts = {}
    for name, pool in results.items():
        rows, failed = judge(name, pool, baseline, candidate, offsets, n, gain)
        verdicts[name] = failed
        pairs = len(pool["runs"]) * len(offsets)
        lines += [
            f"## {name} ({pairs} pairs): "
            + ("passes" if not failed else "fails " + ", ".join(failed)),
            "",
            "| measure | baseline | candidate | d̄ | SE | sd (baseline / candidate) |",
            "|---|---|---|---|---|---|",
        ]
        for label, r in rows:
            if isinstance(r, list):
                lines.append(f"| {label} | {r[0]} | {r[1]} | | | |")
            else:
                lines.append(f"| {label} | {_cell(r, 4 if 'loss' in label else 3)} |")
        if test:
            trows, lower, peers, chosen = routing_rows(
                pool, baseline, candidate, offsets, n
            )
            lines.append("")
            lines.append(
                "Test routing, read after the rule"
                + (" (the default router clearly lower)" if lower else "")
                + ": "
                + ", ".join(f"{k} {v:.3f}" for k, v in peers.items())
                + f"; bars kNN - 0.5 point {peers['kNN'] - 0.005:.3f}, single best"
                f" - 0.5 point {peers['single best'] - 0.005:.3f}."
            )
            lines += ["", "| router | baseline | candidate | d̄ | SE | sd |"]
            lines.append("|---|---|---|---|---|---|")
            lines += [f"| {label} | {_cell(r, 3)} |" for label, r in trows]
            for side, (once, repeated) in chosen.items():
                lines.append("")
                lines.append(
                    f"Shrinkage chosen, {side}: {once}"
                    + (
                        f"; repeated folds {repeated}"
                        if repeated[0] is not None
                        else ""
                    )
                )
        lines.append("")
    return "\n".join(lines), verdicts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", help="embedding_quality.py JSON files")
    p.add_argument("--baseline", default="baseline")
    p.add_argument("--candidate", default="agreement-0.1")
    p.add_argument(
        "--offsets",
        nargs="+",
        type=int,
        default=[0, 1000, 2000],
        help="random_state offsets: 0 reads VARIANT, k reads VARIANT-rsk",
    )
    p.add_argument("--n", default="256")
    p.add_argument("--test", action="store_true", help="also the test routing")
    p.add_argument(
        "--gain",
        nargs=3,
        default=list(GAIN),
        metavar=("POOL", "MEASURE", "BAR"),
        help="rule (5): the pool, measure (recall@1 or validation-routing) and "
        "least mean paired gain",
    )
    args = p.parse_args(argv)
    results = {}
    for path in args.results:
        with open(path, encoding="utf-8") as f:
            results = merge_results(results, json.load(f))
    offsets = [f"-rs{k}" if k else "" for k in args.offsets]
    pool, measure, bar = args.gain
    if measure not in ("recall@1", "validation-routing"):
        p.error(
            f"--gain MEASURE must be recall@1 or validation-routing; got {measure!r}"
        )
    text, verdicts = report(
        results, args.baseline, args.candidate, offsets, args.n, args.test,
        gain=(pool, measure, float(bar)),
    )  # fmt: skip
    sys.stdout.write(text + "\n")
    return verdicts


if __name__ == "__main__":
    main()
