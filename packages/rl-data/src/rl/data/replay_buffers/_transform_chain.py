"""The transforms of a replay buffer: run in order on what it returns, inverted on what it
is given (TorchRL's ``Compose`` in a buffer, without a dependency on rl-envs)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

__all__ = ["InvertedTransform", "TransformChain"]


def _check_callable(transform: Any) -> None:
    if not callable(transform):
        raise TypeError(f"a transform must be callable, got {type(transform).__name__}")


class InvertedTransform:
    """A transform run the other way round: its inverse on sampled data, itself on written
    data (``ReplayBuffer.append_transform(t, invert=True)``).

    Args:
        transform: a callable; its ``inv`` method, when it has one, is what sampling runs
            (a transform without one leaves sampled data unchanged).

    Examples:
        >>> import torch
        >>> t = InvertedTransform(lambda x: x + 1)
        >>> t(torch.zeros(2)).tolist(), t.inv(torch.zeros(2)).tolist()
        ([0.0, 0.0], [1.0, 1.0])
    """

    def __init__(self, transform: Callable) -> None:
        _check_callable(transform)
        self.transform = transform

    def __call__(self, data: Any) -> Any:
        inv = getattr(self.transform, "inv", None)
        return data if inv is None else inv(data)

    def inv(self, data: Any) -> Any:
        return self.transform(data)

    def state_dict(self) -> dict[str, Any]:
        state_dict = getattr(self.transform, "state_dict", None)
        return {} if state_dict is None else state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        load = getattr(self.transform, "load_state_dict", None)
        if load is not None:
            load(state_dict)

    def __repr__(self) -> str:
        return f"InvertedTransform({self.transform!r})"


class TransformChain:
    """The ordered transforms of a replay buffer (``rb.transform``).

    Calling the chain runs every transform in order on a sampled batch; :meth:`inv` runs
    the ``inv`` methods of those that have one in reverse order on written data, and
    stops when one returns ``None`` (it holds the data back, as a multi-step transform
    does until it has enough steps). It indexes, iterates and grows as a list.

    Args:
        transforms: the callables, in the order sampled data goes through them.

    Raises:
        TypeError: a transform is not callable.

    Examples:
        >>> import torch
        >>> chain = TransformChain([lambda x: x + 1])
        >>> chain.append(lambda x: 2 * x)
        >>> chain(torch.zeros(2)).tolist(), len(chain)
        ([2.0, 2.0], 2)
    """

    def __init__(self, transforms: Iterable[Callable] = ()) -> None:
        self.transforms: list[Callable] = []
        for transform in transforms:
            self.append(transform)

    def forward(self, data: Any) -> Any:
        for transform in self.transforms:
            data = transform(data)
        return data

    def __call__(self, data: Any) -> Any:
        return self.forward(data)

    def inv(self, data: Any) -> Any:
        for transform in reversed(self.transforms):
            inv = getattr(transform, "inv", None)
            if inv is not None:
                data = inv(data)
                if data is None:
                    return None
        return data

    def append(self, transform: Callable) -> None:
        _check_callable(transform)
        self.transforms.append(transform)

    def insert(self, index: int, transform: Callable) -> None:
        """Inserts ``transform`` before position ``index`` (``-len(self) <= index <= len(self)``).

        Raises:
            ValueError: ``index`` is out of that range.
        """
        n = len(self.transforms)
        if not -n <= index <= n:
            raise ValueError(
                f"a transform is inserted at an index between {-n} and {n} (this chain holds "
                f"{n} transforms), got {index}"
            )
        _check_callable(transform)
        self.transforms.insert(index, transform)

    def __len__(self) -> int:
        return len(self.transforms)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return TransformChain(self.transforms[index])
        return self.transforms[index]

    def __iter__(self) -> Iterator[Callable]:
        return iter(self.transforms)

    def state_dict(self) -> dict[str, Any]:
        """The states of the transforms that have one (``nn.Module`` style: ``"0.loc"``)."""
        state: dict[str, Any] = {}
        for i, transform in enumerate(self.transforms):
            get = getattr(transform, "state_dict", None)
            if get is not None:
                state.update({f"{i}.{key}": value for key, value in get().items()})
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for i, transform in enumerate(self.transforms):
            load = getattr(transform, "load_state_dict", None)
            if load is None:
                continue
            prefix = f"{i}."
            own = {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}
            if own or isinstance(transform, torch.nn.Module):
                load(own)

    def __repr__(self) -> str:
        return f"TransformChain({self.transforms!r})"
