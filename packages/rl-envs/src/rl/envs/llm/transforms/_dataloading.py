"""``DataLoadingPrimer``: each reset draws its inputs (prompts, answers) from a dataloader;
``as_nested_tensor`` / ``as_padded_tensor``: two ways to stack rows of unequal length."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import torch
from tensordict import TensorDict, TensorDictBase, is_tensor_collection, lazy_stack

from rl.core import Composite

from ..._td_utils import make_composite_from_td
from ...transforms import RayTransform, TensorDictPrimer
from ...transforms._utils import reset_entry_mask

__all__ = ["DataLoadingPrimer", "RayDataLoadingPrimer", "as_nested_tensor", "as_padded_tensor"]


def as_nested_tensor(list_of_tensordicts: list[TensorDictBase]) -> TensorDictBase:
    """Stacks tensordicts into one whose tensors are jagged nested tensors.

    Args:
        list_of_tensordicts: ``N`` tensordicts of the same keys and batch size ``S``;
            their tensors may differ in their first non-batch dim.

    Returns:
        a tensordict of batch size ``[N, *S]`` whose entries are
        ``torch.nested`` tensors (``layout=torch.jagged``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.envs.llm import as_nested_tensor
        >>> tds = [TensorDict(a=torch.ones(2)), TensorDict(a=torch.ones(3))]
        >>> as_nested_tensor(tds)["a"].is_nested
        True
    """
    if not list_of_tensordicts:
        raise ValueError("as_nested_tensor needs at least one tensordict, got an empty list")
    first = list_of_tensordicts[0]

    def nest(*tensors):
        return torch.nested.as_nested_tensor(list(tensors), layout=torch.jagged)

    return first.apply(
        nest, *list_of_tensordicts[1:], batch_size=[len(list_of_tensordicts), *first.batch_size]
    )


def as_padded_tensor(
    list_of_tensordicts: list[TensorDictBase], dim: int = 0, stack_dim: int = 0
) -> TensorDictBase:
    """Stacks tensordicts into one of dense tensors, left-padding each tensor with zeros.

    Args:
        list_of_tensordicts: tensordicts of the same keys; their tensors may differ in
            size along ``dim``.
        dim (int): the (non-negative) dim padded to the longest size. Defaults to ``0``.
        stack_dim (int): the dim of the stack. Defaults to ``0``.

    Returns:
        a tensordict of dense tensors, zeros put before the shorter ones (left padding:
        every prompt ends where generation starts).

    Raises:
        ValueError: a negative ``dim``, or an empty list.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.envs.llm import as_padded_tensor
        >>> tds = [TensorDict(a=torch.tensor([1, 2])), TensorDict(a=torch.tensor([3]))]
        >>> as_padded_tensor(tds)["a"]
        tensor([[1, 2],
                [0, 3]])
    """
    if dim < 0:
        raise ValueError(f"as_padded_tensor pads along a non-negative dim, got dim={dim}")
    if not list_of_tensordicts:
        raise ValueError("as_padded_tensor needs at least one tensordict, got an empty list")
    first = list_of_tensordicts[0]

    def pad_and_stack(*tensors):
        width = max(t.size(dim) for t in tensors)
        padded = []
        for t in tensors:
            shape = list(t.shape)
            shape[dim] = width - t.size(dim)
            padded.append(torch.cat([t.new_zeros(shape), t], dim=dim))
        return torch.stack(padded, dim=stack_dim)

    batch_size = list(first.batch_size)
    batch_size.insert(dim, len(list_of_tensordicts))
    return first.apply(pad_and_stack, *list_of_tensordicts[1:], batch_size=batch_size)


def _row(fields: Mapping) -> TensorDictBase:
    """One dataset row as a tensordict of batch size ``()``: tensors and numbers as tensors,
    anything else (text, lists, dicts) as non-tensor data."""
    td = TensorDict(batch_size=())
    for key, value in fields.items():
        if isinstance(value, torch.Tensor):
            td.set(key, value)
        elif isinstance(value, (bool, int, float)):
            td.set(key, torch.tensor(value))
        else:
            td.set_non_tensor(key, value)
    return td


_STACK_METHODS = {"as_nested_tensor": as_nested_tensor, "as_padded_tensor": as_padded_tensor}


class DataLoadingPrimer(TensorDictPrimer):
    """Writes a dataloader's next rows into the reset input, before the base env resets.

    Each reset draws one row per sub-env being reset (``"_reset"`` mask; all of them
    otherwise), so a :class:`~rl.envs.llm.ChatEnv` finds its ``"query"`` (and a reward
    parser its ``"answer"``) in the tensordict. Batches from the dataloader are split into
    rows and queued; each row is served ``repeats`` times in a row (one prompt, several
    answers, as group-relative advantages need). The rows' entries are carried from step
    to step.

    Args:
        dataloader (iterable of mappings): yields dicts (or tensordicts) of batched
            fields. Restarted when it runs out.

    Keyword Args:
        dataloader_factory (callable, optional): builds the dataloader (exclusive with
            ``dataloader``).
        primers (Composite, optional): the specs of the fields; read from the first batch
            otherwise.
        stack_method (callable or str, optional): how rows are stacked:
            ``"as_nested_tensor"``, ``"as_padded_tensor"`` or a callable; defaults to
            ``tensordict.lazy_stack``.
        batch_size (int or torch.Size, optional): the number of rows per reset; defaults
            to the dataloader's ``batch_size``.
        repeats (int, optional): how many times each row is served in a row.
        device (torch.device, optional): where the rows are put.
        group_repeats (bool): multiply ``batch_size`` by ``repeats`` (all repeats of a
            row in one batch). Defaults to ``False``.
        use_ray_service (bool): serve the primer from a Ray actor: a
            :class:`RayDataLoadingPrimer` is returned. Defaults to ``False``.

    Raises:
        ValueError: both or neither of ``dataloader`` / ``dataloader_factory``; an
            unknown ``stack_method``; a batch size of more than one dim.
        TypeError: the dataloader yields something that is not a mapping.

    Examples:
        >>> from rl.envs.llm import ChatEnv, DataLoadingPrimer
        >>> rows = [{"query": ["hi", "yo"]}]
        >>> env = ChatEnv(batch_size=(2,)).append_transform(DataLoadingPrimer(rows, batch_size=(2,)))
        >>> list(env.reset()["query"])
        ['hi', 'yo']
    """

    def __new__(cls, *args: Any, use_ray_service: bool = False, **kwargs: Any):
        if use_ray_service and cls is DataLoadingPrimer:
            if args:
                kwargs["dataloader"] = args[0]
            return RayDataLoadingPrimer(**kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        dataloader: Iterable[Mapping[str, Any]] | None = None,
        *,
        dataloader_factory: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
        primers: Composite | None = None,
        stack_method: Callable | Literal["as_nested_tensor", "as_padded_tensor"] | None = None,
        batch_size: int | torch.Size | None = None,
        repeats: int | None = None,
        device: torch.device | None = None,
        group_repeats: bool = False,
        use_ray_service: bool = False,
    ):
        if (dataloader is None) == (dataloader_factory is None):
            raise ValueError(
                "DataLoadingPrimer takes exactly one of dataloader / dataloader_factory, got "
                f"{'both' if dataloader is not None else 'neither'}"
            )
        if dataloader_factory is not None:
            dataloader = dataloader_factory()
        self.__dict__["dataloader"] = dataloader
        self.__dict__["dataloader_factory"] = dataloader_factory
        self.repeats = int(repeats or 0)
        if batch_size is None:
            batch_size = getattr(dataloader, "batch_size", None) or ()
        if isinstance(batch_size, int):
            batch_size = (batch_size,) if batch_size else ()
        batch_size = torch.Size(batch_size)
        if len(batch_size) > 1:
            raise ValueError(f"batch_size must have at most one dim, got {tuple(batch_size)}")
        if self.repeats and group_repeats:
            batch_size = torch.Size([(batch_size[0] if batch_size else 1) * self.repeats])
        self.batch_size = batch_size
        self.group_repeats = group_repeats
        self.auto_batch_size = getattr(dataloader, "batch_size", 1) != 0
        if stack_method is None:
            stack_method = lazy_stack
        elif isinstance(stack_method, str):
            if stack_method not in _STACK_METHODS:
                raise ValueError(
                    f"stack_method={stack_method!r} is not one of {sorted(_STACK_METHODS)} "
                    "nor a callable"
                )
            stack_method = _STACK_METHODS[stack_method]
        elif not callable(stack_method):
            raise ValueError(f"stack_method must be a str or a callable, got {stack_method!r}")
        self.stack_method = stack_method
        self._device = device
        self.__dict__["_queue"] = deque()
        self.__dict__["_endless"] = None
        if primers is None:
            row = self._next_row()
            self._queue.appendleft(row)
            primers = make_composite_from_td(row, dynamic_shape=True, unsqueeze_null_shapes=False)
        self.data_keys = list(primers.keys(True, True))
        super().__init__(
            primers=primers,
            default_value=self._load_from_dataloader,
            single_default_value=True,
            call_before_env_reset=True,
        )

    @staticmethod
    def _endless_iter(obj):
        while True:
            empty = True
            for item in obj:
                empty = False
                yield item
            if empty:
                raise RuntimeError("the dataloader yielded nothing")

    def reset_dataloader(self) -> DataLoadingPrimer:
        """Empties the queue and restarts the dataloader (rebuilt by the factory, if any)."""
        self._queue.clear()
        if self.dataloader_factory is not None:
            self.__dict__["dataloader"] = self.dataloader_factory()
        self.__dict__["_endless"] = None
        return self

    @property
    def endless_dataloader(self):
        """An endless iterator over the dataloader (restarted each time it runs out)."""
        if self.__dict__["_endless"] is None:
            self.__dict__["_endless"] = self._endless_iter(self.dataloader)
        return self.__dict__["_endless"]

    def __getstate__(self):
        # a copy (clone, pickle) restarts its own iterator over the same dataloader
        state = super().__getstate__()
        state["_endless"] = None
        return state

    # ------------------------------------------------------------------ loading
    def _next_row(self) -> TensorDictBase:
        """One row (batch size ``()``), from the queue or the next dataloader batch."""
        if self._queue:
            return self._queue.popleft()
        data = next(self.endless_dataloader)
        if is_tensor_collection(data):
            batch = data
        elif isinstance(data, Mapping):
            batch = self._from_mapping(data)
        else:
            raise TypeError(
                f"the dataloader yielded a {type(data).__name__}; expected a mapping of fields "
                "(give the DataLoader a collate_fn returning a dict)"
            )
        if self._device is not None:
            batch = batch.to(self._device)
        rows = batch.unbind(0) if batch.batch_dims else [batch]
        for row in rows:
            self._queue.extend([row] * max(1, self.repeats))
        return self._queue.popleft()

    def _from_mapping(self, data: Mapping) -> TensorDictBase:
        if not self.auto_batch_size:
            return _row(data)
        sizes = {
            len(v)
            for v in data.values()
            if isinstance(v, (list, tuple)) or (isinstance(v, torch.Tensor) and v.ndim)
        }
        if len(sizes) != 1:
            lengths = {k: len(v) if hasattr(v, "__len__") else None for k, v in data.items()}
            raise ValueError(
                f"the dataloader's batch has fields of lengths {lengths}; expected one batch length"
            )
        (size,) = sizes
        return lazy_stack([_row({k: v[i] for k, v in data.items()}) for i in range(size)])

    def _load_from_dataloader(self, reset: torch.Tensor | None = None) -> TensorDictBase:
        """The rows for one reset: one per True entry of ``reset`` (one row when ``None``)."""
        if reset is None or reset.ndim == 0:
            return self._next_row()
        count = int(reset.sum())
        if not count:
            raise RuntimeError("reset must have at least one True value")
        return self.stack_method([self._next_row() for _ in range(count)])

    # ------------------------------------------------------------------ env hooks
    def _reset_func(self, tensordict, tensordict_reset):
        bs = tensordict_reset.batch_size
        if not bs:
            tensordict_reset.update(self._next_row())
            return tensordict_reset
        mask = reset_entry_mask(tensordict, self.reset_key)
        if mask is None or bool(mask.all()):
            fresh = self._load_from_dataloader(torch.ones(bs, dtype=torch.bool))
            for key in self.data_keys:
                tensordict_reset.set(key, fresh.get(key))
            return tensordict_reset
        if len(bs) != 1:
            raise NotImplementedError("a partial reset of DataLoadingPrimer needs a 1-d batch")
        mask = mask.reshape(bs)
        previous = tensordict.select(*self.data_keys, strict=False)
        rows = []
        for i in range(bs[0]):
            rows.append(self._next_row() if mask[i] else previous[i])
        fresh = self.stack_method(rows)
        for key in self.data_keys:
            tensordict_reset.set(key, fresh.get(key))
        return tensordict_reset

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """On data: fills the missing fields with new rows."""
        if all(tensordict.get(k, None) is not None for k in self.data_keys):
            return tensordict
        return self._reset_func(tensordict.empty(), tensordict)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(data_keys={self.data_keys}, dataloader={self.dataloader!r:.80})"
        )


class RayDataLoadingPrimer(RayTransform):
    """A :class:`DataLoadingPrimer` served by one Ray actor that several envs share.

    The primer (and its dataloader) is built once, in the actor; every env holding a
    client draws its rows from the same queue, so two envs never get the same row unless
    the dataloader repeats it. With ``actor_name``, clients built elsewhere (other
    processes of the cluster) reuse the running actor. ``DataLoadingPrimer(...,
    use_ray_service=True)`` builds one.

    Keyword Args:
        dataloader: the rows' source (exclusive with ``dataloader_factory``); pickled
            to the actor.
        dataloader_factory: builds the dataloader in the actor.
        num_cpus: CPUs of the actor; by default the dataloader's ``num_workers`` (at
            least 1), as TorchRL.
        num_gpus: GPUs of the actor.
        device: where the rows are put here.
        actor_name: the actor's name, to share it.
        **kwargs: :class:`DataLoadingPrimer`'s other keyword arguments (``primers``,
            ``batch_size``, ``repeats``...).

    Raises:
        ValueError: both or neither of ``dataloader`` / ``dataloader_factory``.
        ImportError: Ray is not installed (``pip install "rl-envs[ray]"``).
    """

    def __init__(
        self,
        *,
        dataloader=None,
        dataloader_factory=None,
        num_cpus=None,
        num_gpus=0,
        device: torch.device | None = None,
        actor_name: str | None = None,
        **kwargs,
    ):
        if (dataloader is None) == (dataloader_factory is None):
            raise ValueError(
                "RayDataLoadingPrimer takes exactly one of dataloader / dataloader_factory, "
                f"got {'both' if dataloader is not None else 'neither'}"
            )
        if num_cpus is None:
            source = dataloader if dataloader is not None else dataloader_factory()
            num_cpus = max(1, int(getattr(source, "num_workers", 1) or 1))
        kwargs.pop("use_ray_service", None)
        super().__init__(
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            device=device,
            actor_name=actor_name,
            dataloader=dataloader,
            dataloader_factory=dataloader_factory,
            **kwargs,
        )

    def _create_actor(self, **kwargs):
        return self.remote_transform(DataLoadingPrimer, **kwargs)

    def reset_dataloader(self) -> RayDataLoadingPrimer:
        """Empties the actor's queue and restarts its dataloader (for every client)."""
        self._run("reset_dataloader")
        return self
