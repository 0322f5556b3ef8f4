"""The TensorDict layout of Vision-Language-Action (VLA) data (TorchRL's ``torchrl.data.vla``).

One VLA transition maps camera images and proprioceptive state plus a language
instruction to an action, often predicted as a chunk of future actions::

    observation: {image: [*B, T, C, H, W] (or one entry per camera), state: [*B, T, S]}
    language_instruction: a string per trajectory (non-tensor) or its tokens
    action: [*B, T, A]
    vla_action: {chunk: [*B, T, H, A], tokens: [*B, T, H, A] long}
    action_is_pad: [*B, T, H] bool

These names are defaults only: every component that reads them takes its keys as
arguments.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey, is_non_tensor

from ._action_chunk import ACTION_CHUNK_KEY, ACTION_IS_PAD_KEY, VLA_ACTION_KEY

__all__ = [
    "ACTION_CHUNK_KEY",
    "ACTION_IS_PAD_KEY",
    "ACTION_KEY",
    "ACTION_TOKENS_KEY",
    "IMAGE_KEY",
    "INSTRUCTION_KEY",
    "OBSERVATION_KEY",
    "STATE_KEY",
    "VLA_ACTION_KEY",
    "validate_vla_tensordict",
]

OBSERVATION_KEY: NestedKey = "observation"
IMAGE_KEY: NestedKey = ("observation", "image")
STATE_KEY: NestedKey = ("observation", "state")
INSTRUCTION_KEY: NestedKey = "language_instruction"
ACTION_KEY: NestedKey = "action"
#: the discrete action tokens of a token (RT-2 / OpenVLA style) policy
ACTION_TOKENS_KEY: NestedKey = (VLA_ACTION_KEY, "tokens")


def _has(td: TensorDictBase, key: NestedKey) -> bool:
    return key in td.keys(include_nested=True)


def validate_vla_tensordict(
    tensordict: TensorDictBase,
    *,
    instruction_key: NestedKey = INSTRUCTION_KEY,
    action_key: NestedKey = ACTION_KEY,
    image_key: NestedKey = IMAGE_KEY,
    state_key: NestedKey = STATE_KEY,
    require_instruction: bool = True,
    require_action: bool = True,
    require_perception: bool = True,
    check_finite: bool = True,
    raise_on_error: bool = True,
) -> list[str]:
    """Checks that ``tensordict`` holds what a VLA pipeline reads.

    Args:
        tensordict: the data to check.
        instruction_key: the language-instruction entry.
        action_key: the action entry.
        image_key: the camera image(s) entry.
        state_key: the proprioceptive-state entry.
        require_instruction: a missing instruction is an issue.
        require_action: a missing action is an issue.
        require_perception: having neither an image nor a state is an issue.
        check_finite: a floating action with NaN or infinite values is an issue.
        raise_on_error: raise instead of returning the issues.

    Returns:
        the issues found, one sentence each (empty when the data is valid).

    Raises:
        ValueError: when ``raise_on_error`` and an issue was found (all are listed).

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"observation": {"state": torch.zeros(2, 3)}, "action": torch.zeros(2, 7)}, [2])
        >>> validate_vla_tensordict(td, require_instruction=False)
        []
        >>> validate_vla_tensordict(td, raise_on_error=False)
        ["missing language instruction at 'language_instruction'"]
    """
    issues = []
    if require_instruction and not _has(tensordict, instruction_key):
        issues.append(f"missing language instruction at {instruction_key!r}")
    if require_action and not _has(tensordict, action_key):
        issues.append(f"missing action at {action_key!r}")
    if require_perception and not (_has(tensordict, image_key) or _has(tensordict, state_key)):
        issues.append(
            f"missing perception: neither an image at {image_key!r} nor a state at {state_key!r}"
        )
    if check_finite and _has(tensordict, action_key):
        action = tensordict.get(action_key)
        if (
            not is_non_tensor(action)
            and isinstance(action, torch.Tensor)
            and action.is_floating_point()
            and not torch.isfinite(action).all()
        ):
            issues.append(f"action at {action_key!r} holds non-finite values")
    if issues and raise_on_error:
        raise ValueError("invalid VLA tensordict: " + "; ".join(issues))
    return issues
