"""Semi-amortised inference: model embeddings refined on their own rows.

The encoder F_θ is amortised: one forward pass maps any evaluation set to an
embedding, and what it does not read from a set is lost however well the
predictor G_ψ could use it. :func:`refine_embeddings` closes part of that
gap the way matrix factorisation fits a new row: it starts from the
encoder's ``z0`` and takes Adam steps on each model's own evaluations under
the frozen predictor, with a Gaussian prior that keeps ``z`` near ``z0``.
Plain PyTorch, like :mod:`._nn`; :class:`~._embedder.LocusEmbedder` calls it
from ``transform`` when ``refine_steps > 0``.
"""

import numpy as np
import torch
from torch.nn import functional as F

from ._training import padded_rows, size_batches

__all__ = ["embedding_scale", "refine_embeddings"]

# Most cosine cells (rows x stored rows) of one block of the leave-one-out
# readout: 4 M floats, 16 MiB in float32, whatever a model's size.
_READOUT_CELLS = 1 << 22


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
        others = mask.unsqueeze(1) & (rows.unsqueeze(1) != columns).unsqueeze(0)
        out.append(readout._features(similarity, score.unsqueeze(1), others))
    return torch.cat(out, dim=1)


def refine_embeddings(
    module, table, X_query, z0, *, scale, steps, step_size, prior, batch_tokens
):
    """Each model's embedding moved from ``z0`` to fit its own rows.

    With ``z = z0 + scale ⊙ δ``, ``δ`` starts at zero and takes ``steps``
    Adam steps of size ``step_size`` on, per model,

        mean over its rows of BCE(G_ψ(z, φ(x_i)), y_i) + prior · mean(δ²),

    the predictor frozen (its weights and dropout untouched, evaluation
    mode). With the kernel readout, the predictor's readout input at a row
    reads the model's *other* rows. Every model's objective is its own: the
    result does not depend on which other models are refined alongside.

    Parameters
    ----------
    module : LocusNetwork
    table : EvalTable
    X_query : ndarray of shape (table.n_queries, n_features)
    z0 : ndarray of shape (table.n_models, d)
        The encoder's embeddings.
    scale : ndarray of shape (d,)
        The unit of each coordinate's steps (positive).
    steps : int
    step_size, prior : float
    batch_tokens : int
        Most evaluation rows refined together (bounds memory).

    Returns
    -------
    embeddings : ndarray of float32, shape (table.n_models, d)
    """
    out = np.asarray(z0, dtype=np.float32).copy()
    if steps == 0:
        return out
    # The steps need autograd, also when the caller embeds under no_grad or
    # inference_mode (every tensor below is created inside this block).
    with torch.inference_mode(False), torch.enable_grad():
        return _refine(
            module, table, X_query, out, scale, steps, step_size, prior, batch_tokens
        )


def _refine(module, table, X_query, out, scale, steps, step_size, prior, batch_tokens):
    """:func:`refine_embeddings` on ``out`` (the encoder's, refined in place),
    batch by batch of models of similar size."""
    module.eval()
    device = next(module.parameters()).device
    features = torch.as_tensor(X_query, dtype=torch.float32, device=device)
    unit = F.normalize(features, dim=-1)
    unit_scale = torch.as_tensor(scale, dtype=torch.float32, device=device)
    for models in size_batches(np.diff(table.indptr), batch_tokens):
        start_z = torch.as_tensor(out[models], device=device)
        out[models] = _refine_batch(
            module, features, unit, table, models, start_z, unit_scale,
            steps, step_size, prior,
        )  # fmt: skip
    return out


def _refine_batch(
    module, features, unit, table, models, z0, scale, steps, step_size, prior
):
    query_index, score, mask = _padded_rows(table, models, features.device)
    weight = mask.to(torch.float32)
    rows = weight.sum(1)
    with torch.no_grad():
        extra = None
        if module.readout is not None:
            extra = _leave_one_out_readout(
                module.readout, unit, query_index, score, mask
            )
    delta = torch.zeros_like(z0, requires_grad=True)
    optimizer = torch.optim.Adam([delta], lr=step_size)
    for _ in range(steps):
        logits = module.predictor(z0 + scale * delta, features, query_index, extra)
        fit = F.binary_cross_entropy_with_logits(
            logits, score, weight=weight, reduction="none"
        ).sum(1)
        loss = (fit / rows + prior * delta.pow(2).mean(1)).sum()
        # Gradients for δ only: the predictor's weights collect none.
        (delta.grad,) = torch.autograd.grad(loss, delta)
        optimizer.step()
    return (z0 + scale * delta).detach().cpu().numpy()
