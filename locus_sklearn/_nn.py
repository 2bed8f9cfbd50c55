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

import torch
from torch import nn
from torch.nn import functional as F

from ._dropout import Dropout, dropout
from ._readout import KernelReadout, ReadoutPool


def autocast_enabled(device_type):
    """Whether autocast is on for ``device_type`` ("cpu", "cuda", ...).

    ``torch.is_autocast_enabled(device_type)`` takes a device type from torch
    2.4; the package supports torch 2.2, whose function takes no argument
    (CUDA only) beside ``is_autocast_cpu_enabled``.
    """
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4
        if device_type == "cpu":
            return torch.is_autocast_cpu_enabled()
        return torch.is_autocast_enabled()


__all__ = [
    "NETWORK_LAYOUT",
    "CorrectnessPredictor",
    "EvaluationTokenizer",
    "LocusEncoder",
    "LocusNetwork",
    "MaskedBCEWithLogitsLoss",
    "TBlock",
]


def _gather_rows(table, index):
    """``table[index]`` for a 2-d table: (U, k) rows at a (..., ) index ->
    (..., k). Through index_select, whose backward adds rows with index_add_:
    advanced indexing's accumulating index_put_ took about four times as
    long for a training batch's 10,000 tokens on a CPU."""
    return torch.index_select(table, 0, index.reshape(-1)).view(*index.shape, -1)


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
        projected = self.query(features)
        # One gather of both halves; the sum in two fused multiply-adds.
        base, signed = _gather_rows(projected, query_index).chunk(2, dim=-1)
        y = score.unsqueeze(-1).to(base.dtype)
        return torch.addcmul(base, 2 * y - 1, signed).addcmul_(y, self.score)

    def tables(self, features):
        """Every query's token at y = 0 and at y = 1, shape (U, 2, d).

        h_ω is affine in y, so the token of any score is the linear
        interpolation of the two: h(φ, y) = (1 − y) h(φ, 0) + y h(φ, 1); a
        binary score selects one row. Each row is computed with the same
        operations as :meth:`forward`, so selected rows equal its tokens.

        Parameters
        ----------
        features : Tensor of shape (U, F)
        """
        base, signed = self.query(features).chunk(2, dim=-1)
        return torch.stack([base - signed, (base + signed).add_(self.score)], dim=1)


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
        if self.training and self.dropout > 0 and q.device.type == "cpu":
            # scaled_dot_product_attention's CPU dropout takes its slow per-element
            # mask (and its unfused path anyway): the same maths, bulk masks.
            # Scaled on q, (n_q, d / h) per head, not on the (n_q, n_k) scores.
            scores = (q * (d // h) ** -0.5) @ k.transpose(-2, -1)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = dropout(torch.softmax(scores, dim=-1), self.dropout)
            attended = weights @ v
        else:
            attended = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=mask,
                dropout_p=self.dropout if self.training else 0.0,
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
            Dropout(dropout),
            nn.Linear(2 * embedding_dim, embedding_dim),
        )
        self.norm2 = nn.LayerNorm(embedding_dim)
        self.dropout = Dropout(dropout)

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
    standardize : bool, default=False
        Standardise z across models: each coordinate minus its mean over
        the batch of models, divided by its standard deviation (a
        ``BatchNorm1d`` without affine parameters; its running statistics
        at inference, and for a training batch of one model). Measured on
        planted specialists of equal strength: without it the trained
        encoder's embeddings were about 0.1 % of their norm apart, too
        little for the predictor to read.
    """

    def __init__(
        self,
        n_features,
        embedding_dim=128,
        n_latents=64,
        n_blocks=2,
        n_heads=4,
        dropout=0.0,
        standardize=False,
    ):
        super().__init__()
        self.tokenizer = EvaluationTokenizer(n_features, embedding_dim)
        self.blocks = nn.ModuleList(
            LatentBottleneckBlock(embedding_dim, n_heads, n_latents, dropout)
            for _ in range(n_blocks)
        )
        self.seed = nn.Parameter(torch.randn(1, 1, embedding_dim) * 0.02)
        self.pool = TBlock(embedding_dim, n_heads, dropout)
        self.standardize = (
            nn.BatchNorm1d(embedding_dim, affine=False) if standardize else None
        )

    def forward(self, features, query_index, score, mask, tables=None):
        """Embeddings of shape (B, d).

        Parameters
        ----------
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, N)
        score : Tensor of shape (B, N)
        mask : BoolTensor of shape (B, N)
            True for real evaluations, False for padding; every row needs
            at least one True. The scores at padding are not read.
        tables : tuple of Tensor, default=None
            ``self.inference_tables(features)``, computed once by a caller
            that embeds many batches over the same features; None computes
            them here. Read by the inference path only (the training path,
            with autograd or under autocast, projects ``features`` itself).
        """
        args = (features, query_index, score, mask)
        if not (self.training or torch.is_grad_enabled()) and not (
            autocast_enabled(features.device.type)
        ):
            z = self.forward_inference(*args, tables=tables)
        else:
            z = self.forward_plain(*args)
        return z if self.standardize is None else self._standardize(z)

    def _standardize(self, z):
        norm = self.standardize
        if self.training and z.shape[0] == 1:
            # Batch statistics need two models; one reads the running ones.
            return F.batch_norm(
                z, norm.running_mean, norm.running_var, training=False, eps=norm.eps
            )
        return norm(z)

    def forward_plain(self, features, query_index, score, mask):
        """:meth:`forward` module by module (training's path, autograd)."""
        padding = _padding(mask)
        if padding is not None:
            score = score.masked_fill(padding, 0)
        tokens = self.tokenizer(features, query_index, score)
        for block in self.blocks:
            tokens = block(tokens, padding)
        return _pool_plain(self.pool, self.seed, tokens, padding)

    def forward_inference(
        self, features, query_index, score, mask, chunk_tokens=None, tables=None
    ):
        """:meth:`forward` without autograd, streamed through the cache.

        Same maths as :meth:`forward_plain`, rearranged for inference (only
        rounding differs, about 1e-6 relative in float32):

        - the tokens and the first block's keys/values are affine in the
          score, so both are computed per query at y = 0 and y = 1
          (:meth:`inference_tables`) and each token only selects its row (a
          binary score) or interpolates the two: no per-token projection
          before the first attention;
        - every later per-token step (the broadcast TBlock with its FFN,
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
            Tokens per chunk; None uses ``inference_chunk_tokens`` on the
            CPU and one chunk of the whole pass on other devices.
        tables : tuple of Tensor, default=None
            As in :meth:`forward`.

        Returns
        -------
        z : Tensor of shape (B, d)
        """
        dtype = self.seed.dtype
        n_models, width = query_index.shape
        if chunk_tokens is None and features.device.type != "cpu":
            # The chunks exist for a CPU's cache; on a GPU each is a round of
            # kernel launches, and the pass (bounded by the caller) fits.
            chunk_tokens = n_models * width
        chunk_tokens = chunk_tokens or self.inference_chunk_tokens
        d = self.seed.shape[-1]
        padding = _padding(mask)
        if padding is not None:
            score = score.masked_fill(padding, 0)
        chunks = list(_grid_chunks(n_models, width, chunk_tokens))
        if tables is None:
            tables = self.inference_tables(features.to(dtype))
        token_table, kv_table = (t.to(dtype) for t in tables)
        tokens = token_table.new_empty(n_models, width, d)
        # Padded keys get weight 0, but 0 * garbage may be NaN: zeros there.
        kv_buffer = (torch.empty if padding is None else torch.zeros)(
            n_models, width, 2 * d, dtype=dtype, device=features.device
        )
        # Padding's scores are zeros by now: they do not decide the path.
        binary = bool(((score == 0) | (score == 1)).all())
        if binary:
            # Row 2u + y of the (2U, k) views is query u's token at score y.
            token_rows, kv_rows = token_table.flatten(0, 1), kv_table.flatten(0, 1)
            table_index = 2 * query_index + (score == 1)
        else:
            token_pairs, kv_pairs = token_table.flatten(1), kv_table.flatten(1)
            # Reused by every chunk: a fresh array each time cost about as
            # much in first-touch page faults as the gather itself.
            most = max((r.stop - r.start) * (c.stop - c.start) for r, c in chunks)
            pair_buffer = token_table.new_empty(most * 4 * d)
        for rows, cols in chunks:
            x = tokens[rows, cols].view(-1, d)
            kv = kv_buffer[rows, cols].view(-1, 2 * d)
            # index_select, not advanced indexing: several times faster here.
            if binary:
                index = table_index[rows, cols].reshape(-1)
                for table, out in ((token_rows, x), (kv_rows, kv)):
                    torch.index_select(table, 0, index, out=out)
            else:
                index = query_index[rows, cols].reshape(-1)
                y = score[rows, cols].reshape(-1, 1).to(dtype)
                for table, out in ((token_pairs, x), (kv_pairs, kv)):
                    k = out.shape[1]
                    pair = pair_buffer[: len(index) * 2 * k].view(-1, 2 * k)
                    torch.index_select(table, 0, index, out=pair)
                    torch.lerp(pair[:, :k], pair[:, k:], y, out=out)
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

    def inference_tables(self, features):
        """What :meth:`forward_inference` reads per query instead of per token.

        Every query's token (:meth:`EvaluationTokenizer.tables`) and the first
        block's keys/values of that token, at y = 0 and y = 1. The key bias is
        left out and the value bias is added after the attention, as
        :meth:`forward_inference` does.

        Parameters
        ----------
        features : Tensor of shape (U, F)

        Returns
        -------
        tokens : Tensor of shape (U, 2, d)
        keys_values : Tensor of shape (U, 2, 2d)
        """
        tokens = self.tokenizer.tables(features)
        first_kv = self.blocks[0].compress.attention.key_value.weight
        keys_values = tokens.flatten(0, 1) @ first_kv.T
        return tokens, keys_values.view(len(tokens), 2, -1)

    # Tokens per chunk of forward_inference: its temporaries (about 3 KiB per
    # token in float32) stay in a 32 MiB L3 cache. 2048 and 8192 measured the
    # same on one thread; with two busy threads larger chunks won (fewer
    # thread barriers per token), so the largest cache-sized one.
    inference_chunk_tokens = 8192


def _padding(mask):
    """``~mask``, True on padding, or None where there is none (attention
    then takes its fastest, unmasked kernel).

    A row without any evaluation would attend over keys that are all masked
    out: a softmax over only -inf, NaN in its embedding and, through the
    backward pass, in every parameter's gradient, even with its targets
    masked. Such a row is refused instead.
    """
    if mask.shape[-1] and bool(mask.all()):
        return None
    empty = ~mask.any(dim=-1)
    if bool(empty.any()):
        rows = empty.nonzero().flatten().tolist()
        shown = ", ".join(map(str, rows[:10])) + (", ..." if len(rows) > 10 else "")
        raise ValueError(
            f"mask has no True entry (no evaluation) in {len(rows)} of its "
            f"{len(mask)} rows: [{shown}]; every row needs at least one "
            "evaluation (padding is valid only alongside real ones)."
        )
    return ~mask


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
        torch.ops.aten.gelu_(f)
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


def _pool_plain(t, seed, tokens, padding):
    """Learned-query pooling (TBlock ``t``) with autograd and dropout, shape
    (B, d): the maths of ``t(seed, tokens, padding)`` without projecting the
    tokens to keys and values (a ninth of the encoder's per-token products).

    As in :func:`_pool_inference`, the scores are ``x @ _pool_key_matrix``
    and the values ``W_v Σ a x + b_v Σ a``; the sum of the weights a is 1
    except where dropout has zeroed and rescaled some, so it is kept. The
    weights are dropped as (B, h, N), the layout of the attention's own
    (B, h, 1, N) weights: the same masks as through ``t``.
    """
    logits = (tokens @ _pool_key_matrix(t, seed)).transpose(1, 2)  # (B, h, N)
    if padding is not None:
        logits = logits.masked_fill(padding.unsqueeze(1), float("-inf"))
    weights = dropout(torch.softmax(logits, dim=-1), t.attention.dropout, t.training)
    return _pool_output(t, seed, tokens, weights, weights.sum(-1, keepdim=True))


def _pool_inference(t, seed, tokens, logits, padding):
    """Learned-query pooling (TBlock ``t``) from per-token scores ``logits``
    (B, N, h): Σ a x first, then the value projection; shape (B, d)."""
    # The softmax over up to N keys in at least float32 (bfloat16 keeps about
    # 3 significant digits), in the parameters' dtype where that is wider.
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    if padding is not None:
        logits = logits.masked_fill(padding.unsqueeze(-1), float("-inf"))
    weights = torch.softmax(logits, dim=1).to(tokens.dtype)  # (B, N, h)
    return _pool_output(t, seed, tokens, weights.transpose(1, 2))


def _pool_output(t, seed, tokens, weights, weight_sum=None):
    """The pooling TBlock ``t``'s output (B, d) from its attention weights
    (B, h, N) over ``tokens`` (B, N, d): the values ``W_v Σ a x + b_v Σ a``,
    with ``weight_sum`` Σ a of shape (B, h, 1), or None where the weights sum
    to one; then the output projection, residual, LayerNorms and FFN."""
    attention = t.attention
    h = attention.n_heads
    n_models, _, d = tokens.shape
    mixed = weights @ tokens  # (B, h, d)
    w_v = attention.key_value.weight[d:].view(h, d // h, d)
    b_v = attention.key_value.bias[d:]
    values = torch.einsum("bhd,hed->bhe", mixed, w_v)
    if weight_sum is None:
        values = values.reshape(n_models, d) + b_v
    else:
        values = (values + weight_sum * b_v.view(h, d // h)).reshape(n_models, d)
    attended = attention.out(values)
    # Dropout acts in training only: the inference path passes through it.
    hidden = t.norm1(seed.reshape(1, d) + t.dropout(attended))
    return t.norm2(hidden + t.dropout(t.ffn(hidden)))


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
        self.dropout = Dropout(dropout)

    def forward(self, z, features, query_index, extra=None):
        """Logits of shape (B, M) for B embeddings and M queries each.

        Parameters
        ----------
        z : Tensor of shape (B, d)
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, M)
        extra : Tensor of shape (B, M, n_extra), default=None
        """
        hidden = self._hidden(z, *self.row_terms(features, query_index, extra))
        return self.output(self.dropout(F.gelu(hidden))).squeeze(-1)

    def row_terms(self, features, query_index, extra=None):
        """What the logits at B models' rows need besides the embeddings:
        the query projections u (B, M, d) and the readout's term of the
        first layer (B, M, h), None without a readout. Fixed while only z
        changes, as in the refinement's steps.

        Parameters
        ----------
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, M)
        extra : Tensor of shape (B, M, n_extra), default=None
        """
        u = _gather_rows(self.project(features), query_index)
        return u, None if self.extra is None else self.extra(extra)

    def _hidden(self, z, u, extra_term):
        """The first layer's pre-activations (B, M, h) at embeddings z (B, d)."""
        # W[z, u, z⊙u] + b as (W_u + W_zu⊙z) u + (W_z z + b), one (h, d)
        # matrix per model as in pairwise_logits: a third of the product's
        # multiply-adds, and no (B, M, 3d) concatenation.
        model_term, model_matrix = self._model_terms(z)
        hidden = torch.baddbmm(model_term.unsqueeze(1), u, model_matrix.transpose(1, 2))
        return hidden if extra_term is None else hidden + extra_term

    def logits_and_jacobian(self, z, u, extra_term, jacobian=True):
        """Logits (B, M) in evaluation mode (no dropout) at the rows of
        :meth:`row_terms`, and their Jacobian with respect to z, shape
        (B, M, d) (None with ``jacobian=False``): what a Gauss-Newton step
        on z needs, without autograd's one backward pass per row.

        Parameters
        ----------
        z : Tensor of shape (B, d)
        u, extra_term : the outputs of :meth:`row_terms`
        jacobian : bool, default=True
        """
        hidden = self._hidden(z, u, extra_term)
        w_out = self.output.weight.reshape(-1)
        logits = F.gelu(hidden) @ w_out + self.output.bias
        if not jacobian:
            return logits, None
        # d logit / d hidden = w_out ⊙ GELU'(hidden), GELU'(h) = Φ(h) + h φ(h)
        # (F.gelu's exact form); d hidden / d z_k = W_z[:, k] + W_zu[:, k] u_k.
        cdf = 0.5 * (1.0 + torch.erf(hidden * 0.5**0.5))
        pdf = torch.exp(-0.5 * hidden.square()) * (2.0 * torch.pi) ** -0.5
        g = w_out * (cdf + hidden * pdf)  # (B, M, h)
        d = z.shape[1]
        w = self.hidden.weight
        return logits, g @ w[:, :d] + (g @ w[:, 2 * d :]) * u

    def _model_terms(self, z):
        """The first layer's model-only parts for embeddings z (M, d):
        ``W_z z + b`` (M, h) and ``W_u + W_zu⊙z`` (M, h, d), so that the
        layer at a query projection u is ``(W_u + W_zu⊙z) u + W_z z + b``."""
        d = z.shape[1]
        w = self.hidden.weight  # (h, 3d)
        w_z, w_u, w_zu = w[:, :d], w[:, d : 2 * d], w[:, 2 * d :]
        model_term = torch.addmm(self.hidden.bias, z, w_z.T)
        return model_term, w_u.unsqueeze(0) + w_zu.unsqueeze(0) * z.unsqueeze(1)

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
        model_term, model_matrix = self._model_terms(z)
        m, h = model_term.shape
        flat_t = model_matrix.reshape(m * h, d).T
        bias = model_term.reshape(m * h)
        out_w = self.output.weight.reshape(h)
        n_queries = features.shape[0]
        # Without autograd, every chunk's products write into one hidden
        # buffer and into the logits, and GELU runs in place: a fresh (q, M·h)
        # array per chunk cost about as much in first-touch page faults as its
        # product (4,096 queries x 112 models: 164 -> 107 ms, the same logits).
        # Under autocast the products' dtype is autocast's, not the buffers'.
        reuse = not torch.is_grad_enabled() and not autocast_enabled(
            features.device.type
        )
        if reuse:
            logits = bias.new_empty(n_queries, m)
            buffer = bias.new_empty(min(query_chunk, n_queries), m * h)
        chunks = []
        for start in range(0, n_queries, query_chunk):
            u = self.project(features[start : start + query_chunk])  # (q, d)
            # The model terms ride in the product's epilogue: no extra pass.
            out = buffer[: len(u)] if reuse else None
            hidden = torch.addmm(bias, u, flat_t, out=out)  # (q, M·h)
            if self.extra is not None:
                pairs = extra[start : start + query_chunk].reshape(-1, extra.shape[-1])
                weight = self.extra.weight.T.to(hidden.dtype)  # autocast's dtype
                hidden.view(-1, h).addmm_(pairs.to(hidden.dtype), weight)
            if reuse:
                torch.ops.aten.gelu_(hidden)
                rows = logits[start : start + len(u)].view(-1)
                torch.mv(hidden.view(-1, h), out_w, out=rows)
            else:
                chunks.append(F.gelu(hidden).view(-1, m, h) @ out_w)
        return (logits if reuse else torch.cat(chunks)) + self.output.bias


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
    standardize_embedding : bool, default=False
        Standardise z across models (:class:`LocusEncoder`'s ``standardize``).

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
        standardize_embedding=False,
    ):
        super().__init__()
        self.embedding_dim = embedding_dim
        self.encoder = LocusEncoder(
            n_features, embedding_dim, n_latents, n_blocks, n_heads, dropout,
            standardize_embedding,
        )  # fmt: skip
        self.readout = KernelReadout() if kernel_readout else None
        self.predictor = CorrectnessPredictor(
            n_features,
            embedding_dim,
            hidden_dim,
            dropout,
            n_extra=KernelReadout.n_outputs if kernel_readout else 0,
        )
        # A float: an int (10**30) would go to torch as an int64 scalar.
        self.query_noise = float(query_noise)
        self.profile = (
            nn.Linear(embedding_dim, n_profile_regions) if n_profile_regions else None
        )

    def embed(self, features, query_index, score, mask, tables=None):
        """Model embeddings z of shape (B, d) from padded evaluation sets.

        Parameters
        ----------
        features : Tensor of shape (U, F)
        query_index : LongTensor of shape (B, N)
            Index into ``features`` of each evaluation's query.
        score : Tensor of shape (B, N)
        mask : BoolTensor of shape (B, N)
            True for real evaluations, False for padding.
        tables : tuple of Tensor, default=None
            ``self.inference_tables(features)``, from a caller that embeds
            many batches over the same features (see
            :meth:`LocusEncoder.forward`).
        """
        return self.encoder(features, query_index, score, mask, tables)

    def inference_tables(self, features):
        """The per-query tables :meth:`embed` reads at inference
        (:meth:`LocusEncoder.inference_tables`), for a caller that embeds many
        batches over the same ``features`` of shape (U, F)."""
        return self.encoder.inference_tables(features)

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
            extra = self.readout.episodes(
                features, dec_index, enc_index, enc_score, enc_mask
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
