"""MuJoCo tasks (MujocoEnv, Ant/Hopper/Humanoid/Walker2d) against gymnasium's -v5 envs."""

from __future__ import annotations

import doctest
import math
import os

os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; read when mujoco is imported

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from rl.envs import (  # noqa: E402
    AntEnv,
    HopperEnv,
    HumanoidEnv,
    MujocoEnv,
    SatelliteEnv,
    SerialEnv,
    Walker2dEnv,
    check_env_specs,
)
from rl.envs._native._mujoco._satellite import cmg_geometry, cmg_jacobian, quat_log, quat_mul  # noqa: E402

pytestmark = pytest.mark.mujoco

GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# (rl class, gymnasium id, gymnasium kwargs giving rl's observation layout, obs dim,
#  how many leading obs entries are positions)
TASKS = [
    (HopperEnv, "Hopper-v5", {}, 11, 5),
    (Walker2dEnv, "Walker2d-v5", {}, 17, 8),
    (AntEnv, "Ant-v5", {"include_cfrc_ext_in_observation": False}, 27, 13),
    (
        HumanoidEnv,
        "Humanoid-v5",
        {
            "include_cinert_in_observation": False,
            "include_cvel_in_observation": False,
            "include_qfrc_actuator_in_observation": False,
            "include_cfrc_ext_in_observation": False,
        },
        45,
        22,
    ),
]
TASK_IDS = [task[0].__name__ for task in TASKS]


def _set_state(env, qpos, qvel):
    td = TensorDict(
        qpos=torch.as_tensor(qpos).reshape(env.num_envs, -1),
        qvel=torch.as_tensor(qvel).reshape(env.num_envs, -1),
        batch_size=[env.num_envs],
    )
    return env.reset(td, set_state=True)


def _rl_layout(cls, obs, n_pos):
    """HumanoidEnv clips velocities to [-10, 10] as TorchRL's (gymnasium's does not)."""
    if cls is not HumanoidEnv:
        return obs
    return np.concatenate([obs[:n_pos], np.clip(obs[n_pos:], -10, 10)])


class TestGymnasiumParity:
    @pytest.mark.parametrize(
        ("cls", "gym_id", "gym_kwargs", "obs_dim", "n_pos"), TASKS, ids=TASK_IDS
    )
    def test_same_state_same_transition(self, cls, gym_id, gym_kwargs, obs_dim, n_pos):
        """From the same qpos/qvel and actions, observations, rewards and terminations
        equal gymnasium's step for step."""
        env = cls(seed=0, dtype=torch.float64)
        ref = gym.make(gym_id, **gym_kwargs).unwrapped
        ref.reset(seed=0)
        rng = np.random.default_rng(1)
        qpos = ref.init_qpos + rng.uniform(-0.05, 0.05, ref.model.nq)
        qvel = ref.init_qvel + rng.uniform(-0.05, 0.05, ref.model.nv)
        ref.set_state(qpos, qvel)
        td = _set_state(env, qpos, qvel)
        assert td["observation"].shape == (1, obs_dim)
        np.testing.assert_allclose(td["observation"][0].numpy(), ref._get_obs(), atol=1e-12)
        for _ in range(25):
            action = rng.uniform(-0.4, 0.4, ref.model.nu)
            obs, reward, terminated, _, _ = ref.step(action)
            td["action"] = torch.as_tensor(action).reshape(1, -1)
            out = env.step(td)["next"]
            np.testing.assert_allclose(
                out["observation"][0].numpy(), _rl_layout(cls, obs, n_pos), atol=1e-10
            )
            np.testing.assert_allclose(out["reward"].item(), reward, atol=1e-10)
            assert out["terminated"].item() == terminated
            assert out["done"].item() == terminated
            td = out
            if terminated:
                break

    def test_float32_outputs_round_gymnasium_values(self):
        env = HopperEnv(seed=0)
        ref = gym.make("Hopper-v5").unwrapped
        ref.reset(seed=0)
        qpos, qvel = ref.init_qpos + 0.01, ref.init_qvel - 0.02
        ref.set_state(qpos, qvel)
        td = _set_state(env, qpos, qvel)
        action = np.array([0.3, -0.2, 0.1])
        obs, reward, *_ = ref.step(action)
        td["action"] = torch.tensor(action, dtype=torch.float32).reshape(1, 3)
        out = env.step(td)["next"]
        assert out["observation"].dtype == torch.float32 and out["reward"].dtype == torch.float32
        torch.testing.assert_close(
            out["observation"][0], torch.tensor(obs, dtype=torch.float32), rtol=1e-5, atol=1e-5
        )
        torch.testing.assert_close(out["reward"].item(), float(reward), rtol=1e-5, atol=1e-5)

    def test_unhealthy_hopper_terminates(self):
        """A hopper put below the healthy height ends its episode at the next step and
        gets no healthy reward (gymnasium's reward: forward speed minus control cost)."""
        env = HopperEnv(seed=0, dtype=torch.float64)
        ref = gym.make("Hopper-v5").unwrapped
        ref.reset(seed=0)
        qpos = ref.init_qpos.copy()
        qpos[1] = 0.5
        ref.set_state(qpos, ref.init_qvel)
        td = _set_state(env, qpos, ref.init_qvel)
        _, reward, terminated, _, _ = ref.step(np.zeros(3))
        td["action"] = torch.zeros(1, 3, dtype=torch.float64)
        out = env.step(td)["next"]
        assert terminated and out["terminated"].item() and not out["truncated"].item()
        assert out["reward"].item() == pytest.approx(reward, abs=1e-12)
        assert abs(out["reward"].item()) < 0.5  # no +1 for being healthy
        rollout = env.rollout(5, auto_reset=False, tensordict=_set_state(env, qpos, ref.init_qvel))
        assert rollout.batch_size == (1, 1)


class TestMujocoEnv:
    @pytest.mark.parametrize(
        ("cls", "gym_id", "gym_kwargs", "obs_dim", "n_pos"), TASKS, ids=TASK_IDS
    )
    @pytest.mark.parametrize("num_envs", [1, 3])
    def test_specs(self, cls, gym_id, gym_kwargs, obs_dim, n_pos, num_envs):
        env = cls(num_envs=num_envs, seed=0)
        ref = gym.make(gym_id, **gym_kwargs).unwrapped
        assert env.batch_size == (num_envs,)
        assert env.observation_spec["observation"].shape == (num_envs, obs_dim)
        assert env.action_spec.shape == (num_envs, ref.model.nu)
        np.testing.assert_allclose(env.action_spec.space.low[0].numpy(), ref.action_space.low)
        np.testing.assert_allclose(env.action_spec.space.high[0].numpy(), ref.action_space.high)
        assert env.frame_skip == ref.frame_skip
        assert env.dt == pytest.approx(ref.dt)
        check_env_specs(env, seed=0, max_steps=5)

    def test_batch_rows_step_independently(self):
        """Each row of a batch of 3 follows the trajectory of a single env started from
        its state and given its actions."""
        batched = Walker2dEnv(num_envs=3, seed=0, dtype=torch.float64)
        single = Walker2dEnv(seed=0, dtype=torch.float64)
        gen = torch.Generator().manual_seed(0)
        qpos = torch.as_tensor(batched._sim.qpos0) + 0.02 * torch.randn(
            3, 9, generator=gen, dtype=torch.float64
        )
        qvel = 0.1 * torch.randn(3, 9, generator=gen, dtype=torch.float64)
        actions = torch.rand(6, 3, 6, generator=gen, dtype=torch.float64) * 2 - 1
        td = _set_state(batched, qpos, qvel)
        outs = []
        for t in range(6):
            td["action"] = actions[t]
            td = batched.step(td)["next"]
            outs.append(td["observation"])
        for row in range(3):
            td = _set_state(single, qpos[row : row + 1], qvel[row : row + 1])
            for t in range(6):
                td["action"] = actions[t, row : row + 1]
                td = single.step(td)["next"]
                torch.testing.assert_close(td["observation"][0], outs[t][row], rtol=0, atol=0)

    def test_reset_noise(self):
        """Reset states are qpos0 / zero qvel plus uniform noise of the given half-width,
        repeatable under a seed."""
        env = AntEnv(num_envs=4, seed=3, reset_noise_scale=0.05)
        env.reset()
        state = env.get_state()
        qpos0 = torch.as_tensor(env._sim.qpos0)
        assert ((state["qpos"] - qpos0).abs() <= 0.05).all()
        assert (state["qvel"].abs() <= 0.05).all()
        assert (state["qvel"].abs() > 0).all()
        assert not torch.equal(state["qpos"][0], state["qpos"][1])
        other = AntEnv(num_envs=4, seed=3, reset_noise_scale=0.05)
        other.reset()
        torch.testing.assert_close(other.get_state()["qpos"], state["qpos"], rtol=0, atol=0)
        quiet = AntEnv(num_envs=2, reset_noise_scale=0.0)
        quiet.reset()
        torch.testing.assert_close(quiet.get_state()["qpos"], qpos0.expand(2, -1), rtol=0, atol=0)
        assert (quiet.get_state()["qvel"] == 0).all()

    def test_get_state_round_trip(self):
        env = HumanoidEnv(num_envs=2, seed=0)
        td = env.reset()
        td["action"] = torch.full((2, 17), 0.2)
        td = env.step(td)["next"]
        saved, saved_obs = env.get_state(), td["observation"].clone()
        td["action"] = torch.full((2, 17), -0.3)
        env.step(td)
        assert not torch.equal(env.get_state()["qpos"], saved["qpos"])
        restored = env.reset(saved, set_state=True)
        torch.testing.assert_close(env.get_state()["qpos"], saved["qpos"], rtol=0, atol=0)
        torch.testing.assert_close(restored["observation"], saved_obs, rtol=0, atol=0)

    def test_partial_reset_keeps_other_rows(self):
        env = HopperEnv(num_envs=3, seed=0)
        td = env.reset()
        td["action"] = torch.full((3, 3), 0.5)
        td = env.step(td)["next"]
        before = env.get_state()
        out = env.reset(TensorDict(_reset=torch.tensor([[False], [True], [False]]), batch_size=[3]))
        after = env.get_state()
        torch.testing.assert_close(after["qpos"][[0, 2]], before["qpos"][[0, 2]], rtol=0, atol=0)
        assert not torch.equal(after["qpos"][1], before["qpos"][1])
        assert after["time"][1] == 0 and (after["time"][[0, 2]] > 0).all()
        torch.testing.assert_close(out["observation"][[0, 2]], td["observation"][[0, 2]])

    def test_truncation_after_max_episode_steps(self):
        env = HopperEnv(seed=0, max_episode_steps=3)
        rollout = env.rollout(3, lambda td: td.set("action", torch.zeros(1, 3)))
        assert rollout.batch_size == (1, 3)
        assert rollout["next", "truncated"].squeeze().tolist() == [False, False, True]
        assert rollout["next", "done"].squeeze().tolist() == [False, False, True]
        assert not rollout["next", "terminated"].any()
        long = env.rollout(
            7, lambda td: td.set("action", torch.zeros(1, 3)), break_when_any_done=False
        )
        assert long["next", "truncated"].squeeze().tolist() == [False, False, True] * 2 + [False]

    def test_rollout_matches_a_step_loop(self):
        """The rollout engine (with its auto-resets) gives what step / reset give."""
        gen = torch.Generator().manual_seed(0)
        actions = torch.rand(40, 2, 3, generator=gen) * 2 - 1
        env = HopperEnv(num_envs=2, seed=4)
        it = iter(actions)
        rollout = env.rollout(40, lambda td: td.set("action", next(it)), break_when_any_done=False)
        assert rollout["next", "done"].any()  # the loop below goes through resets
        env = HopperEnv(num_envs=2, seed=4)
        td = env.reset()
        for t in range(40):
            torch.testing.assert_close(td["observation"], rollout["observation"][:, t])
            td["action"] = actions[t]
            out = env.step(td)["next"]
            torch.testing.assert_close(out["observation"], rollout["next", "observation"][:, t])
            torch.testing.assert_close(out["reward"], rollout["next", "reward"][:, t])
            assert torch.equal(out["done"], rollout["next", "done"][:, t])
            done = out["done"]
            td = out.exclude("reward")
            if done.any():
                td = env.reset(td.set("_reset", done))

    def test_in_serial_env(self):
        env = SerialEnv(2, lambda: Walker2dEnv(num_envs=2))
        assert env.batch_size == (2, 2)
        check_env_specs(env, seed=0, max_steps=4)

    def test_wrong_action_shape(self):
        env = HopperEnv(num_envs=2)
        td = env.reset()
        td["action"] = torch.zeros(2, 4)
        with pytest.raises(ValueError, match=r"action has shape \(2, 4\), expected \(2, 3\)"):
            env.step(td)

    def test_bad_arguments(self, tmp_path):
        with pytest.raises(ValueError, match="backend='mjx' is not available"):
            HopperEnv(backend="mjx")
        with pytest.raises(ValueError, match="backend must be one of"):
            HopperEnv(backend="bullet")
        with pytest.raises(ValueError, match="pixels_only=True requires from_pixels=True"):
            HopperEnv(pixels_only=True)
        with pytest.raises(ValueError, match="num_envs must be >= 1, got 0"):
            HopperEnv(num_envs=0)
        with pytest.raises(ValueError, match="frame_skip must be >= 1, got 0"):
            HopperEnv(frame_skip=0)
        with pytest.raises(ValueError, match="render_every must be >= 1, got 0"):
            HopperEnv(render_every=0)
        with pytest.raises(FileNotFoundError, match="no MuJoCo model at"):
            HopperEnv(xml_path=tmp_path / "missing.xml")

    def test_bad_set_state(self):
        env = HopperEnv(num_envs=2)
        with pytest.raises(ValueError, match=r"'qpos' has shape \(2, 5\), expected \(2, 6\)"):
            env.reset(
                TensorDict(qpos=torch.zeros(2, 5), qvel=torch.zeros(2, 6), batch_size=[2]),
                set_state=True,
            )
        with pytest.raises(KeyError, match="needs a 'qvel' entry of shape"):
            env.reset(TensorDict(qpos=torch.zeros(2, 6), batch_size=[2]), set_state=True)

    def test_missing_mujoco_names_the_extra(self, monkeypatch):
        from rl.envs._native._mujoco import _sim

        monkeypatch.setattr(_sim, "_has_mujoco", False)
        with pytest.raises(ImportError, match=r'pip install "rl-envs\[mujoco\]"'):
            HopperEnv()

    def test_pixels(self):
        env = HopperEnv(
            num_envs=2, seed=0, from_pixels=True, render_width=32, render_height=24, render_every=2
        )
        assert env.observation_spec["pixels"].shape == (2, 24, 32, 3)
        td = env.reset()
        assert td["pixels"].dtype == torch.uint8 and td["pixels"].shape == (2, 24, 32, 3)
        assert td["pixels"].float().std() > 0
        first = td["pixels"].clone()
        frames = []
        for _ in range(3):
            td["action"] = torch.ones(2, 3)
            td = env.step(td)["next"]
            frames.append(td["pixels"].clone())
        # render_every=2: step 1 repeats the reset frame, step 2 renders the moved hopper
        # and step 3 repeats it
        assert torch.equal(frames[0], first)
        assert not torch.equal(frames[1], first)
        assert torch.equal(frames[2], frames[1])
        assert env.render(width=16, height=16).shape == (2, 16, 16, 3)
        only = HopperEnv(from_pixels=True, pixels_only=True, render_width=8, render_height=8)
        assert set(only.observation_spec.keys()) == {"pixels"}
        check_env_specs(only, seed=0, max_steps=2)

    @pytest.mark.parametrize("device", [pytest.param("cuda", marks=GPU)])
    def test_device(self, device):
        env = HopperEnv(num_envs=2, seed=0, device=device)
        rollout = env.rollout(4)
        assert rollout["next", "observation"].device.type == device
        assert rollout["next", "reward"].device.type == device
        check_env_specs(env, seed=0, max_steps=3)


SLIDER = """
<mujoco>
  <option timestep="0.01" gravity="0 0 0" integrator="Euler"/>
  <worldbody>
    <body name="cart">
      <joint name="x" type="slide" axis="1 0 0"/>
      <geom type="sphere" size="0.1" mass="1"/>
    </body>
  </worldbody>
  <actuator>
    <motor joint="x" gear="1" ctrllimited="true" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""


class SliderEnv(MujocoEnv):
    """A unit mass on a frictionless rail pushed by the action; reward: its position."""

    FRAME_SKIP = 3
    RESET_NOISE_SCALE = 0.0

    def _compute_reward(self, state, action, next_state):
        return next_state["qpos"][:, 0]

    def _compute_done(self, state, next_state):
        return next_state["qpos"][:, 0] > 1.0


class TestSubclass:
    def test_hand_computed_dynamics(self, tmp_path):
        """Semi-implicit Euler on a unit mass: after k steps of force u, v_k = k h u and
        x = h * sum(v_i); frame_skip=3 physics steps per env step."""
        path = tmp_path / "slider.xml"
        path.write_text(SLIDER)
        env = SliderEnv(xml_path=path, patch_xml=False, num_envs=2, dtype=torch.float64)
        assert env.action_spec.shape == (2, 1)
        assert env.observation_spec["observation"].shape == (2, 2)
        td = env.reset()
        torch.testing.assert_close(td["observation"], torch.zeros(2, 2, dtype=torch.float64))
        td["action"] = torch.tensor([[0.5], [-1.0]], dtype=torch.float64)
        out = env.step(td)["next"]
        h, u = 0.01, torch.tensor([0.5, -1.0], dtype=torch.float64)
        v = 3 * h * u
        x = h * h * u * (1 + 2 + 3)
        torch.testing.assert_close(out["observation"], torch.stack([x, v], -1), rtol=0, atol=1e-12)
        torch.testing.assert_close(out["reward"], x.unsqueeze(-1), rtol=0, atol=1e-12)
        assert env.get_state()["time"].tolist() == pytest.approx([0.03, 0.03])

    def test_patch_xml_adds_camera_and_floor(self, tmp_path):
        path = tmp_path / "slider.xml"
        path.write_text(SLIDER)
        patched = SliderEnv(xml_path=path)
        raw = SliderEnv(xml_path=path, patch_xml=False)
        assert patched._sim.model.ncam == 1 and raw._sim.model.ncam == 0
        assert patched._sim.model.ngeom == 2 and raw._sim.model.ngeom == 1

    def test_no_model(self):
        class NoModel(SliderEnv):
            XML_PATH = None

        with pytest.raises(ValueError, match="NoModel needs a model: pass xml_path"):
            NoModel()


def test_docstring_examples():
    from rl.envs._native._mujoco import _locomotion, _satellite

    for module in (_locomotion, _satellite):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0
        assert result.failed == 0


def _rotation(axis, angle):
    """Rotation matrix about a unit axis (plain Rodrigues formula)."""
    axis = np.asarray(axis, dtype=np.float64)
    skew = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return (
        np.cos(angle) * np.eye(3)
        + np.sin(angle) * skew
        + (1 - np.cos(angle)) * np.outer(axis, axis)
    )


def _manipulability_loop(gimbal, rotor, angles, h):
    cols = [
        h * np.cross(gimbal[:, i], _rotation(gimbal[:, i], angles[i]) @ rotor[:, i])
        for i in range(gimbal.shape[1])
    ]
    jac = np.stack(cols, 1)
    return np.sqrt(max(np.linalg.det(jac @ jac.T), 0.0) + 1e-8)


def _angle_between(q1, q2):
    """Rotation angle taking unit quaternion q1 to q2."""
    return 2 * np.arccos(min(abs(float(np.dot(q1, q2))), 1.0))


class TestSatelliteEnv:
    @pytest.mark.parametrize("num_cmgs", [4, 6])
    @pytest.mark.parametrize("num_envs", [1, 2])
    def test_specs(self, num_cmgs, num_envs):
        env = SatelliteEnv(num_cmgs=num_cmgs, num_envs=num_envs, seed=0)
        assert env.action_spec.shape == (num_envs, num_cmgs)
        assert (env.action_spec.space.low == -1).all() and (env.action_spec.space.high == 1).all()
        sizes = {k: v.shape[-1] for k, v in env.observation_spec.items()}
        assert sizes == {
            "bus_quat": 4,
            "quat_err": 3,
            "bus_omega": 3,
            "gimbal_angles": 2 * num_cmgs,
            "gimbal_rates": num_cmgs,
            "manipulability": 1,
            "target_quat": 4,
        }
        assert env._sim.nu == 2 * num_cmgs and env._sim.nq == 7 + 2 * num_cmgs
        check_env_specs(env, seed=0, max_steps=4)

    @pytest.mark.parametrize("num_cmgs", [4, 6])
    def test_jacobian_against_a_loop(self, num_cmgs):
        gimbal, rotor = cmg_geometry(num_cmgs)
        assert torch.allclose((gimbal * rotor).sum(0), torch.zeros(num_cmgs, dtype=torch.float64))
        angles = (
            torch.rand(5, num_cmgs, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
            * 6
        )
        jac = cmg_jacobian(angles, gimbal, rotor, 3.0)
        for b in range(5):
            for i in range(num_cmgs):
                g, r = gimbal[:, i].numpy(), rotor[:, i].numpy()
                want = 3.0 * np.cross(g, _rotation(g, angles[b, i].item()) @ r)
                np.testing.assert_allclose(jac[b, :, i].numpy(), want, atol=1e-12)

    def test_quaternion_helpers(self):
        gen = torch.Generator().manual_seed(1)
        a = torch.randn(6, 4, generator=gen, dtype=torch.float64)
        b = torch.randn(6, 4, generator=gen, dtype=torch.float64)
        a, b = a / a.norm(dim=-1, keepdim=True), b / b.norm(dim=-1, keepdim=True)
        conj = torch.cat([a[:, :1], -a[:, 1:]], -1)
        rel = quat_log(quat_mul(conj, b))
        for i in range(6):
            assert rel[i].norm().item() == pytest.approx(_angle_between(a[i].numpy(), b[i].numpy()))
        identity = torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64)
        torch.testing.assert_close(quat_mul(identity, b[:1]), b[:1])
        half_turn_z = torch.tensor([[0.0, 0, 0, 1]], dtype=torch.float64)
        torch.testing.assert_close(
            quat_log(half_turn_z), torch.tensor([[0.0, 0, math.pi]], dtype=torch.float64)
        )

    @pytest.mark.parametrize("num_cmgs", [4, 6])
    def test_manipulability_at_rest(self, num_cmgs):
        env = SatelliteEnv(num_cmgs=num_cmgs, reset_noise_scale=0.0, seed=0)
        td = env.reset()
        h = env.ROTOR_SPEED
        gimbal, rotor = (t.numpy() for t in cmg_geometry(num_cmgs))
        want = _manipulability_loop(gimbal, rotor, np.zeros(num_cmgs), h)
        if num_cmgs == 6:  # J Jᵀ = 2 h² I
            assert want == pytest.approx(math.sqrt(8 * h**6))
        assert td["manipulability"].item() == pytest.approx(want, rel=1e-6)
        # rotors spin at the rotor speed; nothing else moves
        qvel = env.get_state()["qvel"][0]
        torch.testing.assert_close(qvel[7::2], torch.full((num_cmgs,), h, dtype=torch.float64))
        assert (qvel[:6] == 0).all() and (qvel[6::2] == 0).all()  # bus, gimbal rates

    def test_reward_by_hand(self):
        """From a given attitude and target, the reward is the sum of its four terms
        computed from the state reached (numpy, by hand)."""
        env = SatelliteEnv(num_cmgs=4, reset_noise_scale=0.0, seed=0, dtype=torch.float64)
        init = torch.tensor([[math.cos(0.3), math.sin(0.3), 0.0, 0.0]], dtype=torch.float64)
        target = torch.tensor([[0.5, 0.5, 0.5, 0.5]], dtype=torch.float64)
        td = env.reset(TensorDict(init_bus_quat=init, target_quat=target, batch_size=[1]))
        torch.testing.assert_close(td["bus_quat"], init)
        torch.testing.assert_close(td["target_quat"], target)
        assert td["quat_err"].norm().item() == pytest.approx(
            _angle_between(init[0].numpy(), target[0].numpy())
        )
        action = torch.tensor([[0.2, -0.4, 0.1, 0.3]], dtype=torch.float64)
        out = env.step(td.set("action", action))["next"]
        state = env.get_state()
        qpos, qvel = state["qpos"][0].numpy(), state["qvel"][0].numpy()
        gimbal, rotor = (t.numpy() for t in cmg_geometry(4))
        manip = _manipulability_loop(gimbal, rotor, qpos[7::2], 100.0)
        want = (
            -_angle_between(qpos[3:7], target[0].numpy())
            - 0.5 / (manip / 100.0**3)
            - 0.01 * float((action**2).sum())
            - 0.1 * float((qvel[3:6] ** 2).sum())
        )
        assert out["reward"].item() == pytest.approx(want, rel=1e-9)
        assert out["manipulability"].item() == pytest.approx(manip, rel=1e-9)
        np.testing.assert_allclose(out["bus_omega"][0].numpy(), qvel[3:6])
        angles = qpos[7::2]
        np.testing.assert_allclose(
            out["gimbal_angles"][0].numpy(), np.concatenate([np.sin(angles), np.cos(angles)])
        )
        assert not out["done"].any()

    def test_exp_penalty(self):
        env = SatelliteEnv(
            num_cmgs=6,
            reset_noise_scale=0.0,
            singularity_mode="exp",
            omega_weight=0.0,
            attitude_weight=0.0,
            dtype=torch.float64,
        )
        td = env.reset()
        out = env.step(td.set("action", torch.zeros(1, 6, dtype=torch.float64)))["next"]
        manip_norm = out["manipulability"].item() / 200.0**3
        assert out["reward"].item() == pytest.approx(-0.5 * math.exp(-5.0 * manip_norm))

    def test_gimbals_turn_the_bus(self):
        """At rest with zero gimbal rates the bus stays put; turning the gimbals turns it."""
        env = SatelliteEnv(num_cmgs=4, reset_noise_scale=0.0, seed=0)
        still = env.rollout(10, lambda td: td.set("action", torch.zeros(1, 4)))
        assert still["next", "bus_omega"].abs().max() < 1e-6
        torch.testing.assert_close(still["next", "bus_quat"][0, -1], torch.tensor([1.0, 0, 0, 0]))
        moving = env.rollout(10, lambda td: td.set("action", torch.full((1, 4), 0.5)))
        assert moving["next", "bus_omega"][0, -1].norm() > 0.1
        assert moving["next", "gimbal_rates"][0, -1].sub(1.5).abs().max() < 0.2

    def test_targets(self):
        env = SatelliteEnv(num_envs=3, seed=2)
        td = env.reset()
        torch.testing.assert_close(td["target_quat"].norm(dim=-1), torch.ones(3))
        assert not torch.allclose(td["target_quat"][0], td["target_quat"][1])
        again = SatelliteEnv(num_envs=3, seed=2).reset()
        torch.testing.assert_close(again["target_quat"], td["target_quat"], rtol=0, atol=0)
        out = env.reset(TensorDict(_reset=torch.tensor([[True], [False], [False]]), batch_size=[3]))
        assert not torch.equal(out["target_quat"][0], td["target_quat"][0])
        torch.testing.assert_close(out["target_quat"][1:], td["target_quat"][1:], rtol=0, atol=0)

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="num_cmgs must be 4 or 6, got 5"):
            SatelliteEnv(num_cmgs=5)
        with pytest.raises(
            ValueError, match="singularity_mode must be 'inverse' or 'exp', got 'log'"
        ):
            SatelliteEnv(singularity_mode="log")
