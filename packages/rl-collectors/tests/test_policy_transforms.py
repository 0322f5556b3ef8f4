"""auto_register_policy_transforms: the env transforms a recurrent policy needs."""

import warnings

import pytest
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential

from rl.collectors import Collector
from rl.envs import Compose, InitTracker, PendulumEnv, TransformedEnv

modules = pytest.importorskip("rl.modules")


def recurrent_policy():
    gru = modules.GRUModule(
        input_size=3,
        hidden_size=8,
        in_keys=["observation", "recurrent_state", "is_init"],
        out_keys=["features", ("next", "recurrent_state")],
    )
    head = TensorDictModule(torch.nn.Linear(8, 1), in_keys=["features"], out_keys=["action"])
    return TensorDictSequential(gru, head)


def init_keys(env):
    return [k for k in env.full_observation_spec.keys(True, True) if k == "is_init"]


class TestAutoRegister:
    def test_appends_init_tracker_and_primer(self):
        policy = recurrent_policy()
        collector = Collector(
            PendulumEnv(), policy, frames_per_batch=6, total_frames=6,
            auto_register_policy_transforms=True,
        )  # fmt: skip
        try:
            keys = set(collector.env.full_observation_spec.keys(True, True))
            assert {"is_init", "recurrent_state"} <= keys
            batch = next(iter(collector))
            assert batch["is_init"][:, 0].tolist() == [True] + [False] * 5
            assert batch["recurrent_state"].shape == (6, 1, 8)
            assert (batch["recurrent_state"][0] == 0).all()  # primed with zeros
            # the state carried from step to step is the GRU's output
            torch.testing.assert_close(
                batch["recurrent_state"][1:], batch["next", "recurrent_state"][:-1]
            )
        finally:
            collector.shutdown()

    def test_idempotent_on_a_ready_env(self):
        policy = recurrent_policy()
        primer = policy[0].make_tensordict_primer()
        env = TransformedEnv(PendulumEnv(), Compose(InitTracker(), primer))
        collector = Collector(
            env, policy, frames_per_batch=4, total_frames=4, auto_register_policy_transforms=True
        )
        try:
            assert len(init_keys(collector.env)) == 1
            assert len(collector.env.transform) == 2
        finally:
            collector.shutdown()

    def test_default_warns_then_refuses_the_bare_env(self):
        # as TorchRL: the FutureWarning, then a KeyError naming what the policy reads
        env = PendulumEnv()
        with pytest.warns(FutureWarning, match="auto_register_policy_transforms"):
            with pytest.raises(KeyError, match=r"\['is_init', 'recurrent_state'\]"):
                Collector(env, recurrent_policy(), frames_per_batch=4, total_frames=4)

    def test_false_is_silent_and_does_not_wrap(self):
        env = PendulumEnv()
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            with pytest.raises(KeyError, match="is_init.*auto_register_policy_transforms=True"):
                Collector(
                    env, recurrent_policy(), frames_per_batch=4, total_frames=4,
                    auto_register_policy_transforms=False,
                )  # fmt: skip
        assert not isinstance(env, TransformedEnv)

    def test_plain_policy_needs_nothing(self):
        env = PendulumEnv()
        policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            collector = Collector(
                env, policy, frames_per_batch=4, total_frames=4,
                auto_register_policy_transforms=True,
            )  # fmt: skip
        try:
            assert collector.env is env
        finally:
            collector.shutdown()
