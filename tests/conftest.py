import contextlib
import os
import random
import subprocess
import sys
import threading

# No code path may reach the network: sentence-transformers and the HF hub must
# resolve everything from installed packages.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


def locus(*args, stdin=None, cwd=None, timeout=300, env=None, text=True):
    """Run ``python -m locus_sklearn ARGS`` offline; return the CompletedProcess.

    ``env``: variables to set over this process's, a value of None to unset
    one (PYTHONIOENCODING, which a test runner may set, overrides a locale).
    """
    # One torch thread: the networks are tiny, and on a busy machine OpenMP's
    # spinning threads can make a multi-threaded run many times slower.
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        OMP_NUM_THREADS="1",
        **(env or {}),
    )
    env = {name: value for name, value in env.items() if value is not None}
    return subprocess.run(
        [sys.executable, "-m", "locus_sklearn", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=text,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


# Bad-input campaigns (tests marked ``campaign``) take their example count from
# the environment: small by default so the suite stays fast, bounded in CI, as
# long as wanted in a dedicated run (LOCUS_CAMPAIGN_EXAMPLES=5000 pytest -m
# campaign). Tests use it as @settings(settings.get_profile("campaign")).
settings.register_profile(
    "campaign",
    max_examples=int(os.environ.get("LOCUS_CAMPAIGN_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


try:
    import torch

    # The networks in tests are tiny: one thread avoids OpenMP start-up and
    # spin-waiting, which slow small ops badly when other processes share the CPU.
    torch.set_num_threads(1)
except ImportError:  # pragma: no cover - torch is a hard dependency
    pass


@pytest.fixture(autouse=True)
def _seed():
    random.seed(0)
    np.random.seed(0)  # noqa: NPY002 - seeds code that uses the global RNG
    try:
        import torch

        torch.manual_seed(0)
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass


@pytest.fixture
def shared_data():
    """Path of ../shared/data; tests that need it skip cleanly where it is absent."""
    path = os.path.abspath(SHARED_DATA)
    if not os.path.isdir(path):
        pytest.skip("../shared/data is not present on this machine")
    return path


# Plots are drawn off-screen in tests.
try:
    import matplotlib

    matplotlib.use("Agg")
except ImportError:  # pragma: no cover - matplotlib is a test extra
    pass


# ---------------------------------------------------------------------------
# Tiny LOCUS settings, shared by every test that fits a LocusEmbedder or a
# LocusRouter: small enough that a fit takes a second or two on a busy CPU,
# large enough that training still learns the synthetic pools' structure.
TINY = dict(
    embedding_dim=16,
    n_latents=4,
    n_blocks=1,
    n_heads=2,
    hidden_dim=16,
    enc_size=(16, 128),
    dec_size=64,
    episodes_per_epoch=32,
    batch_size=8,
    lr=3e-3,
)


def _tiny_embedder(encoder=None, **params):
    from locus_sklearn import LocusEmbedder

    return LocusEmbedder(
        encoder, **{**TINY, "max_epochs": 3, "random_state": 0, **params}
    )


@pytest.fixture(scope="session")
def tiny_embedder():
    """Factory of tiny embedders: ``tiny_embedder(encoder, **overrides)``.

    The TINY settings with ``max_epochs=3`` and ``random_state=0``; keyword
    arguments override any of them.
    """
    return _tiny_embedder


@pytest.fixture(scope="session")
def fitted_copy():
    """``fitted_copy(estimator, **params)``: a clone of a fitted estimator with
    its fitted attributes and ``params`` set (a run-time setting changed
    without refitting, the original left alone)."""
    from sklearn.base import clone

    def copy(estimator, **params):
        other = clone(estimator).set_params(**params)
        other.__dict__.update(
            {k: v for k, v in estimator.__dict__.items() if k.endswith("_")}
        )
        return other

    return copy


@pytest.fixture(scope="session")
def tiny_settings():
    """A copy of the TINY hyper-parameters (dict)."""
    return dict(TINY)


@pytest.fixture(scope="session")
def tiny_cli_args():
    """The TINY settings as ``locus fit`` options (two epochs, seed 0)."""
    args = ["--embedding-dim", str(TINY["embedding_dim"]), "--epochs", "2"]
    args += ["--seed", "0"]
    for name, value in TINY.items():
        if name != "embedding_dim":
            args += ["--set", f"{name}={value!r}"]
    return args


@pytest.fixture(scope="session")
def pool():
    """A synthetic pool of 12 models (3 families, 4 tasks), 200 evaluations each."""
    from locus_sklearn.datasets import make_model_pool

    return make_model_pool(
        n_models=12,
        n_queries=400,
        n_tasks=4,
        n_families=3,
        evals_per_model=200,
        random_state=0,
    )


@pytest.fixture(scope="session")
def router(pool, tiny_embedder):
    """A LocusRouter fitted on ``pool`` (4 epochs); tests must not modify it."""
    from locus_sklearn import LocusRouter

    return LocusRouter(tiny_embedder(pool.encodings, max_epochs=4)).fit(pool.evals)


@pytest.fixture(scope="session")
def model_names(pool):
    """The pool's model names, in sorted order (list of str)."""
    return pool.models["model"].tolist()


@pytest.fixture(scope="session")
def query_texts(pool):
    """The pool's query ids, in sorted order (ndarray of str)."""
    return pool.queries["query"].to_numpy()


def _rows_of(evals, models):
    return evals[evals["model"].isin(models)]


def _assert_reproduced(a, b):
    import torch

    if torch.cuda.is_available():
        # Estimators run on the GPU here (device=None), where atomic additions
        # sum in any order: two fits, or two predictions, agree to float32
        # rounding, not bit for bit (benchmarks/cuda_check.py measures it,
        # and that torch.use_deterministic_algorithms(True) restores the bits).
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    else:
        np.testing.assert_array_equal(a, b)


@pytest.fixture(scope="session")
def assert_reproduced():
    """``assert_reproduced(a, b)``: two runs' outputs (fits with one seed, a
    saved and loaded estimator's predictions) are equal, bit for bit on the
    CPU."""
    return _assert_reproduced


@pytest.fixture(scope="session")
def rows_of():
    """``rows_of(evals, models)``: the rows of ``evals`` of the given models."""
    return _rows_of


@pytest.fixture
def three_model_knn():
    """A KNNRouter(1) fitted on three models a, b, c over three queries
    (q1 and q2 near each other, q3 apart), and its evaluations: a answers q1
    and q2 right, b only q1, c only q3. The small pool of the portfolio
    curve's tests."""
    from locus_sklearn.baselines import KNNRouter

    encoder = {"q1": [1.0, 0.0], "q2": [0.9, 0.1], "q3": [0.0, 1.0]}
    evals = {
        "model": ["a"] * 3 + ["b"] * 3 + ["c"] * 3,
        "query": ["q1", "q2", "q3"] * 3,
        "score": [1, 1, 0, 1, 0, 0, 0, 0, 1],
    }
    return KNNRouter(1, encoder=encoder).fit(evals), evals


@pytest.fixture
def torch_refuses_read_only(monkeypatch):
    """torch.as_tensor, for the test's duration, failing on a read-only
    ndarray: torch warns only once per process that writing to one is
    undefined behaviour, so every call is checked here instead."""
    import torch

    as_tensor = torch.as_tensor

    def checked(data, *args, **kwargs):
        assert not (isinstance(data, np.ndarray) and not data.flags.writeable)
        return as_tensor(data, *args, **kwargs)

    monkeypatch.setattr(torch, "as_tensor", checked)


@contextlib.contextmanager
def pipe_released_after(fifo, seconds):
    """From ``seconds`` on, open and close the named pipe ``fifo`` for
    writing every 0.2 s until the block ends: a reader blocked on it then
    reads an empty file and fails, where it would wait for good."""
    done = threading.Event()

    def release():
        if done.wait(seconds):
            return
        while not done.wait(0.2):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader (ENXIO): nothing is blocked now
                pass

    writer = threading.Thread(target=release, daemon=True)
    writer.start()
    try:
        yield
    finally:
        done.set()
        writer.join()
