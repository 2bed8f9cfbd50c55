"""Training and batched inference of the LOCUS network: the one home of both.

Everything between an estimator's validated inputs (an :class:`~._evals.EvalTable`
and the encodings of its queries) and the torch modules of :mod:`._nn` lives
here, with skorch as the training loop:

- episodes: an *episode* is one model's training item, an encoder set S_enc of
  its scored evaluations (to build z_m) and a decoder set S_dec of its other
  evaluations (to predict). Datasets yield per-model index arrays; collators
  pad them into one batch and gather the batch's unique query encodings once;
- callbacks (divergence check, validation routing accuracy) and
  :func:`fit_network`, which builds the skorch net and trains it;
- :func:`embed_models` and :func:`predict_proba`, batched inference for the
  estimators.

The estimators pass their hyper-parameters as one mapping (``params``) with
the names of :class:`~._embedder.LocusEmbedder`'s parameters.
"""

import contextlib
import copy
import functools
import inspect
import os
import re
import sys
import threading

import numpy as np
import torch
from sklearn.cluster import KMeans
from skorch import NeuralNet
from skorch.callbacks import Callback, EarlyStopping, GradientNormClipping, PrintLog
from skorch.dataset import unpack_data
from skorch.helper import predefined_split
from skorch.utils import to_tensor

from ._agreement import agreement_stress
from ._nn import LocusNetwork, MaskedBCEWithLogitsLoss, autocast_enabled
from ._readout import EvaluationSets, ReadoutPool
from ._warnings import warn_external
from .metrics._routing import routing_accuracy

__all__ = [
    "NETWORK_PARAMS",
    "collate_episodes",
    "DivergenceCheck",
    "seeded_rng",
    "embed_models",
    "padded_rows",
    "size_batches",
    "EpisodeCollator",
    "evaluation_sets",
    "FixedEpisodes",
    "gather_queries",
    "held_out_rows",
    "finished_epochs",
    "fit_network",
    "float32_default",
    "full_precision",
    "LocusNet",
    "MarkedEarlyStopping",
    "predict_proba",
    "progress_sink",
    "RandomEpisodes",
    "python_scalar",
    "python_scalars",
    "raised_settings",
    "readout_pool",
    "trainable_torch",
    "ValidRoutingAccuracy",
    "split_rows_by_query",
    "writable",
]

# The estimator hyper-parameters that shape the network (LocusNetwork's
# arguments); the others drive training and inference.
NETWORK_PARAMS = (
    "embedding_dim", "n_latents", "n_blocks", "n_heads", "hidden_dim", "dropout",
    "query_noise", "kernel_readout", "n_profile_regions", "standardize_embedding",
)  # fmt: skip

# Early-stopping monitors: is lower better?
MONITORS = {"valid_loss": True, "valid_routing_accuracy": False}
#: EarlyStopping's relative threshold: a score counts as a new best only when
#: it beats the last best by more than this fraction of it (the embedder's
#: ``patience`` and ``early_stopping`` docs state it).
EARLY_STOPPING_THRESHOLD = 1e-4


def python_scalar(value):
    """``value`` as a Python scalar where it is a NumPy one (also inside a
    tuple), else unchanged.

    The parameter constraints accept NumPy integers (what GridSearchCV draws
    from an array grid), but torch's DataLoader refuses a ``batch_size``
    that is not a Python int, with a message that names the value it was
    given as if it were valid.
    """
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return tuple(python_scalar(v) for v in value)
    return value


def python_scalars(params):
    """``params`` with each value through :func:`python_scalar`."""
    return {name: python_scalar(value) for name, value in params.items()}


def writable(array):
    """``array`` for ``torch.as_tensor``: a copy where it is a read-only ndarray.

    A read-only array (a joblib memmap in a worker process, a view of a
    DataFrame's values) makes ``torch.as_tensor`` warn that writing to the
    tensor is undefined behaviour; anything else is returned as it is, not
    copied.
    """
    if isinstance(array, np.ndarray) and not array.flags.writeable:
        return array.copy()
    return array


def full_precision(device_type):
    """A context that turns a caller's autocast off for ``device_type``.

    ``inference_dtype`` is the package's own precision switch: under a
    caller's autocast the network's matrix products would run in its lower
    dtype, and results still typed float32 would be about 5e-3 off.
    """
    if autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


@contextlib.contextmanager
def float32_default():
    """float32 as torch's default dtype inside, the caller's set back on exit.

    A caller may have ``torch.set_default_dtype(torch.float64)`` set (common
    in scientific code): a network built then would be float64, against the
    float32 query encodings (and float32 saved weights). The default dtype
    is process-wide (another thread running torch meanwhile would see
    float32), so it is changed only where it is not float32 already.
    """
    dtype = torch.get_default_dtype()
    if dtype == torch.float32:
        yield
        return
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)


@contextlib.contextmanager
def trainable_torch(device):
    """Gradients on, float32 as the default dtype and no autocast on
    ``device``, for a training run.

    A caller may fit inside ``torch.inference_mode()`` (which skorch's
    ``set_grad_enabled`` cannot leave: backward then fails on tensors with
    no ``grad_fn``) or under ``torch.no_grad()``, with a float64 default
    dtype set (see :func:`float32_default`), or inside its own
    ``torch.autocast`` block, which would train in mixed precision: fit
    trains in float32 whatever the caller's context. Mixed precision is
    asked for through the accelerator (its autocast is entered inside).
    """
    device_type = torch.device(device).type
    with (
        torch.inference_mode(False),
        torch.enable_grad(),
        float32_default(),
        full_precision(device_type),
    ):
        yield


def split_rows_by_query(table, validation_fraction, rng):
    """Hold out a fraction of queries: their rows become validation targets.

    A model keeps at least two training rows (one to encode, one to decode);
    held-out rows that would leave it fewer stay in training.

    Returns
    -------
    is_valid : ndarray of bool, shape (n_rows,)
    """
    if validation_fraction <= 0:
        return np.zeros(table.n_rows, dtype=bool)
    n_valid = _n_held_out(validation_fraction, table.n_queries)
    held_out = np.zeros(table.n_queries, dtype=bool)
    held_out[rng.choice(table.n_queries, size=n_valid, replace=False)] = True
    return held_out_rows(table, held_out, min_train_rows=2)


def held_out_rows(table, held_out, min_train_rows):
    """The rows of the held-out queries (``held_out``: bool per query), but
    for a model they would leave fewer than ``min_train_rows`` training rows:
    its held-out rows stay in training.

    Returns
    -------
    is_valid : ndarray of bool, shape (n_rows,)
    """
    is_valid = held_out[table.query_index]
    trained = np.bincount(table.model_index[~is_valid], minlength=table.n_models)
    is_valid[trained[table.model_index] < min_train_rows] = False
    return is_valid


def _n_held_out(validation_fraction, n_queries):
    """Queries :func:`split_rows_by_query` holds out."""
    return int(round(validation_fraction * n_queries))


def _warn_if_no_validation(params, table, is_valid):
    """Warn (at the user's line) when ``validation_fraction > 0`` held out
    no rows (``is_valid``), so that training runs without validation or early
    stopping: too few queries to round to one, or every held-out row back in
    training (a model keeps two training rows)."""
    fraction = params["validation_fraction"]
    if fraction <= 0 or is_valid.any():
        return
    n_valid = _n_held_out(fraction, table.n_queries)
    if n_valid == 0:
        why = f"{fraction} of the {table.n_queries} queries rounds to 0 queries"
    else:
        why = (
            f"it held out {n_valid} of the {table.n_queries} queries, but that "
            "left each model with held-out rows fewer than 2 training rows, so "
            "their rows went back to training"
        )
    stopping = " and early stopping" if params["early_stopping"] is not None else ""
    warn_external(
        f"validation_fraction={fraction} holds out no evaluations: {why}. "
        f"Training runs without validation{stopping}, for max_epochs="
        f"{params['max_epochs']} epochs. Set validation_fraction=0 to train "
        "without validation knowingly, or a value that holds out at least one "
        "query while leaving each model 2 training rows.",
        UserWarning,
    )


def _per_model(table, rows_mask):
    """Lists of (query_index, score) arrays per model for the masked rows."""
    queries, scores = [], []
    indptr = table.indptr
    for m in range(table.n_models):
        rows = np.arange(indptr[m], indptr[m + 1])
        rows = rows[rows_mask[rows]]
        queries.append(torch.as_tensor(table.query_index[rows]))
        scores.append(torch.as_tensor(table.score[rows], dtype=torch.float32))
    return queries, scores


class RandomEpisodes(torch.utils.data.Dataset):
    """Training episodes: each item is one model's rows in a random order.

    :class:`EpisodeCollator` then splits each item into S_enc and S_dec, with
    one S_enc size per batch. Randomness comes from torch's global generator,
    seeded by the estimator.

    With probability ``mix_prob`` an item is a *mixed model* instead: the
    model's rows in a random half of the query regions (``query_region``)
    and a random partner model's rows in the other half. A pool of tens of
    models gives the encoder only tens of distinct sets to learn from; mixed
    models add sets whose skill differs by region, as real models' do.

    Parameters
    ----------
    queries, scores : list of Tensor
        Per-model training rows.
    models : ndarray of int
        Model index of each item (an epoch walks every model, possibly
        several times).
    mix_prob : float, default=0.0
    query_region : LongTensor of shape (n_queries,), default=None
        Region (e.g. k-means cluster of the encodings) of every query; needed
        when ``mix_prob > 0``.
    """

    def __init__(self, queries, scores, models, mix_prob=0.0, query_region=None):
        self.queries = queries
        self.scores = scores
        self.models = models
        self.mix_prob = mix_prob
        self.query_region = query_region

    def __len__(self):
        return len(self.models)

    def _rows(self, m):
        q, y = self.queries[m], self.scores[m]
        n_models = len(self.queries)
        if self.mix_prob == 0 or n_models < 2 or torch.rand(()).item() >= self.mix_prob:
            return q, y
        partner = int(torch.randint(n_models - 1, ()).item())
        partner += partner >= m
        n_regions = int(self.query_region.max()) + 1
        from_partner = torch.rand(n_regions) < 0.5
        keep = ~from_partner[self.query_region[q]]
        qp, yp = self.queries[partner], self.scores[partner]
        take = from_partner[self.query_region[qp]]
        q_mix = torch.cat([q[keep], qp[take]])
        if len(q_mix) < 2:
            return q, y
        return q_mix, torch.cat([y[keep], yp[take]])

    def __getitem__(self, i):
        m = int(self.models[i])
        q, y = self._rows(m)
        order = torch.randperm(len(q))
        return (q[order], y[order]), m


class EpisodeCollator:
    """Split shuffled rows (:class:`RandomEpisodes`) into S_enc and S_dec and
    pad the batch (:func:`collate_episodes`).

    One size |S_enc| is drawn log-uniformly from ``enc_size`` per *batch*
    (each episode capped so at least a quarter of its model's rows remain
    for S_dec): every episode of a batch whose models have enough rows then
    has the same length, so no compute goes to padding there (a capped
    episode is padded to the others). Each episode's size still has the log-uniform
    law. S_dec holds up to ``dec_size`` rows, disjoint from S_enc when
    ``disjoint``.

    Parameters
    ----------
    enc_size : tuple of (int, int)
    dec_size : int
    disjoint : bool
    """

    def __init__(self, enc_size, dec_size, disjoint, profile_regions=None):
        self.enc_size = tuple(enc_size)
        self.dec_size = dec_size
        self.disjoint = disjoint
        self.profile_regions = profile_regions

    def __call__(self, batch):
        low, high = np.log(self.enc_size[0]), np.log(self.enc_size[1])
        u = torch.rand(()).item()
        drawn = int(round(np.exp(low + u * (high - low))))
        episodes = []
        for (q, y), m in batch:
            n = len(q)
            n_enc = max(1, min(drawn, n - max(1, n // 4)))
            if self.disjoint:
                dec = slice(n_enc, n_enc + self.dec_size)
            else:
                dec = torch.randperm(n)[: self.dec_size]
            episodes.append(((q[:n_enc], y[:n_enc], q[dec], y[dec]), m))
        return collate_episodes(episodes, self.profile_regions)


class FixedEpisodes(torch.utils.data.Dataset):
    """Deterministic episodes: S_enc = a model's encoder rows (capped at
    ``max_enc`` by a fixed subsample), S_dec = its held-out rows."""

    def __init__(self, enc_queries, enc_scores, dec_queries, dec_scores, rng, max_enc):
        self.items = []
        for m, (qe, ye, qd, yd) in enumerate(
            zip(enc_queries, enc_scores, dec_queries, dec_scores, strict=True)
        ):
            if len(qd) == 0 or len(qe) == 0:
                continue
            if len(qe) > max_enc:
                keep = torch.as_tensor(
                    np.sort(rng.choice(len(qe), max_enc, replace=False))
                )
                qe, ye = qe[keep], ye[keep]
            self.items.append(((qe, ye, qd, yd), m))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate_episodes(batch, profile_regions=None):
    """Pad a list of episodes into one batch.

    Parameters
    ----------
    batch : list of ((enc_q, enc_y, dec_q, dec_y), model)
        Query indices (into the training queries) and scores of each episode.
    profile_regions : tuple of (LongTensor of shape (n_queries,), int), default=None
        Region of every query and the number R of regions: adds each
        episode's decoder-set mean score and row count per region,
        ``profile`` and ``profile_count`` (B, R), the profile head's targets.

    Returns ``(X, y)``: ``X`` a dict of ``enc_index``, ``enc_score``,
    ``enc_mask`` (B, N) and ``dec_index`` (B, M), the query indices padded
    with 0 (see :func:`gather_queries`); ``y`` (B, M) with NaN on padding.
    """
    episodes = [item[0] for item in batch]
    n_enc = max(len(e[0]) for e in episodes)
    n_dec = max(len(e[2]) for e in episodes)
    b = len(episodes)
    enc_index = torch.zeros(b, n_enc, dtype=torch.long)
    enc_score = torch.zeros(b, n_enc)
    enc_mask = torch.zeros(b, n_enc, dtype=torch.bool)
    dec_index = torch.zeros(b, n_dec, dtype=torch.long)
    target = torch.full((b, n_dec), float("nan"))
    for i, (qe, ye, qd, yd) in enumerate(episodes):
        enc_index[i, : len(qe)] = qe
        enc_score[i, : len(qe)] = ye
        enc_mask[i, : len(qe)] = True
        dec_index[i, : len(qd)] = qd
        target[i, : len(qd)] = yd
    X = {
        "enc_index": enc_index,
        "enc_score": enc_score,
        "enc_mask": enc_mask,
        "dec_index": dec_index,
    }
    if profile_regions is not None:
        query_region, n_regions = profile_regions
        count = torch.zeros(b, n_regions)
        total = torch.zeros(b, n_regions)
        for i, (_, _, qd, yd) in enumerate(episodes):
            region = query_region[qd]
            count[i].index_add_(0, region, torch.ones(len(qd)))
            total[i].index_add_(0, region, yd.float())
        X["profile"] = total / count.clamp(min=1)
        X["profile_count"] = count
    return X, target


def gather_queries(bank, X):
    """The network's inputs for a collated batch ``X``.

    Gathers the encodings of the batch's U unique queries once (the
    tokenizer then projects U rows, not B·N) and re-indexes the batch into
    them.

    Parameters
    ----------
    bank : Tensor of shape (n_queries, F)
        Encodings of the queries ``X`` indexes.
    X : dict of Tensor
        As returned by :func:`collate_episodes`, on ``bank``'s device.

    Returns
    -------
    inputs : dict of Tensor
        ``features`` (U, F) and the batch's tensors, for
        :meth:`~._nn.LocusNetwork.forward`.
    """
    enc_index, dec_index = X["enc_index"], X["dec_index"]
    unique, inverse = torch.unique(
        torch.cat([enc_index.reshape(-1), dec_index.reshape(-1)]), return_inverse=True
    )
    n_enc = enc_index.numel()
    return {
        "features": bank[unique],
        "enc_index": inverse[:n_enc].view_as(enc_index),
        "enc_score": X["enc_score"],
        "enc_mask": X["enc_mask"],
        "dec_index": inverse[n_enc:].view_as(dec_index),
    }


# Held by every seeded block (see seeded_rng). Re-entrant, so that a seeded
# block may run inside another in the same thread.
_SEEDED_LOCK = threading.RLock()


@contextlib.contextmanager
def seeded_rng(seed, device):
    """Seed torch's generators for a fit on ``device``, then restore them.

    Reproducible, and the caller's generators are left as they were: the
    CPU one, and the CUDA one of ``device`` where it is a GPU. No other
    CUDA generator is touched (``torch.manual_seed`` would seed every GPU's,
    queueing the seed for later where CUDA is not started yet, even for a
    fit on the CPU).

    ``torch.random.fork_rng`` saves and restores the process-wide
    generators; it does not make private ones. Initialisation, dropout and
    the episodes' sampling draw from those process-wide generators, so two
    seeded blocks in two threads would draw from, and re-seed, one
    generator, each fit's draws depending on the other's timing. The block
    therefore holds a process-wide lock: seeded fits in threads run one at a
    time, each reproducible bit for bit on the CPU. Other code that draws
    from torch's generators in another thread during a fit still shares
    them: its draws shift, and so do the fit's.
    """
    device = torch.device(device)
    cuda = []
    if device.type == "cuda":
        cuda = [
            device.index if device.index is not None else torch.cuda.current_device()
        ]
    with _SEEDED_LOCK, torch.random.fork_rng(devices=cuda):
        torch.random.default_generator.manual_seed(seed)
        for index in cuda:
            with torch.cuda.device(index):
                torch.cuda.manual_seed(seed)
        yield


class DivergenceCheck(Callback):
    """Stop with a clear error as soon as training diverges, instead of
    training on NaN and failing later somewhere less clear.

    After every training step it checks the loss, and the kernel readout's
    bandwidth τ (one number) where the network has one: a large step can
    push log τ to −inf, τ to 0, before any loss shows it. After every epoch
    it checks every weight and the validation loss: the last step of a fit
    can leave non-finite weights that no later training loss reports, and
    weights grown large but finite can overflow the validation pass to NaN
    while every training loss was finite; the validation metrics and early
    stopping would then fail on NaN with messages that name nothing the user
    set. Put it first among the callbacks, so that its epoch-end check runs
    before theirs.

    Parameters
    ----------
    estimator : str, default="LocusEmbedder"
        Name of the estimator training, for the message.
    remedy : str or None, default="set gradient_clip"
        What else to try besides a lower ``lr``, if anything.
    """

    def __init__(self, estimator="LocusEmbedder", remedy="set gradient_clip"):
        self.estimator = estimator
        self.remedy = remedy

    def diverged(self, net, what):
        """The FloatingPointError to raise; ``what`` says what became
        non-finite (e.g. "the training loss became nan")."""
        advice = f"lower lr (now {net.lr})"
        decay = _decoupled_weight_decay(net)
        if decay * net.lr >= 1:
            # AdamW scales every weight by 1 - lr * weight_decay each step:
            # at lr * weight_decay >= 1 that flips or zeroes them, whatever
            # the gradients.
            advice += (
                f" or weight_decay (now {decay}; lr * weight_decay = "
                f"{decay * net.lr:g} must stay below 1)"
            )
        return FloatingPointError(
            f"{self.estimator} training diverged: {what} in epoch "
            f"{len(net.history)}; {advice}"
            + (f" or {self.remedy}." if self.remedy else ".")
        )

    def on_batch_end(self, net, batch=None, training=None, **kwargs):
        if not training:
            return
        loss = net.history[-1, "batches", -1, "train_loss"]
        if not np.isfinite(loss):
            raise self.diverged(net, f"the training loss became {loss}")
        readout = getattr(_unwrapped(net), "readout", None)
        if readout is not None:
            # τ as the readout computes it, in the parameter's float32.
            log_tau = readout.log_bandwidth.detach()
            tau, log_tau = float(log_tau.exp()), float(log_tau)
            if not 0 < tau < np.inf:
                raise self.diverged(
                    net,
                    f"the kernel readout's bandwidth became {tau} (log-bandwidth "
                    f"{log_tau})",
                )

    def on_epoch_end(self, net, **kwargs):
        module = _unwrapped(net)
        # Every weight tested itself, on its own device and in its own dtype
        # (MPS has no float64, so no float64 sum), with a single
        # synchronisation; once per epoch is cheap next to checking every step.
        finite = [torch.isfinite(p.detach()).all() for p in module.parameters()]
        if finite and not bool(torch.stack(finite).all()):
            names = [
                name
                for name, p in module.named_parameters()
                if not bool(torch.isfinite(p.detach()).all())
            ]
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            raise self.diverged(
                net, f"weights became non-finite ({len(names)} tensors: {shown})"
            )
        valid_loss = net.history[-1].get("valid_loss")
        if valid_loss is not None and not np.isfinite(valid_loss):
            raise self.diverged(net, f"the validation loss became {valid_loss}")


class MarkedEarlyStopping(EarlyStopping):
    """skorch's EarlyStopping, with its improvements marked in the history.

    skorch's scoring marks ``valid_loss_best`` at every new lowest loss, with
    no threshold, while EarlyStopping counts an epoch as an improvement only
    when it beats the best so far by more than ``threshold`` (relative), and
    restores the last such epoch's weights: the history could mark a later
    epoch than the one restored. Here ``<monitor>_best`` is recorded (for
    ``valid_loss``, over skorch's mark; it runs after skorch's scoring) as
    True exactly at the epochs this callback counted as improvements, so the
    last marked epoch is the one whose weights the fit keeps (``best_epoch_``).

    Its messages ("Stopping since ...", "Restoring best model ...") go where
    the epoch table goes (:func:`progress_sink`, standard error; skorch's
    default printed them to standard output), only when the net is verbose,
    and the epoch that stops training gets its row in the table before the
    message: skorch prints the row after every other callback (its PrintLog
    runs last), which the stop (a KeyboardInterrupt) skipped, so the table
    ended one epoch short of ``n_epochs_``.
    """

    def _sink(self, text, verbose):
        if not verbose:
            return
        if self._held is not None:
            self._held.append(text)
        else:
            progress_sink(text)

    _held = None  # messages held while an epoch's row is not printed yet

    def on_epoch_end(self, net, **kwargs):
        epoch = net.history[-1, "epoch"]
        self._held = []
        stopped = False
        try:
            super().on_epoch_end(net, **kwargs)
        except KeyboardInterrupt:
            stopped = True
            raise
        finally:
            held, self._held = self._held, None
            # Also at the epoch that stops training (KeyboardInterrupt).
            net.history.record(f"{self.monitor}_best", self.best_epoch_ == epoch)
            if stopped:
                for _, callback in net.callbacks_:
                    if isinstance(callback, PrintLog):
                        callback.on_epoch_end(net)
            for text in held:
                progress_sink(text)


def raised_settings(estimator_class, params, names):
    """Advice to lower each of ``names`` that ``params`` sets above its
    default in ``estimator_class``'s signature, for a divergence error.

    For settings that scale the loss or a training step, so that a large one
    can make training diverge: naming only ``lr`` then blamed a setting the
    user had not changed.

    Examples
    --------
    >>> from locus_sklearn.baselines import MatrixFactorizationRouter
    >>> params = {"noise_std": 1e20, "weight_decay": 0.0}
    >>> raised_settings(MatrixFactorizationRouter, params, ["noise_std", "weight_decay"])
    ['lower noise_std (now 1e+20, default 0.05)']
    """  # noqa: E501
    defaults = inspect.signature(estimator_class).parameters
    return [
        f"lower {name} (now {params[name]:g}, default {defaults[name].default:g})"
        for name in names
        if params[name] > defaults[name].default
    ]


def _unwrapped(net):
    """A skorch net's module, unwrapped from any data-parallel wrapper."""
    return net._network() if hasattr(net, "_network") else net.module_


def _decoupled_weight_decay(net):
    """The largest decoupled (AdamW) weight decay of ``net``'s optimizer, 0
    for none or for another optimizer (Adam's weight_decay is an L2 term of
    the gradient, which its step normalises)."""
    optimizer = getattr(net, "optimizer_", None)
    if not isinstance(optimizer, torch.optim.AdamW):
        return 0.0
    return max(
        (group.get("weight_decay", 0.0) for group in optimizer.param_groups),
        default=0.0,
    )


def _divergence_check(net):
    """``net``'s DivergenceCheck (for its estimator name and remedy), or a
    default one."""
    for _, callback in getattr(net, "callbacks_", ()):
        if isinstance(callback, DivergenceCheck):
            return callback
    return DivergenceCheck()


class ValidRoutingAccuracy(Callback):
    """Record ``valid_routing_accuracy`` each epoch: routing accuracy of the
    current network on the held-out queries that at least two models answered,
    with each model embedded from its training rows.

    The embeddings come from skorch's validation pass (:class:`LocusNet`
    passes each validation batch's embeddings to ``on_batch_end``); an epoch
    without one embeds the validation episodes here.

    Parameters
    ----------
    valid_episodes : FixedEpisodes
    n_models : int
    batch_size : int
    bank : Tensor of shape (n_queries, F)
        Encodings of the training queries.
    """

    def __init__(self, valid_episodes, n_models, batch_size, bank):
        self.valid_episodes = valid_episodes
        self.n_models = n_models
        self.batch_size = batch_size
        self.bank = bank

    def initialize(self):
        items = self.valid_episodes.items
        dec_q = torch.cat([e[2] for e, _ in items]) if items else torch.empty(0)
        self.queries_, inverse = torch.unique(dec_q, return_inverse=True)
        y_true = np.full((len(self.queries_), self.n_models), np.nan)
        offset = 0
        for (_, _, qd, yd), m in items:
            y_true[inverse[offset : offset + len(qd)].numpy(), m] = yd.numpy()
            offset += len(qd)
        self.keep_ = (~np.isnan(y_true)).sum(axis=1) >= 2
        self.y_true_ = y_true[self.keep_]
        self.seen_ = []
        return self

    def _evaluations(self, device):
        """Every model's encoder rows, for the kernel readout."""
        sets = [(torch.empty(0, dtype=torch.long), torch.empty(0))] * self.n_models
        for (qe, ye, _, _), m in self.valid_episodes.items:
            sets[m] = (qe, ye)
        indptr = np.concatenate([[0], np.cumsum([len(q) for q, _ in sets])])
        index = torch.cat([q for q, _ in sets]).to(device)
        score = torch.cat([y for _, y in sets]).to(device)
        return EvaluationSets(self.bank.to(device), index, score, indptr)

    def on_epoch_begin(self, net, **kwargs):
        self.seen_ = []

    def on_batch_end(self, net, training=False, embedding=None, **kwargs):
        if not training and embedding is not None:
            self.seen_.append(embedding)

    def _embed(self, net, items, seen):
        """Embeddings of the validation episodes, shape (len(items), d): those
        ``seen`` in the validation pass, or computed here."""
        if sum(len(z) for z in seen) == len(items):
            return torch.cat(seen)
        bank = self.bank.to(net.device)
        chunks = []
        for start in range(0, len(items), self.batch_size):
            X, _ = collate_episodes(items[start : start + self.batch_size])
            X = gather_queries(bank, to_tensor(X, device=net.device))
            chunks.append(
                net._network().embed(
                    X["features"], X["enc_index"], X["enc_score"], X["enc_mask"]
                )
            )
        return torch.cat(chunks)

    def on_epoch_end(self, net, **kwargs):
        seen, self.seen_ = self.seen_, []
        if not self.keep_.any():
            return
        module = net._network()
        was_training = module.training
        module.eval()
        items = self.valid_episodes.items
        device = net.device
        models = torch.tensor([m for _, m in items], device=device)
        with torch.inference_mode():
            z_items = self._embed(net, items, seen)
            z = z_items.new_zeros(self.n_models, z_items.shape[1])
            z[models] = z_items
            queries = self.bank[self.queries_[torch.as_tensor(self.keep_)]].to(device)
            logits = module.pairwise_logits(z, queries, self._evaluations(device))
        module.train(was_training)
        if bool(torch.isnan(logits).any() | torch.isposinf(logits).any()):
            # The weights and validation loss were finite (DivergenceCheck
            # runs first), but the pairwise pass overflowed: the routing
            # metric's own error would name only its y_score.
            raise _divergence_check(net).diverged(
                net, "the validation logits became NaN or +inf"
            )
        # Models with no held-out rows keep a zero z; they never count, since
        # routing only ranks the models observed on each query.
        accuracy = routing_accuracy(self.y_true_, logits.cpu().numpy())
        net.history.record("valid_routing_accuracy", net._mean_over_processes(accuracy))


def progress_sink(text):
    """Where the epoch table goes: standard error (standard output carries
    results), without colour codes unless standard error is a terminal and
    NO_COLOR is unset or empty (https://no-color.org).

    Dropped where there is no standard error (``sys.stderr`` is None under
    pythonw or with file descriptor 2 closed), as ``print`` drops it; a
    stream with no working ``isatty`` (a write-only object that forwards to
    logging) is no terminal. Either way the fit goes on.
    """
    stream = sys.stderr
    if stream is None:
        return
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError, OSError):
        # Missing or failing (closed, broken descriptor): no terminal, and
        # print needs only write().
        tty = False
    if os.environ.get("NO_COLOR") or not tty:
        text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    print(text, file=stream)


def finished_epochs(net):
    """Epochs ``net`` (a fitted skorch net) trained to their end: after a
    Ctrl-C skorch keeps the epoch cut short in its history, a row with no
    ``train_loss``, which is not counted."""
    return sum("train_loss" in row for row in net.history)


def progress_params(verbose):
    """skorch parameters that send the epoch table to :func:`progress_sink`."""
    # skorch calls any sink but print even when verbose=0: set it only when used.
    return {"callbacks__print_log__sink": progress_sink} if verbose else {}


class LocusNet(NeuralNet):
    """skorch's NeuralNet for LOCUS episodes.

    Batches carry query indices; ``query_bank_`` (the training queries'
    encodings, shape (n_queries, F), set only while training) supplies the
    encodings (:func:`gather_queries`), so that no batch copies them. The
    validation step also hands each batch's model embeddings to the
    callbacks (``on_batch_end(..., embedding=z)``), so
    :class:`ValidRoutingAccuracy` need not embed the validation sets again.
    """

    query_bank_ = None

    def __init__(self, *args, profile_weight=0.0, agreement_weight=0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.profile_weight = profile_weight
        self.agreement_weight = agreement_weight

    def _network(self):
        """The LocusNetwork, unwrapped from any data-parallel wrapper."""
        return self.module_

    def _mean_over_processes(self, value):
        """A score's mean over the training processes (one process here)."""
        return value

    def _inputs(self, x):
        if self.query_bank_ is None:
            raise RuntimeError("LocusNet trains only with query_bank_ set.")
        return gather_queries(self.query_bank_, to_tensor(x, device=self.device))

    def infer(self, x, **fit_params):
        """(logits, embeddings) of a batch."""
        return self.module_(**self._inputs(x), return_embedding=True, **fit_params)

    def get_loss(self, y_pred, y_true, X=None, training=False):
        """BCE of the logits, plus ``profile_weight`` times the profile head's
        BCE against each episode's mean score per region (weighted by rows),
        plus, in training steps, ``agreement_weight`` times the agreement
        term of the batch's embeddings (:mod:`._agreement`; validation loss
        and early stopping read the other terms only)."""
        logits, z = y_pred
        loss = super().get_loss(logits, y_true, X=X, training=training)
        profile = self._network().profile
        if profile is not None and self.profile_weight and "profile" in X:
            target = to_tensor(X["profile"], device=self.device)
            count = to_tensor(X["profile_count"], device=self.device)
            fit = torch.nn.functional.binary_cross_entropy_with_logits(
                profile(z), target, weight=count, reduction="sum"
            ) / count.sum().clamp(min=1)
            loss = loss + self.profile_weight * fit
        if training and self.agreement_weight and len(z) > 1:
            y_true = to_tensor(y_true, device=z.device)
            term = agreement_stress(z, X, y_true, len(self.query_bank_))
            loss = loss + self.agreement_weight * term
        return loss

    def validation_step(self, batch, **fit_params):
        self._set_training(False)
        Xi, yi = unpack_data(batch)
        with torch.no_grad():
            y_pred = self.infer(Xi, **fit_params)
            loss = self.get_loss(y_pred, yi, X=Xi, training=False)
        return {"loss": loss, "y_pred": y_pred[0], "embedding": y_pred[1]}


def _has_fused_adamw(device_type):
    """Whether this torch has AdamW's fused kernel for ``device_type``: CUDA
    since torch 2.0, CPU since 2.4 (the package supports torch 2.2)."""
    if device_type == "cuda":
        return True
    return device_type == "cpu" and torch.__version__ >= "2.4"


def build_net(
    params, n_features, *, device, valid_dataset=None, callbacks=(), verbose=0,
    profile_region=None, accelerator=None,
):  # fmt: skip
    """The skorch net for ``params`` (the estimator's hyper-parameters).

    Parameters
    ----------
    params : mapping
        Hyper-parameters named as :class:`~._embedder.LocusEmbedder`'s.
    n_features : int
        Dimension of the query encodings.
    device : str or torch.device
    valid_dataset : FixedEpisodes, default=None
    callbacks : sequence of (name, Callback), default=()
    verbose : int, default=0
    profile_region : LongTensor of shape (n_queries,), default=None
        Region of each training query, for the profile head's targets.
    accelerator : accelerate.Accelerator, default=None
        Train data-parallel (:mod:`._distributed`); ``device`` is then ignored.

    Returns
    -------
    net : LocusNet
        Not initialised.
    """
    params = python_scalars(params)
    net_class = LocusNet
    extra = {"device": device, "verbose": verbose, **progress_params(verbose)}
    if accelerator is not None:
        # Imported here: _distributed builds on LocusNet.
        from ._distributed import AcceleratedLocusNet, accelerated_net_kwargs

        net_class = AcceleratedLocusNet
        extra = accelerated_net_kwargs(accelerator, verbose)
        device = extra["device"]
    if _has_fused_adamw(torch.device(device).type):
        # AdamW's fused kernel: the same update in one pass over the
        # parameters (about 2 ms a step on a CPU, where the default loop
        # over parameter tensors took 9).
        extra["optimizer__fused"] = True
    profile = None
    if params["n_profile_regions"] and profile_region is not None:
        profile = (profile_region, params["n_profile_regions"])
    return net_class(
        module=LocusNetwork,
        module__n_features=n_features,
        **{f"module__{name}": params[name] for name in NETWORK_PARAMS},
        criterion=MaskedBCEWithLogitsLoss,
        optimizer=torch.optim.AdamW,
        # The real-valued settings as floats: an int that passed the Real
        # constraints (10**30) overflows torch's int64 conversion.
        optimizer__weight_decay=float(params["weight_decay"]),
        lr=float(params["lr"]),
        max_epochs=params["max_epochs"],
        batch_size=params["batch_size"],
        iterator_train__shuffle=True,
        iterator_train__collate_fn=EpisodeCollator(
            params["enc_size"], params["dec_size"], params["disjoint"], profile
        ),
        iterator_valid__collate_fn=functools.partial(
            collate_episodes, profile_regions=profile
        ),
        profile_weight=float(params["profile_weight"]),
        agreement_weight=float(params["agreement_weight"]),
        train_split=predefined_split(valid_dataset) if valid_dataset else None,
        callbacks=list(callbacks),
        **extra,
    )


def _callbacks(params, valid_ds, n_models, bank):
    # Imported here: _embedder builds on this module.
    from ._embedder import LocusEmbedder

    # The noise on the inputs and the weights of the extra loss terms scale
    # the loss (the profile weight only where there is a profile head).
    scales = ["query_noise", "agreement_weight"]
    if params["n_profile_regions"]:
        scales.append("profile_weight")
    remedies = raised_settings(LocusEmbedder, params, scales)
    # Clipping is on by default: the advice then is to clip harder.
    clip = params["gradient_clip"]
    remedies.append(
        "set gradient_clip" if clip is None else f"lower gradient_clip (now {clip})"
    )
    callbacks = [("divergence", DivergenceCheck(remedy=" or ".join(remedies)))]
    if clip is not None:
        callbacks.append(("clip", GradientNormClipping(float(clip))))
    if valid_ds is None:
        return callbacks
    valid_routing = ValidRoutingAccuracy(valid_ds, n_models, params["batch_size"], bank)
    callbacks.append(("valid_routing", valid_routing))
    monitor = params["early_stopping"]
    if (
        monitor == "valid_routing_accuracy"
        and not valid_routing.initialize().keep_.any()
    ):
        # The callback records nothing then, and EarlyStopping would fail at
        # the end of the first epoch on a key missing from the history.
        raise ValueError(
            "early_stopping='valid_routing_accuracy' ranks the models on held-out "
            "queries that two or more of them answered, but each of the "
            f"{len(valid_routing.queries_)} queries with held-out rows "
            f"(validation_fraction={params['validation_fraction']}) has rows of one "
            "model only, so routing accuracy cannot be measured; use "
            "early_stopping='valid_loss' (or None)."
        )
    if monitor is not None:
        callbacks.append(
            (
                "early_stopping",
                MarkedEarlyStopping(
                    monitor=monitor,
                    lower_is_better=MONITORS[monitor],
                    patience=params["patience"],
                    threshold=EARLY_STOPPING_THRESHOLD,
                    load_best=True,
                ),
            )
        )
    return callbacks


def _regions(X_query, n_regions, seed):
    """k-means regions of the query encodings, LongTensor of shape (n_queries,).

    At most one region per distinct encoding: queries may share encodings
    (SharedEncodingsWarning), and k-means asked for more clusters than
    distinct points warns (ConvergenceWarning) about an ``n_clusters`` the
    user never set. Pools of distinct encodings get ``n_regions`` as before.
    """
    n_regions = min(n_regions, len(np.unique(X_query, axis=0)))
    labels = KMeans(n_regions, n_init=1, random_state=seed).fit_predict(X_query)
    return torch.as_tensor(labels, dtype=torch.long)


def fit_network(params, table, X_query, *, rng, device, verbose=0, accelerator=None):
    """Train a LOCUS network on a table of scored evaluations.

    Parameters
    ----------
    params : mapping
        Hyper-parameters named as :class:`~._embedder.LocusEmbedder`'s.
    table : EvalTable
        Every model has at least two rows.
    X_query : ndarray of shape (table.n_queries, n_features)
        Encodings of ``table.queries``.
    rng : numpy.random.RandomState
        Draws the validation split, the torch seed and the validation subsets.
    device : str or torch.device
    verbose : int, default=0
    accelerator : accelerate.Accelerator, default=None
        Train data-parallel over the accelerator's processes; ``rng`` must
        then draw the same on every process. With more than one, a ValueError
        refuses ``standardize_embedding=True`` (see
        :func:`~._distributed.check_accelerated_params`).

    Returns
    -------
    net : LocusNet
        Trained in float32 (whatever torch's default dtype), in evaluation
        mode, holding no training encodings.
    """
    if accelerator is not None:
        # Before any work: every process refuses alike, none waits alone.
        from ._distributed import check_accelerated_params

        check_accelerated_params(accelerator, params)
    # Training needs gradients and float32, whatever the caller's context
    # (inference mode, no_grad, a float64 default dtype, autocast).
    with trainable_torch(device):
        return _fit_network(
            python_scalars(params), table, X_query, rng=rng, device=device,
            verbose=verbose, accelerator=accelerator,
        )  # fmt: skip


def _fit_network(params, table, X_query, *, rng, device, verbose, accelerator):
    """:func:`fit_network`, in its training context."""
    seed = int(rng.randint(np.iinfo(np.int32).max))
    is_valid = split_rows_by_query(table, params["validation_fraction"], rng)
    _warn_if_no_validation(params, table, is_valid)
    bank = torch.as_tensor(X_query, dtype=torch.float32)
    train_q, train_y = _per_model(table, ~is_valid)
    passes = -(-params["episodes_per_epoch"] // table.n_models)  # ceil
    query_region = profile_region = None
    if params["mix_prob"] > 0:
        query_region = _regions(X_query, params["n_regions"], seed)
    if params["n_profile_regions"]:
        profile_region = _regions(X_query, params["n_profile_regions"], seed)
    train_ds = RandomEpisodes(
        train_q,
        train_y,
        np.tile(np.arange(table.n_models), passes),
        mix_prob=params["mix_prob"],
        query_region=query_region,
    )
    valid_ds = None
    if is_valid.any():
        valid_q, valid_y = _per_model(table, is_valid)
        valid_ds = FixedEpisodes(
            train_q, train_y, valid_q, valid_y, rng, max_enc=params["enc_size"][1]
        )
    callbacks = _callbacks(params, valid_ds, table.n_models, bank)
    net = build_net(
        params,
        X_query.shape[1],
        device=device,
        valid_dataset=valid_ds,
        callbacks=callbacks,
        verbose=verbose,
        profile_region=profile_region,
        accelerator=accelerator,
    )
    with seeded_rng(seed, device):
        net.initialize()
        net.query_bank_ = bank.to(net.device)
        net.partial_fit(train_ds, y=None)
    # Do not keep (or pickle) the training encodings, nor early stopping's
    # copy of the best weights: it is read only at the end of training
    # (restored by then), and would double the network's memory. Each fit
    # builds a new net, so no later training reads it either.
    net.query_bank_ = None
    for _, callback in net.callbacks_:
        if isinstance(callback, ValidRoutingAccuracy):
            callback.bank = None
        if isinstance(callback, EarlyStopping):
            callback.best_model_weights_ = None
    net.module_.eval()
    return net


def embed_models(module, table, X_query, *, batch_tokens, bfloat16=False):
    """Embed every model of ``table`` from all of its rows, in batches.

    Parameters
    ----------
    module : LocusNetwork
    table : EvalTable
    X_query : ndarray of shape (table.n_queries, n_features)
    batch_tokens : int
        Most evaluation tokens per forward pass (bounds memory).
    bfloat16 : bool, default=False
        Run the encoder in bfloat16: on a bfloat16 copy of its weights, so
        that every step (not only the matrix products, as under autocast)
        reads and writes half the bytes.

    Returns
    -------
    embeddings : ndarray of float32, shape (table.n_models, embedding_dim)
    """
    module.eval()
    device = next(module.parameters()).device
    features = torch.as_tensor(writable(X_query), dtype=torch.float32, device=device)
    if bfloat16:
        module = copy.deepcopy(module).to(torch.bfloat16)
        features = features.to(torch.bfloat16)
    indptr = table.indptr
    counts = np.diff(indptr)
    query_index = torch.as_tensor(writable(table.query_index), device=device)
    score = torch.as_tensor(writable(table.score), dtype=torch.float32, device=device)
    out = np.empty((table.n_models, module.embedding_dim), dtype=np.float32)
    # bfloat16 only where asked: a caller's autocast would also switch the
    # encoder to its autocast path.
    with torch.inference_mode(), full_precision(device.type):
        # Every batch gathers its tokens from the same features: compute the
        # per-query tables once, not once per batch (each projection of all U
        # rows cost about a sixth of a 16k-token batch's encoder pass). They
        # hold 6d numbers per query (3 KiB at d = 128 in float32).
        tables = module.inference_tables(features)
        for chunk in size_batches(counts, batch_tokens):
            rows, mask = (
                torch.as_tensor(a, device=device) for a in padded_rows(indptr, chunk)
            )
            # Gradients are off: the encoder takes its streamed inference path.
            z = module.embed(features, query_index[rows], score[rows], mask, tables)
            out[chunk] = z.float().cpu().numpy()
    return out


def padded_rows(indptr, models):
    """Row indices of ``models``' evaluations, padded to the widest model.

    Parameters
    ----------
    indptr : ndarray of int, shape (n_models + 1,)
        Model m's rows are ``indptr[m]:indptr[m + 1]`` (an EvalTable's).
    models : ndarray of int, shape (B,)

    Returns
    -------
    rows : ndarray of int, shape (B, N)
        Row 0 at padding.
    mask : ndarray of bool, shape (B, N)
        True for real rows.

    Examples
    --------
    >>> rows, mask = padded_rows(np.array([0, 3, 4]), np.array([1, 0]))
    >>> rows.tolist(), mask.tolist()
    ([[3, 0, 0], [0, 1, 2]], [[True, False, False], [True, True, True]])
    """
    starts = indptr[:-1][models]
    counts = np.diff(indptr)[models]
    positions = np.arange(int(counts.max()))
    mask = positions[None, :] < counts[:, None]
    return np.where(mask, starts[:, None] + positions, 0), mask


def size_batches(counts, batch_tokens):
    """Batches of models (index arrays) of at most ``batch_tokens`` padded
    rows each, from models of similar size, so that little compute goes to
    padding; a model with more rows gets a batch of its own.

    Parameters
    ----------
    counts : ndarray of int, shape (n_models,)
        Each model's rows.
    batch_tokens : int

    Yields
    ------
    models : ndarray of int
        Indices into ``counts``, in ascending size: the last sets the width.

    Examples
    --------
    >>> [b.tolist() for b in size_batches(np.array([5, 1, 2, 2]), 4)]
    [[1, 2], [3], [0]]
    """
    order = np.argsort(counts, kind="stable")
    start = 0
    while start < len(order):
        stop = start + 1
        while (
            stop < len(order)
            and (stop + 1 - start) * counts[order[stop]] <= batch_tokens
        ):
            stop += 1
        yield order[start:stop]
        start = stop


def evaluation_sets(X_table, table, device):
    """:class:`~._readout.EvaluationSets` of a table and its query encodings."""
    return EvaluationSets(
        torch.as_tensor(writable(X_table), dtype=torch.float32, device=device),
        torch.as_tensor(writable(table.query_index), device=device),
        torch.as_tensor(writable(table.score), dtype=torch.float32, device=device),
        table.indptr,
    )


def readout_pool(module, X_table, table):
    """The :class:`~._readout.ReadoutPool` of a table, on ``module``'s device: what
    the kernel readout reads from the pool, built once for many predictions."""
    device = next(module.parameters()).device
    with torch.inference_mode(), full_precision(device.type):
        return ReadoutPool(evaluation_sets(X_table, table, device))


def predict_proba(
    module, embeddings, X_query, evaluations=None, *, readout_neighbors=None,
    readout_index="exact", readout_dtype="float32",
):  # fmt: skip
    """P(correct) of every (query, model) pair.

    Parameters
    ----------
    module : LocusNetwork
    embeddings : ndarray of shape (n_models, embedding_dim)
    X_query : ndarray of shape (n_queries, n_features)
    evaluations : tuple of (ndarray, EvalTable) or ReadoutPool, default=None
        The models' evaluations and the encodings of their queries (or their
        :func:`readout_pool`), for a network with the kernel readout.
    readout_neighbors : int or None, default=None
    readout_index : {"exact", "hnsw"}, default="exact"
    readout_dtype : {"float32", "bfloat16"}, default="float32"
        The readout's approximations; see :class:`~._embedder.LocusEmbedder`.

    Returns
    -------
    proba : ndarray of float32, shape (n_queries, n_models)
    """
    module.eval()
    device = next(module.parameters()).device
    queries = torch.as_tensor(writable(X_query), dtype=torch.float32, device=device)
    # float32 whatever a caller's autocast says (inference_dtype is the
    # package's own switch); the readout's reductions need it.
    with torch.inference_mode(), full_precision(device.type):
        if evaluations is not None and not isinstance(evaluations, ReadoutPool):
            evaluations = readout_pool(module, *evaluations)
        logits = module.pairwise_logits(
            torch.as_tensor(writable(embeddings), device=device),
            queries,
            evaluations,
            readout_neighbors=readout_neighbors,
            readout_index=readout_index,
            readout_dtype=getattr(torch, readout_dtype),
        )
        return torch.sigmoid(logits).cpu().numpy()
