"""LocusEmbedder: learn F_θ and G_ψ from scored evaluations; embed models."""

import os
from numbers import Integral, Real

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils import check_random_state, metadata_routing
from sklearn.utils._param_validation import (
    HasMethods,
    Interval,
    StrOptions,
    validate_parameter_constraints,
)
from sklearn.utils._set_output import _get_output_config
from sklearn.utils.validation import check_is_fitted

from ._device import resolve_device
from ._distributed import (
    check_accelerated_params,
    check_accelerator,
    shared_random_state,
)
from ._encoders import (
    as_query_encoder,
    encode_as_fitted,
    encode_queries,
    warn_shared_encodings,
)
from ._evals import _preview, check_evals, check_queries
from ._params import (
    NoBoolNumbersMixin,
    NumberInterval,
    short_int,
    subclass_param_names,
    unrepresentable_int,
)
from ._persistence import load_embedder, save_embedder
from ._readout import ReadoutPool, import_hnswlib
from ._refinement import REFINE_PRIOR_MIN, embedding_scale, refine_embeddings
from ._repr import SummaryReprMixin
from ._tensors import untorched
from ._training import (
    MONITORS,
    NETWORK_PARAMS,
    embed_models,
    finished_epochs,
    fit_network,
    full_precision,
    predict_proba,
    readout_pool,
)
from ._warnings import warn_external

__all__ = ["FewEvaluationsWarning", "LocusEmbedder"]

# Parameters of the kernel readout's search, read at prediction only.
_READOUT_PARAMS = ("readout_neighbors", "readout_index", "readout_dtype")
# The network parameters that shape what a fitted network computes: changed
# after fit, they would describe another network than the one trained.
# dropout and query_noise act in training only and, like lr, may change.
_FITTED_NETWORK_PARAMS = tuple(
    name for name in NETWORK_PARAMS if name not in ("dropout", "query_noise")
)


class FewEvaluationsWarning(UserWarning):
    """A model is embedded from fewer evaluations than ``enc_size[0]``.

    ``enc_size[0]`` is the smallest set training draws from a model with
    enough evaluations (a training model with few rows gave smaller sets:
    each is capped so that a quarter of its rows remain for the decoder
    set). An embedding from fewer is less reliable, and two such embeddings
    of one model differ more (see ``benchmarks/results/`` for
    self-identification by number of evaluations).

    Examples
    --------
    >>> import warnings
    >>> from locus_sklearn import FewEvaluationsWarning, LocusEmbedder
    >>> from locus_sklearn.datasets import make_model_pool
    >>> pool = make_model_pool(n_models=4, n_families=2, n_queries=100,
    ...                        evals_per_model=80, random_state=0)
    >>> embedder = LocusEmbedder(pool.encodings, embedding_dim=8, n_latents=2,
    ...                          n_blocks=1, n_heads=2, max_epochs=1,
    ...                          enc_size=(16, 64), random_state=0).fit(pool.evals)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = embedder.transform(pool.evals.groupby("model").head(5))
    >>> caught[0].category is FewEvaluationsWarning
    True
    """


class CollapsedEmbeddingWarning(UserWarning):
    """The trained models' embeddings are nearly identical.

    Raised by ``fit`` when the training models' embeddings spread (each
    coordinate's standard deviation over the models, averaged) by less than
    ``COLLAPSE_SPREAD`` (1e-3) of the norm of their mean embedding. Then
    similar models, families, fingerprints and portfolios read from the
    embeddings are close to arbitrary, and the embedding-only predictor
    (``kernel_readout=False``) gives every model about the same P(correct);
    the kernel readout still reads each model's own evaluations. Of fifteen
    fits of the default embedder on four real pools (2026-12-04,
    ``benchmarks/results/embedding_influence.md``), two ended so (spread
    1.2e-4 and 1.8e-4; the others 0.015 to 0.059). ``agreement_weight=0.3``
    trained apart four of the five fits that ended so in the agreement term's
    runs (RouterBench, two seeds of three; planted specialists, all three;
    same rows and seeds: ``benchmarks/results/TUNING.md``, session 37).
    ``agreement_weight=0.1, refine_steps=10``, the configuration the training
    guide gives for identity work, ended collapsed in 7 of 45 fits against the
    default's 14 (five pools, nine fits each, session 41): every RouterBench
    fit apart, 7 of the 9 planted-specialist fits still collapsed.

    Examples
    --------
    >>> import warnings
    >>> import numpy as np
    >>> from locus_sklearn import CollapsedEmbeddingWarning
    >>> from locus_sklearn._embedder import warn_if_collapsed
    >>> Z = np.ones((3, 4)) + np.array([[0.0], [1e-5], [2e-5]])
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_if_collapsed(Z, kernel_readout=True)
    >>> caught[0].category is CollapsedEmbeddingWarning
    True
    """


# Below this spread (relative to the norm of the mean embedding) fit warns.
COLLAPSE_SPREAD = 1e-3


def embedding_spread(embeddings):
    """Each coordinate's standard deviation over the models (ddof 1),
    averaged, over the norm of their mean embedding: 0 when every model has
    the same embedding. ``embeddings`` has shape (n_models, d), n_models >= 2."""
    embeddings = np.asarray(embeddings, dtype=np.float64)
    norm = np.linalg.norm(embeddings.mean(axis=0))
    spread = embeddings.std(axis=0, ddof=1).mean()
    if norm == 0:  # models around the origin: only identical ones collapsed
        return 0.0 if spread == 0 else float("inf")
    return float(spread / norm)


def warn_if_collapsed(embeddings, kernel_readout):
    """Warn (:class:`CollapsedEmbeddingWarning`, at the user's line) when
    the training models' ``embeddings`` (n_models, d) spread by less than
    ``COLLAPSE_SPREAD``."""
    if len(embeddings) < 2:
        return
    spread = embedding_spread(embeddings)
    if spread >= COLLAPSE_SPREAD:
        return
    routing = (
        "routing still reads each model's own evaluations through the kernel readout"
        if kernel_readout
        else "the embedding-only predictor (kernel_readout=False) gives every "
        "model about the same P(correct)"
    )
    warn_external(
        f"The {len(embeddings)} training models' embeddings are nearly identical: "
        f"they spread by {spread:.1e} of the norm of their mean (under "
        f"{COLLAPSE_SPREAD:g}). Similar models, families, fingerprints and "
        f"portfolios read from them will be close to arbitrary; {routing}. "
        "Another random_state may train apart (on one pool's rows, seeds "
        "have differed in this); agreement_weight=0.3 trained apart most such "
        "fits in the project's benchmarks, and LocusEmbedder(agreement_weight=0.1, "
        "refine_steps=10), the configuration the training guide gives for "
        "identity work, half of them.",
        CollapsedEmbeddingWarning,
    )


def averaged_pairs_note(table):
    """For an error on models with one evaluation: where ``table`` was
    given repeated (model, query) rows, a sentence saying that they were
    averaged into one evaluation (a model given many rows may still have
    one); otherwise ""."""
    if table.n_input_rows <= table.n_rows:
        return ""
    return (
        f" evals has {table.n_input_rows} rows but {table.n_rows} distinct "
        "(model, query) pairs: the rows of a repeated pair are averaged "
        "into one evaluation, so a model needs 2 distinct queries."
    )


def _check_embedding_models(embeddings, models):
    """The models naming the rows of ``embeddings``, where a DataFrame's
    index names them (any index but a default RangeIndex), are ``models``
    (the evaluations' models, sorted), in that order: the kernel readout
    pairs row ``i`` with the ``i``-th model's evaluations, so a mismatch
    would predict each model from another's evaluations."""
    index = getattr(embeddings, "index", None)
    if not isinstance(embeddings, pd.DataFrame) or isinstance(index, pd.RangeIndex):
        return
    names = list(index)
    models = list(models)
    if names == models:
        return
    if len(names) != len(models):
        # The shape check below names the counts.
        return
    first = next(
        i for i, (a, b) in enumerate(zip(names, models, strict=True)) if a != b
    )
    if set(names) == set(models):
        problem, fix = "the same models in another order", "embeddings.sort_index()"
    else:
        problem, fix = "other models", "the evaluations of the embedded models"
    raise ValueError(
        f"embeddings is indexed by models {_preview(names)} but evals' models, "
        f"which predict_proba pairs with the embeddings' rows in sorted name "
        f"order, are {_preview(models)} ({problem}: row {first} is "
        f"{names[first]!r}, read with the evaluations of {models[first]!r}); "
        f"pass {fix}."
    )


# What training reads of an ``accelerator`` (an accelerate.Accelerator).
_ACCELERATOR_ATTRIBUTES = (
    "prepare",
    "reduce",
    "unwrap_model",
    "num_processes",
    "device",
    "split_batches",
    "is_main_process",
    "process_index",
)


class LocusEmbedder(
    SummaryReprMixin, NoBoolNumbersMixin, TransformerMixin, BaseEstimator
):
    """Learn LOCUS model embeddings from scored evaluations.

    ``fit`` trains the attention encoder F_θ (with its evaluation tokenizer
    h_ω) and the correctness predictor G_ψ jointly, through skorch, on
    episodes: each item samples one model's encoder set S_enc (of a size drawn
    from ``enc_size``) and a decoder set S_dec (``dec_size`` rows, disjoint
    from S_enc when ``disjoint``), and minimises the binary cross-entropy of
    P(correct | z_m, φ(x)) on S_dec. ``transform`` embeds any model — seen in
    training or not — from its evaluations, with no training.

    Parameters
    ----------
    encoder : None, str, object with ``encode`` or mapping, default=None
        Query encoder φ (see :class:`QueryEncoder`): None for the bundled
        all-MiniLM-L6-v2, a sentence-transformers model directory, any object
        with ``encode(list_of_str)``, or a mapping of precomputed vectors.
    embedding_dim : int, default=128
        d, the size of a model embedding and of every attention layer; at
        least 3. The embedding is the output of the pooling block's final
        LayerNorm, whose d values have zero mean and a fixed norm before its
        scale and shift: d − 2 degrees of freedom. At d = 1 every model would
        get the same embedding (the LayerNorm's bias), at d = 2 one of two
        points (but for models whose two pre-norm values nearly tie).
    n_latents : int, default=64
        r, learned latents of each latent-bottleneck block.
    n_blocks : int, default=2
        L, latent-bottleneck blocks; at least 1.
    n_heads : int, default=4
        Attention heads; must divide ``embedding_dim``.
    hidden_dim : int, default=64
        Hidden units of the predictor G_ψ.
    dropout : float, default=0.1
        Dropout in attention, feed-forward and predictor layers.
    query_noise : float, default=0.05
        Standard deviation of Gaussian noise added to query encodings during
        training (a regulariser; none at inference).
    enc_size : tuple of (int, int), default=(64, 1024)
        Range of |S_enc|, drawn log-uniformly (one size per batch, so no
        episode of a model with enough rows is padded), so embeddings work
        from tens to thousands of evaluations. Capped by the model's rows.
    dec_size : int, default=256
        Most rows in S_dec per episode.
    disjoint : bool, default=True
        Whether S_dec excludes S_enc (the predictor must generalise to queries
        the encoder did not see, as at test time).
    mix_prob : float, default=0.0
        Probability that a training episode uses a *mixed model*: one model's
        evaluations in a random half of the query regions and another model's
        in the rest (augmentation for small pools).
    n_regions : int, default=16
        Query regions for mixing: k-means clusters of the training query
        encodings.
    kernel_readout : bool, default=True
        Give the predictor, next to z_m, a kernel regression of the model's
        own scores at queries near the target query (what a kNN router
        knows; see :class:`~locus_sklearn._readout.KernelReadout`). Prediction
        then needs each model's evaluations, which :class:`LocusRouter`
        keeps, and costs time linear in the pool's evaluations (like kNN).
        On the MMLU-Pro open pool it lifts routing accuracy from below kNN
        to level with it at 256 evaluations per model and above it with
        all of them (``benchmarks/results/TUNING.md``). ``False`` is the
        paper's predictor: P(correct) from z_m and φ(x) alone, faster to
        route with and needing no stored evaluations.
    readout_neighbors : int or None, default=None
        With the kernel readout, an approximation for large pools: only the
        ``readout_neighbors`` stored queries nearest each query (by cosine)
        enter its readout, and a model evaluated on none of them reads as
        having no evaluations. None (exact) reads every stored evaluation.
        On MMLU-Pro, 32 neighbours kept routing accuracy within 0.01 of the
        exact readout but changed the routed model on a quarter of the
        questions (near ties; P(correct) moved by up to 0.19); at 10,000
        models x 1,024 evaluations they read 14x faster
        (``benchmarks/results/readout_scale.md``). The neighbours are drawn
        from the stored queries of the whole pool, not of each model, so a
        model's P(correct) then depends on the other models in the pool:
        :meth:`LocusRouter.add_models` and ``remove_models`` move the other
        models' probabilities (up to 0.018 on a 7-model synthetic pool at 8
        neighbours), and ``predict(queries, models=subset)``, which reads
        the whole pool, can route differently from the router with the
        other models removed. The exact readout (None) reads each model from
        its own evaluations alone.
    readout_index : {"exact", "hnsw"}, default="exact"
        How ``readout_neighbors`` are found: every similarity and a top-k
        ("exact"), or an HNSW graph of the stored queries from hnswlib
        ("hnsw": approximate, sublinear in the number of stored queries;
        install the ``ann`` extra). "hnsw" needs ``readout_neighbors``.
        Either way the neighbours are searched among the whole pool's stored
        queries, so a model's P(correct) depends on the other models in the
        pool (see ``readout_neighbors``). The graph is built at the first
        prediction, in ``torch.get_num_threads()`` threads, and hnswlib's
        insertion in more than one thread builds a different graph each
        time: copies of one fitted router (a pickle, a load, a serve
        reload, ``add_models``, each ``predict_proba_chunked`` worker
        process) and two fits with one ``random_state`` can then find a few
        different neighbours (up to 0.005 in P(correct) on 1-5 of 2,000
        queries over 20,000 stored queries, in 2 threads). A graph built in
        one thread is the same on every build: call
        ``torch.set_num_threads(1)`` around the first prediction for
        bit-reproducible ones.
    readout_dtype : {"float32", "bfloat16"}, default="float32"
        Precision of the readout's largest product, the cosines between the
        queries and every stored query. "bfloat16" is an approximation
        (cosines to about 1e-2) that pays off only on hardware with bfloat16
        matrix units; the kernel weights and their sums stay float32
        (float64 where the learned bandwidth is below 1/30, and each model's
        log-sum-exp below 0.003, so that no weight underflows). On MMLU-Pro
        it moved P(correct) by at most 1e-3 and the routed model on 0.2% of
        questions. With ``readout_neighbors`` and ``readout_index="exact"``
        the neighbours are chosen by this product too (near ties may swap);
        ``readout_index="hnsw"`` searches in float32.
    n_profile_regions : int, default=0
        R > 0 adds the profile objective: a linear head from z_m predicts the
        model's mean score in each of R regions of the query space (k-means
        clusters of the training query encodings) on its decoder set, so
        that the embedding carries *what* a model is good at and not only
        how good it is. 0 trains on correctness alone (the paper's
        objective). On BFCL at 256 evaluations per model, R = 16 changed
        neither routing nor the embeddings' spread beyond the seed spread
        (``benchmarks/results/TUNING.md``), since k-means regions of the
        query encodings carry little besides strength there.
    profile_weight : float, default=1.0
        Weight of the profile objective next to the correctness BCE (used
        when ``n_profile_regions > 0``), in the training and the validation
        loss alike.
    agreement_weight : float, default=0.0
        Weight of the agreement term next to the correctness BCE, in
        training steps: within each batch of episodes, the distances between
        the models' embeddings are fitted, up to scale, to how much their
        scores differ on the training queries both hold (root mean squared
        difference; pairs sharing at least 8 queries), so that models that
        answer alike sit near each other whatever their strength. 0 trains
        on correctness alone (the paper's objective). At 0.3, on four real
        pools at 256 evaluations per model, it found more near-duplicate
        models (Shaberi's variants of one base: recall@1 0.15 against 0.10)
        and lowered the held-out loss, but routed MMLU-Pro a point lower, so
        it is off by default (``benchmarks/results/TUNING.md``, session 36);
        0.1 found as many and kept more self-identification (session 37).
    standardize_embedding : bool, default=False
        Standardise the embeddings across models: each coordinate of z minus
        its mean over the training batch's models, divided by its standard
        deviation (a ``BatchNorm1d`` without affine parameters; its running
        statistics at inference). On planted specialists of equal strength
        the trained encoder left the models' embeddings about 0.1 % of their
        norm apart, too close for the predictor: the embedding-only predictor
        (``kernel_readout=False``) then routes like the single best model,
        with standardised embeddings as well as the kernel readout. On the
        benchmark pools it moves routing toward the single best model, so it
        is off by default (``benchmarks/results/TUNING.md``, session 8).
    max_epochs : int, default=100
        Upper bound on epochs; early stopping usually ends training sooner.
    episodes_per_epoch : int, default=256
        Episodes per epoch, rounded up to a whole number of passes over the
        training models so that every model appears equally often.
    batch_size : int, default=16
        Models (episodes) per optimisation step.
    lr : float, default=1e-3
        AdamW learning rate.
    weight_decay : float, default=0.01
        AdamW weight decay. ``lr * weight_decay`` must be below 1: from 1 on
        each step scales the weights to zero or flips them, and ``fit``
        raises a ValueError before training.
    gradient_clip : float or None, default=1.0
        Maximum gradient norm; None trains without clipping.
    validation_fraction : float, default=0.1
        Fraction of queries held out: their rows are the validation targets
        for early stopping (each model embedded from its other rows). 0
        disables validation and early stopping; a fraction that holds out no
        rows (too few queries, or no model left two training rows) warns and
        trains without them.
    early_stopping : {"valid_loss", "valid_routing_accuracy"} or None, default="valid_loss"
        Validation score monitored for early stopping. An epoch improves on
        the best so far only by more than 1e-4 of it (relative:
        ``valid_loss`` below ``best * (1 - 1e-4)``, accuracy above
        ``best * (1 + 1e-4)``); the weights of the last improving epoch are
        restored, which need not be the epoch of the very lowest loss.
        The monitored score's column of ``net_.history``,
        ``"valid_loss_best"`` or ``"valid_routing_accuracy_best"``, is True
        at exactly the improving epochs, so its last True epoch is the one
        restored. None trains for ``max_epochs``, and keeps the last epoch's
        weights.
        "valid_routing_accuracy" needs held-out queries that two or more
        models answered (``fit`` raises a ValueError before training where
        there are none).
    patience : int, default=7
        Epochs in a row without improvement (by more than 1e-4 relative, as
        ``early_stopping`` says) before stopping: a score still falling by
        less stops training too. Against 10, 7 restored the same weights in
        23 of 24 fits of the selection study, 3 epochs sooner (112 synthetic
        models: a minimum +0.0008 nats worse against the true P(correct)); of
        the routing benchmark's 30 fits it changed four (BFCL, MMLU-Pro: the
        same routing, up to +0.015 test log-loss; RouterBench with all rows:
        0.879 against 0.880). 5 stopped a large fit at an early local
        minimum (``benchmarks/results/TUNING.md``, session 31;
        ``benchmarks/results/SPEED.md``).
    memory : None, str, os.PathLike or joblib.Memory, default=None
        Caches query encodings across fits and calls (as in sklearn's
        Pipeline), in the folder of a path or in a :class:`joblib.Memory`;
        nothing evicts an entry, so leave it None in a long-running process
        (see :class:`QueryEncoder`).
    device : str or None, default=None
        Torch device; None uses CUDA when available, else CPU.
    accelerator : accelerate.Accelerator or None, default=None
        Train data-parallel: run the script with ``accelerate launch`` (one
        process per device) and pass the same ``Accelerator()`` in every
        process; each epoch's training episodes are sharded across the
        processes and gradients averaged (see the user guide's
        :ref:`distributed` page). ``device`` must then be None. A run-time
        choice: never saved nor pickled, and shared, not copied, by ``clone``.
    inference_dtype : {"float32", "bfloat16"}, default="float32"
        Precision of ``transform``. bfloat16 is faster on CPUs and GPUs with
        bfloat16 matrix units; embeddings then differ from float32 by about 1e-2
        relative. A caller's ``torch.autocast`` changes neither
        ``transform`` nor ``predict_proba``: this is the one switch.
    transform_batch_tokens : int or "auto", default="auto"
        Evaluation tokens per forward pass in ``transform`` (a model with
        more rows gets a pass of its own); bounds memory when embedding
        thousands of models. "auto" is 16,384 on the CPU, where it keeps a
        pass's buffers (about 1.5 KiB per token in float32) under 32 MiB, so
        they are reused rather than mapped afresh, and was the fastest
        measured; and 262,144 on a GPU (an estimated 1.2 GiB of buffers in
        float32), which small passes of many small kernels underuse (on one
        H200, 112 models x 4,096 evaluations: 81 ms at 16,384 tokens, 25 ms at
        262,144; ``benchmarks/results/core_speed_cuda.json``).
    refine_steps : int, default=0
        Semi-amortised inference: ``transform`` (so also the router's pool,
        ``add_models`` and every function that reads the embeddings) moves
        each model's embedding from the encoder's to the maximum a
        posteriori fit of the model's own evaluations under the frozen
        predictor, with a Gaussian prior toward the encoder's embedding, by
        at most this many damped Gauss-Newton steps (a model stops once its
        next step would no longer move its embedding in float32; 2-4 steps
        at the default prior on BFCL, so 10 is ample); with the kernel readout, each row
        is predicted from the model's other rows. The encoder, one forward
        pass amortised over every set, reads mostly how strong a model is;
        the refined embedding also keeps what the predictor can read of the
        model's own answers. 0 returns the encoder's embedding (the
        paper's). A model's refinement is its own (its objective, steps
        and stopping), so its embedding, refined or not, depends on the
        models embedded beside it, and on ``transform_batch_tokens``, only
        through float32 rounding of the batched passes (within 1e-6
        relative in small test fits with the kernel readout; without it up
        to 5e-5 at ``refine_prior`` 0.001 to 0.003, where 10 steps may not
        reach a model's optimum). At 256 evaluations per model
        (``benchmarks/results/TUNING.md``, session 28; three seeds):
        Shaberi's same-base siblings recall@1 0.27 against 0.10, BFCL's
        self-identification from 256 disjoint rows 0.17 against 0.10,
        routing within the seed spread on four pools (BFCL 0.899 against
        0.896; these figures, and the timings below, are from the earlier
        stopping rule, which stopped up to 3e-4 short of the optimum). Each
        step costs one predictor pass over the model's rows with its
        Jacobian: at most 10 steps took 0.32 s for 71 models x 256 rows
        against the encoder's 0.18 s, 2.8 s for 112 x 1,024 against 0.81 s
        (2 CPU cores, ``benchmarks/core_speed.py --refine``, earlier rule;
        the present one takes about 1.6 times as long on BFCL at the
        default prior).
    refine_prior : float, default=0.1
        Weight of the prior, the mean square of the move in units of each
        coordinate's spread over the training models' embeddings
        (``embedding_scale_``), beside the mean BCE over the model's rows.
        0.1 minimises the log-loss on held-out training queries on BFCL
        and Shaberi and is within 0.001 of the minimum on MMLU-Pro and
        RouterBench; with no prior (0) the fit overfits a model's rows
        (``benchmarks/refine_prior.py``, TUNING.md session 29). At least
        0.001, the smallest prior those benchmarks measured: with no prior
        the fit has no fixed point (the embeddings run away), and under a
        tiny one float32 rounding steers the solve, so that a model's
        embedding depended on the models refined beside it (in small test
        fits, 1e-3 to 5e-3 relative at priors of 1e-5 to 1e-4, of order 1 at
        1e-8; from 0.001 up, within 1e-6 with the kernel readout and up to
        5e-5 without).
    random_state : int, RandomState instance or None, default=None
        Seeds the validation split, initial weights and episode sampling; an
        int makes a CPU fit reproducible bit for bit at a given number of
        torch threads (loky workers run fewer: a parallel search agrees with
        a sequential one to about 1e-7 relative). On a GPU two such fits
        agree to float32 rounding (atomic additions sum in any order; 6e-7
        apart on one H200), and bit for bit under
        ``torch.use_deterministic_algorithms(True)`` with
        ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` set before CUDA starts. Fits in
        several threads train one at a time, each as it would alone (they
        share torch's process-wide generator); code that draws from that
        generator in another thread during a fit shifts its own draws and
        the fit's.
    verbose : int, default=0
        1 prints skorch's epoch table to standard error (standard output
        carries results), one row per epoch, with early stopping's messages
        ("Stopping since ...", "Restoring best model ..."); colour codes
        only where standard error is a terminal and ``NO_COLOR`` is unset
        or empty. With an ``accelerator``, only the main process prints.

    Attributes
    ----------
    encoder_ : QueryEncoder
        The fitted query encoder.
    n_query_features_ : int
        Dimension F of the query encodings.
    classes_ : ndarray of str, shape (n_models_fit,)
        The models trained on.
    net_ : skorch.NeuralNet
        The trained network (``net_.module_`` is a :class:`~._nn.LocusNetwork`,
        in float32 whatever torch's default dtype); ``net_.history`` holds
        the training curves, and the epoch whose weights were kept is the
        last one its ``"<early_stopping>_best"`` column marks (see
        ``early_stopping``). The history is kept by pickling but not by
        :meth:`save`: a loaded embedder's is empty (``n_epochs_`` is kept).
    n_epochs_ : int
        Epochs trained to their end: an epoch cut short by Ctrl-C is not
        counted (its ``net_.history`` row has no ``"train_loss"``).
    embedding_scale_ : ndarray of shape (embedding_dim,)
        Each coordinate's standard deviation over the encoder's embeddings
        of the training models: the unit in which ``refine_prior`` measures
        the refinement's move. None for
        an embedder loaded from a file of a version without refinement.

    Notes
    -----
    :class:`LocusRouter` (and any estimator built on this one) uses a small
    protected interface that works on encoded queries, so queries are encoded
    once per call: ``_query_encoder()`` (the fitted query encoder for this
    embedder's ``encoder``, ``memory`` and ``device``),
    ``_fit_encoded(table, X_query, encoder, check_collapse=False)``,
    ``_transform_encoded(table, X_query)`` and
    ``_predict_proba_encoded(embeddings, X_query, evaluations)``, where
    ``table`` is a validated :class:`~locus_sklearn.EvalTable` and ``X_query``
    the encodings of its queries; ``check_collapse`` turns on the
    :class:`CollapsedEmbeddingWarning` check.

    Examples
    --------
    >>> from locus_sklearn import LocusEmbedder
    >>> from locus_sklearn.datasets import make_model_pool
    >>> pool = make_model_pool(n_models=6, n_queries=200, evals_per_model=100,
    ...                        random_state=0)
    >>> embedder = LocusEmbedder(pool.encodings, embedding_dim=16, n_latents=4,
    ...                          n_blocks=1, n_heads=2, max_epochs=2,
    ...                          random_state=0).fit(pool.evals)
    >>> embedder.transform(pool.evals).shape
    (6, 16)
    """

    # scikit-learn's metadata routing takes every argument but X and y for
    # metadata a meta-estimator may route: these are all data (predict_proba's
    # evals is what the embeddings were made from), so no set_*_request
    # offers them.
    __metadata_request__fit = {"evals": metadata_routing.UNUSED}
    __metadata_request__transform = {"evals": metadata_routing.UNUSED}
    __metadata_request__predict_proba = {
        "embeddings": metadata_routing.UNUSED,
        "queries": metadata_routing.UNUSED,
        "evals": metadata_routing.UNUSED,
    }

    _parameter_constraints = {
        "encoder": "no_validation",
        # At least 3: a LayerNorm output of d values has d - 2 degrees of
        # freedom (see the docstring).
        "embedding_dim": [Interval(Integral, 3, None, closed="left")],
        "n_latents": [Interval(Integral, 1, None, closed="left")],
        "n_blocks": [Interval(Integral, 1, None, closed="left")],
        "n_heads": [Interval(Integral, 1, None, closed="left")],
        "hidden_dim": [Interval(Integral, 1, None, closed="left")],
        "dropout": [Interval(Real, 0, 1, closed="left")],
        "query_noise": [Interval(Real, 0, None, closed="left")],
        "enc_size": [tuple, list],
        "dec_size": [Interval(Integral, 1, None, closed="left")],
        "disjoint": ["boolean"],
        "mix_prob": [Interval(Real, 0, 1, closed="both")],
        "n_regions": [Interval(Integral, 2, None, closed="left")],
        "kernel_readout": ["boolean"],
        # NumberInterval: _check_readout validates it apart from
        # _validate_params (at prediction), so it refuses bools itself.
        "readout_neighbors": [NumberInterval(Integral, 1, None, closed="left"), None],
        "readout_index": [StrOptions({"exact", "hnsw"})],
        "readout_dtype": [StrOptions({"float32", "bfloat16"})],
        "n_profile_regions": [Interval(Integral, 0, None, closed="left")],
        "profile_weight": [Interval(Real, 0, None, closed="left")],
        "agreement_weight": [Interval(Real, 0, None, closed="left")],
        "standardize_embedding": ["boolean"],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "episodes_per_epoch": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "gradient_clip": [Interval(Real, 0, None, closed="neither"), None],
        "validation_fraction": [Interval(Real, 0, 1, closed="left")],
        "early_stopping": [StrOptions(set(MONITORS)), None],
        "patience": [Interval(Integral, 1, None, closed="left")],
        "memory": [None, str, os.PathLike, HasMethods(["cache"])],
        "device": [None, str, torch.device],
        "accelerator": [None, HasMethods(["prepare", "reduce"])],
        "inference_dtype": [StrOptions({"float32", "bfloat16"})],
        "transform_batch_tokens": [
            StrOptions({"auto"}),
            Interval(Integral, 1, None, closed="left"),
        ],
        "refine_steps": [Interval(Integral, 0, None, closed="left")],
        # Below REFINE_PRIOR_MIN a model's refinement is no longer its own
        # to float32 rounding (see the parameter's doc).
        "refine_prior": [Interval(Real, REFINE_PRIOR_MIN, None, closed="left")],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        encoder=None,
        *,
        embedding_dim=128,
        n_latents=64,
        n_blocks=2,
        n_heads=4,
        hidden_dim=64,
        dropout=0.1,
        query_noise=0.05,
        enc_size=(64, 1024),
        dec_size=256,
        disjoint=True,
        mix_prob=0.0,
        n_regions=16,
        kernel_readout=True,
        readout_neighbors=None,
        readout_index="exact",
        readout_dtype="float32",
        n_profile_regions=0,
        profile_weight=1.0,
        agreement_weight=0.0,
        standardize_embedding=False,
        max_epochs=100,
        episodes_per_epoch=256,
        batch_size=16,
        lr=1e-3,
        weight_decay=0.01,
        gradient_clip=1.0,
        validation_fraction=0.1,
        early_stopping="valid_loss",
        patience=7,
        memory=None,
        device=None,
        accelerator=None,
        inference_dtype="float32",
        transform_batch_tokens="auto",
        refine_steps=0,
        refine_prior=0.1,
        random_state=None,
        verbose=0,
    ):
        self.encoder = encoder
        self.embedding_dim = embedding_dim
        self.n_latents = n_latents
        self.n_blocks = n_blocks
        self.n_heads = n_heads
        self.hidden_dim = hidden_dim
        self.dropout = dropout
        self.query_noise = query_noise
        self.enc_size = enc_size
        self.dec_size = dec_size
        self.disjoint = disjoint
        self.mix_prob = mix_prob
        self.n_regions = n_regions
        self.kernel_readout = kernel_readout
        self.readout_neighbors = readout_neighbors
        self.readout_index = readout_index
        self.readout_dtype = readout_dtype
        self.n_profile_regions = n_profile_regions
        self.profile_weight = profile_weight
        self.agreement_weight = agreement_weight
        self.standardize_embedding = standardize_embedding
        self.max_epochs = max_epochs
        self.episodes_per_epoch = episodes_per_epoch
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.gradient_clip = gradient_clip
        self.validation_fraction = validation_fraction
        self.early_stopping = early_stopping
        self.patience = patience
        self.memory = memory
        self.device = device
        self.accelerator = accelerator
        self.inference_dtype = inference_dtype
        self.transform_batch_tokens = transform_batch_tokens
        self.refine_steps = refine_steps
        self.refine_prior = refine_prior
        self.random_state = random_state
        self.verbose = verbose

    # Parameters that are not saved with a fitted embedder: how queries are
    # encoded is saved apart, the others are choices of the machine and run
    # that load the file (load(path, device=...) sets the device; a cache
    # directory or a process group's handle means nothing elsewhere).
    # random_state is saved (an int or None), so that a clone of a loaded
    # embedder refits as the original did.
    _RUN_TIME_PARAMS = ("encoder", "memory", "device", "accelerator", "verbose")

    def __getstate__(self):
        # As in save(): the accelerator (this process group's handle) is not
        # carried; the unpickled embedder trains in one process until given one.
        state = dict(super().__getstate__())
        state["accelerator"] = None
        return state

    def __sklearn_clone__(self):
        # The accelerator is a handle on the process's distributed state (and
        # holds what it prepared): the clone shares it, as processes must.
        accelerator = self.accelerator
        if accelerator is None:
            return super().__sklearn_clone__()
        try:
            self.accelerator = None
            cloned = super().__sklearn_clone__()
        finally:
            self.accelerator = accelerator
        cloned.accelerator = accelerator
        return cloned

    # ------------------------------------------------------------------ checks
    def _check_readout(self, *, check_import=False):
        """The readout's run-time parameters, also when set after ``fit``.

        ``check_import``: also that hnswlib imports where the readout will
        search with it (``fit`` checks so before training; ``load`` does not,
        so that a file can be read, and its ``readout_index`` set to "exact",
        where hnswlib is missing)."""
        validate_parameter_constraints(
            {k: self._parameter_constraints[k] for k in _READOUT_PARAMS},
            {k: getattr(self, k) for k in _READOUT_PARAMS},
            caller_name=type(self).__name__,
        )
        if self.readout_index != "exact" and self.readout_neighbors is None:
            raise ValueError(
                f"readout_index={self.readout_index!r} searches for the "
                "readout_neighbors nearest stored queries, but readout_neighbors="
                "None (read every evaluation); set readout_neighbors to an int "
                "such as 32, or readout_index='exact'."
            )
        if check_import and self.kernel_readout and self.readout_index == "hnsw":
            import_hnswlib()

    def _check_structure(self, *, check_import=False):
        self._check_readout(check_import=check_import)
        if self.embedding_dim % self.n_heads:
            raise ValueError(
                f"n_heads={self.n_heads} must divide embedding_dim="
                f"{self.embedding_dim}."
            )
        low, high = (tuple(self.enc_size) + (None, None))[:2]
        pair_of_ints = len(self.enc_size) == 2 and all(
            isinstance(v, Integral) and not isinstance(v, bool) for v in (low, high)
        )
        if pair_of_ints:
            for value in (low, high):
                # As check_representable_numbers does for a parameter: numpy
                # failed on a larger int deep inside fit.
                why = unrepresentable_int(value, integral=True)
                if why is not None:
                    raise ValueError(
                        f"enc_size=({short_int(low)}, {short_int(high)}) must be a "
                        "pair of ints (low, high) with 1 <= low <= high; got "
                        f"{short_int(value)}, {why}."
                    )
        if not pair_of_ints or not 1 <= low <= high:
            raise ValueError(
                f"enc_size={self.enc_size!r} must be a pair of ints (low, high) with "
                "1 <= low <= high."
            )

    def _check_training(self):
        """Settings that ``fit`` alone reads, checked before it trains."""
        if self.lr * self.weight_decay >= 1:
            # AdamW scales every weight by 1 - lr * weight_decay each step:
            # from 1 on that zeroes or flips them whatever the gradients, and
            # training ends with a network fitted to nothing, without an error.
            raise ValueError(
                f"lr={self.lr!r} and weight_decay={self.weight_decay!r} give "
                f"lr * weight_decay = {self.lr * self.weight_decay:g}, which must "
                "be below 1 (AdamW scales every weight by 1 - lr * weight_decay "
                "each step); lower lr or weight_decay."
            )

    def _check_fitted_network(self):
        """The parameters that shape the network (``_FITTED_NETWORK_PARAMS``)
        are still those the fitted ``net_`` was built with."""
        for name in _FITTED_NETWORK_PARAMS:
            current = getattr(self, name)
            # The skorch net keeps each module argument it built the network
            # with, for loaded and unpickled embedders as for fitted ones.
            fitted = getattr(self.net_, f"module__{name}", current)
            if current != fitted:
                raise ValueError(
                    f"{name}={current!r} was set after fit, but the fitted network "
                    f"was built with {name}={fitted!r}; refit, or set it back to "
                    f"{fitted!r}."
                )

    def _training_device(self):
        """The device ``fit`` trains on: ``device``, checked to be usable, or
        the accelerator's (``device`` then None or it)."""
        if self.accelerator is None:
            return resolve_device(self.device)
        # The constraint asks for prepare and reduce only; training reads
        # these too, and another object failed deep inside it.
        missing = [
            name
            for name in _ACCELERATOR_ATTRIBUTES
            if not hasattr(self.accelerator, name)
        ]
        if missing:
            raise TypeError(
                f"accelerator={self.accelerator!r} has no {', '.join(missing)}; "
                "pass an accelerate.Accelerator (or None to train in this "
                "process alone)."
            )
        device = check_accelerator(self.accelerator, self.device, self.batch_size)
        # Before the queries are encoded (fit_network checks again, for
        # callers that reach it directly).
        check_accelerated_params(self.accelerator, self.get_params(deep=False))
        return device

    @classmethod
    def _own_param_names(cls):
        """The parameters of a subclass's signature that LocusEmbedder lacks
        (but those it lists in ``_RUN_TIME_PARAMS``), sorted: saved with
        LocusEmbedder's (:meth:`_saved_params`)."""
        return subclass_param_names(cls, LocusEmbedder, exclude=cls._RUN_TIME_PARAMS)

    def _saved_params(self):
        """Hyper-parameters that define the fitted network and its use:
        LocusEmbedder's, then a subclass's own (:meth:`_own_param_names`).

        LocusEmbedder's are read by name, not from ``get_params``: a subclass
        may fix some in its ``super().__init__`` call and leave them out of
        its signature (a preset exposing a few settings), and fit and the
        file still need every one of them.
        """
        params = {
            name: getattr(self, name)
            for name in LocusEmbedder._get_param_names()
            if name not in LocusEmbedder._RUN_TIME_PARAMS
        }
        params["enc_size"] = tuple(params["enc_size"])
        params.update((name, getattr(self, name)) for name in self._own_param_names())
        return params

    # --------------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, evals, y=None):
        """Train the encoder and predictor on scored evaluations.

        Parameters
        ----------
        evals : DataFrame or mapping of columns
            Long-format evaluations (``model``, ``query``, ``score``); see
            :func:`~locus_sklearn.check_evals`. Every model needs at least two
            rows.
        y : None
            Ignored.

        Returns
        -------
        self : LocusEmbedder
        """
        self._fit_evals(evals)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, evals, y=None):
        """Fit, then embed the models of ``evals`` (queries encoded once).

        Parameters
        ----------
        evals : DataFrame or mapping of columns
            Long-format evaluations (``model``, ``query``, ``score``); see
            :func:`~locus_sklearn.check_evals`. Every model needs at least two
            rows, and each is embedded from all of its rows.
        y : None
            Ignored.

        Returns
        -------
        embeddings : ndarray of shape (n_models, embedding_dim) or DataFrame
            As :meth:`transform`: one row per distinct model of ``evals``, in
            sorted model-name order; with pandas output
            (``set_output(transform="pandas")`` or
            ``sklearn.set_config(transform_output="pandas")``), a DataFrame
            indexed by model name.

        Examples
        --------
        >>> from locus_sklearn import LocusEmbedder
        >>> from locus_sklearn.datasets import make_model_pool
        >>> pool = make_model_pool(n_models=4, n_families=2, n_queries=100,
        ...                        evals_per_model=80, random_state=0)
        >>> embedder = LocusEmbedder(pool.encodings, embedding_dim=8, n_latents=2,
        ...                          n_blocks=1, n_heads=2, max_epochs=1,
        ...                          enc_size=(16, 64), random_state=0)
        >>> embedder = embedder.set_output(transform="pandas")
        >>> Z = embedder.fit_transform(pool.evals.iloc[::-1])  # last model first
        >>> Z.shape
        (4, 8)
        >>> Z.index.name, list(Z.index)
        ('model', ['fam0-m00', 'fam0-m01', 'fam1-m02', 'fam1-m03'])
        """
        table, X_query = self._fit_evals(evals)
        # The embedding step warns as transform does (fit alone does not:
        # training caps its sets to a model's rows).
        self._warn_few_evaluations(table)
        return self._as_output(self._transform_encoded(table, X_query), table)

    def _fit_evals(self, evals):
        """Validate, encode the queries once, fit; return (table, X_query)."""
        table = check_evals(evals)
        self._check_structure(check_import=True)  # before the encoder loads
        self._check_training()
        encoder = self._query_encoder()
        X_query = encode_queries(encoder, table.queries)
        warn_shared_encodings(X_query, table.queries)
        self._fit_encoded(table, X_query, encoder, check_collapse=True)
        return table, X_query

    def _query_encoder(self):
        """The fitted query encoder of this embedder's parameters."""
        # Before the encoder is built or run: a device this torch cannot use
        # is an error naming ``device``, not one from deep inside the
        # encoder's model loading (or after every query was encoded).
        self._training_device()
        return as_query_encoder(self.encoder, memory=self.memory, device=self.device)

    @_fit_context(prefer_skip_nested_validation=True)
    def _fit_encoded(self, table, X_query, encoder, check_collapse=False):
        """Fit on a validated table whose queries ``encoder`` encoded as ``X_query``.

        ``check_collapse``: warn (:class:`CollapsedEmbeddingWarning`) when the
        training models' embeddings are nearly identical."""
        self._check_structure(check_import=True)  # before training
        self._check_training()
        rng = check_random_state(self.random_state)
        device = self._training_device()
        if self.accelerator is not None:
            rng = shared_random_state(self.accelerator, self.random_state)
        counts = np.diff(table.indptr)
        if (counts < 2).any():
            # LocusRouter.fit never gets here: it trains on the other models
            # and adds these as add_models does.
            few = table.models[counts < 2]
            raise ValueError(
                f"LocusEmbedder needs at least 2 evaluations per model to train (one "
                f"to encode, one to predict); {len(few)} model(s) have 1: "
                f"{_preview(few)}. Embed such models with transform() instead."
                f"{averaged_pairs_note(table)}"
            )
        net = fit_network(
            self._saved_params(),
            table,
            X_query,
            rng=rng,
            device=device,
            verbose=self.verbose,
            accelerator=self.accelerator,
        )
        self.encoder_ = encoder
        self.n_query_features_ = X_query.shape[1]
        self.net_ = net
        self.classes_ = table.models.copy()
        self.n_epochs_ = finished_epochs(net)
        embeddings = self._encoder_embeddings(table, X_query)
        self.embedding_scale_ = embedding_scale(embeddings)
        if check_collapse:
            warn_if_collapsed(embeddings, self.kernel_readout)
        return self

    # --------------------------------------------------------------- transform
    def _encode(self, queries):
        return encode_as_fitted(self, queries)

    def transform(self, evals):
        """Embed each model of ``evals`` from its evaluations (no training).

        Parameters
        ----------
        evals : DataFrame or mapping of columns
            Long-format evaluations of the models to embed, seen in training or
            not. Each model is embedded from all of its rows.

        Returns
        -------
        embeddings : ndarray of shape (n_models, embedding_dim) or DataFrame
            One row per distinct model of ``evals``, in sorted model-name
            order; with pandas output (``set_output(transform="pandas")`` or
            ``sklearn.set_config(transform_output="pandas")``), a DataFrame
            indexed by model name (an object-dtype index named ``model``).
            Independent of row order; deterministic.
            A model's row does not depend on the other models of ``evals``
            beyond float32 rounding (models are embedded in padded batches;
            about 1e-7 relative), so it may differ in the last bits from the
            same model's row embedded alone.
        """
        check_is_fitted(self)
        # Run-time settings (inference_dtype, transform_batch_tokens,
        # refine_steps) may have been set after fit; network-shaping ones
        # may not, which is checked before the queries are encoded.
        self._validate_params()
        self._check_fitted_network()
        table = check_evals(evals)
        self._warn_few_evaluations(table)
        embeddings = self._transform_encoded(table, self._encode(table.queries))
        return self._as_output(embeddings, table)

    def _as_output(self, embeddings, table):
        """Rows are models, not evaluation rows: a pandas output (``set_output``)
        is indexed by model name, which sklearn's wrapper then keeps."""
        if _get_output_config("transform", self)["dense"] != "pandas":
            return embeddings
        return pd.DataFrame(
            embeddings,
            # Object, not pandas' inferred str dtype: it refuses a lone
            # surrogate, which model names may hold.
            index=pd.Index(table.models, dtype=object, name="model"),
            columns=self.get_feature_names_out(),
        )

    def _warn_few_evaluations(self, table):
        low = int(self.enc_size[0])
        counts = np.diff(table.indptr)
        short = np.flatnonzero(counts < low)
        if len(short):
            # Fewest first (stable: ties in name order), so that the models
            # named are the ones with the count given.
            short = short[np.argsort(counts[short], kind="stable")]
            fewest = ", ".join(str(counts[i]) for i in short[:3])
            warn_external(
                f"{len(short)} model(s) have fewer than enc_size[0]={low} "
                "evaluations (the smallest set training draws from a model with "
                "enough evaluations), fewest first: "
                f"{_preview(table.models[short], limit=3)} with {fewest}: their "
                "embeddings are less reliable; give each model at least "
                f"{low} scored queries.",
                FewEvaluationsWarning,
            )

    # transform_batch_tokens="auto" on the CPU and on any other device (see
    # the parameter's doc).
    _CPU_BATCH_TOKENS = 16384
    _ACCELERATOR_BATCH_TOKENS = 262144

    def _batch_tokens(self):
        """``transform_batch_tokens``, "auto" resolved for the network's device."""
        if self.transform_batch_tokens != "auto":
            return self.transform_batch_tokens
        device = next(self.net_.module_.parameters()).device
        if device.type == "cpu":
            return self._CPU_BATCH_TOKENS
        return self._ACCELERATOR_BATCH_TOKENS

    def _transform_encoded(self, table, X_query):
        self._check_fitted_network()
        embeddings = self._encoder_embeddings(table, X_query)
        if self.refine_steps == 0:
            return embeddings
        if getattr(self, "embedding_scale_", None) is None:
            raise ValueError(
                f"refine_steps={self.refine_steps} needs the training pool's "
                "embedding scale (embedding_scale_), which this embedder lacks: "
                "it was saved by a version without refinement. Refit it, or use "
                "refine_steps=0."
            )
        # float32 whatever a caller's autocast says, as embed_models and
        # predict_proba run (inference_dtype is the package's own switch).
        device = next(self.net_.module_.parameters()).device
        with full_precision(device.type):
            return refine_embeddings(
                self.net_.module_,
                table,
                X_query,
                embeddings,
                scale=self.embedding_scale_,
                steps=self.refine_steps,
                prior=self.refine_prior,
                batch_tokens=self._batch_tokens(),
            )

    def _encoder_embeddings(self, table, X_query):
        """The encoder's embeddings of the models of ``table`` (unrefined)."""
        return embed_models(
            self.net_.module_,
            table,
            X_query,
            batch_tokens=self._batch_tokens(),
            bfloat16=self.inference_dtype == "bfloat16",
        )

    def predict_proba(self, embeddings, queries, *, evals=None):
        """P(correct) of models with the given embeddings on queries.

        Parameters
        ----------
        embeddings : array-like of shape (n_models, embedding_dim)
            E.g. ``transform(evals)``. A DataFrame (``transform``'s pandas
            output) is read as its values; with ``evals``, an index other
            than a default ``RangeIndex`` names the models of its rows and
            must equal ``evals``' models in sorted order.
        queries : sequence of str
        evals : DataFrame or mapping of columns, default=None
            The evaluations the embeddings were made from; required when
            ``kernel_readout=True`` (ignored otherwise). Row ``i`` of
            ``embeddings`` is paired with the ``i``-th of ``evals``' models
            in sorted name order, as ``transform(evals)`` orders its rows;
            embeddings indexed by other models, or by the same ones in
            another order, are a ValueError.

        Returns
        -------
        proba : ndarray of shape (n_queries, n_models)
            Column ``i`` is the model of row ``i`` of ``embeddings``.

        Examples
        --------
        >>> from locus_sklearn import LocusEmbedder
        >>> from locus_sklearn.datasets import make_model_pool
        >>> pool = make_model_pool(n_models=4, n_families=2, n_queries=100,
        ...                        evals_per_model=80, random_state=0)
        >>> embedder = LocusEmbedder(pool.encodings, embedding_dim=8, n_latents=2,
        ...                          n_blocks=1, n_heads=2, max_epochs=1,
        ...                          enc_size=(16, 64), random_state=0)
        >>> embedder = embedder.fit(pool.evals).set_output(transform="pandas")
        >>> Z = embedder.transform(pool.evals)  # indexed by model, sorted
        >>> queries = list(pool.evals["query"].unique()[:3])
        >>> embedder.predict_proba(Z, queries, evals=pool.evals).shape
        (3, 4)
        >>> embedder.predict_proba(Z.iloc[::-1], queries, evals=pool.evals)
        Traceback (most recent call last):
        ...
        ValueError: embeddings is indexed by models ['fam1-m03', 'fam1-m02', ...
        """
        check_is_fitted(self)
        self._check_fitted_network()
        queries = check_queries(queries)
        evaluations = None
        # Only the kernel readout reads them: otherwise ignored, as documented
        # (not encoded, so a query its encoder lacks is no error).
        if evals is not None and self.kernel_readout:
            table = check_evals(evals)
            _check_embedding_models(embeddings, table.models)
            evaluations = (self._encode(table.queries), table)
        return self._predict_proba_encoded(
            embeddings, self._encode(queries), evaluations
        )

    def _predict_proba_encoded(self, embeddings, X_query, evaluations=None):
        """``evaluations``: (encodings of table.queries, table) of the embedded
        models, for the kernel readout, or their :meth:`_readout_pool` (built
        once, for many calls)."""
        self._check_fitted_network()
        # NumPy takes no bfloat16 tensor, nor one that requires grad.
        embeddings = untorched(embeddings)
        if isinstance(embeddings, pd.DataFrame | pd.Series):
            # A nullable ("Float64") or Arrow ("double[pyarrow]") frame holds
            # a missing value as pd.NA, on which np.asarray failed with a bare
            # "float() argument ... 'NAType'": read as NaN, it is refused by
            # the finiteness check below, which names the row.
            embeddings = embeddings.to_numpy(dtype=np.float32, na_value=np.nan)
        else:
            embeddings = np.asarray(embeddings, dtype=np.float32)
        # torch.as_tensor refuses the negative strides of a reversed view
        # (Z[::-1], or a DataFrame reordered with .iloc[::-1]), even along an
        # axis of length 1, where np.ascontiguousarray keeps the view; and it
        # warns of a read-only one (a DataFrame's values under pandas'
        # copy-on-write). One small copy (n_models x embedding_dim) avoids both.
        if min(embeddings.strides, default=0) < 0 or not embeddings.flags.writeable:
            embeddings = embeddings.copy()
        if embeddings.ndim != 2 or embeddings.shape[1] != self.embedding_dim:
            raise ValueError(
                f"embeddings must have shape (n_models, {self.embedding_dim}); got "
                f"{embeddings.shape}."
            )
        finite = np.isfinite(embeddings).all(axis=1)
        if not finite.all():
            raise ValueError(
                f"embeddings has NaN or infinite values in {int((~finite).sum())} "
                f"row(s), e.g. row {int(np.flatnonzero(~finite)[0])}; every model "
                "needs a finite embedding (e.g. from transform)."
            )
        self._check_readout()
        if not self.kernel_readout:
            evaluations = None
        elif evaluations is None:
            raise ValueError(
                "kernel_readout=True needs the models' evaluations to predict: "
                "pass evals=."
            )
        else:
            n_models = (
                evaluations.n_models
                if isinstance(evaluations, ReadoutPool)
                else evaluations[1].n_models
            )
            if n_models != len(embeddings):
                raise ValueError(
                    f"evals has {n_models} models but embeddings has "
                    f"{len(embeddings)} rows."
                )
        return predict_proba(
            self.net_.module_,
            embeddings,
            X_query,
            evaluations,
            readout_neighbors=self.readout_neighbors,
            readout_index=self.readout_index,
            readout_dtype=self.readout_dtype,
        )

    def _readout_pool(self, X_table, table):
        """What the kernel readout reads from the evaluations of ``table``
        (query encodings ``X_table``), for :meth:`_predict_proba_encoded`."""
        return readout_pool(self.net_.module_, X_table, table)

    # ------------------------------------------------------------- persistence
    def save(self, path, *, include_query_text=True):
        """Save the fitted embedder to one safetensors file (no pickle).

        The query encoder is stored as a reference (the bundled default or a
        model directory) or, for a mapping, as its vectors; a custom encoder
        object must be passed again to :meth:`load`. The encoder stored is
        the fitted one (``encoder_``), which ``transform`` encodes with: an
        ``encoder`` set after fit takes effect at the next fit, and the loaded
        embedder's ``encoder`` is the fitted one. Every hyper-parameter
        is stored but ``encoder``, ``device``, ``memory``, ``accelerator``
        and ``verbose``, choices of where and how the file is used
        (:meth:`load`'s ``device=`` sets the device). ``random_state`` is
        stored as the int or None it is; a ``RandomState`` instance, whose
        state fit has already advanced, cannot be stored and is saved as
        None, with a warning. A ``set_output(transform=...)`` configuration
        is stored and restored. The parameters a subclass adds are stored
        where each is None, a bool, an int, a float or a str (any other is
        refused: pickle such an embedder); that subclass's :meth:`load`
        restores them.

        Parameters
        ----------
        path : str or path-like
        include_query_text : bool, default=True
            False leaves a mapping encoder out of the file (its keys are query
            texts): pass it again to :meth:`load` (``encoder=``). Use it when
            prompts must not ship, or when the mapping's keys are too long for
            the file's 100 MB header.
        """
        check_is_fitted(self)
        # A NumPy bool (np.True_, e.g. computed from data) too, as every other
        # bool parameter of the package takes; an int is refused.
        if not isinstance(include_query_text, bool | np.bool_):
            raise TypeError(
                f"include_query_text must be True or False; got {include_query_text!r}."
            )
        include_query_text = bool(include_query_text)
        # Settings changed after fit are checked as load checks them: a file
        # written with one that load refuses could not be read back.
        self._validate_params()
        self._check_structure()
        self._check_fitted_network()
        save_embedder(self, path, include_query_text=include_query_text)

    @classmethod
    def load(cls, path, *, encoder=None, device=None):
        """Load an embedder written by :meth:`save`; never unpickles.

        Parameters
        ----------
        path : str or path-like
        encoder : default=None
            Overrides the saved query encoder (required if a custom object was
            used, or a mapping saved with ``include_query_text=False``).
        device : str, default=None
            Torch device; None uses CUDA when available, else CPU. The loaded
            embedder's ``device`` parameter is this value, as given (None
            stays None, resolved again at each fit).

        Returns
        -------
        embedder : LocusEmbedder
            Of class ``cls`` (the file holds no code, so never of a class it
            names), with the saved hyper-parameters, ``random_state`` included
            (None for a file of a version that did not save it). A file of a
            subclass with other parameters than ``cls``'s is refused, naming
            the class to load it with.
        """
        return load_embedder(cls, path, encoder=encoder, device=device)

    def get_feature_names_out(self, input_features=None):
        """Names of the embedding dimensions: ``locus0``, ``locus1``, ...

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Ignored; accepted for scikit-learn API compatibility. The input
            of :meth:`transform` is a table of evaluations, not features, so
            there are no input feature names to derive the names from or to
            check this against: they are a prefix and an index, as for
            scikit-learn's ``PCA``.

        Returns
        -------
        feature_names_out : ndarray of str objects, shape (embedding_dim,)
            ``locus0`` to ``locus{embedding_dim - 1}``, the columns of
            :meth:`transform`'s pandas output.

        Examples
        --------
        >>> from locus_sklearn import LocusEmbedder
        >>> LocusEmbedder(embedding_dim=3).get_feature_names_out()
        array(['locus0', 'locus1', 'locus2'], dtype=object)
        """
        if hasattr(self, "net_"):
            self._check_fitted_network()
        return np.asarray(
            [f"locus{i}" for i in range(self.embedding_dim)], dtype=object
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        # transform returns float32 whatever the input (a table of scores,
        # not an array whose dtype it could keep).
        tags.transformer_tags.preserves_dtype = []
        tags.non_deterministic = False
        return tags
