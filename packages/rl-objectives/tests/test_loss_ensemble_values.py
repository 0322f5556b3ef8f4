"""LossModule._ensemble_values: the member modules eagerly, one template network on the
stacks' rows compiled; the same values and gradients either way, a drawn subset gathered
in the graph."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.objectives import LossModule, SoftUpdate


class _Ensemble(LossModule):
    def __init__(self, critic, n=4):
        super().__init__()
        self.convert_to_functional(
            critic, "qvalue_network", expand_dim=n, create_target_params=True
        )

    def forward(self, td):  # pragma: no cover - not used
        raise NotImplementedError


class _Q(nn.Module):
    def __init__(self, norm=False):
        super().__init__()
        self.l0, self.l1 = nn.Linear(3, 8), nn.Linear(8, 1)
        self.norm = nn.BatchNorm1d(8) if norm else nn.Identity()

    def forward(self, obs, act):
        return self.l1(torch.relu(self.norm(self.l0(torch.cat([obs, act], -1)))))


def _critic(norm=False):
    torch.manual_seed(0)
    return TensorDictModule(_Q(norm), in_keys=["observation", "action"], out_keys=["q"])


def _stack(params):
    return [
        params.get(("module", layer, name)) for layer in ("l0", "l1") for name in ("weight", "bias")
    ]


def _data(b=5):
    torch.manual_seed(1)
    return TensorDict({"observation": torch.randn(b, 2), "action": torch.randn(b, 1)}, [b])


def _by_hand(loss, td, tensors, action=None):
    """Each member's MLP written out on its slice of the stacked tensors."""
    x = torch.cat([td["observation"], td["action"] if action is None else action], -1)
    w0, b0, w1, b1 = tensors
    return torch.stack(
        [torch.relu(x @ w0[i].T + b0[i]) @ w1[i].T + b1[i] for i in range(w0.shape[0])]
    )


def _values(loss, kind, td, index=None, overrides=None):
    return loss._ensemble_values("qvalue_network", kind, td, "q", overrides, index)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_values_and_gradients_match_a_hand_computation(compiled):
    loss = _Ensemble(_critic())
    SoftUpdate(loss, tau=0.5)
    with torch.no_grad():  # targets distinct from the online stack
        for p in loss.target_qvalue_network_params.values(True, True):
            p.mul_(0.5)
    td = _data()
    action = torch.randn(5, 1)
    index = torch.tensor([2, 0])

    def run(td, action, index):
        return (
            _values(loss, "online", td),
            _values(loss, "detached", td, overrides={"action": action}),
            _values(loss, "target", td, index=index),
        )

    fn = torch.compile(run, backend="aot_eager", fullgraph=True) if compiled else run
    online, detached, target = fn(td, action, index)
    stacked = _stack(loss.qvalue_network_params)
    target_stacked = _stack(loss.target_qvalue_network_params)
    torch.testing.assert_close(online, _by_hand(loss, td, stacked))
    torch.testing.assert_close(detached, _by_hand(loss, td, stacked, action))
    torch.testing.assert_close(target, _by_hand(loss, td, target_stacked)[index])
    assert online.shape == (4, 5, 1) and target.shape == (2, 5, 1)
    # gradients: online to the stack, detached to the overriding input only
    action.requires_grad_(True)
    online, detached, _ = fn(td, action, index)
    (online.sum() + detached.sum()).backward()
    expected = torch.autograd.grad(_by_hand(loss, td, stacked).sum(), stacked)
    for p, g in zip(stacked, expected, strict=True):
        torch.testing.assert_close(p.grad, g)
    expected_action = torch.autograd.grad(
        _by_hand(loss, td, [t.detach() for t in stacked], action).sum(), action
    )[0]
    torch.testing.assert_close(action.grad, expected_action)


def test_compiled_runs_no_member_module():
    """Compiled, no member module runs (the template runs on the stacks' rows); eagerly,
    only the drawn members run."""
    loss = _Ensemble(_critic())
    called = []
    for member in loss._ensemble("qvalue_network", "target"):
        member.module.register_forward_hook(lambda *a: called.append(1))
    td = _data()
    index = torch.tensor([3, 1])
    eager = _values(loss, "target", td, index=index)
    assert len(called) == 2
    called.clear()
    compiled = torch.compile(
        lambda td, i: _values(loss, "target", td, index=i), backend="aot_eager", fullgraph=True
    )(td, index)
    assert called == []
    torch.testing.assert_close(compiled, eager)


def test_a_network_with_buffers_runs_member_by_member_when_compiled():
    """Running statistics stay with the members: they run, and a drawn subset is then
    every member's value indexed (no graph break)."""
    loss = _Ensemble(_critic(norm=True), n=3)
    loss.eval()
    td = _data()
    index = torch.tensor([2, 0])
    eager = _values(loss, "target", td, index=index)
    compiled = torch.compile(
        lambda td, i: _values(loss, "target", td, index=i), backend="aot_eager", fullgraph=True
    )(td, index)
    torch.testing.assert_close(compiled, eager)
    assert compiled.shape == (2, 5, 1)
