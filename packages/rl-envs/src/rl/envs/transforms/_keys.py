"""Key-level transforms: rename, exclude, select, concatenate or stack entries, and remove
empty sub-TensorDicts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import NonTensorData, TensorDictBase, is_tensor_collection

from rl.core import Bounded, Composite, Unbounded

from ._base import Transform, _missing_key_error
from ._spec_utils import NestedKey, leaf_keys, normalize_key, normalize_keys, tget

__all__ = [
    "CatTensors",
    "ExcludeTransform",
    "RemoveEmptySpecs",
    "RenameTransform",
    "SelectTransform",
    "Stack",
]


class RenameTransform(Transform):
    """Renames entries (and their specs); ``inv`` renames actions back for the env.

    Args:
        in_keys: the env's names.
        out_keys: the new names.
        in_keys_inv: inner (env) names of inputs (actions / states).
        out_keys_inv: outer names of those inputs.
        create_copy: keep the original entries as well.

    Raises:
        ValueError: in_keys and out_keys differ in length.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = RenameTransform(["observation"], ["obs"])
        >>> sorted(t(TensorDict({"observation": torch.zeros(2)}, [])).keys())
        ['obs']
    """

    invertible = True

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_keys: Sequence[NestedKey],
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        create_copy: bool = False,
    ):
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.create_copy = create_copy

    def _call(self, next_tensordict):
        for in_key, out_key in self._io_pairs:
            value = next_tensordict.get(in_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, in_key, next_tensordict)
            if self.create_copy:
                next_tensordict.set(out_key, value.clone())
            else:
                next_tensordict.set(out_key, value)
                del next_tensordict[in_key]
        return next_tensordict

    def _inv_call(self, tensordict):
        for in_key, out_key in self._io_pairs_inv:
            value = tensordict.get(out_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, out_key, tensordict)
            tensordict.set(in_key, value)
            if not self.create_copy:
                del tensordict[out_key]
        return tensordict

    def _rename(self, composite, pairs, copy: bool):
        present = set(leaf_keys(composite))
        for src, dst in pairs:
            if src in present:
                spec = composite[src]
                if not copy:
                    del composite[src]
                composite[dst] = spec.clone()
        return composite

    def transform_observation_spec(self, observation_spec):
        return self._rename(observation_spec, self._io_pairs, self.create_copy)

    def transform_reward_spec(self, reward_spec):
        return self._rename(reward_spec, self._io_pairs, self.create_copy)

    def transform_done_spec(self, done_spec):
        return self._rename(done_spec, self._io_pairs, self.create_copy)

    def transform_action_spec(self, action_spec):
        return self._rename(action_spec, self._io_pairs_inv, self.create_copy)

    def transform_state_spec(self, state_spec):
        return self._rename(state_spec, self._io_pairs_inv, self.create_copy)


class ExcludeTransform(Transform):
    """Removes entries from the env's output (and from its observation spec).

    Args:
        *excluded_keys: the keys to drop.
        inverse: drop them from the input of the env below (``inv``, before each step)
            instead of from its output; the specs are then unchanged (as TorchRL).

    A reward or done entry can be excluded too (as TorchRL): the env's reward / done spec
    loses it.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"a": torch.zeros(1), "b": torch.zeros(1)}, [])
        >>> sorted(ExcludeTransform("b")(td).keys())
        ['a']
        >>> sorted(ExcludeTransform("b", inverse=True).inv(td).keys())
        ['a']
    """

    def __init__(self, *excluded_keys: NestedKey, inverse: bool = False):
        if len(excluded_keys) == 1 and isinstance(excluded_keys[0], list):
            excluded_keys = tuple(excluded_keys[0])
        super().__init__()
        self.excluded_keys = normalize_keys(list(excluded_keys))
        self.inverse = bool(inverse)

    @property
    def has_step(self) -> bool:
        return not self.inverse

    @property
    def has_inverse(self) -> bool:
        return self.inverse

    def _drop(self, tensordict):
        for key in self.excluded_keys:
            if key in tensordict.keys(include_nested=True):
                del tensordict[key]
        return tensordict

    def _call(self, next_tensordict):
        return next_tensordict if self.inverse else self._drop(next_tensordict)

    def _inv_call(self, tensordict):
        return self._drop(tensordict) if self.inverse else tensordict

    def forward(self, tensordict):
        return self._call(tensordict)

    def transform_output_spec(self, output_spec):
        if self.inverse:
            return output_spec
        output_spec = output_spec.clone()
        # as TorchRL: a done or reward entry can be excluded too (the env then has one
        # flag or reward less, e.g. "terminated" alone)
        for name in ("full_done_spec", "full_reward_spec", "full_observation_spec"):
            if name not in output_spec.keys():
                continue
            spec = output_spec[name]
            for key in self.excluded_keys:
                if key in spec.keys(include_nested=True):
                    del spec[key]
        return output_spec

    def transform_state_spec(self, state_spec):
        if self.inverse:
            return state_spec
        # an excluded entry is not carried to the next step, so it cannot be read back
        for key in self.excluded_keys:
            if key in state_spec.keys(include_nested=True):
                del state_spec[key]
        return state_spec

    def _repr_args(self) -> str:
        inverse = ", inverse=True" if self.inverse else ""
        return f"excluded_keys={self.excluded_keys}{inverse}"


class SelectTransform(Transform):
    """Keeps only the given observation entries (rewards and done flags are kept).

    Args:
        *selected_keys: the observation keys to keep.
        keep_rewards: keep the reward entries in the data.
        keep_dones: keep the done entries in the data.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"a": torch.zeros(1), "b": torch.zeros(1), "reward": torch.zeros(1)}, [])
        >>> sorted(SelectTransform("a")(td).keys())
        ['a', 'reward']
    """

    _REWARD = ("reward",)
    _DONE = ("done", "terminated", "truncated")

    def __init__(
        self, *selected_keys: NestedKey, keep_rewards: bool = True, keep_dones: bool = True
    ):
        if len(selected_keys) == 1 and isinstance(selected_keys[0], list):
            selected_keys = tuple(selected_keys[0])
        super().__init__()
        self.selected_keys = normalize_keys(list(selected_keys))
        self.keep_rewards = keep_rewards
        self.keep_dones = keep_dones
        self.__dict__["_always"] = set()

    @property
    def has_step(self) -> bool:
        return True

    def _kept(self) -> set:
        kept = set(self.selected_keys) | self.__dict__["_always"]
        if self.keep_rewards:
            kept.update(self._REWARD)
        if self.keep_dones:
            kept.update(self._DONE)
        return kept

    def _call(self, next_tensordict):
        kept = self._kept()
        for key in list(next_tensordict.keys(True, True)):
            if key in kept or (isinstance(key, tuple) and key[0] in kept):
                continue
            del next_tensordict[key]
        return next_tensordict

    def transform_output_spec(self, output_spec):
        output_spec = output_spec.clone()
        always = set()
        for name, keep in (
            ("full_reward_spec", self.keep_rewards),
            ("full_done_spec", self.keep_dones),
        ):
            spec = output_spec[name]
            if keep:
                always.update(leaf_keys(spec))
                continue
            # as TorchRL: without keep_*, only the selected reward / done entries remain
            for key in leaf_keys(spec):
                if key not in self.selected_keys:
                    del spec[key]
        self.__dict__["_always"] = always
        obs = output_spec["full_observation_spec"]
        for key in leaf_keys(obs):
            if key not in self.selected_keys:
                del obs[key]
        return output_spec

    def transform_state_spec(self, state_spec):
        # entries that are not kept are not carried to the next step
        for key in leaf_keys(state_spec):
            if key not in self.selected_keys:
                del state_spec[key]
        return state_spec

    def _repr_args(self) -> str:
        return f"selected_keys={self.selected_keys}"


def _sorted_keys(keys):
    return sorted(keys, key=lambda k: (k,) if isinstance(k, str) else k)


class CatTensors(Transform):
    """Concatenates entries along ``dim`` into ``out_key``.

    Args:
        in_keys: the entries (sorted when ``sort=True``). ``None``: every observation
            entry with one dim past the batch dims, found (and sorted) when the env's
            specs are first transformed (``dim`` must then be ``-1``).
        out_key: the result key.
        dim: concatenation dim (negative, counted from the end).
        del_keys: remove the inputs.
        unsqueeze_if_needed: give a trailing dim to entries that have only batch dims.
        unsqueeze_if_oor: unsqueeze (at dim 0, as TorchRL) the entries that lack the
            ``dim`` dimension.
        sort: sort ``in_keys`` (order independent of the caller).

    Raises:
        ValueError: no in_keys (an empty list, or none found), non-negative ``dim``, or
            ``in_keys=None`` with ``dim != -1``.
        RuntimeError: ``in_keys=None`` used on data outside an env.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = CatTensors(in_keys=["a", "b"], out_key="ab")
        >>> t(TensorDict({"a": torch.zeros(2), "b": torch.ones(1)}, []))["ab"]
        tensor([0., 0., 1.])
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_key: NestedKey = "observation_vector",
        dim: int = -1,
        *,
        del_keys: bool = True,
        unsqueeze_if_needed: bool = True,
        unsqueeze_if_oor: bool = False,
        sort: bool = True,
    ):
        self.unsqueeze_if_oor = bool(unsqueeze_if_oor)
        if not isinstance(dim, int) or dim >= 0:
            raise ValueError(f"CatTensors dim must be a negative int, got {dim!r}")
        lazy = in_keys is None
        if lazy:
            if dim != -1:
                raise ValueError(f"CatTensors(in_keys=None) only supports dim=-1, got dim={dim}")
            in_keys = []
        else:
            in_keys = normalize_keys(in_keys)
            if not in_keys:
                raise ValueError("CatTensors needs at least one in_key, got none")
            if sort:
                in_keys = _sorted_keys(in_keys)
        super().__init__(in_keys)
        self.__dict__["_lazy_in_keys"] = lazy
        self.out_key = normalize_key(out_key)
        self.dim = dim
        self.del_keys = del_keys
        self.unsqueeze_if_needed = unsqueeze_if_needed

    @property
    def out_keys(self):
        return [self.__dict__.get("out_key", "observation_vector")]

    @out_keys.setter
    def out_keys(self, value):
        self.__dict__["_out_keys"] = None
        self.__dict__["_io_pairs"] = []

    def _on_keys_changed(self) -> None:
        d = self.__dict__
        d["_io_pairs"] = []
        d["_io_pairs_inv"] = []

    @property
    def has_step(self) -> bool:
        return True

    def _find_in_keys(self, keys_and_shapes, nb: int) -> None:
        """Sets ``in_keys`` to the entries with one dim past the ``nb`` batch dims."""
        found = [k for k, shape in keys_and_shapes if len(shape) == nb + 1 and k != self.out_key]
        if not found:
            raise ValueError(
                "CatTensors(in_keys=None) found no entry with one dim past the batch dims "
                f"among {sorted(str(k) for k, _ in keys_and_shapes)}"
            )
        self.in_keys = _sorted_keys(found)
        self.__dict__["_lazy_in_keys"] = False

    def _call(self, next_tensordict):
        if self.__dict__.get("_lazy_in_keys"):
            raise RuntimeError(
                "CatTensors(in_keys=None) finds its keys in the env's observation spec: use it "
                "in a TransformedEnv, or pass in_keys"
            )
        values = []
        nb = next_tensordict.batch_dims
        missing = []
        for key in self.in_keys:
            value = next_tensordict.get(key, None)
            if value is None:
                missing.append(key)
                continue
            if self.unsqueeze_if_needed and value.ndim == nb:
                value = value.unsqueeze(-1)
            if self.unsqueeze_if_oor and -self.dim - 1 >= value.ndim:
                value = value.unsqueeze(0)  # TorchRL: dim does not exist in the entry
            values.append(value)
        if missing:
            if self.missing_tolerance and not values:
                return next_tensordict
            raise _missing_key_error(self, missing[0], next_tensordict)
        next_tensordict.set(self.out_key, torch.cat(values, self.dim))
        if self.del_keys:
            for key in self.in_keys:
                if key != self.out_key:
                    del next_tensordict[key]
        return next_tensordict

    def transform_observation_spec(self, observation_spec):
        if not hasattr(observation_spec, "keys"):
            # a leaf spec given alone: the spec of the one in_key, unchanged (TorchRL)
            if len(self.in_keys) > 1:
                raise ValueError(
                    f"CatTensors cannot infer the output spec of {len(self.in_keys)} in_keys "
                    f"{self.in_keys} from one leaf spec; give a Composite holding them"
                )
            return observation_spec
        if self.__dict__.get("_lazy_in_keys"):
            items = [(k, observation_spec[k].shape) for k in leaf_keys(observation_spec)]
            self._find_in_keys(items, len(observation_spec.shape))
        present = set(leaf_keys(observation_spec))
        missing = [k for k in self.in_keys if k not in present]
        if missing:
            raise KeyError(
                f"CatTensors in_key {missing[0]!r} is not in the observation spec; keys "
                f"present: {sorted(map(str, present))}"
            )
        nb = len(observation_spec.shape)
        specs = [observation_spec[k] for k in self.in_keys]
        shapes = [
            (*s.shape, 1) if (self.unsqueeze_if_needed and len(s.shape) == nb) else tuple(s.shape)
            for s in specs
        ]
        if self.unsqueeze_if_oor:
            shapes = [(1, *sh) if -self.dim - 1 >= len(sh) else sh for sh in shapes]
        metas = [torch.zeros(sh, device="meta") for sh in shapes]
        shape = torch.cat(metas, self.dim).shape
        dtype = (
            torch.result_type(*[torch.zeros((), dtype=s.dtype) for s in specs])
            if len(specs) > 1
            else specs[0].dtype
        )
        if all(isinstance(s, Bounded) for s in specs):
            lows = [s.low.expand(s.shape).reshape(sh) for s, sh in zip(specs, shapes)]
            highs = [s.high.expand(s.shape).reshape(sh) for s, sh in zip(specs, shapes)]
            out = Bounded(
                torch.cat(lows, self.dim).to(dtype),
                torch.cat(highs, self.dim).to(dtype),
                shape=shape,
                device=observation_spec.device,
                dtype=dtype,
            )
        else:
            out = Unbounded(shape=shape, device=observation_spec.device, dtype=dtype)
        if self.del_keys:
            for key in self.in_keys:
                del observation_spec[key]
        observation_spec[self.out_key] = out
        return observation_spec

    def transform_state_spec(self, state_spec):
        if self.del_keys:
            present = set(leaf_keys(state_spec))
            for key in self.in_keys:
                if key in present:
                    del state_spec[key]
        return state_spec

    def transform_reward_spec(self, reward_spec):
        return reward_spec

    def _repr_args(self) -> str:
        return f"in_keys={self.in_keys}, out_key={self.out_key!r}, dim={self.dim}"


class Stack(Transform):
    """Stacks several entries into one along a new dim ``dim`` (and unstacks on ``inv``).

    Args:
        in_keys: the entries to stack (same shape and dtype).
        out_key: the stacked entry.
        in_key_inv: the stacked entry read by ``inv`` (outer side).
        out_keys_inv: the entries ``inv`` unstacks it into (inner side).
        dim: the new dim, negative unless ``allow_positive_dim``.
        allow_positive_dim: accept ``dim >= 0``.
        del_keys: remove the stacked entries (default ``True``).

    Raises:
        ValueError: a non-negative ``dim``, only one of ``in_key_inv`` / ``out_keys_inv``, or
            ``out_key`` among ``in_keys``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"a": torch.zeros(2), "b": torch.ones(2)}, [])
        >>> out = Stack(in_keys=["a", "b"], out_key="ab")(td)
        >>> out["ab"].shape, "a" in out.keys()
        (torch.Size([2, 2]), False)
    """

    invertible = True

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_key: NestedKey,
        in_key_inv: NestedKey | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        dim: int = -1,
        allow_positive_dim: bool = False,
        *,
        del_keys: bool = True,
    ):
        if not allow_positive_dim and dim >= 0:
            raise ValueError(
                f"Stack dim should be negative to work with any batch size, got dim={dim}; "
                "pass allow_positive_dim=True to use a positive dim"
            )
        if in_key_inv is None and out_keys_inv is not None:
            raise ValueError("Stack got out_keys_inv but no in_key_inv")
        if in_key_inv is not None and out_keys_inv is None:
            raise ValueError("Stack got in_key_inv but no out_keys_inv")
        # the inner (env) side holds the separate entries: inv reads the stack (outer)
        super().__init__(
            in_keys=in_keys,
            out_keys=None,
            in_keys_inv=None if out_keys_inv is None else out_keys_inv,
            out_keys_inv=None if out_keys_inv is None else [in_key_inv] * len(out_keys_inv),
        )
        self._out_key = normalize_key(out_key)
        if self._out_key in self.in_keys:
            raise ValueError(f"Stack out_key {self._out_key!r} cannot be one of in_keys")
        self._in_key_inv = None if in_key_inv is None else normalize_key(in_key_inv)
        self._out_keys_inv_list = (
            [] if out_keys_inv is None else [normalize_key(k) for k in out_keys_inv]
        )
        parents = []
        for key in self.in_keys:
            if isinstance(key, tuple):
                for level in range(1, len(key)):
                    p = key[:-level]
                    p = p[0] if len(p) == 1 else p
                    if p not in parents:
                        parents.append(p)
        self._maybe_del_parent_keys = sorted(
            parents, key=lambda k: 1 if isinstance(k, str) else len(k), reverse=True
        )
        self.dim = dim
        self._del_keys = del_keys

    @property
    def out_keys(self) -> list[NestedKey]:
        out = self.__dict__.get("_out_key")
        return list(self._in_keys) if out is None else [out]

    @out_keys.setter
    def out_keys(self, value) -> None:
        self._on_keys_changed()

    def _on_keys_changed(self) -> None:
        d = self.__dict__
        if "_in_keys" not in d or "_in_keys_inv" not in d:
            return
        d["_io_pairs"] = []
        d["_io_pairs_inv"] = list(zip(d["_in_keys_inv"], self.out_keys_inv))
        self.empty_cache()

    @property
    def has_step(self) -> bool:
        return True

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        values = []
        for in_key in self.in_keys:
            value = tget(next_tensordict, in_key)
            if value is not None:
                values.append(value)
            elif not self.missing_tolerance:
                raise _missing_key_error(self, in_key, next_tensordict)
        if not values:
            return next_tensordict
        next_tensordict.set(self._out_key, torch.stack(values, dim=self.dim))
        if self._del_keys:
            next_tensordict.exclude(*self.in_keys, inplace=True)
            for parent in self._maybe_del_parent_keys:
                sub = next_tensordict.get(parent, None)
                if sub is not None and len(sub.keys()) == 0:
                    next_tensordict.exclude(parent, inplace=True)
        return next_tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._in_key_inv is None:
            return tensordict
        value = tensordict.get(self._in_key_inv, None)
        if value is None:
            return tensordict
        parts = torch.unbind(value, dim=self.dim)
        if len(parts) != len(self._out_keys_inv_list):
            raise ValueError(
                f"Stack inv: {self._in_key_inv!r} has {len(parts)} entries along dim {self.dim}, "
                f"expected {len(self._out_keys_inv_list)} for {self._out_keys_inv_list}"
            )
        for part, key in zip(parts, self._out_keys_inv_list):
            tensordict.set(key, part)
        return tensordict.exclude(self._in_key_inv)

    @property
    def has_inverse(self) -> bool:
        return self._in_key_inv is not None

    def _transform_spec(self, spec: Composite, keys, out_key) -> Composite:
        present = set(spec.keys(True, True))
        found = [k for k in keys if k in present]
        if not found:
            return spec
        spec[out_key] = torch.stack([spec[k] for k in found], dim=self.dim)
        if self._del_keys:
            for k in found:
                del spec[k]
            for parent in self._maybe_del_parent_keys:
                if parent in spec.keys(True) and len(spec[parent].keys()) == 0:
                    del spec[parent]
        return spec

    def transform_observation_spec(self, observation_spec):
        return self._transform_spec(observation_spec, self.in_keys, self._out_key)

    def transform_reward_spec(self, reward_spec):
        return self._transform_spec(reward_spec, self.in_keys, self._out_key)

    def transform_done_spec(self, done_spec):
        return self._transform_spec(done_spec, self.in_keys, self._out_key)

    def transform_action_spec(self, action_spec):
        if self._in_key_inv is None:
            return action_spec
        return self._transform_spec(action_spec, self._out_keys_inv_list, self._in_key_inv)

    def transform_state_spec(self, state_spec):
        if self._in_key_inv is None:
            return state_spec
        return self._transform_spec(state_spec, self._out_keys_inv_list, self._in_key_inv)

    def __repr__(self) -> str:
        return f"Stack(in_keys={self.in_keys}, out_key={self._out_key}, dim={self.dim})"


def _depth(item) -> int:
    key = item[0]
    return 0 if isinstance(key, str) else len(key)


class RemoveEmptySpecs(Transform):
    """Removes empty sub-TensorDicts (and their empty ``Composite`` specs).

    The inverse call re-creates the empty entries the inner env's input specs hold.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"a": torch.zeros(1), "empty": TensorDict()}, [])
        >>> sorted(RemoveEmptySpecs()(td).keys())
        ['a']
    """

    def __init__(self, in_keys=None, out_keys=None, in_keys_inv=None, out_keys_inv=None):
        super().__init__()
        self._has_empty_input = True

    @property
    def has_step(self) -> bool:
        return True

    @staticmethod
    def _prune(comp: Composite) -> bool:
        found = False
        for key, spec in sorted(comp.items(True), key=_depth, reverse=True):
            if isinstance(spec, Composite) and spec.is_empty():
                del comp[key]
                found = True
        return found

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        output_spec = output_spec.clone()
        for name in ("full_done_spec", "full_observation_spec", "full_reward_spec"):
            if name in output_spec.keys():
                self._prune(output_spec[name])
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        input_spec = input_spec.clone()
        found = False
        for name in ("full_action_spec", "full_state_spec"):
            if name in input_spec.keys():
                found = self._prune(input_spec[name]) or found
        self._has_empty_input = found
        return input_spec

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self._has_empty_input:
            return tensordict
        parent = self.parent
        if parent is None:
            return tensordict
        input_spec = parent.input_spec
        present = set(tensordict.keys(True))
        for name in ("full_action_spec", "full_state_spec"):
            if name not in input_spec.keys():
                continue
            for key, spec in sorted(input_spec[name].items(True), key=_depth):
                if isinstance(spec, Composite) and spec.is_empty() and key not in present:
                    tensordict.create_nested(key)
        return tensordict

    @property
    def has_inverse(self) -> bool:
        return self._has_empty_input

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key, value in sorted(next_tensordict.items(True), key=_depth, reverse=True):
            if (
                is_tensor_collection(value)
                and not isinstance(value, NonTensorData)
                and value.is_empty()
            ):
                del next_tensordict[key]
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    def _repr_args(self) -> str:
        return ""
