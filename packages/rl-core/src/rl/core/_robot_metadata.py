"""What a robot dataset is: its embodiment, action convention and action statistics."""

from __future__ import annotations

import json
from typing import Literal, get_args

import torch
from tensordict import TensorClass
from tensordict.utils import NestedKey

from ._specs import Bounded, TensorSpec, Unbounded
from ._vla_schema import ACTION_KEY, INSTRUCTION_KEY, STATE_KEY

__all__ = ["ActionSpace", "GripperMode", "RobotDatasetMetadata"]

#: what an action vector stands for
ActionSpace = Literal[
    "joint_delta", "joint_position", "eef_delta", "eef_pose", "velocity", "mixed", "unknown"
]
#: how the gripper dimension(s) of an action are encoded
GripperMode = Literal["continuous", "binary", "none", "unknown"]

_STATS = ("action_mean", "action_std", "action_low", "action_high")
_KEYS = ("state_key", "instruction_key", "action_key")
_FIELDS = (
    "dataset_id",
    "embodiment_id",
    "action_dim",
    "action_names",
    "action_space",
    "gripper_mode",
    "control_frequency_hz",
    "camera_keys",
    *_KEYS,
    *_STATS,
    "license",
    "source_url",
)


class RobotDatasetMetadata(TensorClass["nocast"]):
    """Metadata of a robot dataset / embodiment for VLA pipelines.

    A :class:`~tensordict.TensorClass`: the per-dimension action statistics are tensors
    (they move with ``.to``, compare with ``==``), the rest is non-tensor data. The
    statistics feed action normalization (:meth:`rl.envs.ActionScaling.from_metadata`)
    and tokenization (:meth:`UniformActionTokenizer.from_metadata`).

    Args:
        dataset_id: the dataset's name (``"bridge"``).
        embodiment_id: the robot's name.
        action_dim: the size of one action (a positive int).
        action_names: a name per action dimension.
        action_space: one of ``"joint_delta"``, ``"joint_position"``, ``"eef_delta"``,
            ``"eef_pose"``, ``"velocity"``, ``"mixed"``, ``"unknown"`` (default).
        gripper_mode: ``"continuous"``, ``"binary"``, ``"none"`` or ``"unknown"`` (default).
        control_frequency_hz: the control rate of the data.
        camera_keys: the keys of the cameras.
        state_key: the proprioceptive-state key (``("observation", "state")``).
        instruction_key: the instruction key (``"language_instruction"``).
        action_key: the action key (``"action"``).
        action_mean: per-dimension action mean ``[action_dim]``.
        action_std: per-dimension action standard deviation.
        action_low: per-dimension action lower bound.
        action_high: per-dimension action upper bound.
        license: the dataset's license.
        source_url: where the dataset comes from.

    Raises:
        ValueError: an unknown ``action_space`` / ``gripper_mode``, or an ``action_dim``
            that is not a positive int.

    Examples:
        >>> meta = RobotDatasetMetadata("bridge", action_dim=7, action_mean=torch.zeros(7), action_std=torch.ones(7))
        >>> meta.make_action_spec().shape
        torch.Size([7])
        >>> bool((RobotDatasetMetadata.from_json(meta.to_json()) == meta).all())
        True
    """

    dataset_id: str
    embodiment_id: str | None = None
    action_dim: int | None = None
    action_names: tuple[str, ...] | None = None
    action_space: ActionSpace = "unknown"
    gripper_mode: GripperMode = "unknown"
    control_frequency_hz: float | None = None
    camera_keys: tuple[NestedKey, ...] = ()
    state_key: NestedKey | None = STATE_KEY
    instruction_key: NestedKey | None = INSTRUCTION_KEY
    action_key: NestedKey = ACTION_KEY
    action_mean: torch.Tensor | None = None
    action_std: torch.Tensor | None = None
    action_low: torch.Tensor | None = None
    action_high: torch.Tensor | None = None
    license: str | None = None
    source_url: str | None = None

    def __post_init__(self) -> None:
        # also runs when tensordict rebuilds the object (``==``, ``.to``, indexing), where
        # the fields may hold other types: each check only fires on the user's types
        space, grip, dim = self.action_space, self.gripper_mode, self.action_dim
        if isinstance(space, str) and space not in get_args(ActionSpace):
            raise ValueError(f"action_space must be one of {get_args(ActionSpace)}, got {space!r}")
        if isinstance(grip, str) and grip not in get_args(GripperMode):
            raise ValueError(f"gripper_mode must be one of {get_args(GripperMode)}, got {grip!r}")
        if dim is not None and not isinstance(dim, torch.Tensor):
            if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
                raise ValueError(f"action_dim must be a positive int, got {dim!r}")
        if isinstance(self.camera_keys, (list, tuple)):  # JSON gives lists
            self.camera_keys = tuple(
                tuple(k) if isinstance(k, list) else k for k in self.camera_keys
            )
        if isinstance(self.action_names, list):
            self.action_names = tuple(self.action_names)
        for name in _KEYS:
            if isinstance(getattr(self, name), list):
                setattr(self, name, tuple(getattr(self, name)))
        for name in _STATS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, torch.Tensor):
                setattr(self, name, torch.as_tensor(value, dtype=torch.float32))

    def make_action_spec(self, *, shape_prefix: tuple[int, ...] = (), device=None) -> TensorSpec:
        """The action spec ``(*shape_prefix, action_dim)``: Bounded when the bounds are
        known, Unbounded otherwise.

        Raises:
            ValueError: ``action_dim`` is not set.
        """
        if self.action_dim is None:
            raise ValueError(
                f"metadata {self.dataset_id!r} has no action_dim to build an action spec from"
            )
        shape = (*shape_prefix, self.action_dim)
        if self.action_low is not None and self.action_high is not None:
            return Bounded(
                low=self.action_low.expand(shape).clone(),
                high=self.action_high.expand(shape).clone(),
                shape=shape,
                device=device,
                dtype=torch.float32,
            )
        return Unbounded(shape=shape, device=device, dtype=torch.float32)

    def to_json(self, path: str | None = None) -> str:
        """The metadata as a JSON string (also written to ``path`` when given)."""
        out = {}
        for key, value in self.to_dict().items():
            if isinstance(value, torch.Tensor):
                value = value.detach().cpu().tolist()
            elif isinstance(value, tuple):
                value = [list(v) if isinstance(v, tuple) else v for v in value]
            out[key] = value
        payload = json.dumps(out, indent=2)
        if path is not None:
            with open(path, "w") as f:
                f.write(payload)
        return payload

    @classmethod
    def from_json(cls, source: str) -> RobotDatasetMetadata:
        """Reads metadata from a JSON string or file; unknown fields are ignored."""
        if source.lstrip().startswith("{"):
            data = json.loads(source)
        else:
            with open(source) as f:
                data = json.load(f)
        return cls(**{k: v for k, v in data.items() if k in _FIELDS})
