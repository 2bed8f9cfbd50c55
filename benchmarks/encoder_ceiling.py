"""What one text query costs the default encoder on this machine, and why.

The served text latency of ``locus serve`` is bound by all-MiniLM-L6-v2
(``serve_load.py``). This script times the encoder's forward pass on single
chat-length queries (the first 300 characters of built-in MMLU-Pro
questions, as ``serve_load.py``) and puts it beside what the machine's
matrix multiply does at the encoder's own shapes, and beside the two cheaper
number formats torch offers on a CPU:

- float32 at 1 and 2 torch threads (the default path; tokenisation included);
- the time in ``aten::addmm`` (the encoder's linear layers) of a float32 pass;
- one float32 linear layer at the encoder's shapes, GFLOP/s;
- bfloat16 weights and activations;
- dynamic int8 quantisation of the linear layers
  (``torch.ao.quantization.quantize_dynamic``), with the cosine of its
  mean-pooled output to float32's;
- the package's ONNX Runtime backend (``QueryEncoder(backend="onnx")``, the
  same float32 model exported to ONNX) at 1 and 2 threads, through
  ``QueryEncoder.transform`` as the service calls it (beside the PyTorch
  backend's own ``transform``), with its largest difference to PyTorch's
  encodings; when ``onnxruntime`` is installed (the ``onnx`` extra);
- batches of similar token length (what ``QueryEncoder`` runs,
  ``locus_sklearn/_length_batches.py``) against fixed batches padded to their
  longest text (sentence-transformers' ``encode(batch_size=64)``, and the
  ONNX backend's path before length batches), one thread, on calls of 8 and
  64 mixed chat-length queries and on whole questions (with their options)
  in calls of 400; both arms alternate on the same texts;
- the ONNX backend's graph fused for ONNX Runtime (onnxscript's
  ``optimize_for_ort``, the default) against the graph as exported
  (``OnnxSentenceEncoder(fuse=False)``), one chat-length text per call at 1
  and 2 threads, the arms alternating text by text on 200 texts.

Usage::

    python benchmarks/encoder_ceiling.py [--queries 40] [--out benchmarks/results]
"""

import argparse
import copy
import datetime
import json
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from _provenance import git_commit, machine_info  # noqa: E402

CHARS = 300  # serve_load.py's chat-length text queries


def _latency(seconds):
    """Median and 99th percentile of call times, in ms."""
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": float(np.median(ms)), "p99_ms": float(np.percentile(ms, 99))}


def _times(fn, items, repeat=1):
    fn(items[0])  # warm-up
    out = []
    for _ in range(repeat):
        for item in items:
            start = time.perf_counter()
            fn(item)
            out.append(time.perf_counter() - start)
    return _latency(out)


def _query_encoder_backends(texts, torch):
    """QueryEncoder.transform on one text at a time, PyTorch and ONNX Runtime."""
    from locus_sklearn import QueryEncoder

    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return {"onnx": "not installed (pip install 'locus_sklearn[onnx]')"}
    out = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)  # ONNX Runtime takes torch's count
        encodings = {}
        for backend in ("torch", "onnx"):
            encoder = QueryEncoder(device="cpu", backend=backend).fit()
            out[f"query_encoder_{backend}_{threads}_threads"] = _times(
                lambda text, e=encoder: e.transform([text]), texts
            )
            encodings[backend] = encoder.transform(texts)
        out["onnx_max_abs_difference"] = float(
            np.abs(encodings["onnx"] - encodings["torch"]).max()
        )
    return out


def _onnx_fusion(texts, torch):
    """ms per single-text call of the fused and the exported ONNX graph."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return {"onnx": "not installed (pip install 'locus_sklearn[onnx]')"}
    from locus_sklearn._encoders import _default_model_path, _load_sentence_transformer
    from locus_sklearn._onnx import OnnxSentenceEncoder

    model = _load_sentence_transformer(_default_model_path(), "cpu")
    out = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        arms = {
            name: OnnxSentenceEncoder(model, n_threads=threads, fuse=fuse)
            for name, fuse in (("fused", True), ("exported", False))
        }
        spent = {name: [] for name in arms}
        for arm in arms.values():
            arm.encode(texts[:1])  # warm-up
        for k, text in enumerate(texts):
            order = list(arms) if k % 2 == 0 else list(arms)[::-1]
            for name in order:
                start = time.perf_counter()
                arms[name].encode([text])
                spent[name].append(time.perf_counter() - start)
        for name, times in spent.items():
            out[f"{name}_{threads}_threads"] = {
                **_latency(times),
                "mean_ms": 1000 * float(np.mean(times)),
            }
        if threads == 1:
            X = {name: arm.encode(texts) for name, arm in arms.items()}
            out["max_abs_difference"] = float(np.abs(X["fused"] - X["exported"]).max())
    return out


def _length_batches(short, whole, torch, n_bulk_calls=2, bulk_call=400):
    """ms per text of fixed, padded batches and of length batches (one thread)."""
    from locus_sklearn._encoders import (
        _default_model_path,
        _load_onnx_encoder,
        _load_sentence_transformer,
    )
    from locus_sklearn._length_batches import encode_in_length_batches

    torch.set_num_threads(1)
    path = _default_model_path()
    model = _load_sentence_transformer(path, "cpu")
    arms = {
        "torch": (
            lambda texts: model.encode(texts, batch_size=64),
            lambda texts: encode_in_length_batches(
                model, texts, lambda b: model.encode(b, batch_size=len(b)), 64
            ),
        )
    }
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        pass
    else:
        onnx = _load_onnx_encoder(path)

        def onnx_fixed(texts):  # longest first, cut every 64: the path before
            order = np.argsort([-len(t) for t in texts], kind="stable")
            for start in range(0, len(texts), 64):
                onnx._encode_batch([texts[i] for i in order[start : start + 64]])

        arms["onnx"] = (onnx_fixed, lambda texts: onnx.encode(texts, batch_size=64))
    calls = {
        "8_mixed": [short[i : i + 8] for i in range(0, 64, 8)],
        "64_mixed": [short[i : i + 64] for i in range(0, 128, 64)],
        f"{bulk_call}_whole": [
            whole[i : i + bulk_call]
            for i in range(0, n_bulk_calls * bulk_call, bulk_call)
        ],
    }
    out = {}
    for backend, (fixed, by_length) in arms.items():
        for name, batches in calls.items():
            if backend == "onnx" and name.endswith("_whole"):
                continue  # the ONNX backend serves short queries
            spent = {"fixed": 0.0, "length": 0.0}
            fixed(batches[0][:2])  # warm-up
            for k, batch in enumerate(batches):
                pair = [("fixed", fixed), ("length", by_length)]
                for arm, fn in pair if k % 2 == 0 else pair[::-1]:
                    start = time.perf_counter()
                    fn(batch)
                    spent[arm] += time.perf_counter() - start
            n = sum(len(b) for b in batches)
            out[f"{backend}_{name}"] = {
                f"{arm}_ms_per_text": 1000 * t / n for arm, t in spent.items()
            }
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    import torch

    from locus_sklearn._encoders import _default_model_path, _load_sentence_transformer
    from locus_sklearn.datasets import load_mmlu_pro

    queries = load_mmlu_pro().evals["query"].unique()[: args.queries]
    texts = [str(q)[:CHARS] for q in queries]
    model = _load_sentence_transformer(_default_model_path(), None)
    tokenizer, bert = model.tokenizer, model[0].auto_model
    n_tokens = [len(tokenizer(t)["input_ids"]) for t in texts]

    def forward(module):
        def run(text):
            with torch.inference_mode():
                batch = tokenizer([text], return_tensors="pt", truncation=True)
                hidden = module(**batch).last_hidden_state
                return hidden.float().mean(1)[0].numpy()

        return run

    result = {"n_queries": len(texts), "median_tokens": float(np.median(n_tokens))}
    float32 = forward(bert)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        result[f"float32_{threads}_threads"] = _times(float32, texts)
    torch.set_num_threads(1)
    with torch.inference_mode(), torch.profiler.profile() as prof:
        for text in texts:
            float32(text)
    addmm_us = sum(
        e.self_cpu_time_total for e in prof.key_averages() if e.key == "aten::addmm"
    )
    result["float32_1_thread_addmm_ms_per_query"] = addmm_us / 1000 / len(texts)
    m = int(np.median(n_tokens))
    gemm = {}
    for k, n in ((384, 384), (384, 1536), (1536, 384)):
        a, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        with torch.inference_mode():
            t = _times(
                lambda args: torch.nn.functional.linear(*args), [(a, w, b)] * 200
            )
        gemm[f"{m}x{k}->{n}"] = 2 * m * k * n / (t["p50_ms"] / 1000) / 1e9
    result["linear_gflops_1_thread"] = gemm
    reference = np.stack([float32(t) for t in texts])
    others = {"bfloat16": copy.deepcopy(bert).to(torch.bfloat16)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation note
        others["int8_dynamic"] = torch.ao.quantization.quantize_dynamic(
            copy.deepcopy(bert), {torch.nn.Linear}, dtype=torch.qint8
        )
    for name, module in others.items():
        run = forward(module)
        result[f"{name}_1_thread"] = _times(run, texts)
        pooled = np.stack([run(t) for t in texts])
        cosine = (pooled * reference).sum(1) / (
            np.linalg.norm(pooled, axis=1) * np.linalg.norm(reference, axis=1)
        )
        result[f"{name}_cosine_to_float32"] = {
            "min": float(cosine.min()),
            "mean": float(cosine.mean()),
        }
    result |= _query_encoder_backends(texts, torch)
    # Mixed lengths, other questions than the single-query timings above.
    rest = [str(q) for q in load_mmlu_pro().evals["query"].unique()[args.queries :]]
    rest = list(np.random.default_rng(0).permutation(rest))
    result["length_batches_1_thread"] = _length_batches(
        [q[:CHARS] for q in rest[:128]], rest[128:928], torch
    )
    result["onnx_fusion"] = _onnx_fusion([q[:CHARS] for q in rest[928:1128]], torch)
    result |= {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M UTC"
        ),
        "commit": git_commit(),
        "machine": machine_info(torch=torch.__version__, load=os.getloadavg()),
    }
    print(json.dumps(result, indent=1))
    os.makedirs(args.out, exist_ok=True)
    with open(
        os.path.join(args.out, "encoder_ceiling.json"), "w", encoding="utf-8"
    ) as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
