"""The kernel readout: what a model did on stored queries near a new one.

Plain PyTorch, like :mod:`._nn`, whose :class:`~._nn.LocusNetwork` uses it as
an optional input of the correctness predictor.

- :class:`KernelReadout`: kernel regression of a model's scores at a query,
  with a learned bandwidth, per training episode and for every (query, model)
  pair of a pool.
- :class:`EvaluationSets`: the scored evaluations of M models, laid out for
  the readout.
- :class:`ReadoutPool`: what the readout reads from a pool, built once per
  pool (used bank merged, counts and score sums as one dense or sparse matrix,
  optional nearest-neighbour search).
"""

from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ._warnings import FILTERS_LOCK, ignoring

__all__ = ["EvaluationSets", "KernelReadout", "ReadoutPool"]


def import_hnswlib():
    """hnswlib, which ``readout_index="hnsw"`` needs; an ImportError that says
    how to install it where it is missing."""
    try:
        import hnswlib
    except ImportError as error:
        raise ImportError(
            "readout_index='hnsw' needs hnswlib: pip install "
            "'locus-sklearn[ann]' (or hnswlib)."
        ) from error
    return hnswlib


_csr_beta_quieted = False


def _quiet_csr_beta_warning():
    """Spend torch's "Sparse CSR tensor support is in beta" warning, quietly.

    torch gives it once per process, at the first CSR tensor it builds (a
    ``TORCH_WARN_ONCE``), so one tiny conversion, under a narrow filter and
    once, keeps it from every later one: the conversions on the predict path
    then need no filter of their own. Changing the process-wide filters on
    every call would not be thread-safe (see :data:`._warnings.FILTERS_LOCK`).
    """
    global _csr_beta_quieted
    if _csr_beta_quieted:
        return
    with FILTERS_LOCK:
        if _csr_beta_quieted:  # another thread spent it while this one waited
            return
        with ignoring(
            {"message": "Sparse CSR tensor support is in beta", "category": UserWarning}
        ):
            torch.zeros(1, 1).to_sparse_csr()
        _csr_beta_quieted = True


# Most (U, q) weights of one chunk that a sparse pool's product reads in place
# (16 MB in float32): past that they outgrow the cache and are read in blocks.
_TRANSPOSED_WEIGHTS = 2**22


def _float32_weights(tau):
    """Whether the kernel weights exp((cos − 1) / τ) fit float32 as they are:
    their smallest, exp(−2/τ), well inside the normal floats (from about
    exp(−87)), so that no model's weights underflow to an empty set.

    Written as τ > 2/60 rather than 2/τ < 60: a bandwidth that underflowed to
    0 (or is NaN) after a diverged step answers False here instead of raising
    ZeroDivisionError, so that the divergence check can name the cause."""
    return tau > 2 / 60


def _offset(similarity):
    """``cos − 1``, clamped at 0: the kernel weight's exponent times τ.

    A float32 cosine of two equal directions can round to about 1 + 1e-7;
    unclamped, its weight exp((cos − 1) / τ) would exceed 1 (the exact
    weight of a duplicate), by a factor that grows without bound as τ
    narrows (e^0.1 at τ = 1e-6, e^1000 at 1e-10: one duplicate then
    outweighs its equals instead of tying with them, and +inf minus +inf
    gives NaN in the log-sum-exp)."""
    return (similarity - 1).clamp_max(0)


def _readout_and_evidence(mass, total):
    """The readout's two features from the kernel weights' sum ``mass`` and
    their score-weighted sum ``total`` (same shapes): ``2 r − 1`` with
    ``r = total / mass``, and the evidence ``log(1 + mass)``. A model with no
    weight reads a neutral 0.5 with zero evidence, with no 0 / 0 whose NaN
    would reach a gradient through the unused branch."""
    has_mass = mass > 0
    readout = torch.where(has_mass, total / torch.where(has_mass, mass, 1), 0.5)
    return 2 * readout - 1, torch.log1p(mass)


class _KernelSums(torch.autograd.Function):
    """``exp(offset / τ) @ values`` for a scalar τ, the only input with a
    gradient: (B, M, N) offsets, (B, N, k) values -> (B, M, k).

    Autograd through the plain expression keeps the (B, M, N) weights and
    walks them again in the backward pass with five elementwise kernels and
    an outer product (with the forward, about a sixth of a training step on
    a CPU). The derivative in τ,
    ``−(offset · exp(offset / τ)) @ values / τ²``, is a (B, M, k) tensor:
    computed here while the weights are at hand, only it is kept.
    """

    @staticmethod
    def forward(ctx, tau, offset, values):
        weights = torch.exp(offset / tau)
        sums = weights @ values
        if ctx.needs_input_grad[0]:
            slope = (weights.mul_(offset) @ values).div_(-(tau * tau))
            ctx.save_for_backward(slope)
        return sums

    @staticmethod
    def backward(ctx, grad):
        (slope,) = ctx.saved_tensors
        return (grad * slope).sum(), None, None


class KernelReadout(nn.Module):
    """What kNN knows: kernel regression of a model's scores at a query.

    From a model's evaluation set {(φ(x_i), y_i)}, the readout at query x is
    ``r = Σ w_i y_i / Σ w_i`` with ``w_i = exp((cos(φ(x), φ(x_i)) − 1) / τ)``
    and a learned bandwidth τ (cos − 1 clamped at 0: a float32 cosine can
    round above 1), and the evidence ``log(1 + Σ w_i)``. Both are
    features of the predictor, next to the embedding: the embedding carries
    what a model is like, the readout what it did on similar queries.

    Parameters
    ----------
    bandwidth : float, default=0.1
        Initial τ.
    """

    n_outputs = 2

    def __init__(self, bandwidth=0.1):
        super().__init__()
        self.log_bandwidth = nn.Parameter(torch.tensor(float(bandwidth)).log())

    def _features(self, similarity, score, mask):
        logits = _offset(similarity) / self.log_bandwidth.exp()
        logits = logits.masked_fill(~mask, float("-inf"))
        mass = torch.logsumexp(logits, dim=-1, keepdim=True)
        weights = torch.exp(logits - mass).nan_to_num(0.0)  # empty sets: all -inf
        # No evaluations: a neutral 0.5 with zero evidence.
        readout = torch.where(
            torch.isfinite(mass.squeeze(-1)), (weights * score).sum(-1), 0.5
        )
        evidence = F.softplus(mass.squeeze(-1))  # log(1 + Σ w), without overflow
        return torch.stack([2 * readout - 1, evidence], dim=-1)

    def forward(self, query_features, set_features, set_score, set_mask):
        """Readout features of shape (B, M, 2).

        Parameters
        ----------
        query_features : Tensor of shape (B, M, F)
        set_features : Tensor of shape (B, N, F)
        set_score : Tensor of shape (B, N)
        set_mask : BoolTensor of shape (B, N)
        """
        # Cosine, also for the noisy encodings seen in training.
        similarity = F.normalize(query_features, dim=-1) @ F.normalize(
            set_features, dim=-1
        ).transpose(1, 2)
        return self._episode_features(similarity, set_score, set_mask)

    def episodes(self, features, query_index, set_index, set_score, set_mask):
        """:meth:`forward` for episodes whose queries index one feature matrix.

        Each of the U feature rows is normalised once and then gathered,
        rather than every gathered copy (B·(M + N) rows) normalised.

        Parameters
        ----------
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, M)
        set_index : LongTensor of shape (B, N)
        set_score : Tensor of shape (B, N)
        set_mask : BoolTensor of shape (B, N)

        Returns
        -------
        Tensor of shape (B, M, 2)
        """
        unit = F.normalize(features, dim=-1)
        similarity = unit[query_index] @ unit[set_index].transpose(1, 2)
        return self._episode_features(similarity, set_score, set_mask)

    def _episode_features(self, similarity, score, mask):
        """Readout features (B, M, 2) from cosines (B, M, N) to a set.

        The weights themselves, ``exp((cos − 1) / τ)`` in [exp(−2/τ), 1], are
        summed directly (one exp and one product with [1, y] per evaluation)
        while exp(−2/τ) is well inside float32's normal range, as in
        :meth:`pairwise_pool`; narrower bandwidths go through the
        log-sum-exp of :meth:`_features`. Padding weighs 0.
        """
        tau = self.log_bandwidth.exp()
        if not _float32_weights(float(tau.detach())):
            return self._features(similarity, score.unsqueeze(1), mask.unsqueeze(1))
        # Both sums in one product with the values [1, y], zero on padding:
        # no masked copy of the (B, M, N) weights.
        dtype = similarity.dtype
        values = torch.stack(
            [mask.to(dtype), torch.where(mask, score, 0).to(dtype)], -1
        )
        offset = _offset(similarity)
        if similarity.requires_grad:
            sums = (offset / tau).exp() @ values
        else:
            sums = _KernelSums.apply(tau, offset, values)
        mass, total = sums.unbind(-1)  # (B, M) each
        return torch.stack(_readout_and_evidence(mass, total), dim=-1)

    def pairwise(self, queries, bank, set_index, set_score, indptr, query_chunk=256):
        """Readout features for every (query, model) pair, shape (Q, M, 2).

        Builds the pool's :class:`ReadoutPool` and calls :meth:`pairwise_pool`;
        to score many query batches against one pool, build the pool once.

        Parameters
        ----------
        queries : Tensor of shape (Q, F)
        bank : Tensor of shape (U, F)
            Encodings of the queries the models were evaluated on.
        set_index : LongTensor of shape (R,)
            Row -> index into ``bank``; models' rows one after another.
        set_score : Tensor of shape (R,)
        indptr : sequence of int, length M + 1
            Model ``m`` owns rows ``indptr[m]:indptr[m + 1]``.
        query_chunk : int, default=256
            Queries per chunk, bounding memory to Q_chunk·U floats.
        """
        pool = ReadoutPool(EvaluationSets(bank, set_index, set_score, indptr))
        return self.pairwise_pool(queries, pool, query_chunk=query_chunk)

    def pairwise_pool(
        self, queries, pool, query_chunk=256, neighbors=None, index="exact",
        similarity_dtype=torch.float32,
    ):  # fmt: skip
        """Readout features of every (query, model) pair of a prepared pool.

        The kernel weight of an evaluation depends only on its query, so the
        weighted sums over each model's evaluations are one matrix product:
        the weights of the used bank queries against each query (U, Q) times
        the pool's counts and score sums per bank query (2M, U) — dense, or
        sparse when the pool is (:class:`ReadoutPool`). The weights are
        ``exp((cos − 1) / τ)`` themselves, in [exp(−2/τ), 1]: float32 while
        exp(−2/τ) is far from float32's smallest normal number, float64 for
        narrower bandwidths. Below τ = 0.003, where even float64 underflows,
        each model's weights are taken relative to its largest (a per-model
        log-sum-exp), summed over the pool's stored
        cells (counts and nonzero score sums, C ≤ 2R) in steps of about 2**20
        (query, cell) pairs. No (Q, R) matrix of evaluations is formed:
        memory is Q_chunk·U floats, or below τ = 0.003 about
        max(2**20, C) (query, cell) pairs, plus the pool.

        Parameters
        ----------
        queries : Tensor of shape (Q, F)
        pool : ReadoutPool
        query_chunk : int, default=256
            Most queries per chunk; fewer when U is large, so that the
            (U, Q_chunk) weights, with the similarities they are made from
            where those are in another dtype, stay within 32 MB (and below
            τ = 0.003, so that a chunk gathers about 2**20 cells).
        neighbors : int or None, default=None
            An approximation: only the ``neighbors`` bank queries nearest each
            query (by cosine) enter its readout; a model with no evaluation
            among them reads 0.5 with zero evidence. None reads every stored
            evaluation (exact). Below τ = 0.003 the neighbours' weights go
            through each model's log-sum-exp too.
        index : {"exact", "hnsw"}, default="exact"
            How the nearest bank queries are found: every similarity and a
            top-k, or the pool's hnswlib graph (:meth:`ReadoutPool.nearest`;
            approximate, and faster when U is large).
        similarity_dtype : torch.dtype, default=torch.float32
            Precision of the (U, F) x (F, Q) similarity product, the largest,
            also where ``neighbors`` are chosen by it (``index="exact"``:
            near ties may then swap; hnswlib searches in float32);
            ``torch.bfloat16`` is an approximation (cosines to about 1e-2)
            for hardware with bfloat16 matrix units. Weights and sums stay
            float32 or float64.
        """
        tau = float(self.log_bandwidth.detach().exp())
        n_models = pool.n_models
        out = queries.new_zeros(queries.shape[0], n_models, self.n_outputs)
        if pool.n_rows == 0:  # no evaluations: readout 0.5, evidence 0
            return out
        dtype = torch.float32 if _float32_weights(tau) else torch.float64
        bank = pool.bank  # (U, F), unit rows
        unit = F.normalize(queries.to(bank.dtype), dim=-1)
        # Below τ = 0.003 exp((cos − 1) / τ) underflows even float64 for
        # distant queries (a model with only those would read 0.5 with no
        # evidence): each (query, model)'s weights are taken relative to its
        # largest, a log-sum-exp.
        narrow = tau < 0.003
        if narrow and neighbors is None:
            # Every bank query is a neighbour; chunked so that a step gathers
            # about 2**20 cells (several 8-byte arrays of them, about 40 MB).
            bank = pool.bank_in(similarity_dtype)
            step = max(1, min(query_chunk, 2**20 // max(1, pool.n_cells())))
            for start in range(0, queries.shape[0], step):
                part = slice(start, start + step)
                similarity = unit[part].to(similarity_dtype) @ bank.T
                logits = _offset(similarity.to(dtype)) / tau
                sums, peak = pool.gather(None, logits, log=True)
                self._readout(sums, pool, out[part], peak)
            return out
        if neighbors is not None:
            similarity, nearest = pool.nearest(
                unit, neighbors, index, dtype=similarity_dtype
            )
            logits = _offset(similarity.to(dtype)) / tau
            weights = logits if narrow else logits.exp_()
            # About 4M gathered cells per step.
            per_query = nearest.shape[1] * max(1, 2 * pool.n_rows // len(bank))
            step = max(1, 2**22 // per_query)
            for start in range(0, queries.shape[0], step):
                part = slice(start, start + step)
                if narrow:
                    sums, peak = pool.gather(nearest[part], weights[part], log=True)
                else:
                    sums, peak = pool.gather(nearest[part], weights[part]), None
                self._readout(sums, pool, out[part], peak)
            return out
        table = pool.table(dtype)  # (2M, U)
        bank = pool.bank_in(similarity_dtype)
        # Scale and shift folded into the product: (cos - 1) / tau, clamped
        # at 0 before the exponential as in _offset (a cosine rounded above 1).
        scaled = (unit * (1 / tau)).to(similarity_dtype)
        shift = torch.tensor(-1 / tau, dtype=bank.dtype, device=bank.device)
        # 32 MB of weights per chunk, and of the similarities they are
        # converted from where the dtypes differ (float64 weights: 8 + 4 bytes).
        itemsize = dtype.itemsize + (bank.dtype.itemsize if bank.dtype != dtype else 0)
        step = max(1, min(query_chunk, 2**25 // (len(bank) * itemsize)))
        # The sparse product gathers rows of its dense operand at random. Where
        # a chunk's (U, q) weights stay in cache they are formed transposed, so
        # that it reads them in place (0.6-0.8x the time at 112 models x 256
        # evaluations, TUNING.md session 42); larger ones are read in blocks of
        # about 4 MB of (q, U) weights (3x faster at 10k models than whole).
        transposed = pool.is_sparse and len(bank) * step <= _TRANSPOSED_WEIGHTS
        block = max(8, 2**20 // len(bank))
        for start in range(0, queries.shape[0], step):
            chunk = scaled[start : start + step]
            if transposed:
                weights = torch.addmm(shift, bank, chunk.T).to(dtype)  # (U, q)
                weights = weights.clamp_max_(0).exp_()
                sums = (table @ weights).T
            else:
                weights = torch.addmm(shift, chunk, bank.T).to(dtype)  # (q, U)
                weights = weights.clamp_max_(0).exp_()
                if not pool.is_sparse:
                    sums = weights @ table.T  # (q, 2M)
                else:
                    sums = torch.cat(
                        [
                            (table @ weights[j : j + block].T).T
                            for j in range(0, len(weights), block)
                        ]
                    )
            self._readout(sums, pool, out[start : start + step])
        return out

    @staticmethod
    def _readout(sums, pool, out, peak=None):
        """Write features of weighted counts|sums (q, K + M) into ``out`` (q, M, 2).

        ``peak`` (q, M), if given: the sums of model ``m`` are scaled by
        ``exp(−peak[:, m])`` (:meth:`ReadoutPool.gather` with ``log=True``).
        """
        n_counts = pool.n_count_rows
        mass, total = sums[:, :n_counts], sums[:, n_counts:]
        if pool.count_row is not None:
            mass = mass[:, pool.count_row]
        readout, evidence = _readout_and_evidence(mass, total)
        if peak is not None:
            # log(1 + Σ w) with log Σ w = peak + log(mass); a model with no
            # gathered weight has peak = log(mass) = −inf and evidence 0.
            evidence = F.softplus(peak + torch.log(mass))
        out[:, :, 0], out[:, :, 1] = readout, evidence
        return out


class EvaluationSets(NamedTuple):
    """The scored evaluations of M models, laid out for batched readouts.

    Attributes
    ----------
    bank : Tensor of shape (U, F)
        Encodings of the queries the models were evaluated on.
    index : LongTensor of shape (R,)
        Row -> index into ``bank``; the models' rows one after another.
    score : Tensor of shape (R,)
    indptr : sequence of int, length M + 1
        Model ``m`` owns rows ``indptr[m]:indptr[m + 1]``.
    """

    bank: torch.Tensor
    index: torch.Tensor
    score: torch.Tensor
    indptr: object


class ReadoutPool:
    """What :meth:`KernelReadout.pairwise_pool` reads from a pool, built once.

    Depends only on the pool's evaluations, so an estimator keeps it between
    calls and rebuilds it when the pool changes. Bank queries that no model
    was evaluated on are dropped and those with identical encodings merged
    (they weigh the same at every query, so the readout is unchanged).

    Parameters
    ----------
    evaluations : EvaluationSets
    sparse : bool or None, default=None
        Store the (2M, U) counts and sums as a sparse CSR matrix: memory and
        time in the number of evaluations rather than U·M. None chooses
        sparse when fewer than a twentieth of the cells are filled or the
        dense matrix would exceed 256 MB.

    Attributes
    ----------
    bank : Tensor of shape (U, F)
        Unit-norm encodings of the used, distinct bank queries.
    evaluations : EvaluationSets
    n_models : int
    n_rows : int
        Stored evaluations R.
    is_sparse : bool
    n_count_rows : int
        K, the distinct rows of counts (models evaluated on the same queries
        share one; dense layout only).
    count_row : LongTensor of shape (M,) or None
        Each model's row of counts; None when K = M.

    Examples
    --------
    >>> import torch
    >>> sets = EvaluationSets(torch.eye(3), torch.tensor([0, 1, 1]),
    ...                       torch.tensor([1.0, 0.0, 1.0]), [0, 2, 3])
    >>> pool = ReadoutPool(sets)
    >>> tuple(pool.bank.shape), pool.n_models
    ((2, 3), 2)
    >>> pool.table(torch.float32)  # counts of models 0 and 1, then score sums
    tensor([[1., 1.],
            [0., 1.],
            [1., 0.],
            [0., 1.]])
    """

    # Sparse below this fill of the (2M, U) matrix, or above this many bytes.
    SPARSE_DENSITY = 0.05
    DENSE_BYTES = 256 * 2**20

    def __init__(self, evaluations, sparse=None):
        bank, index, score, indptr = evaluations
        self.evaluations = evaluations
        device = bank.device
        self.n_models = n_models = len(indptr) - 1
        self.n_rows = len(index)
        sizes = torch.as_tensor(np.diff(np.asarray(indptr)), device=device)
        model = torch.repeat_interleave(torch.arange(n_models, device=device), sizes)
        used, row_bank = torch.unique(index, return_inverse=True)
        encodings = F.normalize(bank[used].float(), dim=-1)
        encodings, merged = torch.unique(encodings, dim=0, return_inverse=True)
        self.bank = encodings
        n_bank = len(encodings)
        row_bank = merged[row_bank]
        cells = torch.stack(
            [torch.cat([model, model + n_models]), torch.cat([row_bank, row_bank])]
        )
        values = torch.cat(
            [torch.ones_like(score, dtype=torch.float64), score.double()]
        )
        # Summed in float64, so duplicates add up the same in either layout.
        table = torch.sparse_coo_tensor(
            cells, values, (2 * n_models, n_bank), check_invariants=False
        ).coalesce()
        dense_bytes = 2 * n_models * n_bank * 4
        if sparse is None:
            sparse = (
                table.values().numel() < self.SPARSE_DENSITY * 2 * n_models * n_bank
                or dense_bytes > self.DENSE_BYTES
            )
        self.is_sparse = bool(sparse)
        table = table.to(torch.float32)
        if self.is_sparse:
            _quiet_csr_beta_warning()
            csr = table.to_sparse_csr()
            # int32 indices: 12 bytes per stored cell instead of 16.
            int32 = n_bank < 2**31 and csr.values().numel() < 2**31
            index_dtype = torch.int32 if int32 else torch.int64
            table = torch.sparse_csr_tensor(
                csr.crow_indices().to(index_dtype),
                csr.col_indices().to(index_dtype),
                csr.values(),
                csr.shape,
                check_invariants=False,
            )
        else:
            table = table.to_dense()
        # Models evaluated on the same queries share one row of counts (all of
        # them, when every model answered the whole bank): exact, and up to
        # half the second product saved.
        self.count_row, self.n_count_rows = None, n_models
        if not self.is_sparse and n_models > 1 and n_bank:
            counts, sums = table[:n_models], table[n_models:]
            patterns, count_row = torch.unique(counts, dim=0, return_inverse=True)
            if len(patterns) < n_models:
                table = torch.cat([patterns, sums])
                self.count_row, self.n_count_rows = count_row, len(patterns)
        self._tables = {torch.float32: table}
        self._by_bank = None  # (U, 2M) CSR arrays: neighbour and narrow readouts
        self._graph = None  # hnswlib graph of the bank
        self._banks = {}  # the bank in other dtypes

    def table(self, dtype):
        """Counts (rows 0..K-1) and score sums (rows K..K+M-1) per bank query,
        shape (K + M, U), in ``dtype``: sparse CSR when :attr:`is_sparse`.
        K = M, or fewer when models share a row of counts: model ``m``'s
        counts are row ``count_row[m]`` (None: row ``m``)."""
        if dtype not in self._tables:
            self._tables[dtype] = self._tables[torch.float32].to(dtype)
        return self._tables[dtype]

    def bank_in(self, dtype):
        """:attr:`bank` in ``dtype`` (kept once made)."""
        if dtype == self.bank.dtype:
            return self.bank
        if dtype not in self._banks:
            self._banks[dtype] = self.bank.to(dtype)
        return self._banks[dtype]

    def nearest(self, queries, k, index="exact", query_chunk=256, dtype=None):
        """The ``k`` bank queries nearest each query, by cosine.

        Parameters
        ----------
        queries : Tensor of shape (Q, F)
            Unit rows.
        k : int
            Capped at U.
        index : {"exact", "hnsw"}, default="exact"
            "exact" computes every similarity (chunked) and takes a top-k;
            "hnsw" searches an hnswlib graph of the bank (built on first use
            and kept with the pool; needs the ``ann`` extra), approximate
            but sublinear in U.
        query_chunk : int, default=256
            Most queries per product; fewer when U is large (at most 32 MB
            of similarities).
        dtype : torch.dtype or None, default=None
            Precision of the "exact" similarities and of those returned
            (None: :attr:`bank`'s float32); ``torch.bfloat16`` rounds cosines
            to about 1e-2, so near ties may swap. "hnsw" searches in float32.

        Returns
        -------
        similarity : Tensor of shape (Q, k)
        nearest : LongTensor of shape (Q, k)
            Rows of :attr:`bank`.
        """
        k = min(int(k), len(self.bank))
        if index == "hnsw":
            graph = self._hnsw(k)
            found, distance = graph.knn_query(
                queries.float().cpu().numpy(), k=k, num_threads=torch.get_num_threads()
            )
            device = self.bank.device
            nearest = torch.as_tensor(found.astype(np.int64), device=device)
            # hnswlib's inner-product distance is 1 - <q, b>.
            return 1 - torch.as_tensor(distance, device=device), nearest
        bank = self.bank if dtype is None else self.bank_in(dtype)
        queries = queries.to(bank.dtype)
        similarity, nearest = [], []
        step = max(1, min(query_chunk, 2**23 // len(self.bank)))
        for start in range(0, len(queries), step):
            values, rows = torch.topk(queries[start : start + step] @ bank.T, k, dim=1)
            similarity.append(values)
            nearest.append(rows)
        return torch.cat(similarity), torch.cat(nearest)

    # hnswlib graph settings: links per node, and candidate lists in building
    # and in search (at least k); larger is more accurate and slower.
    HNSW_M = 32
    HNSW_EF_CONSTRUCTION = 200
    HNSW_EF = 128

    def _hnsw(self, k):
        hnswlib = import_hnswlib()
        if self._graph is None:
            n_bank, n_features = self.bank.shape
            graph = hnswlib.Index(space="ip", dim=n_features)
            graph.init_index(
                max_elements=n_bank,
                ef_construction=self.HNSW_EF_CONSTRUCTION,
                M=self.HNSW_M,
                random_seed=0,
            )
            graph.add_items(
                self.bank.cpu().numpy(),
                np.arange(n_bank),
                num_threads=torch.get_num_threads(),
            )
            self._graph = graph
        self._graph.set_ef(max(self.HNSW_EF, k))
        return self._graph

    def _cells(self):
        """The (U, K + M) transpose of the float32 table as CSR arrays (row
        pointers, columns, values), built on first use and kept."""
        if self._by_bank is None:
            _quiet_csr_beta_warning()
            table = self._tables[torch.float32]
            coo = table.to_sparse_coo() if self.is_sparse else table.to_sparse()
            csr = coo.t().coalesce().to_sparse_csr()  # (U, 2M)
            self._by_bank = (
                csr.crow_indices().long(),
                csr.col_indices().long(),
                csr.values(),
            )
        return self._by_bank

    def n_cells(self):
        """Stored cells of the table C: counts, and score sums where nonzero."""
        return len(self._cells()[1])

    def gather(self, nearest, weights, log=False):
        """Weighted counts|sums of a few bank queries per query, shape (Q, K + M):
        ``out[q] = Σ_j weights[q, j] · table[:, nearest[q, j]]``, reading only
        the stored cells of those bank queries. ``nearest=None`` reads every
        bank query: ``weights`` of shape (Q, U), ``out = weights @ table.T``.

        With ``log=True``, ``weights`` are log-weights, and each model's
        counts and sums are relative to its largest gathered weight: returns
        ``(out, peak)``, where model ``m``'s columns are scaled by
        ``exp(−peak[:, m])`` and ``peak`` (Q, M) is that largest log-weight
        (−inf where none was gathered), so that no weight underflows."""
        crow, col, value = self._cells()
        n_queries = len(weights)
        width = self.n_count_rows + self.n_models
        if nearest is None:
            # Every stored cell once per query, in the CSR's order.
            weight = weights.repeat_interleave(crow.diff(), dim=1).reshape(-1)
            first = torch.arange(n_queries, device=col.device)[:, None] * width
            target = (first + col).reshape(-1)
            value = value.expand(n_queries, -1).reshape(-1)
        else:
            k = nearest.shape[1]
            start = crow[nearest].reshape(-1)
            length = crow[nearest + 1].reshape(-1) - start
            pair = torch.repeat_interleave(
                torch.arange(len(start), device=start.device), length
            )
            # Position of each gathered cell within its bank query's row.
            offset = torch.cumsum(length, 0) - length
            cell = (
                torch.arange(len(pair), device=start.device)
                - offset[pair]
                + start[pair]
            )
            target = torch.div(pair, k, rounding_mode="floor") * width + col[cell]
            weight = weights.reshape(-1)[pair]
            value = value[cell]
        peak = None
        if log:
            # Largest log-weight of each count row; a model's score sums use
            # the one of its counts (a score of 0 stores no cell of sums).
            largest = weights.new_full((n_queries * width,), float("-inf"))
            largest.scatter_reduce_(0, target, weight, reduce="amax")
            largest = largest.view(n_queries, width)[:, : self.n_count_rows]
            peak = largest if self.count_row is None else largest[:, self.count_row]
            weight = (weight - torch.cat([largest, peak], 1).reshape(-1)[target]).exp()
        out = weights.new_zeros(n_queries * width)
        out.index_add_(0, target, weight * value.to(weights.dtype))
        out = out.view(n_queries, width)
        return out if peak is None else (out, peak)

    def nbytes(self):
        """Bytes held: the bank in each dtype, the tables and the neighbour
        readout's (U, K + M) cells built so far; not the hnswlib graph of
        ``index="hnsw"``, whose size hnswlib does not report."""
        tensors = [self.bank, *self._banks.values(), *self._tables.values()]
        tensors += self._by_bank or ()
        total = 0
        for t in tensors:
            if t.layout == torch.sparse_csr:
                parts = (t.crow_indices(), t.col_indices(), t.values())
                total += sum(p.numel() * p.element_size() for p in parts)
            else:
                total += t.numel() * t.element_size()
        return total
