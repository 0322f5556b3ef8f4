"""UnaryTransform (a user function per entry) and Hash (hashes of entries)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from copy import copy
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDictBase, is_tensor_collection

from rl.core import Composite, NonTensor, Unbounded

from ._base import Transform, _missing_key_error
from ._spec_utils import NestedKey

__all__ = ["Hash", "UnaryTransform"]


def _spec_of_value(value, device) -> Any:
    """The spec of one output value: ``Unbounded`` for tensors, ``NonTensor`` otherwise."""
    if isinstance(value, (NonTensorData, NonTensorStack)):
        return NonTensor(shape=value.batch_size, device=device)
    if isinstance(value, torch.Tensor):
        return Unbounded(shape=value.shape, device=value.device, dtype=value.dtype)
    if is_tensor_collection(value):
        return Composite(
            {k: _spec_of_value(v, device) for k, v in value.items()},
            shape=value.batch_size,
            device=device,
        )
    return NonTensor(shape=(), device=device)


def _plain(value):
    """Python data out of ``NonTensorData`` / ``NonTensorStack`` (as TorchRL's transforms)."""
    if isinstance(value, NonTensorData):
        return value.get("data") if value.dim() == 0 else value.tolist()
    if isinstance(value, NonTensorStack):
        return value.tolist()
    return value


class UnaryTransform(Transform):
    """Applies a function to each ``in_key`` and writes the result to the matching ``out_key``.

    The output specs are found by calling ``fn`` on a zero-filled sample of the env's
    specs, so ``fn`` may change shapes and dtypes or return python objects (strings,
    stored as non-tensor data).

    Args:
        in_keys: the inputs.
        out_keys: the outputs.
        in_keys_inv: the inputs of the inverse call (inner side).
        out_keys_inv: the outputs of the inverse call (outer side).
        fn: the function (a non-tensor input arrives as python data, unless
            ``use_raw_nontensor``).
        inv_fn: the function of the inverse call (default ``fn``).
        use_raw_nontensor: hand ``NonTensorData`` / ``NonTensorStack`` to ``fn`` unchanged.

    Examples:
        >>> import torch
        >>> from rl.envs import PendulumEnv
        >>> env = PendulumEnv().append_transform(
        ...     UnaryTransform(in_keys=["observation"], out_keys=["obs2"], fn=lambda x: x * 2)
        ... )
        >>> td = env.reset()
        >>> torch.equal(td["obs2"], td["observation"] * 2)
        True
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_keys: Sequence[NestedKey],
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        *,
        fn: Callable[[Any], Any],
        inv_fn: Callable[[Any], Any] | None = None,
        use_raw_nontensor: bool = False,
    ):
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        if not callable(fn):
            raise TypeError(f"{type(self).__name__} fn must be callable, got {fn!r}")
        self._fn = fn
        self._inv_fn = inv_fn
        self._use_raw_nontensor = use_raw_nontensor

    def _apply_transform(self, value):
        if not self._use_raw_nontensor:
            value = _plain(value)
        return self._fn(value)

    def _inv_apply_transform(self, state):
        if not self._use_raw_nontensor:
            state = _plain(state)
        if self._inv_fn is not None:
            return self._inv_fn(state)
        return self._fn(state)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in self._io_pairs_inv:
            value = tensordict.get(out_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, out_key, tensordict)
            tensordict.set(in_key, self._inv_apply_transform(value))
        return tensordict

    def _probe_specs(self, parts: dict[str, Composite], pairs, forward: bool) -> dict:
        """Runs the map on a zero sample of ``parts`` and returns ``{out_key: spec}``."""
        sample = None
        for comp in parts.values():
            z = comp.zero()
            sample = z if sample is None else sample.update(z)
        out = {}
        if sample is None:
            return out
        for in_key, out_key in pairs:
            # (non-tensor entries are not listed by keys(leaves_only=True))
            value = sample.get(in_key, None)
            if value is None:
                continue
            result = self._apply_transform(value) if forward else self._inv_apply_transform(value)
            device = next(iter(parts.values())).device
            if not isinstance(result, (torch.Tensor, NonTensorData, NonTensorStack)) and not (
                is_tensor_collection(result)
            ):
                out[out_key] = NonTensor(shape=sample.batch_size, device=device)
            else:
                out[out_key] = _spec_of_value(result, device)
        return out

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        output_spec = output_spec.clone()
        names = [
            n
            for n in ("full_observation_spec", "full_reward_spec", "full_done_spec")
            if n in output_spec.keys()
        ]
        new = self._probe_specs({n: output_spec[n] for n in names}, self._io_pairs, True)
        for name in names:
            comp = output_spec[name]
            keys = set(comp.keys(True, True))
            for in_key, out_key in self._io_pairs:
                if in_key in keys and out_key in new:
                    comp[out_key] = new[out_key]
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        input_spec = input_spec.clone()
        if not self._io_pairs_inv:
            return input_spec
        names = [n for n in ("full_action_spec", "full_state_spec") if n in input_spec.keys()]
        # as TorchRL: the outer spec is what the forward map makes of the inner entry
        new = self._probe_specs({n: input_spec[n] for n in names}, self._io_pairs_inv, True)
        for name in names:
            comp = input_spec[name]
            keys = set(comp.keys(True, True))
            for in_key, out_key in self._io_pairs_inv:
                if in_key in keys and out_key in new:
                    comp[out_key] = new[out_key]
        return input_spec

    def _repr_args(self) -> str:
        return f"in_keys={self.in_keys}, out_keys={self.out_keys}, fn={self._fn!r}"


class Hash(UnaryTransform):
    """Writes a hash (a ``uint8`` tensor, 32 bytes of SHA-256 by default) of each ``in_key``.

    With ``in_keys_inv`` (or a ``repertoire``) the inputs seen are remembered, so that the
    inverse call maps a hash back to its input.

    Args:
        in_keys: the values to hash (strings, or anything ``hash_fn`` takes).
        out_keys: where to write the hashes.
        in_keys_inv: inputs restored by the inverse call.
        out_keys_inv: hashes read by the inverse call.
        hash_fn: ``(value) -> Tensor`` or ``(value, seed) -> Tensor`` when ``seed`` is given
            (default :meth:`reproducible_hash`).
        seed: the seed passed to ``hash_fn``.
        use_raw_nontensor: hand ``NonTensorData`` to ``hash_fn`` unchanged.
        repertoire: the ``{hash tuple: input}`` dict of the inverse map (kept, not copied).

    Raises:
        ValueError: ``hash_fn`` returns something else than a tensor.
        RuntimeError: an inverse call without a repertoire.

    Examples:
        >>> from tensordict import TensorDict
        >>> t = Hash(in_keys=["text"], out_keys=["hash"])
        >>> t(TensorDict(text="abc"))["hash"][:4]
        tensor([186, 120,  22, 191], dtype=torch.uint8)
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_keys: Sequence[NestedKey],
        in_keys_inv: Sequence[NestedKey] | None = None,
        out_keys_inv: Sequence[NestedKey] | None = None,
        *,
        hash_fn: Callable | None = None,
        seed: Any | None = None,
        use_raw_nontensor: bool = False,
        repertoire: dict | None = None,
    ):
        if hash_fn is None:
            hash_fn = Hash.reproducible_hash
        if repertoire is None and in_keys_inv is not None and len(in_keys_inv) > 0:
            repertoire = {}
        self._repertoire = repertoire
        self._seed = seed
        self._hash_fn = hash_fn
        super().__init__(
            in_keys,
            out_keys,
            in_keys_inv,
            out_keys_inv,
            fn=self.call_hash_fn,
            inv_fn=self.get_input_from_hash,
            use_raw_nontensor=use_raw_nontensor,
        )

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        return {"_repertoire": self._repertoire}

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        self._repertoire = state_dict.get("_repertoire")

    @classmethod
    def hash_to_repertoire_key(cls, hash_tensor):
        """A hashable (nested tuple of ints) form of a hash tensor."""
        if isinstance(hash_tensor, torch.Tensor):
            if hash_tensor.dim() == 0:
                return hash_tensor.tolist()
            return tuple(cls.hash_to_repertoire_key(t) for t in hash_tensor.tolist())
        if isinstance(hash_tensor, list):
            return tuple(cls.hash_to_repertoire_key(t) for t in hash_tensor)
        return hash_tensor

    def get_input_from_hash(self, hash_tensor) -> Any:
        """The input that produced ``hash_tensor`` (needs a repertoire)."""
        if self._repertoire is None:
            raise RuntimeError(
                "Hash got an inverse call but keeps no repertoire: pass in_keys_inv / "
                "out_keys_inv or repertoire= to the constructor"
            )
        return self._repertoire[self.hash_to_repertoire_key(hash_tensor)]

    def call_hash_fn(self, value):
        """``hash_fn(value)`` (with the seed if any), remembered in the repertoire."""
        out = self._hash_fn(value) if self._seed is None else self._hash_fn(value, self._seed)
        if not torch.is_tensor(out):
            raise ValueError(
                f"Hash hash_fn must return a tensor, got {type(out).__name__} from {self._hash_fn!r}"
            )
        if self._repertoire is not None:
            self._repertoire[self.hash_to_repertoire_key(out)] = copy(value)
        return out

    @classmethod
    def reproducible_hash(cls, string, seed=None) -> torch.Tensor:
        """SHA-256 of ``seed + string`` as a ``(32,)`` ``uint8`` tensor (``None`` hashes ``""``)."""
        if string is None:
            string = ""
        seeded = seed + string if seed is not None else str(string)
        digest = bytearray(hashlib.sha256(seeded.encode("utf-8")).digest())
        return torch.frombuffer(digest, dtype=torch.uint8)
