"""MultiStepActorWrapper: runs an actor that predicts a chunk of actions, one action per step."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey, unravel_key

__all__ = ["MultiStepActorWrapper"]

_PARTIAL_INIT = "Cannot initialize the wrapper with partial is_init signal"


def _with_last(key: NestedKey, last: str) -> NestedKey:
    return (*key[:-1], last) if isinstance(key, tuple) else last


def _with_suffix(key: NestedKey, suffix: str) -> NestedKey:
    return (*key[:-1], key[-1] + suffix) if isinstance(key, tuple) else key + suffix


def _last(key: NestedKey) -> str:
    return key[-1] if isinstance(key, tuple) else key


def _is_vla_chunk(key: NestedKey) -> bool:
    return isinstance(key, tuple) and key[-2:] == ("vla_action", "chunk")


def _is_chunk(key: NestedKey) -> bool:
    return _is_vla_chunk(key) or _last(key).endswith("_chunk")


def _action_key_of(chunk_key: NestedKey) -> NestedKey:
    """The env action a chunk key feeds: ``"x_chunk" -> "x"``, ``("vla_action", "chunk") -> "action"``."""
    if _is_vla_chunk(chunk_key):
        return "action"
    last = _last(chunk_key)
    if last.endswith("_chunk") and last != "_chunk":
        return _with_last(chunk_key, last[: -len("_chunk")])
    return chunk_key


def _as_key_list(value) -> list[NestedKey]:
    if not isinstance(value, list):
        value = [value]
    return [unravel_key(key) for key in value]


class MultiStepActorWrapper(TensorDictModuleBase):
    """Plays the actions of a chunk-predicting actor one per env step.

    The wrapped actor writes, for each batch element, a chunk of actions with an extra
    time dim right after the tensordict's batch dims (``[*B, n_steps, *action_shape]``).
    The wrapper caches the chunk and writes its ``k``-th action at the action key on the
    ``k``-th step, calling the actor again only when the cache is used up (open loop),
    every ``replan_interval`` steps (receding horizon; ``1`` is closed loop), or when an
    env was reset (``init_key``, from :class:`~rl.envs.InitTracker`). A per-element
    step counter is kept next to the init key (``"counter"``); after a partial reset
    only the reset elements are re-planned.

    Keys: the chunk keys are, by default, ``("vla_action", "chunk")`` or the actor's
    out_keys ending in ``"_chunk"``, else its out_keys ending in ``"action"``. When a
    chunk key is also the action key, the chunk is cached at ``"<action>_orig"``;
    otherwise the chunk key itself is the cache.

    Args:
        actor (TensorDictModuleBase): the chunk-predicting actor.
        n_steps (int, optional): the chunk length, checked at each call. ``None``:
            whatever the actor returns (the cache then wraps around unless
            ``replan_interval`` is set).

    Keyword Args:
        action_keys (list of NestedKey, optional): the env's action keys (default:
            derived from the chunk keys, e.g. ``("vla_action", "chunk") -> "action"``).
        chunk_keys (list of NestedKey, optional): the actor outputs holding chunks.
        init_key (NestedKey, optional): the reset indicator. Defaults to ``"is_init"``.
        keep_dim (bool): keep a time dim of size 1 on the emitted action. Defaults to
            ``False``.
        replan_interval (int, optional): call the actor after this many actions, in
            ``[1, n_steps]``. Defaults to ``None`` (use the whole chunk).

    Raises:
        ValueError: ``init_key`` is a list; ``replan_interval`` out of ``[1, n_steps]``;
            action and chunk keys of different lengths.
        KeyError: the input has no ``init_key`` entry.
        RuntimeError: no cached chunk for elements that are not being reset; a chunk
            whose length is not ``n_steps`` or is shorter than ``replan_interval``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> chunk = TensorDictModule(
        ...     lambda obs: obs.unsqueeze(-2) + torch.arange(3.0).view(3, 1),
        ...     in_keys=["observation"], out_keys=["action"],
        ... )
        >>> actor = MultiStepActorWrapper(chunk, n_steps=3)
        >>> td = TensorDict(observation=torch.zeros(2, 1), is_init=torch.ones(2, 1, dtype=torch.bool), batch_size=[2])
        >>> played = []
        >>> for _ in range(4):
        ...     td = actor(td)
        ...     played.append(td["action"][0, 0].item())
        ...     td["is_init"] = torch.zeros(2, 1, dtype=torch.bool)
        >>> played
        [0.0, 1.0, 2.0, 0.0]
    """

    def __init__(
        self,
        actor: TensorDictModuleBase,
        n_steps: int | None = None,
        *,
        action_keys: list[NestedKey] | None = None,
        chunk_keys: list[NestedKey] | None = None,
        init_key: NestedKey | None = None,
        keep_dim: bool = False,
        replan_interval: int | None = None,
    ) -> None:
        if isinstance(init_key, list):
            raise ValueError(f"Only a single init_key can be passed, got {init_key!r}")
        if replan_interval is not None:
            replan_interval = int(replan_interval)
            if replan_interval < 1 or (n_steps is not None and replan_interval > n_steps):
                raise ValueError(
                    f"replan_interval must be in [1, n_steps={n_steps}], got {replan_interval}"
                )
        super().__init__()
        self.actor = actor
        self.n_steps = n_steps
        self.keep_dim = keep_dim
        self.replan_interval = replan_interval
        self.init_key = unravel_key("is_init" if init_key is None else init_key)
        self._given_action_keys = None if action_keys is None else _as_key_list(action_keys)
        self._given_chunk_keys = None if chunk_keys is None else _as_key_list(chunk_keys)

    # ------------------------------------------------------------------ keys
    def _actor_action_keys(self) -> list[NestedKey]:
        return [key for key in self.actor.out_keys if _last(key) == "action"]

    @property
    def chunk_keys(self) -> list[NestedKey]:
        """The actor outputs holding chunks."""
        if self._given_chunk_keys is not None:
            return self._given_chunk_keys
        out_keys = list(self.actor.out_keys)
        found = [key for key in out_keys if _is_vla_chunk(key)] or [
            key for key in out_keys if _is_chunk(key)
        ]
        return found or self._actor_action_keys()

    @chunk_keys.setter
    def chunk_keys(self, value) -> None:
        self._given_chunk_keys = None if value is None else _as_key_list(value)

    @property
    def action_keys(self) -> list[NestedKey]:
        """The env action keys the wrapper writes."""
        if self._given_action_keys is not None:
            return self._given_action_keys
        chunk_keys = self.chunk_keys
        if chunk_keys == self._actor_action_keys():
            return chunk_keys
        return [_action_key_of(key) for key in chunk_keys]

    @action_keys.setter
    def action_keys(self, value) -> None:
        self._given_action_keys = None if value is None else _as_key_list(value)

    def _key_triples(self) -> list[tuple[NestedKey, NestedKey, NestedKey]]:
        """``(action_key, chunk_key, cache_key)`` for each action."""
        action_keys, chunk_keys = self.action_keys, self.chunk_keys
        if len(action_keys) != len(chunk_keys):
            raise ValueError(
                "action_keys and chunk_keys must have the same length, got "
                f"{action_keys} and {chunk_keys}"
            )
        return [
            (action, chunk, _with_suffix(action, "_orig") if chunk == action else chunk)
            for action, chunk in zip(action_keys, chunk_keys, strict=True)
        ]

    @property
    def counter_key(self) -> NestedKey:
        """The per-element step counter, next to the init key."""
        return _with_last(self.init_key, "counter")

    @property
    def in_keys(self) -> list[NestedKey]:
        return [*self.actor.in_keys, self.init_key]

    @property
    def out_keys(self) -> list[NestedKey]:
        keys = list(self.actor.out_keys)
        triples = self._key_triples()
        for key in [*(t[0] for t in triples), *(t[2] for t in triples), self.counter_key]:
            if key not in keys:
                keys.append(key)
        return keys

    # --------------------------------------------------------------- forward
    def _replan(self, tensordict: TensorDictBase, replan: torch.Tensor) -> None:
        """Call the actor on the elements in ``replan`` and refresh their cached chunks."""
        everyone = bool(replan.all())
        mask = replan.reshape(tensordict.shape)
        output = self.actor(tensordict.copy() if everyone else tensordict[mask])
        for _, chunk_key, cache_key in self._key_triples():
            computed = output.get(chunk_key)
            cached = tensordict.get(cache_key, None)
            if cached is None:
                if not everyone:
                    raise RuntimeError(f"{_PARTIAL_INIT}: no cached chunk at {cache_key!r}")
                if isinstance(cache_key, tuple) and cache_key == chunk_key and len(cache_key) > 1:
                    # keep the actor's whole group (e.g. a VLA action container)
                    tensordict.set(cache_key[:-1], output.get(cache_key[:-1]))
                    continue
                tensordict.set(cache_key, computed)
            elif everyone:
                tensordict.set(cache_key, computed)
            else:
                refreshed = cached.clone()
                refreshed[mask] = computed.to(refreshed.dtype)
                tensordict.set(cache_key, refreshed)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        is_init = tensordict.get(self.init_key, None)
        if is_init is None:
            raise KeyError(
                f"No init key was passed to the batched action wrapper: {self.init_key!r} is "
                "missing (add an InitTracker transform to the env)"
            )
        counter = tensordict.get(self.counter_key, None)
        if counter is None:
            counter = is_init.to(torch.int32)
        interval = self.replan_interval if self.replan_interval is not None else self.n_steps
        replan = is_init if interval is None else is_init | (counter >= interval)
        if replan.any():
            counter = counter.masked_fill(replan, 0)
            self._replan(tensordict, replan)
        counter = counter + 1
        tensordict.set(self.counter_key, counter)
        dim = tensordict.ndim
        for action_key, _, cache_key in self._key_triples():
            chunk = tensordict.get(cache_key, None)
            if chunk is None:
                raise RuntimeError(f"{_PARTIAL_INIT}: no cached chunk at {cache_key!r}")
            length = chunk.shape[dim]
            if self.n_steps is not None and length != self.n_steps:
                raise RuntimeError(
                    f"The action's time dimension (dim={dim}) doesn't match the n_steps "
                    f"argument ({self.n_steps}): the chunk at {cache_key!r} has shape "
                    f"{tuple(chunk.shape)}"
                )
            if self.replan_interval is not None and length < self.replan_interval:
                raise RuntimeError(
                    f"replan_interval ({self.replan_interval}) exceeds the actor's action "
                    f"chunk length ({length}) at {cache_key!r}"
                )
            step = (counter - 1).to(torch.long).reshape(chunk.shape[:dim])
            if self.n_steps is None and self.replan_interval is None:
                step = step.remainder(length)
            index = step.reshape(*step.shape, 1, *([1] * (chunk.ndim - dim - 1)))
            action = chunk.gather(dim, index.expand(*step.shape, 1, *chunk.shape[dim + 1 :]))
            tensordict.set(action_key, action if self.keep_dim else action.squeeze(dim))
        return tensordict
