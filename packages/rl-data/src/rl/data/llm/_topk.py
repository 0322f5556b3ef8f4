"""``TopKRewardSelector``: a replay-buffer transform that keeps the best answers to each prompt."""

from __future__ import annotations

import logging
from collections import defaultdict, deque

import torch
from tensordict import NestedKey, TensorDictBase

__all__ = ["TopKRewardSelector"]

logger = logging.getLogger(__name__)


class TopKRewardSelector:
    """Writes only the ``topk_size`` best of the last ``total_dialog_turns`` answers to a prompt.

    Appended to a replay buffer (``rb.append_transform(selector)``), it runs on what the
    buffer is given (:meth:`inv`) and leaves sampled batches unchanged. A written batch is
    cut into trajectories at its done flags; each trajectory joins the queue of its prompt
    (the string at ``prompt_key`` of its first step), which holds the last
    ``total_dialog_turns`` of them. Each time a queue is full, its steps are ranked by their
    mean reward (over the tokens of the step), those at or below the median are dropped, and
    the ``topk_size`` best of the rest (best first) are written. Nothing is written for a
    queue whose rewards are all equal. The queue is a sliding window, as TorchRL's: it is
    not emptied after a selection.

    Args:
        total_dialog_turns: how many answers to one prompt are ranked together.
        topk_size: how many of them are written at most (``<= total_dialog_turns``).
        prompt_key: the prompt string of each step.
        rewards_key: the reward of each step (``[*tokens, 1]`` or ``[1]``).
        done_key: the done flag of each step.
        verbose: log each selection (``logging.INFO``).

    Raises:
        ValueError: ``topk_size > total_dialog_turns``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict, lazy_stack
        >>> from rl.data import LazyStackStorage, ReplayBuffer
        >>> from rl.data.llm import TopKRewardSelector
        >>> rb = ReplayBuffer(storage=LazyStackStorage(50), batch_size=5)
        >>> _ = rb.append_transform(TopKRewardSelector(5, 3, prompt_key="text", verbose=False))
        >>> data = lazy_stack([
        ...     TensorDict({
        ...         ("next", "done"): torch.ones(1, 1, dtype=torch.bool),
        ...         ("next", "reward"): torch.full((i + 5, 1), float(i)),
        ...         "text": f"Prompt {i // 5}",
        ...     })
        ...     for i in range(10)
        ... ])
        >>> for chunk in data.chunk(5):
        ...     _ = rb.extend(chunk)
        >>> [float(r[0, 0]) for r in rb[:].get(("next", "reward"), as_list=True)]
        [4.0, 3.0, 9.0, 8.0]
    """

    def __init__(
        self,
        total_dialog_turns: int,
        topk_size: int,
        prompt_key: NestedKey = ("text", "prompt"),
        rewards_key: NestedKey = ("next", "reward"),
        done_key: NestedKey = ("next", "done"),
        verbose: bool = True,
    ):
        if topk_size > total_dialog_turns:
            raise ValueError(
                f"topk_size must be smaller than or equal to total_dialog_turns, got "
                f"topk_size={topk_size} and total_dialog_turns={total_dialog_turns}"
            )
        self.total_dialog_turns = total_dialog_turns
        self.topk_size = topk_size
        self.prompt_key = prompt_key
        self.rewards_key = rewards_key
        self.done_key = done_key
        self.in_keys = [prompt_key, rewards_key, done_key]
        self.verbose = verbose
        self.queues: defaultdict[str, deque] = defaultdict(lambda: deque(maxlen=total_dialog_turns))

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Sampled batches pass through unchanged."""
        return tensordict

    forward = __call__

    def inv(self, tensordict: TensorDictBase) -> TensorDictBase | None:
        """The selected steps of ``tensordict`` (``None`` when none is selected yet).

        ``tensordict`` holds whole trajectories: ``[T]`` (one or more trajectories one after
        the other, cut at the done flags) or ``[*B, T]`` (time last).

        Raises:
            RuntimeError: a trajectory does not end with a done step.
            TypeError: the prompt at ``prompt_key`` is not a string.
        """
        if tensordict.ndim == 1:
            selected = [self._push(traj) for traj in self._trajectories(tensordict)]
        else:
            if tensordict.ndim > 2:
                tensordict = tensordict.flatten(0, -2)
            selected = [self.inv(traj) for traj in tensordict.unbind(0)]
        selected = [td for td in selected if td is not None]
        return torch.cat(selected, 0) if selected else None

    def _trajectories(self, tensordict: TensorDictBase) -> list[TensorDictBase]:
        done = tensordict.get(self.done_key)
        done = done.reshape(done.shape[0], -1).any(-1)
        ends = (done.nonzero().squeeze(-1) + 1).tolist()
        if len(ends) <= 1:
            return [tensordict]
        sizes = torch.tensor([0, *ends]).diff().tolist()
        if ends[-1] < tensordict.shape[0]:
            sizes.append(tensordict.shape[0] - ends[-1])
        return list(tensordict.split(sizes, 0))

    def _push(self, traj: TensorDictBase) -> TensorDictBase | None:
        if not traj[-1].get(self.done_key).all():
            raise RuntimeError(
                f"TopKRewardSelector expects whole trajectories: the last step has "
                f"{self.done_key!r} False"
            )
        prompt = traj[0][self.prompt_key]
        if not isinstance(prompt, str):
            raise TypeError(
                f"TopKRewardSelector expects a string at prompt_key {self.prompt_key!r}, got "
                f"{type(prompt).__name__}"
            )
        queue = self.queues[prompt]
        queue.append(traj)
        if len(queue) < self.total_dialog_turns:
            return None
        steps = torch.cat(list(queue), 0)
        reward = self._aggregate_rewards([step.get(self.rewards_key) for step in steps.unbind(0)])
        if (reward == reward[0]).all():
            if self.verbose:
                logger.warning("All rewards are equal (%s) for prompt %r", reward[0], prompt)
            return None
        above = (reward > reward.median()).nonzero().squeeze(-1)
        if not above.numel():
            return None
        best = reward[above].topk(min(self.topk_size, above.numel()))
        if self.verbose:
            logger.info("Selected rewards %s for prompt %r", best.values.tolist(), prompt)
        return steps[above[best.indices]]

    def _aggregate_rewards(self, rewards: list[torch.Tensor]) -> torch.Tensor:
        """One score per step: the mean of its reward over its tokens (``[N]``).

        Override to rank the steps otherwise.
        """
        return torch.stack([r.float().mean() for r in rewards])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(total_dialog_turns={self.total_dialog_turns}, "
            f"topk_size={self.topk_size}, prompt_key={self.prompt_key!r})"
        )
