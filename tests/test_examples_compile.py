"""``--compile`` and ``--cudagraphs`` of the example scripts.

PPO and SAC run a few compiled updates on a tiny budget under ``torch._dynamo``'s
``error_on_recompile``: every compiled function (the whole update step and the
collector's policy) is compiled once, at its first call, and never again. The graph
breaks left are PyTorch's own, none in rl's code or in the scripts: ``Tensor.backward()``
(dynamo does not trace it unless its experimental ``trace_autograd_ops`` is on) and the
two that ``torch.optim.Optimizer.step`` inserts on purpose around its grad-mode switch.
After the first batch's updates, no new graph is compiled and no new break is met.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: the breaks PyTorch itself makes in a compiled ``loss.backward(); optimizer.step()``
TORCH_OWN_BREAKS = (
    "Unsupported Tensor.backward() call",  # backward is not traced by default
    "Call to `torch._dynamo.graph_break()`",  # torch.optim's _use_grad wrapper, twice
)


def _load(name: str):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _break_reasons() -> set[str]:
    return {reason.split("\n")[0] for reason in counters["graph_break"]}


def _compiled_totals() -> tuple[int, int]:
    """Frames dynamo has compiled so far and graph breaks it has met."""
    return counters["frames"]["total"], sum(counters["graph_break"].values())


def _watch(module, monkeypatch) -> list[tuple[int, int]]:
    """Records the dynamo totals after every call of the script's compiled update
    step(s); the script builds them with ``compile_update``."""
    seen: list[tuple[int, int]] = []
    real = module.compile_update

    def compile_update(fn, **kwargs):
        compiled = real(fn, **kwargs)

        def watched(*args):
            out = compiled(*args)
            seen.append(_compiled_totals())
            return out

        return watched

    monkeypatch.setattr(module, "compile_update", compile_update)
    return seen


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(error_on_recompile=True):
        yield
    torch._dynamo.reset()


def _check(seen: list[tuple[int, int]], first: int) -> None:
    assert len(seen) > first + 2, seen
    # after the first ``first`` updates (a branch of a loss first taken there is compiled
    # then, once): no frame compiled, no graph break met
    assert seen[first:] == [seen[first]] * len(seen[first:]), seen
    unexpected = {r for r in _break_reasons() if not r.startswith(TORCH_OWN_BREAKS)}
    assert not unexpected, unexpected


@pytest.mark.slow  # compilation: 10-60 s each on a 2-core CPU
def test_ppo_compiled_once_without_breaks_of_its_own(fresh_dynamo, monkeypatch, tmp_path):
    ppo = _load("ppo")
    seen = _watch(ppo, monkeypatch)
    cfg = ppo.Config(
        total_frames=512,
        num_envs=4,
        num_steps=32,
        update_epochs=2,
        num_minibatches=2,
        eval_episodes=1,
        progress=False,
        log_dir=str(tmp_path),
        compile=True,
    )
    summary = ppo.main(cfg)
    assert summary["frames"] == 512
    assert len(seen) == 4 * 2 * 2  # batches x epochs x minibatches
    _check(seen, first=4)  # the first batch's updates


@pytest.mark.slow  # compilation: 10-60 s each on a 2-core CPU
def test_sac_compiled_once_without_breaks_of_its_own(fresh_dynamo, monkeypatch, tmp_path):
    sac = _load("sac")
    seen = _watch(sac, monkeypatch)
    cfg = sac.Config(
        total_frames=300,
        init_random_frames=100,
        frames_per_batch=50,
        utd_ratio=0.2,
        batch_size=32,
        hidden=16,
        eval_episodes=1,
        progress=False,
        log_dir=str(tmp_path),
        compile=True,
    )
    summary = sac.main(cfg)
    assert summary["frames"] == 300
    assert len(seen) == 5 * 10  # batches past the random frames x updates per batch
    _check(seen, first=10)  # the first batch's updates


@pytest.mark.slow  # compilation: 10-60 s each on a 2-core CPU
def test_compiled_update_matches_eager():
    common = _load("_common")
    torch.manual_seed(0)
    nets = [torch.nn.Linear(3, 2) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    optims = [torch.optim.Adam(net.parameters(), lr=torch.tensor(1e-2)) for net in nets]

    def make(net, optim):
        def step(x):
            loss = net(x).pow(2).mean()
            common.zero_grad(optim)
            loss.backward()
            optim.step()
            return loss.detach()

        return step

    eager = make(nets[0], optims[0])
    compiled = common.compile_update(make(nets[1], optims[1]), compile=True)
    for _ in range(3):
        x = torch.randn(8, 3)
        torch.testing.assert_close(compiled(x), eager(x))
    torch.testing.assert_close(nets[1].weight, nets[0].weight)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
@pytest.mark.parametrize("script", ["ppo", "sac"])
def test_cudagraphs_without_cuda_names_the_missing_device(script, tmp_path):
    module = _load(script)
    cfg = module.Config(cudagraphs=True, progress=False, log_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="--cudagraphs needs a CUDA device"):
        module.main(cfg)
