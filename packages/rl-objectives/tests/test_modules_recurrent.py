"""Recurrent modules of rl.modules: LSTMModule, GRUModule, python layers, primers, modes."""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from rl.modules import (
    GRU,
    LSTM,
    GRUModule,
    LSTMModule,
    get_primers_from_module,
    recurrent_mode,
    set_recurrent_mode,
)

CASES = [(LSTMModule, False), (LSTMModule, True), (GRUModule, False), (GRUModule, True)]


def _module(cls, python_based, num_layers=1):
    torch.manual_seed(0)
    return cls(
        input_size=3,
        hidden_size=5,
        num_layers=num_layers,
        python_based=python_based,
        in_key="observation",
        out_key="features",
    )


def _state_keys(module):
    return module.in_keys[1:-1], module.out_keys[1:]


class TestModes:
    def test_context_manager(self):
        assert recurrent_mode() is None
        with set_recurrent_mode(True):
            assert recurrent_mode() is True
            with set_recurrent_mode("sequential"):
                assert recurrent_mode() is False
            assert recurrent_mode() is True
        assert recurrent_mode() is None
        with pytest.raises(ValueError, match="'recurrent' or 'sequential'"):
            set_recurrent_mode("sideways")

    def test_module_mode(self):
        module = _module(LSTMModule, False)
        assert module.recurrent_mode is False
        with set_recurrent_mode(True):
            assert module.recurrent_mode is True
        default_on = LSTMModule(3, 5, in_key="x", out_key="y", default_recurrent_mode=True)
        assert default_on.recurrent_mode is True
        with set_recurrent_mode(False):
            assert default_on.recurrent_mode is False
        with pytest.raises(RuntimeError, match="set_recurrent_mode"):
            module.set_recurrent_mode(True)
        with pytest.raises(RuntimeError, match="cannot be set"):
            module.recurrent_mode = True


class TestPythonLayers:
    @pytest.mark.parametrize("cls,ref_cls", [(LSTM, nn.LSTM), (GRU, nn.GRU)])
    def test_matches_torch(self, cls, ref_cls):
        torch.manual_seed(0)
        layer = cls(3, 6, num_layers=2)
        ref = ref_cls(3, 6, num_layers=2, batch_first=True)
        ref.load_state_dict(layer.state_dict())
        x = torch.randn(4, 7, 3)
        out, hn = layer(x)
        ref_out, ref_hn = ref(x)
        torch.testing.assert_close(out, ref_out)
        torch.testing.assert_close(hn, ref_hn)

    def test_mask_keeps_state_on_padding(self):
        torch.manual_seed(0)
        layer = LSTM(3, 4)
        x = torch.randn(2, 5, 3)
        mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
        _, (h, c) = layer(x, mask=mask)
        _, (h_short, c_short) = layer(x[1:, :2])
        torch.testing.assert_close(h[:, 1], h_short[:, 0])
        torch.testing.assert_close(c[:, 1], c_short[:, 0])

    def test_bidirectional_rejected(self):
        with pytest.raises(ValueError, match="bidirectional"):
            LSTM(3, 4, bidirectional=True)


class TestRecurrentModule:
    @pytest.mark.parametrize("cls,python_based", CASES)
    def test_sequence_equals_step_by_step_with_resets(self, cls, python_based):
        """Step mode over [B, T] data, then recurrent mode on the recorded data: same outputs."""
        module = _module(cls, python_based, num_layers=2)
        state_in, state_out = _state_keys(module)
        batch, steps = 3, 7
        obs = torch.randn(batch, steps, 3)
        is_init = torch.zeros(batch, steps, 1, dtype=torch.bool)
        is_init[:, 0] = True
        is_init[0, 3] = True
        is_init[2, 5] = True
        is_init[2, 6] = True
        records = []
        states = {k: torch.zeros(batch, 2, 5) for k in state_in}
        with torch.no_grad():
            for t in range(steps):
                td = TensorDict(
                    observation=obs[:, t], is_init=is_init[:, t], **states, batch_size=[batch]
                )
                td = module(td)
                records.append(td.clone())
                states = {k_in: td[k_out] for k_in, k_out in zip(state_in, state_out)}
            recorded = torch.stack(records, 1)
            with set_recurrent_mode(True):
                seq = module(recorded.exclude("features", "next"))
        torch.testing.assert_close(seq["features"], recorded["features"])
        # next states are written at the end of each trajectory piece (and zero elsewhere)
        end = torch.zeros(batch, steps, dtype=torch.bool)
        end[:, :-1] = is_init[:, 1:, 0]
        end[:, -1] = True
        for key in state_out:
            torch.testing.assert_close(seq[key][end], recorded[key][end])
            assert (seq[key][~end] == 0).all()

    @pytest.mark.parametrize("cls", [LSTMModule, GRUModule])
    def test_env_rollout_then_sequence(self, cls):
        """Acting step by step in an env across episode ends, then training on the rollout."""
        from rl.envs import PendulumEnv, TransformedEnv
        from rl.envs.transforms import Compose, InitTracker, StepCounter

        module = _module(cls, False)
        policy = TensorDictSequential(
            module, TensorDictModule(nn.Linear(5, 1), ["features"], ["action"])
        )
        env = TransformedEnv(
            PendulumEnv(),
            Compose(StepCounter(max_steps=4), InitTracker(), module.make_tensordict_primer()),
        )
        with torch.no_grad():
            rollout = env.rollout(10, policy, break_when_any_done=False)
            assert rollout["is_init"].squeeze(-1).nonzero().squeeze(-1).tolist() == [0, 4, 8]
            assert (
                rollout["recurrent_state" if cls is GRUModule else "recurrent_state_h"][5]
                .abs()
                .sum()
                > 0
            )
            with set_recurrent_mode(True):
                replay = policy(rollout.exclude("features", "action"))
        torch.testing.assert_close(replay["features"], rollout["features"])
        torch.testing.assert_close(replay["action"], rollout["action"])

    @pytest.mark.parametrize("cls,python_based", CASES)
    def test_is_init_resets_state(self, cls, python_based):
        module = _module(cls, python_based)
        state_in, _ = _state_keys(module)
        obs = torch.randn(2, 3)
        stale = {k: torch.randn(2, 1, 5) for k in state_in}
        reset = TensorDict(
            observation=obs, is_init=torch.ones(2, 1, dtype=torch.bool), **stale, batch_size=[2]
        )
        fresh = TensorDict(
            observation=obs,
            is_init=torch.zeros(2, 1, dtype=torch.bool),
            **{k: torch.zeros(2, 1, 5) for k in state_in},
            batch_size=[2],
        )
        torch.testing.assert_close(module(reset)["features"], module(fresh)["features"])

    def test_unbatched_step(self):
        module = _module(LSTMModule, False)
        td = module(TensorDict(observation=torch.randn(3), is_init=torch.ones(1, dtype=torch.bool)))
        assert td["features"].shape == (5,)
        assert td["next", "recurrent_state_c"].shape == (1, 5)

    def test_python_and_cudnn_agree_and_switch(self):
        module = _module(GRUModule, False)
        td = TensorDict(
            observation=torch.randn(2, 6, 3),
            is_init=torch.zeros(2, 6, 1, dtype=torch.bool),
            batch_size=[2, 6],
        )
        td["is_init"][:, 0] = True
        td["is_init"][1, 2] = True
        with set_recurrent_mode(True):
            a = module(td.clone())["features"]
            module.make_python_based()
            assert isinstance(module.gru, GRU)
            b = module(td.clone())["features"]
            module.make_cudnn_based()
            assert type(module.gru) is nn.GRU
        torch.testing.assert_close(a, b)

    def test_state_dict_keys_follow_torchrl(self):
        assert set(_module(LSTMModule, False).state_dict()) >= {
            "lstm.weight_ih_l0",
            "lstm.weight_hh_l0",
        }
        assert set(_module(GRUModule, True).state_dict()) >= {"gru.weight_ih_l0", "gru.bias_hh_l0"}

    def test_state_dict_round_trip(self):
        a, b = (
            _module(LSTMModule, False),
            LSTMModule(3, 5, in_key="observation", out_key="features"),
        )
        b.load_state_dict(a.state_dict())
        td = TensorDict(
            observation=torch.randn(2, 3),
            is_init=torch.ones(2, 1, dtype=torch.bool),
            batch_size=[2],
        )
        torch.testing.assert_close(a(td.clone())["features"], b(td.clone())["features"])

    def test_errors(self):
        with pytest.raises(ValueError, match="either in_key or in_keys"):
            LSTMModule(3, 5, in_key="x", in_keys=["x", "h", "c"], out_key="y")
        with pytest.raises(ValueError, match="expects 3 in_keys"):
            LSTMModule(3, 5, in_keys=["x", "h"], out_key="y")
        with pytest.raises(ValueError, match="bidirectional"):
            GRUModule(3, 5, bidirectional=True, in_key="x", out_key="y")
        with pytest.raises(ValueError, match="needs hidden_size"):
            GRUModule(3, in_key="x", out_key="y")
        module = _module(LSTMModule, False)
        with pytest.raises(KeyError, match="'is_init'.*InitTracker.*Keys present"):
            module(TensorDict(observation=torch.randn(2, 3), batch_size=[2]))
        with pytest.raises(KeyError, match="'observation'.*Keys present.*obs"):
            module(TensorDict(obs=torch.randn(2, 3), batch_size=[2]))
        with (
            set_recurrent_mode(True),
            pytest.raises(ValueError, match="needs a tensordict with a time dim"),
        ):
            module(TensorDict(observation=torch.randn(3), is_init=torch.ones(1, dtype=torch.bool)))


class TestPrimers:
    def test_primer_specs(self):
        module = _module(LSTMModule, False, num_layers=2)
        primer = module.make_tensordict_primer()
        assert set(primer.primers) == {"recurrent_state_h", "recurrent_state_c"}
        assert primer.primers["recurrent_state_h"].shape == (2, 5)

    def test_mismatched_keys(self):
        module = GRUModule(3, 5, in_keys=["x", "h"], out_keys=["y", ("next", "other")])
        with pytest.raises(RuntimeError, match="\\('next', <in_key>\\)"):
            module.make_tensordict_primer()

    def test_get_primers_from_module(self):
        from rl.envs.transforms import Compose, TensorDictPrimer

        gru = GRUModule(3, 5, in_key="x", out_key="y")
        lstm = LSTMModule(
            5, 4, in_keys=["y", "h", "c"], out_keys=["z", ("next", "h"), ("next", "c")]
        )
        assert isinstance(get_primers_from_module(gru), TensorDictPrimer)
        both = get_primers_from_module(TensorDictSequential(gru, lstm))
        assert isinstance(both, Compose)
        with pytest.warns(UserWarning, match="no primers"):
            assert get_primers_from_module(nn.Linear(2, 2)) is None
