"""``EnvCreator``: an environment factory that can be shipped to another process, with
the state its environments share (normalisation statistics, counters)."""

from __future__ import annotations

import io
import pickle
import threading
from collections import ChainMap, OrderedDict
from collections.abc import Callable, Mapping
from multiprocessing.context import get_spawning_popen
from multiprocessing.reduction import ForkingPickler
from multiprocessing.synchronize import Lock, RLock
from typing import Any

import cloudpickle
import torch
from tensordict import TensorDictBase

__all__ = ["EnvCreator"]


_PICKLING = threading.local()


class _SharingPickler(cloudpickle.CloudPickler):
    """cloudpickle with multiprocessing's reductions first (shared ctypes values, their
    arenas, and what ``torch.multiprocessing`` registers for tensors); the pickler reads
    its dispatch table when it is made, hence a class attribute. The reductions
    registered later (a new ctypes type) are seen: the chain holds multiprocessing's own
    dict."""

    dispatch_table = ChainMap(
        ForkingPickler._extra_reducers, cloudpickle.CloudPickler.dispatch_table
    )


def _pickled(state: tuple) -> bytes:
    """A creator's whole state, in one pass (one memo: an object it holds twice, a
    counter in the factory's closure and among the values, travels once).

    While a process is being started (the creator is one of its arguments), with
    multiprocessing's reductions: what the state holds of shared memory (a
    ``TrajCounter``'s counter, ``VecNorm``'s statistics) reaches the new process
    shared. Otherwise (``pickle.dumps``, a copy) by cloudpickle alone: tensors are copied
    and the multiprocessing values left out (they cannot be pickled but to start a
    process; the copy's envs keep their own)."""
    if get_spawning_popen() is None:
        return cloudpickle.dumps(state[:5] + ([],) + state[6:])
    buffer = io.BytesIO()
    _PICKLING.active = True
    try:
        _SharingPickler(buffer).dump(state)
    finally:
        _PICKLING.active = False
    return buffer.getvalue()


def _rebuild_creator(state: tuple) -> EnvCreator:
    out = EnvCreator.__new__(EnvCreator)
    (
        out.create_env_fn,
        out.create_env_kwargs,
        out._share_memory,
        out.initialized,
        out._transform_state_dict,
        out._mp_values,
        out._meta_data,
        out.env_type,
    ) = state
    return out


def _rebuild_pickled(payload: bytes) -> EnvCreator:
    return _rebuild_creator(pickle.loads(payload))


def _rebuild_copied(payload: bytes) -> EnvCreator:
    """A copy (``pickle.dumps``): its statistics, copied, are moved to shared memory
    again, for the envs and workers of the copy to share."""
    out = _rebuild_creator(pickle.loads(payload))
    if out._share_memory and out._transform_state_dict:
        out.share_memory(out._transform_state_dict)
    return out


def _is_mp_value(value: Any) -> bool:
    """A ``multiprocessing.Value`` (or array) or lock: shared with the workers as is."""
    from multiprocessing.sharedctypes import Synchronized, SynchronizedArray

    if isinstance(value, (Synchronized, SynchronizedArray)) and hasattr(value, "_obj"):
        return True
    return isinstance(value, (Lock, RLock))


def _find_mp_values(obj: Any, values: list, prefix: tuple = ()) -> list:
    """``(path, value)`` of every multiprocessing value held by an env, its base env and
    its transforms (a path of attribute names and Compose positions)."""
    from ..transforms import Compose, TransformedEnv

    if isinstance(obj, TransformedEnv):
        _find_mp_values(obj.transform, values, prefix + ("transform",))
        _find_mp_values(obj.base_env, values, prefix + ("base_env",))
    elif isinstance(obj, Compose):
        for i, t in enumerate(obj.transforms):
            _find_mp_values(t, values, prefix + (i,))
    for name, value in vars(obj).items():
        if _is_mp_value(value):
            values.append((prefix + (name,), value))
    return values


def _copy_into(target: Mapping, source: Mapping) -> None:
    """Copies ``source``'s tensors into ``target``'s, in place, key by key (dicts walked)."""
    for key, item in source.items():
        if key not in target:
            raise KeyError(
                f"EnvCreator.load_state_dict: {key!r} is not in the shared state "
                f"(keys {list(target)})"
            )
        current = target[key]
        if isinstance(current, Mapping) and not isinstance(current, TensorDictBase):
            _copy_into(current, item)
        else:
            current.copy_(item)


def _set_mp_value(obj: Any, path: tuple, value: Any) -> None:
    for step in path[:-1]:
        obj = obj[step] if isinstance(step, int) else getattr(obj, step)
    setattr(obj, path[-1], value)


class EnvCreator:
    """An environment factory for worker processes, whose environments share state.

    At construction the creator builds one environment (a "shadow" env), resets it and
    takes one random step, so that lazily initialised transforms (``VecNorm``'s
    statistics) exist; then it keeps that env's ``state_dict()`` (TensorDicts in it are
    moved to shared memory when ``share_memory=True``), the multiprocessing values and
    locks its transforms hold (``TrajCounter``'s counter) and its
    :class:`~rl.envs.EnvMetaData`, and closes it. Every env the creator builds, in this
    process or in another one it was sent to (a ``ParallelEnv`` worker, an
    ``mp.Process``), loads that state dict (``strict=False``) and gets those values: a
    ``VecNorm`` of every worker updates the same statistics, which the main process reads
    with ``creator.state_dict()``, and trajectory ids are unique across workers. Tensors
    travel to other processes in shared memory when the creator goes through
    ``torch.multiprocessing`` (a process's arguments); ``pickle.dumps`` copies them.

    The factory itself is serialized with ``cloudpickle``: importable functions and
    classes (and ``functools.partial`` of them) travel by reference, lambdas and local
    functions by value, so both work with the ``"spawn"`` start method. Whatever a lambda
    closes over must itself be picklable.

    Args:
        create_env_fn: a callable returning an :class:`~rl.envs.EnvBase` (an env class,
            a function, a ``functools.partial``, a lambda, another ``EnvCreator``).
        create_env_kwargs: keyword arguments passed to ``create_env_fn`` at each call.
        share_memory: move the TensorDicts of the shadow env's state dict to shared
            memory. Defaults to ``True``.
        **kwargs: more keyword arguments for ``create_env_fn`` (``create_env_kwargs``
            wins where both name one).

    Calling the creator with keyword arguments passes them too; the creator's own
    keyword arguments win where both name one (TorchRL's order).

    Raises:
        TypeError: ``create_env_fn`` is not callable or ``create_env_kwargs`` not a mapping.

    Examples:
        >>> import pickle
        >>> from rl.envs import CartPoleEnv, EnvCreator
        >>> creator = EnvCreator(CartPoleEnv, max_episode_steps=100)
        >>> clone = pickle.loads(pickle.dumps(creator))
        >>> env = clone()
        >>> env.max_episode_steps
        100
        >>> creator.make_variant(max_episode_steps=5)().max_episode_steps
        5
    """

    def __init__(
        self,
        create_env_fn: Callable[..., Any],
        create_env_kwargs: Mapping[str, Any] | None = None,
        share_memory: bool = True,
        **kwargs: Any,
    ) -> None:
        if not callable(create_env_fn):
            raise TypeError(
                f"create_env_fn must be a callable returning an env, got {create_env_fn!r}"
            )
        if create_env_kwargs is not None and not isinstance(create_env_kwargs, Mapping):
            raise TypeError(
                f"create_env_kwargs must be a mapping of keyword arguments, got "
                f"{type(create_env_kwargs).__name__} {create_env_kwargs!r}"
            )
        kwargs.update(create_env_kwargs or {})
        self.create_env_fn = create_env_fn
        self.create_env_kwargs = kwargs
        self._share_memory = share_memory
        self.initialized = False
        self._meta_data = None
        self._transform_state_dict = None
        self._mp_values: list = []
        self.env_type = None
        self.init_()

    @classmethod
    def _plain(cls, create_env_fn: Callable[..., Any], create_env_kwargs: Mapping) -> EnvCreator:
        """A creator that only calls ``create_env_fn`` (no shadow env, no shared state):
        how batched envs ship a plain factory to their workers. A user's ``EnvCreator``
        given as the factory keeps its own state and shares it."""
        if not callable(create_env_fn):
            raise TypeError(
                f"create_env_fn must be a callable returning an env, got {create_env_fn!r}"
            )
        out = cls.__new__(cls)
        out.create_env_fn = create_env_fn
        out.create_env_kwargs = dict(create_env_kwargs)
        out._share_memory = False
        out.initialized = True
        out._meta_data = None
        out._transform_state_dict = None
        out._mp_values = []
        out.env_type = None
        return out

    def init_(self) -> EnvCreator:
        """Builds the shadow env and keeps its state, multiprocessing values and metadata."""
        from .._metadata import EnvMetaData

        shadow = self.create_env_fn(**self.create_env_kwargs)
        try:
            tensordict = shadow.reset()
            shadow.rand_step(tensordict)
            self.env_type = type(shadow)
            self._transform_state_dict = shadow.state_dict()
            self._mp_values = _find_mp_values(shadow, [])
            if self._share_memory:
                self.share_memory(self._transform_state_dict)
            self._meta_data = EnvMetaData.metadata_from_env(shadow)
        finally:
            shadow.close()
        self.initialized = True
        return self

    def make_variant(self, **kwargs: Any) -> EnvCreator:
        """A creator of the same factory and shared state with ``kwargs`` changed (no new
        shadow env): e.g. workers of different lengths sharing one ``TrajCounter``.

        Unlike TorchRL (whose variant edits the original's keyword arguments too), the
        original keeps its own."""
        out = type(self).__new__(type(self))
        out.__dict__.update(self.__dict__)
        out.create_env_kwargs = {**self.create_env_kwargs, **kwargs}
        return out

    def share_memory(self, state_dict: OrderedDict) -> None:
        """Moves the TensorDicts of ``state_dict`` to shared memory, in place.

        As TorchRL: plain tensors (a module's buffers and parameters) are removed, so
        that the envs keep their own; TensorDicts already shared are removed too (their
        owner shares them); nested ordered dicts are walked. A module's extra state held
        as a plain dict of tensors (``VecNorm``'s statistics) has its tensors moved to
        shared memory in place (TorchRL leaves them to be moved when first sent to a
        process; moved now, every env of this process and of the workers holds the same
        memory from the start)."""
        for key, item in list(state_dict.items()):
            if isinstance(item, TensorDictBase):
                if item.is_shared():
                    del state_dict[key]
                else:
                    item.share_memory_()
            elif isinstance(item, OrderedDict):
                self.share_memory(item)
            elif isinstance(item, torch.Tensor):
                del state_dict[key]
            elif isinstance(item, dict):
                for value in item.values():
                    if isinstance(value, torch.Tensor) and not value.is_shared():
                        value.share_memory_()

    @property
    def meta_data(self):
        """The shadow env's :class:`~rl.envs.EnvMetaData` (specs, batch size, device)."""
        if self._meta_data is None:
            raise RuntimeError(
                "meta_data is None in EnvCreator: it is made by init_(), which a creator "
                "made by a batched env for a plain factory does not run"
            )
        return self._meta_data

    @meta_data.setter
    def meta_data(self, value) -> None:
        self._meta_data = value

    def __call__(self, **kwargs: Any) -> Any:
        """Builds an environment, with the shared state loaded into it."""
        if not self.initialized:
            raise RuntimeError("EnvCreator must be initialized (init_()) before being called")
        kwargs.update(self.create_env_kwargs)
        env = self.create_env_fn(**kwargs)
        for path, value in self._mp_values:
            _set_mp_value(env, path, value)
        if self._transform_state_dict:
            env.load_state_dict(self._transform_state_dict, strict=False)
        return env

    def state_dict(self) -> OrderedDict:
        """The shared state every env of this creator loads (empty without one)."""
        if self._transform_state_dict is None:
            return OrderedDict()
        return self._transform_state_dict

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Copies ``state_dict``'s values into the shared state, in place (the envs already
        built see them)."""
        if self._transform_state_dict is None:
            return
        _copy_into(self._transform_state_dict, state_dict)

    def _check_picklable(self) -> None:
        """Raises a ``TypeError`` naming the factory when it cannot be pickled (checked
        before workers start; the shared state travels as it is)."""
        fn = self.create_env_fn
        if isinstance(fn, EnvCreator):
            fn._check_picklable()
        try:
            if not isinstance(fn, EnvCreator):
                cloudpickle.dumps(fn)
            cloudpickle.dumps(self.create_env_kwargs)
        except Exception as err:
            raise TypeError(
                f"cannot pickle the env factory {fn!r} to send it to a worker process "
                f"({type(err).__name__}: {err}); pass an importable function, a "
                "functools.partial or a lambda whose captured variables can be pickled"
            ) from err

    def dumps(self) -> bytes:
        """The pickled creator (shared tensors copied), raising a ``TypeError`` that names
        the factory on failure."""
        self._check_picklable()
        return pickle.dumps(self)

    def __reduce__(self):
        state = (
            self.create_env_fn,
            self.create_env_kwargs,
            self._share_memory,
            self.initialized,
            self._transform_state_dict,
            self._mp_values,
            self._meta_data,
            self.env_type,
        )
        if getattr(_PICKLING, "active", False):
            # inside a creator's own pickling (a creator given as another's factory):
            # its objects go to the same pickler, in the same memo
            return _rebuild_creator, (state,)
        if get_spawning_popen() is None:
            return _rebuild_copied, (_pickled(state),)
        return _rebuild_pickled, (_pickled(state),)

    def __repr__(self) -> str:
        return f"EnvCreator({self.create_env_fn!r}, create_env_kwargs={self.create_env_kwargs})"
