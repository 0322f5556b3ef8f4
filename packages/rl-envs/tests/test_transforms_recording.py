"""PixelRenderTransform (frames from env.render()) and TensorDictRecorder (saved steps)."""

from __future__ import annotations

import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import doctest  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402

import rl.envs.transforms._recording as recording_module  # noqa: E402
from rl.envs import (  # noqa: E402
    GymEnv,
    ParallelEnv,
    PendulumEnv,
    PixelRenderTransform,
    TensorDictRecorder,
    TransformedEnv,
    check_env_specs,
)


class _RenderingPendulum(PendulumEnv):
    """Renders a 3x5 'image' whose value is the angle's cosine (so frames follow the
    state, and a test can check each frame against the observation)."""

    def render(self, scale=1.0):
        th = self.__dict__.get("_th")
        cos = 0.0 if th is None else float(th.cos().mean())
        return np.full((3, 5), cos * scale, dtype=np.float32)


def _make_rendering_env():
    return TransformedEnv(_RenderingPendulum(), PixelRenderTransform(out_keys=[("nested", "pix")]))


class TestPixelRenderTransform:
    def test_frames_follow_the_state(self):
        env = TransformedEnv(_RenderingPendulum(), PixelRenderTransform(scale=2.0))
        assert env.observation_spec["pixels"].shape == (3, 5)
        td = env.rollout(4)
        # render() is called after each step: its frame is the new state's cosine
        expected = 2.0 * td["next", "observation"][:, 0]
        torch.testing.assert_close(td["next", "pixels"][:, 0, 0], expected)
        torch.testing.assert_close(td["pixels"][0, 0, 0], 2.0 * td["observation"][0, 0])
        check_env_specs(env)

    def test_switch_off_and_preproc(self):
        env = TransformedEnv(
            _RenderingPendulum(), PixelRenderTransform(preproc=lambda a: a[:1] * 0 + 7)
        )
        assert env.rollout(2)["next", "pixels"].unique().tolist() == [7.0]
        env.transform.switch("off")
        assert not env.transform.enabled
        assert "pixels" not in env.rollout(2)["next"].keys()
        env.transform.switch()
        assert env.transform.enabled
        with pytest.raises(ValueError, match="mode must be 'on', 'off' or a bool"):
            env.transform.switch("maybe")

    def test_in_parallel_workers(self):
        env = ParallelEnv(2, _make_rendering_env)
        try:
            td = env.rollout(3)
            assert td["next", "nested", "pix"].shape == (2, 3, 3, 5)
            torch.testing.assert_close(
                td["next", "nested", "pix"][..., 0, 0], td["next", "observation"][..., 0]
            )
        finally:
            env.close()

    def test_gym_render(self):
        env = GymEnv("CartPole-v1", render_mode="rgb_array").append_transform(
            PixelRenderTransform()
        )
        td = env.rollout(2)
        assert td["next", "pixels"].shape == (2, 400, 600, 3)
        assert td["next", "pixels"].dtype == torch.uint8
        env.close()

    def test_errors(self):
        with pytest.raises(ValueError, match="expected one out_key"):
            PixelRenderTransform(out_keys=["a", "b"])
        with pytest.raises(ValueError, match="needs the env's 'snapshot' method"):
            TransformedEnv(PendulumEnv(), PixelRenderTransform(render_method="snapshot"))
        with pytest.raises(RuntimeError, match="could not write the rendered array"):
            TransformedEnv(
                _RenderingPendulum(batch_size=[2]), PixelRenderTransform(as_non_tensor=False)
            )


class TestTensorDictRecorder:
    def test_keeps_every_skip_th_output(self, tmp_path):
        base = str(tmp_path / "run")
        recorder = TensorDictRecorder(base, skip_reset=True, skip=2, in_keys=["observation"])
        env = TransformedEnv(PendulumEnv(), recorder)
        td = env.rollout(6)
        # outputs counted: reset (1), steps (2..7); kept: 2, 4, 6 -> steps 1, 3, 5;
        # the first kept (step 1) is left out by skip_reset
        path = recorder.dump()
        assert path == tmp_path / "run_tensordict.t"
        data = torch.load(path, weights_only=True)
        saved = TensorDict(data["tensordict"], batch_size=data["batch_size"])
        assert saved.batch_size == (2,) and list(saved.keys()) == ["observation"]
        torch.testing.assert_close(saved["observation"], td["next", "observation"][[2, 4]])
        assert recorder.iter == 1 and recorder.td == []
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary

    def test_suffix_all_keys_and_empty(self, tmp_path):
        recorder = TensorDictRecorder(str(tmp_path / "x"), skip_reset=False, skip=1)
        assert recorder.dump() is None  # nothing kept: no file
        env = TransformedEnv(PendulumEnv(), recorder)
        env.rollout(2)
        recorder.td = recorder.td[1:]  # (keep the steps only: reset has no reward)
        path = recorder.dump(suffix="eval")
        assert path.name == "x_eval_tensordict.t"
        data = torch.load(path, weights_only=True)
        assert {"observation", "reward", "done"} <= set(data["tensordict"])
        with pytest.raises(ValueError, match="skip must be a positive int"):
            TensorDictRecorder("y", skip=0)


def test_docstring_examples():
    result = doctest.testmod(
        recording_module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0 and result.failed == 0


def test_compose_dump_reaches_the_recorders(tmp_path):
    first = TensorDictRecorder(str(tmp_path / "a"), skip_reset=False, skip=1)
    second = TensorDictRecorder(str(tmp_path / "b"), skip_reset=False, skip=1)
    env = TransformedEnv(_RenderingPendulum(), PixelRenderTransform())
    env.append_transform(first).append_transform(second)
    env.reset()
    env.transform.dump()  # PixelRenderTransform's dump does nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_tensordict.t", "b_tensordict.t"]
