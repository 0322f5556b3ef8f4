"""ValueEstimatorBase: what the estimator modules share (keys, value-network calls)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields

import torch
from tensordict import TensorDictBase, unravel_key
from tensordict.nn import TensorDictModuleBase, composite_lp_aggregate, dispatch
from tensordict.utils import NestedKey, expand_as_right

__all__ = ["ValueEstimatorBase"]


@contextlib.contextmanager
def _held_out(network: torch.nn.Module | None) -> Iterator[None]:
    """Run ``network`` without giving its parameters gradients (inputs still get them).

    Nothing to do where no gradient is recorded (``torch.no_grad()``): the parameters
    are left untouched, which also keeps the estimator traceable by ``torch.compile``."""
    if network is None or not torch.is_grad_enabled():
        yield
        return
    params = [p for p in network.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def _call(network, data: TensorDictBase, params: TensorDictBase | None) -> TensorDictBase:
    if params is None:
        return network(data)
    with params.to_module(network):
        return network(data)


def _positive_int_or_none(value, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or None, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _standardize(
    x: torch.Tensor,
    eps: float,
    groups: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    exclude_dims: tuple[int, ...] = (),
) -> torch.Tensor:
    """``x`` with zero mean and unit (unbiased) std, over all its entries or per group.

    Args:
        x: the values, ``[*B, T, *F]``.
        eps: the smallest std divided by.
        groups: integer ids whose leading dims match ``x`` (trailing dims broadcast):
            each distinct id is standardized on its own.
        mask: the entries that count in the statistics (broadcast to ``x``); the others
            are standardized with them but do not move them.
        exclude_dims: dims of ``x`` kept apart (negative ones count from the end): each
            index along them is standardized on its own (the agents of a multi-agent
            advantage).
    """
    excluded = sorted({d % x.ndim for d in exclude_dims})
    # the reduction over all dims but the excluded ones
    stats = (
        {"dim": [d for d in range(x.ndim) if d not in excluded], "keepdim": True}
        if excluded
        else {}
    )
    if groups is None and mask is None:
        return (x - x.mean(**stats)) / x.std(**stats).clamp_min(eps)
    if groups is None:
        w = mask.expand_as(x).to(x.dtype)
        count = w.sum(**stats).clamp_min(1)
        loc = (x * w).sum(**stats) / count
        # the masked statistics are the population ones, as TorchRL's
        scale = (((x - loc).square() * w).sum(**stats) / count).sqrt().clamp_min(eps)
        return (x - loc) / scale
    while groups.ndim < x.ndim:
        groups = groups.unsqueeze(-1)
    if groups.ndim > x.ndim:
        raise ValueError(
            f"group ids of shape {tuple(groups.shape)} cannot index values of shape "
            f"{tuple(x.shape)}"
        )
    groups = groups.expand(x.shape)
    for d in excluded:  # one group per (id, index)
        n = x.shape[d]
        index = torch.arange(n, device=x.device).reshape(
            [-1 if i == d else 1 for i in range(x.ndim)]
        )
        groups = groups * n + index
    ids = groups.reshape(-1)
    flat = x.reshape(-1)
    w = torch.ones_like(flat) if mask is None else mask.expand(x.shape).reshape(-1).to(x.dtype)
    uniq, index = torch.unique(ids, return_inverse=True)
    n = uniq.numel()
    count = flat.new_zeros(n).index_add_(0, index, w)
    mean = flat.new_zeros(n).index_add_(0, index, flat * w) / count.clamp_min(1)
    centered = flat - mean[index]
    var = flat.new_zeros(n).index_add_(0, index, centered.square() * w) / (count - 1).clamp_min(1)
    return (centered / var.sqrt().clamp_min(eps)[index]).reshape(x.shape)


def _next_key(key: NestedKey) -> tuple[str, ...]:
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


def _finite_next(nxt: TensorDictBase, root: TensorDictBase) -> TensorDictBase:
    """``nxt`` with its NaN entries replaced by the root's values at the same place.

    A next observation may be NaN where a trajectory ends (a compact buffer rebuilt by
    ``NextStateReconstructor``); ``V(NaN)`` would reach every return through ``0 * NaN``.
    At a terminated step the stand-in's value is masked out; at a truncated one it
    approximates the bootstrap by ``V(s_t)`` (TorchRL's choice).
    """
    pairs = []  # (key, value, stand-in) of the floating entries the root also holds
    for key in list(nxt.keys(True, True)):
        value = nxt.get(key)
        if not value.is_floating_point():
            continue
        stand_in = root.get(key, None)
        if stand_in is not None and stand_in.shape == value.shape:
            pairs.append((key, value, stand_in))
    # eagerly, one reduction per entry and a single read of the result (a NaN anywhere
    # makes a sum NaN): no copy unless a NaN is there; a compiled graph takes the
    # branchless form
    if not pairs or (
        not torch.compiler.is_compiling()
        and not bool(torch.stack([value.sum().float() for _, value, _ in pairs]).isnan().any())
    ):
        return nxt
    for key, value, stand_in in pairs:
        nxt.set(key, torch.where(torch.isnan(value), stand_in, value))  # nxt is a selection
    return nxt


class ValueEstimatorBase(TensorDictModuleBase):
    """Base class of the value estimators: reads TensorDict keys, writes advantage and target.

    An estimator computes ``V(s)`` and ``V(s')`` with its ``value_network`` (or reads them
    from ``value`` and ``("next", value)`` when ``value_network=None``, as off-policy
    losses use it), then calls its function from :mod:`rl.objectives.value.functional`.

    Keyword Args:
        value_network (TensorDictModule or None): writes ``tensor_keys.value``.
        shifted (bool): compute ``V(s)`` and ``V(s')`` in a single call of the value network
            on the root observations plus the next observations at trajectory ends (and at
            the last step). Exact for feed-forward networks. Defaults to ``False``.
        differentiable (bool): keep gradients through the estimate (``forward`` runs under
            ``torch.set_grad_enabled(differentiable)``). Defaults to ``False``.
        skip_existing (bool, optional): reuse values already in the input instead of
            calling the value network. Defaults to ``False``.
        advantage_key, value_target_key, value_key (NestedKey, optional): shortcuts for
            :meth:`set_keys`.
        device (torch.device, optional): device of the hyperparameter buffers.
        deactivate_vmap (bool): accepted for TorchRL compatibility; values are computed
            without vmap here (root and next inputs are stacked into one call).
        time_dim (int, optional): the time dimension of the input TensorDict; defaults to
            the dimension named ``"time"`` if any, else the last one.
        value_chunk_size (int, optional): call the value network on chunks of at most this
            many entries along ``value_chunk_dim`` (bounds its peak memory; same values).
        num_chunks (int, optional): call it on this many chunks instead (at most one per
            entry); exclusive with ``value_chunk_size``. ``num_chunk`` is an alias.
        value_chunk_dim (int): the batch dimension the chunks cut. Defaults to ``0``.
        shifted_budget (int): with ``shifted=True``, how many value-network slots each
            time row has beyond its ``T`` steps, as TorchRL: a step inside the rollout
            where a trajectory is truncated (done, not terminated) needs one more slot for
            its true next observation, and the rollout's last step one. Steps whose slots
            do not fit in ``T + shifted_budget`` are dropped: their advantage and value
            target are ``0``, the last step that fits bootstraps from its next value, and
            the boolean ``"shifted_valid"`` mask (``[*B, T]``) is written into the input.
            ``1`` (the default) keeps every step of rollouts without inner truncations; a
            budget above the number of truncations of each row keeps all steps.
        group_key (NestedKey, optional): an integer entry of the input (one id per batch
            element, e.g. a task or prompt id): the standardizations (``average_gae``,
            ``average_rewards``, ``average_adv``) are done within each group instead of
            over the whole batch. Defaults to ``None``.

    Raises:
        ValueError: both ``value_chunk_size`` and ``num_chunks`` given, ``num_chunks`` and
            ``num_chunk`` disagreeing, a chunk option or ``shifted_budget`` below 1.
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written; remap them with :meth:`ValueEstimatorBase.set_keys`.

        Attributes:
            advantage: where the advantage is written. Defaults to ``"advantage"``.
            value_target: where the value target is written. Defaults to ``"value_target"``.
            value: the state value written by the value network. Defaults to ``"state_value"``.
            reward, done, terminated: read under ``"next"``.
            steps_to_next_obs: number of steps to the next observation (multi-step
                returns discount by ``gamma ** steps``). Defaults to ``"steps_to_next_obs"``.
            sample_log_prob: log-probability of the collected action (V-trace); defaults to
                ``"action_log_prob"`` (``"sample_log_prob"`` under
                ``tensordict.nn.set_composite_lp_aggregate(True)``), as TorchRL. A list of
                keys (a composite action's per-head log-probs) is summed.
        """

        advantage: NestedKey = "advantage"
        value_target: NestedKey = "value_target"
        value: NestedKey = "state_value"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        steps_to_next_obs: NestedKey = "steps_to_next_obs"
        sample_log_prob: NestedKey | list[NestedKey] | None = None

        def __post_init__(self):
            if self.sample_log_prob is None:  # as tensordict's probabilistic modules name it
                aggregate = composite_lp_aggregate(nowarn=True)
                self.sample_log_prob = "sample_log_prob" if aggregate else "action_log_prob"

    default_keys = _AcceptedKeys

    @classmethod
    def for_loss(cls, loss_module, **hyperparams):
        """The estimator for ``loss_module`` (what :func:`build_value_estimator` calls).

        ``value_network`` defaults to the loss's ``critic_network``, else its
        ``value_network``; the other ``hyperparams`` go to the constructor.
        """
        if "value_network" not in hyperparams:
            network = getattr(loss_module, "critic_network", None)
            if network is None:
                network = getattr(loss_module, "value_network", None)
            hyperparams["value_network"] = network
        return cls(**hyperparams)

    def __init__(
        self,
        *,
        value_network: TensorDictModuleBase | None,
        shifted: bool = False,
        differentiable: bool = False,
        skip_existing: bool | None = None,
        advantage_key: NestedKey | None = None,
        value_target_key: NestedKey | None = None,
        value_key: NestedKey | None = None,
        device: torch.device | None = None,
        deactivate_vmap: bool = False,
        time_dim: int | None = None,
        value_chunk_size: int | None = None,
        num_chunks: int | None = None,
        num_chunk: int | None = None,
        value_chunk_dim: int = 0,
        shifted_budget: int = 1,
        group_key: NestedKey | None = None,
    ) -> None:
        super().__init__()
        if isinstance(shifted_budget, bool) or not isinstance(shifted_budget, int):
            raise TypeError(f"shifted_budget must be an int, got {shifted_budget!r}")
        if shifted_budget < 1:
            raise ValueError(f"shifted_budget must be >= 1, got {shifted_budget}")
        self.shifted_budget = shifted_budget
        self.group_key = unravel_key(group_key) if group_key is not None else None
        value_chunk_size = _positive_int_or_none(value_chunk_size, "value_chunk_size")
        num_chunks = _positive_int_or_none(num_chunks, "num_chunks")
        num_chunk = _positive_int_or_none(num_chunk, "num_chunk")
        if num_chunk is not None:
            if num_chunks is not None and num_chunks != num_chunk:
                raise ValueError(
                    f"num_chunks and num_chunk cannot both be set to different values, got "
                    f"num_chunks={num_chunks} and num_chunk={num_chunk}"
                )
            num_chunks = num_chunk
        if value_chunk_size is not None and num_chunks is not None:
            raise ValueError(
                f"value_chunk_size and num_chunks cannot both be set, got "
                f"value_chunk_size={value_chunk_size} and num_chunks={num_chunks}"
            )
        if isinstance(value_chunk_dim, bool) or not isinstance(value_chunk_dim, int):
            raise TypeError(f"value_chunk_dim must be an int, got {value_chunk_dim!r}")
        self.value_chunk_size = value_chunk_size
        self.num_chunks = num_chunks
        self.value_chunk_dim = value_chunk_dim
        if not isinstance(shifted, bool):
            raise ValueError(f"shifted must be a boolean, got {shifted!r}")
        self._device = torch.device(device) if device is not None else torch.get_default_device()
        # Not a submodule: the network belongs to the loss; registering it here would
        # list its parameters twice in loss.parameters().
        self.__dict__["value_network"] = value_network
        self.shifted = shifted
        self.differentiable = differentiable
        self.skip_existing = bool(skip_existing)
        self.deactivate_vmap = deactivate_vmap
        self.time_dim = time_dim
        self._tensor_keys = self._AcceptedKeys()
        keys = {"advantage": advantage_key, "value_target": value_target_key, "value": value_key}
        keys = {k: v for k, v in keys.items() if v is not None}
        if keys:
            self.set_keys(**keys)

    # ------------------------------------------------------------------ keys
    @property
    def tensor_keys(self) -> _AcceptedKeys:
        return self._tensor_keys

    def set_keys(self, **kwargs: NestedKey) -> None:
        """Remap the keys read and written (``advantage=``, ``value=``, ``reward=``, ...).

        ``value_key=`` style names (with the ``_key`` suffix) are accepted too.

        Raises:
            KeyError: unknown name, or a ``value`` key the value network does not write.
            ValueError: a key that is ``None`` or not a (nested) string key.
        """
        valid = [f.name for f in fields(self._AcceptedKeys)]
        conf = asdict(self._tensor_keys)
        for name, key in kwargs.items():
            field = name[: -len("_key")] if name.endswith("_key") and name not in valid else name
            if field not in valid:
                raise KeyError(
                    f"{name!r} is not a key of {type(self).__name__}; valid names are {valid}"
                )
            if field == "sample_log_prob" and isinstance(key, list):
                # the per-head log-probs of a composite distribution (actor.log_prob_keys)
                if not key or not all(isinstance(k, (str, tuple)) for k in key):
                    raise ValueError(
                        f"{name} must be a key or a non-empty list of keys, got {key!r}"
                    )
                conf[field] = [unravel_key(k) for k in key]
                continue
            if key is None or not isinstance(key, (str, tuple)):
                raise ValueError(f"{name} must be a str or a tuple of str, got {key!r}")
            key = unravel_key(key)
            out_keys = getattr(self.value_network, "out_keys", None)
            if field == "value" and out_keys is not None and key not in out_keys:
                raise KeyError(
                    f"value key {key!r} is not written by the value network (its out_keys are {out_keys})"
                )
            conf[field] = key
        self._tensor_keys = self._AcceptedKeys(**conf)

    @property
    def advantage_key(self) -> NestedKey:
        return self.tensor_keys.advantage

    @property
    def value_key(self) -> NestedKey:
        return self.tensor_keys.value

    @property
    def value_target_key(self) -> NestedKey:
        return self.tensor_keys.value_target

    @property
    def reward_key(self) -> NestedKey:
        return self.tensor_keys.reward

    @property
    def done_key(self) -> NestedKey:
        return self.tensor_keys.done

    @property
    def terminated_key(self) -> NestedKey:
        return self.tensor_keys.terminated

    @property
    def in_keys(self) -> list[NestedKey]:
        net_keys = list(getattr(self.value_network, "in_keys", []) or [])
        k = self.tensor_keys
        keys = [
            *net_keys,
            *(_next_key(x) for x in (k.reward, k.done, k.terminated)),
            *(_next_key(x) for x in net_keys),
        ]
        if self.group_key is not None and self.group_key not in keys:
            keys.append(self.group_key)
        return keys

    @property
    def out_keys(self) -> list[NestedKey]:
        return [self.tensor_keys.advantage, self.tensor_keys.value_target]

    # ------------------------------------------------------------ data access
    def _require(self, tensordict: TensorDictBase, key: NestedKey, name: str) -> torch.Tensor:
        value = tensordict.get(key, None)
        if value is None:
            raise KeyError(
                f"{type(self).__name__} needs key {key!r}, which is missing from the input; "
                f"remap it with set_keys({name}=...)"
            )
        return value

    def _done_terminated(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """``("next", done)`` (required) and ``("next", terminated)`` (``done`` without one)."""
        k = self.tensor_keys
        done = self._require(tensordict, _next_key(k.done), "done")
        terminated = tensordict.get(_next_key(k.terminated), None)
        return done, done if terminated is None else terminated

    def _signals(
        self, tensordict: TensorDictBase
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        reward = self._require(tensordict, _next_key(self.tensor_keys.reward), "reward")
        return reward, *self._done_terminated(tensordict)

    def _group_ids(self, tensordict: TensorDictBase) -> torch.Tensor | None:
        """The ids under ``group_key`` (``None`` without one)."""
        if self.group_key is None:
            return None
        groups = tensordict.get(self.group_key, None)
        if groups is None:
            raise KeyError(
                f"group_key {self.group_key!r} is missing from the input; "
                f"{type(self).__name__} standardizes within its groups"
            )
        return groups

    def _shifted_valid(self, tensordict: TensorDictBase, time_dim: int) -> torch.Tensor:
        """Which steps fit in the ``T + shifted_budget`` slots of the shifted call.

        Step ``t`` sits at slot ``t + r`` (``r``: truncations inside the rollout before
        ``t``) and its next value at the next slot.
        """
        done, terminated = self._done_terminated(tensordict)
        batch = tensordict.batch_size
        done = done.reshape(*batch, -1).any(-1)
        terminated = terminated.reshape(*batch, -1).any(-1)
        reset = (done & ~terminated).transpose(time_dim, -1)
        steps = reset.shape[-1]
        resets = reset.long()
        before = torch.cumsum(resets, -1) - resets  # resets strictly before each step
        slot = torch.arange(steps, device=reset.device) + before
        return (slot + 1 < steps + self.shifted_budget).transpose(time_dim, -1)

    @staticmethod
    def _last_valid(valid: torch.Tensor, time_dim: int) -> torch.Tensor:
        """The last valid step of each row, where later steps are dropped."""
        valid = valid.transpose(time_dim, -1)
        following = torch.cat([valid[..., 1:], valid.new_ones(*valid.shape[:-1], 1)], -1)
        return (valid & ~following).transpose(time_dim, -1)

    def _cut_at_valid(
        self, tensordict: TensorDictBase, valid: torch.Tensor | None, time_dim: int
    ) -> TensorDictBase:
        """A shallow copy whose last valid step is done and not terminated (it bootstraps)."""
        if valid is None:
            return tensordict
        k = self.tensor_keys
        last = self._last_valid(valid, time_dim)
        done, terminated = self._done_terminated(tensordict)
        mask = expand_as_right(last, done)
        out = tensordict.copy()
        out.set(_next_key(k.done), done.masked_fill(mask, True))
        out.set(_next_key(k.terminated), terminated.masked_fill(mask, False))
        return out

    def _gamma(self, tensordict: TensorDictBase, reward: torch.Tensor):
        gamma = self.gamma
        if gamma.device != reward.device:
            gamma = gamma.to(reward.device)
        steps = tensordict.get(self.tensor_keys.steps_to_next_obs, None)
        if steps is not None:
            gamma = gamma ** steps.view_as(reward)
        return gamma

    def _time_dim(self, tensordict: TensorDictBase, time_dim: int | None) -> int:
        if tensordict.batch_dims < 1:
            raise RuntimeError(
                f"{type(self).__name__} expects a TensorDict with a time dimension, got batch_size "
                f"{tuple(tensordict.batch_size)}"
            )
        if time_dim is None:
            time_dim = self.time_dim
        if time_dim is None:
            names = tensordict.names if tensordict._has_names() else []
            time_dim = names.index("time") if "time" in names else tensordict.batch_dims - 1
        return time_dim % tensordict.batch_dims

    def _values(
        self,
        tensordict: TensorDictBase,
        params: TensorDictBase | None,
        target_params: TensorDictBase | None,
        time_dim: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``V(s)`` and ``V(s')`` (detached), computed or read; both written into the input."""
        k = self.tensor_keys
        net = self.value_network
        existing = (tensordict.get(k.value, None), tensordict.get(_next_key(k.value), None))
        if net is None or (self.skip_existing and None not in existing):
            for key, v in zip((k.value, _next_key(k.value)), existing, strict=True):
                if v is None:
                    raise KeyError(
                        f"{type(self).__name__} has no value network and needs key {key!r}, which is "
                        "missing from the input; write it first or remap it with set_keys(value=...)"
                    )
            return existing[0], existing[1].detach()
        if params is not None:
            params = params.detach()
        with _held_out(net) if params is None else contextlib.nullcontext():
            if self.shifted:
                valid = self._shifted_valid(tensordict, time_dim)
                value, next_value = self._values_shifted(tensordict, params, time_dim, valid)
                tensordict.set("shifted_valid", valid)
            elif target_params is None or target_params is params:
                both = tensordict.select(*net.in_keys, strict=False)
                nxt = _finite_next(tensordict.get("next").select(*net.in_keys, strict=False), both)
                stacked = self._call_value_net(torch.stack([both, nxt], 0), params, lead=1)
                value, next_value = stacked.unbind(0)
            else:
                root = tensordict.select(*net.in_keys, strict=False)
                value = self._call_value_net(root, params)
                nxt = _finite_next(tensordict.get("next").select(*net.in_keys, strict=False), root)
                next_value = self._call_value_net(nxt, target_params.detach())
        tensordict.set(k.value, value)
        tensordict.set(_next_key(k.value), next_value)
        return value, next_value.detach()

    def _chunk_dim(self, data: TensorDictBase, lead: int = 0) -> int:
        ndim = data.batch_dims - lead
        if ndim < 1:
            raise ValueError("cannot split value-network inputs with no batch dimension")
        if not -ndim <= self.value_chunk_dim < ndim:
            raise ValueError(
                f"value_chunk_dim={self.value_chunk_dim} is out of range for value-network "
                f"inputs with batch size {tuple(data.batch_size[lead:])}"
            )
        return lead + self.value_chunk_dim % ndim

    def _split_value_net_input(
        self, data: TensorDictBase, dim: int | None = None
    ) -> tuple[TensorDictBase, ...]:
        """``data`` cut along ``dim`` (default: ``value_chunk_dim``) into the asked chunks."""
        dim = self._chunk_dim(data) if dim is None else dim
        size = data.shape[dim]
        if self.num_chunks is not None:
            n = min(self.num_chunks, size)
            return (data,) if n <= 1 else tuple(data.tensor_split(n, dim=dim))
        if self.value_chunk_size is None or size <= self.value_chunk_size:
            return (data,)
        return tuple(data.split(self.value_chunk_size, dim=dim))

    def _call_value_net(
        self,
        data: TensorDictBase,
        params: TensorDictBase | None,
        lead: int = 0,
        flat: bool = False,
    ) -> torch.Tensor:
        """The value network on ``data``, in chunks when ``value_chunk_size``/``num_chunks`` ask.

        ``lead`` leading dims added by the estimator (the root/next stack) do not count in
        ``value_chunk_dim``; a ``flat`` input (the shifted call) is cut along its only dim.
        """
        net = self.value_network
        key = self.tensor_keys.value
        if self.value_chunk_size is None and self.num_chunks is None:
            return _call(net, data, params).get(key)
        dim = 0 if flat else self._chunk_dim(data, lead)
        chunks = self._split_value_net_input(data, dim)
        return torch.cat([_call(net, c, params).get(key) for c in chunks], dim)

    def _values_shifted(self, tensordict, params, time_dim, valid):
        """One network call on the T root inputs plus the next inputs where a trajectory ends
        (and at the last step kept by ``valid``, which bootstraps there)."""
        net = self.value_network
        k = self.tensor_keys
        last = tensordict.batch_dims - 1
        td = tensordict if time_dim == last else tensordict.transpose(time_dim, last)
        done = self._require(td, _next_key(k.done), "done")
        ends = done.reshape(*td.batch_size, -1).any(-1).clone()
        ends[..., -1] = True
        last_valid = self._last_valid(valid, time_dim)
        ends |= last_valid if time_dim == last else last_valid.transpose(time_dim, last)
        root_td = td.select(*net.in_keys, strict=False)
        nxt = td.get("next").select(*net.in_keys, strict=False)
        for key in root_td.keys(True, True):
            # no next observation stored (a compact buffer): the root one stands in, as
            # for a NaN one; it only reaches the returns at the last step
            if nxt.get(key, None) is None:
                nxt.set(key, root_td.get(key))
        nxt = _finite_next(nxt, root_td)[ends]
        root = root_td.reshape(-1)
        # one flat batch of inputs: chunked along its only dimension
        out = self._call_value_net(torch.cat([root, nxt], 0), params, flat=True)
        n = root.shape[0]
        value = out[:n].reshape(*td.batch_size, *out.shape[1:])
        steps = value.shape[last]
        # V(s[t+1]) is the next root value inside a trajectory; at its end (and at the
        # last step) it is the value of the true next observation, computed above.
        next_value = torch.cat(
            [value.narrow(last, 1, steps - 1), value.narrow(last, steps - 1, 1)], dim=last
        )
        next_value[ends] = out[n:]
        if time_dim != last:
            value, next_value = (
                value.transpose(time_dim, last),
                next_value.transpose(time_dim, last),
            )
        return value, next_value

    def _next_value(
        self, tensordict: TensorDictBase, target_params: TensorDictBase | None
    ) -> torch.Tensor:
        """``V(s')`` for ``value_estimate``: the value network on ``"next"``, or the stored one."""
        net = self.value_network
        key = _next_key(self.tensor_keys.value)
        if net is None:
            return self._require(tensordict, key, "value")
        nxt = tensordict.get("next").select(*net.in_keys, strict=False)
        with _held_out(net) if target_params is None else contextlib.nullcontext():
            return self._call_value_net(nxt, target_params)

    # --------------------------------------------------------------- contract
    @dispatch
    def forward(
        self,
        tensordict: TensorDictBase,
        *,
        params: TensorDictBase | None = None,
        target_params: TensorDictBase | None = None,
        time_dim: int | None = None,
    ) -> TensorDictBase:
        """Write ``tensor_keys.advantage`` and ``tensor_keys.value_target`` into ``tensordict``.

        Args:
            tensordict (TensorDictBase): a ``[*B, T]`` batch with the value network's inputs
                at the root and under ``"next"``, and ``("next", reward/done/terminated)``.

        Keyword Args:
            params (TensorDictBase, optional): parameters for the value network on ``s``.
            target_params (TensorDictBase, optional): parameters for ``s'``; default ``params``.
            time_dim (int, optional): the time dimension of ``tensordict``.

        Returns:
            ``tensordict``, updated in place.
        """
        with torch.set_grad_enabled(self.differentiable and torch.is_grad_enabled()):
            time_dim = self._time_dim(tensordict, time_dim)
            value, next_value = self._values(tensordict, params, target_params, time_dim)
            valid = tensordict.get("shifted_valid", None)
            data = self._cut_at_valid(tensordict, valid, time_dim)
            advantage, target = self._estimate(data, value, next_value, time_dim)
        if valid is not None:  # the dropped steps of a shifted call carry no signal
            mask = expand_as_right(valid, advantage)
            advantage = advantage.masked_fill(~mask, 0)
            target = target.masked_fill(~mask, 0)
        tensordict.set(self.tensor_keys.advantage, advantage)
        tensordict.set(self.tensor_keys.value_target, target)
        return tensordict

    def value_estimate(
        self,
        tensordict: TensorDictBase,
        target_params: TensorDictBase | None = None,
        next_value: torch.Tensor | None = None,
        time_dim: int | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """The value target, from ``next_value`` when given, else from ``V(s')``.

        Args:
            tensordict (TensorDictBase): the batch (``("next", reward/done/terminated)``).
            target_params (TensorDictBase, optional): parameters of the value network for
                ``s'``.
            next_value (Tensor, optional): ``V(s')`` (or ``Q(s', a')``) computed by the
                caller; exclusive with running the value network.
            time_dim (int, optional): the time dimension of ``tensordict``.

        Returns:
            the value target, shaped like the reward.
        """
        time_dim = self._time_dim(tensordict, time_dim)
        if next_value is None:
            next_value = self._next_value(tensordict, target_params)
        return self._target(tensordict, next_value, time_dim)

    def _estimate(self, tensordict, value, next_value, time_dim):
        """``(advantage, value_target)``; the default is the target minus ``value``."""
        target = self._target(tensordict, next_value, time_dim)
        return target - value, target

    def _target(self, tensordict, next_value, time_dim):  # pragma: no cover - abstract
        raise NotImplementedError
