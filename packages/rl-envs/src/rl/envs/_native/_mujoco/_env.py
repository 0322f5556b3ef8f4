"""``MujocoEnv``: the base of the MuJoCo tasks (model, specs, reset noise, frame skip)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar, Literal

import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import Bounded, Composite, Unbounded

from .._base import NativeEnv
from ._sim import MujocoSim

__all__ = ["MujocoEnv", "gymnasium_asset"]

_BACKENDS = ("mujoco-torch", "mjx", "mujoco")


def gymnasium_asset(name: str) -> Path:
    """The path of one of gymnasium's bundled MuJoCo models (``"hopper.xml"``)."""
    import gymnasium

    return Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / name


class MujocoEnv(NativeEnv):
    """A batch of ``num_envs`` MuJoCo simulations of one model, as a torch env.

    The base class loads the model, builds the specs (``"observation"``, the action from
    the actuators' control ranges, ``reward``, ``done`` / ``terminated`` /
    ``truncated``), samples reset states, repeats each action for ``frame_skip`` physics
    steps and truncates after ``max_episode_steps``. A subclass describes the task:
    :meth:`_compute_reward` and :meth:`_compute_done`, and optionally :meth:`_make_obs` /
    :meth:`_make_obs_spec`, :meth:`_sample_initial_state`, :meth:`_prepare_ctrl` and
    :meth:`_patch_xml`. The batch size is always ``[num_envs]``.

    The physics runs on the official ``mujoco`` bindings (``pip install
    "rl-envs[mujoco]"``), one ``MjData`` per sub-env, in float64.

    A reset whose input carries ``"qpos"`` / ``"qvel"`` and ``set_state=True``
    (``env.reset(TensorDict(qpos=..., qvel=...), set_state=True)``) starts from that
    state instead of a sampled one; :meth:`get_state` reads it back.

    Args:
        xml_path: the MJCF model (a path); defaults to the class's :attr:`XML_PATH`.
        patch_xml: pass the XML through :meth:`_patch_xml` (adds a camera and a floor
            when the model has none). Defaults to ``True``.
        backend: only ``"mujoco"`` (the official bindings) runs here; TorchRL's
            ``"mujoco-torch"`` and ``"mjx"`` back-ends raise ``ValueError``.
        num_envs: the number of simulations; the batch size is ``[num_envs]``.
        device: where specs and outputs live (the physics runs on the CPU).
        seed: seeds the reset noise (:meth:`set_seed`).
        frame_skip: physics steps per action; defaults to :attr:`FRAME_SKIP`.
        reset_noise_scale: half-width of the uniform noise added to the reference
            ``qpos`` and to zero ``qvel`` at reset; defaults to :attr:`RESET_NOISE_SCALE`.
        max_episode_steps: steps after which ``truncated`` is set. Defaults to 1000.
        dtype: float dtype of actions, observations and rewards. Defaults to float32.
        compile_step, compile_kwargs: TorchRL's options of its ``mujoco-torch`` back-end;
            accepted and ignored by the ``mujoco`` back-end (as TorchRL does).
        from_pixels: add a ``"pixels"`` observation (``[num_envs, H, W, 3]`` uint8).
        pixels_only: only ``"pixels"`` (needs ``from_pixels=True``).
        render_width, render_height: size of the pixel observation. Default 64.
        render_every: render a new frame every this many steps and repeat the last one
            in between (resets always render). Defaults to 1.
        camera_id: the MuJoCo camera of the pixel observation and :meth:`render`.

    Raises:
        ValueError: an unknown or unsupported ``backend``, ``pixels_only`` without
            ``from_pixels``, or a non-positive ``num_envs`` / ``frame_skip`` /
            ``render_every``.
        ImportError: ``mujoco`` is not installed.
    """

    XML_PATH: ClassVar[str | Path | None] = None
    FRAME_SKIP: ClassVar[int] = 5
    RESET_NOISE_SCALE: ClassVar[float] = 0.01
    SKIP_QPOS: ClassVar[int] = 0
    """How many leading entries of ``qpos`` the default observation drops."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}
    uses_native_kernel = True

    def __init__(
        self,
        *,
        xml_path: str | Path | None = None,
        patch_xml: bool = True,
        backend: Literal["mujoco-torch", "mjx", "mujoco"] = "mujoco",
        num_envs: int = 1,
        device: torch.device | str | None = None,
        seed: int | None = None,
        frame_skip: int | None = None,
        reset_noise_scale: float | None = None,
        max_episode_steps: int = 1000,
        dtype: torch.dtype = torch.float32,
        compile_step: bool = False,
        compile_kwargs: dict | None = None,
        from_pixels: bool = False,
        pixels_only: bool = False,
        render_width: int = 64,
        render_height: int = 64,
        render_every: int = 1,
        camera_id: int = 0,
    ) -> None:
        if backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
        if backend != "mujoco":
            raise ValueError(
                f"backend={backend!r} is not available in rl.envs; use backend='mujoco' "
                "(the official MuJoCo bindings)"
            )
        num_envs = int(num_envs)
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        frame_skip = int(self.FRAME_SKIP if frame_skip is None else frame_skip)
        if frame_skip < 1:
            raise ValueError(f"frame_skip must be >= 1, got {frame_skip}")
        if pixels_only and not from_pixels:
            raise ValueError("pixels_only=True requires from_pixels=True")
        if int(render_every) < 1:
            raise ValueError(f"render_every must be >= 1, got {render_every}")
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        self.num_envs = num_envs
        self.backend_name = backend
        self.dtype = dtype
        self.frame_skip = frame_skip
        self.reset_noise_scale = float(
            self.RESET_NOISE_SCALE if reset_noise_scale is None else reset_noise_scale
        )
        self.max_episode_steps = int(max_episode_steps)
        self.from_pixels = bool(from_pixels)
        self.pixels_only = bool(pixels_only)
        self.render_width = int(render_width)
        self.render_height = int(render_height)
        self.render_every = int(render_every)
        self.camera_id = int(camera_id)

        self._sim = MujocoSim(self._load_xml(xml_path, patch_xml), num_envs)
        self._step_count = torch.zeros(num_envs, dtype=torch.long)
        self._render_counter = 0
        self._last_pixels: torch.Tensor | None = None
        self._pending_state: tuple[torch.Tensor, torch.Tensor] | None = None
        self._reset_input: TensorDictBase | None = None  # the input of reset(), if any
        self._make_specs()
        self._action_shape = self.action_spec.shape
        if seed is not None:
            self.set_seed(seed)

    # -- model ------------------------------------------------------------------------

    def _load_xml(self, xml_path: str | Path | None, patch_xml: bool) -> str:
        path = xml_path if xml_path is not None else self.XML_PATH
        if path is None:
            raise ValueError(
                f"{type(self).__name__} needs a model: pass xml_path=... or set XML_PATH"
            )
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{type(self).__name__}: no MuJoCo model at {str(path)!r}")
        xml = path.read_text()
        return self._patch_xml(xml) if patch_xml else xml

    @classmethod
    def _patch_xml(cls, xml: str) -> str:
        """Adds a fixed side camera when the model has none (so ``camera_id=0``
        renders) and a floor plane when it has none. Override to edit the model."""
        extra = ""
        if "<camera" not in xml:
            extra += '\n    <camera name="side" pos="0 -4 2" xyaxes="1 0 0 0 0.45 1"/>'
        if not re.search(r'<geom\b[^>]*type="plane"', xml):
            extra += (
                '\n    <geom name="floor" type="plane" size="20 20 0.1" '
                'rgba="0.8 0.85 0.8 1" condim="3"/>'
            )
        return xml.replace("<worldbody>", "<worldbody>" + extra, 1) if extra else xml

    @property
    def dt(self) -> float:
        """Seconds of simulated time per env step (``timestep * frame_skip``)."""
        return self._sim.timestep * self.frame_skip

    # -- specs ------------------------------------------------------------------------

    def _make_obs_spec(self) -> Composite:
        """The spec of :meth:`_make_obs` under ``"observation"``."""
        dim = self._sim.nq - self.SKIP_QPOS + self._sim.nv
        return Composite(
            observation=Unbounded(shape=(self.num_envs, dim), dtype=self.dtype, device=self.device),
            shape=(self.num_envs,),
            device=self.device,
        )

    def _make_specs(self) -> None:
        n = self.num_envs
        pixels = Bounded(
            0,
            255,
            shape=(n, self.render_height, self.render_width, 3),
            dtype=torch.uint8,
            device=self.device,
        )
        if self.pixels_only:
            obs_spec = Composite(pixels=pixels, shape=(n,), device=self.device)
        else:
            obs_spec = self._make_obs_spec()
            if self.from_pixels:
                obs_spec["pixels"] = pixels
        self.observation_spec = obs_spec
        low, high = self._sim.ctrl_range()
        low = torch.as_tensor(low, dtype=self.dtype).expand(n, -1).clone()
        high = torch.as_tensor(high, dtype=self.dtype).expand(n, -1).clone()
        self.action_spec = Bounded(
            low, high, shape=(n, self._sim.nu), dtype=self.dtype, device=self.device
        )
        self.reward_spec = Unbounded(shape=(n, 1), dtype=self.dtype, device=self.device)

    # -- the task (subclass hooks) ----------------------------------------------------

    def _make_obs(self, state: dict) -> torch.Tensor:
        """``[N, obs_dim]``: ``cat(qpos[:, SKIP_QPOS:], qvel)`` by default."""
        return torch.cat([state["qpos"][:, self.SKIP_QPOS :], state["qvel"]], -1)

    def _make_obs_dict(self, state: dict) -> dict:
        """The observation entries (``{"observation": _make_obs(state)}`` by default);
        override together with :meth:`_make_obs_spec` for several keys."""
        return {"observation": self._make_obs(state)}

    def _compute_reward(self, state: dict, action: torch.Tensor, next_state: dict) -> torch.Tensor:
        """``[N]`` or ``[N, 1]`` rewards of the transition ``state -> next_state``."""
        raise NotImplementedError(f"{type(self).__name__} must implement _compute_reward")

    def _compute_done(self, state: dict, next_state: dict) -> torch.Tensor:
        """``[N]`` or ``[N, 1]`` bool: which sub-envs terminated in ``next_state``."""
        raise NotImplementedError(f"{type(self).__name__} must implement _compute_done")

    def _sample_initial_state(
        self, n: int, tensordict: TensorDictBase | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``([n, nq], [n, nv])`` float64 reset states: the reference ``qpos`` and zero
        ``qvel``, each plus uniform noise in ``[-reset_noise_scale, reset_noise_scale]``."""
        scale = self.reset_noise_scale
        qpos = torch.as_tensor(self._sim.qpos0).expand(n, -1)
        noise = torch.rand(
            n,
            self._sim.nq + self._sim.nv,
            generator=self._generator,
            dtype=torch.float64,
            device=self._generator.device,
        )
        noise = noise.to("cpu") * (2 * scale) - scale
        return qpos + noise[:, : self._sim.nq], noise[:, self._sim.nq :].clone()

    def _prepare_ctrl(self, action: torch.Tensor) -> torch.Tensor:
        """Maps the action ``[N, nu]`` to the simulator's ``ctrl`` (identity)."""
        return action

    def _on_reset(self, rows: list[int], tensordict: TensorDictBase | None) -> None:
        """Called once sub-envs ``rows`` are put at their reset state, with the input of
        :meth:`reset` (``None`` for the rollout's automatic resets). Override to draw
        per-episode quantities that live outside the simulator (a target)."""

    def _state_extras(self) -> dict:
        """Quantities a task reads besides ``qpos`` / ``qvel`` / ``time`` (numpy
        ``[N, ...]`` arrays from :attr:`_sim`), added to the state mappings."""
        return {}

    # -- state ------------------------------------------------------------------------

    def _state(self) -> dict:
        sim = self._sim
        state = {
            "qpos": torch.from_numpy(sim.qpos()),
            "qvel": torch.from_numpy(sim.qvel()),
            "time": torch.from_numpy(sim.time()),
        }
        for key, value in self._state_extras().items():
            state[key] = torch.as_tensor(value)
        return state

    def get_state(self) -> TensorDict:
        """A copy of the simulator state: ``qpos`` ``[N, nq]``, ``qvel`` ``[N, nv]`` and
        ``time`` ``[N]`` (float64)."""
        state = self._state()
        return TensorDict(
            {key: state[key] for key in ("qpos", "qvel", "time")}, batch_size=[self.num_envs]
        )

    def _output(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(device=self._tensor_device, dtype=self.dtype)

    def _observations(self, state: dict, fresh: bool) -> dict:
        out = {}
        if not self.pixels_only:
            for key, value in self._make_obs_dict(state).items():
                out[key] = self._output(value)
        if self.from_pixels:
            if fresh or self._last_pixels is None or self._render_counter % self.render_every == 0:
                frames = self._sim.render(self.camera_id, self.render_width, self.render_height)
                self.__dict__["_last_pixels"] = torch.from_numpy(frames).to(self._tensor_device)
            out["pixels"] = self._last_pixels
        return out

    def render(
        self,
        *,
        width: int | None = None,
        height: int | None = None,
        camera_id: int | None = None,
    ) -> torch.Tensor:
        """``[num_envs, H, W, 3]`` uint8 frames of the current state (the constructor's
        size and camera unless given). Needs an OpenGL back-end (``MUJOCO_GL=egl``)."""
        frames = self._sim.render(
            self.camera_id if camera_id is None else int(camera_id),
            self.render_width if width is None else int(width),
            self.render_height if height is None else int(height),
        )
        return torch.from_numpy(frames)

    # -- step and reset -----------------------------------------------------------------

    def _step_entries(self, action: torch.Tensor) -> dict:
        action = action.to(dtype=self.dtype)
        ctrl = self._prepare_ctrl(action)
        state = self._state()
        self._sim.step(ctrl.detach().to("cpu", torch.float64).numpy(), self.frame_skip)
        next_state = self._state()
        d = self.__dict__
        d["_step_count"] = self._step_count + 1
        d["_render_counter"] = self._render_counter + 1
        reward = self._compute_reward(state, action.to("cpu"), next_state)
        terminated = self._compute_done(state, next_state).to(torch.bool).reshape(self.num_envs)
        truncated = self._step_count >= self.max_episode_steps
        entries = self._observations(next_state, fresh=False)
        entries["reward"] = self._output(reward.reshape(self.num_envs, 1))
        entries.update(
            self._flags(terminated.to(self._tensor_device), truncated.to(self._tensor_device))
        )
        return entries

    def _reset_entries(self, mask: torch.Tensor | None) -> dict:
        pending = self._pending_state
        self.__dict__["_pending_state"] = None
        if pending is not None:
            qpos, qvel = pending
        else:
            qpos, qvel = self._sample_initial_state(self.num_envs, self._reset_input)
        if mask is None:
            rows = list(range(self.num_envs))
        else:
            rows = mask.to("cpu").reshape(-1).nonzero().reshape(-1).tolist()
        self._sim.set_state(rows, qpos[rows].numpy(), qvel[rows].numpy())
        self._on_reset(rows, self._reset_input)
        step_count = self._step_count.clone()
        step_count[rows] = 0
        self.__dict__["_step_count"] = step_count
        self.__dict__["_render_counter"] = 0
        return self._observations(self._state(), fresh=True)

    def reset(
        self, tensordict: TensorDictBase | None = None, *, set_state: bool = False, **kwargs
    ) -> TensorDictBase:
        """Resets the sub-envs (those of ``"_reset"`` if given) to sampled states, or,
        with ``set_state=True``, to the input's ``"qpos"`` ``[N, nq]`` and ``"qvel"``
        ``[N, nv]`` entries.

        Raises:
            KeyError: ``set_state=True`` without ``"qpos"`` / ``"qvel"``.
            ValueError: ``"qpos"`` / ``"qvel"`` of the wrong shape.
        """
        self.__dict__["_reset_input"] = tensordict
        if set_state:
            if tensordict is None:
                raise KeyError("reset(set_state=True) needs a tensordict with 'qpos' and 'qvel'")
            self.__dict__["_pending_state"] = self._read_state(tensordict)
        try:
            return super().reset(tensordict, **kwargs)
        finally:
            self.__dict__["_pending_state"] = None
            self.__dict__["_reset_input"] = None

    def _read_state(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        out = []
        for key, size in (("qpos", self._sim.nq), ("qvel", self._sim.nv)):
            value = tensordict.get(key, None)
            if value is None:
                raise KeyError(
                    f"reset(set_state=True) needs a {key!r} entry of shape {(self.num_envs, size)}"
                )
            value = torch.as_tensor(value).detach().to("cpu", torch.float64)
            if value.shape != (self.num_envs, size):
                raise ValueError(
                    f"{key!r} has shape {tuple(value.shape)}, expected {(self.num_envs, size)}"
                )
            out.append(value)
        return out[0], out[1]

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Releases the renderers and marks the env closed."""
        self._sim.close()
        super().close(raise_if_closed=raise_if_closed)
