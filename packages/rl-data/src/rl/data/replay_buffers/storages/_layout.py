"""Items that are neither tensors nor TensorDicts in a tensor storage: tensorclasses and
pytrees (dicts, lists and tuples) of tensors, kept as TensorDicts."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, is_tensorclass
from torch.utils._pytree import (
    TreeSpec,
    tree_flatten,
    tree_map,
    tree_unflatten,
    treespec_dumps,
    treespec_loads,
)

__all__ = ["ItemLayout", "stack_items"]


def stack_items(items: list) -> Any:
    """Stacks a list of items (tensors, TensorDicts or pytrees of tensors) into one batch.

    Raises:
        TypeError: an item is not made of tensors.
        RuntimeError: the items cannot be stacked (different structures or shapes).
    """
    for item in items:
        if not isinstance(item, (torch.Tensor, TensorDictBase)):
            ItemLayout.of(item)  # raises on anything but a tensorclass or a pytree of tensors
    try:
        if all(isinstance(x, (torch.Tensor, TensorDictBase)) for x in items) or all(
            is_tensorclass(x) for x in items
        ):
            return torch.stack(items)
        return tree_map(lambda *leaves: torch.stack(leaves), *items)
    except (RuntimeError, ValueError, TypeError) as err:
        raise RuntimeError(
            f"Stacking the elements of the list resulted in an error: {err}; a list given to "
            "a tensor storage is a list of items to stack (use a tuple for a single item)"
        ) from err


class ItemLayout:
    """How a tensor storage keeps items that are not tensors or TensorDicts.

    A tensorclass is stored as its TensorDict and rebuilt with its class. A pytree (nested
    dicts, lists and tuples whose leaves are tensors) is stored as a TensorDict with one
    entry per leaf (``"0"``, ``"1"``, ... in flattening order) and rebuilt from its
    structure.

    Examples:
        >>> import torch
        >>> data = {"a": torch.zeros(4, 2), "b": [torch.ones(4)]}
        >>> layout = ItemLayout.of(data)
        >>> td = layout.encode(data, batch_dims=1)
        >>> td.batch_size, sorted(td.keys())
        (torch.Size([4]), ['0', '1'])
        >>> back = layout.decode(td[:2])
        >>> back["a"].shape, back["b"][0].tolist()
        (torch.Size([2, 2]), [1.0, 1.0])
    """

    def __init__(self, *, tensorclass: type | None = None, spec: TreeSpec | None = None) -> None:
        if (tensorclass is None) == (spec is None):
            raise ValueError("an ItemLayout is either a tensorclass or a pytree structure")
        self.tensorclass = tensorclass
        self.spec = spec

    @classmethod
    def of(cls, data: Any) -> ItemLayout:
        """The layout of ``data`` (a tensorclass or a pytree of tensors).

        Raises:
            TypeError: ``data`` is neither (a leaf that is not a tensor, an object that is
                not a container).
        """
        if is_tensorclass(data):
            return cls(tensorclass=type(data))
        leaves, spec = tree_flatten(data)
        if spec.is_leaf() or not all(isinstance(x, torch.Tensor) for x in leaves):
            bad = (
                data
                if spec.is_leaf()
                else next(x for x in leaves if not isinstance(x, torch.Tensor))
            )
            raise TypeError(
                f"a tensor storage stores tensors, TensorDicts, tensorclasses and pytrees "
                f"(dicts, lists, tuples) of tensors, got {type(bad).__name__}; use ListStorage "
                "for other python objects"
            )
        return cls(spec=spec)

    def encode(self, data: Any, batch_dims: int) -> TensorDictBase:
        """``data`` as a TensorDict whose batch size is the first ``batch_dims`` dims.

        Raises:
            ValueError: ``data`` has another structure than this layout's.
        """
        if self.tensorclass is not None:
            if type(data) is not self.tensorclass:
                raise ValueError(f"the storage holds {self.describe()}, got {type(data).__name__}")
            td = data._tensordict
            if any(is_tensorclass(v) for v in td.values(include_nested=True)):
                td = data.to_tensordict()  # nested tensorclasses become nested TensorDicts
            return td
        leaves, spec = tree_flatten(data)
        if spec != self.spec:
            raise ValueError(f"the storage holds {self.describe()}, got {spec}")
        if any(len(x.shape) < batch_dims for x in leaves):
            shapes = [tuple(x.shape) for x in leaves]
            raise ValueError(f"every leaf needs {batch_dims} batch dims, got shapes {shapes}")
        batch_size = leaves[0].shape[:batch_dims]
        for leaf in leaves:
            if leaf.shape[:batch_dims] != batch_size:
                shapes = [tuple(x.shape) for x in leaves]
                raise ValueError(
                    f"the leaves of an item share their first {batch_dims} dims, got shapes "
                    f"{shapes}"
                )
        return TensorDict._new_unsafe(
            {str(i): leaf for i, leaf in enumerate(leaves)}, batch_size=batch_size
        )

    def decode(self, td: Any) -> Any:
        """The items of a TensorDict read from the storage, in this layout."""
        if self.tensorclass is not None:
            return self.tensorclass.from_tensordict(td)
        return tree_unflatten([td.get(str(i)) for i in range(self.spec.num_leaves)], self.spec)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ItemLayout)
            and self.tensorclass is other.tensorclass
            and self.spec == other.spec
        )

    __hash__ = None  # type: ignore[assignment]

    def state(self) -> dict[str, Any]:
        """A plain-data record of the layout (a pytree structure as JSON; a tensorclass by
        name, which :meth:`from_state` does not import)."""
        if self.tensorclass is not None:
            cls = self.tensorclass
            return {"tensorclass": f"{cls.__module__}.{cls.__qualname__}"}
        try:
            return {"pytree": treespec_dumps(self.spec)}
        except (NotImplementedError, TypeError, ValueError):  # a node type torch cannot save
            return {"pytree": None}

    @classmethod
    def from_state(cls, state: dict[str, Any], current: ItemLayout | None) -> ItemLayout:
        """The layout a :meth:`state` describes, checked against the storage's own.

        Raises:
            RuntimeError: the layout cannot be rebuilt from the state alone (a tensorclass,
                whose class is never imported from a checkpoint, or a structure torch
                could not save) and the storage has none yet.
            ValueError: it differs from the storage's own.
        """
        if current is not None:
            if current.state() != state:
                raise ValueError(
                    f"the checkpoint holds items laid out as {state}, this storage "
                    f"{current.state()}"
                )
            return current
        if state.get("pytree") is not None:
            return cls(spec=treespec_loads(state["pytree"]))
        kind = state.get("tensorclass") or "a pytree"
        raise RuntimeError(
            f"the checkpoint holds items of {kind}: write one such item to the storage "
            "before loading it (a class is never imported from a checkpoint)"
        )

    def describe(self) -> str:
        """What the items are, for error messages."""
        if self.tensorclass is not None:
            return f"{self.tensorclass.__name__} items"
        return f"items of structure {self.spec}"

    def __repr__(self) -> str:
        if self.tensorclass is not None:
            return f"ItemLayout(tensorclass={self.tensorclass.__name__})"
        return f"ItemLayout(spec={self.spec})"
