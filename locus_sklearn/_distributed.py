"""Data-parallel training of the LOCUS network through Hugging Face accelerate.

A :class:`LocusEmbedder` given ``accelerator=Accelerator()`` trains an
:class:`AcceleratedLocusNet`: skorch's :class:`~skorch.hf.AccelerateMixin`
over :class:`~._training.LocusNet`. Under ``accelerate launch`` (or
``torchrun``) with N processes, accelerate wraps the network in PyTorch's
DistributedDataParallel and shards each epoch's training episodes (models)
across the processes; gradients are averaged at every step. What this module
adds to the mixin, so that N processes train as one:

- validation is *not* sharded: every process scores the whole (small)
  validation set, and the validation loss, routing accuracy and training
  loss are averaged over processes, so early stopping and the divergence
  check take the same decision everywhere (a process that stopped alone
  would leave the others waiting forever);
- the network is unwrapped only after the callbacks' ``on_train_end``, so
  that early stopping restores its best weights into the module it saved
  them from;
- each process draws its own episodes, dropout and noise (the sampler's
  shuffling is kept in step by accelerate); the initial weights are rank 0's,
  which DistributedDataParallel broadcasts;
- the profile head, which no loss term reads when ``profile_weight=0``,
  is left out of DistributedDataParallel (whose default refuses parameters
  without a gradient); it stays as initialised, as in one process;
- only the main process prints the epoch table.

Two settings are refused with more than one process: ``even_batches=False``
(processes would take different numbers of steps and wait on each other's
collective calls) and ``standardize_embedding=True`` (its BatchNorm would
standardise each process's share of a step alone; torch's SyncBatchNorm
runs on GPUs only).

accelerate itself is imported only by the caller who builds the Accelerator;
this module needs skorch alone.
"""

import os
from numbers import Integral

import numpy as np
import torch
from sklearn.utils import check_random_state
from skorch.hf import AccelerateMixin

from ._device import parse_device
from ._training import LocusNet, progress_sink

__all__ = [
    "AcceleratedLocusNet",
    "accelerated_net_kwargs",
    "check_accelerated_params",
    "check_accelerator",
    "shared_random_state",
    "training_device",
]


class AcceleratedLocusNet(AccelerateMixin, LocusNet):
    """:class:`~._training.LocusNet` trained data-parallel by an
    ``accelerate.Accelerator`` (one process per device).

    Build it with :func:`accelerated_net_kwargs`; ``device`` is the
    accelerator's device, which skorch and accelerate then agree on.
    """

    def _validate_params(self):
        # AccelerateMixin refuses any device when accelerate places tensors;
        # build_net passes the accelerator's own device, so both agree.
        LocusNet._validate_params(self)

    def _initialize_accelerator(self):
        # As AccelerateMixin's, but only modules with parameters are prepared:
        # DistributedDataParallel refuses to wrap the (parameter-free) loss.
        if self._wrapped_with_accelerator:
            return self
        # DistributedDataParallel (with find_unused_parameters=False,
        # accelerate's default and the user's setting) fails at the second
        # step on parameters that had no gradient: the profile head, which no
        # loss term reads with profile_weight=0, is kept out of it. Without a
        # gradient AdamW leaves it as initialised, as in one process.
        self._set_unused_profile_trainable(False)
        with self._current_init_context("module"):
            self.module_ = self.accelerator.prepare(self.module_)
        with self._current_init_context("optimizer"):
            self.optimizer_ = self.accelerator.prepare(self.optimizer_)
        self._wrapped_with_accelerator = True
        return self

    def __getstate__(self):
        # The accelerator is a handle on this process group: a pickled (or
        # copied) net is a trained one, for inference, without it.
        state = super().__getstate__()
        state["accelerator"] = None
        return state

    def _network(self):
        return self.accelerator.unwrap_model(self.module_)

    def _set_unused_profile_trainable(self, trainable):
        """Set whether the profile head trains, when no loss term reads it."""
        profile = self._network().profile
        if profile is not None and not self.profile_weight:
            profile.requires_grad_(trainable)

    def _mean_over_processes(self, value):
        """Mean of a scalar over processes (the same result on every one)."""
        tensor = torch.as_tensor(value, dtype=torch.float32, device=self.device)
        mean = self.accelerator.reduce(tensor.detach(), reduction="mean")
        return mean if isinstance(value, torch.Tensor) else float(mean)

    def get_iterator(self, dataset, training=False):
        if not training:
            # Every process validates on the whole set (see the module docstring).
            return LocusNet.get_iterator(self, dataset, training=False)
        if self.accelerator.split_batches:
            return super().get_iterator(dataset, training=True)
        # batch_size counts a step's episodes over all processes, as in one
        # process (accelerate's default would give each process batch_size):
        # the same hyper-parameters then train the same way on any count.
        kwargs = self.get_params_for("iterator_train")
        kwargs["batch_size"] = self.batch_size // self.accelerator.num_processes
        # accelerate shards the batches and keeps the shuffle in step.
        return self.accelerator.prepare(self.iterator_train(dataset, **kwargs))

    def train_step(self, batch, **fit_params):
        step = super().train_step(batch, **fit_params)
        step["loss"] = self._mean_over_processes(step["loss"])
        return step

    def validation_step(self, batch, **fit_params):
        step = super().validation_step(batch, **fit_params)
        step["loss"] = self._mean_over_processes(step["loss"])
        return step

    def on_train_begin(self, net, X=None, y=None, **kwargs):
        super().on_train_begin(net, X=X, y=y, **kwargs)
        # Distinct episodes, dropout and noise per process (rank 0 keeps the
        # seed); accelerate keeps the loader's shuffle in step on its own.
        rank = self.accelerator.process_index
        if rank:
            torch.manual_seed(torch.initial_seed() + rank)

    def notify(self, method_name, **cb_kwargs):
        super().notify(method_name, **cb_kwargs)
        if method_name == "on_train_end":
            # After the callbacks: early stopping has restored its best
            # weights (saved from the wrapped module) by now.
            self._unwrap_accelerator()
            self._set_unused_profile_trainable(True)


def accelerated_net_kwargs(accelerator, verbose):
    """Keyword arguments of :class:`AcceleratedLocusNet` beyond build_net's own.

    Only the main process prints; skorch prints to any sink but ``print``
    even when ``verbose=0``, so the silent case passes ``print``.
    """
    verbose = verbose if accelerator.is_main_process else 0
    return {
        "accelerator": accelerator,
        "device": training_device(accelerator),
        "unwrap_after_train": False,
        "verbose": verbose,
        "callbacks__print_log__sink": progress_sink if verbose else print,
    }


def training_device(accelerator):
    """The accelerator's device, ``cpu`` for any CPU: accelerate names it
    ``cpu:0`` in multi-process runs, which torch (and so a pickled net)
    cannot map back when loading."""
    device = torch.device(accelerator.device)
    return torch.device("cpu") if device.type == "cpu" else device


def _device_key(device):
    """(type, index) of a torch device, the index a device without one
    stands for: 0 for the CPU (there is one; accelerate names it ``cpu:0``,
    torch ``cpu``), the current device for CUDA (accelerate sets it to the
    process's own)."""
    index = device.index
    if device.type == "cpu":
        index = 0
    elif index is None and device.type == "cuda" and torch.cuda.is_available():
        index = torch.cuda.current_device()
    return device.type, index


def _same_device(a, b):
    """Whether the torch devices ``a`` and ``b`` are one device: ``cpu`` and
    ``cpu:0`` are, ``cpu`` and ``cuda:0`` or ``cuda:0`` and ``cuda:1`` are not."""
    return _device_key(a) == _device_key(b)


def check_accelerator(accelerator, device, batch_size):
    """The training device: the accelerator's. ``device`` must be None or it,
    ``batch_size`` (episodes per step over all processes) a multiple of the
    number of processes, and, with several, the accelerator's
    ``even_batches`` True."""
    n_processes = accelerator.num_processes
    world = os.environ.get("WORLD_SIZE", "")
    if n_processes == 1 and world.isdigit() and int(world) > 1:
        # Launched as several processes, each of which would train its own
        # full copy and save over the others' file: on a machine without a
        # GPU, Accelerator() does not join them (accelerate 1.x) unless
        # told to run on the CPU.
        raise ValueError(
            f"the accelerator trains in 1 process, but this is one of "
            f"WORLD_SIZE={world} launched processes: each would train its own "
            "copy. On CPUs create it as Accelerator(cpu=True); on GPUs check "
            "that each process sees one."
        )
    if batch_size % n_processes:
        raise ValueError(
            f"batch_size={batch_size} must be a multiple of the number of "
            f"training processes ({n_processes}): it counts the episodes of one "
            "optimisation step over all of them."
        )
    if n_processes > 1 and getattr(accelerator, "even_batches", True) is False:
        # Episodes that do not split evenly would give the processes
        # different numbers of steps: one then waits in the gradient
        # all-reduce while another averages the validation loss: a gloo
        # crash or a hang, never an error that names the setting.
        raise ValueError(
            f"the accelerator has even_batches=False, but its {n_processes} "
            "training processes must take the same number of steps; create it "
            "with even_batches=True (DataLoaderConfiguration's default)."
        )
    expected = training_device(accelerator)
    # parse_device: a value that is no torch device is an error naming
    # ``device``, as without an accelerator; any other is one to compare.
    if device is not None and not _same_device(
        parse_device(device), torch.device(accelerator.device)
    ):
        raise ValueError(
            f"device={device!r} conflicts with the accelerator's device "
            f"{accelerator.device}; with an accelerator leave device=None (each "
            "process trains on the device accelerate assigns it)."
        )
    return expected


def check_accelerated_params(accelerator, params):
    """Refuse hyper-parameters that do not train data-parallel.

    ``params`` are the estimator's hyper-parameters (a mapping). With more
    than one process, ``standardize_embedding=True`` is refused: its
    BatchNorm would compute each process's batch statistics over that
    process's share of a step's models (with one model each, the running
    statistics it never updates), and torch's SyncBatchNorm, which would
    share them, runs on GPUs only.
    """
    n_processes = accelerator.num_processes
    if n_processes > 1 and params["standardize_embedding"]:
        raise ValueError(
            "standardize_embedding=True does not train data-parallel: with an "
            f"accelerator of {n_processes} processes each would standardise "
            "only its own share of a step's models. Set "
            "standardize_embedding=False, or train in one process "
            "(accelerator=None)."
        )


def shared_random_state(accelerator, random_state):
    """A random state that is the same on every process.

    Every process must draw the same validation split and sizes, or their
    collective calls stop matching. An int already is; anything else (None,
    a RandomState) is replaced by a seed drawn on the main process.
    """
    if isinstance(random_state, Integral) or accelerator.num_processes == 1:
        return check_random_state(random_state)
    from accelerate.utils import broadcast_object_list

    seed = [int(np.random.default_rng().integers(np.iinfo(np.int32).max))]
    if isinstance(random_state, np.random.RandomState):
        seed = [int(random_state.randint(np.iinfo(np.int32).max))]
    broadcast_object_list(seed, from_process=0)
    return np.random.RandomState(seed[0])
