"""The done flags of an env: TorchRL's default done spec, its completion, the flags filled
in when ``_step`` / ``_reset`` leave them out, ``add_truncated_keys``, ``set_truncated``.

Expected values are TorchRL 0.14.1's on the same envs (run in a scratch install).
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.core import Categorical, Composite, Unbounded
from rl.envs import (
    EnvBase,
    SerialEnv,
    TransformedEnv,
    check_env_specs,
    mark_truncated,
    step_mdp,
    truncated_keys,
)
from rl.envs._done import default_done_spec
from rl.envs.transforms import StepCounter


class Flags(EnvBase):
    """Writes the flags given by ``write`` (a dict name -> value at step 3); done spec per
    ``spec``: ``None`` (default), ``"leaf"``, ``"done"``, ``"terminated"``, ``"all"``."""

    def __init__(self, write=("done",), spec=None, batch_size=(), **kwargs):
        super().__init__(batch_size=batch_size, **kwargs)
        bs = self.batch_size
        self.observation_spec = Composite(obs=Unbounded(shape=(*bs, 1)), shape=bs)
        self.action_spec = Unbounded(shape=(*bs, 1))
        self.reward_spec = Unbounded(shape=(*bs, 1))
        flag = Categorical(2, shape=(*bs, 1), dtype=torch.bool)
        if spec == "leaf":
            self.done_spec = flag
        elif spec in ("done", "terminated"):
            self.full_done_spec = Composite({spec: flag}, shape=bs)
        elif spec == "all":
            self.full_done_spec = default_done_spec(bs, truncated=True)
        self.write = write
        self.t = 0

    def _reset(self, td):
        self.t = 0
        return TensorDict(obs=torch.zeros(*self.batch_size, 1), batch_size=self.batch_size)

    def _step(self, td):
        self.t += 1
        out = TensorDict(
            obs=torch.full((*self.batch_size, 1), float(self.t)),
            reward=torch.ones(*self.batch_size, 1),
            batch_size=self.batch_size,
        )
        for name in self.write:
            out.set(name, torch.full((*self.batch_size, 1), self.t >= 3))
        return out

    def _set_seed(self, seed):
        pass


class SometimesTruncated(EnvBase):
    """Declares ``truncated`` but writes it only on the steps where ``t % 2 == parity``
    (and on reset only when ``parity`` is 1): the env relies on the base class to fill it
    (review4 #3; TorchRL 0.14.1 fills it at every call)."""

    def __init__(self, parity=0):
        super().__init__()
        self.observation_spec = Composite(obs=Unbounded(shape=(1,)))
        self.action_spec = Unbounded(shape=(1,))
        self.reward_spec = Unbounded(shape=(1,))
        self.full_done_spec = default_done_spec(torch.Size([]), truncated=True)
        self.parity = parity
        self.t = 0

    def _reset(self, td):
        self.t = 0
        out = TensorDict(obs=torch.zeros(1), done=_false(), terminated=_false())
        if self.parity:
            out["truncated"] = _false()
        return out

    def _step(self, td):
        self.t += 1
        out = TensorDict(
            obs=torch.full((1,), float(self.t)),
            reward=torch.zeros(1),
            done=_false(),
            terminated=_false(),
        )
        if self.t % 2 == self.parity:
            out["truncated"] = _false()
        return out

    def _set_seed(self, seed):
        pass


_ALL_NEXT = ["done", "obs", "reward", "terminated", "truncated"]


def _false():
    return torch.zeros(1, dtype=torch.bool)


def _last(rollout, keys):
    return {k: rollout["next", k][..., -1, 0].tolist() for k in keys}


class TestDefaultDoneSpec:
    @pytest.mark.parametrize("batch_size", [(), (2,)])
    def test_done_and_terminated_only(self, batch_size):
        env = Flags(batch_size=batch_size)
        assert env.done_keys == ["done", "terminated"]
        for key in env.done_keys:
            spec = env.full_done_spec[key]
            assert isinstance(spec, Categorical) and spec.n == 2
            assert spec.shape == (*batch_size, 1) and spec.dtype == torch.bool
        assert isinstance(env.done_spec, Composite)  # two leaves: the Composite, as TorchRL
        reset = env.reset()
        assert sorted(reset.keys()) == ["done", "obs", "terminated"]
        rollout = env.rollout(5)
        assert rollout.batch_size == (*batch_size, 3)
        assert rollout["next", "terminated"].equal(rollout["next", "done"])
        check_env_specs(env)

    @pytest.mark.parametrize(
        ("spec", "keys"),
        [
            ("leaf", ["done", "terminated"]),
            ("done", ["done", "terminated"]),
            ("terminated", ["terminated", "done"]),
            ("all", ["done", "terminated", "truncated"]),
        ],
    )
    def test_completion_of_a_partial_spec(self, spec, keys):
        env = Flags(spec=spec)
        assert env.done_keys == keys
        check_env_specs(env)

    def test_leaf_keeps_its_dtype_and_a_nested_group_is_completed(self):
        class Int(Flags):
            def __init__(self):
                super().__init__()
                self.done_spec = Categorical(2, shape=(1,), dtype=torch.int64)

        env = Int()
        assert env.full_done_spec["terminated"].dtype == torch.int64
        filled = env.rollout(5)["next", "terminated"]  # from the bool done, in the spec's dtype
        assert filled.dtype == torch.int64 and filled[:, 0].tolist() == [0, 0, 1]

        class Group(Flags):
            def __init__(self):
                super().__init__()
                self.full_done_spec = Composite(
                    agents=Composite(
                        terminated=Categorical(2, shape=(3, 1), dtype=torch.bool), shape=(3,)
                    )
                )

        assert Group().done_keys == [("agents", "terminated"), ("agents", "done")]

    def test_auto_complete_done_specs_false_keeps_the_spec(self):
        class Raw(Flags):
            auto_complete_done_specs = False

        assert Raw(spec="done").done_keys == ["done"]

    def test_add_truncated_keys(self):
        env = Flags(write=("done",))
        assert env.add_truncated_keys() is env
        assert env.done_keys == ["done", "terminated", "truncated"]
        rollout = env.rollout(5)
        assert _last(rollout, ["done", "terminated", "truncated"]) == {
            "done": True,
            "terminated": True,
            "truncated": False,
        }

    def test_add_truncated_keys_on_any_done_flag(self):
        # TorchRL 0.14.1: every done key gets a truncated sibling, a lone stop included
        env = Flags()
        env.full_done_spec = Composite(stop=Categorical(2, shape=(1,), dtype=torch.bool))
        assert env.add_truncated_keys().done_keys == ["stop", "truncated"]
        assert env.full_done_spec["truncated"] == env.full_done_spec["stop"]

        class Group(Flags):
            auto_complete_done_specs = False

        group = Group()
        group.full_done_spec = Composite(
            agents=Composite(stop=Categorical(2, shape=(3, 1), dtype=torch.bool), shape=(3,))
        )
        assert group.add_truncated_keys().done_keys == [("agents", "stop"), ("agents", "truncated")]

    def test_add_truncated_keys_needs_a_done_flag(self):
        class Empty(Flags):
            auto_complete_done_specs = False

        env = Empty()
        env.full_done_spec = Composite()
        with pytest.raises(KeyError, match="add_truncated_keys found no done key"):
            env.add_truncated_keys()

    @pytest.mark.parametrize("first", ["step", "rollout"])
    def test_a_flag_declared_after_the_first_step_is_filled(self, first):
        # the outputs were complete for the old done keys: the new flag must be filled on
        # reset and step as on a fresh env (TorchRL completes every call)
        env = Flags(write=("done", "terminated"))
        env._reset = lambda td: TensorDict(obs=torch.zeros(1), done=_false(), terminated=_false())
        if first == "step":
            env.rand_step(env.reset())
        else:
            env.rollout(2)
        env.add_truncated_keys()
        assert sorted(env.reset().keys()) == ["done", "obs", "terminated", "truncated"]
        td = env.rand_step(env.reset())
        assert td["next", "truncated"].tolist() == [False]
        assert sorted(td["next"].keys()) == ["done", "obs", "reward", "terminated", "truncated"]
        check_env_specs(env)
        # a flag added to unlocked specs in place is filled too
        env.set_spec_lock_(False)
        env.full_done_spec["stop"] = Categorical(2, shape=(1,), dtype=torch.bool)
        assert env.rand_step(env.reset())["next", "stop"].tolist() == [False]


class TestFilledFlags:
    """What a ``_step`` that leaves flags out gets, against TorchRL 0.14.1."""

    @pytest.mark.parametrize(
        ("write", "spec", "steps", "expected"),
        [
            (("done",), None, 3, {"done": True, "terminated": True}),
            (("terminated",), None, 3, {"done": True, "terminated": True}),
            ((), None, 5, {"done": False, "terminated": False}),
            # truncated outside the spec is ignored (TorchRL: the rollout does not stop)
            (("truncated",), None, 5, {"done": False, "terminated": False}),
            (
                ("terminated", "truncated"),
                "all",
                3,
                {"done": True, "terminated": True, "truncated": True},
            ),
        ],
    )
    def test_values(self, write, spec, steps, expected):
        rollout = Flags(write=write, spec=spec).rollout(5)
        assert rollout.shape == (steps,)
        assert _last(rollout, expected) == expected

    def test_done_is_terminated_or_truncated(self):
        # TorchRL leaves done False when _step writes truncated alone; here the contract
        # done = terminated | truncated holds (the documented difference)
        rollout = Flags(write=("truncated",), spec="all").rollout(5)
        assert rollout.shape == (3,)
        assert _last(rollout, ["done", "terminated", "truncated"]) == {
            "done": True,
            "terminated": False,
            "truncated": True,
        }

    def test_done_and_truncated_without_terminated_raise(self):
        env = Flags(write=("done", "truncated"), spec="all")
        with pytest.raises(RuntimeError, match="no 'terminated' entry: terminated cannot be"):
            env.rollout(5)

    def test_a_truncation_added_by_a_transform_is_no_termination(self):
        # the base env's flags are completed before the transforms (TorchRL's order)
        env = TransformedEnv(Flags(write=("done",)), StepCounter(max_steps=2))
        assert env.done_keys == ["done", "terminated", "truncated"]
        rollout = env.rollout(5)
        assert rollout.shape == (2,)
        assert _last(rollout, ["done", "terminated", "truncated"]) == {
            "done": True,
            "terminated": False,
            "truncated": True,
        }
        td = env.step(env.rand_action(env.reset()))
        assert td["next", "terminated"].tolist() == [False]

    def test_step_counter_without_max_steps_adds_no_flag(self):
        env = TransformedEnv(Flags(), StepCounter())
        assert env.done_keys == ["done", "terminated"]
        check_env_specs(env)

    @pytest.mark.parametrize("parity", [0, 1])
    def test_a_flag_written_on_some_steps_only_is_filled_at_every_step(self, parity):
        # review4 #3: parity 0 leaves truncated out of reset and the odd steps, parity 1
        # out of the even steps (its first outputs are complete). TorchRL 0.14.1 gives
        # all five entries, truncated False, at every step, in step() and rollout()
        env = SometimesTruncated(parity)
        td = env.reset()
        assert sorted(td.keys()) == ["done", "obs", "terminated", "truncated"]
        for t in range(1, 5):
            td = env.rand_step(td)
            assert sorted(td["next"].keys()) == _ALL_NEXT, t
            assert td["next", "truncated"].tolist() == [False]
            td = step_mdp(td)
        rollout = env.rollout(4)
        assert rollout.shape == (4,)
        assert sorted(rollout["next"].keys()) == _ALL_NEXT
        assert not rollout["next", "truncated"].any()

    @pytest.mark.parametrize("parity", [0, 1])
    def test_a_flag_written_on_some_steps_only_in_wrappers(self, parity):
        # the transformed env completes its base env, SerialEnv's worker copies every done
        # key into its buffers: the same outputs as the plain env (TorchRL 0.14.1 too)
        env = TransformedEnv(SometimesTruncated(parity), StepCounter())
        rollout = env.rollout(4)
        assert sorted(rollout["next"].keys()) == sorted([*_ALL_NEXT, "step_count"])
        assert not rollout["next", "truncated"].any()
        td = env.reset()
        for _ in range(3):
            td = step_mdp(env.rand_step(td))
            assert td["truncated"].tolist() == [False]
        serial = SerialEnv(2, lambda: SometimesTruncated(parity))
        try:
            rollout = serial.rollout(4)
            assert rollout.shape == (2, 4)
            assert sorted(rollout["next"].keys()) == _ALL_NEXT
            assert not rollout["next", "truncated"].any()
            td = serial.reset()
            for _ in range(3):
                td = step_mdp(serial.rand_step(td))
                assert td["truncated"].tolist() == [[False], [False]]
        finally:
            serial.close()

    def test_step_mdp_carries_the_flags(self):
        env = Flags(batch_size=(2,))
        td = env.rand_step(env.reset())
        assert sorted(step_mdp(td).keys()) == ["done", "obs", "terminated"]


class TestSetTruncated:
    def test_needs_a_truncated_key(self):
        env = Flags()
        with pytest.raises(
            RuntimeError,
            match=r"set_truncated=True needs a 'truncated' entry in the done spec, got done keys \['done', 'terminated'\]",
        ):
            env.rollout(2, set_truncated=True)

    def test_marks_the_last_step(self):
        env = Flags(spec="all", batch_size=(2,))
        rollout = env.rollout(2, set_truncated=True)
        assert rollout["next", "truncated"][..., 0].tolist() == [[False, True]] * 2
        assert rollout["next", "done"][..., 0].tolist() == [[False, True]] * 2
        assert not rollout["next", "terminated"].any()

    def test_mark_truncated_one_helper_for_rollout_and_collector(self):
        # TorchRL's marking: each truncated key at the last step, its done sibling or-ed;
        # a done without a truncated sibling (the root here) is left alone
        flags = torch.tensor([[True], [False], [False]])
        rollout = TensorDict(
            next=TensorDict(
                done=flags.clone(),
                agents=TensorDict(done=flags.clone(), truncated=flags.clone(), batch_size=[3]),
                batch_size=[3],
            ),
            batch_size=[3],
        )
        assert (
            mark_truncated(rollout, ["done", ("agents", "done"), ("agents", "truncated")])
            is rollout
        )
        assert rollout["next", "agents", "truncated"][:, 0].tolist() == [True, False, True]
        assert rollout["next", "agents", "done"][:, 0].tolist() == [True, False, True]
        assert rollout["next", "done"][:, 0].tolist() == [True, False, False]
        with pytest.raises(RuntimeError, match=r"got done keys \['done'\]: call env.add_trunc"):
            mark_truncated(rollout, ["done"])

    def test_truncated_keys_one_check_for_rollout_and_collector(self):
        # review4 #7: the check mark_truncated and Collector(set_truncated=True) share
        keys = ["done", "truncated", ("agents", "done"), ("agents", "truncated")]
        assert truncated_keys(keys) == ["truncated", ("agents", "truncated")]
        assert truncated_keys([("a", "b", "truncated")]) == [("a", "b", "truncated")]
        with pytest.raises(
            RuntimeError,
            match=r"needs a 'truncated' entry in the done spec, got done keys "
            r"\['done', \('agents', 'done'\)\]: call env.add_truncated_keys\(\) first$",
        ):
            truncated_keys(["done", ("agents", "done")])
        with pytest.raises(RuntimeError, match=r"add_truncated_keys\(\) before passing it$"):
            truncated_keys(["done"], when="before passing it")


class _BoolFlags(EnvBase):
    """Writes done / terminated as Python bools (0-dim) while the spec says ``(1,)``."""

    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(observation=Unbounded((3,)))
        self.action_spec = Categorical(2, (1,), dtype=torch.bool)
        self.done_spec = Categorical(2, (1,), dtype=torch.bool)
        self.full_done_spec["truncated"] = self.full_done_spec["terminated"].clone()
        self.reward_spec = Unbounded((1,))
        self.t = 0

    def _reset(self, td):
        self.t = 0
        return self.observation_spec.zero()

    def _step(self, td):
        self.t += 1
        end = self.t == 3
        return TensorDict(
            {"observation": torch.zeros(3), "done": end, "terminated": end, "reward": torch.ones(1)}
        )

    def _set_seed(self, seed):
        pass


class TestFlagShapes:
    def test_flags_reshaped_to_the_spec(self):
        # TorchRL's _complete_done reshapes the flags a _step gives to the spec's shape
        rollout = _BoolFlags().rollout(5)
        assert rollout.shape == (3,)
        for key in ("done", "terminated", "truncated"):
            assert rollout["next", key].shape == (3, 1)
        assert rollout["next", "done"].squeeze(-1).tolist() == [False, False, True]
        assert rollout["next", "truncated"].sum() == 0
