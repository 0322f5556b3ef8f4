"""A batch of MuJoCo simulations on the official ``mujoco`` bindings.

The model is compiled once; each sub-env owns an ``MjData`` and is stepped in a loop (the
bindings step one ``MjData`` at a time, in C). State comes out as float64 numpy arrays of
shape ``[num_envs, ...]``.
"""

from __future__ import annotations

import importlib.util

import numpy as np

__all__ = ["MujocoSim", "import_mujoco"]

_has_mujoco = importlib.util.find_spec("mujoco") is not None
_INSTALL = 'pip install "rl-envs[mujoco]"'


def import_mujoco():
    """The ``mujoco`` module, or an ImportError that names the extra to install."""
    if not _has_mujoco:
        raise ImportError(f"the MuJoCo envs need the mujoco package: {_INSTALL}")
    import mujoco

    return mujoco


class MujocoSim:
    """``num_envs`` copies of one compiled MuJoCo model.

    Args:
        xml: the model's MJCF text.
        num_envs: the number of independent copies.
    """

    def __init__(self, xml: str, num_envs: int) -> None:
        mujoco = import_mujoco()
        self._mj = mujoco
        self.model = mujoco.MjModel.from_xml_string(xml)
        self.datas = [mujoco.MjData(self.model) for _ in range(num_envs)]
        for data in self.datas:
            mujoco.mj_forward(self.model, data)
        self.num_envs = num_envs
        self._renderers: dict[tuple[int, int], object] = {}

    # -- sizes and constants --------------------------------------------------------

    @property
    def nq(self) -> int:
        return int(self.model.nq)

    @property
    def nv(self) -> int:
        return int(self.model.nv)

    @property
    def nu(self) -> int:
        return int(self.model.nu)

    @property
    def timestep(self) -> float:
        return float(self.model.opt.timestep)

    @property
    def qpos0(self) -> np.ndarray:
        """``[nq]`` the model's reference configuration."""
        return self.model.qpos0.copy()

    def ctrl_range(self) -> tuple[np.ndarray, np.ndarray]:
        """``([nu], [nu])`` control bounds; ``(-1, 1)`` for actuators without limits."""
        low = self.model.actuator_ctrlrange[:, 0].copy()
        high = self.model.actuator_ctrlrange[:, 1].copy()
        free = (self.model.actuator_ctrllimited == 0) | ((low == 0) & (high == 0))
        low[free], high[free] = -1.0, 1.0
        return low, high

    # -- state ------------------------------------------------------------------------

    def _gather(self, name: str) -> np.ndarray:
        return np.stack([getattr(data, name) for data in self.datas])

    def qpos(self) -> np.ndarray:
        return self._gather("qpos")

    def qvel(self) -> np.ndarray:
        return self._gather("qvel")

    def time(self) -> np.ndarray:
        return np.array([data.time for data in self.datas])

    def xpos(self) -> np.ndarray:
        """``[N, nbody, 3]`` body frame positions (as of the last kinematics pass)."""
        return self._gather("xpos")

    def xipos(self) -> np.ndarray:
        """``[N, nbody, 3]`` body centres of mass (as of the last kinematics pass)."""
        return self._gather("xipos")

    def cfrc_ext(self) -> np.ndarray:
        """``[N, nbody, 6]`` external (contact) forces on each body."""
        return self._gather("cfrc_ext")

    def ctrl(self) -> np.ndarray:
        return self._gather("ctrl")

    def set_state(self, rows, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Puts sub-envs ``rows`` at ``qpos[i]`` / ``qvel[i]`` (time 0, no actuator state)
        and recomputes their kinematics, as gymnasium's ``MujocoEnv.set_state``."""
        mujoco = self._mj
        for i, row in enumerate(rows):
            data = self.datas[row]
            mujoco.mj_resetData(self.model, data)
            data.qpos[:] = qpos[i]
            data.qvel[:] = qvel[i]
            mujoco.mj_forward(self.model, data)

    def copy_rows(self, rows, source: MujocoSim, source_rows) -> None:
        """Copies the full simulator state of ``source``'s rows into ``rows``."""
        for row, src in zip(rows, source_rows, strict=True):
            self._mj.mj_copyData(self.datas[row], self.model, source.datas[src])

    def step(self, ctrl: np.ndarray, frame_skip: int) -> None:
        """Applies ``ctrl[i]`` to sub-env ``i`` for ``frame_skip`` physics steps, then
        computes the constraint forces (``cfrc_ext``), as gymnasium's ``do_simulation``."""
        mujoco = self._mj
        model = self.model
        for data, row in zip(self.datas, ctrl, strict=True):
            data.ctrl[:] = row
            mujoco.mj_step(model, data, nstep=frame_skip)
            mujoco.mj_rnePostConstraint(model, data)

    # -- rendering --------------------------------------------------------------------

    def render(self, camera_id: int, width: int, height: int) -> np.ndarray:
        """``[N, height, width, 3]`` uint8 frames, one per sub-env.

        Needs an OpenGL back-end (``MUJOCO_GL=egl`` on a headless machine).
        """
        renderer = self._renderers.get((width, height))
        if renderer is None:
            renderer = self._mj.Renderer(self.model, height=height, width=width)
            self._renderers[(width, height)] = renderer
        frames = np.empty((self.num_envs, height, width, 3), dtype=np.uint8)
        for i, data in enumerate(self.datas):
            renderer.update_scene(data, camera=camera_id)
            frames[i] = renderer.render()
        return frames

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
