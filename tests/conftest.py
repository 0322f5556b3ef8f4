"""Fixtures of the example scripts' ``--compile`` and ``--device`` tests (their helpers are
in ``_compile_checks.py`` and ``_device_checks.py``). torch, dynamo and the example modules
are imported inside the fixtures: the other tests here do not pay for them."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def fresh_dynamo():
    """Dynamo reset, its counters cleared, a recompilation an error."""
    import torch
    import torch._dynamo
    import torch._inductor.config
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    # fallback_random: inductor draws the random numbers as eager torch does, so that
    # a compiled loss equals the eager one on the same draws
    with (
        torch._dynamo.config.patch(error_on_recompile=True),
        torch._inductor.config.patch(fallback_random=True),
    ):
        yield
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def pendulum_dataset(tmp_path_factory):
    """400 transitions (2 episodes) of uniformly random actions on Pendulum-v1, saved as
    ``sac.py --save-buffer`` saves its buffer."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import _offpolicy
    import torch

    path = tmp_path_factory.mktemp("pendulum") / "data"
    env = _offpolicy.make_env("Pendulum-v1")
    env.set_seed(0)
    torch.manual_seed(0)
    rollout = env.rollout(400, break_when_any_done=False)
    buffer = _offpolicy.make_replay_buffer(400, 16, scratch_dir=path)
    buffer.extend(_offpolicy.transitions(rollout))
    cfg = SimpleNamespace(env_id="Pendulum-v1", seed=0, eval_episodes=1)
    _offpolicy.save_dataset(buffer, path, cfg, policy_return=-1000.0)
    return path


@pytest.fixture
def no_bound_reads(monkeypatch):
    """``TanhNormal`` and ``TanhDelta`` built as inside a CUDA graph's capture: their tensor
    bounds neither checked nor derived on the host. An actor's bounds live on its device;
    on CUDA a distribution checks them (a host read; TanhNormal's then cached), but
    ``meta`` tensors cannot be read at all."""
    from rl.modules.distributions import _utils

    monkeypatch.setattr(_utils, "traced", lambda tensor: True)


@pytest.fixture
def meta_gae(monkeypatch):
    """GAE's eager check for NaN next observations reads one value on the host (a sync on
    CUDA), which meta tensors, having no values, cannot give: the check returns its input
    unchanged here, as it does for a batch without NaN (the tests assert theirs has none)."""
    from rl.objectives.value import _base

    monkeypatch.setattr(_base, "_finite_next", lambda nxt, root: nxt)
