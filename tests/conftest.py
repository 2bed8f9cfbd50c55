import os
import random

# No code path may reach the network: sentence-transformers and the HF hub must
# resolve everything from installed packages.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


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
