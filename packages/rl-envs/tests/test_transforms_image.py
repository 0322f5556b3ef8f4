"""Image transforms, frame stacking, time pooling and video recording."""

from __future__ import annotations

import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import av  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from rl.core import Bounded  # noqa: E402
from rl.envs import CartPoleEnv, GymEnv, PendulumEnv, check_env_specs  # noqa: E402
from rl.envs.transforms import (  # noqa: E402
    CatFrames,
    CenterCrop,
    Compose,
    GrayScale,
    Resize,
    TimeMaxPool,
    ToTensorImage,
    TransformedEnv,
    VideoRecorder,
)


@pytest.fixture(scope="module")
def pixel_env():
    env = GymEnv("CartPole-v1", from_pixels=True, pixels_only=False)
    yield env
    env.close()


def _img(*shape, dtype=torch.uint8):
    return torch.randint(0, 256, shape, dtype=dtype)


class TestImageTransformsOnData:
    def test_to_tensor_image(self):
        img = _img(2, 4, 5, 3)
        out = ToTensorImage()(TensorDict(pixels=img, batch_size=[2]))["pixels"]
        assert out.shape == torch.Size([2, 3, 4, 5])
        torch.testing.assert_close(out, img.permute(0, 3, 1, 2).float() / 255)
        chw = torch.rand(3, 4, 5)
        out = ToTensorImage(shape_tolerant=True)(TensorDict(pixels=chw))["pixels"]
        torch.testing.assert_close(out, chw)

    def test_resize_matches_interpolate(self):
        img = torch.rand(2, 3, 8, 10)
        out = Resize(4, 5)(TensorDict(pixels=img, batch_size=[2]))["pixels"]
        torch.testing.assert_close(
            out, F.interpolate(img, size=(4, 5), mode="bilinear", align_corners=False)
        )
        out8 = Resize(4)(TensorDict(pixels=_img(3, 8, 8)))["pixels"]
        assert out8.dtype == torch.uint8 and out8.shape == torch.Size([3, 4, 4])

    def test_center_crop(self):
        img = torch.arange(36.0).reshape(1, 6, 6)
        out = CenterCrop(2, 4)(TensorDict(pixels=img))["pixels"]
        torch.testing.assert_close(out, img[:, 2:4, 1:5])
        with pytest.raises(ValueError, match="larger than"):
            CenterCrop(8)(TensorDict(pixels=img))

    def test_grayscale(self):
        img = torch.stack([torch.ones(2, 2), torch.zeros(2, 2), torch.zeros(2, 2)])
        out = GrayScale()(TensorDict(pixels=img))["pixels"]
        assert out.shape == torch.Size([1, 2, 2])
        torch.testing.assert_close(out, torch.full((1, 2, 2), 0.2989))
        with pytest.raises(ValueError, match="expects 3 channels"):
            GrayScale()(TensorDict(pixels=torch.zeros(4, 2, 2)))

    @pytest.mark.parametrize(
        "make, msg",
        [
            (lambda: Resize(0), "w must be a positive int"),
            (lambda: Resize(2, interpolation="x"), "interpolation"),
            (lambda: CenterCrop(-1), "w must be a positive int"),
        ],
    )
    def test_bad_args(self, make, msg):
        with pytest.raises(ValueError, match=msg):
            make()


class TestImageTransformsInEnv:
    def test_pipeline_specs_and_values(self, pixel_env):
        env = TransformedEnv(
            pixel_env,
            Compose(ToTensorImage(), Resize(64, 48), CenterCrop(32), GrayScale()),
        )
        spec = env.observation_spec["pixels"]
        assert spec.shape == torch.Size([1, 32, 32]) and spec.dtype == torch.float32
        assert isinstance(spec, Bounded)
        td = env.reset()
        assert td["pixels"].shape == torch.Size([1, 32, 32])
        assert 0.0 <= float(td["pixels"].min()) and float(td["pixels"].max()) <= 1.0
        check_env_specs(env)

    def test_to_tensor_image_spec(self, pixel_env):
        env = TransformedEnv(pixel_env, ToTensorImage())
        h, w, c = pixel_env.observation_spec["pixels"].shape
        assert env.observation_spec["pixels"].shape == torch.Size([c, h, w])


class TestCatFrames:
    def test_env_stacks_last_frames(self):
        env = TransformedEnv(
            PendulumEnv(), CatFrames(N=3, dim=-1, in_keys=["observation"], out_keys=["stack"])
        )
        r = env.rollout(5)
        obs, nxt = r["observation"], r["next", "observation"]
        stack = r["next", "stack"]
        assert stack.shape == torch.Size([5, 9])
        # at step t the stack holds obs_{t-1}, obs_t, obs_{t+1} (next), padded with obs_0
        torch.testing.assert_close(stack[2], torch.cat([obs[1], obs[2], nxt[2]]))
        torch.testing.assert_close(stack[0], torch.cat([obs[0], obs[0], nxt[0]]))
        torch.testing.assert_close(r["stack"][0], obs[0].repeat(3))
        assert env.observation_spec["stack"].shape == torch.Size([9])
        check_env_specs(env)

    @pytest.mark.parametrize("padding", ["same", "constant"])
    def test_partial_resets_match_stored_trajectory(self, padding):
        # CartPole episodes end at different times: the env buffers are refilled per entry
        kwargs = dict(
            N=3,
            dim=-1,
            in_keys=["observation"],
            out_keys=["stack"],
            padding=padding,
            padding_value=-9.0,
        )
        env = TransformedEnv(CartPoleEnv(batch_size=[3]), CatFrames(**kwargs))
        torch.manual_seed(0)
        env.set_seed(0)
        r = env.rollout(60, break_when_any_done=False)
        assert r["next", "done"].sum() >= 3
        raw = r.exclude("stack", ("next", "stack"))
        CatFrames(**kwargs)(raw)
        torch.testing.assert_close(raw["stack"], r["stack"])
        torch.testing.assert_close(raw["next", "stack"], r["next", "stack"])
        check_env_specs(env)

    def test_stored_trajectory_matches_env(self):
        env = TransformedEnv(
            PendulumEnv(batch_size=[2]),
            CatFrames(N=4, dim=-1, in_keys=["observation"], out_keys=["stack"]),
        )
        r = env.rollout(6, break_when_any_done=False)
        raw = r.exclude("stack", ("next", "stack"))
        CatFrames(N=4, dim=-1, in_keys=["observation"], out_keys=["stack"])(raw)
        torch.testing.assert_close(raw["stack"], r["stack"])
        torch.testing.assert_close(raw["next", "stack"], r["next", "stack"])

    def test_stored_trajectory_pads_at_episode_start(self):
        obs = torch.arange(5.0).unsqueeze(-1)
        nxt = obs + 10
        done = torch.tensor([False, True, False, False, False]).unsqueeze(-1)
        td = TensorDict({"obs": obs, "next": TensorDict({"obs": nxt, "done": done}, [5])}, [5])
        CatFrames(N=3, dim=-1, in_keys=["obs"], padding="constant", padding_value=-1.0)(td)
        assert td["obs"].tolist() == [[-1, -1, 0], [-1, 0, 1], [-1, -1, 2], [-1, 2, 3], [2, 3, 4]]
        assert td["next", "obs"].tolist() == [
            [-1, 0, 10],
            [0, 1, 11],
            [-1, 2, 12],
            [2, 3, 13],
            [3, 4, 14],
        ]

    def test_errors(self):
        with pytest.raises(ValueError, match="N must be a positive int"):
            CatFrames(0, -1)
        with pytest.raises(ValueError, match="dim must be a negative int"):
            CatFrames(2, 0)
        with pytest.raises(ValueError, match="needs a trajectory with a time dim"):
            CatFrames(2, -1, in_keys=["x"])(TensorDict(x=torch.zeros(2)))

    def test_pixels_env(self, pixel_env):
        env = TransformedEnv(
            pixel_env, Compose(ToTensorImage(), Resize(16), CatFrames(N=4, dim=-3))
        )
        assert env.observation_spec["pixels"].shape == torch.Size([12, 16, 16])
        check_env_specs(env)


class TestTimeMaxPool:
    def test_env_values(self):
        env = TransformedEnv(
            PendulumEnv(), TimeMaxPool(in_keys=["observation"], out_keys=["pooled"], T=2)
        )
        r = env.rollout(4)
        torch.testing.assert_close(
            r["next", "pooled"], torch.maximum(r["observation"], r["next", "observation"])
        )
        check_env_specs(env)

    def test_stored_trajectory(self):
        x = torch.tensor([1.0, 5.0, 2.0, 0.0, 3.0]).unsqueeze(-1)
        done = torch.tensor([False, False, True, False, False]).unsqueeze(-1)
        td = TensorDict({"x": x, "next": TensorDict({"done": done}, [5])}, [5])
        TimeMaxPool(in_keys=["x"], T=3)(td)
        assert td["x"].squeeze(-1).tolist() == [1.0, 5.0, 5.0, 0.0, 3.0]
        with pytest.raises(ValueError, match="T must be a positive int"):
            TimeMaxPool(T=0)


class TestVideoRecorder:
    def test_writes_decodable_mp4(self, tmp_path, pixel_env):
        recorder = VideoRecorder(None, "cartpole", skip=1, video_dir=tmp_path, fps=10)
        env = TransformedEnv(pixel_env, recorder)
        env.rollout(7, break_when_any_done=False)
        path = recorder.dump()
        assert path == tmp_path / "cartpole_0.mp4" and path.stat().st_size > 0
        with av.open(str(path)) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        assert len(frames) == 8  # the reset frame + 7 steps
        h, w, _ = pixel_env.observation_spec["pixels"].shape
        assert frames[0].shape == (h + h % 2, w + w % 2, 3)
        assert recorder.frames == [] and recorder.dump() is None
        check_env_specs(env)

    def test_skip_and_float_frames(self, tmp_path):
        recorder = VideoRecorder(None, "video", video_dir=tmp_path, skip=2)
        td = TensorDict(pixels=torch.rand(6, 3, 8, 10), batch_size=[6])
        recorder(td)
        path = recorder.dump(suffix="data")
        with av.open(str(path)) as container:
            assert sum(1 for _ in container.decode(video=0)) == 6
        recorder = VideoRecorder(None, "video", video_dir=tmp_path, skip=2)
        env = TransformedEnv(PendulumEnv(), Compose(recorder))
        with pytest.raises(KeyError, match="'pixels'"):
            env.rollout(2)

    def test_logger(self):
        calls = []

        class Logger:
            def log_video(self, name, video, fps):
                calls.append((name, video.shape, fps))

        recorder = VideoRecorder(logger=Logger(), tag="v", fps=30)
        recorder(TensorDict(pixels=_img(3, 4, 4, 3), batch_size=[3]))
        assert recorder.dump() is None
        assert calls == [("v", torch.Size([3, 4, 4, 3]), 30)]

    def test_torchrl_arguments(self):
        calls = []

        class Logger:
            def log_video(self, name, video, **kwargs):
                calls.append((name, video, kwargs))

        # TorchRL's positional order: logger, tag, in_keys, skip, center_crop, make_grid,
        # out_keys, fps, max_frames, dump_on_done (+ log_video keyword arguments)
        frames = torch.arange(2 * 4 * 6 * 3, dtype=torch.uint8).reshape(2, 4, 6, 3)
        rec = VideoRecorder(Logger(), "v", ["pixels"], 1, 2, True, ["copy"], None, 2, step=7)
        td = TensorDict(pixels=frames, batch_size=[2])
        rec(td)
        assert torch.equal(td["copy"], frames)  # out_keys: the frames are also written there
        rec(td)
        rec(td)  # max_frames=2: the third grid is not recorded
        rec.dump(suffix="x")
        ((name, video, kwargs),) = calls
        assert name == "v_x" and kwargs == {"step": 7}  # no fps given: the logger's own
        # make_grid: the 2 frames side by side (ceil(sqrt(2)) = 2 columns), each cropped to
        # its centered 2x2 window (rows 1:3, columns 2:4)
        assert video.shape == (2, 2, 4, 3)
        torch.testing.assert_close(
            video[0], torch.cat([frames[0, 1:3, 2:4], frames[1, 1:3, 2:4]], 1)
        )
        # a grid of 3 frames: 2 columns, 2 rows, the last cell empty
        rec = VideoRecorder(Logger(), "g", make_grid=True)
        rec(TensorDict(pixels=torch.full((3, 2, 2, 3), 9, dtype=torch.uint8), batch_size=[3]))
        assert rec.frames[0].shape == (4, 4, 3) and rec.frames[0][2:, 2:].sum() == 0
        # 5 distinct frames: 3 columns, 2 rows; each tile placed as a plain loop places it
        frames5 = torch.randint(0, 255, (5, 2, 3, 3), dtype=torch.uint8)
        rec = VideoRecorder(Logger(), "g", make_grid=True)
        rec(TensorDict(pixels=frames5, batch_size=[5]))
        expected = torch.zeros(4, 9, 3, dtype=torch.uint8)
        for i, frame in enumerate(frames5):
            row, col = divmod(i, 3)
            expected[row * 2 : row * 2 + 2, col * 3 : col * 3 + 3] = frame
        assert torch.equal(rec.frames[0], expected)
        with pytest.raises(ValueError, match="keyword arguments \\['step'\\] are passed to"):
            VideoRecorder(None, "v", step=1)

    def test_defaults_follow_the_env(self, pixel_env):
        rec = VideoRecorder(None, "v")
        assert rec.skip == 1 and rec.make_grid is False  # on data
        env = TransformedEnv(pixel_env, rec)
        assert env.transform[0] is rec
        assert rec.skip == 2 and rec.make_grid is True  # TorchRL: every other step, unbatched

    def test_dump_on_done(self, pixel_env):
        lengths = []

        class Logger:
            def log_video(self, name, video, **kwargs):
                lengths.append(video.shape[0])

        rec = VideoRecorder(Logger(), "v", skip=1, dump_on_done=True)
        env = TransformedEnv(pixel_env, rec)
        env.set_seed(0)
        left = env.action_spec.zero()
        left[..., 0] = 1  # always push left: the pole falls within a few dozen steps
        rollout = env.rollout(200, lambda td: td.set("action", left))
        assert rollout["next", "done"][-1].all()
        # dumped once, at the last step: the reset frame and one frame per step
        assert lengths == [rollout.shape[0] + 1] and rec.frames == []

    def test_bad_args(self):
        with pytest.raises(ValueError, match="skip must be a positive int"):
            VideoRecorder(None, "v", skip=0)
