"""The LOCUS networks in plain PyTorch (no scikit-learn in here).

Shapes use B models per batch, N evaluation tokens per model (padded), U unique
queries per batch, F query-encoding features, d the embedding dimension.

- :class:`EvaluationTokenizer` h_ω: one token per evaluation from (φ(x), y).
- :class:`TBlock`: multi-head attention + residual + LayerNorm, then FFN
  d→2d→d + residual + LayerNorm, with key-padding masks.
- :class:`LocusEncoder` F_θ: tokenizer, L latent-bottleneck blocks, then
  learned-query pooling → z_m. No positional encodings, so z_m does not depend
  on the order of evaluations.
- :class:`CorrectnessPredictor` G_ψ: logit of P(correct | z_m, φ(x)).
- :class:`LocusNetwork`: encoder and predictor trained jointly.
"""

import warnings
from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "NETWORK_LAYOUT",
    "CorrectnessPredictor",
    "EvaluationSets",
    "EvaluationTokenizer",
    "KernelReadout",
    "LocusEncoder",
    "LocusNetwork",
    "MaskedBCEWithLogitsLoss",
    "ReadoutPool",
    "TBlock",
]


class EvaluationTokenizer(nn.Module):
    """h_ω(φ, y) = W [φ, y, φ·(2y−1)] + b, factorised per unique query.

    The query-dependent parts W_φ φ and W_± φ are computed once per unique
    query (U rows) and gathered per token, so a batch costs U·F·2d multiply-adds
    for the projections instead of B·N·F·2d.

    Parameters
    ----------
    n_features : int
        F, the dimension of φ(x).
    embedding_dim : int
        d.
    """

    def __init__(self, n_features, embedding_dim):
        super().__init__()
        self.query = nn.Linear(n_features, 2 * embedding_dim)
        self.score = nn.Parameter(torch.zeros(embedding_dim))
        nn.init.normal_(self.score, std=embedding_dim**-0.5)

    def forward(self, features, query_index, score):
        """Tokens of shape (B, N, d).

        Parameters
        ----------
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, N)
            Index into ``features`` of each token's query.
        score : Tensor of shape (B, N)
            y in [0, 1].
        """
        base, signed = self.query(features).chunk(2, dim=-1)
        y = score.unsqueeze(-1).to(base.dtype)
        return base[query_index] + (2 * y - 1) * signed[query_index] + y * self.score


class MultiHeadAttention(nn.Module):
    """Multi-head attention over batch-first tensors with a key-padding mask.

    Same maths as :class:`torch.nn.MultiheadAttention`, with separate query
    and key/value projections so that nothing is transposed into a copy
    before the projections; the attention itself is
    :func:`torch.nn.functional.scaled_dot_product_attention`.

    Parameters
    ----------
    embedding_dim : int
    n_heads : int
    dropout : float, default=0.0
        Dropout on the attention weights, in training only.
    """

    def __init__(self, embedding_dim, n_heads, dropout=0.0):
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.query = nn.Linear(embedding_dim, embedding_dim)
        self.key_value = nn.Linear(embedding_dim, 2 * embedding_dim)
        self.out = nn.Linear(embedding_dim, embedding_dim)

    def forward(self, query, key_value, key_padding_mask=None):
        """Shape (B, n_q, d); ``key_padding_mask`` (B, n_k), True on padding."""
        b, n_q, d = query.shape
        n_k = key_value.shape[1]
        h = self.n_heads
        q = self.query(query).view(b, n_q, h, d // h).transpose(1, 2)
        k, v = (
            self.key_value(key_value).view(b, n_k, 2, h, d // h).permute(2, 0, 3, 1, 4)
        )
        mask = None
        if key_padding_mask is not None:
            mask = ~key_padding_mask[:, None, None, :]  # True where attention may go
        attended = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0
        )
        return self.out(attended.transpose(1, 2).reshape(b, n_q, d))


class TBlock(nn.Module):
    """TBlock(Q, K, V) = LN(H + FFN(H)) with H = LN(Q + MHA(Q, K, V)).

    Parameters
    ----------
    embedding_dim : int
    n_heads : int
    dropout : float, default=0.0
    """

    def __init__(self, embedding_dim, n_heads, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(embedding_dim, n_heads, dropout)
        self.norm1 = nn.LayerNorm(embedding_dim)
        self.ffn = nn.Sequential(
            nn.Linear(embedding_dim, 2 * embedding_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(2 * embedding_dim, embedding_dim),
        )
        self.norm2 = nn.LayerNorm(embedding_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key_value, key_padding_mask=None):
        """Shape of ``query``: (B, n_q, d); ``key_value``: (B, n_k, d);
        ``key_padding_mask``: (B, n_k) bool, True where the key is padding."""
        attended = self.attention(query, key_value, key_padding_mask)
        hidden = self.norm1(query + self.dropout(attended))
        return self.norm2(hidden + self.dropout(self.ffn(hidden)))


class LatentBottleneckBlock(nn.Module):
    """Compress N tokens into r learned latents, then broadcast back: O(N·r)."""

    def __init__(self, embedding_dim, n_heads, n_latents, dropout=0.0):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(n_latents, embedding_dim) * 0.02)
        self.compress = TBlock(embedding_dim, n_heads, dropout)
        self.broadcast = TBlock(embedding_dim, n_heads, dropout)

    def forward(self, tokens, padding_mask):
        latents = self.latents.unsqueeze(0).expand(tokens.shape[0], -1, -1)
        hidden = self.compress(latents, tokens, padding_mask)
        # Padded rows of the output are never read as keys downstream.
        return self.broadcast(tokens, hidden)


class LocusEncoder(nn.Module):
    """F_θ: a set of scored evaluations → a model embedding z_m of size d.

    Parameters
    ----------
    n_features : int
        F, dimension of the query encodings.
    embedding_dim : int, default=128
    n_latents : int, default=64
    n_blocks : int, default=2
    n_heads : int, default=4
    dropout : float, default=0.0
    """

    def __init__(
        self,
        n_features,
        embedding_dim=128,
        n_latents=64,
        n_blocks=2,
        n_heads=4,
        dropout=0.0,
    ):
        super().__init__()
        self.tokenizer = EvaluationTokenizer(n_features, embedding_dim)
        self.blocks = nn.ModuleList(
            LatentBottleneckBlock(embedding_dim, n_heads, n_latents, dropout)
            for _ in range(n_blocks)
        )
        self.seed = nn.Parameter(torch.randn(1, 1, embedding_dim) * 0.02)
        self.pool = TBlock(embedding_dim, n_heads, dropout)

    def forward(self, features, query_index, score, mask):
        """Embeddings of shape (B, d).

        Parameters
        ----------
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, N)
        score : Tensor of shape (B, N)
        mask : BoolTensor of shape (B, N)
            True for real evaluations, False for padding.
        """
        if not (self.training or torch.is_grad_enabled()) and not (
            torch.is_autocast_enabled(features.device.type)
        ):
            return self.forward_inference(features, query_index, score, mask)
        return self.forward_plain(features, query_index, score, mask)

    def forward_plain(self, features, query_index, score, mask):
        """:meth:`forward` module by module (training's path, autograd)."""
        # Without padding, attention can take its fastest (unmasked) kernel.
        padding = None if bool(mask.all()) else ~mask
        tokens = self.tokenizer(features, query_index, score)
        for block in self.blocks:
            tokens = block(tokens, padding)
        seed = self.seed.expand(tokens.shape[0], -1, -1)
        return self.pool(seed, tokens, padding).squeeze(1)

    def forward_inference(self, features, query_index, score, mask, chunk_tokens=None):
        """:meth:`forward` without autograd, streamed through the cache.

        Same maths as :meth:`forward_plain`, rearranged for inference (only
        rounding differs, about 1e-6 relative in float32):

        - every per-token step (tokenizer, the broadcast TBlock with its FFN,
          the next key/value projection) runs on chunks of about
          ``chunk_tokens`` tokens that stay in cache, writing in place into
          one (B, N, d) token buffer and one (B, N, 2d) key/value buffer;
        - the key bias of attention over the tokens is dropped (softmax does
          not change when every score of a query moves by the same amount)
          and the value bias joins the output bias (weights sum to 1);
        - residuals are added in place by the output GEMMs (``addmm_``);
        - the learned-query pooling never projects the tokens: its scores are
          ``x · W_kᵀq`` and its values ``W_v Σ a x + b_v``, 8d instead of
          2d² multiply-adds per token.

        Runs in the parameters' dtype (float32, or bfloat16 after
        ``module.to(torch.bfloat16)``). Called by :meth:`forward` in eval mode
        when gradients are off; the parameters are not changed.

        Parameters
        ----------
        features, query_index, score, mask
            As in :meth:`forward`.
        chunk_tokens : int, default=None
            Tokens per chunk; None uses ``inference_chunk_tokens``.

        Returns
        -------
        z : Tensor of shape (B, d)
        """
        chunk_tokens = chunk_tokens or self.inference_chunk_tokens
        dtype = self.seed.dtype
        n_models, width = query_index.shape
        d = self.seed.shape[-1]
        padding = None if bool(mask.all()) else ~mask
        chunks = list(_grid_chunks(n_models, width, chunk_tokens))
        features = features.to(dtype)
        tokenizer = self.tokenizer
        base, signed = tokenizer.query(features).chunk(2, dim=-1)
        tokens = features.new_empty(n_models, width, d)
        # Padded keys get weight 0, but 0 * garbage may be NaN: zeros there.
        kv_buffer = (torch.empty if padding is None else torch.zeros)(
            n_models, width, 2 * d, dtype=dtype, device=features.device
        )
        first_kv = self.blocks[0].compress.attention.key_value.weight
        for rows, cols in chunks:
            index = query_index[rows, cols].reshape(-1)
            y = score[rows, cols].reshape(-1, 1).to(dtype)
            x = tokens[rows, cols].view(-1, d)
            torch.index_select(base, 0, index, out=x)
            x.addcmul_(2 * y - 1, signed[index]).addcmul_(y, tokenizer.score)
            torch.mm(x, first_kv.T, out=kv_buffer[rows, cols].view(-1, 2 * d))
        pool_logits = None
        for i, block in enumerate(self.blocks):
            hidden = _compress_inference(block, kv_buffer, padding)
            last = i + 1 == len(self.blocks)
            if last:
                pool_keys = _pool_key_matrix(self.pool, self.seed)  # (d, h)
                pool_logits = tokens.new_empty(n_models, width, pool_keys.shape[1])
                next_weight = pool_keys
            else:
                next_weight = self.blocks[i + 1].compress.attention.key_value.weight.T
            next_out = pool_logits if last else kv_buffer
            _broadcast_inference(
                block.broadcast, tokens, hidden, chunks, next_weight, next_out
            )
        return _pool_inference(self.pool, self.seed, tokens, pool_logits, padding)

    # Tokens per chunk of forward_inference: its temporaries (about 3 KiB per
    # token in float32) stay in a 32 MiB L3 cache. 2048 and 8192 measured the
    # same on one thread; with two busy threads larger chunks won (fewer
    # thread barriers per token), so the largest cache-sized one.
    inference_chunk_tokens = 8192


def _grid_chunks(n_models, width, chunk_tokens):
    """(model slice, position slice) pairs tiling a (B, N) grid; each tile is
    contiguous in a C-ordered (B, N, ...) buffer and has ~chunk_tokens cells."""
    if width >= chunk_tokens:
        for b in range(n_models):
            for start in range(0, width, chunk_tokens):
                yield slice(b, b + 1), slice(start, min(start + chunk_tokens, width))
    else:
        step = max(1, chunk_tokens // width)
        for start in range(0, n_models, step):
            yield slice(start, min(start + step, n_models)), slice(0, width)


def _heads(x, n_heads):
    """(B, n, d) -> (B, h, n, d / h), a view."""
    b, n, d = x.shape
    return x.view(b, n, n_heads, d // n_heads).transpose(1, 2)


def _compress_inference(block, kv_buffer, padding):
    """The latents attending to the tokens' keys/values in ``kv_buffer``:
    the compress TBlock of a :class:`LatentBottleneckBlock`, shape (B, r, d)."""
    t = block.compress
    attention = t.attention
    h = attention.n_heads
    n_models, _, two_d = kv_buffer.shape
    d = two_d // 2
    latents = block.latents.unsqueeze(0)  # the same queries for every model
    q = _heads(attention.query(latents), h).expand(n_models, -1, -1, -1)
    # No key bias (softmax is shift-invariant); the value bias moves past the
    # attention into the output bias, because the weights sum to one.
    k, v = _heads(kv_buffer[..., :d], h), _heads(kv_buffer[..., d:], h)
    mask = None if padding is None else ~padding[:, None, None, :]
    attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    attended = attended.transpose(1, 2).reshape(-1, d)
    out = attention.out
    value_bias = attention.key_value.bias[d:]
    bias = torch.addmv(out.bias, out.weight, value_bias)
    attended = torch.addmm(bias, attended, out.weight.T).view(n_models, -1, d)
    hidden = t.norm1(latents + attended)
    return t.norm2(hidden + t.ffn(hidden))


def _broadcast_inference(t, tokens, hidden, chunks, next_weight, next_out):
    """The tokens attending to the latents ``hidden`` (TBlock ``t``), in place
    in ``tokens`` chunk by chunk; each chunk's result times ``next_weight``
    (d, k) goes to ``next_out`` (B, N, k) while it is in cache."""
    attention = t.attention
    h = attention.n_heads
    d = tokens.shape[-1]
    keys, values = _heads(attention.key_value(hidden), 2 * h).chunk(2, dim=1)
    ffn_in, ffn_out = t.ffn[0], t.ffn[3]
    gelu_ = torch._C._nn.gelu_ if hasattr(torch._C._nn, "gelu_") else None
    for rows, cols in chunks:
        block = tokens[rows, cols]
        x = block.view(-1, d)
        q = torch.addmm(attention.query.bias, x, attention.query.weight.T)
        attended = F.scaled_dot_product_attention(
            _heads(q.view(block.shape), h), keys[rows], values[rows]
        )
        attended = attended.transpose(1, 2).reshape(-1, d)
        # x becomes x + attention, the residual summed by the GEMM itself.
        x.add_(attention.out.bias).addmm_(attended, attention.out.weight.T)
        hid = F.layer_norm(x, (d,), t.norm1.weight, t.norm1.bias, t.norm1.eps)
        f = torch.addmm(ffn_in.bias, hid, ffn_in.weight.T)
        f = gelu_(f) if gelu_ is not None else F.gelu(f)
        hid.add_(ffn_out.bias).addmm_(f, ffn_out.weight.T)
        x.copy_(F.layer_norm(hid, (d,), t.norm2.weight, t.norm2.bias, t.norm2.eps))
        k = next_out.shape[-1]
        torch.mm(x, next_weight, out=next_out[rows, cols].view(-1, k))


def _pool_key_matrix(t, seed):
    """(d, h): the pooling scores of a token x are x @ this, per head, up to a
    per-head constant (the key bias) that softmax ignores."""
    attention = t.attention
    h = attention.n_heads
    d = seed.shape[-1]
    q = attention.query(seed.reshape(1, d)).view(h, d // h)  # (h, dh)
    w_k = attention.key_value.weight[:d].view(h, d // h, d)  # (h, dh, d)
    scale = (d // h) ** -0.5
    return torch.einsum("he,hed->dh", q, w_k) * scale


def _pool_inference(t, seed, tokens, logits, padding):
    """Learned-query pooling (TBlock ``t``) from per-token scores ``logits``
    (B, N, h): Σ a x first, then the value projection; shape (B, d)."""
    attention = t.attention
    h = attention.n_heads
    n_models, _, d = tokens.shape
    logits = logits.float()
    if padding is not None:
        logits = logits.masked_fill(padding.unsqueeze(-1), float("-inf"))
    weights = torch.softmax(logits, dim=1).to(tokens.dtype)  # (B, N, h)
    mixed = weights.transpose(1, 2) @ tokens  # (B, h, d)
    w_v = attention.key_value.weight[d:].view(h, d // h, d)
    values = torch.einsum("bhd,hed->bhe", mixed, w_v).reshape(n_models, d)
    attended = attention.out(values + attention.key_value.bias[d:])
    hidden = t.norm1(seed.reshape(1, d) + attended)
    return t.norm2(hidden + t.ffn(hidden))


class KernelReadout(nn.Module):
    """What kNN knows: kernel regression of a model's scores at a query.

    From a model's evaluation set {(φ(x_i), y_i)}, the readout at query x is
    ``r = Σ w_i y_i / Σ w_i`` with ``w_i = exp((cos(φ(x), φ(x_i)) − 1) / τ)``
    and a learned bandwidth τ, and the evidence ``log(1 + Σ w_i)``. Both are
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
        logits = (similarity - 1) / self.log_bandwidth.exp()
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
        return self._features(similarity, set_score.unsqueeze(1), set_mask.unsqueeze(1))

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
        narrower bandwidths, and below τ = 0.003 the per-model log-sum-exp
        of :meth:`pairwise_exact`. No (Q, R) matrix of evaluations is formed:
        memory is Q_chunk·U floats plus the pool.

        Parameters
        ----------
        queries : Tensor of shape (Q, F)
        pool : ReadoutPool
        query_chunk : int, default=256
            Most queries per chunk; fewer when U is large, so that the
            (U, Q_chunk) weights stay within 32 MB.
        neighbors : int or None, default=None
            An approximation: only the ``neighbors`` bank queries nearest each
            query (by cosine) enter its readout; a model with no evaluation
            among them reads 0.5 with zero evidence. None reads every stored
            evaluation (exact).
        index : {"exact", "hnsw"}, default="exact"
            How the nearest bank queries are found: every similarity and a
            top-k, or the pool's hnswlib graph (:meth:`ReadoutPool.nearest`;
            approximate, and faster when U is large).
        similarity_dtype : torch.dtype, default=torch.float32
            Precision of the (U, F) x (F, Q) similarity product, the largest;
            ``torch.bfloat16`` is an approximation (cosines to about 1e-2)
            for hardware with bfloat16 matrix units. Weights and sums stay
            float32 or float64.
        """
        tau = float(self.log_bandwidth.detach().exp())
        if tau < 0.003 and neighbors is None:
            return self.pairwise_exact(queries, *pool.evaluations)
        n_models = pool.n_models
        out = queries.new_zeros(queries.shape[0], n_models, self.n_outputs)
        if pool.n_rows == 0:  # no evaluations: readout 0.5, evidence 0
            return out
        # exp(-2 / tau) is the smallest weight: keep it well inside the normal
        # floats, so that no model's weights underflow to an empty set.
        dtype = torch.float32 if 2 / tau < 60 else torch.float64
        bank = pool.bank  # (U, F), unit rows
        unit = F.normalize(queries.to(bank.dtype), dim=-1)
        if neighbors is not None:
            similarity, nearest = pool.nearest(unit, neighbors, index)
            weights = ((similarity.to(dtype) - 1) / tau).exp_()
            # About 4M gathered cells per step.
            per_query = nearest.shape[1] * max(1, 2 * pool.n_rows // len(bank))
            step = max(1, 2**22 // per_query)
            for start in range(0, queries.shape[0], step):
                part = slice(start, start + step)
                sums = pool.gather(nearest[part], weights[part])
                self._readout(sums, pool, out[part])
            return out
        table = pool.table(dtype)  # (2M, U)
        bank = pool.bank_in(similarity_dtype)
        # Scale and shift folded into the product: (cos - 1) / tau.
        scaled = (unit * (1 / tau)).to(similarity_dtype)
        shift = torch.tensor(-1 / tau, dtype=bank.dtype, device=bank.device)
        step = max(1, min(query_chunk, 2**23 // len(bank)))
        # The sparse product gathers rows of the weights at random: it reads
        # them in blocks of about 4 MB (measured: 3x faster at 10k models).
        block = max(8, 2**20 // len(bank))
        for start in range(0, queries.shape[0], step):
            chunk = scaled[start : start + step]
            weights = torch.addmm(shift, chunk, bank.T).to(dtype).exp_()  # (q, U)
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
    def _readout(sums, pool, out):
        """Write features of weighted counts|sums (q, K + M) into ``out`` (q, M, 2)."""
        n_counts = pool.n_count_rows
        mass, total = sums[:, :n_counts], sums[:, n_counts:]
        if pool.count_row is not None:
            mass = mass[:, pool.count_row]
        readout = torch.where(mass > 0, total / mass, 0.5)
        out[:, :, 0] = 2 * readout - 1
        out[:, :, 1] = torch.log1p(mass)
        return out

    def pairwise_exact(
        self, queries, bank, set_index, set_score, indptr, query_chunk=256
    ):
        """:meth:`pairwise` through each model's log-sum-exp (any bandwidth;
        slower: it gathers a (Q, R) similarity matrix)."""
        n_models = len(indptr) - 1
        out = queries.new_zeros(queries.shape[0], n_models, self.n_outputs)
        queries, bank = F.normalize(queries, dim=-1), F.normalize(bank, dim=-1)
        for start in range(0, queries.shape[0], query_chunk):
            similarity = (queries[start : start + query_chunk] @ bank.T)[:, set_index]
            for m in range(n_models):
                rows = slice(int(indptr[m]), int(indptr[m + 1]))
                sim = similarity[:, rows]
                out[start : start + query_chunk, m] = self._features(
                    sim, set_score[rows], torch.ones_like(sim, dtype=torch.bool)
                )
        return out


class CorrectnessPredictor(nn.Module):
    """G_ψ: logit = MLP([z, u, z⊙u]) with u = Linear(φ) and one hidden layer.

    Parameters
    ----------
    n_features : int
    embedding_dim : int
    hidden_dim : int, default=64
    dropout : float, default=0.0
    n_extra : int, default=0
        Extra per-(model, query) inputs (a :class:`KernelReadout`'s features).
    """

    def __init__(
        self, n_features, embedding_dim, hidden_dim=64, dropout=0.0, n_extra=0
    ):
        super().__init__()
        self.project = nn.Linear(n_features, embedding_dim)
        self.hidden = nn.Linear(3 * embedding_dim, hidden_dim)
        self.extra = nn.Linear(n_extra, hidden_dim, bias=False) if n_extra else None
        self.output = nn.Linear(hidden_dim, 1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, z, features, query_index, extra=None):
        """Logits of shape (B, M) for B embeddings and M queries each.

        Parameters
        ----------
        z : Tensor of shape (B, d)
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, M)
        extra : Tensor of shape (B, M, n_extra), default=None
        """
        u = self.project(features)[query_index]
        zb = z.unsqueeze(1).expand_as(u)
        hidden = self.hidden(torch.cat([zb, u, zb * u], dim=-1))
        if self.extra is not None:
            hidden = hidden + self.extra(extra)
        return self.output(self.dropout(F.gelu(hidden))).squeeze(-1)

    def pairwise_logits(self, z, features, extra=None, query_chunk=256):
        """Logits for every (query, model) pair, shape (Q, M).

        Applies the query projection once per query and the model-only terms
        once per model: the first layer W[z, u, z⊙u] splits into
        W_z z + W_u u + (W_zu ⊙ z) u, so the pairwise work is one GEMM.

        Parameters
        ----------
        z : Tensor of shape (M, d)
        features : Tensor of shape (Q, F)
        extra : Tensor of shape (Q, M, n_extra), default=None
        query_chunk : int, default=256
            Queries per chunk, bounding memory to Q_chunk·M·hidden floats.
        """
        d = z.shape[1]
        w = self.hidden.weight  # (h, 3d)
        w_z, w_u, w_zu = w[:, :d], w[:, d : 2 * d], w[:, 2 * d :]
        model_term = z @ w_z.T + self.hidden.bias  # (M, h)
        # Fold W_u u in: (W_u + W_zu⊙z) u, one (h, d) matrix per model.
        model_matrix = w_u.unsqueeze(0) + w_zu.unsqueeze(0) * z.unsqueeze(1)
        m, h = model_term.shape
        flat_t = model_matrix.reshape(m * h, d).T
        bias = model_term.reshape(m * h)
        out_w = self.output.weight.reshape(h)
        chunks = []
        for start in range(0, features.shape[0], query_chunk):
            u = self.project(features[start : start + query_chunk])  # (q, d)
            # The model terms ride in the product's epilogue: no extra pass.
            hidden = torch.addmm(bias, u, flat_t)  # (q, M·h)
            if self.extra is not None:
                pairs = extra[start : start + query_chunk].reshape(-1, extra.shape[-1])
                hidden.view(-1, h).addmm_(pairs.to(hidden.dtype), self.extra.weight.T)
            chunks.append(F.gelu(hidden).view(-1, m, h) @ out_w)
        return torch.cat(chunks) + self.output.bias


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
            with warnings.catch_warnings():  # "sparse CSR support is in beta"
                warnings.simplefilter("ignore", UserWarning)
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
        self._by_bank = None  # (U, 2M) CSR arrays, for the neighbour readout
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

    def nearest(self, queries, k, index="exact", query_chunk=256):
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
        similarity, nearest = [], []
        step = max(1, min(query_chunk, 2**23 // len(self.bank)))
        for start in range(0, len(queries), step):
            values, rows = torch.topk(
                queries[start : start + step] @ self.bank.T, k, dim=1
            )
            similarity.append(values)
            nearest.append(rows)
        return torch.cat(similarity), torch.cat(nearest)

    # hnswlib graph settings: links per node, and candidate lists in building
    # and in search (at least k); larger is more accurate and slower.
    HNSW_M = 32
    HNSW_EF_CONSTRUCTION = 200
    HNSW_EF = 128

    def _hnsw(self, k):
        try:
            import hnswlib
        except ImportError as error:
            raise ImportError(
                "readout_index='hnsw' needs hnswlib: pip install "
                "'locus-sklearn[ann]' (or hnswlib)."
            ) from error
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

    def gather(self, nearest, weights):
        """Weighted counts|sums of a few bank queries per query, shape (Q, 2M):
        ``out[q] = Σ_j weights[q, j] · table[:, nearest[q, j]]``, reading only
        the stored cells of those bank queries."""
        if self._by_bank is None:
            with warnings.catch_warnings():  # "sparse CSR support is in beta"
                warnings.simplefilter("ignore", UserWarning)
                table = self._tables[torch.float32]
                coo = table.to_sparse_coo() if self.is_sparse else table.to_sparse()
                csr = coo.t().coalesce().to_sparse_csr()  # (U, 2M)
            self._by_bank = (
                csr.crow_indices().long(),
                csr.col_indices().long(),
                csr.values(),
            )
        crow, col, value = self._by_bank
        n_queries, k = nearest.shape
        width = self.n_count_rows + self.n_models
        start = crow[nearest].reshape(-1)
        length = crow[nearest + 1].reshape(-1) - start
        pair = torch.repeat_interleave(
            torch.arange(len(start), device=start.device), length
        )
        # Position of each gathered cell within its bank query's row.
        offset = torch.cumsum(length, 0) - length
        cell = torch.arange(len(pair), device=start.device) - offset[pair] + start[pair]
        out = weights.new_zeros(n_queries * width)
        out.index_add_(
            0,
            torch.div(pair, k, rounding_mode="floor") * width + col[cell],
            weights.reshape(-1)[pair] * value[cell].to(weights.dtype),
        )
        return out.view(n_queries, width)

    def nbytes(self):
        """Bytes held: the bank and the tables built so far."""
        tensors = [self.bank, *self._banks.values(), *self._tables.values()]
        total = 0
        for t in tensors:
            if t.layout == torch.sparse_csr:
                parts = (t.crow_indices(), t.col_indices(), t.values())
                total += sum(p.numel() * p.element_size() for p in parts)
            else:
                total += t.numel() * t.element_size()
        return total


# Version of the module layout (parameter names and shapes) that saved files
# record: a file of another layout cannot be loaded into this network.
NETWORK_LAYOUT = 1


class LocusNetwork(nn.Module):
    """Encoder F_θ and predictor G_ψ, trained jointly.

    The rest of the package uses three methods: ``forward`` for a training
    batch of episodes, :meth:`embed` for model embeddings and
    :meth:`pairwise_logits` for every (query, model) pair at prediction.
    ``forward`` takes, for each of B models, an encoder set (to build z_m)
    and a decoder set of queries (to predict). Gaussian noise of standard
    deviation ``query_noise`` is added to the query encodings in training
    mode only.

    Parameters
    ----------
    n_features : int
    embedding_dim, n_latents, n_blocks, n_heads : int
    hidden_dim : int, default=64
    dropout : float, default=0.0
    query_noise : float, default=0.0
    kernel_readout : bool, default=False
        Also give the predictor a :class:`KernelReadout` of the encoder set at
        each decoder query.
    n_profile_regions : int, default=0
        With R > 0, a linear *profile head* maps z to R logits: the model's
        P(correct) in each of R query regions. Training fits it to the
        decoder set's mean score per region (an auxiliary objective that
        makes z carry what a model is good at, not only how good); routing
        does not use it.

    Examples
    --------
    >>> import torch
    >>> net = LocusNetwork(8, embedding_dim=16, n_latents=4, n_blocks=1, n_heads=2)
    >>> features = torch.randn(5, 8)
    >>> enc_index = torch.tensor([[0, 1, 2], [3, 4, 0]])
    >>> mask = torch.tensor([[True, True, True], [True, True, False]])
    >>> logits = net(features, enc_index, torch.ones(2, 3), mask,
    ...              torch.tensor([[3, 4], [1, 2]]))
    >>> tuple(logits.shape)
    (2, 2)
    >>> z = net.embed(features, enc_index, torch.ones(2, 3), mask)
    >>> tuple(net.pairwise_logits(z, features).shape)
    (5, 2)
    """

    def __init__(
        self,
        n_features,
        embedding_dim=128,
        n_latents=64,
        n_blocks=2,
        n_heads=4,
        hidden_dim=64,
        dropout=0.0,
        query_noise=0.0,
        kernel_readout=False,
        n_profile_regions=0,
    ):
        super().__init__()
        self.embedding_dim = embedding_dim
        self.encoder = LocusEncoder(
            n_features, embedding_dim, n_latents, n_blocks, n_heads, dropout
        )
        self.readout = KernelReadout() if kernel_readout else None
        self.predictor = CorrectnessPredictor(
            n_features,
            embedding_dim,
            hidden_dim,
            dropout,
            n_extra=KernelReadout.n_outputs if kernel_readout else 0,
        )
        self.query_noise = query_noise
        self.profile = (
            nn.Linear(embedding_dim, n_profile_regions) if n_profile_regions else None
        )

    def embed(self, features, query_index, score, mask):
        """Model embeddings z of shape (B, d) from padded evaluation sets.

        Parameters
        ----------
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, N)
            Index into ``features`` of each evaluation's query.
        score : Tensor of shape (B, N)
        mask : BoolTensor of shape (B, N)
            True for real evaluations, False for padding.
        """
        return self.encoder(features, query_index, score, mask)

    def pairwise_logits(
        self, z, queries, evaluations=None, *, readout_neighbors=None,
        readout_index="exact", readout_dtype=torch.float32,
    ):  # fmt: skip
        """Logits of P(correct) for every (query, model) pair, shape (Q, M).

        Parameters
        ----------
        z : Tensor of shape (M, d)
        queries : Tensor of shape (Q, F)
        evaluations : EvaluationSets or ReadoutPool, default=None
            The M models' evaluations; required with the kernel readout.
            A :class:`ReadoutPool` built once serves many calls.
        readout_neighbors : int or None, default=None
        readout_index : {"exact", "hnsw"}, default="exact"
        readout_dtype : torch.dtype, default=torch.float32
            The readout's approximations (``neighbors``, ``index`` and
            ``similarity_dtype`` of :meth:`KernelReadout.pairwise_pool`); the
            defaults read every evaluation in float32.
        """
        extra = None
        if self.readout is not None:
            if evaluations is None:
                raise ValueError(
                    "kernel_readout=True needs the models' evaluations to predict."
                )
            if not isinstance(evaluations, ReadoutPool):
                evaluations = ReadoutPool(evaluations)
            extra = self.readout.pairwise_pool(
                queries,
                evaluations,
                neighbors=readout_neighbors,
                index=readout_index,
                similarity_dtype=readout_dtype,
            )
        return self.predictor.pairwise_logits(z, queries, extra)

    def forward(
        self, features, enc_index, enc_score, enc_mask, dec_index,
        return_embedding=False,
    ):  # fmt: skip
        """Logits of shape (B, M) for the decoder queries of each model.

        Parameters
        ----------
        features : Tensor of shape (U, F)
            Encodings of the batch's queries; the indices point into it.
        enc_index, enc_score, enc_mask : Tensor of shape (B, N)
            Encoder sets (see :meth:`embed`).
        dec_index : LongTensor of shape (B, M)
        return_embedding : bool, default=False
            Also return the embeddings z, shape (B, d): ``(logits, z)``.
        """
        if self.training and self.query_noise > 0:
            features = features + self.query_noise * torch.randn_like(features)
        z = self.embed(features, enc_index, enc_score, enc_mask)
        extra = None
        if self.readout is not None:
            extra = self.readout(
                features[dec_index], features[enc_index], enc_score, enc_mask
            )
        logits = self.predictor(z, features, dec_index, extra)
        return (logits, z) if return_embedding else logits


class MaskedBCEWithLogitsLoss(nn.Module):
    """Binary cross-entropy over non-padding targets; padding targets are NaN.

    Fractional targets in [0, 1] are allowed (averaged duplicate runs).
    """

    def forward(self, logits, target):
        valid = ~torch.isnan(target)
        return F.binary_cross_entropy_with_logits(logits[valid], target[valid])
