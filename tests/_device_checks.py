"""Checks of the examples' ``--device`` on a machine without a GPU (``meta`` stands for one).

A tensor on PyTorch's ``meta`` device has a shape and a device but no values, and an
operation that meets a non-scalar CPU tensor fails there as it does on CUDA ("Tensor on
device cpu is not on the expected device meta!"; a 0-dim CPU tensor is accepted by both).
A script's learner built with ``cfg.device="meta"`` and stepped on a batch moved there
shows whether everything it owns and makes lives on the device.
"""

from __future__ import annotations

from itertools import chain

import pytest
import torch

META = torch.device("meta")

#: the mark of the tests that run on a GPU (with ``pytest.mark.gpu``): skipped without one
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def random_transitions(off, env_id: str, size: int = 64):
    """``size`` transitions of uniformly random actions in ``env_id``, collected on the
    CPU with ``examples/_offpolicy.py`` (``off``)."""
    env = off.make_env(env_id)
    env.set_seed(0)
    return off.transitions(env.rollout(size, break_when_any_done=False))


def assert_all_on_meta(loss_module, optimizers, logs) -> None:
    """Every parameter and buffer of ``loss_module``, every optimizer's state (but
    ``torch.optim``'s eager step count, which it keeps on the CPU by design) and tensor
    learning rate, and the step's ``logs`` (a tensor or a mapping of them) on ``meta``."""
    named = chain(loss_module.named_parameters(), loss_module.named_buffers())
    off = [name for name, t in named if t.device != META]
    assert not off, f"left off the device: {off}"
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            if torch.is_tensor(group["lr"]):
                assert group["lr"].device == META
        # (torch.optim keeps an eager, non-capturable step count on the CPU, by design)
        states = [
            v
            for state in optimizer.state.values()
            for key, v in state.items()
            if torch.is_tensor(v) and key != "step"
        ]
        assert states and all(v.device == META for v in states)
    flat = [logs] if torch.is_tensor(logs) else logs.values()
    assert all(t.device == META for t in flat)
