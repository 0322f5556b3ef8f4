"""LeRobot's columnar layout to the VLA TensorDict layout (``lerobot_columns_to_tensordict``).

Reading a LeRobot dataset itself (``LeRobotExperienceReplay``) needs the Hugging Face
hub, which rl does not download from; the conversion of columns already in memory does
not.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NonTensorStack, TensorDict
from tensordict.utils import NestedKey

__all__ = ["lerobot_columns_to_tensordict"]

#: LeRobot column name -> VLA key. ``observation.images.<camera>`` becomes
#: ``("observation", "image", <camera>)``; any other dotted name a nested key.
_DEFAULT_KEY_MAP: dict[str, NestedKey] = {
    "action": "action",
    "observation.state": ("observation", "state"),
    "episode_index": "episode",
    "frame_index": "frame",
    "task": "language_instruction",
    "next.reward": ("next", "reward"),
    "next.done": ("next", "done"),
}

_IMAGE_PREFIX = "observation.images."


def _target_key(name: str, key_map: dict[str, NestedKey]) -> NestedKey:
    if name in key_map:
        return key_map[name]
    if name.startswith(_IMAGE_PREFIX):
        return ("observation", "image", name[len(_IMAGE_PREFIX) :])
    return tuple(name.split(".")) if "." in name else name


def _length(name: str, value: Any) -> int | None:
    """The number of frames a column holds (None for a value with no length)."""
    from rl.data._video import VideoClipRef

    if isinstance(value, torch.Tensor | VideoClipRef):
        return value.shape[0] if value.ndim else None
    if isinstance(value, list | tuple):
        return len(value)
    return None


def lerobot_columns_to_tensordict(
    columns: dict[str, Any], *, key_map: dict[str, NestedKey] | None = None
) -> TensorDict:
    """A flat ``[N]`` TensorDict in the VLA layout from LeRobot-style columns.

    LeRobot names its per-frame columns with dots (``observation.state``,
    ``observation.images.<camera>``, ``action``, ``episode_index``, ``task``, ...).
    They become: the state and the images under ``"observation"`` (``("observation",
    "image", camera)``), the instruction at ``"language_instruction"``, the action at
    ``"action"``, the episode index at ``"episode"`` (trajectory boundaries for a
    ``SliceSampler``), and any other dotted name a nested key. A 1-D column that lands
    under ``"next"`` (``next.reward``, ``next.done``) gets a trailing dim of 1, as every
    per-step signal of a transition. The result passes
    :func:`rl.core.validate_vla_tensordict` when the columns hold what it asks for.

    Args:
        columns: column name -> a tensor (numeric column), a list of strings (an
            instruction per frame), a :class:`~rl.data.VideoClipRef` (frames decoded
            later, by :class:`~rl.envs.DecodeVideoTransform`), or a list of numbers.

    Keyword Args:
        key_map: column name -> target key, over the defaults above.

    Raises:
        ValueError: no column tells the number of frames, columns of different lengths
            (naming the column), or a column mixing strings and other values.

    Examples:
        >>> import torch
        >>> from rl.data.datasets import lerobot_columns_to_tensordict
        >>> td = lerobot_columns_to_tensordict({
        ...     "observation.state": torch.zeros(4, 7),
        ...     "observation.images.top": torch.zeros(4, 3, 8, 8, dtype=torch.uint8),
        ...     "action": torch.zeros(4, 7),
        ...     "episode_index": torch.tensor([0, 0, 1, 1]),
        ...     "task": ["pick", "pick", "place", "place"],
        ... })
        >>> td["observation", "image", "top"].shape
        torch.Size([4, 3, 8, 8])
        >>> td["episode"].tolist(), td.get("language_instruction").tolist()
        ([0, 0, 1, 1], ['pick', 'pick', 'place', 'place'])
    """
    from rl.data._video import VideoClipRef

    key_map = {**_DEFAULT_KEY_MAP, **(key_map or {})}
    lengths = {name: _length(name, value) for name, value in columns.items()}
    known = [n for n in lengths.values() if n is not None]
    if not known:
        raise ValueError(
            "lerobot_columns_to_tensordict could not tell the number of frames: no column "
            f"is a tensor, a VideoClipRef or a list (columns {list(columns)})"
        )
    n = known[0]
    for name, length in lengths.items():
        if length is not None and length != n:
            first = next(k for k, v in lengths.items() if v is not None)
            raise ValueError(
                f"column {name!r} holds {length} frames, column {first!r} holds {n}: every "
                "column must hold one value per frame"
            )
    out = TensorDict({}, batch_size=[n])
    for name, value in columns.items():
        target = _target_key(name, key_map)
        if isinstance(value, VideoClipRef):
            out.set(target, value)
            continue
        if isinstance(value, list | tuple):
            strings = [isinstance(v, str) for v in value]
            if all(strings) and value:
                out.set(target, NonTensorStack.from_list(list(value)))
                continue
            if any(strings):
                raise ValueError(
                    f"column {name!r} mixes strings and other values: a column holds one "
                    "kind of value"
                )
        value = torch.as_tensor(value)
        if isinstance(target, tuple) and target[0] == "next" and value.ndim == 1:
            value = value.unsqueeze(-1)
        out.set(target, value)
    return out
