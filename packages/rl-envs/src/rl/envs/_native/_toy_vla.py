"""ToyVLAEnv: a dependency-free stand-in for a Vision-Language-Action task."""

from __future__ import annotations

import torch
from tensordict import NonTensorStack, TensorDict, TensorDictBase

from rl.core import Bounded, Categorical, Composite, NonTensor, Unbounded

from .._env_base import EnvBase

__all__ = ["ToyVLAEnv"]

_INSTRUCTION = "push the T-shaped block onto the target"


class ToyVLAEnv(EnvBase):
    """A toy env with TorchRL's VLA observation layout, for pipelines and tests.

    Observations: a random ``uint8`` camera image and a proprioceptive state under
    ``"observation"``, and a constant ``"language_instruction"``. The state's first
    ``action_dim`` entries echo the action executed last, so the cadence of a
    chunk-executing policy can be read off the states.

    - Echo mode (``success_steps=None``): the reward is ``-||action||`` and episodes
      never end.
    - Tracking mode (``success_steps=k``): a target action drawn uniformly in
      ``[-0.5, 0.5]`` at reset is shown in ``state[..., A:2A]``; the reward is
      ``-||action - target||``, and ``success`` (which terminates the episode) turns
      True once the action stayed within ``success_tol`` (per dim) of the target for
      ``k`` consecutive steps. With ``group_repeats=n`` the same target serves ``n``
      consecutive episodes and a ``group_id`` entry names the group.

    Args:
        action_dim: the action size (bounded in ``[-1, 1]``).
        state_dim: the state size (``>= action_dim``; ``>= 2 * action_dim`` when tracking).
        image_shape: ``(C, H, W)`` of the image.
        instruction: the language instruction.
        from_pixels: add a ``"pixels"`` ``(render_size, render_size, 3)`` frame drawing the
            action (red) and the target (green) on the ``[-1, 1]`` plane.
        render_size: the side of ``"pixels"``.
        success_steps: consecutive in-tolerance steps for success (tracking mode).
        success_tol: the per-dim tolerance, in ``(0, 0.5]``.
        group_repeats: episodes per target (tracking mode, one env).
        group_id_offset: added to the group ids.
        batch_size: vectorized copies.
        device: the device of the specs and data.
        seed: the seed of the images and targets.

    Raises:
        ValueError: inconsistent sizes or modes (each message names the argument).

    Examples:
        >>> env = ToyVLAEnv(action_dim=2, state_dim=4, batch_size=[2], success_steps=2, seed=0)
        >>> td = env.rollout(3)
        >>> td["next", "observation", "state"].shape
        torch.Size([2, 3, 4])
    """

    def __init__(
        self,
        action_dim: int = 4,
        state_dim: int = 6,
        image_shape: tuple[int, int, int] = (3, 16, 16),
        instruction: str = _INSTRUCTION,
        *,
        from_pixels: bool = False,
        render_size: int = 64,
        success_steps: int | None = None,
        success_tol: float = 0.25,
        group_repeats: int | None = None,
        group_id_offset: int = 0,
        batch_size: torch.Size | None = None,
        device: torch.device | None = None,
        seed: int | None = None,
    ) -> None:
        tracking = success_steps is not None
        if not tracking and state_dim < action_dim:
            raise ValueError(
                f"state_dim ({state_dim}) must be at least action_dim ({action_dim}): the state "
                "echoes the executed action"
            )
        if tracking:
            if success_steps < 1:
                raise ValueError(f"success_steps must be >= 1, got {success_steps}")
            if state_dim < 2 * action_dim:
                raise ValueError(
                    f"state_dim ({state_dim}) must be at least 2 * action_dim ({2 * action_dim}) in "
                    "tracking mode: the state holds the executed action, then the target"
                )
            if not 0.0 < success_tol <= 0.5:
                raise ValueError(f"success_tol must be in (0, 0.5], got {success_tol}")
        if group_repeats is not None:
            if not tracking:
                raise ValueError("group_repeats needs the tracking mode: set success_steps")
            if group_repeats < 1:
                raise ValueError(f"group_repeats must be >= 1, got {group_repeats}")
        if render_size < 1:
            raise ValueError(f"render_size must be >= 1, got {render_size}")
        super().__init__(
            batch_size=None if batch_size is None else torch.Size(batch_size), device=device
        )
        self.action_dim, self.state_dim = int(action_dim), int(state_dim)
        self.image_shape = tuple(int(d) for d in image_shape)
        self.instruction = str(instruction)
        self.from_pixels, self.render_size = bool(from_pixels), int(render_size)
        self.success_steps = None if success_steps is None else int(success_steps)
        self.success_tol = float(success_tol)
        self.group_repeats = None if group_repeats is None else int(group_repeats)
        self.group_id_offset = int(group_id_offset)
        bs, dev = self.batch_size, self.device
        if self.group_repeats is not None and bs.numel() > 1:
            raise ValueError(
                f"group_repeats supports one env only (batch_size () or (1,)), got {tuple(bs)}"
            )
        self.observation_spec = Composite(
            observation=Composite(
                image=Unbounded(shape=(*bs, *self.image_shape), dtype=torch.uint8, device=dev),
                state=Unbounded(shape=(*bs, self.state_dim), device=dev),
                shape=bs,
            ),
            language_instruction=NonTensor(shape=bs, example_data=self.instruction, device=dev),
            shape=bs,
        )
        if tracking:
            self.observation_spec["success"] = Categorical(
                2, dtype=torch.bool, shape=(*bs, 1), device=dev
            )
        if self.group_repeats is not None:
            self.observation_spec["group_id"] = Unbounded(
                shape=(*bs, 1), dtype=torch.int64, device=dev
            )
        if self.from_pixels:
            self.observation_spec["pixels"] = Unbounded(
                shape=(*bs, self.render_size, self.render_size, 3), dtype=torch.uint8, device=dev
            )
        self.action_spec = Bounded(-1.0, 1.0, shape=(*bs, self.action_dim), device=dev)
        self.reward_spec = Unbounded(shape=(*bs, 1), device=dev)
        self.done_spec = Categorical(2, dtype=torch.bool, shape=(*bs, 1), device=dev)
        self._target = torch.zeros(*bs, self.action_dim, device=dev)
        self._streak = torch.zeros(*bs, 1, dtype=torch.int64, device=dev)
        self._group_id = torch.zeros(*bs, 1, dtype=torch.int64, device=dev)
        self._episode_count = 0
        self._rng = torch.Generator()
        self._set_seed(seed)

    def _instructions(self):
        if not self.batch_size:
            return self.instruction
        return NonTensorStack(*[self.instruction] * self.batch_size.numel()).reshape(
            self.batch_size
        )

    def _observation(self, state: torch.Tensor) -> TensorDict:
        image = torch.randint(
            0, 256, (*self.batch_size, *self.image_shape), dtype=torch.uint8, generator=self._rng
        ).to(self.device)
        out = TensorDict(
            {
                "observation": {"image": image, "state": state},
                "language_instruction": self._instructions(),
            },
            batch_size=self.batch_size,
            device=self.device,
        )
        if self.from_pixels:
            out["pixels"] = self._render(state)
        return out

    def _render(self, state: torch.Tensor) -> torch.Tensor:
        size = self.render_size
        canvas = torch.full(
            (*self.batch_size, size, size, 3), 30, dtype=torch.uint8, device=self.device
        )
        a = self.action_dim
        self._draw(canvas, state[..., :a], (220, 60, 60))
        if self.success_steps is not None:
            self._draw(canvas, state[..., a : 2 * a], (60, 200, 60))
        return canvas

    def _draw(self, canvas: torch.Tensor, point: torch.Tensor, color, radius: int = 2) -> None:
        """A square marker at ``point``'s first two coordinates (``[-1, 1]`` to pixels)."""
        size = canvas.shape[-2]

        def pixel(c: torch.Tensor) -> torch.Tensor:
            return ((c.clamp(-1.0, 1.0) + 1.0) * 0.5 * (size - 1)).round().long().reshape(-1)

        xs = pixel(point[..., 0])
        ys = pixel(point[..., 1]) if point.shape[-1] > 1 else torch.zeros_like(xs)
        flat = canvas.reshape(-1, size, size, 3)
        rgb = torch.tensor(color, dtype=torch.uint8, device=canvas.device)
        for i, (y, x) in enumerate(zip(ys.tolist(), xs.tolist())):
            flat[i, max(0, y - radius) : y + radius + 1, max(0, x - radius) : x + radius + 1] = rgb

    def _state(self, action: torch.Tensor | None) -> torch.Tensor:
        state = torch.zeros(*self.batch_size, self.state_dim, device=self.device)
        if action is not None:
            state[..., : self.action_dim] = action
        if self.success_steps is not None:
            state[..., self.action_dim : 2 * self.action_dim] = self._target
        return state

    def _new_target(self) -> torch.Tensor:
        return (torch.rand(*self.batch_size, self.action_dim, generator=self._rng) - 0.5).to(
            self.device
        )

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDict:
        if self.success_steps is not None:
            mask = None if tensordict is None else tensordict.get("_reset", None)
            if mask is None:
                mask = torch.ones(*self.batch_size, 1, dtype=torch.bool, device=self.device)
            if self.group_repeats is not None:
                if self._episode_count % self.group_repeats == 0:
                    self._target = self._new_target()
                group = self.group_id_offset + self._episode_count // self.group_repeats
                self._group_id = torch.full_like(self._group_id, group)
                self._episode_count += 1
            else:
                self._target = torch.where(mask, self._new_target(), self._target)
            self._streak = torch.where(mask, torch.zeros_like(self._streak), self._streak)
        out = self._observation(self._state(None))
        if self.success_steps is not None:
            out["success"] = torch.zeros(*self.batch_size, 1, dtype=torch.bool, device=self.device)
        if self.group_repeats is not None:
            out["group_id"] = self._group_id.clone()
        out.update(self.full_done_spec.zero())
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDict:
        action = tensordict.get("action")
        out = self._observation(self._state(action))
        if self.success_steps is None:
            out["reward"] = -action.norm(dim=-1, keepdim=True)
            out.update(self.full_done_spec.zero())
            return out
        error = action - self._target
        reward = -error.norm(dim=-1, keepdim=True)
        hit = (error.abs() <= self.success_tol).all(-1, keepdim=True)
        streak = torch.where(hit, self._streak + 1, 0)
        stepped = tensordict.get("_step", None)
        if stepped is not None:  # sub-envs outside the step mask keep their streak
            stepped = stepped.view(self._streak.shape)
            streak = torch.where(stepped, streak, self._streak)
            reward = torch.where(stepped, reward, torch.zeros_like(reward))
        self._streak = streak
        success = streak >= self.success_steps
        out["reward"] = reward
        out["success"] = success
        if self.group_repeats is not None:
            out["group_id"] = self._group_id.clone()
        out["terminated"] = success
        out["done"] = success.clone()
        return out

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._rng.manual_seed(seed)
