"""Turning tensordict entries into storage indices (TorchRL 0.14.1's ``torchrl.data.map.query``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from copy import deepcopy
from typing import Any

import torch
from tensordict import NestedKey, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import unravel_key, unravel_key_list
from torch import nn

from rl.data.map.hash import SipHash

__all__ = ["HashToInt", "QueryModule"]


class HashToInt(nn.Module):
    """Maps hash values to contiguous integers 0, 1, 2, ... in order of first sight.

    Call with ``extend=True`` to register unseen hashes; with ``extend=False`` an
    unseen hash maps to the current number of known hashes (one past the end)
    and nothing is registered.
    """

    def __init__(self):
        super().__init__()
        self._index_to_index: dict[int, int] = {}

    def __call__(self, key: torch.Tensor, extend: bool = False) -> torch.Tensor:
        table = self._index_to_index
        if extend:
            out = [table.setdefault(item, len(table)) for item in key.tolist()]
        else:
            out = [table.get(item, len(table)) for item in key.tolist()]
        return torch.tensor(out, device=key.device, dtype=key.dtype)

    def state_dict(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        keys = torch.tensor(list(self._index_to_index.keys()), dtype=torch.int64)
        values = torch.tensor(list(self._index_to_index.values()), dtype=torch.int64)
        return {"keys": keys, "values": values}

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ):
        keys, values = state_dict["keys"], state_dict["values"]
        self._index_to_index = dict(zip(keys.tolist(), values.tolist()))


class QueryModule(TensorDictModuleBase):
    """Hashes the ``in_keys`` entries of a tensordict and writes a storage index for each row.

    Each in-key is hashed by its own hash module; with several in-keys the
    per-key hashes are stacked on the last dimension and hashed again by
    ``aggregator``. ``hash_to_int`` turns the hash into an integer index,
    written at ``index_key``; the hash itself goes to ``hash_key``.

    Args:
        in_keys (list of NestedKey): entries to hash (not empty).
        index_key (NestedKey): where the index is written. Defaults to ``"_index"``.
        hash_key (NestedKey): where the hash is written. Defaults to ``"_hash"``.

    Keyword Args:
        hash_module (callable or list of callables, optional): per-key hash
            module(s); a single module is copied for each key. Defaults to :class:`SipHash`.
        hash_to_int (callable, optional): hash-to-index map. Defaults to :class:`HashToInt`.
        aggregator (callable, optional): combines several keys' hashes; defaults
            to the single ``hash_module`` given, else :class:`SipHash`.
        clone (bool, optional): write into a shallow copy of the input. Defaults to ``False``.
    """

    def __init__(
        self,
        in_keys: list[NestedKey],
        index_key: NestedKey = "_index",
        hash_key: NestedKey = "_hash",
        *,
        hash_module: Callable[[Any], int] | list[Callable[[Any], int]] | None = None,
        hash_to_int: Callable[[int], int] | None = None,
        aggregator: Callable[[Any], int] | None = None,
        clone: bool = False,
    ):
        if len(in_keys) == 0:
            raise ValueError("`in_keys` cannot be empty.")
        in_keys = in_keys if isinstance(in_keys, list) else [in_keys]
        super().__init__()
        # nested tuples such as (("a",), "b") are flattened to ("a", "b"), a 1-tuple to its string
        in_keys = self.in_keys = unravel_key_list(in_keys)
        self.out_keys = [unravel_key(index_key), unravel_key(hash_key)]
        index_key, self.hash_key = self.out_keys
        if aggregator is not None and len(in_keys) == 1:
            warnings.warn(
                "An aggregator was provided but there is only one in-key to be read. This module will be ignored.",
                stacklevel=2,
            )
        elif aggregator is None:
            aggregator = (
                hash_module
                if hash_module is not None and not isinstance(hash_module, list)
                else SipHash()
            )
        if hash_module is None:
            hash_module = [SipHash() for _ in in_keys]
        elif not isinstance(hash_module, list):
            try:
                hash_module = [
                    deepcopy(hash_module) if len(in_keys) > 1 else hash_module for _ in in_keys
                ]
            except Exception as err:
                raise RuntimeError(
                    "failed to deepcopy the hash module. Please provide a list of hash modules instead."
                ) from err
        elif len(hash_module) != len(in_keys):
            raise ValueError(
                "The number of hash_modules must match the number of in_keys. "
                f"Got {len(hash_module)} hash modules but {len(in_keys)} in_keys."
            )
        self.aggregator = aggregator
        self.hash_module = dict(zip(in_keys, hash_module))
        self.hash_to_int = HashToInt() if hash_to_int is None else hash_to_int
        self.index_key = index_key
        self.clone = clone

    def forward(
        self,
        tensordict: TensorDictBase,
        *,
        extend: bool = True,
        write_hash: bool = True,
        clone: bool | None = None,
    ) -> TensorDictBase:
        hashes = [self.hash_module[key](tensordict.get(key)) for key in self.in_keys]
        if len(hashes) > 1:
            hash_values = self.aggregator(torch.stack(hashes, dim=-1))
        else:
            hash_values = hashes[0]
        index = self.hash_to_int(hash_values, extend=extend)
        clone = self.clone if clone is None else clone
        output = tensordict.copy() if clone else tensordict
        output.set(self.index_key, index)
        if write_hash:
            output.set(self.hash_key, hash_values)
        return output
