"""LossModule's shared behaviours: updater warnings, masked reduction, keyword calls."""

import copy
import warnings

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.core import OneHot
from rl.modules import QValueActor
from rl.objectives import AUTO_LOSS_MASK_KEYS, DQNLoss, LossModule, SoftUpdate, TD3Loss


class _ElementwiseLoss(LossModule):
    """Reduces the input entry ``"elementwise"`` with ``_reduce_loss``."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, tensordict):
        return TensorDict({"loss_x": self._reduce_loss(tensordict.get("elementwise"), tensordict)})


def _dqn(delay_value=True):
    actor = QValueActor(
        spec=OneHot(4), module=nn.Linear(3, 4), in_keys=["observation"], action_space="one_hot"
    )
    return DQNLoss(actor, delay_value=delay_value)


def _dqn_inputs():
    return {
        "observation": torch.randn(5, 3),
        "next_observation": torch.randn(5, 3),
        "next_reward": torch.randn(5, 1),
        "next_done": torch.zeros(5, 1, dtype=torch.bool),
        "next_terminated": torch.zeros(5, 1, dtype=torch.bool),
        "action": OneHot(4).rand((5,)),
    }


class TestTargetUpdaterWarning:
    def test_forward_warns_until_an_updater_is_bound(self):
        loss = _dqn()
        td = TensorDict(_dqn_inputs(), [5]).unflatten_keys("_")
        with pytest.warns(UserWarning, match="No target network updater has been associated"):
            loss(td)
        with pytest.warns(UserWarning, match="No target network updater"):
            loss.target_value_network_params  # noqa: B018
        SoftUpdate(loss, eps=0.5)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loss(td)
            loss.target_value_network_params  # noqa: B018

    def test_no_warning_without_target_copy(self):
        loss = _dqn(delay_value=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loss(TensorDict(_dqn_inputs(), [5]).unflatten_keys("_"))

    def test_rl_warnings_off(self, monkeypatch):
        monkeypatch.setenv("RL_WARNINGS", "0")
        loss = _dqn()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loss(TensorDict(_dqn_inputs(), [5]).unflatten_keys("_"))

    def test_init_twice_warns(self):
        updater = SoftUpdate(_dqn(), eps=0.5)
        with pytest.warns(UserWarning, match="already initialized"):
            updater.init_()


class TestReduceLoss:
    def test_auto_keys(self):
        assert _ElementwiseLoss().loss_mask_key == "auto"
        assert AUTO_LOSS_MASK_KEYS == (("collector", "mask"), "shifted_valid")

    @pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
    def test_unmasked_is_plain_reduction(self, reduction):
        x = torch.tensor([1.0, 2.0, 6.0])
        out = _ElementwiseLoss(reduction)(TensorDict({"elementwise": x}, [3]))["loss_x"]
        expected = {"mean": torch.tensor(3.0), "sum": torch.tensor(9.0), "none": x}[reduction]
        torch.testing.assert_close(out, expected)

    def test_masks_are_anded_and_select_out_non_finite(self):
        base = torch.ones(4, requires_grad=True)
        x = base + torch.tensor([0.0, 2.0, float("nan"), 4.0])
        td = TensorDict({"elementwise": x}, [4])
        td["collector", "mask"] = torch.tensor([True, True, False, True]).unsqueeze(-1)
        td["shifted_valid"] = torch.tensor([True, True, True, False])
        out = _ElementwiseLoss("mean")(td)["loss_x"]
        torch.testing.assert_close(out, torch.tensor(2.0))  # (1 + 3) / 2
        out.backward()
        torch.testing.assert_close(base.grad, torch.tensor([0.5, 0.5, 0.0, 0.0]))

    def test_input_mask_keeps_shape_caller_mask_compacts(self):
        x = torch.tensor([1.0, 2.0, 3.0, 4.0])
        valid = torch.tensor([True, False, True, False])
        td = TensorDict({"elementwise": x, "shifted_valid": valid}, [4])
        torch.testing.assert_close(
            _ElementwiseLoss("none")(td)["loss_x"], torch.tensor([1.0, 0.0, 3.0, 0.0])
        )
        torch.testing.assert_close(
            _ElementwiseLoss("none")._reduce_loss(x, None, mask=valid), torch.tensor([1.0, 3.0])
        )

    def test_weights_normalise_the_mean(self):
        x = torch.tensor([1.0, 2.0, 3.0])
        w = torch.tensor([1.0, 1.0, 2.0])
        out = _ElementwiseLoss()._reduce_loss(x, None, weights=w)
        torch.testing.assert_close(out, torch.tensor((1.0 + 2.0 + 6.0) / 4.0))

    def test_explicit_key_and_none(self):
        x = torch.arange(4.0)
        td = TensorDict({"elementwise": x, "shifted_valid": torch.tensor([1, 0, 1, 0]).bool()}, [4])
        td["mine"] = torch.tensor([True, True, False, False])
        loss = _ElementwiseLoss("sum")
        loss.loss_mask_key = "mine"
        torch.testing.assert_close(loss(td)["loss_x"], torch.tensor(1.0))
        loss.loss_mask_key = None
        torch.testing.assert_close(loss(td)["loss_x"], torch.tensor(6.0))

    @pytest.mark.parametrize("bad", [0, 1.5, (), ("mask", None)])
    def test_bad_key(self, bad):
        loss = _ElementwiseLoss()
        with pytest.raises(ValueError, match="loss_mask_key must be"):
            loss.loss_mask_key = bad
        assert loss.loss_mask_key == "auto"

    def test_mask_with_more_dims_than_loss(self):
        td = TensorDict({"elementwise": torch.ones(2, 3)}, [2])
        td["shifted_valid"] = torch.ones(2, 3, 4, dtype=torch.bool)
        with pytest.raises(ValueError, match="more non-singleton dimensions"):
            _ElementwiseLoss()(td)


class TestKeywordCall:
    def test_dqn_keywords_match_tensordict(self):
        loss = _dqn()
        SoftUpdate(loss, eps=0.5)
        kwargs = _dqn_inputs()
        by_td = loss(TensorDict(kwargs, [5]).unflatten_keys("_"))["loss"]
        torch.testing.assert_close(loss(**kwargs), by_td)
        torch.testing.assert_close(copy.deepcopy(loss)(**kwargs), by_td)

    def test_several_out_keys_come_back_in_order(self):
        actor = TensorDictModule(nn.Linear(3, 2), ["observation"], ["action"])

        class Q(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(5, 1)

            def forward(self, obs, act):
                return self.lin(torch.cat([obs, act], -1))

        qvalue = TensorDictModule(Q(), ["observation", "action"], ["state_action_value"])
        loss = TD3Loss(actor, qvalue, action_spec=None, bounds=(-1.0, 1.0))
        SoftUpdate(loss, eps=0.5)
        kwargs = {k: v for k, v in _dqn_inputs().items() if k != "action"}
        kwargs["action"] = torch.rand(5, 2)
        td = TensorDict(kwargs, [5]).unflatten_keys("_")
        torch.manual_seed(0)
        out = loss(**kwargs)
        torch.manual_seed(0)
        expected = loss(td)
        assert isinstance(out, tuple) and len(out) == len(loss.out_keys)
        for value, key in zip(out, loss.out_keys, strict=True):
            torch.testing.assert_close(value, expected[key])


class TestDeepCopy:
    def test_ensemble_loss_copies_independently(self):
        actor = TensorDictModule(nn.Linear(3, 2), ["observation"], ["action"])

        class Q(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(5, 1)

            def forward(self, obs, act):
                return self.lin(torch.cat([obs, act], -1))

        qvalue = TensorDictModule(Q(), ["observation", "action"], ["state_action_value"])
        loss = TD3Loss(actor, qvalue, action_spec=None, bounds=(-1.0, 1.0))
        SoftUpdate(loss, eps=0.5)
        inputs = {k: v for k, v in _dqn_inputs().items() if k != "action"}
        td = TensorDict({**inputs, "action": torch.rand(5, 2)}, [5]).unflatten_keys("_")
        torch.manual_seed(0)
        before = loss(td)["loss_qvalue"]
        twin = copy.deepcopy(loss)
        torch.manual_seed(0)
        out = twin(td)["loss_qvalue"]
        torch.testing.assert_close(out, before)
        out.backward()
        weight = ("module", "lin", "weight")
        assert twin.qvalue_network_params[weight].grad is not None
        assert loss.qvalue_network_params[weight].grad is None
        with torch.no_grad():
            twin.qvalue_network_params[weight].add_(1.0)
        torch.manual_seed(0)
        torch.testing.assert_close(loss(td)["loss_qvalue"], before)


def test_reset_parameters_after_an_in_place_change_of_an_ensemble():
    actor = TensorDictModule(nn.Linear(3, 1), ["observation"], ["action"])

    class Q(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def forward(self, obs, act):
            return self.lin(torch.cat([obs, act], -1))

    qvalue = TensorDictModule(Q(), ["observation", "action"], ["state_action_value"])
    loss = TD3Loss(actor, qvalue, bounds=(-1.0, 1.0))
    weight = ("module", "lin", "weight")
    with torch.no_grad():  # the stacked parameters change in place (an optimizer step)
        loss.qvalue_network_params[weight].add_(1000.0)
        loss.target_qvalue_network_params[weight].add_(1000.0)
    loss.reset_parameters_recursive()
    online = loss.qvalue_network_params[weight]
    assert online.abs().max() < 10  # re-initialised (nn.Linear's uniform bound is 0.5)
    assert not torch.equal(online[0], online[1])  # each member drawn on its own
    torch.testing.assert_close(loss.target_qvalue_network_params[weight], online.detach())


class TestSchedulableBuffers:
    def _ppo(self):
        from rl.objectives import ClipPPOLoss

        from .test_loss_ppo import const_actor, const_critic

        return ClipPPOLoss(const_actor(), const_critic())

    def test_number_is_copied_into_the_buffer(self):
        loss = self._ppo()
        buffer = loss.entropy_coeff
        loss.entropy_coeff = 0.003
        loss.clip_epsilon = 0  # an int, from a scheduler
        assert loss.entropy_coeff is buffer  # the same tensor: optimisers/compiled graphs keep it
        torch.testing.assert_close(loss.entropy_coeff, torch.tensor(0.003))
        assert loss.clip_epsilon.dtype == torch.float32 and float(loss.clip_epsilon) == 0.0
        assert float(loss.state_dict()["entropy_coeff"]) == pytest.approx(0.003)
        # a tensor replaces the buffer, as nn.Module does; other names are plain attributes
        loss.entropy_coeff = torch.tensor(0.5)
        assert "entropy_coeff" in loss._buffers and float(loss.entropy_coeff) == 0.5
        loss.some_number = 0.3
        assert loss.some_number == 0.3 and "some_number" not in loss._buffers

    def test_names_merge_along_the_bases(self):
        from rl.objectives import ClipPPOLoss, SACLoss

        assert {"entropy_coeff", "critic_coeff", "clip_value", "clip_epsilon"} <= (
            ClipPPOLoss._all_schedulable_buffers
        )
        assert "log_alpha" in SACLoss._all_schedulable_buffers
        from rl.objectives.llm import DAPO, CISPOLoss, GRPOLoss

        for cls in (GRPOLoss, DAPO, CISPOLoss):  # as TorchRL's: both clip bounds
            assert {"clip_epsilon_low", "clip_epsilon_high"} <= cls._all_schedulable_buffers

    def test_sac_log_alpha(self):
        from rl.objectives import SACLoss

        from .test_loss_sac import _critic, _det_actor

        fixed = SACLoss(_det_actor(), _critic(), fixed_alpha=True)
        fixed.log_alpha = 0.5
        assert "log_alpha" in fixed._buffers and float(fixed.log_alpha) == 0.5
        learned = SACLoss(_det_actor(), _critic())
        assert isinstance(learned.log_alpha, nn.Parameter)


def test_reduction_none_means_mean():
    assert _dqn().reduction == "mean"
    actor = QValueActor(
        spec=OneHot(4), module=nn.Linear(3, 4), in_keys=["observation"], action_space="one_hot"
    )
    assert DQNLoss(actor, reduction=None).reduction == "mean"


class _TD0Loss(LossModule):
    """A loss with nothing but its default estimator, to drive make_value_estimator."""

    from rl.objectives.value import ValueEstimators as _VE

    default_value_estimator = _VE.TD0

    def forward(self, td):
        return td

    def _forward_value_estimator_keys(self, **kwargs):
        pass


class TestPrepareValueEstimatorKwargs:
    def test_enum_and_name(self):
        from rl.objectives.value import ValueEstimators

        loss = _TD0Loss()
        vtype, hp = loss._prepare_value_estimator_kwargs(None)
        assert vtype is ValueEstimators.TD0 and hp == {"gamma": 0.99, "differentiable": True}
        vtype, hp = loss._prepare_value_estimator_kwargs("GAE", lmbda=0.2)
        assert vtype is ValueEstimators.GAE and loss.value_type is ValueEstimators.GAE
        assert hp == {"gamma": 0.99, "lmbda": 0.2, "differentiable": True}
        loss.gamma = 0.77  # the loss's gamma, then the caller's
        assert loss._prepare_value_estimator_kwargs(ValueEstimators.TD0)[1]["gamma"] == 0.77
        assert loss._prepare_value_estimator_kwargs("TD0", gamma=0.5)[1]["gamma"] == 0.5
        with pytest.raises(ValueError, match="unknown value estimator 'nope'"):
            loss._prepare_value_estimator_kwargs("nope")

    def test_estimator_or_class_is_set_at_once(self):
        from rl.objectives.value import TD0Estimator

        net = TensorDictModule(nn.Linear(4, 1), ["observation"], ["state_value"])
        loss = _TD0Loss()
        estimator = TD0Estimator(gamma=0.9, value_network=net)
        assert loss._prepare_value_estimator_kwargs(estimator) == (None, None)
        assert loss._value_estimator is estimator
        assert loss._prepare_value_estimator_kwargs(
            TD0Estimator, gamma=0.42, value_network=net
        ) == (
            None,
            None,
        )
        assert loss._value_estimator.gamma.item() == pytest.approx(0.42)
        assert loss.make_value_estimator("TD0", gamma=0.3) is loss
        assert isinstance(loss._value_estimator, TD0Estimator)

    def test_forwarding_keys_refreshes_the_in_keys(self):
        calls = []

        class Loss(_TD0Loss):
            _forward_value_estimator_keys = LossModule._forward_value_estimator_keys

            def _set_in_keys(self):
                calls.append(True)

        loss = Loss()
        loss._forward_value_estimator_keys()  # no estimator yet: the in_keys still refresh
        assert calls == [True]
