"""The rollout engine's writers: reset patches scattered at the end, step rows through
numpy or torch, against hand-made expectations."""

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl.envs import GymEnv, step_mdp
from rl.envs.engine import EnvKernel, RolloutBuffers, StepViews, run_rollout
from rl.envs.engine._buffers import StepWriter, patched
from rl.envs.engine._loop import _apply_rows


class TestApplyRows:
    def test_scalar_flags_one_scatter(self):
        buf = torch.ones(3, 5, 1, dtype=torch.bool)
        _apply_rows(buf, [(1, np.array([0, 2]), False), (3, np.array([1]), False)], nb=1)
        want = torch.ones(3, 5, 1, dtype=torch.bool)
        want[0, 1] = want[2, 1] = want[1, 3] = False
        assert torch.equal(buf, want)

    def test_values_per_row_and_boolean_rows(self):
        buf = torch.zeros(3, 4, 2)
        first = np.array([[1.0, 2.0], [3.0, 4.0]])
        _apply_rows(
            buf,
            [
                (1, np.array([0, 2]), first),
                (2, np.array([False, True, False]), np.array([5.0, 6.0])),
            ],
            nb=1,
        )
        want = torch.zeros(3, 4, 2)
        want[0, 1] = torch.tensor([1.0, 2.0])
        want[2, 1] = torch.tensor([3.0, 4.0])
        want[1, 2] = torch.tensor([5.0, 6.0])
        assert torch.equal(buf, want)

    def test_mixed_bools_are_not_one_scalar(self):
        buf = torch.zeros(2, 3, dtype=torch.bool)
        _apply_rows(buf, [(0, np.array([0]), True), (2, np.array([1]), False), (1, [1], True)], 1)
        assert buf.tolist() == [[True, False, False], [False, True, False]]

    def test_two_batch_dims_row_by_row(self):
        buf = torch.zeros(2, 2, 3)
        _apply_rows(buf, [(1, (0, 1), 7.0), (2, (1, 0), 8.0)], nb=2)
        want = torch.zeros(2, 2, 3)
        want[0, 1, 1] = 7.0
        want[1, 0, 2] = 8.0
        assert torch.equal(buf, want)


class TestStepWriter:
    def test_numpy_rows(self):
        bufs = [("a", torch.zeros(2, 3)), ("b", torch.zeros(2, 3, 2, dtype=torch.int64))]
        write = StepWriter(bufs, nb=1, max_steps=3)
        assert write.arrays is not None
        write(1, [torch.tensor([1.0, 2.0]), torch.tensor([[1, 2], [3, 4]])])
        assert bufs[0][1][:, 1].tolist() == [1.0, 2.0]
        assert bufs[1][1][:, 1].tolist() == [[1, 2], [3, 4]]
        assert bufs[0][1][:, 0].tolist() == [0.0, 0.0]

    def test_a_value_with_grad_switches_to_torch_and_keeps_the_graph(self):
        buf = torch.zeros(2, 3)
        write = StepWriter([("a", buf)], nb=1, max_steps=3)
        write(0, [torch.tensor([1.0, 2.0])])
        x = torch.tensor([3.0, 4.0], requires_grad=True)
        write(1, [x * 2])
        assert write.arrays is None and buf.requires_grad
        assert buf.detach()[:, :2].tolist() == [[1.0, 6.0], [2.0, 8.0]]
        buf.sum().backward()
        assert x.grad.tolist() == [2.0, 2.0]
        write(2, [torch.tensor([5.0, 6.0])])  # later steps keep writing
        assert buf.detach()[:, 2].tolist() == [5.0, 6.0]

    def test_bfloat16_buffers_take_torch(self):
        buf = torch.zeros(2, 2, dtype=torch.bfloat16)
        write = StepWriter([("a", buf)], nb=1, max_steps=2)
        assert write.arrays is None
        write(1, [torch.tensor([1.5, 2.5], dtype=torch.bfloat16)])
        assert buf[:, 1].tolist() == [1.5, 2.5]


def test_patched_copies_and_leaves_the_previous_value():
    previous = torch.arange(6.0).reshape(3, 2)
    out = patched(previous, (np.array([1]), np.array([[9.0, 9.0]])))
    assert out.tolist() == [[0.0, 1.0], [9.0, 9.0], [4.0, 5.0]]
    assert previous.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    whole = torch.zeros(2)
    assert patched(previous, whole) is whole


@pytest.mark.parametrize("num_envs", [None, 3])
def test_reset_rows_of_a_rollout_match_a_step_loop(num_envs):
    """Root observations after resets (patched at the end) equal the ones a plain
    step-and-reset loop sees: the root of step t + 1 is the reset observation where step
    t ended, else the "next" one."""
    kwargs = {} if num_envs is None else {"num_envs": num_envs}
    env = GymEnv("CartPole-v1", **kwargs)
    env.set_seed(3)
    out = env.rollout(120, break_when_any_done=False)
    done = out["next", "done"].squeeze(-1)
    obs, nxt = out["observation"], out["next", "observation"]
    if num_envs is None:
        done, obs, nxt = done[None], obs[None], nxt[None]
    assert done.any()
    for b in range(done.shape[0]):
        for t in range(done.shape[1] - 1):
            if not done[b, t]:
                assert torch.equal(obs[b, t + 1], nxt[b, t])
            else:  # a fresh CartPole start: every entry within +-0.05
                assert obs[b, t + 1].abs().max() <= 0.05
    # the root done flags after a reset are False, the "next" ones say where it ended
    root_done = out["done"].squeeze(-1)
    if num_envs is None:
        root_done = root_done[None]
    assert not root_done[:, 1:][done[:, :-1]].any()


def test_a_policy_output_changing_shape_raises_naming_the_key():
    env = GymEnv("Pendulum-v1", num_envs=3)
    calls = [0]

    def policy(td):
        td["action"] = env.action_spec.zero()
        td["hidden"] = torch.zeros(3, 2 if calls[0] == 0 else 1)
        calls[0] += 1
        return td

    with pytest.raises(
        ValueError, match=r"'hidden' with shape \(3, 1\) at step 1, expected \(3, 2\)"
    ):
        env.rollout(4, policy)


def test_a_policy_output_missing_later_raises_naming_the_key():
    env = GymEnv("Pendulum-v1")
    calls = [0]

    def policy(td):
        td["action"] = env.action_spec.zero()
        if calls[0] == 0:
            td["extra"] = torch.zeros(1)
        else:
            td.pop("extra", None)
        calls[0] += 1
        return td

    with pytest.raises(KeyError, match="'extra' written at the first step is missing at step 1"):
        env.rollout(3, policy)


class _RawBufferKernel(EnvKernel):
    """Steps the env through ``EnvKernel``, keeps its outputs in buffers of its own and
    returns a TensorDict of row-``t`` views of them (as ``TransformKernel`` does), with the
    reward replaced by a new tensor from step ``replace_from`` on."""

    def __init__(self, env, replace_from):
        super().__init__(env)
        self.replace_from = replace_from

    def start(self, buffers, tensordict, actions, *, eager, stops):
        super().start(buffers, tensordict, actions, eager=eager, stops=stops)
        self.raw = RolloutBuffers(buffers.batch_size, buffers.max_steps)
        self.keys = None

    def step(self, t, tensordict):
        out = super().step(t, tensordict)
        if self.keys is None:
            self.keys = list(out.keys(True, True))
            bufs = [self.raw.next_buffer(k, out[k].shape, out[k].dtype) for k in self.keys]
            self.views = StepViews(bufs, 0, self.raw.max_steps)
        row = self.views[t]
        for view, key in zip(row, self.keys):
            view.copy_(out[key])
        td = TensorDict(dict(zip(self.keys, row)), batch_size=[])
        if t >= self.replace_from:
            td["reward"] = td["reward"] * 10
        return td

    def shared_next(self):
        return self.keys, self.views


class TestSharedNext:
    """``RolloutKernel.shared_next``: entries a kernel's TensorDict passes as its own buffer
    rows are recorded by sharing the buffer; from the step where one is replaced, the
    engine records it in a buffer of its own, keeping the kernel's earlier rows."""

    def _rollout(self, replace_from):
        env = GymEnv("Pendulum-v1")
        env.set_seed(0)
        kernel = _RawBufferKernel(env, replace_from)
        policy = lambda td: td.set("action", torch.full((1,), 0.5))  # noqa: E731
        out = run_rollout(
            env,
            6,
            env.reset(),
            policy=policy,
            break_when_any_done=False,
            break_when_all_done=False,
            kernel=kernel,
        )
        return out, kernel

    def test_passed_through_entries_share_the_kernel_buffers(self):
        out, kernel = self._rollout(replace_from=100)
        raw = kernel.raw.next
        for key in ("observation", "reward", "terminated"):
            assert out["next", key].data_ptr() == raw[key].data_ptr()
            assert torch.equal(out["next", key], raw[key])

    def test_an_entry_replaced_later_gets_its_own_buffer_with_the_earlier_rows(self):
        out, kernel = self._rollout(replace_from=2)
        raw_reward = kernel.raw.next["reward"]
        reward = out["next", "reward"]
        assert reward.data_ptr() != raw_reward.data_ptr()
        assert torch.equal(reward[:2], raw_reward[:2])
        assert torch.allclose(reward[2:], raw_reward[2:] * 10)
        assert out["next", "observation"].data_ptr() == kernel.raw.next["observation"].data_ptr()
        # the root observations are still carried from the recorded "next" ones
        assert torch.equal(out["observation"][1:], out["next", "observation"][:-1])

    def test_values_equal_a_rollout_without_sharing(self):
        out, _ = self._rollout(replace_from=3)
        env = GymEnv("Pendulum-v1")
        env.set_seed(0)
        td = env.reset()
        for t in range(6):
            td.set("action", torch.full((1,), 0.5))
            td = env.step(td)
            reward = td["next", "reward"] * (10 if t >= 3 else 1)
            assert torch.allclose(out["next", "reward"][t], reward)
            assert torch.equal(out["next", "observation"][t], td["next", "observation"])
            td = step_mdp(td)
