"""LossModule base, SoftUpdate / HardUpdate, distance_loss."""

import warnings
from dataclasses import dataclass

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.objectives import HardUpdate, LossModule, SoftUpdate, distance_loss


class _ToyLoss(LossModule):
    """Squared error between a value network and a target network's value."""

    @dataclass
    class _AcceptedKeys:
        value: str = "state_value"
        reward: str = "reward"

    def __init__(self, net, ensemble=None):
        super().__init__()
        self.convert_to_functional(
            net, "value_network", expand_dim=ensemble, create_target_params=True
        )

    def _required_key_names(self):
        return ("reward",)

    def forward(self, td):
        reward = self._get(td, "reward")
        if self._functional["value_network"]["expand_dim"] is None:
            value = self.value_network(td.copy()).get(self.tensor_keys.value)
            with torch.no_grad():
                target = self._target_network("value_network")(td.copy()).get(
                    self.tensor_keys.value
                )
        else:
            value = torch.stack(
                [m(td.copy()).get(self.tensor_keys.value) for m in self._ensemble("value_network")]
            )
            with torch.no_grad():
                target = torch.stack(
                    [
                        m(td.copy()).get(self.tensor_keys.value)
                        for m in self._ensemble("value_network", "target")
                    ]
                )
        return TensorDict(loss_value=(value - (reward + target)).pow(2).mean())


def _net(value_key="state_value"):
    lin = nn.Linear(2, 1)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, -2.0]]))
        lin.bias.fill_(0.5)
    return TensorDictModule(lin, ["observation"], [value_key])


def _data():
    return TensorDict(
        observation=torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
        reward=torch.tensor([[1.0], [2.0]]),
        batch_size=[2],
    )


class TestLossModule:
    def test_params_and_targets(self):
        net = _net()
        loss = _ToyLoss(net)
        names = {n for n, _ in loss.named_parameters()}
        assert names == {"value_network_params.module.weight", "value_network_params.module.bias"}
        # the online params are the network's own parameters (shared with a collector)
        assert loss.value_network_params.get(("module", "weight")) is net.module.weight
        target = loss.target_value_network_params.get(("module", "weight"))
        assert not target.requires_grad
        assert target.data_ptr() != net.module.weight.data_ptr()
        assert "target_value_network_params.module.weight" in loss.state_dict()

    def test_value_and_gradients(self):
        net = _net()
        loss = _ToyLoss(net)
        out = loss(_data())
        # value = [1.5, -1.5]; target = same (synced); residual = v - r - t = -r
        torch.testing.assert_close(out["loss_value"], torch.tensor((1.0 + 4.0) / 2))
        out["loss_value"].backward()
        assert net.module.weight.grad is not None
        assert all(t.grad is None for t in loss.target_value_network_params.values(True, True))

    def test_set_keys(self):
        loss = _ToyLoss(_net("v"))
        loss.set_keys(value="v", reward=("next", "r"))
        td = _data()
        td["next", "r"] = td.pop("reward")
        assert loss(td)["loss_value"].item() == pytest.approx(2.5)
        loss.set_keys(reward=None)
        assert loss.tensor_keys.reward == "reward"
        with pytest.raises(
            ValueError, match=r"unknown key name 'rewards'.*valid names are \['value', 'reward'\]"
        ):
            loss.set_keys(rewards="r")

    def test_missing_key(self):
        loss = _ToyLoss(_net())
        td = _data()
        del td["reward"]
        with pytest.raises(
            KeyError,
            match=r"_ToyLoss needs key 'reward'.*keys present: \['observation'\].*set_keys\(reward=",
        ):
            loss(td)

    def test_state_dict_round_trip(self):
        loss = _ToyLoss(_net())
        sd = {k: v.clone() for k, v in loss.state_dict().items()}
        loss2 = _ToyLoss(_net())
        with torch.no_grad():
            loss2.target_value_network_params.get(("module", "weight")).fill_(7.0)
            loss2.value_network_params.get(("module", "bias")).fill_(-3.0)
        loss2.load_state_dict(sd)
        for k, v in loss2.state_dict().items():
            torch.testing.assert_close(v, sd[k])
        # the target network actually runs on the restored values
        target_net = loss2._target_network("value_network")
        torch.testing.assert_close(
            target_net.module.weight, sd["target_value_network_params.module.weight"]
        )

    def test_ensemble(self):
        net = _net()
        loss = _ToyLoss(net, ensemble=3)
        w = loss.value_network_params.get(("module", "weight"))
        assert w.shape == (3, 1, 2) and isinstance(w, nn.Parameter)
        torch.testing.assert_close(w[0], net.module.weight)
        assert not torch.equal(w[1], w[0])
        out = loss(_data())
        out["loss_value"].backward()
        assert w.grad is not None and w.grad.shape == (3, 1, 2)
        # a step of the stacked parameter is seen by the next forward
        with torch.no_grad():
            w.zero_()
            loss.value_network_params.get(("module", "bias")).zero_()
        members = loss._ensemble("value_network")
        assert all(torch.equal(m(_data())["state_value"], torch.zeros(2, 1)) for m in members)

    def test_double_keeps_targets_bound(self):
        loss = _ToyLoss(_net()).double()
        updater = SoftUpdate(loss, tau=0.5)
        with torch.no_grad():
            loss.value_network_params.get(("module", "weight")).fill_(1.0)
        updater.step()
        t = loss._target_network("value_network").module.weight
        assert t.dtype == torch.float64
        torch.testing.assert_close(t, torch.tensor([[1.0, -0.5]], dtype=torch.float64))


class TestTargetUpdates:
    def test_construction_syncs(self):
        loss = _ToyLoss(_net())
        with torch.no_grad():
            loss.target_value_network_params.get(("module", "weight")).fill_(5.0)
        SoftUpdate(loss, eps=0.9)
        torch.testing.assert_close(
            loss.target_value_network_params.get(("module", "weight")), torch.tensor([[1.0, -2.0]])
        )

    @pytest.mark.parametrize("ensemble", [None, 2])
    def test_soft_update_values(self, ensemble):
        loss = _ToyLoss(_net(), ensemble=ensemble)
        upd = SoftUpdate(loss, eps=0.75)
        online = loss.value_network_params.get(("module", "weight"))
        before = online.detach().clone()
        with torch.no_grad():
            online.add_(4.0)
        expected = before.clone()
        for _ in range(2):
            upd.step()
            expected = 0.75 * expected + 0.25 * (before + 4.0)
        torch.testing.assert_close(
            loss.target_value_network_params.get(("module", "weight")), expected
        )
        assert upd.tau == pytest.approx(0.25)

    def test_soft_update_args(self):
        loss = _ToyLoss(_net())
        with pytest.raises(ValueError, match=r"One and only one argument \(eps or tau\)"):
            SoftUpdate(loss)
        with pytest.raises(ValueError, match=r"One and only one argument \(eps or tau\)"):
            SoftUpdate(loss, eps=0.9, tau=0.1)
        with pytest.raises(ValueError, match=r"must lie in \[0, 1\], got eps=1.5"):
            SoftUpdate(loss, eps=1.5)

    def test_hard_update_timing(self):
        loss = _ToyLoss(_net())
        upd = HardUpdate(loss, value_network_update_interval=3)
        online = loss.value_network_params.get(("module", "bias"))
        target = loss.target_value_network_params.get(("module", "bias"))
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a copy at its interval is no second init_()
            for step in range(1, 8):
                with torch.no_grad():
                    online.fill_(float(step))
                upd.step()
                seen.append(target.item())
        # copies at steps 3 and 6 only
        assert seen == [0.5, 0.5, 3.0, 3.0, 3.0, 6.0, 6.0]
        assert upd.state_dict() == {"initialized": True, "counter": 1}
        with pytest.warns(UserWarning, match="already initialized"):
            upd.init_()  # an explicit second init_ still says so

    def test_no_targets(self):
        class NoTarget(_ToyLoss):
            def __init__(self, net):
                LossModule.__init__(self)
                self.convert_to_functional(net, "value_network")

        loss = NoTarget(_net())
        with pytest.raises(RuntimeError, match="no target parameters"):
            SoftUpdate(loss, tau=0.1)
        # without a target copy, target params are the detached online values
        t = loss.target_value_network_params.get(("module", "weight"))
        assert not t.requires_grad
        assert t.data_ptr() == loss.value_network_params.get(("module", "weight")).data_ptr()


class TestDistanceLoss:
    def test_values(self):
        a, b = torch.tensor([0.0, 3.0]), torch.tensor([0.5, 0.0])
        torch.testing.assert_close(distance_loss(a, b, "l2"), torch.tensor([0.25, 9.0]))
        torch.testing.assert_close(distance_loss(a, b, "l1"), torch.tensor([0.5, 3.0]))
        torch.testing.assert_close(distance_loss(a, b, "smooth_l1"), torch.tensor([0.125, 2.5]))

    def test_errors(self):
        with pytest.raises(ValueError, match=r"unknown loss_function 'l3'"):
            distance_loss(torch.zeros(1), torch.zeros(1), "l3")
        with pytest.raises(ValueError, match=r"shapes \(2,\) and \(1,\)"):
            distance_loss(torch.zeros(2), torch.zeros(1), "l2")


class TestSharedAndFastPath:
    def test_compare_against_holds_shared_params_out(self):
        trunk = nn.Linear(2, 2)
        head = nn.Linear(2, 1)
        net = TensorDictModule(nn.Sequential(trunk, head), ["observation"], ["state_value"])

        class Shared(_ToyLoss):
            def __init__(self, net, shared):
                LossModule.__init__(self)
                self.convert_to_functional(net, "value_network", compare_against=shared)

        loss = Shared(net, list(trunk.parameters()))
        names = {n for n, _ in loss.named_parameters()}
        assert names == {
            "value_network_params.module.1.weight",
            "value_network_params.module.1.bias",
        }
        value = loss.value_network(_data())["state_value"]
        value.sum().backward()
        assert trunk.weight.grad is None and head.weight.grad is not None
        # the user's module itself is untouched: it still trains the trunk
        net(_data())["state_value"].sum().backward()
        assert trunk.weight.grad is not None
        # and the loss sees the trunk's updates
        with torch.no_grad():
            trunk.weight.zero_()
            trunk.bias.zero_()
        torch.testing.assert_close(
            loss.value_network(_data())["state_value"], head.bias.expand(2, 1).detach()
        )

    def test_fast_path_matches_tensordict_call(self):
        from rl.objectives._networks import _network_output

        net = _net()
        td = _data()
        fast = _network_output(net, td, "state_value")
        assert "state_value" not in td.keys()
        calls = []
        net.register_forward_hook(
            lambda *args: calls.append(1)
        )  # a hook forces the TensorDict path
        slow = _network_output(net, td, "state_value")
        assert calls == [1] and "state_value" not in td.keys()
        torch.testing.assert_close(fast, slow)


class TestCoeffBufferAndVmapRandomness:
    class _Loss(LossModule):
        def forward(self, td):
            return td

    def test_register_coeff_buffer(self):
        loss = self._Loss()
        loss.register_coeff_buffer("a", 0.25)
        loss.register_coeff_buffer("b", 2, dtype=torch.float64)
        loss.register_coeff_buffer("c", None)
        buffers = dict(loss.named_buffers())
        assert buffers["a"].item() == 0.25 and buffers["b"].dtype is torch.float64
        assert loss.c is None and "c" not in buffers
        with pytest.raises(ValueError, match=r"d must be a float or a scalar tensor.*shape \(2,\)"):
            loss.register_coeff_buffer("d", torch.ones(2))
        with pytest.raises(ValueError, match="e must be a float or a scalar tensor"):
            loss.register_coeff_buffer("e", True)
        # a buffer moves with the loss and is in its state dict
        assert "a" in loss.state_dict()

    def test_vmap_randomness_follows_random_modules_and_can_be_set(self):
        loss = self._Loss()
        loss.net = torch.nn.Linear(2, 2)
        assert loss.vmap_randomness == "error"
        noisy = self._Loss()
        noisy.net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
        assert noisy.vmap_randomness == "different"
        noisy.set_vmap_randomness("same")
        assert noisy.vmap_randomness == "same"
        with pytest.raises(ValueError, match="Wrong vmap randomness"):
            noisy.set_vmap_randomness("sometimes")
        # a vmapped dropout call with the loss's setting runs ("error" would raise)
        x = torch.ones(3, 2)
        out = torch.vmap(noisy.net, randomness=noisy.vmap_randomness)(x)
        assert out.shape == (3, 2)
