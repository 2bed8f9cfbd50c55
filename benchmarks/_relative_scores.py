"""A training prototype for embedding_quality.py: the encoder reads each
evaluation's score relative to the pool's mean score on that query.

LOCUS's encoder reads a model's evaluations as (query encoding, score) tokens
and averages them by attention. Whether a model got a query right says
mostly how hard the query is: a right answer on a query every model gets
right and one on a query few do are the same token, so each set's average
is dominated by which queries it happened to draw and by overall strength
(session 8: embeddings 0.1 % apart on the planted specialists; the first
component of z correlates 0.93 with the mean score on BFCL). Item response
theory reads a model's ability against each item's difficulty; the fit
table holds that difficulty for every query it covers, from the other
models' answers, which the encoder never sees. Measured first on the simple
fingerprints (seeds 0-2, the harness's disjoint self-identification sets, a
throwaway script): the per-task profile of difficulty-centred scores
identifies models better than that of raw scores at 256 rows on BFCL (0.33
against 0.25) and at 1,024 on RouterBench (0.91 / 0.64 against 0.82 / 0.55
on seeds 1 and 0), and so does the 12-cluster table on RouterBench at 1,024
(there each query's mean read every training row of the split, leaving the
row's own out; the fit table below holds far fewer rows a query).

One change against the package's training and transform: the *encoder* reads
``(1 + y - p_q) / 2`` in place of each score ``y`` (a score in [0, 1]: 1 a
right answer that the pool usually misses, 0 a miss where it is usually
right, 1/2 as expected), where ``p_q = (S_q + g) / (C_q + 1)`` is the fit
table's mean score on query ``q`` (its sum ``S_q`` over ``C_q`` rows, every
model's), shrunk by one pseudo-row at the table's mean score ``g``: a query
the fit table does not hold reads ``p = g``. The decoder's targets and the
kernel readout's stored scores stay the raw scores; validation, ``transform``
(every later embedding, from any rows) and the readout at prediction read
what training read. The queries' means are those of the fit table only
(training rows: no test query's answers).

Settings fixed before any run (not tuned): the map ``(1 + y - p) / 2`` (the
only affine map of ``y - p`` in [-1, 1] onto [0, 1]); one pseudo-row.

``pseudo_rows=8`` with ``leave_one_out`` (session 39, fixed before its run):
each query's mean shrunk by eight pseudo-rows at ``g`` instead of one, so
that where a query holds only a few other answers (1-3 on MMLU-Pro open and
RouterBench at 256 rows per model) ``p`` stays near ``g`` and the encoder
reads nearly the raw score (an affine map of it), while a query answered by
many models (about 12 others on BFCL, 168 on Shaberi) keeps most of its own
difficulty. The weight of the query's own mean, ``C / (C + 8)`` for ``C``
other answers: 0.11-0.27 at 1-3, 0.6 at 12, 0.95 at 168.

``leave_one_out=True`` (session 27, fixed after the first run and before its
own): a row of the fit table reads its query's mean *without its own score*,
``(S_q - y + g) / C_q``, so that ``p`` is the other models' answers only (with
one pseudo-row; ``g`` where no other model answered). Rows the fit table did
not hold read ``(S_q + g) / (C_q + 1)`` as before. At 256 rows per model a
query holds about 13 of the fit table's rows on BFCL but about 3 on MMLU-Pro
open and 1.3 on RouterBench, where the plain mean is mostly the row's own
answer.

``both=True`` (session 28, fixed before its run): the encoder keeps the raw
score and reads the relative one beside it, so that it loses nothing the
baseline's tokens carry. The token gains one term, ``(y - p_q) (W_r φ + b_r)``
(``W_r``, ``b_r`` a new linear map of the query encoding, initialised at zero
so that training starts from the baseline's network, drawn outside the
global random stream so that every other weight starts as the baseline's);
``p_q`` is the plain shrunk mean above (not left out). Such an encoder takes
its plain path also at inference (the per-query tables are affine in ``y``
only).
"""

import contextlib
import dataclasses

import numpy as np
import pandas as pd
import torch
from _loss_terms import patched

from locus_sklearn import _embedder, _nn, _training


def query_sums(table):
    """(sum ``S_q`` and count ``C_q`` of the scores per query of ``table``,
    shape (n_queries,) each; the table's mean score ``g``)."""
    score = np.asarray(table.score, dtype=np.float64)
    total = np.bincount(table.query_index, weights=score, minlength=table.n_queries)
    count = np.bincount(table.query_index, minlength=table.n_queries)
    return total, count, float(score.mean())


def shrunk_mean(total, count, g, pseudo_rows=1):
    """A query's mean score over its ``count`` rows summing to ``total``,
    shrunk by ``pseudo_rows`` pseudo-rows at ``g``: ``g`` for a query with
    no row."""
    return (total + pseudo_rows * g) / (count + pseudo_rows)


def relative(score, p):
    """``(1 + score - p) / 2``: a score read against the query's mean ``p``."""
    return (1 + score - p) / 2


def mean_without(total, count, g, score, pseudo_rows=1):
    """The query's mean without the row's own ``score`` (one of the ``count``
    rows summing to ``total``), shrunk by ``pseudo_rows`` pseudo-rows at
    ``g``."""
    return (total - score + pseudo_rows * g) / (count - 1 + pseudo_rows)


def means_for(module, queries, models=None):
    """The fitted query means of ``module`` at each row's query (the table's
    mean where the fit table held no row of a query), or None when
    ``module`` was not fitted with relative scores. A module fitted with
    ``leave_one_out`` also needs each row's model: a row the fit table held
    (same model and query) leaves its fitted score out of the mean."""
    known = getattr(module, "relative_queries_", None)
    if known is None:
        return None
    queries = np.asarray(queries)
    position = np.minimum(np.searchsorted(known, queries), len(known) - 1)
    hit = known[position] == queries
    total = np.where(hit, module.relative_sums_[position], 0.0)
    count = np.where(hit, module.relative_counts_[position], 0)
    g = module.relative_mean_
    pseudo = getattr(module, "relative_pseudo_rows_", 1)
    p = shrunk_mean(total, count, g, pseudo)
    fitted = getattr(module, "relative_rows_", None)
    if fitted is not None:
        own = pd.Series(zip(models, queries, strict=True)).map(fitted).to_numpy(float)
        held = ~np.isnan(own)
        p[held] = mean_without(total[held], count[held], g, own[held], pseudo)
    return p


@contextlib.contextmanager
def relative_scores_training(leave_one_out=False, both=False, pseudo_rows=1):
    """Within the block, a LocusEmbedder's fit trains its encoder on
    relative scores, and its ``transform`` (also after the block) reads them.
    With ``leave_one_out``, a row of the fit table reads its query's mean
    without its own score; with ``both``, the encoder reads the raw score
    and ``y - p`` beside it; ``pseudo_rows`` at the table's mean shrink
    every query's mean."""
    if leave_one_out and both:
        raise ValueError("leave_one_out and both are separate variants")
    forward = _nn.LocusNetwork.forward
    tokenizer_init = _nn.EvaluationTokenizer.__init__
    inputs = _training.LocusNet._inputs
    fit_encoded = _embedder.LocusEmbedder._fit_encoded
    bank = {}

    def inputs_with_relative(self, x):
        out = inputs(self, x)
        index = torch.as_tensor(x["enc_index"], device=self.device)
        score = out["enc_score"]
        # The means in float64, as the transform computes them.
        total = bank["total"].to(self.device)[index]
        count = bank["count"].to(self.device)[index].to(total.dtype)
        g = bank["g"]
        if leave_one_out:
            # Every encoder row, training or validation, is a fit-table row:
            # its own score is one of its query's count.
            p = mean_without(
                total, count.clamp(min=1), g, score.to(total.dtype), pseudo_rows
            )
        else:
            p = shrunk_mean(total, count, g, pseudo_rows)
        p = p.to(score.dtype)
        if both:
            out["enc_relative"] = torch.stack([score, score - p], dim=-1)
        else:
            out["enc_relative"] = relative(score, p)
        return out

    def tokenizer_init_with_relative(self, n_features, embedding_dim):
        tokenizer_init(self, n_features, embedding_dim)
        # Outside the global stream: every other weight starts as the
        # baseline's, and at zero the network starts as the baseline's.
        with torch.random.fork_rng(devices=[]):
            self.relative = torch.nn.Linear(n_features, embedding_dim)
        torch.nn.init.zeros_(self.relative.weight)
        torch.nn.init.zeros_(self.relative.bias)

    def forward_with_relative(self, *args, enc_relative=None, **kwargs):
        if enc_relative is None:
            return forward(self, *args, **kwargs)
        embed = self.embed

        def embed_relative(features, query_index, score, mask, tables=None):
            return embed(features, query_index, enc_relative, mask, tables)

        # forward reads self.embed for z only; the readout keeps enc_score.
        self.embed = embed_relative
        try:
            return forward(self, *args, **kwargs)
        finally:
            del self.embed

    def fit_encoded_with_means(self, table, X_query, encoder, **kwargs):
        total, count, g = query_sums(table)
        bank.update(total=torch.as_tensor(total), count=torch.as_tensor(count), g=g)
        out = fit_encoded(self, table, X_query, encoder, **kwargs)
        module = self.net_.module_
        module.relative_queries_ = np.asarray(table.queries)
        module.relative_sums_, module.relative_counts_ = total, count
        module.relative_mean_ = g
        module.relative_pseudo_rows_ = pseudo_rows
        module.relative_both_ = both
        if leave_one_out:
            keys = zip(
                table.models[table.model_index],
                table.queries[table.query_index],
                strict=True,
            )
            module.relative_rows_ = dict(
                zip(keys, table.score.astype(float), strict=True)
            )
        return out

    patches = [
        (_nn.LocusNetwork, "forward", forward_with_relative),
        (_training.LocusNet, "_inputs", inputs_with_relative),
        (_embedder.LocusEmbedder, "_fit_encoded", fit_encoded_with_means),
    ]
    if both:
        patches.append(
            (_nn.EvaluationTokenizer, "__init__", tokenizer_init_with_relative)
        )
    with patched(*patches):
        yield


# The package's own transform, also when this module is loaded again (a
# second wrapper would map the scores twice).
_transform_encoded = getattr(
    _embedder.LocusEmbedder._transform_encoded,
    "package_transform",
    _embedder.LocusEmbedder._transform_encoded,
)


def _transform_relative(self, table, X_query):
    p = means_for(
        self.net_.module_,
        table.queries[table.query_index],
        table.models[table.model_index],
    )
    if p is not None:
        if getattr(self.net_.module_, "relative_both_", False):
            # (n_rows, 2): each row's raw and relative score, gathered per
            # token by the package's batching into (B, N, 2).
            score = np.stack([table.score, table.score - p], axis=-1)
        else:
            score = relative(table.score, p)
        table = dataclasses.replace(table, score=score.astype(np.float32))
    return _transform_encoded(self, table, X_query)


_transform_relative.package_transform = _transform_encoded

# The package's tokenizer and encoder, also when this module is loaded again.
_tokenize = getattr(
    _nn.EvaluationTokenizer.forward, "package_forward", _nn.EvaluationTokenizer.forward
)
_encode = getattr(_nn.LocusEncoder.forward, "package_forward", _nn.LocusEncoder.forward)


def _tokenize_both(self, features, query_index, score):
    """The package's token at the raw score ``score[..., 0]`` plus
    ``r (W_r φ + b_r)`` at the relative score ``r = score[..., 1]``."""
    if score.dim() == query_index.dim():
        return _tokenize(self, features, query_index, score)
    tokens = _tokenize(self, features, query_index, score[..., 0])
    r = score[..., 1].unsqueeze(-1).to(tokens.dtype)
    return tokens.addcmul_(r, self.relative(features)[query_index])


def _encode_both(self, features, query_index, score, mask, tables=None):
    """Two score channels take the plain path (the inference tables hold a
    token per query at y = 0 and y = 1 only)."""
    if score.dim() == query_index.dim():
        return _encode(self, features, query_index, score, mask, tables)
    z = self.forward_plain(features, query_index, score, mask)
    return z if self.standardize is None else self._standardize(z)


_tokenize_both.package_forward = _tokenize
_encode_both.package_forward = _encode

# Installed on import and left installed: a router fitted in the block embeds
# its models (at fit, and on every later ``embed``) from relative scores; a
# module fitted without them is unaffected.
_embedder.LocusEmbedder._transform_encoded = _transform_relative
_nn.EvaluationTokenizer.forward = _tokenize_both
_nn.LocusEncoder.forward = _encode_both
