"""LossModule._ensemble_values: the member modules eagerly, one template network on the
stacks' rows compiled; the same values and gradients either way, a drawn subset gathered
in the graph."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.objectives import LossModule, SoftUpdate


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # each test compiles the loss's code objects for losses of its own: a cache per test,
    # not one shared by all (dynamo's recompile limit is per code object)
    torch._dynamo.reset()
    yield


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


# compiled, 2 members (or 2 drawn rows) run one by one, 3 or more vmapped
@pytest.mark.parametrize("n,index", [(2, [1, 0]), (3, [2, 0, 1]), (4, [2, 0]), (4, [3, 1, 2])])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_values_and_gradients_match_a_hand_computation(compiled, n, index):
    loss = _Ensemble(_critic(), n=n)
    SoftUpdate(loss, tau=0.5)
    with torch.no_grad():  # targets distinct from the online stack
        for p in loss.target_qvalue_network_params.values(True, True):
            p.mul_(0.5)
    td = _data()
    action = torch.randn(5, 1)
    index = torch.tensor(index)

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
    assert online.shape == (n, 5, 1) and target.shape == (len(index), 5, 1)
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


def test_a_vmapped_ensemble_draws_each_members_dropout_mask():
    """Compiled, more than two members run vmapped: a random op (dropout) draws for each
    member on its own, as the members called one by one do; gradients reach the stacks."""

    class _DropQ(nn.Module):
        def __init__(self):
            super().__init__()
            self.l0, self.l1 = nn.Linear(3, 64), nn.Linear(64, 1)
            self.drop = nn.Dropout(0.5)

        def forward(self, obs, act):
            return self.l1(self.drop(torch.relu(self.l0(torch.cat([obs, act], -1)))))

    torch.manual_seed(0)
    critic = TensorDictModule(_DropQ(), in_keys=["observation", "action"], out_keys=["q"])
    loss = _Ensemble(critic, n=4)
    with torch.no_grad():  # the same weights in every member: outputs differ by the masks
        for p in loss.qvalue_network_params.values(True, True):
            p.copy_(p[0].expand_as(p))
    td = _data(b=64)
    fn = torch.compile(lambda td: _values(loss, "online", td), backend="aot_eager", fullgraph=True)
    out = fn(td)
    assert out.shape == (4, 64, 1)
    assert not torch.allclose(out[0], out[1]) and not torch.allclose(out[2], out[3])
    out.sum().backward()
    grads = [p.grad for p in loss.qvalue_network_params.values(True, True)]
    assert all(g is not None and g.shape[0] == 4 and g.abs().sum() > 0 for g in grads)


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
    loss = _Ensemble(_critic(norm=True), n=3)  # in train mode: the statistics move
    td = _data()
    index = torch.tensor([2, 0])
    eager = _values(loss, "target", td, index=index)
    compiled = torch.compile(
        lambda td, i: _values(loss, "target", td, index=i), backend="aot_eager", fullgraph=True
    )(td, index)
    torch.testing.assert_close(compiled, eager)
    assert compiled.shape == (2, 5, 1)


class _TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.l0 = nn.Linear(3, 2)

    def forward(self, obs, act):
        out = self.l0(torch.cat([obs, act], -1))
        return out[..., :1], out[..., 1:]


def _compiled_values(loss, kind, td, **kwargs):
    return torch.compile(
        lambda td: _values(loss, kind, td, **kwargs), backend="aot_eager", fullgraph=True
    )(td)


def test_several_outputs_or_a_missing_input_run_the_members():
    """A network writing two entries, or one whose input is absent (the members raise
    then), is no template call: the members run, the values as eagerly."""
    torch.manual_seed(0)
    two = TensorDictModule(_TwoOutputs(), in_keys=["observation", "action"], out_keys=["q", "v"])
    loss = _Ensemble(two, n=2)
    td = _data()
    torch.testing.assert_close(_compiled_values(loss, "online", td), _values(loss, "online", td))
    loss = _Ensemble(_critic())
    with pytest.raises(KeyError, match="action"):
        _values(loss, "online", td.exclude("action"))
    # the action given as an override instead: the template runs, as the members do
    action = torch.randn(5, 1)
    torch.testing.assert_close(
        _compiled_values(loss, "online", td.exclude("action"), overrides={"action": action}),
        _values(loss, "online", td.exclude("action"), overrides={"action": action}),
    )


def test_only_the_online_kind_gives_gradients_to_the_stacks():
    loss = _Ensemble(_critic())
    td = _data()
    for kind in ("detached", "target"):
        out = _compiled_values(loss, kind, td)
        assert not out.requires_grad
    out = _compiled_values(loss, "online", td)
    out.sum().backward()
    assert all(p.grad is not None for p in _stack(loss.qvalue_network_params))
    assert all(p.grad is None for p in _stack(loss.target_qvalue_network_params))


def test_a_copied_or_cast_loss_runs_its_own_stacks():
    """deepcopy and .double() rebind the stacks; the template (meta tensors) holds none."""
    import copy

    loss = _Ensemble(_critic())
    copied = copy.deepcopy(loss)
    with torch.no_grad():
        for p in copied.qvalue_network_params.values(True, True):
            p.mul_(2.0)
    td = _data()
    torch.testing.assert_close(
        _compiled_values(copied, "online", td),
        _by_hand(copied, td, _stack(copied.qvalue_network_params)),
    )
    torch.testing.assert_close(
        _compiled_values(loss, "online", td), _by_hand(loss, td, _stack(loss.qvalue_network_params))
    )
    loss.double()
    td64 = td.apply(lambda t: t.double() if t.is_floating_point() else t)
    out = _compiled_values(loss, "online", td64)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, _by_hand(loss, td64, _stack(loss.qvalue_network_params)))
    template = loss._functional["qvalue_network"]["template"]
    assert all(p.device.type == "meta" for p in template.parameters())


def test_a_multi_agent_critic_runs_the_members_when_compiled():
    """MultiAgentMLP keeps its weights in a TensorDictParams, which functional_call
    cannot swap under dynamo: the members run, the values as eagerly."""
    from rl.modules import MultiAgentMLP

    torch.manual_seed(0)
    net = MultiAgentMLP(
        n_agent_inputs=3, n_agent_outputs=1, n_agents=2, centralized=True, share_params=False,
        depth=1, num_cells=4,
    )  # fmt: skip
    loss = _Ensemble(TensorDictModule(net, in_keys=["obs"], out_keys=["q"]), n=2)
    td = TensorDict({"obs": torch.randn(5, 2, 3)}, [5])
    torch.testing.assert_close(_compiled_values(loss, "online", td), _values(loss, "online", td))
