"""LeRobotPolicyWrapper: an external (LeRobot-style) chunk policy as a VLA policy."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from rl.core.vla import IMAGE_KEY, INSTRUCTION_KEY, STATE_KEY

from ._base import InputMode, OutputMode, VLAWrapperBase

__all__ = ["LeRobotPolicyWrapper"]

_has_lerobot = importlib.util.find_spec("lerobot") is not None


class LeRobotPolicyWrapper(VLAWrapperBase):
    """Runs a LeRobot-style action-chunk policy under the VLA key layout.

    On each call the wrapper builds LeRobot's batch dict from the canonical keys
    (``"observation.images.<camera_name>"``, ``"observation.state"``, ``"task"``: the
    instruction strings), calls the wrapped policy and writes the chunk it returns,
    ``[*B, chunk_size, action_dim]``, at ``("vla_action", "chunk")``. The policy is
    called through ``predict_fn(policy, batch)`` when given, else its
    ``predict_action_chunk`` or ``forward`` method, else the policy itself.
    (LeRobot's ``select_action`` returns one step, not a chunk, so it is not tried.)
    Only the continuous head exists: external policies emit chunks, not rl's token
    logits.

    Args:
        policy: the wrapped policy (an ``nn.Module`` or any callable).

    Keyword Args:
        action_dim (int): the size of one action.
        chunk_size (int): the number of actions per chunk.
        predict_fn (Callable, optional): ``(policy, batch) -> chunk``, replacing the
            method lookup.
        camera_name (str): the camera in ``"observation.images.<camera_name>"``.
            Defaults to ``"image"``.
        use_state (bool): pass the proprioceptive state. Defaults to ``True``.
        image_key, state_key, instruction_key (NestedKey): the canonical input keys.
        input_mode, output_mode, inplace: as in :class:`~rl.modules.VLAWrapperBase`.

    Raises:
        TypeError: (at call time) when the policy has no way to be called.
        ValueError: (at call time) when the policy's output is not a chunk of shape
            ``[..., chunk_size, action_dim]``.

    Examples:
        >>> import torch
        >>> from tensordict import NonTensorStack, TensorDict
        >>> from rl.modules import LeRobotPolicyWrapper
        >>> class Policy:
        ...     def predict_action_chunk(self, batch):
        ...         return torch.zeros(batch["observation.state"].shape[0], 4, 7)
        >>> policy = LeRobotPolicyWrapper(Policy(), action_dim=7, chunk_size=4)
        >>> td = TensorDict(
        ...     {
        ...         "observation": {"image": torch.zeros(2, 3, 16, 16), "state": torch.zeros(2, 5)},
        ...         "language_instruction": NonTensorStack("pick", "place"),
        ...     },
        ...     batch_size=[2],
        ... )
        >>> policy(td)["vla_action", "chunk"].shape
        torch.Size([2, 4, 7])
    """

    def __init__(
        self,
        policy: Any,
        *,
        action_dim: int,
        chunk_size: int,
        predict_fn: Callable | None = None,
        camera_name: str = "image",
        use_state: bool = True,
        image_key: NestedKey = IMAGE_KEY,
        state_key: NestedKey = STATE_KEY,
        instruction_key: NestedKey = INSTRUCTION_KEY,
        input_mode: InputMode = "canonical",
        output_mode: OutputMode | None = None,
        inplace: bool | str | None = True,
    ) -> None:
        super().__init__(
            action_dim=action_dim,
            chunk_size=chunk_size,
            action_head="continuous",
            use_state=use_state,
            input_mode=input_mode,
            output_mode=output_mode,
            inplace=inplace,
            image_key=image_key,
            state_key=state_key,
            instruction_key=instruction_key,
        )
        self.policy = policy
        self.predict_fn = predict_fn
        self.camera_name = camera_name

    def _lerobot_batch(self, tensordict: TensorDictBase) -> dict:
        batch = {f"observation.images.{self.camera_name}": self._get_image(tensordict)}
        if self.use_state:
            batch["observation.state"] = self._get_state(tensordict)
        instruction = self._get_instruction(tensordict)
        batch["task"] = instruction.tolist() if hasattr(instruction, "tolist") else instruction
        return batch

    def _call_policy(self, batch: dict) -> torch.Tensor:
        if self.predict_fn is not None:
            return self.predict_fn(self.policy, batch)
        for name in ("predict_action_chunk", "forward"):
            method = getattr(self.policy, name, None)
            if callable(method):
                return method(batch)
        if callable(self.policy):
            return self.policy(batch)
        raise TypeError(
            f"the wrapped {type(self.policy).__name__} has no 'predict_action_chunk' or 'forward' "
            "method and is not callable; pass predict_fn=(policy, batch) -> chunk."
        )

    def _predict(self, tensordict: TensorDictBase) -> torch.Tensor:
        chunk = self._call_policy(self._lerobot_batch(tensordict))
        if chunk.ndim < 3 or tuple(chunk.shape[-2:]) != (self.chunk_size, self.action_dim):
            raise ValueError(
                f"the wrapped policy must return an action chunk of shape "
                f"[..., {self.chunk_size}, {self.action_dim}], got {tuple(chunk.shape)}."
            )
        return chunk.flatten(-2, -1)

    @classmethod
    def from_pretrained(
        cls, repo_id: str, *, action_dim: int, chunk_size: int, **kwargs
    ) -> LeRobotPolicyWrapper:
        """Load a pretrained LeRobot policy (``lerobot``'s ``make_policy``) and wrap it.

        Raises:
            ImportError: when ``lerobot`` is not installed.
        """
        if not _has_lerobot:
            raise ImportError(
                "loading a pretrained LeRobot policy needs the `lerobot` package (pip install lerobot); "
                "or wrap an instantiated policy with LeRobotPolicyWrapper(policy, ...)."
            )
        from lerobot.common.policies.factory import make_policy

        return cls(make_policy(repo_id), action_dim=action_dim, chunk_size=chunk_size, **kwargs)
