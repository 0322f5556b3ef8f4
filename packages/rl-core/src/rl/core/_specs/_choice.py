"""The :class:`Choice` spec: a value drawn from one of several specs or non-tensor values."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDictBase

from ._base import DEVICE_TYPING, TensorSpec

__all__ = ["Choice"]

_DATA = (NonTensorData, NonTensorStack)


def _data_value(value: Any) -> Any:
    return value.tolist() if isinstance(value, _DATA) else value


class Choice(TensorSpec):
    """A value from one of several specs (or one of several non-tensor values).

    ``rand`` picks one choice uniformly and returns its ``rand`` (or the non-tensor value
    itself); ``is_in`` accepts what any choice accepts. Every choice has the same type,
    shape, dtype and device; the spec keeps clones of them.

    Args:
        choices: a list of specs, or of ``NonTensorData``/``NonTensorStack`` values.

    Raises:
        TypeError: if ``choices`` is not a non-empty list, or mixes types.
        ValueError: if the choices differ in shape, dtype or device.

    Examples:
        >>> import torch
        >>> from tensordict import NonTensorData
        >>> from rl.core import Bounded, Choice
        >>> spec = Choice([Bounded(0, 1, shape=(1,)), Bounded(10, 11, shape=(1,))])
        >>> spec.num_choices, spec.shape
        (2, torch.Size([1]))
        >>> value = spec.rand()
        >>> spec.is_in(value), bool((0 <= value) & (value <= 1) | (10 <= value) & (value <= 11))
        (True, True)
        >>> spec.is_in(torch.tensor([5.0]))
        False
        >>> words = Choice([NonTensorData(s) for s in ["a", "b", "c"]])
        >>> words.rand().data in {"a", "b", "c"}
        True
        >>> words.cardinality()
        3
    """

    def __init__(self, choices: list[TensorSpec | NonTensorData | NonTensorStack]):
        if not isinstance(choices, list):
            raise TypeError(f"Choice expects a list of choices, got {type(choices).__name__}")
        if not choices:
            raise TypeError("Choice expects a non-empty list of choices, got []")
        first = choices[0]
        if not isinstance(first, TensorSpec | NonTensorData | NonTensorStack):
            raise TypeError(
                "each choice must be a TensorSpec, NonTensorData or NonTensorStack, got "
                f"{type(first).__name__}"
            )
        for i, choice in enumerate(choices[1:], 1):
            if not isinstance(choice, type(first)):
                raise TypeError(
                    f"all choices must be of one type: choice 0 is a {type(first).__name__}, "
                    f"choice {i} is a {type(choice).__name__}"
                )
            for attr in ("shape", "dtype", "device"):
                if getattr(choice, attr) != getattr(first, attr):
                    raise ValueError(
                        f"all choices must have the same {attr}: choice 0 has "
                        f"{getattr(first, attr)}, choice {i} has {getattr(choice, attr)}"
                    )
        self._choices = [c.clone() for c in choices]
        self._is_data = not isinstance(first, TensorSpec)
        self.shape = torch.Size(first.shape)
        self.dtype = first.dtype
        self.device = first.device
        self.domain = "" if self._is_data else first.domain

    @property
    def num_choices(self) -> int:
        """The number of choices."""
        return len(self._choices)

    @property
    def choices(self) -> list:
        """The choices (the spec's own copies)."""
        return list(self._choices)

    # ------------------------------------------------------------------ values
    def _pick(self, idx: int, fn: Callable[[TensorSpec], Any]) -> Any:
        choice = self._choices[idx]
        return choice if self._is_data else fn(choice)

    def rand(self, shape: Sequence[int] | torch.Size | None = ()) -> Any:
        """The ``rand`` of one choice drawn uniformly (one draw for the whole batch, as TorchRL)."""
        if shape is None:
            shape = ()
        idx = int(torch.randint(0, len(self._choices), ()).item())
        return self._pick(idx, lambda c: c.rand(shape))

    def zero(self, shape: Sequence[int] | torch.Size | None = ()) -> Any:
        """The ``zero`` of the first choice (or the first value)."""
        if shape is None:
            shape = ()
        return self._pick(0, lambda c: c.zero(shape))

    def one(self, shape: Sequence[int] | torch.Size | None = ()) -> Any:
        """The ``one`` of the second choice (the first when there is one choice)."""
        if shape is None:
            shape = ()
        return self._pick(min(1, len(self._choices) - 1), lambda c: c.one(shape))

    def _mismatch(self, value: Any) -> str | None:
        if self._is_data:
            target = _data_value(value)
            if any(_data_value(c) == target for c in self._choices):
                return None
            return f"is {target!r}, none of the {len(self._choices)} choices"
        if any(c.is_in(value) for c in self._choices):
            return None
        return f"is in none of the {len(self._choices)} choices"

    def _project(self, value: Any) -> Any:
        """``value`` when a choice holds it; otherwise there is no single closest choice.

        Raises:
            NotImplementedError: for a value outside every choice (as TorchRL).
        """
        if self.is_in(value):
            return value
        raise NotImplementedError(
            f"Choice cannot project a value outside its {len(self._choices)} choices: "
            "project it with one of spec.choices instead"
        )

    def encode(self, value: Any, *, ignore_device: bool = False) -> Any:
        """Encodes with the first choice (they share shape and dtype); wraps non-tensor data."""
        if self._is_data:
            if isinstance(value, _DATA):
                return value
            return NonTensorData(data=value, batch_size=self.shape)
        return self._choices[0].encode(value, ignore_device=ignore_device)

    def cardinality(self) -> int:
        """The number of values: of non-tensor choices, or the sum over the choice specs."""
        if self._is_data:
            return len(self._choices)
        return sum(c.cardinality() for c in self._choices)

    def enumerate(self, use_mask: bool | None = None) -> list:
        """Every value of every choice, as a list (TorchRL returns a list too)."""
        if self._is_data:
            return list(self._choices)
        return [v for c in self._choices for v in c.enumerate(use_mask)]

    def to_numpy(self, value: Any, safe: bool | None = None) -> Any:
        if safe:
            self.assert_is_in(value)
        if self._is_data or isinstance(value, TensorDictBase):
            return _data_value(value)
        return value.detach().cpu().numpy()

    # ------------------------------------------------------------------ copies and shapes
    def _map(self, fn: Callable[[Any], Any]) -> Choice:
        return Choice([fn(c) for c in self._choices])

    def clone(self) -> Choice:
        return self._map(lambda c: c.clone())

    def to(self, dest: DEVICE_TYPING | torch.dtype) -> Choice:
        if self._is_data and isinstance(dest, torch.dtype):
            return self
        return self._map(lambda c: c.to(dest))

    def __getitem__(self, idx: Any) -> Choice:
        return self._map(lambda c: c[idx])

    def expand(self, *shape: int) -> Choice:
        return self._map(lambda c: c.expand(*shape))

    def squeeze(self, dim: int | None = None) -> Choice:
        return self._map(lambda c: c.squeeze(dim) if dim is not None else c.squeeze())

    def unsqueeze(self, dim: int) -> Choice:
        return self._map(lambda c: c.unsqueeze(dim))

    def unbind(self, dim: int = 0) -> tuple[Choice, ...]:
        parts = [c.unbind(dim) for c in self._choices]
        return tuple(Choice(list(p)) for p in zip(*parts))

    def reshape(self, *shape: int) -> Choice:
        return self._map(lambda c: c.reshape(*shape))

    view = reshape

    def _reshape(self, new: torch.Size) -> Choice:
        return self.reshape(new)

    # ------------------------------------------------------------------ comparison and repr
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Choice) or other.num_choices != self.num_choices:
            return False
        if self._is_data != other._is_data:
            return False
        if self._is_data:
            return all(
                _data_value(a) == _data_value(b) for a, b in zip(self._choices, other._choices)
            )
        return all(a == b for a, b in zip(self._choices, other._choices))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self._is_data:
            inner = ", ".join(repr(_data_value(c)) for c in self._choices)
        else:
            inner = ", ".join(repr(c) for c in self._choices)
        return f"Choice(choices=[{inner}], shape={self.shape}, device={self.device}, dtype={self.dtype})"
