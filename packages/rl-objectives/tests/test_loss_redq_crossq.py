"""REDQLoss and CrossQLoss on hand-computed cases (same setup as test_loss_sac.py).

Deterministic policy: a = mu(s) = 0.5 s, log pi(a) = -a^2. Critics Q_i = s + w_i a.
Transition: s = 1, a = 0.2, s' = 2, r = 1, gamma = 0.9, alpha = 0.5.
"""

import copy

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from rl.modules import BatchRenorm1d
from rl.objectives import CrossQLoss, REDQLoss, SoftUpdate

from .test_loss_sac import QNet, _data, _det_actor


def _smooth_l1(x):
    x = x.abs()
    return torch.where(x < 1, 0.5 * x**2, x - 0.5)


def _critic():
    return TensorDictModule(QNet(), ["observation", "action"], ["state_action_value"])


class TestREDQLoss:
    w = torch.tensor([2.0, 1.0, 3.0])

    def _loss(self):
        loss = REDQLoss(
            _det_actor(), _critic(), num_qvalue_nets=3, sub_sample_len=2, gamma=0.9, alpha_init=0.5
        )
        with torch.no_grad():
            weight = torch.stack([torch.ones(3), self.w], -1).reshape(3, 1, 2)
            loss.qvalue_network_params.get(("module", "linear", "weight")).copy_(weight)
        SoftUpdate(loss, tau=0.005)
        return loss

    def test_values(self):
        loss = self._loss()
        torch.manual_seed(7)
        subset = torch.randperm(3)[:2].sort()[0]
        torch.manual_seed(7)
        td = _data()
        out = loss(td)
        # actor: mean_i(0.5 * -0.25 - (1 + w_i * 0.5))
        torch.testing.assert_close(out["loss_actor"], (-0.125 - (1 + 0.5 * self.w)).mean())
        next_value = (2 + self.w[subset] + 0.5).min()
        target = 1 + 0.9 * next_value
        pred = 1 + 0.2 * self.w
        torch.testing.assert_close(out["target_value"], target)
        torch.testing.assert_close(out["loss_qvalue"], _smooth_l1(pred - target).mean())
        torch.testing.assert_close(td["td_error"], ((pred - target) ** 2).max().reshape(1))
        # target_entropy = -1; log-probs -0.25 (current) and -1 (next)
        torch.testing.assert_close(out["loss_alpha"], torch.tensor(-0.5 * (-1.25 - 2.0) / 2))
        torch.testing.assert_close(out["entropy"], torch.tensor(0.625))

    def test_gradients(self):
        loss = self._loss()
        out = loss(_data())
        q = loss.qvalue_network_params.get(("module", "linear", "weight"))
        out["loss_actor"].backward(retain_graph=True)
        assert q.grad is None and loss.log_alpha.grad is None
        out["loss_qvalue"].backward(retain_graph=True)
        assert q.grad is not None and loss.log_alpha.grad is None
        out["loss_alpha"].backward()
        assert loss.log_alpha.grad is not None
        assert all(t.grad is None for t in loss.target_qvalue_network_params.values(True, True))

    def test_alpha_clamped(self):
        loss = REDQLoss(_det_actor(), _critic(), num_qvalue_nets=2, alpha_init=50.0)
        torch.testing.assert_close(loss.alpha, torch.tensor(10.0))


class TestREDQLossDeprecated:
    w = torch.tensor([2.0, 1.0, 3.0])

    def test_values(self):
        from rl.objectives.deprecated import DoubleREDQLoss_deprecated, REDQLoss_deprecated

        loss = REDQLoss_deprecated(
            _det_actor(), _critic(), num_qvalue_nets=3, sub_sample_len=2, gamma=0.9, alpha_init=0.5
        )
        with torch.no_grad():
            weight = torch.stack([torch.ones(3), self.w], -1).reshape(3, 1, 2)
            loss.qvalue_network_params.get(("module", "linear", "weight")).copy_(weight)
        SoftUpdate(loss, tau=0.005)
        torch.manual_seed(7)
        subset = torch.randperm(3)[:2].sort()[0]
        torch.manual_seed(7)
        td = _data()
        out = loss(td)
        assert sorted(out.keys()) == ["alpha", "entropy", "loss_actor", "loss_alpha", "loss_qvalue"]
        assert loss.out_keys == ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]
        torch.testing.assert_close(out["loss_actor"], (-0.125 - (1 + 0.5 * self.w)).mean())
        target = 1 + 0.9 * (2 + self.w[subset] + 0.5).min()
        pred = 1 + 0.2 * self.w
        torch.testing.assert_close(out["loss_qvalue"], _smooth_l1(pred - target).mean())
        # the absolute TD error (REDQLoss squares it)
        torch.testing.assert_close(td["td_error"], (pred - target).abs().max().reshape(1))
        # the current draw only: -alpha * (log pi + target_entropy) = -0.5 * (-0.25 - 1)
        torch.testing.assert_close(out["loss_alpha"], torch.tensor(0.625))
        torch.testing.assert_close(out["entropy"], torch.tensor(0.25))
        assert issubclass(DoubleREDQLoss_deprecated, REDQLoss_deprecated)

    def test_reduction_none_keeps_one_term_per_member(self):
        from rl.objectives.deprecated import REDQLoss_deprecated

        loss = REDQLoss_deprecated(_det_actor(), _critic(), num_qvalue_nets=3, reduction="none")
        SoftUpdate(loss, tau=0.005)
        out = loss(_data(4))
        assert out["loss_actor"].shape == (3, 4) and out["loss_qvalue"].shape == (3, 4)
        assert out["loss_alpha"].shape == (4,)
        loss.set_keys(log_prob="my_log_prob")  # TorchRL's key name, accepted
        assert loss.tensor_keys.log_prob == "my_log_prob"


class _RecordEps(nn.Module):
    """``loc = 0.5 s``; records the ``_eps_gSDE`` placeholders it is given."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1, 1, bias=False)
        nn.init.constant_(self.lin.weight, 0.5)
        self.seen = []

    def forward(self, obs, eps):
        self.seen.append(eps)
        return self.lin(obs)


class TestREDQgSDE:
    def test_gsde_placeholder_reaches_the_actor(self):
        from tensordict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential

        from .test_loss_sac import _Det

        rec = _RecordEps()
        actor = ProbabilisticTensorDictSequential(
            TensorDictModule(rec, ["observation", "_eps_gSDE"], ["loc"]),
            ProbabilisticTensorDictModule(["loc"], ["action"], distribution_class=_Det),
        )
        loss = REDQLoss(actor, _critic(), num_qvalue_nets=3, gamma=0.9, gSDE=True)
        SoftUpdate(loss, tau=0.005)
        out = loss(_data(2))
        assert out["loss_actor"].isfinite()
        # the current and the next observations, each with a zero placeholder of batch shape
        assert len(rec.seen) == 2
        for eps in rec.seen:
            torch.testing.assert_close(eps, torch.zeros(2))
        # without gSDE the input is left as it is: no placeholder is written
        rec.seen.clear()
        plain = REDQLoss(actor, _critic(), num_qvalue_nets=3, gamma=0.9)
        SoftUpdate(plain, tau=0.005)
        data = _data(2)
        data["_eps_gSDE"] = torch.ones(2)
        data["next", "_eps_gSDE"] = torch.full((2,), 2.0)
        plain(data)
        assert [float(e[0]) for e in rec.seen] == [1.0, 2.0]


class TestREDQSubSample:
    @pytest.mark.parametrize(
        "num_qvalue_nets, asked, used", [(1, 2, 1), (2, 2, 1), (2, 3, 1), (4, 2, 2), (4, 9, 3)]
    )
    def test_clamped_to_a_strict_subset(self, num_qvalue_nets, asked, used):
        loss = REDQLoss(
            _det_actor(), _critic(), num_qvalue_nets=num_qvalue_nets, sub_sample_len=asked
        )
        assert loss.sub_sample_len == used

    def test_single_critic(self):
        # one critic: the subset is that critic, the target its own soft value
        loss = REDQLoss(_det_actor(), _critic(), num_qvalue_nets=1, gamma=0.9, alpha_init=0.5)
        assert loss(_data())["loss_qvalue"].isfinite()

    def test_unsupported_estimator_is_both_errors(self):
        loss = REDQLoss(_det_actor(), _critic(), num_qvalue_nets=2)
        for error in (ValueError, NotImplementedError):
            with pytest.raises(error, match="REDQLoss does not support the GAE value estimator"):
                loss.make_value_estimator("GAE")


class BNQNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(2, affine=False)
        self.linear = nn.Linear(2, 1, bias=False)

    def forward(self, obs, act):
        return self.linear(self.norm(torch.cat([obs, act], -1)))


class TestCrossQLoss:
    def test_values_without_normalisation(self):
        loss = CrossQLoss(_det_actor(), _critic(), gamma=0.9, alpha_init=0.5)
        with torch.no_grad():
            loss.qvalue_network_params.get(("module", "linear", "weight")).copy_(
                torch.tensor([[[1.0, 2.0]], [[1.0, 1.0]]])
            )
        assert not list(loss._target_param_names())
        td = _data()
        out = loss(td)
        # the same numbers as SAC, with the online critics giving the target
        torch.testing.assert_close(out["loss_qvalue"], torch.tensor(4.7))
        torch.testing.assert_close(out["loss_actor"], torch.tensor(-1.625))
        torch.testing.assert_close(td["td_error"], torch.tensor([2.95]))

    def test_joint_batch_statistics(self):
        qnet = TensorDictModule(BNQNet(), ["observation", "action"], ["state_action_value"])
        loss = CrossQLoss(_det_actor(), qnet, gamma=0.9, target_entropy=-1.0)
        td = _data(2)
        td["observation"] = torch.tensor([[1.0], [3.0]])
        out = loss(td)
        # running mean after one step: 0.1 * mean over [s, a] and [s', a']
        joint_obs = torch.tensor([1.0, 3.0, 2.0, 2.0])
        joint_act = torch.tensor([0.2, 0.2, 1.0, 1.0])
        mean = loss.qvalue_network_params.get(("module", "norm", "running_mean"))
        assert mean.shape == (2, 2)
        torch.testing.assert_close(mean[0], 0.1 * torch.stack([joint_obs.mean(), joint_act.mean()]))
        torch.testing.assert_close(mean[1], mean[0])
        q = loss.qvalue_network_params.get(("module", "linear", "weight"))
        out["loss_actor"].backward(retain_graph=True)
        assert q.grad is None
        out["loss_qvalue"].backward()
        assert q.grad is not None

    def test_batch_dims(self):
        # a [2, 3] batch gives the losses of the same six transitions as a flat batch
        loss = CrossQLoss(_det_actor(), _critic(), target_entropy=-1.0, gamma=0.9)
        flat = _data(6)
        flat["observation"] = torch.arange(6.0).unsqueeze(-1)
        flat["next", "reward"] = torch.arange(6.0).unsqueeze(-1)
        grid = flat.clone().reshape(2, 3)
        out_flat, out_grid = loss(flat), loss(grid)
        for key in ("loss_actor", "loss_qvalue", "loss_alpha"):
            torch.testing.assert_close(out_grid[key], out_flat[key])
        torch.testing.assert_close(grid["td_error"], flat["td_error"].reshape(2, 3))


class RenormQNet(nn.Module):
    """A critic with a batch-renorm layer (running statistics and a step counter)."""

    def __init__(self):
        super().__init__()
        self.norm = BatchRenorm1d(2, warmup_steps=1)
        self.linear = nn.Linear(2, 1)

    def forward(self, obs, act):
        return self.linear(self.norm(torch.cat([obs, act], -1)))


class TestCrossQCompile:
    """The whole loss and its gradients compile as one graph through AOTAutograd (the
    part of inductor that refused the critics' statistics, mutated by the online critics
    and read by their detached copies), with the eager values."""

    def test_one_graph_through_aot_autograd_with_eager_values(self):
        from torch._dynamo.utils import counters

        torch.manual_seed(0)
        qnet = TensorDictModule(RenormQNet(), ["observation", "action"], ["state_action_value"])
        loss = CrossQLoss(_det_actor(), qnet, gamma=0.9, target_entropy=-1.0)
        twin = copy.deepcopy(loss)

        def step(module, td):
            out = module(td)
            total = out["loss_qvalue"] + out["loss_actor"] + out["loss_alpha"]
            params = list(module.parameters())
            grads = torch.autograd.grad(total, params, retain_graph=True)
            return [out[k].detach() for k in ("loss_qvalue", "loss_actor")], grads

        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
        batches = []
        for _ in range(3):
            td = _data(8)
            td["observation"] = torch.randn(8, 1)
            td["next", "observation"] = torch.randn(8, 1)
            batches.append(td)
        with torch._dynamo.config.patch(trace_autograd_ops=True, error_on_recompile=True):
            for td in batches:
                got, want = compiled(loss, td.clone()), step(twin, td.clone())
                torch.testing.assert_close(got, want)
        torch._dynamo.reset()
        assert counters["stats"]["unique_graphs"] == 1
        assert not counters["graph_break"]
        # the running statistics and counters of both critics, updated in the graph
        stats, want = (
            {k: v for k, v in m.qvalue_network_params.items(True, True) if not v.requires_grad}
            for m in (loss, twin)
        )
        assert len(stats) == 3
        assert stats["module", "norm", "num_batches_tracked"].tolist() == [3, 3]
        torch.testing.assert_close(stats, want)


class TestScalarOutputMode:
    def _crossq(self, **kwargs):
        loss = CrossQLoss(_det_actor(), _critic(), gamma=0.9, alpha_init=0.5, **kwargs)
        with torch.no_grad():
            loss.qvalue_network_params.get(("module", "linear", "weight")).copy_(
                torch.tensor([[[1.0, 2.0]], [[1.0, 1.0]]])
            )
        return loss

    def test_crossq_exclude(self):
        out = self._crossq(reduction="none", deactivate_vmap=True)(_data(3))
        assert set(out.keys()) == {"loss_actor", "loss_qvalue", "loss_alpha"}
        torch.testing.assert_close(out["loss_qvalue"], torch.full((3,), 4.7))

    def test_crossq_non_tensor(self):
        out = self._crossq(reduction="none", scalar_output_mode="non_tensor")(_data(3))
        torch.testing.assert_close(out["alpha"], torch.tensor(0.5))
        torch.testing.assert_close(out["entropy"], torch.tensor(0.25))

    @pytest.mark.parametrize("mode", [None, "exclude", "non_tensor"])
    def test_redq(self, mode):
        loss = REDQLoss(
            _det_actor(),
            _critic(),
            num_qvalue_nets=3,
            reduction="none",
            scalar_output_mode=mode,
            deactivate_vmap=True,
        )
        SoftUpdate(loss, tau=0.005)
        out = loss(_data(3))
        assert out["loss_qvalue"].shape[-1] == 3 and out["loss_actor"].shape[-1] == 3
        assert ("alpha" in out.keys()) == (mode == "non_tensor")
        if mode == "non_tensor":
            torch.testing.assert_close(out["alpha"], torch.tensor(1.0))

    def test_bad_mode(self):
        with pytest.raises(ValueError, match="unknown scalar_output_mode"):
            self._crossq(scalar_output_mode="drop")
