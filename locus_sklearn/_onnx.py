"""A sentence-transformers model's text encoder run by ONNX Runtime.

One job: :class:`OnnxSentenceEncoder` exports the transformer of a loaded
``SentenceTransformer`` to ONNX (``torch.onnx.export``, in memory, once) and
runs it with ONNX Runtime on the CPU; tokenisation, pooling and
normalisation stay the model's own modules, so the encodings are the same as
``SentenceTransformer.encode``'s up to float rounding (about 1e-6).

The exported graph is rewritten with onnxscript's fusions for ONNX Runtime
(``optimize_for_ort``: one ``Attention`` kernel per layer, LayerNorm with its
residual add, GELU with its bias), which ONNX Runtime's own graph optimiser
does not find in what the ``torch.export``-based exporter writes: one
chat-length query about 10 % faster (``benchmarks/encoder_ceiling.py``). The
fused graph is checked against the exported one on the export's example
texts and replaced by it, with a warning, should the two differ.

Why: on a CPU, ONNX Runtime runs all-MiniLM-L6-v2 on one chat-length query
in about two thirds of PyTorch's eager time (``benchmarks/encoder_ceiling.py``),
and that pass is most of a served text query's latency.
"""

import io
import logging

import numpy as np
import torch
from torch.torch_version import TorchVersion

from ._length_batches import encode_in_length_batches
from ._warnings import ignoring, warn_external

__all__ = ["OnnxSentenceEncoder"]

# The exporter's notes on its own internals, ignored while it runs: what the
# modules it runs through give (torch 2.13's torch.onnx notes that an axis
# name shares another's constraints), and the FutureWarning that torch's
# pytree deprecation gives from copyreg's frame when the export copies a
# LeafSpec. The filters are process-wide while they apply: not every
# category, so that other threads' warnings (the user's, the library's) still
# show during a multi-second export.
_EXPORTER_WARNINGS = (
    {"module": r"(torch\.(onnx|export|_export|_dynamo|fx)|onnxscript|onnx_ir|onnx)\b"},
    {
        "message": r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        "category": FutureWarning,
    },
)

# What the optional extra installs; named in every import error.
INSTALL_HINT = "pip install 'locus_sklearn[onnx]' (onnxruntime, onnx, onnxscript)"


def import_onnxruntime():
    """``onnxruntime``, or an ImportError that says how to install it (also
    when the exporter's own dependency, onnxscript, is missing)."""
    try:
        import onnxruntime
        import onnxscript  # noqa: F401  (torch.onnx.export's dynamo exporter)
    except ImportError as exc:
        raise ImportError(
            f"backend='onnx' needs ONNX Runtime and the ONNX exporter: {INSTALL_HINT}."
        ) from exc
    # The export writes ONNX IR version 10 (ONNX Runtime reads it from 1.18)
    # through torch.onnx.export(dynamo=True, dynamic_shapes=...), torch 2.5's:
    # older ones failed at the first transform, with their own errors.
    # TorchVersion compares any version string as _has_fused_adamw does.
    too_old = [
        f"{name} {version}"
        for name, version, floor in (
            ("onnxruntime", onnxruntime.__version__, "1.18"),
            ("torch", torch.__version__, "2.5"),
        )
        if TorchVersion(version) < floor
    ]
    if too_old:
        raise ImportError(
            f"backend='onnx' needs onnxruntime >= 1.18 and torch >= 2.5; this "
            f"environment has {', '.join(too_old)}: {INSTALL_HINT}."
        )
    return onnxruntime


def _fused_for_onnxruntime(graph, feed):
    """The serialised ONNX ``graph`` rewritten with onnxscript's fusions for
    ONNX Runtime, checked on ``feed`` (input name -> array) against the graph
    as exported. A speed step only: should a rewrite fail (another
    architecture's graph) or change the outputs, the graph as exported is
    returned, with a warning (also when onnx or onnxscript's rewriter cannot
    be imported: an onnxscript without ``rewriter.ort_fusions``)."""
    import onnxruntime  # checked by import_onnxruntime: runs either graph

    def run(serialised):
        session = onnxruntime.InferenceSession(
            serialised, providers=["CPUExecutionProvider"]
        )
        return session.run(None, feed)[0]

    try:
        # Inside the try: the fusion is optional, its modules too.
        import onnx
        from onnxscript import ir
        from onnxscript.rewriter.ort_fusions import optimize_for_ort

        model = ir.from_proto(onnx.load_from_string(graph))
        with ignoring(*_EXPORTER_WARNINGS):
            optimize_for_ort(model)  # in place
        fused = ir.to_proto(model).SerializeToString()
        expected, got = run(graph), run(fused)
        if "attention_mask" in feed:  # what pooling reads: the real tokens
            real = feed["attention_mask"].astype(bool)
            expected, got = expected[real], got[real]
        if not np.allclose(got, expected, rtol=1e-4, atol=1e-5):
            worst = float(np.abs(got - expected).max())
            raise ValueError(f"the fused graph's outputs differ by up to {worst:.2g}")
        return fused
    except Exception as exc:  # any rewrite error: run the graph as exported
        warn_external(
            "backend='onnx': onnxscript could not fuse the exported graph for "
            f"ONNX Runtime ({type(exc).__name__}: {exc}); running it as exported "
            "(the same encodings, somewhat slower).",
            RuntimeWarning,
        )
        return graph


def _tokenize(model, texts):
    """The model's own preprocessing (``preprocess`` from sentence-transformers
    6, ``tokenize`` before): the same truncation and padding as ``encode``,
    and the same default prompt (``default_prompt_name`` of
    ``config_sentence_transformers.json``, e.g. ``"query: "``) with the
    ``prompt_length`` that pooling reads where it leaves the prompt out."""
    name = getattr(model, "default_prompt_name", None)
    prompt = None if name is None else model.prompts.get(name)
    preprocess = getattr(model, "preprocess", None)
    if preprocess is not None:
        return preprocess(texts, prompt=prompt)
    # Before sentence-transformers 6, encode itself prepended the prompt.
    if prompt is None:
        return model.tokenize(texts)
    features = model.tokenize([prompt + text for text in texts])
    prompt_ids = model.tokenize([prompt]).get("input_ids")
    if prompt_ids is not None:  # without its trailing separator token
        features["prompt_length"] = prompt_ids.shape[-1] - 1
    return features


class _LastHiddenState(torch.nn.Module):
    """The transformer as a function of positional tensors (what the exporter
    traces), returning its token embeddings (batch, tokens, hidden)."""

    def __init__(self, model, input_names):
        super().__init__()
        self.model = model
        self.input_names = input_names

    def forward(self, *inputs):
        features = dict(zip(self.input_names, inputs, strict=True))
        return self.model(**features, return_dict=True).last_hidden_state


def _embedding_dimension(model, transformer):
    """The width of ``model.encode``'s rows: a module after pooling (a Dense
    layer) may change the transformer's hidden size. The model's own answer,
    under its name in the installed sentence-transformers (older versions
    call it get_sentence_embedding_dimension, newer ones deprecate that name);
    the hidden size where the model does not know (None)."""
    get = getattr(model, "get_embedding_dimension", None)
    if get is None:
        get = model.get_sentence_embedding_dimension
    dimension = get()
    if dimension is None:
        dimension = transformer.config.hidden_size
    return int(dimension)


class OnnxSentenceEncoder:
    """``encode(texts)`` of a SentenceTransformer, its transformer in ONNX Runtime.

    Parameters
    ----------
    model : sentence_transformers.SentenceTransformer
        A text model whose first module is a ``Transformer`` returning token
        embeddings and whose other modules (pooling, normalisation) read
        ``token_embeddings`` and ``attention_mask``. It is read, not changed.
    n_threads : int or None, default=None
        ONNX Runtime's intra-op threads; None takes ``torch.get_num_threads()``
        (what ``locus serve --threads`` sets).
    fuse : bool, default=True
        Rewrite the exported graph with onnxscript's fusions for ONNX Runtime
        (the same encodings to about 1e-6, faster); False runs the graph as
        ``torch.onnx.export`` wrote it.

    Attributes
    ----------
    input_names : list of str
        The tokenizer outputs the exported graph reads (e.g. ``input_ids``,
        ``token_type_ids``, ``attention_mask``).
    n_features : int
        Dimension of the sentence embeddings.

    Examples
    --------
    >>> import numpy as np
    >>> from sentence_transformers import SentenceTransformer
    >>> from locus_sklearn._encoders import _default_model_path
    >>> model = SentenceTransformer(str(_default_model_path()), device="cpu")
    >>> onnx = OnnxSentenceEncoder(model)  # exports once: a few seconds
    >>> texts = ["2+2?", "capital of France?"]
    >>> X = onnx.encode(texts)
    >>> X.shape, bool(np.allclose(X, model.encode(texts), atol=1e-5))
    ((2, 384), True)
    """

    def __init__(self, model, n_threads=None, fuse=True):
        ort = import_onnxruntime()
        modules = list(model)
        first = modules[0]
        transformer = getattr(first, "auto_model", None)
        if transformer is None or type(first).__name__ != "Transformer":
            raise ValueError(
                "backend='onnx' needs a sentence-transformers model whose first "
                f"module is a Transformer; got {type(first).__name__}."
            )
        self._model = model
        self.fuse = bool(fuse)
        self._after = modules[1:]  # pooling, normalisation, ...
        self.n_features = _embedding_dimension(model, transformer)
        example = _tokenize(model, ["an example query", "a second, longer example"])
        self.input_names = [
            name for name, value in example.items() if isinstance(value, torch.Tensor)
        ]
        session_options = ort.SessionOptions()
        session_options.intra_op_num_threads = int(
            n_threads if n_threads is not None else torch.get_num_threads()
        )
        session_options.inter_op_num_threads = 1
        # Its threads sleep between calls instead of spinning: torch's own
        # threads (pooling, the router's predictor) share the same cores.
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(
            self._export(transformer, example),
            session_options,
            providers=["CPUExecutionProvider"],
        )

    def _export(self, transformer, example):
        """The serialised ONNX graph, batch and token axes dynamic (fused for
        ONNX Runtime unless ``fuse=False``)."""
        inputs = tuple(example[name] for name in self.input_names)
        batch = torch.export.Dim("batch")
        tokens = torch.export.Dim(
            "tokens", max=int(transformer.config.max_position_embeddings)
        )
        wrapper = _LastHiddenState(transformer, self.input_names).eval()
        buffer = io.BytesIO()
        exporter_log = logging.getLogger("torch.onnx")
        level = exporter_log.level
        # The exporter's notes on its own internals (warnings, and log lines
        # such as "torchvision is not installed") are not the user's business.
        exporter_log.setLevel(logging.ERROR)
        try:
            with ignoring(*_EXPORTER_WARNINGS), torch.no_grad():
                program = torch.onnx.export(
                    wrapper,
                    inputs,
                    input_names=self.input_names,
                    output_names=["token_embeddings"],
                    # forward(*inputs): one spec per tensor, inside the varargs.
                    dynamic_shapes=(tuple({0: batch, 1: tokens} for _ in inputs),),
                    dynamo=True,
                    verbose=False,
                    report=False,
                )
        finally:
            exporter_log.setLevel(level)
        program.save(buffer)
        graph = buffer.getvalue()
        if not self.fuse:
            return graph
        feed = {name: example[name].numpy() for name in self.input_names}
        return _fused_for_onnxruntime(graph, feed)

    def encode(self, texts, batch_size=64, show_progress_bar=False, **_ignored):
        """Sentence embeddings of ``texts``, shape (n_texts, dim), float32.

        Texts are encoded in batches of at most ``batch_size`` texts of similar
        token length (:func:`~._length_batches.length_batches`: a padded token
        costs as much as a real one), with a progress bar over the batches
        if ``show_progress_bar``. Other keyword arguments of
        ``SentenceTransformer.encode`` are accepted and ignored
        (``convert_to_numpy``).
        """
        texts = list(texts)
        if not texts:
            return np.empty((0, self.n_features), dtype=np.float32)
        return encode_in_length_batches(
            self._model, texts, self._encode_batch, batch_size, show_progress_bar
        )

    def _encode_batch(self, texts):
        """One ONNX Runtime call: (len(texts), dim), float32."""
        features = _tokenize(self._model, texts)
        feed = {name: features[name].numpy() for name in self.input_names}
        (token_embeddings,) = self._session.run(None, feed)
        # All the features, as the Transformer module passes them on: pooling
        # reads the attention mask, and prompt_length where it has one.
        pooled = {**features, "token_embeddings": torch.from_numpy(token_embeddings)}
        with torch.inference_mode():
            for module in self._after:
                pooled = module(pooled)
        return pooled["sentence_embedding"].float().numpy()
