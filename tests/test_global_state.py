"""Process-wide state that loading and the in-process command line leave as
they found it: torch's random generator, os.environ, matplotlib's backend
and open figures."""

import os
import threading

import numpy as np
import pytest
import torch

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn.datasets import make_model_pool

TINY = dict(
    embedding_dim=8, n_latents=4, n_blocks=1, n_heads=2, hidden_dim=8,
    enc_size=(8, 16), dec_size=8, episodes_per_epoch=4, batch_size=4,
    max_epochs=1, random_state=0,
)  # fmt: skip


@pytest.fixture(scope="module")
def pool():
    return make_model_pool(
        n_models=5, n_queries=40, n_tasks=2, n_families=2, evals_per_model=30,
        n_features=8, random_state=0,
    )  # fmt: skip


@pytest.fixture(scope="module")
def saved(pool, tmp_path_factory):
    """(embedder file, router file, the embedder saved)."""
    folder = tmp_path_factory.mktemp("saved")
    embedder = LocusEmbedder(pool.encodings, **TINY).fit(pool.evals)
    embedder.save(folder / "e.locus")
    router = LocusRouter(LocusEmbedder(pool.encodings, **TINY)).fit(pool.evals)
    router.save(folder / "r.locus")
    return folder / "e.locus", folder / "r.locus", embedder


# --- load draws nothing from torch's generator -----------------------------------


@pytest.mark.parametrize("kind", ["embedder", "router"])
def test_load_leaves_torch_generator_unchanged(saved, kind):
    # The network was built with its random initialisation (then overwritten
    # by the file's weights) drawn from the process-wide generator: after
    # manual_seed(0), torch.rand(3) gave [0.0699, 0.5495, 0.2576] where it
    # gives [0.4963, 0.7682, 0.0885].
    embedder_file, router_file, _ = saved
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    state = torch.get_rng_state()
    if kind == "embedder":
        LocusEmbedder.load(embedder_file)
    else:
        LocusRouter.load(router_file)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(torch.rand(3), expected)


def test_loaded_network_is_the_saved_one_and_trainable(saved, pool):
    # Built without drawing (on the meta device, then given the file's
    # tensors): the weights are the saved ones, float32 on the CPU, each a
    # leaf Parameter of its own storage that the optimizer steps.
    embedder_file, _, fitted = saved
    loaded = LocusEmbedder.load(embedder_file)
    module = loaded.net_.module_
    expected = fitted.net_.module_.state_dict()
    state = module.state_dict()
    assert state.keys() == expected.keys()
    for name, value in state.items():
        assert value.dtype == torch.float32 and value.device.type == "cpu", name
        assert torch.equal(value, expected[name]), name
    params = list(module.parameters())
    assert all(
        isinstance(p, torch.nn.Parameter) and p.is_leaf and p.requires_grad
        for p in params
    )
    assert len({p.data_ptr() for p in params}) == len(params)
    assert not any(t.is_meta for t in [*params, *module.buffers()])
    optimized = [
        p for group in loaded.net_.optimizer_.param_groups for p in group["params"]
    ]
    assert all(a is b for a, b in zip(optimized, params, strict=True))
    np.testing.assert_array_equal(
        loaded.transform(pool.evals), fitted.transform(pool.evals)
    )
    before = [p.detach().clone() for p in params]
    sum((p**2).sum() for p in params).backward()
    loaded.net_.optimizer_.step()
    moved = [
        not torch.equal(a, p) for a, p in zip(before, params, strict=True) if a.any()
    ]
    assert moved and all(moved)


def test_load_in_another_thread_leaves_a_seeded_fit_unchanged(saved, pool):
    # "An int random_state makes a CPU fit reproducible bit for bit": loads
    # running meanwhile in another thread (a service reloading its router)
    # shifted the fit's draws (max |dZ| 0.26-0.31 in 3 of 3 runs).
    embedder_file, _, _ = saved
    settings = {**TINY, "max_epochs": 4, "episodes_per_epoch": 16}
    settings["validation_fraction"] = 0
    expected = LocusEmbedder(pool.encodings, **settings).fit(pool.evals)
    expected = expected.transform(pool.evals)
    stop, started, loads = threading.Event(), threading.Event(), [0]

    def load_repeatedly():
        while not stop.is_set():
            started.set()
            LocusEmbedder.load(embedder_file)
            loads[0] += 1

    thread = threading.Thread(target=load_repeatedly)
    thread.start()
    try:
        started.wait()
        Z = LocusEmbedder(pool.encodings, **settings).fit(pool.evals)
        Z = Z.transform(pool.evals)
    finally:
        stop.set()
        thread.join()
    assert loads[0] > 1  # loads ran during the fit
    np.testing.assert_array_equal(Z, expected)


# --- the command line called from Python leaves os.environ as it was ------------

_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS")


@pytest.mark.parametrize("command", ["locus", "serve"])
def test_main_sets_offline_variables_only_while_it_runs(command, monkeypatch):
    # main's docstring example, main(["select", "no-such-file.csv", ...]),
    # left all three variables "1" for the rest of the process: a later
    # download in the caller's notebook failed as offline, and child
    # processes inherited them.
    from locus_sklearn import _cli
    from locus_sklearn.serve._cli import main as serve_main

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")  # the caller's own
    seen = []
    run = _cli.run

    def recording_run(args):
        seen.append({key: os.environ.get(key) for key in _OFFLINE})
        if len(seen) == 1:  # a command run inside another: set until both end
            assert _cli.main(["select", "no-such-file.csv", "--k", "2"]) == 3
            seen.append({key: os.environ.get(key) for key in _OFFLINE})
        return run(args)

    monkeypatch.setattr(_cli, "run", recording_run)
    if command == "locus":
        status = _cli.main(["select", "no-such-file.csv", "--k", "2"])
    else:
        status = serve_main(
            ["litellm-config", "no-such-file.locus", "--config", "no-such.yaml"]
        )
    assert status != 0  # both fail on the missing file (after the runs above)
    during = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    during["HF_HUB_DISABLE_PROGRESS_BARS"] = "0"
    assert seen == [during, during, during]
    assert {key: os.environ.get(key) for key in _OFFLINE} == {
        "HF_HUB_OFFLINE": None,
        "TRANSFORMERS_OFFLINE": None,
        "HF_HUB_DISABLE_PROGRESS_BARS": "0",
    }


# --- the demo's figures leave the caller's pyplot alone --------------------------


def test_demo_figures_leave_backend_and_open_figures(tmp_path):
    # main(["demo", ...]) switched the caller's backend to Agg and closed
    # every open figure, the caller's included.
    pytest.importorskip("matplotlib")
    import matplotlib
    import matplotlib.pyplot as plt
    import pandas as pd
    from sklearn.base import BaseEstimator

    from locus_sklearn._cli import _demo

    class Router(BaseEstimator):  # what the plots read of a fitted router
        def fit(self, *args):
            return self

    router = Router()
    router.classes_ = np.array(list("abcdef"))
    router.model_embeddings_ = np.random.RandomState(0).randn(6, 4)
    curve = pd.DataFrame({
        "value": [1, 2, 3], "accuracy": [0.5, 0.6, 0.7],
        "random_mean": [0.4, 0.5, 0.6], "random_std": [0.1, 0.1, 0.1],
        "full_pool_accuracy": [0.8, 0.8, 0.8],
    })  # fmt: skip
    curves = {"expected": curve, "k-medoids": curve}
    backend = matplotlib.get_backend()
    interactive = plt.isinteractive()
    plt.switch_backend("svg")  # the caller's, not the Agg the demo set
    try:
        plt.ion()  # in interactive mode pyplot shows a new figure at once
        mine = plt.figure()
        written = _demo._figures(
            router, None, ["a", "c"], ["b"], curves, tmp_path, lambda *a: None
        )
        assert matplotlib.get_backend() == "svg"
        assert plt.get_fignums() == [mine.number]
        assert plt.isinteractive()
    finally:
        plt.close("all")
        plt.interactive(interactive)
        plt.switch_backend(backend)
    assert written == ["model_map.png", "model_dendrogram.png", "portfolio_curve.png"]
    assert all((tmp_path / name).stat().st_size > 0 for name in written)
