"""Per-device random number generators of torch.npu.

Each emulated device has its own default generator (``default_generators[i]``); npu kernels draw from it, so
the same seed reproduces the same ``torch.randn(..., device="npu")`` and seeding one device leaves the others
and the CPU generator alone. As on hardware (and CUDA) the generator is Philox-shaped: its state is 16 bytes,
(uint64 seed, int64 offset), every random op advances the offset by a multiple of 4, and DTensor's RNG tracker
reads and writes the seed and offset in that layout.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

from ._utils import _checked_index, _native

__all__ = [
    "default_generators", "get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all", "manual_seed",
    "manual_seed_all", "seed", "seed_all", "initial_seed",
]


# One Python object per device for the life of the process, like torch.cuda.default_generators.
default_generators: tuple[torch.Generator, ...] = tuple(
    _native().default_generator(index) for index in range(_native().device_count()))


def _generator(device="npu") -> torch.Generator:
    return default_generators[_checked_index(device)]


def _get_generator(device: torch.device) -> torch.Generator:
    """The default generator of ``device`` (torch's AOT autograd looks this up on device modules)."""
    return _generator(device)


def get_rng_state(device="npu") -> torch.Tensor:
    """The device's generator state as a CPU ByteTensor."""
    return _generator(device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(_native().device_count())]


def set_rng_state(new_state: torch.Tensor, device="npu") -> None:
    with torch._C._DisableFuncTorch():
        new_state = new_state.clone(memory_format=torch.contiguous_format)
    _generator(device).set_state(new_state)


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for index in range(_native().device_count()):
        _generator(index).manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's generator with a random number."""
    _generator().seed()


def seed_all() -> None:
    count = _native().device_count()
    if count:
        random_seed = _generator(0).seed()
        for index in range(1, count):
            _generator(index).manual_seed(random_seed)


def initial_seed() -> int:
    return _generator().initial_seed()


# torch_npu defines these two in torch_npu.npu itself (as torch.cuda does), outside __all__.
def _get_rng_state_offset(device="npu") -> int:
    """The Philox offset of the device's generator."""
    return _generator(device).get_offset()


def _set_rng_state_offset(offset: int, device="npu") -> None:
    """Set the Philox offset of the device's generator (a multiple of 4, as on hardware)."""
    _generator(device).set_offset(int(offset))
