"""Bad input: every transform error names what was expected and what was given."""

from __future__ import annotations

import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from rl.core import Unbounded  # noqa: E402
from rl.envs import CartPoleEnv, PendulumEnv  # noqa: E402
from rl.envs.transforms import (  # noqa: E402
    ActionDiscretizer,
    CatFrames,
    CatTensors,
    CenterCrop,
    Compose,
    FrameSkipTransform,
    GrayScale,
    LineariseRewards,
    NoopResetEnv,
    ObservationNorm,
    Resize,
    RewardSum,
    StepCounter,
    TensorDictPrimer,
    ToTensorImage,
    Transform,
    TransformedEnv,
    VecNorm,
)
from rl.envs.transforms._recording import write_video  # noqa: E402


def _pendulum(*transforms):
    return TransformedEnv(PendulumEnv(), Compose(*transforms))


CONSTRUCTION = [
    (
        lambda: Compose().insert(0, "x"),
        TypeError,
        "Compose.insert expects a Transform or a callable, got str",
    ),
    (
        lambda: Compose(StepCounter()).pop(3),
        IndexError,
        "pop index 3 is out of range for a Compose of 1",
    ),
    (
        lambda: TransformedEnv(PendulumEnv(), StepCounter(), cache=True),
        TypeError,
        r"unexpected arguments \['cache'\]",
    ),
    (
        lambda: TransformedEnv(PendulumEnv(), 3),
        TypeError,
        "TransformedEnv expects a Transform or a callable, got int",
    ),
    (
        lambda: Transform(in_keys_inv=["a"], out_keys_inv=["b", "c"]),
        ValueError,
        "as many out_keys_inv as in_keys_inv",
    ),
    (
        lambda: TensorDictPrimer(h=Unbounded(shape=(1,)), default_value={"g": 1.0}),
        KeyError,
        r"default_value has keys \['g'\] that are not primers \['h'\]",
    ),
    (
        lambda: CatFrames(2, -1, padding="reflect"),
        ValueError,
        "padding must be 'same' or 'constant', got 'reflect'",
    ),
    (lambda: CatTensors(["a"], dim=0), ValueError, "dim must be a negative int, got 0"),
    (
        lambda: ObservationNorm(loc=0.0, scale=torch.tensor([1.0, 0.0]), standard_normal=True),
        ValueError,
        r"scale must be non-zero with standard_normal=True, got scale=tensor\(\[1., 0.\]\)",
    ),
]


@pytest.mark.parametrize("make, exc, match", CONSTRUCTION)
def test_rejected_at_construction(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


SPEC_TIME = [
    (
        lambda: _pendulum(ToTensorImage(in_keys=["observation"])),
        ValueError,
        r"ToTensorImage expects the spec of 'observation' to be an image \[\*B, H, W, C\], got shape \(3,\)",
    ),
    (
        lambda: _pendulum(GrayScale(in_keys=["observation"])),
        ValueError,
        "GrayScale expects the spec of 'observation' to have 3 channels",
    ),
    (
        lambda: _pendulum(CatTensors(["observation", "missing"])),
        KeyError,
        r"CatTensors in_key 'missing' is not in the observation spec; keys present: \['observation'\]",
    ),
    (
        lambda: _pendulum(ActionDiscretizer(3, action_key="force")),
        KeyError,
        r"action_key 'force' is not in the action spec; keys present: \['action'\]",
    ),
    (
        lambda: VecNorm.build_td_for_shared_vecnorm(PendulumEnv(), keys=["pixels"]),
        KeyError,
        "VecNorm key 'pixels' is not in the env's observation/reward specs",
    ),
]


@pytest.mark.parametrize("make, exc, match", SPEC_TIME)
def test_rejected_with_the_env_specs(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_runtime_errors():
    with pytest.raises(
        ValueError, match=r"CenterCrop\(5, 5\) is larger than 'image' of shape \(3, 4, 4\)"
    ):
        CenterCrop(5)(TensorDict(pixels=torch.zeros(3, 4, 4)))
    with pytest.raises(
        ValueError, match=r"Resize expects images \[\*B, C, H, W\], got a tensor of shape \(4,\)"
    ):
        Resize(2)(TensorDict(pixels=torch.zeros(4)))
    with pytest.raises(RuntimeError, match="NoopResetEnv needs to be inside a TransformedEnv"):
        NoopResetEnv(2)._reset(None, TensorDict({}, []))
    with pytest.raises(
        RuntimeError,
        match="parent not found for FrameSkipTransform: it needs to be inside a TransformedEnv",
    ):
        FrameSkipTransform(2)._step(TensorDict({}, []), TensorDict({}, []))
    t = ObservationNorm(in_keys=["a", "b"])
    with pytest.raises(RuntimeError, match=r"multiple in_keys .* needs key= among \['a', 'b'\]"):
        t.init_stats(3)
    with pytest.raises(
        ValueError, match="cat_dim must be specified if reduce_dim is not an integer"
    ):
        t.init_stats(3, reduce_dim=(0, 1))
    with pytest.raises(
        ValueError, match="cat_dim must be part of or equal to reduce_dim, got cat_dim=2"
    ):
        t.init_stats(3, reduce_dim=(0, 1), cat_dim=2)
    # TorchRL's order: an ObservationNorm before this one must be initialized first
    env = TransformedEnv(PendulumEnv(), ObservationNorm(in_keys=["observation"]))
    env.append_transform(ObservationNorm(in_keys=["observation"]))
    with pytest.raises(
        RuntimeError, match="ObservationNorms need to be initialized in the right order"
    ):
        env.transform[1].init_stats(3)
    with pytest.raises(ValueError, match=r"write_video expects uint8 frames \[T, H, W, 3\]"):
        write_video(torch.zeros(2, 4, 4, 3), "/tmp/never.mp4")


def test_missing_key_on_step_names_the_keys():
    env = TransformedEnv(CartPoleEnv(), RewardSum(in_keys=["reward"]))
    td = env.reset()
    td["action"] = env.action_spec.rand()
    next_td = env.base_env._step(td)
    del next_td["reward"]
    with pytest.raises(KeyError, match=r"RewardSum expected in_key 'reward'.*keys present: \["):
        env.transform._step(td, next_td)


@pytest.mark.parametrize("base", ["gym", "native"])
def test_missing_key_raises_on_every_rollout_path(base):
    """Policy-free (whole-trajectory), policy fast path, step loop and check_env_specs."""
    from rl.envs import GymEnv, check_env_specs
    from rl.envs.transforms import ObservationNorm

    def make():
        inner = GymEnv("CartPole-v1") if base == "gym" else CartPoleEnv()
        return TransformedEnv(inner, ObservationNorm(in_keys=["nope"], loc=0.0, scale=1.0))

    env = make()
    td = env.reset()  # reset outputs may lack keys (a reward): tolerated
    assert "nope" not in td.keys()
    msg = r"ObservationNorm expected in_key 'nope'.*keys present: \[.*'observation'"
    with pytest.raises(KeyError, match=msg):
        env.rollout(3)
    with pytest.raises(KeyError, match=msg):
        env.rollout(3, policy=lambda td: td.set("action", env.action_spec.rand()))
    with pytest.raises(KeyError, match=msg):
        check_env_specs(make())


@pytest.mark.parametrize(
    "make, exc, torchrl_words",
    [
        (lambda: FrameSkipTransform(-1), ValueError, "frame_skip should have a value greater"),
        (lambda: CatFrames(N=2, dim=1), ValueError, "dim must be < 0 to accommodate"),
        (
            lambda: LineariseRewards(in_keys=["r"], weights=torch.ones(2, 2)),
            ValueError,
            "Expected weights to be a unidimensional tensor",
        ),
        (
            lambda: ObservationNorm(in_keys=["observation"]).init_stats(3),
            RuntimeError,
            "Cannot initialize the transform if parent env is not defined",
        ),
    ],
)
def test_torchrl_wording(make, exc, torchrl_words):
    # TorchRL's users match on its messages: rl's carry them before rl's own detail
    with pytest.raises(exc, match=torchrl_words):
        make()
