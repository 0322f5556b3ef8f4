"""EnvBase contract: reset / step / rollout, partial resets, specs, helpers and errors."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.core import Binary, Bounded, Composite, Unbounded
from rl.envs import EnvBase, PendulumEnv, RandomPolicy, check_env_specs, step_mdp


def _ones_policy(td):
    td["action"] = torch.ones(*td.batch_size, 1)
    return td


class TestSpecs:
    def test_defaults(self, counting_env):
        assert set(counting_env.done_keys) == {"done", "terminated", "truncated"}
        assert counting_env.done_spec["done"].dtype == torch.bool
        assert counting_env.done_spec["truncated"].shape == (3, 1)
        assert counting_env.action_key == "action"
        assert counting_env.reward_key == "reward"
        assert counting_env.observation_keys == ["observation"]
        assert isinstance(counting_env.full_action_spec, Composite)
        assert isinstance(counting_env.action_spec, Bounded)
        assert counting_env.full_action_spec["action"] is counting_env.action_spec
        assert counting_env.output_spec["full_observation_spec"] is counting_env.observation_spec
        assert "full_state_spec" in counting_env.input_spec.keys()

    def test_default_reward_spec(self):
        class NoRewardSpec(EnvBase):
            def __init__(self):
                super().__init__(batch_size=[2])
                self.observation_spec = Composite(x=Unbounded(shape=(2, 1)), shape=(2,))

            _reset = _step = _set_seed = lambda self, arg: None

        env = NoRewardSpec()
        assert isinstance(env.reward_spec, Unbounded) and env.reward_spec.shape == (2, 1)

    def test_missing_hooks(self):
        class NoStep(EnvBase):
            def _reset(self, tensordict):
                return None

        with pytest.raises(TypeError, match="abstract class NoStep.*_set_seed.*_step"):
            NoStep()

    def test_fake_tensordict(self, counting_env):
        fake = counting_env.fake_tensordict()
        assert set(fake.keys(True, True)) == {
            "observation", "action", "done", "terminated", "truncated",
            ("next", "observation"), ("next", "reward"), ("next", "done"),
            ("next", "terminated"), ("next", "truncated"),
        }  # fmt: skip
        assert fake.batch_size == (3,)

    def test_spec_shape_mismatch(self, counting_env):
        with pytest.raises(ValueError, match=r"observation_spec must have shape \(3,\)"):
            counting_env.observation_spec = Composite(observation=Unbounded(shape=(1,)))
        with pytest.raises(ValueError, match=r"action_spec must have leading dims \(3,\)"):
            counting_env.action_spec = Unbounded(shape=(1,))
        with pytest.raises(TypeError, match="observation_spec must be a Composite"):
            counting_env.observation_spec = Unbounded(shape=(3, 1))


class TestResetStep:
    def test_reset_and_step(self, counting_env):
        td = counting_env.reset()
        assert td.batch_size == (3,)
        assert not td["done"].any()
        td["action"] = torch.ones(3, 1)
        td = counting_env.step(td)
        torch.testing.assert_close(td["next", "observation"], torch.ones(3, 1))
        assert td["observation"].sum() == 0
        assert not td["next", "done"].any()

    def test_partial_reset_keeps_unmasked(self, counting_env):
        td = counting_env.reset()
        for _ in range(2):
            td = step_mdp(counting_env.step(_ones_policy(td)))
        td["_reset"] = torch.tensor([[True], [False], [False]])
        td = counting_env.reset(td)
        torch.testing.assert_close(td["observation"], torch.tensor([[0.0], [2.0], [2.0]]))
        torch.testing.assert_close(counting_env.count, torch.tensor([[0.0], [2.0], [2.0]]))
        assert counting_env.resets.flatten().tolist() == [2, 1, 1]
        assert "_reset" not in td.keys()

    def test_partial_reset_merge_when_env_returns_garbage(self, counting_env_cls):
        class Garbage(counting_env_cls):
            def _reset(self, tensordict):
                out = super()._reset(tensordict)
                out["observation"] = torch.full_like(out["observation"], -7.0)
                return out

        env = Garbage(limits=(5, 5))
        td = env.reset()
        td = step_mdp(env.step(_ones_policy(td)))
        td["_reset"] = torch.tensor([[False], [True]])
        td = env.reset(td)
        # EnvBase keeps the unmasked entries whatever the env returned for them
        torch.testing.assert_close(td["observation"], torch.tensor([[1.0], [-7.0]]))

    def test_empty_reset_mask_is_noop(self, counting_env):
        td = counting_env.reset()
        td["_reset"] = torch.zeros(3, 1, dtype=torch.bool)
        td = counting_env.reset(td)
        assert counting_env.resets.flatten().tolist() == [1, 1, 1]

    def test_step_and_maybe_reset(self, counting_env):
        td = counting_env.reset()
        count = [0.0, 0.0, 0.0]
        limits = [2, 3, 5]
        for _ in range(6):
            td, root = counting_env.step_and_maybe_reset(_ones_policy(td))
            count = [c + 1 for c in count]
            done = [c >= lim for c, lim in zip(count, limits)]
            assert td["next", "done"].flatten().tolist() == done
            # next holds the final count, the root of the next step the reset one
            assert td["next", "observation"].flatten().tolist() == count
            count = [0.0 if d else c for c, d in zip(count, done)]
            assert root["observation"].flatten().tolist() == count
            assert not root["done"].any()
            td = root

    def test_missing_action(self, counting_env):
        td = counting_env.reset()
        with pytest.raises(KeyError, match=r"needs the action key 'action'.*Bounded"):
            counting_env.step(td)

    def test_wrong_batch_size(self, counting_env):
        td = TensorDict(action=torch.ones(2, 1), batch_size=[2])
        with pytest.raises(
            ValueError, match=r"batch_size \(2,\), expected the env batch_size \(3,\)"
        ):
            counting_env.step(td)
        with pytest.raises(ValueError, match=r"reset\(\) got a tensordict of batch_size \(2,\)"):
            counting_env.reset(TensorDict(batch_size=[2]))

    def test_debug_mode_action_outside_spec(self, counting_env_cls):
        env = counting_env_cls(limits=(5,))
        env.run_type_checks = True
        td = env.reset()
        td["action"] = torch.tensor([[3.0]])
        with pytest.raises(
            ValueError,
            match=r"action 'action' = tensor\(\[\[3\.\]\]\) is outside action_spec Bounded",
        ):
            env.step(td)
        td["action"] = torch.ones(1, 2)
        with pytest.raises(
            ValueError, match=r"action 'action' has shape \(1, 2\), expected \(1, 1\)"
        ):
            env.step(td)
        # without the debug mode the same action goes through
        env.run_type_checks = False
        td["action"] = torch.tensor([[3.0]])
        assert env.step(td)["next", "observation"].item() == 3.0

    def test_rand_step_checks_action(self, counting_env_cls):
        env = counting_env_cls(limits=(5,))
        td = env.rand_step()
        assert 0 <= td["action"].item() <= 1
        assert "next" in td.keys()

        class BadSpecEnv(counting_env_cls):
            def rand_action(self, tensordict=None):
                tensordict["action"] = torch.full((1, 1), 2.0)
                return tensordict

        with pytest.raises(ValueError, match="is outside action_spec"):
            BadSpecEnv(limits=(5,)).rand_step()

    def test_set_seed_returns_next_seed(self, counting_env):
        nxt = counting_env.set_seed(3)
        assert counting_env.seed == 3
        assert isinstance(nxt, int) and nxt != 3
        assert counting_env.set_seed(3) == nxt
        assert counting_env.set_seed(3, static_seed=True) == 3


class TestRollout:
    def test_shapes_and_break(self, counting_env):
        rollout = counting_env.rollout(10, _ones_policy)
        assert rollout.batch_size == (3, 2)  # the first env is done after 2 steps
        assert rollout["next", "done"][:, -1].flatten().tolist() == [True, False, False]

    def test_no_break_auto_resets(self, counting_env):
        rollout = counting_env.rollout(7, _ones_policy, break_when_any_done=False)
        assert rollout.batch_size == (3, 7)
        obs = rollout["observation"][..., 0]
        nobs = rollout["next", "observation"][..., 0]
        assert obs[0].tolist() == [0, 1, 0, 1, 0, 1, 0]
        assert nobs[0].tolist() == [1, 2, 1, 2, 1, 2, 1]
        assert obs[2].tolist() == [0, 1, 2, 3, 4, 0, 1]
        assert rollout["next", "terminated"][2, :, 0].tolist() == [0, 0, 0, 0, 1, 0, 0]
        assert not rollout["done"].any()
        torch.testing.assert_close(rollout["next", "reward"], rollout["next", "observation"])

    def test_termination_vs_truncation(self, counting_env_cls):
        env = counting_env_cls(limits=(3, 100), truncate_at=4)
        rollout = env.rollout(9, _ones_policy, break_when_any_done=False)
        term = rollout["next", "terminated"][..., 0].int().tolist()
        trunc = rollout["next", "truncated"][..., 0].int().tolist()
        done = rollout["next", "done"][..., 0].int().tolist()
        assert term[0] == [0, 0, 1, 0, 0, 1, 0, 0, 1]
        assert trunc[0] == [0] * 9
        assert term[1] == [0] * 9
        assert trunc[1] == [0, 0, 0, 1, 0, 0, 0, 1, 0]
        assert done[1] == trunc[1] and done[0] == term[0]
        assert rollout["observation"][1, :, 0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0]

    def test_break_when_all_done(self, counting_env):
        rollout = counting_env.rollout(
            20, _ones_policy, break_when_any_done=False, break_when_all_done=True
        )
        assert rollout.batch_size == (3, 5)

    def test_matches_manual_loop(self):
        torch.manual_seed(0)
        env = PendulumEnv(batch_size=[2])
        policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        env.set_seed(0)
        torch.manual_seed(1)
        td = env.reset()
        steps = []
        for _ in range(10):
            policy(td)
            steps.append(env.step(td).clone())
            td = step_mdp(td)
        manual = torch.stack(steps, 1)
        env.set_seed(0)
        torch.manual_seed(1)
        rollout = env.rollout(10, policy)
        assert set(rollout.keys(True, True)) == set(manual.keys(True, True))
        assert (rollout.detach() == manual.detach()).all()

    def test_random_rollout_reproducible(self):
        env = PendulumEnv(batch_size=[2])
        env.set_seed(0)
        torch.manual_seed(0)
        a = env.rollout(15)
        env.set_seed(0)
        torch.manual_seed(0)
        b = env.rollout(15)
        assert (a == b).all()

    def test_policy_extra_keys_recorded(self, counting_env):
        def policy(td):
            td["action"] = torch.ones(3, 1)
            td["logits"] = torch.full((3, 2), 0.5)
            return td

        rollout = counting_env.rollout(2, policy)
        assert rollout["logits"].shape == (3, 2, 2)

    def test_callback_and_set_truncated(self, counting_env_cls):
        env = counting_env_cls(limits=(100,))
        seen = []
        rollout = env.rollout(
            4, _ones_policy, callback=lambda e, td: seen.append(td["next", "observation"].item()),
            set_truncated=True,
        )  # fmt: skip
        assert seen == [1.0, 2.0, 3.0, 4.0]
        assert rollout["next", "truncated"][0, :, 0].tolist() == [False, False, False, True]
        assert rollout["next", "done"][0, -1, 0]

    def test_no_auto_reset_needs_tensordict(self, counting_env):
        with pytest.raises(RuntimeError, match="needs an initial tensordict"):
            counting_env.rollout(3, auto_reset=False)
        td = counting_env.reset()
        td = step_mdp(counting_env.step(_ones_policy(td)))
        rollout = counting_env.rollout(1, _ones_policy, auto_reset=False, tensordict=td)
        assert rollout["observation"][:, 0, 0].tolist() == [1.0, 1.0, 1.0]

    def test_bad_max_steps(self, counting_env):
        with pytest.raises(ValueError, match="max_steps must be a positive int, got 0"):
            counting_env.rollout(0)

    def test_missing_action_in_rollout(self, counting_env):
        with pytest.raises(KeyError, match="needs the action key 'action'"):
            counting_env.rollout(3, policy=lambda td: td)


class TestHelpers:
    def test_step_mdp(self):
        td = TensorDict(
            observation=torch.zeros(2, 3),
            action=torch.ones(2, 1),
            hidden=torch.ones(2, 4),
            done=torch.zeros(2, 1, dtype=torch.bool),
            next=TensorDict(
                observation=torch.ones(2, 3),
                reward=torch.ones(2, 1),
                done=torch.ones(2, 1, dtype=torch.bool),
                batch_size=[2],
            ),
            batch_size=[2],
        )
        out = step_mdp(td)
        assert set(out.keys()) == {"observation", "hidden", "done"}
        assert out["observation"].sum() == 6 and out["done"].all()
        out = step_mdp(td, keep_other=False, exclude_reward=False, exclude_done=True)
        assert set(out.keys()) == {"observation", "reward"}
        out = step_mdp(td, exclude_action=False)
        assert "action" in out.keys()
        with pytest.raises(KeyError, match="needs a 'next' entry"):
            step_mdp(td.exclude("next"))

    def test_random_policy(self, counting_env):
        policy = RandomPolicy(counting_env.action_spec)
        rollout = counting_env.rollout(4, policy, break_when_any_done=False)
        assert ((rollout["action"] >= 0) & (rollout["action"] <= 1)).all()
        composite = RandomPolicy(counting_env.full_action_spec)
        assert composite(TensorDict(batch_size=[3]))["action"].shape == (3, 1)

    def test_check_env_specs_passes(self, counting_env):
        check_env_specs(counting_env)

    def test_check_env_specs_break_when_any_done(self, counting_env_cls, monkeypatch):
        env = counting_env_cls(limits=(99,), truncate_at=2)  # done after 2 steps
        lengths = []
        rollout = env.rollout

        def recording_rollout(*args, **kwargs):
            out = rollout(*args, **kwargs)
            lengths.append(out.batch_size[-1])
            return out

        monkeypatch.setattr(env, "rollout", recording_rollout)
        check_env_specs(env, max_steps=5)  # None: TorchRL's rollout default, stop at done
        check_env_specs(env, break_when_any_done=False, max_steps=5)
        check_env_specs(env, None, True, None, None, "both", 5)  # both flavours, in order
        assert lengths == [2, 5, 2, 5]

    def test_check_env_specs_detects_extra_key(self, counting_env_cls):
        class ExtraKey(counting_env_cls):
            def _step(self, tensordict):
                out = super()._step(tensordict)
                out["secret"] = torch.zeros(*self.batch_size, 1)
                return out

        with pytest.raises(AssertionError, match=r"not in the specs: \[\('next', 'secret'\)\]"):
            check_env_specs(ExtraKey(limits=(9,)))

    def test_check_env_specs_detects_dtype_and_range(self, counting_env_cls):
        class WrongDtype(counting_env_cls):
            def _step(self, tensordict):
                out = super()._step(tensordict)
                out["reward"] = out["reward"].double()
                return out

        with pytest.raises(AssertionError, match=r"\('next', 'reward'\) has dtype torch.float64"):
            check_env_specs(WrongDtype(limits=(9,)))

        class OutOfRange(counting_env_cls):
            def __init__(self):
                super().__init__(limits=(9,))
                self.observation_spec = Composite(
                    observation=Bounded(0.0, 0.5, shape=(1, 1)), shape=(1,)
                )

        torch.manual_seed(1)  # the random actions decide which entry leaves the spec first
        with pytest.raises(
            AssertionError, match=r"'observation' at step 1 is outside its spec Bounded"
        ):
            check_env_specs(OutOfRange())

    def test_check_env_specs_growing_sequence_and_text(self):
        """An entry with a dynamic dim (a token sequence growing by one per step) and a
        non-tensor entry (its text) are checked step by step."""
        from tensordict import NonTensorData

        from rl.core import Categorical, NonTensor

        class Growing(EnvBase):
            def __init__(self, extra_dim=False):
                super().__init__()
                self.extra_dim = extra_dim
                self.observation_spec = Composite(
                    tokens=Categorical(5, shape=(-1,), dtype=torch.long), text=NonTensor(shape=())
                )
                self.action_spec = Categorical(5, shape=(1,), dtype=torch.long)
                self.reward_spec = Unbounded(shape=(1,))

            def _out(self, tokens):
                if self.extra_dim and tokens.numel() > 2:
                    tokens = tokens.unsqueeze(0)
                flags = {k: torch.zeros(1, dtype=torch.bool) for k in ("done", "terminated")}
                return TensorDict(tokens=tokens, text=NonTensorData(str(tokens.tolist())), **flags)

            def _reset(self, tensordict):
                return self._out(torch.tensor([1, 2]))

            def _step(self, tensordict):
                out = self._out(torch.cat([tensordict["tokens"].reshape(-1), tensordict["action"]]))
                out["reward"] = torch.ones(1)
                return out

            def _set_seed(self, seed):
                pass

        check_env_specs(Growing(), max_steps=4)
        with pytest.raises(
            AssertionError,
            match=r"'tokens' has shape \(1, 3\) at step 1 \(sub-env \(\)\), expected \(-1,\)",
        ):
            check_env_specs(Growing(extra_dim=True), max_steps=4)


@pytest.mark.parametrize(
    "module",
    [
        "rl.envs._env_base",
        "rl.envs._utils",
        "rl.envs._gym",
        "rl.envs._native._pendulum",
        "rl.envs._native._cartpole",
        "rl.envs._native._trading",
    ],
)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def _readme_blocks(compiles_for_a_minute: bool) -> list[str]:
    """The python blocks of the package README: those that compile a Brax env's
    differentiable step (about a minute of XLA on CPU), or the others."""
    readme = Path(__file__).parents[1] / "README.md"
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
    return [b for b in blocks if ("BraxEnv(" in b) == compiles_for_a_minute]


def test_readme_examples():
    """The python blocks of the package README run as written (the Brax one: below)."""
    blocks = _readme_blocks(False)
    assert len(blocks) >= 4
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "__main__"})


@pytest.mark.slow
def test_readme_brax_example():
    """The README's Brax block runs as written (a minute of XLA compilation on CPU: behind
    the slow marker; test_libs_brax.py checks the same gradients on a small system)."""
    (block,) = _readme_blocks(True)
    exec(compile(block, "README.md", "exec"), {"__name__": "__main__"})


def test_step_mdp_keeps_an_action_under_a_repeated_group_name():
    # the action ("g", "g", "action") goes under the group "g" taken from "next", which
    # has no "g" of its own: the path is cut at its depth, not at the first "g"
    td = TensorDict(
        {
            "g": {"g": {"action": torch.zeros(2)}},
            "next": {"g": {"obs": torch.ones(2)}, "reward": torch.ones(2)},
        },
        [2],
    )
    out = step_mdp(td, keep_other=False, exclude_action=False, action_keys=[("g", "g", "action")])
    assert sorted(out.keys(True, True)) == [("g", "g", "action"), ("g", "obs")]
    assert torch.equal(out["g", "g", "action"], torch.zeros(2))
    assert "g" not in td["next", "g"].keys()  # the input's "next" group is not written


class _GroupDoneEnv(EnvBase):
    """Three counters whose done flags live only in the group ``"agents"``; env ``i``
    ends after ``i + 2`` steps. A reset reads ``("agents", "_reset")`` and refuses a root
    ``"_reset"`` (TorchRL's nested mock envs do)."""

    def __init__(self):
        super().__init__(batch_size=[3])
        self.observation_spec = Composite(
            agents=Composite(count=Unbounded(shape=(3, 1)), shape=(3,)), shape=(3,)
        )
        self.action_spec = Unbounded(shape=(3, 1))
        self.reward_spec = Unbounded(shape=(3, 1))
        flag = Binary(n=1, shape=(3, 1), dtype=torch.bool)
        self.full_done_spec = Composite(
            agents=Composite(done=flag.clone(), terminated=flag.clone(), shape=(3,)), shape=(3,)
        )
        self.count = torch.zeros(3, 1)
        self.limit = torch.tensor([[2.0], [3.0], [4.0]])

    def _reset(self, tensordict):
        if tensordict is not None and "_reset" in tensordict.keys():
            raise KeyError("a root _reset on an env whose done flags are nested")
        mask = None if tensordict is None else tensordict.get(("agents", "_reset"), None)
        self.count = torch.zeros(3, 1) if mask is None else self.count.masked_fill(mask, 0)
        flag = torch.zeros(3, 1, dtype=torch.bool)
        agents = {"count": self.count.clone(), "done": flag, "terminated": flag.clone()}
        return TensorDict({"agents": TensorDict(agents, [3])}, [3])

    def _step(self, tensordict):
        self.count = self.count + 1
        done = self.count >= self.limit
        agents = {"count": self.count.clone(), "done": done, "terminated": done.clone()}
        return TensorDict({"agents": TensorDict(agents, [3]), "reward": torch.ones(3, 1)}, [3])

    def _set_seed(self, seed):
        pass


def test_rollout_resets_an_env_whose_done_flags_are_nested():
    env = _GroupDoneEnv()
    out = env.rollout(8, break_when_any_done=False)
    counts = out["next", "agents", "count"][..., 0]
    # env i counts 1 .. i + 2, then starts again from 1 (a reset through ("agents", "_reset"))
    expected = torch.tensor(
        [[1, 2, 1, 2, 1, 2, 1, 2], [1, 2, 3, 1, 2, 3, 1, 2], [1, 2, 3, 4, 1, 2, 3, 4]],
        dtype=torch.float32,
    )
    assert torch.equal(counts, expected)
    assert torch.equal(
        out["agents", "count"][:, 1:, 0],
        torch.where(expected[:, :-1] >= torch.tensor([[2.0], [3.0], [4.0]]), 0.0, expected[:, :-1]),
    )
    keys = set(out.keys(True, True))
    assert ("agents", "_reset") not in keys and "_reset" not in keys
