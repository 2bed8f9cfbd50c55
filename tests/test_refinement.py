"""Semi-amortised refinement of model embeddings (``refine_steps``): the
leave-one-out readout hand-computed, what the refinement optimises, its
independence of batching, its place in transform, routing and saved files.

The tiny settings and the fitted ``pool`` / ``router`` fixtures are in conftest.py.
"""

import copy

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.utils._param_validation import InvalidParameterError

from locus_sklearn import LocusEmbedder, LocusRouter, _refinement, _training
from locus_sklearn._evals import check_evals
from locus_sklearn._files import read_file, write_file
from locus_sklearn._nn import CorrectnessPredictor
from locus_sklearn._readout import KernelReadout


def _objective(module, table, X_query, z, prior=0.0, z0=None, scale=None):
    """Each model's refinement objective at the tensor z (autograd flows):
    the mean BCE on its own rows of ``table``, the readout read from its
    other rows, plus ``prior · mean(((z - z0) / scale)²)``."""
    models = np.arange(table.n_models)
    # The module's device: a GPU where the estimators chose one.
    device = next(module.parameters()).device
    query_index, score, mask = _refinement._padded_rows(table, models, device)
    features = torch.as_tensor(X_query, dtype=torch.float32, device=device)
    unit = torch.nn.functional.normalize(features, dim=-1)
    with torch.no_grad():
        extra = _refinement._leave_one_out_readout(
            module.readout, unit, query_index, score, mask
        )
    logits = module.predictor(z.to(device), features, query_index, extra)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, score, weight=mask.float(), reduction="none"
    )
    loss = (bce.sum(1) / mask.sum(1)).cpu()
    if prior:
        delta = (z - torch.as_tensor(z0)) / torch.as_tensor(scale)
        loss = loss + prior * delta.square().mean(1)
    return loss


def _own_loss(module, table, X_query, z):
    """Each model's mean BCE on its own rows at embeddings ``z``: what the
    refinement lowers."""
    with torch.no_grad():
        return _objective(module, table, X_query, torch.as_tensor(z)).numpy()


def _float64_optimum(module, table, X_query, z, z0, scale, prior):
    """Each model's optimum of the refinement objective (as ``_objective``:
    the mean BCE on its own rows, the readout read from its other rows, plus
    the prior), by Newton's method in float64 with autograd's exact Hessian,
    started from ``z``: an independent reference for the package's float32
    Gauss-Newton steps. Shape of ``z``, float64."""
    models = np.arange(table.n_models)
    device = next(module.parameters()).device
    query_index, score, mask = _refinement._padded_rows(table, models, device)
    features = torch.as_tensor(X_query, dtype=torch.float32, device=device)
    unit = torch.nn.functional.normalize(features, dim=-1)
    with torch.no_grad():  # the readout reads the stored rows, not z
        extra = _refinement._leave_one_out_readout(
            module.readout, unit, query_index, score, mask
        ).double()
    predictor = copy.deepcopy(module.predictor).double()
    features, score = features.double(), score.double()
    weight = mask.double() / mask.sum(1, keepdim=True)
    z, z0, scale = (
        torch.as_tensor(a, dtype=torch.float64, device=device) for a in (z, z0, scale)
    )
    optimum = []
    for m in models:

        def objective(delta, m=m):
            logits = predictor(
                (z0[m] + scale * delta)[None],
                features,
                query_index[m : m + 1],
                extra[m : m + 1],
            )[0]
            bce = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, score[m], reduction="none"
            )
            return (bce * weight[m]).sum() + prior * delta.square().mean()

        delta = (z[m] - z0[m]) / scale
        for _ in range(20):
            gradient = torch.autograd.functional.jacobian(objective, delta)
            hessian = torch.autograd.functional.hessian(objective, delta)
            step = torch.linalg.solve(hessian, gradient)
            delta = delta - step
            if step.abs().max() < 1e-12:
                break
        else:
            raise AssertionError(f"float64 Newton did not converge for model {m}")
        optimum.append(z0[m] + scale * delta)
    return torch.stack(optimum).cpu().numpy()


@pytest.mark.parametrize("bandwidth", [0.5, 0.01])
def test_leave_one_out_readout_hand_computed(monkeypatch, bandwidth):
    """Each row reads its model's other rows; 0.01 takes the readout's
    log-sum-exp path (weights under float32's range), 0.5 its direct sums."""
    table = check_evals(
        pd.DataFrame(
            {"model": ["a", "a", "a", "b", "b"],
             "query": ["q0", "q1", "q2", "q0", "q2"],
             "score": [1.0, 0.0, 1.0, 0.0, 1.0]}
        )
    )  # fmt: skip
    query_index, score, mask = _refinement._padded_rows(table, np.arange(2), "cpu")
    assert query_index.tolist() == [[0, 1, 2], [0, 2, 0]]
    assert score.tolist() == [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    assert mask.tolist() == [[True, True, True], [True, True, False]]
    unit = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    readout = KernelReadout(bandwidth=bandwidth)
    with torch.no_grad():
        got = _refinement._leave_one_out_readout(
            readout, unit, query_index, score, mask
        )
    w_06, w_0, w_08 = np.exp((np.array([0.6, 0.0, 0.8]) - 1) / bandwidth)
    # Model a at q0 reads q1 (cosine 0.6, score 0) and q2 (cosine 0, score 1).
    np.testing.assert_allclose(
        got[0, 0].numpy(), [2 * w_0 / (w_06 + w_0) - 1, np.log1p(w_06 + w_0)],
        rtol=1e-5, atol=1e-12,
    )  # fmt: skip
    # Model a at q1 reads q0 (0.6, 1) and q2 (0.8, 1): every score 1.
    np.testing.assert_allclose(
        got[0, 1].numpy(), [1.0, np.log1p(w_06 + w_08)], rtol=1e-5, atol=1e-12
    )
    # Model b at q2 reads q0 only (cosine 0, score 0); its padding is not read.
    np.testing.assert_allclose(
        got[1, 1].numpy(), [-1.0, np.log1p(w_0)], rtol=1e-5, atol=1e-12
    )
    # Blocks of one row give the same features.
    monkeypatch.setattr(_refinement, "_READOUT_CELLS", 1)
    blocked = _refinement._leave_one_out_readout(
        readout, unit, query_index, score, mask
    )
    torch.testing.assert_close(blocked, got)


@pytest.mark.parametrize("bandwidth", [0.5, 0.1, 0.01])
def test_bank_leave_one_out_readout_equals_the_per_model_readout(bandwidth):
    """Read from one product over the shared queries, every row's features
    equal the per-model path's; without shared queries it declines."""
    rng = np.random.default_rng(0)
    n_queries, n_models = 12, 5
    frame = pd.DataFrame(
        [(f"m{m}", f"q{q}", float(rng.random() < 0.6))
         for m in range(n_models)
         for q in rng.choice(n_queries, size=8 + m % 3, replace=False)],
        columns=["model", "query", "score"],
    )  # fmt: skip
    frame.loc[::4, "score"] = 0.25  # graded scores too
    table = check_evals(frame)
    unit = torch.nn.functional.normalize(
        torch.as_tensor(rng.normal(size=(table.n_queries, 6)), dtype=torch.float32),
        dim=-1,
    )
    readout = KernelReadout(bandwidth=bandwidth)
    with torch.no_grad():
        bank = _refinement._bank_leave_one_out_readout(readout, unit, table)
        models = np.arange(n_models)
        query_index, score, mask = _refinement._padded_rows(table, models, "cpu")
        per_model = _refinement._leave_one_out_readout(
            readout, unit, query_index, score, mask
        )
    rows, _ = _training.padded_rows(table.indptr, models)
    assert bank.shape == (len(table.score), 2)
    torch.testing.assert_close(
        bank[torch.as_tensor(rows)][mask], per_model[mask], rtol=1e-5, atol=1e-6
    )
    # Every model on its own queries: the per-model path is cheaper.
    alone = check_evals(
        {"model": ["a", "a", "b", "b"], "query": ["q0", "q1", "q2", "q3"],
         "score": [1.0, 0.0, 1.0, 1.0]}
    )  # fmt: skip
    assert _refinement._bank_leave_one_out_readout(readout, unit[:4], alone) is None


def test_bank_leave_one_out_readout_declines_a_large_pool(monkeypatch):
    """Its (U, 2M) matrices are bounded: past the bound, the per-model path."""
    table = check_evals(
        {"model": ["a", "a", "a", "b", "b", "b"], "query": ["q0", "q1", "q2"] * 2,
         "score": [1.0, 0.0, 1.0, 1.0, 1.0, 0.0]}
    )  # fmt: skip
    unit = torch.eye(3)
    readout = KernelReadout(bandwidth=0.5)
    assert _refinement._bank_leave_one_out_readout(readout, unit, table) is not None
    # 2 matrices x 3 queries x 4 columns x 8 bytes = 192 bytes.
    monkeypatch.setattr(_refinement, "_BANK_BYTES", 191)
    assert _refinement._bank_leave_one_out_readout(readout, unit, table) is None


def test_embedding_scale_hand_computed():
    z = np.array([[0.0, 1.0], [2.0, 1.0], [4.0, 1.0]])
    np.testing.assert_allclose(_refinement.embedding_scale(z), [2.0, 1e-6])
    np.testing.assert_array_equal(_refinement.embedding_scale(z[:1]), [1.0, 1.0])


def _refinement_inputs(router, pool):
    """The trained module, the pool's table, its query encodings, the
    unrefined embeddings and the step scale, as transform refines them."""
    embedder = router.embedder_
    table = check_evals(pool.evals)
    return (
        embedder.net_.module_,
        table,
        embedder._encode(table.queries),
        embedder.transform(pool.evals),
        embedder.embedding_scale_,
    )


def test_refinement_reaches_each_models_optimum(router, pool):
    module, table, X_query, z0, scale = _refinement_inputs(router, pool)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    grads = [None if p.grad is None else p.grad.clone() for p in module.parameters()]
    kwargs = dict(scale=scale, batch_tokens=16384)
    refined = _refinement.refine_embeddings(
        module, table, X_query, z0, steps=10, prior=0.1, **kwargs
    )
    assert (
        _own_loss(module, table, X_query, refined)
        < _own_loss(module, table, X_query, z0)
    ).all()
    # A stationary point of every model's objective (autograd's gradient,
    # not the steps' hand-written one): under a hundredth of the gradient at
    # z0 (the float32 gradient's rounding is the floor here; the float64
    # optimum is checked in
    # test_refinement_ends_at_each_models_optimum_to_float32_rounding).
    gradients = []
    for z in (z0, refined):
        z = torch.tensor(z, requires_grad=True)
        objective = _objective(module, table, X_query, z, 0.1, z0, scale).sum()
        (gradient,) = torch.autograd.grad(objective, z)
        gradients.append(np.linalg.norm(gradient.numpy() * scale, axis=1))
    assert (gradients[1] < 1e-2 * gradients[0]).all()
    # Steps stop at convergence: more allowed steps change nothing.
    np.testing.assert_array_equal(
        _refinement.refine_embeddings(
            module, table, X_query, z0, steps=100, prior=0.1, **kwargs
        ),
        refined,
    )
    # No steps: the encoder's embeddings; a stronger prior: a shorter move.
    np.testing.assert_array_equal(
        _refinement.refine_embeddings(
            module, table, X_query, z0, steps=0, prior=0.1, **kwargs
        ),
        z0,
    )
    strong = _refinement.refine_embeddings(
        module, table, X_query, z0, steps=10, prior=100.0, **kwargs
    )
    assert np.linalg.norm(strong - z0) < np.linalg.norm(refined - z0)
    # No prior: still a finite fit (the steps' damping keeps them defined).
    free = _refinement.refine_embeddings(
        module, table, X_query, z0, steps=10, prior=0.0, **kwargs
    )
    assert np.isfinite(free).all()
    # Without the prior the own loss is what is minimised: no higher than
    # with it, up to where float32 stops the steps (flat directions, which
    # only the damping curves, leave about 2e-6 on one model here; on a GPU,
    # whose atomic sums change the rounding from run to run, 3e-5 and 1.1e-4
    # in two runs on one H200, against gaps of 0.1 on the other models).
    slack = 1e-5 if next(module.parameters()).device.type == "cpu" else 1e-3
    assert (
        _own_loss(module, table, X_query, free)
        <= _own_loss(module, table, X_query, refined) + slack
    ).all()
    # The network is left as it was: weights, gradients, mode.
    for name, value in module.state_dict().items():
        assert torch.equal(value, before[name]), name
    for p, grad in zip(module.parameters(), grads, strict=True):
        assert (p.grad is None) if grad is None else torch.equal(p.grad, grad)
    assert not module.training


@pytest.mark.parametrize("readout", [True, False])
def test_logits_and_jacobian_match_forward_and_autograd(readout):
    torch.manual_seed(0)
    predictor = CorrectnessPredictor(5, 4, hidden_dim=6, n_extra=2 if readout else 0)
    predictor.eval()
    features = torch.randn(7, 5)
    query_index = torch.tensor([[0, 3, 6], [1, 1, 2]])
    extra = torch.randn(2, 3, 2) if readout else None
    z = torch.randn(2, 4)
    rows = predictor.row_terms(features, query_index, extra)
    logits, jacobian = predictor.logits_and_jacobian(z, *rows)
    torch.testing.assert_close(logits, predictor(z, features, query_index, extra))
    assert predictor.logits_and_jacobian(z, *rows, jacobian=False)[1] is None
    # Model b's logits depend on z_b only: the full Jacobian's diagonal blocks.
    full = torch.autograd.functional.jacobian(
        lambda z: predictor(z, features, query_index, extra), z
    )  # (B, M, B, d)
    torch.testing.assert_close(jacobian, full[[0, 1], :, [0, 1]])
    torch.testing.assert_close(full[0, :, 1], torch.zeros(3, 4))


def test_scale_is_the_fit_pools_spread(router, pool):
    embedder = router.embedder_
    unrefined = embedder.transform(pool.evals)  # refine_steps=0: the encoder's
    np.testing.assert_allclose(
        embedder.embedding_scale_, unrefined.std(axis=0, ddof=1), rtol=1e-5
    )
    assert embedder.embedding_scale_.shape == (16,)


def test_transform_refines_each_model_on_its_own(router, pool, rows_of, fitted_copy):
    refined = fitted_copy(router.embedder_, refine_steps=10)
    table = check_evals(pool.evals)
    X_query = refined._encode(table.queries)
    z0 = router.embedder_.transform(pool.evals)
    z = refined.transform(pool.evals)
    expected = _refinement.refine_embeddings(
        refined.net_.module_, table, X_query, z0,
        scale=refined.embedding_scale_, steps=10, prior=0.1, batch_tokens=16384,
    )  # fmt: skip
    np.testing.assert_array_equal(z, expected)
    assert not np.allclose(z, z0)
    # Also when the caller has switched autograd off.
    with torch.no_grad():
        np.testing.assert_array_equal(refined.transform(pool.evals), z)
    with torch.inference_mode():
        np.testing.assert_array_equal(refined.transform(pool.evals), z)
    # A model's refinement does not depend on the models beside it, nor on
    # how many rows go through one pass.
    alone = refined.transform(rows_of(pool.evals, ["fam1-m05"]))
    np.testing.assert_allclose(alone[0], z[5], atol=1e-5)
    one_by_one = fitted_copy(
        router.embedder_, refine_steps=10, transform_batch_tokens=1
    )
    np.testing.assert_allclose(one_by_one.transform(pool.evals), z, atol=1e-5)


def test_refinement_under_a_float64_default_dtype(router, pool, fitted_copy):
    # Scientific code often sets a float64 default (BoTorch, GPyTorch): the
    # Gauss-Newton system's identity took it, and every refined transform
    # (fit, add_models, embed) failed in linalg.solve (Double against Float).
    refined = fitted_copy(router.embedder_, refine_steps=5)
    expected = refined.transform(pool.evals)
    torch.set_default_dtype(torch.float64)
    try:
        z = refined.transform(pool.evals)
        assert torch.get_default_dtype() == torch.float64  # the caller's, kept
    finally:
        torch.set_default_dtype(torch.float32)
    assert z.dtype == np.float32
    np.testing.assert_array_equal(z, expected)
    assert not np.allclose(z, router.embedder_.transform(pool.evals))  # refined


def test_router_routes_with_refined_embeddings(pool, tiny_embedder):
    router = LocusRouter(tiny_embedder(pool.encodings, refine_steps=20)).fit(pool.evals)
    np.testing.assert_allclose(
        router.model_embeddings_, router.embedder_.transform(pool.evals), atol=1e-6
    )
    proba = router.predict_proba(pool.queries["query"].to_numpy()[:50])
    assert proba.shape == (50, 12) and np.isfinite(proba).all()


@pytest.mark.parametrize(
    "params, match",
    [
        ({"refine_steps": -1}, "refine_steps"),
        ({"refine_steps": 1.5}, "refine_steps"),
        ({"refine_prior": -0.1}, "refine_prior"),
    ],
)
def test_invalid_refinement_parameters(pool, tiny_embedder, params, match):
    with pytest.raises(InvalidParameterError, match=match):
        tiny_embedder(pool.encodings, **params).fit(pool.evals)


@pytest.mark.parametrize("prior", [0.0, 1e-8, 5e-4])
def test_refine_prior_below_the_minimum_is_refused(
    router, pool, rows_of, fitted_copy, tiny_embedder, prior
):
    # 0 was accepted, yet without a prior the refinement has no fixed point
    # (embeddings ran from norm 2.8 to hundreds) and under tiny ones a
    # model's embedding depended on the models refined beside it (54 %
    # relative at 0, 40 % at 1e-8).
    with pytest.raises(
        InvalidParameterError, match=r"'refine_prior' .* range \[0\.001, inf\)"
    ):
        tiny_embedder(pool.encodings, refine_prior=prior).fit(pool.evals)
    # Also set after fit, as transform reads it.
    late = fitted_copy(router.embedder_, refine_steps=10, refine_prior=prior)
    with pytest.raises(InvalidParameterError, match="'refine_prior'"):
        late.transform(pool.evals)


def test_the_smallest_refine_prior_keeps_each_models_refinement_its_own(
    router, pool, rows_of, fitted_copy
):
    smallest = _refinement.REFINE_PRIOR_MIN
    refined = fitted_copy(router.embedder_, refine_steps=10, refine_prior=smallest)
    z = refined.transform(pool.evals)
    z0 = router.embedder_.transform(pool.evals)
    # It moves the embeddings further than the default prior, and stays a
    # model's own: alone, or one model per pass, as in the pool.
    default = fitted_copy(router.embedder_, refine_steps=10).transform(pool.evals)
    assert np.abs(z - z0).max() > np.abs(default - z0).max()
    alone = refined.transform(rows_of(pool.evals, ["fam1-m05"]))
    np.testing.assert_allclose(alone[0], z[5], atol=1e-5)
    one_by_one = fitted_copy(
        router.embedder_,
        refine_steps=10,
        refine_prior=smallest,
        transform_batch_tokens=1,
    )
    np.testing.assert_allclose(one_by_one.transform(pool.evals), z, atol=1e-5)
    with pytest.raises(InvalidParameterError, match="'refine_prior'"):
        refined.set_params(refine_prior=np.nextafter(smallest, 0)).transform(pool.evals)


@pytest.mark.parametrize("prior", [_refinement.REFINE_PRIOR_MIN, 0.01, 0.1])
def test_refinement_ends_at_each_models_optimum_to_float32_rounding(
    router, pool, prior
):
    """The steps end at each model's optimum to float32 rounding (float64
    Newton with autograd's Hessian for reference), so the batch a model is
    refined in can move it by no more. Steps that stopped once the Newton
    decrement fell under float32's resolution of the objective ended up to
    2.3e-4 (prior 0.001) and 7.7e-5 (0.01) relative from it here, and on
    which side of that threshold a model fell turned on rounding."""
    module, table, X_query, z0, scale = _refinement_inputs(router, pool)
    refined = _refinement.refine_embeddings(
        module, table, X_query, z0, scale=scale, steps=10, prior=prior,
        batch_tokens=16384,
    )  # fmt: skip
    optimum = _float64_optimum(module, table, X_query, refined, z0, scale, prior)
    assert not np.allclose(optimum, z0)  # a real move
    gap = np.abs(refined - optimum).max(1) / np.linalg.norm(optimum, axis=1)
    assert gap.max() < 1e-6, gap


@pytest.mark.parametrize("prior", [0.01, _refinement.REFINE_PRIOR_MIN])
def test_weak_prior_refinement_does_not_depend_on_the_batch(
    router, pool, fitted_copy, prior
):
    """Probe 51's repro: 30 models of 16-100 rows refined one at a time,
    together, and 64 rows per pass agree to float32 rounding (under 1e-6
    relative) at legal weak priors. When a model's stopping read float32
    sums of padded passes, rounding flipped a stop and one path took a step
    more: 5.1e-4 relative apart at prior 0.001 here, 1.1e-4 at 0.01 in the
    probe's fit."""
    rng = np.random.default_rng(0)
    queries = pool.evals["query"].unique()
    frames = []
    for i in range(30):
        n = int(rng.integers(16, 100))
        frames.append(
            pd.DataFrame(
                {
                    "model": f"new{i:02d}",
                    "query": rng.choice(queries, size=n, replace=False),
                    "score": rng.integers(0, 2, n).astype(float),
                }
            )
        )
    evals = pd.concat(frames)
    refined = fitted_copy(router.embedder_, refine_steps=10, refine_prior=prior)
    alone = np.concatenate([refined.transform(frame) for frame in frames])
    assert not np.allclose(alone, router.embedder_.transform(evals))  # refined
    for batch_tokens in ("auto", 64):
        together = fitted_copy(refined, transform_batch_tokens=batch_tokens).transform(
            evals
        )
        gap = np.abs(together - alone).max(1) / np.linalg.norm(alone, axis=1)
        assert gap.max() < 1e-6, (batch_tokens, gap.max())


@pytest.mark.parametrize("steps", [0, 10])
def test_a_file_with_a_refine_prior_below_the_minimum_loads_raised_with_a_warning(
    router, pool, tmp_path, fitted_copy, steps
):
    # Versions before the bound saved refine_prior=0; such a file is read
    # with the smallest valid prior, and says so (it was loaded as 0).
    path = tmp_path / "refined.locus"
    fitted_copy(router.embedder_, refine_steps=steps).save(path)
    metadata, tensors, _ = read_file(path, "LocusEmbedder")
    metadata["params"]["refine_prior"] = 0
    write_file(tmp_path / "zero.locus", metadata, tensors)
    change = "nothing changes" if steps == 0 else "embeddings made after loading"
    with pytest.warns(
        UserWarning, match=rf"holds refine_prior=0, .*refine_prior=0\.001\. .*{change}"
    ):
        loaded = LocusEmbedder.load(tmp_path / "zero.locus")
    assert loaded.refine_prior == _refinement.REFINE_PRIOR_MIN
    assert np.isfinite(loaded.transform(pool.evals)).all()
    # A negative one was never saved: refused, naming the field.
    metadata["params"]["refine_prior"] = -0.1
    write_file(tmp_path / "negative.locus", metadata, tensors)
    with pytest.raises(ValueError, match="header field 'params' is invalid"):
        LocusEmbedder.load(tmp_path / "negative.locus")


def test_saved_scale_round_trip_and_checks(router, pool, tmp_path, fitted_copy):
    refined = fitted_copy(router.embedder_, refine_steps=10)
    path = tmp_path / "refined.locus"
    refined.save(path)
    loaded = LocusEmbedder.load(path)
    assert loaded.refine_steps == 10
    np.testing.assert_array_equal(loaded.embedding_scale_, refined.embedding_scale_)
    np.testing.assert_allclose(
        loaded.transform(pool.evals), refined.transform(pool.evals), atol=1e-6
    )
    metadata, tensors, _ = read_file(path, "LocusEmbedder")
    # A scale that is not positive is refused, naming the tensor.
    bad = dict(tensors, embedding_scale=torch.zeros_like(tensors["embedding_scale"]))
    write_file(tmp_path / "bad.locus", metadata, bad)
    with pytest.raises(ValueError, match="'embedding_scale' is not positive"):
        LocusEmbedder.load(tmp_path / "bad.locus")
    # Refinement without the scale is refused at load ...
    without = {k: v for k, v in tensors.items() if k != "embedding_scale"}
    write_file(tmp_path / "without.locus", metadata, without)
    with pytest.raises(ValueError, match="'embedding_scale' is missing"):
        LocusEmbedder.load(tmp_path / "without.locus")
    # ... while a file of an earlier version (no scale, no refinement
    # parameters) loads, and asks for a refit only if refinement is set.
    params = {
        k: v for k, v in metadata["params"].items() if not k.startswith("refine_")
    }
    write_file(tmp_path / "old.locus", dict(metadata, params=params), without)
    old = LocusEmbedder.load(tmp_path / "old.locus")
    assert old.refine_steps == 0 and old.embedding_scale_ is None
    np.testing.assert_allclose(
        old.transform(pool.evals), router.embedder_.transform(pool.evals), atol=1e-6
    )
    with pytest.raises(ValueError, match="refine_steps=5 needs .*Refit it"):
        old.set_params(refine_steps=5).transform(pool.evals)
    # A file of the version whose refinement took Adam steps holds their
    # step size, which the Gauss-Newton steps do not need: it loads.
    adam = dict(metadata, params=dict(metadata["params"], refine_step_size=0.05))
    write_file(tmp_path / "adam.locus", adam, tensors)
    np.testing.assert_array_equal(
        LocusEmbedder.load(tmp_path / "adam.locus").transform(pool.evals),
        loaded.transform(pool.evals),
    )
    # Any other unknown parameter is still refused.
    unknown = dict(metadata, params=dict(metadata["params"], refine_rate=0.05))
    write_file(tmp_path / "unknown.locus", unknown, tensors)
    with pytest.raises(ValueError, match="unknown names \\['refine_rate'\\]"):
        LocusEmbedder.load(tmp_path / "unknown.locus")


def test_read_only_arrays_reach_torch_writable(pool, tiny_embedder, request):
    """Read-only inputs (the scale of an embedder loaded with joblib's
    mmap_mode, a memmapped table) are copied before torch sees them, as the
    unrefined path does: torch warned that writing to them is undefined
    behaviour (once per process, hence the check on every call here)."""
    emb = tiny_embedder(
        pool.encodings, max_epochs=1, kernel_readout=True, refine_steps=2
    ).fit(pool.evals)
    module = emb.net_.module_
    table = check_evals(pool.evals)
    X_query = emb._encode(table.queries)
    z0 = _training.embed_models(module, table, X_query, batch_tokens=16384)
    scale = emb.embedding_scale_
    kwargs = dict(steps=2, prior=emb.refine_prior, batch_tokens=16384)
    expected = _refinement.refine_embeddings(
        module, table, X_query, z0, scale=scale, **kwargs
    )
    expected_transform = emb.transform(pool.evals)

    request.getfixturevalue("torch_refuses_read_only")
    for array in (X_query, z0, scale, table.query_index, table.score):
        array.flags.writeable = False
    refined = _refinement.refine_embeddings(
        module, table, X_query, z0, scale=scale, **kwargs
    )
    np.testing.assert_array_equal(refined, expected)
    # The bank readout (its own as_tensor calls) was on the path above.
    unit = torch.nn.functional.normalize(
        torch.as_tensor(X_query.copy(), dtype=torch.float32), dim=-1
    )
    assert (
        _refinement._bank_leave_one_out_readout(module.readout, unit, table) is not None
    )
    assert not emb.embedding_scale_.flags.writeable  # the fitted one, read-only
    np.testing.assert_array_equal(emb.transform(pool.evals), expected_transform)
