"""JAX arrays to torch tensors and back, and JAX's random key, for the JAX simulators
(:mod:`rl.envs.libs.jumanji`, :mod:`rl.envs.libs.brax`).

Arrays cross through DLPack: a CPU JAX array becomes a torch tensor on the same memory
(no copy), a contiguous torch tensor becomes a JAX array on the same memory. JAX treats
its arrays as immutable, so the wrappers hand torch only arrays that JAX does not read
again (their jitted functions return the observations as arrays of their own).

JAX is imported on first use (the module itself imports only torch), so importing a
wrapper's module does not import JAX.
"""

from __future__ import annotations

import importlib.util
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = [
    "JaxKey",
    "JaxStateMixin",
    "SimFunctions",
    "build_functions",
    "check_batch_size",
    "compiled_functions",
    "import_jax",
    "split_keys",
    "strong_types",
    "to_jax",
    "to_torch",
    "torch_dtype",
    "tree_from_state",
    "tree_state",
]

_has_jax = importlib.util.find_spec("jax") is not None

_NP_TO_TORCH = {
    np.dtype("bool"): torch.bool,
    np.dtype("uint8"): torch.uint8,
    np.dtype("int8"): torch.int8,
    np.dtype("int16"): torch.int16,
    np.dtype("uint16"): torch.uint16,
    np.dtype("int32"): torch.int32,
    np.dtype("uint32"): torch.uint32,
    np.dtype("int64"): torch.int64,
    np.dtype("uint64"): torch.uint64,
    np.dtype("float16"): torch.float16,
    np.dtype("float32"): torch.float32,
    np.dtype("float64"): torch.float64,
    np.dtype("complex64"): torch.complex64,
    np.dtype("complex128"): torch.complex128,
}


def import_jax(extra: str):
    """Imports and returns ``jax``, or raises an ``ImportError`` naming the extra of
    ``rl-envs`` that installs it (``"jumanji"``, ``"brax"``)."""
    if not _has_jax:
        raise ImportError(f'JAX is not installed: pip install "rl-envs[{extra}]"')
    import jax

    return jax


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a JAX / numpy dtype (``bfloat16`` included).

    Raises:
        TypeError: torch has no such dtype.
    """
    dtype = np.dtype(dtype)
    if dtype.name == "bfloat16":  # ml_dtypes' numpy extension type
        return torch.bfloat16
    if dtype not in _NP_TO_TORCH:
        raise TypeError(f"JAX dtype {dtype} has no torch equivalent")
    return _NP_TO_TORCH[dtype]


def to_torch(value: Any, device: torch.device | None = None) -> torch.Tensor:
    """A JAX (or numpy) array as a torch tensor: the same memory where both live on one
    device (DLPack), a copy onto ``device`` otherwise.

    Args:
        value: a ``jax.Array``, a numpy array or a Python / numpy scalar.
        device: the device of the result (``None``: where the array is).
    """
    if isinstance(value, np.ndarray | np.generic | int | float | bool):
        tensor = torch.as_tensor(np.asarray(value))
    else:
        tensor = torch.from_dlpack(value)
    if device is not None and tensor.device != device:
        tensor = tensor.to(device)
    return tensor


def to_jax(tensor: torch.Tensor, dtype: Any = None):
    """A torch tensor as a JAX array on JAX's default device (the same memory when it is
    contiguous, of ``dtype`` and on that device), detached from autograd.

    Args:
        tensor: the tensor.
        dtype: the JAX / numpy dtype of the result (``None``: the tensor's). The cast is
            done in torch, so JAX sees the dtype its jitted functions were traced with
            and does not trace them again.
    """
    import jax

    device = jax.devices()[0]
    tensor = tensor.detach()
    if dtype is not None:
        tensor = tensor.to(torch_dtype(dtype))
    if device.platform == "cpu" and tensor.device.type != "cpu":
        tensor = tensor.cpu()  # a CPU-only JAX cannot read a CUDA tensor in place
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    array = jax.numpy.from_dlpack(tensor)
    if array.devices() != {device}:  # where the wrappers' state lives
        array = jax.device_put(array, device)
    return array


def split_keys(key, n: int):
    """``(next_key, keys)``: the key that follows ``key`` and ``n`` fresh keys ``[n, 2]``.

    They are ``jax.random.split(key, n + 1)`` (first row: the next key), TorchRL's scheme,
    so a seed gives the keys it gives in TorchRL. Traceable: the wrappers call it inside
    their jitted reset.
    """
    import jax

    keys = jax.random.split(key, n + 1)
    return keys[0], keys[1:]


def strong_types(tree: Any) -> Any:
    """``tree`` with no weakly typed leaf (a ``jnp.array(0.0)`` a reset writes and its
    step replaces by a computed value). Traceable: the wrappers apply it to the state
    their jitted reset and step return, so the state has one type and the step compiles
    once.
    """
    import jax

    return jax.tree_util.tree_map(lambda x: jax.lax.convert_element_type(x, x.dtype), tree)


class JaxKey:
    """The PRNG key of a JAX simulator wrapper: seeded by ``set_seed``, moved on by each
    reset (:func:`split_keys`).

    An unseeded key draws its seed from torch's global generator on first use, so
    ``torch.manual_seed`` makes an unseeded env reproducible too.

    Args:
        extra: the extra of ``rl-envs`` named when JAX is missing.
    """

    def __init__(self, extra: str) -> None:
        self._extra = extra
        self.key = None

    def seed(self, seed: int) -> None:
        """Starts the key over from ``seed`` (``jax.random.PRNGKey(seed)``).

        Raises:
            TypeError: ``seed`` is not an int.
        """
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
            raise TypeError(f"seed must be an int, got {seed!r}")
        jax = import_jax(self._extra)
        # PRNGKey takes a 64-bit seed; rl's derived seeds stay below 2**63
        self.set(jax.random.PRNGKey(int(seed) % (1 << 63)))

    def set(self, key) -> None:
        """Holds ``key``, committed to JAX's default device.

        Arrays that come from torch (DLPack) are committed to their device; a jitted
        function called with committed arrays compiles anew for uncommitted ones, so the
        key is committed too: the state reset makes and the state step makes then match
        and each function compiles once.
        """
        import jax

        self.key = None if key is None else jax.device_put(key, jax.devices()[0])

    def current(self):
        """The held key (seeded from torch's global generator if it never was)."""
        if self.key is None:
            self.seed(int(torch.randint(0, 2**31 - 1, ()).item()))
        return self.key

    def state(self) -> torch.Tensor | None:
        """The held key as a tensor (``None`` before the first seed or reset)."""
        return None if self.key is None else to_torch(self.key).clone()

    def load_state(self, value: torch.Tensor | None) -> None:
        """Restores :meth:`state`."""
        self.set(None if value is None else to_jax(value))


def tree_state(tree: Any) -> list[torch.Tensor]:
    """The leaves of a JAX pytree as tensors (copies), for an env's ``env_state()``."""
    import jax

    return [to_torch(leaf).clone() for leaf in jax.tree_util.tree_leaves(tree)]


def tree_from_state(like: Any, leaves: list[torch.Tensor], name: str) -> Any:
    """The pytree of ``like``'s structure made of ``leaves`` (:func:`tree_state`).

    Raises:
        ValueError: the leaves do not match ``like``'s (number, shapes or dtypes),
            naming ``name``.
    """
    import jax

    ref, treedef = jax.tree_util.tree_flatten(like)
    if len(leaves) != len(ref) or any(
        tuple(t.shape) != tuple(r.shape) or t.dtype != torch_dtype(r.dtype)
        for t, r in zip(leaves, ref)
    ):
        raise ValueError(
            f"cannot restore the state of {name}: expected {len(ref)} arrays of shapes "
            f"{[tuple(r.shape) for r in ref]}, got {len(leaves)} of shapes "
            f"{[tuple(t.shape) for t in leaves]}"
        )
    return jax.tree_util.tree_unflatten(treedef, [to_jax(t.clone()) for t in leaves])


class JaxStateMixin:
    """The PRNG key, seeding and saved state of a wrapper that holds a JAX simulator's
    state (``self._prng``: a :class:`JaxKey`; ``self._state``: the pytree of every copy,
    None before the first reset). Shared by ``JumanjiWrapper`` and ``BraxWrapper``."""

    @property
    def key(self):
        """The JAX PRNG key the next reset splits (settable)."""
        return self._prng.current()

    @key.setter
    def key(self, value) -> None:
        self._prng.set(value)

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._prng.seed(seed)

    def env_state(self) -> dict[str, Any]:
        """The PRNG key and the JAX state of every copy, as tensors (copies)."""
        return {
            "key": self._prng.state(),
            "state": None if self._state is None else tree_state(self._state),
        }

    def load_env_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`env_state` (an env never reset is reset first, for the
        structure of its state).

        Raises:
            ValueError: ``state`` does not come from an env of this kind and batch size.
        """
        if not isinstance(state, dict) or set(state) != {"key", "state"}:
            raise ValueError(
                f"cannot restore the state of {self!r}: expected the dict of "
                f"{type(self).__name__}.env_state(), got {state!r:.80}"
            )
        if state["state"] is not None:
            if self._state is None:
                self.reset()
            self._state = tree_from_state(self._state, state["state"], repr(self))
            self._state_loaded()
        self._prng.load_state(state["key"])

    def _state_loaded(self) -> None:
        """Hook: the state was replaced by :meth:`load_env_state` (nothing by default)."""


def check_batch_size(batch_size: Any) -> torch.Size:
    """``batch_size`` as a ``torch.Size`` of positive ints (``None``: ``[]``).

    Raises:
        ValueError: it is not a sequence of positive ints, naming it.
    """
    if batch_size is None:
        return torch.Size([])
    if isinstance(batch_size, int):
        batch_size = (batch_size,)
    try:
        dims = tuple(batch_size)
    except TypeError:
        dims = None
    if dims is None or not all(
        isinstance(d, int | np.integer) and not isinstance(d, bool) and d > 0 for d in dims
    ):
        raise ValueError(f"batch_size must be a sequence of positive ints, got {batch_size!r}")
    return torch.Size(int(d) for d in dims)


# per simulator object: its compiled functions, by configuration (batch numel, ...)
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def compiled_functions(env: Any, config: tuple, build: Callable[[Any], Any]) -> Any:
    """``build(weakref.ref(env))``, made once per simulator object and ``config``.

    JAX compiles a jitted function for each function object it is given, so two wrappers
    of one Jumanji / Brax env (or one wrapper rebuilt) would compile the same
    ``reset`` / ``step`` twice. The functions ``build`` makes reach the env through the
    weak reference, so the cache does not keep the env alive (its entry goes with it).
    """
    try:
        per_env = _COMPILED.setdefault(env, {})
    except TypeError:  # an env that cannot be weakly referenced or hashed: no sharing
        return build(lambda env=env: env)
    if config not in per_env:
        per_env[config] = build(weakref.ref(env))
    return per_env[config]


class SimFunctions(NamedTuple):
    """The JAX functions of a wrapper over ``n`` copies of a simulator (all jitted, or
    all eager), made by :func:`build_functions`.

    - ``reset(key) -> (next_key, state, outputs)``: resets every copy;
    - ``reset_some(key, state, mask) -> (next_key, state, outputs)``: resets the copies
      where ``mask`` (``[n]`` bool) is set, the others keep their state (``outputs``
      are those of the fresh states; the caller keeps its values for the others);
    - ``step(state, action) -> (state, outputs)``.
    """

    reset: Callable
    reset_some: Callable
    step: Callable


def build_functions(
    env_ref: Callable[[], Any],
    n: int,
    reset: Callable,
    step: Callable,
    outputs: Callable,
    jit: bool = True,
) -> SimFunctions:
    """The :class:`SimFunctions` of a simulator, ``jax.vmap``-ed over ``n`` copies.

    Args:
        env_ref: returns the simulator (a weak reference, see :func:`compiled_functions`).
        n: the number of copies (the numel of the wrapper's batch size).
        reset: ``reset(env, key) -> (state, view)`` for one copy.
        step: ``step(env, state, action) -> (state, view)`` for one copy.
        outputs: ``outputs(view) -> arrays`` (batched): what crosses to torch. It returns
            arrays of their own (``jnp.array(x, copy=True)``) where the state holds the
            same values, as torch may write into what it is given.
        jit: compile the three functions with ``jax.jit``.
    """
    import jax
    import jax.numpy as jnp

    def fresh(key):
        key, keys = split_keys(key, n)
        state, view = jax.vmap(lambda k: reset(env_ref(), k))(keys)
        return key, strong_types(state), view

    def reset_all(key):
        key, state, view = fresh(key)
        return key, state, outputs(view)

    def reset_some(key, state, mask):
        key, new, view = fresh(key)

        def pick(a, b):
            return jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b)

        return key, jax.tree_util.tree_map(pick, new, state), outputs(view)

    def step_all(state, action):
        state, view = jax.vmap(lambda s, a: step(env_ref(), s, a))(state, action)
        return strong_types(state), outputs(view)

    wrap = jax.jit if jit else (lambda f: f)
    return SimFunctions(wrap(reset_all), wrap(reset_some), wrap(step_all))
