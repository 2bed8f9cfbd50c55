"""Data-parallel training through accelerate (locus_sklearn._distributed).

The two-process tests really run two processes (torch.distributed.run, gloo on
127.0.0.1): one checks that they end with the same weights and history and
that the network learned, the others the settings that do not train
data-parallel; the rest run in this process.
"""

import json
import os
import pickle
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.metrics import roc_auc_score

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn.datasets import make_model_pool

accelerate = pytest.importorskip("accelerate")

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(
    embedding_dim=16, n_latents=4, n_blocks=1, n_heads=2, hidden_dim=16,
    enc_size=(16, 64), dec_size=32, episodes_per_epoch=32, batch_size=4,
    max_epochs=4, patience=2,
)  # fmt: skip

WORKER = """
import json, pickle, sys
import numpy as np
import torch
from accelerate import Accelerator
from locus_sklearn import LocusEmbedder
from locus_sklearn.datasets import make_model_pool

torch.set_num_threads(1)
out, tiny = sys.argv[1], json.loads(sys.argv[2])
tiny["enc_size"] = tuple(tiny["enc_size"])
accelerator = Accelerator(cpu=True)
pool = make_model_pool(n_models=12, n_queries=300, evals_per_model=120,
                       random_state=0)
embedder = LocusEmbedder(pool.encodings, accelerator=accelerator, verbose=1,
                         random_state=0, **tiny).fit(pool.evals)
rank = accelerator.process_index
torch.save(embedder.net_.module_.state_dict(), f"{out}/weights{rank}.pt")
with open(f"{out}/run{rank}.json", "w") as f:
    json.dump({
        "n_processes": accelerator.num_processes,
        "valid_loss": embedder.net_.history[:, "valid_loss"],
        "train_loss": embedder.net_.history[:, "train_loss"],
        "module": type(embedder.net_.module_).__name__,
    }, f)
if accelerator.is_main_process:
    embedder.save(f"{out}/embedder.safetensors")
    with open(f"{out}/embedder.pkl", "wb") as f:
        pickle.dump(embedder, f)
"""


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(worker, out, params, timeout=240):
    """Run ``worker`` in 2 CPU processes (gloo on 127.0.0.1), given ``out``
    and ``params`` (JSON); a run past ``timeout`` seconds (a hang) is
    killed with its processes and returns code None."""
    script = Path(out) / "worker.py"
    script.write_text(worker)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "GLOO_SOCKET_IFNAME": "lo",
    }
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
        str(script), str(out), json.dumps(params),
    ]  # fmt: skip
    # A session of its own: a hung run's workers are killed with the launcher.
    with subprocess.Popen(
        command, env=env, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as process:  # fmt: skip
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            code = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            code = None
    return subprocess.CompletedProcess(command, code, stdout, stderr)


@pytest.fixture(scope="module")
def accelerator():
    # One per test process: accelerate's state is process-wide.
    return accelerate.Accelerator(cpu=True)


@pytest.fixture(scope="module")
def pool():
    return make_model_pool(n_models=6, n_queries=200, evals_per_model=100,
                           random_state=0)  # fmt: skip


@pytest.mark.slow
def test_two_processes_train_as_one(tmp_path):
    done = _launch(WORKER, tmp_path, TINY)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    runs = [json.loads((tmp_path / f"run{r}.json").read_text()) for r in (0, 1)]
    assert [run["n_processes"] for run in runs] == [2, 2]
    # Unwrapped after training: the plain network, not the DDP wrapper.
    assert [run["module"] for run in runs] == ["LocusNetwork"] * 2
    # Losses averaged over processes: every process took the same decisions.
    assert runs[0]["valid_loss"] == runs[1]["valid_loss"]
    assert runs[0]["train_loss"] == runs[1]["train_loss"]
    w0, w1 = (torch.load(tmp_path / f"weights{r}.pt") for r in (0, 1))
    assert w0.keys() == w1.keys()
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    # Only the main process printed the epoch table.
    assert (done.stdout + done.stderr).count("train_loss") == 1

    # The saved network learned: its P(correct) ranks the true outcomes.
    pool = make_model_pool(n_models=12, n_queries=300, evals_per_model=120,
                           random_state=0)  # fmt: skip
    embedder = LocusEmbedder.load(tmp_path / "embedder.safetensors")
    assert embedder.accelerator is None
    assert _correlation(embedder, pool) > 0.3
    # A pickle made in the process group unpickles here, without its accelerator.
    with open(tmp_path / "embedder.pkl", "rb") as f:
        unpickled = pickle.load(f)
    assert unpickled.accelerator is None
    assert unpickled.net_.accelerator is None
    np.testing.assert_array_equal(
        unpickled.transform(pool.evals), embedder.transform(pool.evals)
    )


def test_accelerator_is_a_parameter_shared_by_clone(accelerator):
    embedder = LocusEmbedder(accelerator=accelerator)
    assert embedder.get_params()["accelerator"] is accelerator
    assert clone(embedder).accelerator is accelerator
    assert embedder.accelerator is accelerator  # clone left it in place
    router = LocusRouter(embedder)
    assert router.get_params()["embedder__accelerator"] is accelerator
    assert clone(router).embedder.accelerator is accelerator
    assert clone(LocusEmbedder()).accelerator is None


def _correlation(embedder, pool):
    """Correlation of predicted and true P(correct) over the pool's queries."""
    queries = pool.queries["query"].to_numpy()
    proba = embedder.predict_proba(
        embedder.transform(pool.evals), queries, evals=pool.evals
    )
    truth = pool.probabilities.loc[queries, embedder.classes_].to_numpy()
    assert np.isfinite(proba).all()
    return np.corrcoef(proba.ravel(), truth.ravel())[0, 1]


def test_one_process_accelerator_trains_like_no_accelerator(pool, accelerator):
    plain = LocusEmbedder(pool.encodings, random_state=0, **TINY).fit(pool.evals)
    accelerated = LocusEmbedder(
        pool.encodings, random_state=0, accelerator=accelerator, **TINY
    ).fit(pool.evals)
    # Not bit for bit: accelerate's loader fetches one batch ahead, which
    # reorders the draws from torch's generator; the same steps, though.
    assert type(accelerated.net_.module_) is type(plain.net_.module_)
    history, expected = accelerated.net_.history, plain.net_.history
    assert history[:, "train_batch_count"] == expected[:, "train_batch_count"]
    assert abs(_correlation(accelerated, pool) - _correlation(plain, pool)) < 0.1
    # The same optimiser step as without the accelerator (AdamW's fused
    # kernel where torch has it), through accelerate's optimizer wrapper.
    from locus_sklearn._training import _has_fused_adamw

    wrapped = accelerated.net_.optimizer_.optimizer  # accelerate's wrapper's
    assert bool(wrapped.defaults["fused"]) is _has_fused_adamw("cpu")
    assert bool(plain.net_.optimizer_.defaults["fused"]) is _has_fused_adamw("cpu")


def test_saved_files_hold_no_accelerator(pool, accelerator, tmp_path):
    embedder = LocusEmbedder(
        pool.encodings, random_state=0, accelerator=accelerator, **TINY
    ).fit(pool.evals)
    path = tmp_path / "embedder.safetensors"
    embedder.save(path)
    assert b"accelerator" not in path.read_bytes()[:100_000]
    loaded = LocusEmbedder.load(path)
    assert loaded.accelerator is None
    np.testing.assert_array_equal(
        loaded.transform(pool.evals), embedder.transform(pool.evals)
    )
    # Nor do pickles; the fitted network survives the round trip.
    again = pickle.loads(pickle.dumps(embedder))
    assert again.accelerator is None and embedder.accelerator is accelerator
    np.testing.assert_array_equal(
        again.transform(pool.evals), embedder.transform(pool.evals)
    )


def test_router_trains_through_the_accelerator(pool, accelerator):
    router = LocusRouter(
        LocusEmbedder(pool.encodings, random_state=0, accelerator=accelerator, **TINY)
    ).fit(pool.evals)
    queries = pool.queries["query"].to_numpy()
    proba = router.predict_proba(queries)
    truth = pool.probabilities.loc[queries, router.classes_].to_numpy()
    assert roc_auc_score(truth.ravel() > 0.5, proba.ravel()) > 0.5


def test_agreement_term_trains_through_the_accelerator(pool, accelerator, monkeypatch):
    from locus_sklearn import _training

    values = []
    term = _training.agreement_stress

    def recorded(*args, **kwargs):
        values.append(term(*args, **kwargs))
        return values[-1]

    monkeypatch.setattr(_training, "agreement_stress", recorded)
    embedder = LocusEmbedder(
        pool.encodings, random_state=0, accelerator=accelerator, **TINY
    )
    embedder.set_params(agreement_weight=0.5).fit(pool.evals)
    # One term per training step (validation steps read none), each finite
    # and with a gradient.
    n_steps = sum(embedder.net_.history[:, "train_batch_count"])
    assert len(values) == n_steps > 0
    assert all(torch.isfinite(v) and v.requires_grad for v in values)


def test_device_must_be_the_accelerators(pool, accelerator):
    embedder = LocusEmbedder(
        pool.encodings, device="cuda:7", accelerator=accelerator, **TINY
    )
    with pytest.raises(ValueError, match=r"device='cuda:7' conflicts"):
        embedder.fit(pool.evals)


@pytest.mark.parametrize("device", ["cpu", "cpu:0", torch.device("cpu", 0)])
def test_device_equal_to_the_accelerators_is_accepted(pool, accelerator, device):
    # "cpu:0" was refused: torch.device("cpu:0") != torch.device("cpu").
    embedder = LocusEmbedder(
        pool.encodings, device=device, accelerator=accelerator, **TINY
    )
    embedder.set_params(max_epochs=1).fit(pool.evals)
    assert embedder.transform(pool.evals).shape == (6, TINY["embedding_dim"])


def test_devices_compare_by_type_and_index():
    from locus_sklearn._distributed import _same_device

    cpu, cuda0, cuda1 = (torch.device(d) for d in ("cpu", "cuda:0", "cuda:1"))
    assert _same_device(torch.device("cpu:0"), cpu)
    assert _same_device(cuda1, torch.device("cuda", 1))
    assert not _same_device(cpu, cuda0)
    assert not _same_device(cuda0, cuda1)
    assert not _same_device(torch.device("cpu:0"), cuda0)


def test_a_one_process_accelerator_among_launched_processes_is_refused(
    pool, accelerator, monkeypatch
):
    """Under torchrun on a machine without a GPU, Accelerator() (no cpu=True)
    left each process on its own: every one trained a full copy, and each
    main process saved over the others' file, without a word."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    embedder = LocusEmbedder(pool.encodings, accelerator=accelerator, **TINY)
    with pytest.raises(ValueError, match=r"WORLD_SIZE=2.*Accelerator\(cpu=True\)"):
        embedder.fit(pool.evals)
    monkeypatch.setenv("WORLD_SIZE", "1")
    embedder.set_params(max_epochs=1).fit(pool.evals)


def test_accelerator_must_look_like_one(pool):
    with pytest.raises(ValueError, match="accelerator"):
        LocusEmbedder(pool.encodings, accelerator="gpu", **TINY).fit(pool.evals)


@pytest.mark.parametrize("device", ["nonsense", "gpu"])
def test_device_that_is_no_torch_device_is_named(pool, accelerator, device):
    """With an accelerator, torch's RuntimeError came out unnamed."""
    embedder = LocusEmbedder(
        pool.encodings, device=device, accelerator=accelerator, **TINY
    )
    with pytest.raises(ValueError, match=f"device='{device}' is not a torch device"):
        embedder.fit(pool.evals)


# Settings that train in one process but not data-parallel, each tried on 2
# processes in turn (one launch); a fit that hangs leaves no result file.
SMALL = dict(
    embedding_dim=8, n_latents=4, n_blocks=1, n_heads=2, hidden_dim=8,
    enc_size=(8, 32), dec_size=16, episodes_per_epoch=16, batch_size=2,
    max_epochs=2,
)  # fmt: skip

SETTINGS_WORKER = """
import json, sys
import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from locus_sklearn import LocusEmbedder
from locus_sklearn.datasets import make_model_pool

torch.set_num_threads(1)
out, small = sys.argv[1], json.loads(sys.argv[2])
small["enc_size"] = tuple(small["enc_size"])
accelerator = Accelerator(cpu=True)
rank = accelerator.process_index
pool = make_model_pool(n_models=6, n_queries=120, evals_per_model=60,
                       random_state=0)


def attempt(name, accelerator, pool=pool, **params):
    try:
        embedder = LocusEmbedder(pool.encodings, accelerator=accelerator,
                                 random_state=0, **{**small, **params})
        embedder.fit(pool.evals)
    except Exception as error:
        result = {"error": f"{type(error).__name__}: {error}"}
    else:
        module = embedder.net_.module_
        torch.save(module.state_dict(), f"{out}/{name}{rank}.pt")
        result = {"error": None, "trainable": all(
            p.requires_grad for p in module.parameters())}
    with open(f"{out}/{name}{rank}.json", "w") as f:
        json.dump(result, f)


attempt("standardize", accelerator, standardize_embedding=True)
attempt("profile", accelerator, n_profile_regions=3, profile_weight=0.0)
uneven = Accelerator(
    cpu=True, dataloader_config=DataLoaderConfiguration(even_batches=False))
# 5 models, 3 passes: 15 episodes an epoch, which 2 processes cannot share
# evenly (8 steps and 7).
attempt("uneven", uneven, episodes_per_epoch=15, pool=make_model_pool(
    n_models=5, n_queries=120, evals_per_model=60, random_state=0))
"""


@pytest.fixture(scope="module")
def settings_run(tmp_path_factory):
    """The output folder of SETTINGS_WORKER's launch, and the launch."""
    out = tmp_path_factory.mktemp("settings")
    return out, _launch(SETTINGS_WORKER, out, SMALL)


def _results(settings_run, name):
    out, done = settings_run
    paths = [out / f"{name}{rank}.json" for rank in (0, 1)]
    assert all(path.exists() for path in paths), (
        f"no result for {name} (exit code {done.returncode}, None: killed "
        f"after hanging): {done.stdout[-2000:]}{done.stderr[-2000:]}"
    )
    return [json.loads(path.read_text()) for path in paths]


@pytest.mark.slow
def test_two_processes_train_with_an_unread_profile_head(settings_run):
    """n_profile_regions > 0 with profile_weight=0 made DistributedDataParallel
    fail at the second step: the profile head had no gradient."""
    runs = _results(settings_run, "profile")
    assert [run["error"] for run in runs] == [None, None]
    # Every parameter trains again after the fit (a refit, a user's training).
    assert [run["trainable"] for run in runs] == [True, True]
    out, _ = settings_run
    w0, w1 = (torch.load(out / f"profile{rank}.pt") for rank in (0, 1))
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    # The head no loss term reads stays as initialised, as in one process,
    # which draws the same initial weights from the same random_state.
    pool = make_model_pool(n_models=6, n_queries=120, evals_per_model=60,
                           random_state=0)  # fmt: skip
    one = LocusEmbedder(
        pool.encodings, random_state=0, n_profile_regions=3, profile_weight=0.0,
        **SMALL,
    ).fit(pool.evals)  # fmt: skip
    expected = one.net_.module_.profile.state_dict()
    assert expected.keys() == {"weight", "bias"}
    for name, value in expected.items():
        assert torch.equal(w0[f"profile.{name}"], value)


@pytest.mark.slow
def test_uneven_batches_over_two_processes_are_refused(settings_run):
    """even_batches=False gave the processes different numbers of steps: a
    gloo error, or both waiting for ever."""
    runs = _results(settings_run, "uneven")
    for run in runs:
        assert run["error"].startswith("ValueError: the accelerator has even_batches")


@pytest.mark.slow
def test_standardized_embeddings_over_two_processes_are_refused(settings_run):
    """Each process's BatchNorm saw its own share of a step's models; with one
    model each, the running statistics stayed 0 and 1 and nothing was
    standardised, without a word."""
    runs = _results(settings_run, "standardize")
    for run in runs:
        assert run["error"].startswith("ValueError: standardize_embedding=True")
        assert "2 processes" in run["error"]


def _fake_accelerator(n_processes, even_batches=True):
    return SimpleNamespace(
        num_processes=n_processes, even_batches=even_batches, device="cpu"
    )


def test_uneven_batches_are_refused_with_several_processes():
    from locus_sklearn._distributed import check_accelerator

    with pytest.raises(ValueError, match=r"even_batches=False.*2 training processes"):
        check_accelerator(_fake_accelerator(2, even_batches=False), None, 4)
    # One process takes every step: uneven shards cannot happen.
    assert check_accelerator(_fake_accelerator(1, even_batches=False), None, 4) == (
        torch.device("cpu")
    )
    assert check_accelerator(_fake_accelerator(2), None, 4) == torch.device("cpu")


def test_standardize_embedding_is_refused_with_several_processes():
    from locus_sklearn._distributed import check_accelerated_params

    params = {"standardize_embedding": True}
    with pytest.raises(ValueError, match=r"standardize_embedding=True.*2 processes"):
        check_accelerated_params(_fake_accelerator(2), params)
    check_accelerated_params(_fake_accelerator(1), params)
    check_accelerated_params(_fake_accelerator(2), {"standardize_embedding": False})
