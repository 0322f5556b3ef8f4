"""``LLMCollector``: a policy answering in a chat environment, turn by turn, in batches of
dialog turns or of completed conversations."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase, lazy_stack

from .._base import CollectorBase

__all__ = ["LLMCollector"]


class _QueueAsBuffer:
    """A ``queue.Queue`` seen as a replay buffer: each batch is ``put`` whole."""

    def __init__(self, queue):
        self.queue = queue

    def extend(self, data: TensorDictBase) -> None:
        self.queue.put(data)


class LLMCollector(CollectorBase):
    """Runs an LLM policy in a (chat) environment and yields its dialog turns.

    Each step, the policy (a :class:`~rl.modules.llm.TransformersWrapper` or any callable
    on a tensordict) answers the env's prompts and the env steps; conversations that end
    are reset (new prompts from the env's dataloader). The collector yields either a batch
    of ``dialog_turns_per_batch`` turns (``[B, T]``, or ``[B * T]`` with ``flatten_data``)
    or, with ``yield_completed_trajectories``, whole conversations (their turns along the
    last dim, concatenated until the batch holds ``dialog_turns_per_batch`` turns), or
    only their last turns (``yield_only_last_steps``). Each turn carries
    ``("collector", "traj_ids")``, a conversation's id.

    Args:
        env: the environment, or a callable building it (a
            :class:`~rl.envs.llm.ChatEnv`, :class:`~rl.envs.llm.GSM8KEnv`...).

    Keyword Args:
        policy (callable, optional): the LLM policy.
        policy_factory (callable, optional): builds it (exclusive with ``policy``).
        dialog_turns_per_batch (int, optional): turns per batch; required unless
            ``yield_completed_trajectories`` (then one conversation per batch).
        yield_only_last_steps (bool, optional): keep only the last turn of each conversation.
        yield_completed_trajectories (bool, optional): yield whole conversations. Defaults
            to ``yield_only_last_steps``.
        postproc (callable, optional): applied to each batch.
        total_dialog_turns (int): turns over the collector's life; ``-1`` never stops.
            Defaults to ``-1``.
        async_envs (bool, optional): an ``AsyncEnvPool``; not supported.
        replay_buffer (optional): batches are written there (``extend``) instead of yielded.
        reset_at_each_iter (bool): reset the env before each batch. Defaults to ``False``.
        flatten_data (bool, optional): ``[B * T]`` batches; defaults to ``True`` with a
            replay buffer.
        weight_updater (optional): see :class:`~rl.collectors.WeightUpdaterBase`.
        queue (optional): a ``queue.Queue`` batches are put into (exclusive with
            ``replay_buffer``).
        track_policy_version (bool): write the collector's ``policy_version`` (an int,
            :meth:`increment_version` raises it) into each turn. Defaults to ``False``.
        verbose (bool): log progress. Defaults to ``False``.

    Raises:
        TypeError: both or neither of ``policy`` / ``policy_factory``; no
            ``dialog_turns_per_batch`` without ``yield_completed_trajectories``;
            ``yield_only_last_steps`` without ``yield_completed_trajectories`` or with
            ``flatten_data``.
        RuntimeError: both a ``queue`` and a ``replay_buffer``.
        ValueError: completed trajectories from an env of more than one batch dim.
        NotImplementedError: ``async_envs=True``.
    """

    def __init__(
        self,
        env: Any,
        *,
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        policy_factory: Callable[[], Callable] | None = None,
        dialog_turns_per_batch: int | None = None,
        yield_only_last_steps: bool | None = None,
        yield_completed_trajectories: bool | None = None,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        total_dialog_turns: int = -1,
        async_envs: bool | None = None,
        replay_buffer: Any = None,
        reset_at_each_iter: bool = False,
        flatten_data: bool | None = None,
        weight_updater: Any = None,
        queue: Any = None,
        track_policy_version: bool = False,
        verbose: bool = False,
    ):
        if async_envs:
            raise NotImplementedError(
                "LLMCollector(async_envs=True): rl has no AsyncEnvPool; pass a batched "
                "ChatEnv (num_envs=...) instead (docs/migration/torchrl.md)"
            )
        if (policy is None) == (policy_factory is None):
            raise TypeError("LLMCollector takes exactly one of policy / policy_factory")
        if queue is not None and replay_buffer is not None:
            raise RuntimeError("LLMCollector takes a queue or a replay_buffer, not both")
        if queue is not None:
            replay_buffer = _QueueAsBuffer(queue)
        if yield_only_last_steps is None:
            yield_only_last_steps = False
        if yield_completed_trajectories is None:
            yield_completed_trajectories = yield_only_last_steps
        elif yield_only_last_steps and not yield_completed_trajectories:
            raise TypeError(
                "yield_only_last_steps=True requires yield_completed_trajectories=True (or None)"
            )
        if yield_only_last_steps and flatten_data is not None:
            raise TypeError("yield_only_last_steps cannot be True when flatten_data is passed")
        if dialog_turns_per_batch is None:
            if not yield_completed_trajectories:
                raise TypeError(
                    "dialog_turns_per_batch is required unless yield_completed_trajectories=True"
                )
            dialog_turns_per_batch = 1
        self.env = env() if callable(env) and not hasattr(env, "step") else env
        if yield_completed_trajectories and len(self.env.batch_size) != 1:
            raise ValueError(
                "yield_completed_trajectories needs an env with one batch dim, got "
                f"env.batch_size={tuple(self.env.batch_size)}"
            )
        self.policy = policy if policy is not None else policy_factory()
        self.frames_per_batch = int(dialog_turns_per_batch)
        self.total_frames = int(total_dialog_turns)
        self.split_trajs = False
        self.postproc = postproc
        self.replay_buffer = replay_buffer
        self.reset_at_each_iter = reset_at_each_iter
        self.flatten_data = replay_buffer is not None if flatten_data is None else flatten_data
        self.yield_completed_trajectories = yield_completed_trajectories
        self.yield_only_last_steps = yield_only_last_steps
        self.verbose = verbose
        self.track_policy_version = bool(track_policy_version)
        self._version = 0
        if weight_updater is not None:
            self.weight_updater = weight_updater
        self._init_base()
        self._shuttle: TensorDictBase | None = None
        n_envs = self.env.batch_size.numel()
        self._traj_ids = torch.arange(n_envs).reshape(self.env.batch_size)
        self._next_traj_id = n_envs
        self._queues = [deque() for _ in range(n_envs)] if yield_completed_trajectories else []
        self._completed: deque[TensorDictBase] = deque()

    # ------------------------------------------------------------------ TorchRL's names
    @property
    def total_dialog_turns(self) -> int:
        return self.total_frames

    @property
    def dialog_turns_per_batch(self) -> int:
        return self.frames_per_batch

    @property
    def policy_version(self) -> int | None:
        return self._version if self.track_policy_version else None

    def increment_version(self) -> None:
        """Raises the policy version written into the turns (after a weight update)."""
        self._version += 1

    def get_policy_model(self):
        """The policy's model (``policy.model``), where weight updates go."""
        return self.policy.model

    def update_policy_weights_(self, policy_or_weights: Any = None, **kwargs) -> None:
        """Writes new weights into the model the collector generates with, then raises the
        policy version.

        With a ``weight_updater`` the weights go through it (``None``: the updater's own
        ``weight_getter``, e.g. the trained model's parameters). Otherwise
        ``policy_or_weights`` (a module, a state dict or a TensorDict of parameters) is
        copied into :meth:`get_policy_model`; ``None`` copies nothing (the collector runs
        the trained model itself).

        Raises:
            KeyError: weights whose names are not the model's (naming the first).
        """
        worker_ids = kwargs.pop("worker_ids", None)
        if "policy_weights" in kwargs:  # TorchRL's older keyword
            policy_or_weights = kwargs.pop("policy_weights")
        if self.weight_updater is not None:
            self.weight_updater(policy_or_weights, worker_ids=worker_ids)
        elif policy_or_weights is not None:
            _copy_weights(self.get_policy_model(), policy_or_weights)
        self.increment_version()

    def set_postproc(self, postproc: Callable[[TensorDictBase], TensorDictBase]) -> None:
        if self.postproc is not None:
            raise RuntimeError("the LLMCollector already has a postproc")
        self.postproc = postproc

    # ------------------------------------------------------------------ collection
    def _turn(self) -> TensorDictBase:
        """One dialog turn of every conversation: the step's data (``[*B]``)."""
        if self._shuttle is None:
            self._shuttle = self.env.reset()
        data = self.policy(self._shuttle)
        data.set(("collector", "traj_ids"), self._traj_ids.clone())
        if self.track_policy_version:
            data.set("policy_version", torch.full(self.env.batch_size, self._version))
        data, next_root = self.env.step_and_maybe_reset(data)
        done = data.get(("next", "done")).reshape(self.env.batch_size)
        if bool(done.any()):
            count = int(done.sum())
            self._traj_ids = self._traj_ids.clone()
            self._traj_ids[done] = torch.arange(self._next_traj_id, self._next_traj_id + count)
            self._next_traj_id += count
        for key in ("collector", "policy_version"):
            if key in next_root.keys():
                next_root.del_(key)
        self._shuttle = next_root
        return data

    def _produce(self) -> TensorDictBase | None:
        if self.total_frames >= 0 and self._frames >= self.total_frames:
            return None
        self._pre_hook()
        if self.yield_completed_trajectories:
            return self._completed_batch()
        if self.reset_at_each_iter:
            self._shuttle = None
        turns, count = [], 0
        while count < self.frames_per_batch:
            turn = self._turn()
            turns.append(turn)
            count += turn.numel()
        batch = lazy_stack(turns, -1)
        return batch.reshape(-1) if self.flatten_data else batch

    def _completed_batch(self) -> TensorDictBase:
        count = sum(t.numel() for t in self._completed)
        while count < self.frames_per_batch:
            turn = self._turn()
            done = turn.get(("next", "done")).reshape(-1)
            for i, row in enumerate(turn.unbind(0)):
                self._queues[i].append(row)
                if bool(done[i]):
                    queue = self._queues[i]
                    rows = [queue[-1]] if self.yield_only_last_steps else list(queue)
                    self._frames += len(queue) - len(rows)  # turns run but not yielded
                    self._completed.append(lazy_stack(rows, -1))
                    count += len(rows)
                    queue.clear()
        out, taken = [], 0
        while taken < self.frames_per_batch:
            traj = self._completed.popleft()
            out.append(traj)
            taken += traj.numel()
        return out[0] if len(out) == 1 else lazy_stack([r for t in out for r in t.unbind(0)], -1)

    def _close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None and not getattr(self.env, "is_closed", False):
            close()


def _copy_weights(model: torch.nn.Module, weights: Any) -> None:
    """Copies ``weights`` (a module, a state dict or a TensorDict) into ``model`` in place."""
    if isinstance(weights, torch.nn.Module):
        weights = weights.state_dict()
    elif isinstance(weights, TensorDictBase):
        weights = weights.flatten_keys(".").to_dict()
    params = model.state_dict()
    for name in weights:
        if name not in params:
            raise KeyError(
                f"the weights hold {name!r}, which the collector's model does not have "
                f"(it has {len(params)} entries, e.g. {next(iter(params), None)!r})"
            )
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)
