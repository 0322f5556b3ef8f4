"""The rollout engine of ``rl.envs``: one preallocated ``[*B, T]`` time loop.

:meth:`~rl.envs.EnvBase.rollout`, every batched env and every collector run
:func:`run_rollout`. It has two seams:

- a **kernel** (:class:`RolloutKernel`): what a back-end does at each step. It steps
  the simulator and writes the step's outputs into row ``t`` of preallocated
  ``[*B, T, ...]`` buffers (or returns them as a TensorDict), and resets a masked subset
  of sub-envs. :class:`EnvKernel` is the kernel of any env (its ``_step`` and ``reset``);
  gymnasium envs, ``SerialEnv`` / ``ParallelEnv``, EnvPool and ``TransformedEnv`` bring
  their own through :meth:`~rl.envs.EnvBase.rollout_kernel`. A new simulator costs one
  kernel, not one more loop.
- a **policy runner** (:func:`policy_runner`): the policy, or its tensor-level twin
  (:func:`rl.core.tensor_policy`) where the policy declares one or is a plain
  ``TensorDictModule`` pipeline; built once per rollout.

Everything else (the carrying of ``"next"`` into the next root, resets, early stops,
the entries the policy writes, the output TensorDict) lives in :func:`run_rollout`, once.

Examples:
    >>> import torch
    >>> from rl.envs import PendulumEnv
    >>> from rl.envs.engine import EnvKernel, run_rollout
    >>> env = PendulumEnv()
    >>> out = run_rollout(env, 5, env.reset(), policy=None, break_when_any_done=False,
    ...                   break_when_all_done=False, kernel=EnvKernel(env))
    >>> out.batch_size
    torch.Size([5])
"""

from ._buffers import RolloutBuffers, StepViews, build_output, non_tensor_keys
from ._kernel import BufferKernel, EnvKernel, RolloutKernel
from ._loop import declared_any_done, policy_runner, presample_actions, run_rollout

__all__ = [
    "BufferKernel",
    "EnvKernel",
    "RolloutBuffers",
    "RolloutKernel",
    "StepViews",
    "build_output",
    "declared_any_done",
    "non_tensor_keys",
    "policy_runner",
    "presample_actions",
    "run_rollout",
]
