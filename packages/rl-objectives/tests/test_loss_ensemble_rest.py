"""How an ensemble's online members hold the stacked parameters.

A view of a stacked parameter keeps the parameter's gradient accumulator alive, and
autograd records the CUDA stream that accumulator was made on: kept from the loss's
construction, or from one forward into the next one's binding, it ties every later backward
to that stream, and a CUDA graph captured on a side stream after eager warm-up calls fails
("operation would make the legacy stream depend on a capturing blocking stream"). Once
built the members hold views of the detached stacks; a forward lets the last forward's views
go before it binds its own. These tests check the state after construction and the
gradients on any device and, where a GPU is present, the capture itself.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl.modules import (
    MLP,
    NormalParamExtractor,
    ProbabilisticActor,
    TanhNormal,
    TensorDictModule,
    ValueOperator,
)
from rl.objectives import SACLoss, SoftUpdate

OBS, ACT = 3, 1


def _sac(device="cpu") -> SACLoss:
    torch.manual_seed(0)
    with torch.device(device):
        actor = ProbabilisticActor(
            TensorDictModule(
                nn.Sequential(
                    MLP(in_features=OBS, out_features=2 * ACT, num_cells=[32, 32]),
                    NormalParamExtractor(),
                ),
                in_keys=["observation"],
                out_keys=["loc", "scale"],
            ),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
        )
        qvalue = ValueOperator(
            MLP(in_features=OBS + ACT, out_features=1, num_cells=[32, 32]),
            in_keys=["observation", "action"],
        )
        return SACLoss(actor, qvalue, num_qvalue_nets=2, target_entropy=-float(ACT))


def _batch(n=16, device="cpu") -> TensorDict:
    g = torch.Generator().manual_seed(1)
    return TensorDict(
        observation=torch.randn(n, OBS, generator=g),
        action=torch.rand(n, ACT, generator=g) * 2 - 1,
        next=TensorDict(
            observation=torch.randn(n, OBS, generator=g),
            reward=torch.randn(n, 1, generator=g),
            done=torch.zeros(n, 1, dtype=torch.bool),
            terminated=torch.zeros(n, 1, dtype=torch.bool),
            batch_size=[n],
        ),
        batch_size=[n],
    ).to(device)


def _member_tensors(loss: SACLoss) -> list[torch.Tensor]:
    members = loss._functional["qvalue_network"]["ensemble"].copies
    return [t for m in members for t in m.parameters()]


def test_members_hold_no_graph_after_construction_or_a_move():
    loss = _sac()
    tensors = _member_tensors(loss)
    assert tensors and all(t.grad_fn is None and not t.requires_grad for t in tensors)
    # same values as the stacked parameters (views of them, without their graph)
    stacked = loss.qvalue_network_params.flatten_keys(".")
    first = loss._functional["qvalue_network"]["ensemble"].copies[1]
    for name, t in first.named_parameters():
        torch.testing.assert_close(t, stacked.get(name)[1].detach())
    loss = loss.to(torch.float64).to(torch.float32)
    assert all(t.grad_fn is None for t in _member_tensors(loss))


def test_rebinding_each_forward_keeps_the_gradients():
    loss, data = _sac(), _batch()
    torch.manual_seed(3)  # the next actions are drawn: the same draws in both forwards
    out = loss(data)
    (out["loss_qvalue"]).backward()
    first = {k: v.grad.clone() for k, v in loss.qvalue_network_params.items(True, True)}
    # the members of an online call carry the graph to the stacked parameters
    members = loss._ensemble("qvalue_network")
    views = [t for m in members for t in m.parameters()]
    assert views and all(t.grad_fn is not None for t in views)
    loss.zero_grad()
    torch.manual_seed(3)
    loss(data)["loss_qvalue"].backward()  # the same batch: the same gradient again
    for key, value in loss.qvalue_network_params.items(True, True):
        torch.testing.assert_close(value.grad, first[key])
        assert value.grad.abs().sum() > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_sac_update_captures_in_a_cuda_graph_after_eager_warmup():
    """The whole update (losses, backward, capturable Adam, Polyak targets) in a
    CudaGraphModule: warm-up calls on its side stream, then the capture, then replays
    that train as the eager update does."""
    from tensordict.nn import CudaGraphModule

    device = torch.device("cuda", 0)

    def build():
        loss = _sac(device)
        target = SoftUpdate(loss, tau=0.05)
        optim = torch.optim.Adam(loss.parameters(), lr=1e-3, capturable=True)

        def update(data):
            out = loss(data)
            total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
            optim.zero_grad(set_to_none=False)
            total.backward()
            optim.step()
            target.step()
            return TensorDict(loss=total.detach())  # a CudaGraphModule returns TensorDicts

        return loss, update

    data = _batch(device=device)
    eager_loss, eager = build()
    graph_loss, update = build()
    graphed = CudaGraphModule(update, in_keys=[], out_keys=[], warmup=3)
    for _ in range(8):  # 2 eager warm-ups on the side stream, the capture, 5 replays
        torch.manual_seed(2)
        a = eager(data)
        torch.manual_seed(2)
        b = graphed(data)
    torch.cuda.synchronize()
    assert torch.isfinite(b["loss"]).all()
    # a replay draws its own actions (the captured generator's offsets): the parameters
    # moved as far, not to the same values
    start = _sac(device).qvalue_network_params

    def moved(loss):
        pairs = zip(loss.qvalue_network_params.values(True, True), start.values(True, True))
        return sum((p - q).abs().sum() for p, q in pairs)

    moved_eager, moved_graph = moved(eager_loss), moved(graph_loss)
    assert moved_graph > 0
    assert 0.5 < (moved_graph / moved_eager).item() < 2.0
    assert torch.isfinite(a["loss"]).all()
