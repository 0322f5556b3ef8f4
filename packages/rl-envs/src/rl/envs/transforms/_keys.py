"""Key-level transforms: rename, exclude, select, concatenate."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rl.core import Bounded, Unbounded

from ._base import Transform, _missing_key_error
from ._spec_utils import NestedKey, leaf_keys, normalize_key, normalize_keys

__all__ = ["RenameTransform", "ExcludeTransform", "SelectTransform", "CatTensors"]


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

    Raises:
        ValueError: at spec time, a key is a reward or done key (the env needs them).

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
        for name in ("full_reward_spec", "full_done_spec"):
            present = set(leaf_keys(output_spec[name])) if name in output_spec.keys() else set()
            for key in self.excluded_keys:
                if key in present:
                    raise ValueError(
                        f"ExcludeTransform cannot exclude {key!r}: it is in the env's {name} "
                        "and the env needs it"
                    )
        obs = output_spec["full_observation_spec"]
        for key in self.excluded_keys:
            if key in obs.keys(include_nested=True):
                del obs[key]
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
        if self.keep_rewards:
            always.update(leaf_keys(output_spec["full_reward_spec"]))
        if self.keep_dones:
            always.update(leaf_keys(output_spec["full_done_spec"]))
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
