"""Semi-amortised inference: model embeddings refined on their own rows.

The encoder F_θ is amortised: one forward pass maps any evaluation set to an
embedding, and what it does not read from a set is lost however well the
predictor G_ψ could use it. :func:`refine_embeddings` closes part of that
gap the way matrix factorisation fits a new row: it starts from the
encoder's ``z0`` and takes damped Gauss-Newton steps on each model's own
evaluations under the frozen predictor, with a Gaussian prior that keeps
``z`` near ``z0``.
Plain PyTorch, like :mod:`._nn`; :class:`~._embedder.LocusEmbedder` calls it
from ``transform`` when ``refine_steps > 0``.
"""

import numpy as np
import torch
from torch.nn import functional as F

from ._readout import _float32_weights, _readout_and_evidence
from ._training import padded_rows, size_batches, writable

__all__ = ["REFINE_PRIOR_MIN", "embedding_scale", "refine_embeddings"]

# The smallest prior weight (LocusEmbedder's refine_prior). With none the fit
# has no fixed point: embeddings ran away (norm 2.8 to 58-450 in 10 steps). A
# tiny prior leaves directions so flat that float32 rounding of the batched
# passes steers the solve: a model's embedding then depended on the models
# refined beside it, by 1e-3 to 5e-3 relative at priors of 1e-5 to 1e-4 (order
# 1 at 1e-8). From 1e-3 up it stayed within 1e-6 of the model's embedding
# refined alone, at any transform_batch_tokens, with the kernel readout
# (2.3e-7 from 0.1 up); without it, up to 1.3e-6 at 0.01 and 5e-5 at 1e-3 to
# 3e-3, where 10 steps did not bring a model to its optimum (small test fits,
# embedding_dim 8 to 32, models of 1 to 200 rows; under the stopping rule
# before _STEP_RTOL's, up to 1e-3 with the readout and 1.2e-2 without, at
# 1e-3 to 1e-2). 0.001 is also the smallest prior benchmarks/refine_prior.py
# measured on real pools.
REFINE_PRIOR_MIN = 1e-3

# Most cosine cells (rows x stored rows) of one block of the leave-one-out
# readout: 4 M floats, 16 MiB in float32, whatever a model's size.
_READOUT_CELLS = 1 << 22

# Most bytes of the bank readout's two (U, 2M) matrices (counts and sums per
# query, and their weighted sums), at float64: beyond it (pools of thousands
# of models over tens of thousands of queries) each model's own rows are read.
_BANK_BYTES = 256 * 2**20

_EPS32 = float(torch.finfo(torch.float32).eps)
# A model stops once its next step would move its embedding by less than
# float32's resolution of it (eps relative to its norm), so that whether it
# stops there or a step later changes its embedding by float32 rounding
# only. The rule was the Newton decrement g^T H^-1 g under float32's
# resolution of the objective: a decrement that small still allows a step
# of sqrt(decrement / curvature), 1e-4 to 1e-3 relative at priors of 1e-3
# to 1e-2 where the prior alone curves a direction (2·prior/d), and which
# side of the threshold a model fell on turned on the rounding of the
# batched passes, so that a model refined beside others (or at another
# transform_batch_tokens) took a step more or fewer than alone.
_STEP_RTOL = _EPS32
# Backtracking, a safeguard behind the steps' length (_refine_batch): a step
# is halved until the objective falls by at least this share of the promised
# decrease (Armijo's rule), at most _HALVINGS times; a model whose step never
# passes stops there. The test allows the objective's float32 resolution
# (2 eps |L|), as line searches on noisy objectives do: near the optimum a
# step's decrease is below it, and a strict test read rounding.
_ARMIJO = 1e-4
_HALVINGS = 10


def embedding_scale(embeddings):
    """Each coordinate's standard deviation over a pool's embeddings, shape
    (d,), float32: the unit of :func:`refine_embeddings`' steps, fitted once
    on the training pool so that a model's refinement does not depend on
    which models are embedded beside it. Ones for a pool of one model, and
    at least 1e-6 (a coordinate no model moves)."""
    embeddings = np.asarray(embeddings, dtype=np.float64)
    if len(embeddings) < 2:
        return np.ones(embeddings.shape[1], dtype=np.float32)
    return np.maximum(embeddings.std(axis=0, ddof=1), 1e-6).astype(np.float32)


def _padded_rows(table, models, device):
    """Query index, score and mask of the rows of ``models`` (indices into
    ``table.models``), each of shape (len(models), widest model's rows)."""
    rows, mask = padded_rows(table.indptr, models)
    as_tensor = torch.as_tensor
    return (
        as_tensor(table.query_index[rows], device=device),
        as_tensor(
            np.where(mask, table.score[rows], 0), dtype=torch.float32, device=device
        ),
        as_tensor(mask, device=device),
    )


def _leave_one_out_readout(readout, unit, query_index, score, mask):
    """The kernel readout's features (B, N, 2) at each of a model's rows,
    read from its *other* rows (its own would read its own answer at cosine
    1), in blocks of rows that bound the cosine matrix's size.

    A row's own cosine is set to -inf (weight 0), so each block goes through
    the readout's direct weighted sums (:meth:`KernelReadout._episode_features`:
    one exponential and one product per cell) rather than a masked
    log-sum-exp over a (B, R, N) mask. This readout is most of the
    refinement's time (23 of 27 s at 112 models x 4,096 rows); the direct
    sums made the refined transform 1.2-1.35x faster, with embeddings within
    5e-8 relative (TUNING.md session 41). Where the models share queries,
    :func:`refine_embeddings` reads every row at once instead
    (:func:`_bank_leave_one_out_readout`).

    Parameters
    ----------
    readout : KernelReadout
    unit : Tensor of shape (U, F)
        Unit-norm query encodings.
    query_index, score, mask : Tensor of shape (B, N)
    """
    n_models, width = query_index.shape
    stored = unit[query_index]  # (B, N, F)
    block = max(1, _READOUT_CELLS // max(1, n_models * width))
    columns = torch.arange(width, device=unit.device)
    out = []
    for start in range(0, width, block):
        rows = columns[start : start + block]
        similarity = stored[:, rows] @ stored.transpose(1, 2)  # (B, R, N)
        similarity[:, torch.arange(len(rows), device=unit.device), rows] = -torch.inf
        out.append(readout._episode_features(similarity, score, mask))
    return torch.cat(out, dim=1)


def _bank_leave_one_out_readout(readout, unit, table):
    """:func:`_leave_one_out_readout` at every row of ``table`` at once, from
    one product over the table's distinct queries, or None where the
    per-model path is cheaper or the bandwidth too narrow for float64.

    A row's readout sums the kernel weights of its model's other rows;
    grouped by query, that is the weights of its query against every query,
    times the model's count and score sum there: one (U, U) x (U, 2M)
    product for all models, with each query's weight on itself left out. A
    model answers each query once (an EvalTable averages duplicates), so
    that is exactly the row's own term. Where models share queries (U²
    below the sum of the models' squared row counts) this replaces each
    model's (rows x rows) cosines: at 112 models x 4,096 rows over 12,000
    queries, a thirteenth of the cells.

    Parameters
    ----------
    readout : KernelReadout
    unit : Tensor of shape (U, F)
        Unit-norm encodings of ``table.queries``.
    table : EvalTable

    Returns
    -------
    features : Tensor of shape (n_rows, 2) or None
        In the table's row order.
    """
    tau = float(readout.log_bandwidth.detach().exp())
    sizes = np.diff(table.indptr)
    n_bank = len(unit)
    # ``not tau >= ...``: a bandwidth of 0 or NaN (set by hand after a fit)
    # takes the other path instead of dividing by zero here.
    if not tau >= 2 / 600 or float(n_bank) ** 2 >= float(
        (sizes.astype(float) ** 2).sum()
    ):
        return None  # exp(-2/τ) near float64's smallest, or no shared queries
    if 2 * n_bank * 2 * table.n_models * 8 > _BANK_BYTES:
        return None  # the (U, 2M) counts and sums would not stay small
    # float32 weights while exp(-2/τ) is well inside its range, as the
    # readout's own sums do; float64 for narrower bandwidths.
    dtype = torch.float32 if _float32_weights(tau) else torch.float64
    device = unit.device
    n_models = table.n_models
    query = torch.as_tensor(writable(table.query_index), device=device)
    model = torch.repeat_interleave(
        torch.arange(n_models, device=device), torch.as_tensor(sizes, device=device)
    )
    score = torch.as_tensor(writable(table.score), dtype=dtype, device=device)
    values = torch.zeros(n_bank, 2 * n_models, dtype=dtype, device=device)
    values[query, model] = 1.0
    values[query, model + n_models] = score
    sums = torch.empty_like(values)
    step = max(1, _READOUT_CELLS // n_bank)
    for start in range(0, n_bank, step):
        part = slice(start, start + step)
        # cos - 1 clamped at 0, as the readout's own paths do (_offset): a
        # float32 cosine of equal directions may round above 1.
        offset = (unit[part] @ unit.T).to(dtype).sub_(1).clamp_max_(0)
        weights = offset.div_(tau).exp_()
        weights.diagonal(offset=start).zero_()  # each row's own term
        sums[part] = weights @ values
    mass, total = sums[query, model], sums[query, model + n_models]
    return torch.stack(_readout_and_evidence(mass, total), dim=-1).float()


def refine_embeddings(module, table, X_query, z0, *, scale, steps, prior, batch_tokens):
    """Each model's embedding moved from ``z0`` to fit its own rows.

    With ``z = z0 + scale ⊙ δ``, ``δ`` starts at zero and minimises, per
    model,

        L(δ) = mean over its rows of BCE(G_ψ(z, φ(x_i)), y_i) + prior · mean(δ²)

    under the frozen predictor (its weights and dropout untouched,
    evaluation mode), by at most ``steps`` damped Gauss-Newton steps: the
    step solves ``(Jᵀ S J / n + 2·prior/d · I) s = ∇L`` with J the logits'
    Jacobian in δ (n rows by d) and S the Bernoulli variances p(1 - p); its
    length is the inverse of how much more L curved along the previous step
    than that system said (at most a full step), and it backtracks if L
    still rises (Armijo). The prior makes the system positive definite, and
    a model stops once its next step would move its embedding by less than
    float32's resolution of it.
    With the kernel readout, the predictor's readout input at a row reads the
    model's *other* rows. Every model's objective, steps and stopping are its
    own (sums over its own rows, in float64): the result depends on which
    other models are refined alongside, and on ``batch_tokens``, only through
    float32 rounding of the batched passes: within 1e-6 relative in small
    test fits with the kernel readout; without it, up to 1.3e-6 at a prior
    of 0.01 and 5e-5 at 0.001 to 0.003, where ``steps`` does not bring a
    model to its optimum (see :data:`REFINE_PRIOR_MIN`).

    Parameters
    ----------
    module : LocusNetwork
    table : EvalTable
    X_query : ndarray of shape (table.n_queries, n_features)
    z0 : ndarray of shape (table.n_models, d)
        The encoder's embeddings.
    scale : ndarray of shape (d,)
        The unit of each coordinate's move (positive), in which the prior is
        measured.
    steps : int
        Most Gauss-Newton steps per model.
    prior : float
        Weight of the prior, at least :data:`REFINE_PRIOR_MIN` (below it the
        independence above does not hold; the caller checks).
    batch_tokens : int
        Most evaluation rows refined together (bounds memory).

    Returns
    -------
    embeddings : ndarray of float32, shape (table.n_models, d)
    """
    out = np.asarray(z0, dtype=np.float32).copy()
    if steps == 0:
        return out
    module.eval()
    device = next(module.parameters()).device
    # The embedder may run under inference_mode; every tensor below is made
    # inside this block, and no step needs autograd.
    with torch.inference_mode(False), torch.no_grad():
        # Read-only inputs (a joblib memmap of a loaded embedder) are copied
        # first, as the unrefined path does: torch warns on them otherwise.
        features = torch.as_tensor(
            writable(X_query), dtype=torch.float32, device=device
        )
        unit = F.normalize(features, dim=-1)
        unit_scale = torch.as_tensor(
            writable(scale), dtype=torch.float32, device=device
        )
        bank_readout = None
        if module.readout is not None:
            bank_readout = _bank_leave_one_out_readout(module.readout, unit, table)
        for models in size_batches(np.diff(table.indptr), batch_tokens):
            start_z = torch.as_tensor(out[models], device=device)
            out[models] = _refine_batch(
                module, features, unit, table, models, start_z, unit_scale,
                steps, prior, bank_readout,
            )  # fmt: skip
    return out


def _refine_batch(
    module, features, unit, table, models, z0, scale, steps, prior, bank_readout=None
):
    query_index, score, mask = _padded_rows(table, models, features.device)
    # Each model's objective and gradient are sums over its rows in float64:
    # padding adds exact zeros, so they carry the rounding of the model's own
    # float32 rows only (a float32 sum's rounding depends on the width).
    weight = mask.to(torch.float64)
    weight = weight / weight.sum(1, keepdim=True)  # each model's mean
    target = score.to(torch.float64)
    extra = None
    if bank_readout is not None:
        rows, _ = padded_rows(table.indptr, models)
        extra = bank_readout[torch.as_tensor(rows, device=features.device)]
    elif module.readout is not None:
        extra = _leave_one_out_readout(module.readout, unit, query_index, score, mask)
    predictor = module.predictor
    u, extra_term = predictor.row_terms(features, query_index, extra)
    d = z0.shape[1]
    curvature = 2.0 * prior / d  # the prior's Hessian, times the identity

    def pick(x, some):
        # Every model (the first steps): the tensor itself, not a copy.
        return x if x is None or len(some) == len(z0) else x[some]

    def embedding(delta, some):
        return pick(z0, some) + scale * delta.to(z0.dtype)

    def evaluate(delta, some, jacobian=True):
        """The objective (float64) of the models ``some`` (ascending indices
        into the batch) at ``delta``, and with ``jacobian`` their logits,
        the logits' Jacobian in δ (float32) and the objective's gradient
        (float64). Only those models' rows are computed: each pass skips the
        models that have stopped."""
        logits, jac = predictor.logits_and_jacobian(
            embedding(delta, some),
            pick(u, some),
            pick(extra_term, some),
            jacobian=jacobian,
        )
        y, w = pick(target, some), pick(weight, some)
        bce = F.binary_cross_entropy_with_logits(
            logits.to(torch.float64), y, reduction="none"
        )
        value = (bce * w).sum(1) + prior * delta.square().mean(1)
        if not jacobian:
            return value
        jac = jac * scale  # d logit / d δ
        residual = (torch.sigmoid(logits).to(torch.float64) - y) * w
        grad = torch.bmm(residual.unsqueeze(1), jac.to(torch.float64)).squeeze(1)
        return [value, logits, jac, grad + curvature * delta]

    def put(state, where, part):
        for whole, new in zip(state, part, strict=True):
            whole[where] = new

    every = torch.arange(len(z0), device=z0.device)
    delta = torch.zeros(z0.shape, dtype=torch.float64, device=z0.device)
    state = evaluate(delta, every)  # value, logits, jac, grad of every model
    # float64 explicitly, not torch's default: under a caller's
    # torch.set_default_dtype(torch.float64) a default-dtype identity once
    # mixed dtypes in the solve.
    eye = torch.eye(d, dtype=torch.float64, device=z0.device)
    some = every  # the models still stepping
    excess = torch.ones(len(z0), dtype=torch.float64, device=z0.device)
    for _ in range(steps):
        value, logits, jac, grad = (x[some] for x in state)
        # The Hessian in float32 (the steps' largest product): its rounding
        # changes a step a little, not the fixed point, where the float64
        # gradient is zero.
        p = torch.sigmoid(logits)
        variance = (p * (1 - p) * weight[some].to(p.dtype)).unsqueeze(-1)
        hessian = torch.bmm((jac * variance).transpose(1, 2), jac).to(torch.float64)
        # The prior's curvature, plus a touch of Levenberg damping (kept from
        # when prior=0 was allowed, which it kept defined; it leaves the
        # results as they were); damping changes the steps, not the fixed
        # point, where the gradient is zero.
        levenberg = 1e-6 * hessian.diagonal(dim1=1, dim2=2).mean(1)
        damping = curvature + levenberg + 1e-12
        step = torch.linalg.solve(hessian + damping[:, None, None] * eye, grad)
        at = delta[some]
        size = embedding(at, some).norm(dim=1)
        going = (scale * step).norm(dim=1) > _STEP_RTOL * size
        some, at, value, grad, step = (x[going] for x in (some, at, value, grad, step))
        if len(some) == 0:
            break
        # The Newton decrement: the objective's slope along the step at 0,
        # negated, and the step's curvature in the Gauss-Newton model.
        decrement = (grad * step).sum(1)
        # The step's length: the inverse of how much more the objective
        # curved along the model's last step than the Gauss-Newton model
        # said (the secant of its slope there, at least 1). Where it curves
        # more, a full step overshoots (about twofold on models of a few rows
        # under weak priors) to a point that neither the objective nor the
        # gradient's norm tells from the start, and any test between the two
        # turned on rounding: this length is a continuous function of the
        # slopes instead, and costs no pass.
        length = 1 / excess[some]
        new = evaluate(at - length[:, None] * step, some)
        along = (decrement - (new[3] * step).sum(1)) / length
        excess[some] = torch.clamp(along / decrement, min=1.0)
        slack = 2 * _EPS32 * value.abs()  # the objective's float32 resolution
        rises = new[0] > value - _ARMIJO * length * decrement + slack
        if rises.any():
            back = rises.nonzero().squeeze(1)
            reduced, passed = length[back], torch.zeros_like(back, dtype=torch.bool)
            for _ in range(_HALVINGS):
                reduced = torch.where(passed, reduced, reduced / 2)
                trial = evaluate(
                    at[back] - reduced[:, None] * step[back], some[back], False
                )
                passed |= trial <= (
                    value[back] - _ARMIJO * reduced * decrement[back] + slack[back]
                )
                if passed.all():
                    break
            length[back] = torch.where(passed, reduced, 0.0)  # 0: it stops
            put(new, back, evaluate(at[back] - length[back, None] * step[back], some[back]))  # fmt: skip
        delta[some] = at - length[:, None] * step
        put(state, some, new)
        some = some[length > 0]
    return (z0 + scale * delta.to(z0.dtype)).cpu().numpy()
