"""hold_out_net: the network gets no gradient, its inputs do; eager and compiled alike."""

from __future__ import annotations

import torch
import torch._dynamo
from torch._dynamo.utils import counters

from rl.objectives import hold_out_net


def _grads(critic, compile):
    action = torch.tensor([[1.0, -2.0]], requires_grad=True)

    def loss_fn(action):
        with hold_out_net(critic):
            held = critic(action).sum()
        return held + critic(action).sum()  # outside the block: the critic trains

    fn = torch.compile(loss_fn, backend="eager", fullgraph=True) if compile else loss_fn
    loss = fn(action)
    return torch.autograd.grad(loss, [action, critic.weight, critic.bias])


def test_hold_out_net_gradients_eager_and_compiled():
    torch.manual_seed(0)
    critic = torch.nn.Linear(2, 1)
    torch._dynamo.reset()
    counters.clear()
    eager = _grads(critic, compile=False)
    compiled = _grads(critic, compile=True)
    # the action's gradient counts both calls, the critic's only the one outside
    torch.testing.assert_close(eager[0], 2 * critic.weight.detach())
    torch.testing.assert_close(eager[1], torch.tensor([[1.0, -2.0]]))
    torch.testing.assert_close(eager[2], torch.ones(1))
    for c, e in zip(compiled, eager):
        torch.testing.assert_close(c, e)
    # the parameters are the module's own again, and trainable, after the block
    assert all(p.requires_grad for p in critic.parameters())
    assert isinstance(critic.weight, torch.nn.Parameter)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]


def test_hold_out_params_freezes_only_the_given_parameters_and_restores_them():
    from rl.objectives import hold_out_params

    critic = torch.nn.Linear(2, 1)
    with hold_out_params([critic.weight]):
        assert not critic.weight.requires_grad and critic.bias.requires_grad
        critic(torch.ones(1, 2)).sum().backward()
    assert critic.weight.requires_grad and critic.bias.requires_grad
    assert critic.weight.grad is None
    torch.testing.assert_close(critic.bias.grad, torch.ones(1))
