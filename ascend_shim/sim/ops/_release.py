"""Which torch_npu release the emulator emulates, and what differs between release lines.

The emulated release is the one paired with the running torch (torch 2.13.0 -> torch_npu 2.13.0; the newest
post-release of that line). Behaviour that changed between lines is keyed here, from the real wheels' schemas
(the contract tests check the table against them):

* ``npu_fusion_attention_grad`` returns ``(dq, dk, dv, dpse)`` up to 2.5 and adds ``dsink`` from 2.6;
* arguments added in later lines are refused by the emulated ops of an older line, as Python refuses an
  unexpected keyword argument.
"""
from __future__ import annotations

import re

import torch

# (op, argument) -> (first release line whose schema has it, the argument's default)
ARGUMENT_SINCE = {
    ("npu_fusion_attention", "softmax_layout"): ((2, 6), ""),
    ("npu_fusion_attention", "sink"): ((2, 6), None),
    ("npu_fusion_attention", "dropout_mask"): ((2, 7), None),
    ("npu_fusion_attention", "seed"): ((2, 7), 0),
    ("npu_fusion_attention", "offset"): ((2, 7), 0),
    ("npu_fusion_attention_grad", "softmax_layout"): ((2, 6), ""),
    ("npu_fusion_attention_grad", "sink"): ((2, 6), None),
    ("npu_rotary_mul", "rotate"): ((2, 7), None),
}
_NEWEST = max(since for since, _ in ARGUMENT_SINCE.values())
GRAD_RETURNS_DSINK_SINCE = (2, 6)


def _line(version: str) -> tuple[int, int]:
    major, minor = (int(x) for x in re.findall(r"\d+", version)[:2])
    return major, minor


EMULATED_LINE = _line(torch.__version__)


def at_least(line: tuple[int, int]) -> bool:
    """True when the emulated release line is ``line`` or newer."""
    return line <= EMULATED_LINE


def check_arguments(op: str, **passed) -> None:
    """TypeError for an argument (passed with a non-default value) that the emulated line's op does not have."""
    if EMULATED_LINE >= _NEWEST:
        return
    for name, value in passed.items():
        since, default = ARGUMENT_SINCE.get((op, name), ((0, 0), None))
        if not at_least(since) and not (value is default or (default is not None and value == default)):
            raise TypeError(f"{op}() got an unexpected keyword argument '{name}' (torch_npu "
                            f"{'.'.join(map(str, EMULATED_LINE))} has no such argument; it was added in "
                            f"{'.'.join(map(str, since))})")
