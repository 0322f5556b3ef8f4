"""KLAdaptiveLR, group_optimizers, next_state_value and add_random_module.

Expected values are hand computations or ``torchrl==0.14.1``'s outputs on the same inputs.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

import rl.objectives._random_modules as random_modules
from rl.objectives import KLAdaptiveLR, add_random_module, group_optimizers, next_state_value


def _params(n: int = 2) -> list[nn.Parameter]:
    return [nn.Parameter(torch.zeros(1)) for _ in range(n)]


class TestKLAdaptiveLR:
    # torchrl.objectives.KLAdaptiveLR(opt, target_kl=0.02, factor=1.5, min_lr=2e-4,
    # max_lr=1e-2) on SGD groups of lr 1e-3 and 9e-3, fed the KLs below in turn
    KLS = [0.05, 0.041, 0.04, 0.02, 0.0099, 0.01, 0.0, 0.001, 0.001, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
    TORCHRL_LRS = [
        [0.0006666666666666666, 0.005999999999999999],
        [0.0004444444444444444, 0.003999999999999999],
        [0.0004444444444444444, 0.003999999999999999],
        [0.0004444444444444444, 0.003999999999999999],
        [0.0006666666666666666, 0.005999999999999998],
        [0.0006666666666666666, 0.005999999999999998],
        [0.0006666666666666666, 0.005999999999999998],
        [0.001, 0.008999999999999998],
        [0.0015, 0.01],
        [0.001, 0.006666666666666666],
        [0.0006666666666666666, 0.004444444444444444],
        [0.0004444444444444444, 0.0029629629629629624],
        [0.00029629629629629624, 0.0019753086419753083],
        [0.0002, 0.0013168724279835388],
        [0.0002, 0.0008779149519890258],
    ]

    def _optimizer(self):
        a, b = _params()
        optimizer = torch.optim.SGD([a], lr=1e-3)
        optimizer.add_param_group({"params": [b], "lr": 9e-3})
        return optimizer

    def test_schedule_matches_torchrl(self):
        scheduler = KLAdaptiveLR(
            self._optimizer(), target_kl=0.02, factor=1.5, min_lr=2e-4, max_lr=1e-2
        )
        lrs = []
        for i, kl in enumerate(self.KLS):
            scheduler.step(torch.tensor(kl) if i == 9 else kl)  # a 0-d tensor is accepted
            lrs.append(scheduler.get_last_lr())
        for got, want in zip(lrs, self.TORCHRL_LRS):
            assert got == pytest.approx(want, rel=1e-12)
        assert scheduler.last_kl == 0.5

    def test_band_edges_by_hand(self):
        scheduler = KLAdaptiveLR(self._optimizer(), target_kl=0.02, factor=2.0, max_lr=1.0)
        scheduler.step(0.04)  # exactly 2 * target: kept
        scheduler.step(0.01)  # exactly target / 2: kept
        scheduler.step(0.0)  # a policy that did not move: kept
        assert scheduler.get_last_lr() == pytest.approx([1e-3, 9e-3])
        scheduler.step(0.0401)
        assert scheduler.get_last_lr() == pytest.approx([5e-4, 4.5e-3])
        scheduler.step(0.0099)
        assert scheduler.get_last_lr() == pytest.approx([1e-3, 9e-3])

    def test_tensor_learning_rate_stays_a_tensor(self):
        lr = torch.tensor(1e-3)
        optimizer = torch.optim.Adam(_params(1), lr=lr)
        KLAdaptiveLR(optimizer, target_kl=0.01, factor=2.0).step(1.0)
        assert optimizer.param_groups[0]["lr"] is lr
        assert lr.item() == pytest.approx(5e-4)

    def test_state_dict_round_trip(self):
        scheduler = KLAdaptiveLR(self._optimizer(), target_kl=0.02, factor=1.5)
        scheduler.step(0.3)
        other = KLAdaptiveLR(self._optimizer(), target_kl=1.0)
        other.load_state_dict(scheduler.state_dict())
        assert other.state_dict() == {
            "target_kl": 0.02,
            "factor": 1.5,
            "min_lr": 1e-5,
            "max_lr": 1e-2,
            "last_kl": 0.3,
        }
        with pytest.raises(KeyError, match=r"missing \['factor'\]"):
            other.load_state_dict({"target_kl": 0.1, "min_lr": 1e-5, "max_lr": 1e-2})

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"target_kl": 0.0}, r"target_kl must be finite and positive, got 0.0"),
            ({"target_kl": float("nan")}, r"target_kl must be finite and positive, got nan"),
            ({"factor": 1.0}, r"factor must be finite and > 1, got 1.0"),
            ({"min_lr": 0.0}, r"0 < min_lr <= max_lr < inf, got min_lr=0.0"),
            ({"min_lr": 0.1, "max_lr": 0.01}, r"got min_lr=0.1 and max_lr=0.01"),
            ({"max_lr": float("inf")}, r"max_lr=inf"),
        ],
    )
    def test_bad_arguments(self, kwargs, match):
        kwargs = {"target_kl": 0.01, **kwargs}
        with pytest.raises(ValueError, match=match):
            KLAdaptiveLR(self._optimizer(), **kwargs)

    def test_bad_optimizer_and_kl(self):
        with pytest.raises(TypeError, match="needs an optimizer \\(with param_groups\\), got list"):
            KLAdaptiveLR([], target_kl=0.01)
        scheduler = KLAdaptiveLR(self._optimizer(), target_kl=0.01)
        with pytest.raises(ValueError, match="finite KL divergence, got inf"):
            scheduler.step(float("inf"))
        with pytest.raises(ValueError, match=r"one KL value, got a tensor of shape \(2,\)"):
            scheduler.step(torch.zeros(2))


class TestGroupOptimizers:
    def test_groups_keep_their_hyperparameters_and_step_together(self):
        actor, critic = nn.Linear(2, 1), nn.Linear(2, 1)
        optim = group_optimizers(
            torch.optim.SGD(actor.parameters(), lr=0.1),
            None,
            torch.optim.SGD(critic.parameters(), lr=0.5, momentum=0.9),
        )
        assert type(optim) is torch.optim.SGD
        assert [g["lr"] for g in optim.param_groups] == [0.1, 0.5]
        assert [g["momentum"] for g in optim.param_groups] == [0, 0.9]
        before = [p.detach().clone() for p in (actor.bias, critic.bias)]
        (actor.bias.sum() + critic.bias.sum()).backward()
        optim.step()
        torch.testing.assert_close(actor.bias.detach(), before[0] - 0.1)
        torch.testing.assert_close(critic.bias.detach(), before[1] - 0.5)

    def test_errors(self):
        a, b = _params()
        with pytest.raises(ValueError, match="optimizers of one class, got Adam and SGD"):
            group_optimizers(torch.optim.Adam([a]), torch.optim.SGD([b], lr=0.1))
        with pytest.raises(ValueError, match="at least one optimizer, got none"):
            group_optimizers(None)


def _net(in_f: int, hidden: int, out: int, offset: float) -> nn.Sequential:
    net = nn.Sequential(nn.Linear(in_f, hidden), nn.ReLU(), nn.Linear(hidden, out))
    with torch.no_grad():
        for i, p in enumerate(net.parameters()):
            k = torch.arange(p.numel(), dtype=torch.float32)
            p.copy_((torch.sin(k * 0.37 + offset + i) * 0.6).reshape(p.shape))
    return net


def _obs(step: int) -> torch.Tensor:
    k = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    return torch.cos(k * 0.9 + step * 1.3) * (1.0 + step) + 0.5 * step


def _transitions() -> TensorDict:
    return TensorDict(
        {
            "observation": _obs(1),
            "action": torch.ones(4, 1),
            "next": {
                "observation": _obs(2),
                "reward": torch.tensor([[1.0], [2.0], [-1.0], [0.5]]),
                "done": torch.tensor([[False], [True], [False], [False]]),
            },
        },
        [4],
    )


class TestNextStateValue:
    def _operator(self):
        return TensorDictModule(
            _net(3, 8, 1, 2.0), in_keys=["observation"], out_keys=["state_value"]
        )

    def test_operator_on_the_next_state(self):
        td = _transitions()
        out = next_state_value(td, self._operator(), next_val_key="state_value", gamma=0.9)
        # by hand: r + 0.9 * (1 - done) * V(s')
        value = _net(3, 8, 1, 2.0)(_obs(2)).squeeze(-1).detach()
        done = td["next", "done"].squeeze(-1).float()
        torch.testing.assert_close(out, td["next", "reward"].squeeze(-1) + 0.9 * (1 - done) * value)
        # torchrl.objectives.next_state_value on the same data
        torch.testing.assert_close(
            out, torch.tensor([-0.75461745262146, 2.0, -2.527623176574707, -2.4962317943573])
        )
        assert not out.requires_grad

    def test_n_step_discount(self):
        td = _transitions()
        td["steps_to_next_obs"] = torch.tensor([[1], [2], [3], [2]])
        out = next_state_value(td, self._operator(), next_val_key="state_value", gamma=0.9)
        torch.testing.assert_close(
            out, torch.tensor([-0.75461745262146, 2.0, -2.237374782562256, -2.196608543395996])
        )

    def test_given_next_value(self):
        out = next_state_value(
            _transitions(), gamma=0.5, pred_next_val=torch.tensor([[2.0], [3.0], [4.0], [5.0]])
        )
        torch.testing.assert_close(out, torch.tensor([2.0, 2.0, 1.0, 3.0]))

    def test_no_bootstrap_returns_rewards(self):
        td = _transitions()
        out = next_state_value(td, self._operator(), next_val_key="state_value", gamma=0.0)
        torch.testing.assert_close(out, torch.tensor([1.0, 2.0, -1.0, 0.5]))
        td["next", "done"] = torch.ones(4, 1, dtype=torch.bool)
        out = next_state_value(td, None, pred_next_val=torch.zeros(4, 1))
        assert out is not None and out.shape == (4,)

    def test_root_entries_fill_the_next_state(self):
        # a Q(s, a)-style operator also reading a root entry absent under "next"
        td = _transitions()
        td["goal"] = torch.full((4, 1), 2.0)
        op = TensorDictModule(
            lambda obs, goal: obs.sum(-1, keepdim=True) * goal,
            in_keys=["observation", "goal"],
            out_keys=["state_action_value"],
        )
        out = next_state_value(td, op, gamma=1.0)
        done = td["next", "done"].squeeze(-1).float()
        expected = td["next", "reward"].squeeze(-1) + (1 - done) * 2.0 * _obs(2).sum(-1)
        torch.testing.assert_close(out, expected)

    def test_errors(self):
        with pytest.raises(ValueError, match="needs an operator or pred_next_val, got neither"):
            next_state_value(_transitions())
        op = TensorDictModule(nn.Linear(3, 1), in_keys=["pixels"], out_keys=["state_value"])
        with pytest.raises(KeyError, match="operator reads 'pixels', found neither under 'next'"):
            next_state_value(_transitions(), op, next_val_key="state_value")


class TestAddRandomModule:
    def test_registers_a_class(self, monkeypatch):
        monkeypatch.setattr(random_modules, "RANDOM_MODULE_LIST", random_modules.RANDOM_MODULE_LIST)

        class Noisy(nn.Module):
            def forward(self, x):
                return x + torch.randn_like(x)

        net = nn.Sequential(nn.Linear(2, 2), Noisy())
        assert random_modules.vmap_randomness(net) == "error"
        assert random_modules.vmap_randomness(nn.Sequential(nn.Dropout(0.1))) == "different"
        add_random_module(Noisy)
        add_random_module(Noisy)
        assert random_modules.RANDOM_MODULE_LIST.count(Noisy) == 1
        assert random_modules.vmap_randomness(nn.Linear(2, 2), net) == "different"

    def test_refuses_an_instance(self):
        with pytest.raises(TypeError, match="takes an nn.Module subclass .* of type Dropout"):
            add_random_module(nn.Dropout())
