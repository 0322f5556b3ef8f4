"""Where action chunks live in a TensorDict (shared by rl.envs and rl.objectives).

A chunking policy (ACT, VLA-style) predicts ``H`` future actions at once. The data
pipeline writes the expert chunk ``[*B, T, H, action_dim]`` and its padding mask
``[*B, T, H]`` under these keys, and the chunk losses read them, as in TorchRL
(``torchrl.data.vla``).
"""

from __future__ import annotations

from tensordict.utils import NestedKey

__all__ = ["ACTION_CHUNK_KEY", "ACTION_IS_PAD_KEY", "VLA_ACTION_KEY"]

#: the group of the policy's chunked action entries
VLA_ACTION_KEY: NestedKey = "vla_action"
#: the action chunk ``[*B, H, action_dim]`` (per step ``[*B, T, H, action_dim]``)
ACTION_CHUNK_KEY: NestedKey = (VLA_ACTION_KEY, "chunk")
#: the boolean mask of padded chunk steps (``True`` = padded), ``[*B, (T,) H]``
ACTION_IS_PAD_KEY: NestedKey = "action_is_pad"
