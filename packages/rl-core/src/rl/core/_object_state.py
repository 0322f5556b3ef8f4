"""An object's runtime state as tensors and plain data, restored in place without unpickling.

Simulators keep their state in Python objects: a gymnasium env holds its physics in numpy
arrays, its random generator in a ``numpy.random.Generator`` and its time-limit counter in a
wrapper; a native torch env holds tensors and a ``torch.Generator``. To checkpoint such an
object without pickling it, :func:`object_state` walks its attributes and writes what it
finds as tensors, numbers, strings, lists, tuples and tagged dicts, which
``torch.save`` writes and ``torch.load(weights_only=True)`` reads back.

:func:`load_object_state` writes the values back *into the live object graph*: it never
creates an object of a class named in the state, it only assigns tensors, arrays and plain
values to the attributes of objects that already exist (arrays and tensors are copied in
place, so views held elsewhere keep seeing them), sets generator states, and checks that
each object in the state has the type of the live object it lands on. A crafted state can
therefore change values of the env it is loaded into, but never run code.

What is written:

- ``None``, ``bool``, ``int``, ``float``, ``str``; lists, tuples, dicts (keys plain), sets;
- tensors, numpy arrays of numbers or booleans, numpy scalars and dtypes, ``torch.Size``,
  ``torch.device``, ``torch.dtype``, enum members;
- the states of ``torch.Generator``, ``numpy.random.Generator`` and ``RandomState``;
- any other object that has a ``__dict__``: its attributes, recursively (objects reached
  twice are written once);
- a ``mujoco.MjData``: its integration state (``mj_getState``).

What is left alone (kept as it is in the live object): functions, methods, classes,
modules, locks, files, threads and rendering resources (attributes named ``screen``,
``clock``, ``viewer``, ``renderer``, ``window``, ``mujoco_renderer``), and whatever a
caller's ``skip`` predicate names. Anything else (an extension object with no ``__dict__``,
a numpy array of Python objects) is refused at save time with a :class:`TypeError` that
names where it was found.
"""

from __future__ import annotations

import enum
import functools
import io
import threading
import types
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["load_object_state", "object_state"]

_TAG = "__rl_state__"
_LEAVES = (type(None), bool, int, float, str)
_CODE = (
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    types.ModuleType,
    type,
    functools.partial,
    weakref.ReferenceType,
    staticmethod,
    classmethod,
    property,
)
_RESOURCES = (
    type(threading.Lock()),
    type(threading.RLock()),
    threading.Thread,
    threading.Event,
    threading.Condition,
    io.IOBase,
)
_RESOURCE_NAMES = frozenset(
    {"screen", "clock", "viewer", "_viewers", "renderer", "window", "mujoco_renderer"}
)
_BIT_GENERATORS = {
    name: getattr(np.random, name)
    for name in ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")
    if hasattr(np.random, name)
}


def _qualname(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _is_mjdata(obj: Any) -> bool:
    return type(obj).__name__ == "MjData" and type(obj).__module__.startswith("mujoco")


def _is_mjmodel(obj: Any) -> bool:
    return type(obj).__name__ == "MjModel" and type(obj).__module__.startswith("mujoco")


class _Writer:
    def __init__(self, name: str, skip: Callable[[Any], bool] | None) -> None:
        self.name = name
        self.skip = skip
        self.seen: dict[int, str] = {}
        self.keep: list[Any] = []  # keeps visited objects alive so their ids stay unique

    def fail(self, path: str, what: str) -> TypeError:
        return TypeError(
            f"cannot save the state of {self.name}: {path} is {what}, which is neither a "
            "tensor nor plain data (numbers, strings, lists, dicts, numpy arrays and random "
            "generators) nor an object whose attributes are; give the env a state that is, "
            "or leave it out of the checkpoint"
        )

    def write(self, value: Any, path: str) -> Any:
        if type(value) in _LEAVES:  # exactly: numpy's float64 is a float subclass
            return value
        if (
            isinstance(value, _CODE + _RESOURCES)
            or _is_mjmodel(value)
            or (self.skip is not None and self.skip(value))
        ):
            return {_TAG: "keep"}
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, enum.Enum):
            return {_TAG: "enum", "type": _qualname(value), "name": value.name}
        if isinstance(value, np.generic):
            if isinstance(value, np.number | np.bool_):
                return {_TAG: "np_scalar", "dtype": value.dtype.str, "value": value.item()}
            raise self.fail(path, f"a numpy scalar of dtype {value.dtype}")
        if isinstance(value, np.dtype):
            if value.fields is not None or value.hasobject:
                raise self.fail(path, f"the structured numpy dtype {value}")
            return {_TAG: "np_dtype", "str": value.str}
        if isinstance(value, torch.Size):
            return {_TAG: "size", "dims": list(value)}
        if isinstance(value, torch.device):
            return {_TAG: "device", "str": str(value)}
        if isinstance(value, torch.dtype):
            return {_TAG: "dtype", "str": str(value).removeprefix("torch.")}
        if isinstance(value, torch.Generator):
            return {_TAG: "torch_generator", "state": value.get_state()}
        if isinstance(value, np.random.Generator):
            return {_TAG: "np_generator", "state": self.write(value.bit_generator.state, path)}
        if isinstance(value, np.random.RandomState):
            return {
                _TAG: "np_random_state",
                "state": self.write(value.get_state(legacy=False), path),
            }
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biufc":
                raise self.fail(path, f"a numpy array of dtype {value.dtype}")
            return {
                _TAG: "ndarray",
                "dtype": value.dtype.str,
                "data": torch.from_numpy(np.ascontiguousarray(value).copy()),
            }
        # containers and objects: written once, referred to by path afterwards
        ref = self.seen.get(id(value))
        if ref is not None:
            return {_TAG: "ref", "path": ref}
        self.seen[id(value)] = path
        self.keep.append(value)
        if isinstance(value, TensorDictBase):
            return {
                _TAG: "tensordict",
                "data": value.detach().clone().to_dict(),
                "batch_size": list(value.batch_size),
            }
        if isinstance(value, list):
            return [self.write(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, tuple):
            items = tuple(self.write(v, f"{path}[{i}]") for i, v in enumerate(value))
            if type(value) is tuple:
                return items
            return {_TAG: "tuple_of", "type": _qualname(value), "items": list(items)}
        if isinstance(value, set | frozenset):
            items = [self.write(v, f"{path}{{...}}") for v in value]
            return {_TAG: "set", "frozen": isinstance(value, frozenset), "items": items}
        if isinstance(value, deque):
            items = [self.write(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return {_TAG: "deque", "maxlen": value.maxlen, "items": items}
        if isinstance(value, dict):
            # an object key (an entity keying a map) is written as its position: restoring
            # finds it among the live dict's keys, in the same order
            keys = [
                k if _plain_key(k) else {_TAG: "key_at", "index": i, "type": _qualname(k)}
                for i, k in enumerate(value)
            ]
            return {
                _TAG: "dict",
                "ordered": isinstance(value, OrderedDict),
                "keys": keys,
                "values": [self.write(v, f"{path}[{k!r}]") for k, v in value.items()],
            }
        if _is_mjdata(value):
            return {_TAG: "mjdata", "state": self._mjdata_state(value)}
        attrs = _attributes(value)
        if attrs is None:
            raise self.fail(path, f"a {_qualname(value)} (it has no attributes to save)")
        out = {}
        for key, item in attrs.items():
            if key in _RESOURCE_NAMES:
                continue
            out[key] = self.write(item, f"{path}.{key}")
        return {_TAG: "object", "type": _qualname(value), "attrs": out}

    @staticmethod
    def _mjdata_state(data: Any) -> torch.Tensor:
        import mujoco  # only reached with a live MjData, so mujoco is installed

        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.empty(mujoco.mj_stateSize(data.model, spec), dtype=np.float64)
        mujoco.mj_getState(data.model, data, state, spec)
        return torch.from_numpy(state)


def _slot_names(cls: type) -> list[str]:
    names = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    return [n for n in names if n not in ("__dict__", "__weakref__")]


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python (or a heap type)


def _opaque(cls: type) -> bool:
    """A built-in, pybind11 or nanobind class, whose instances keep state in C."""
    return (
        not cls.__flags__ & _HEAPTYPE
        or cls.__module__ == "pybind11_builtins"
        or type(cls).__name__.startswith("nb_type")
    )


def _attributes(obj: Any) -> dict[str, Any] | None:
    """``obj``'s instance attributes (``__dict__`` and ``__slots__``), or None when it has
    none, or when a built-in base class keeps state out of sight (a socket, a file)."""
    if any(_opaque(cls) for cls in type(obj).__mro__[:-1]):
        return None
    attrs = getattr(obj, "__dict__", None)
    attrs = dict(attrs) if isinstance(attrs, dict) else None
    slots = _slot_names(type(obj))
    if slots:
        attrs = attrs or {}
        for name in slots:
            if hasattr(obj, name):
                attrs[name] = getattr(obj, name)
    return attrs


def _plain_key(key: Any) -> bool:
    if isinstance(key, tuple):
        return all(_plain_key(k) for k in key)
    return type(key) in _LEAVES


_MISSING = object()


class _Reader:
    def __init__(self, name: str) -> None:
        self.name = name

    def fail(self, path: str, what: str) -> ValueError:
        return ValueError(f"cannot restore the state of {self.name}: {path} {what}")

    def read(self, saved: Any, live: Any, path: str) -> Any:
        """The value to hold at ``path``: ``live`` itself when it was updated in place."""
        if type(saved) in _LEAVES:
            return saved
        if isinstance(saved, torch.Tensor):
            if (
                isinstance(live, torch.Tensor)
                and live.shape == saved.shape
                and live.dtype == saved.dtype
            ):
                with torch.no_grad():
                    live.copy_(saved)
                return live
            return saved
        if isinstance(saved, list):
            return self._read_list(saved, live, path)
        if isinstance(saved, tuple):
            lives = live if isinstance(live, tuple) and len(live) == len(saved) else None
            items = tuple(
                self.read(v, lives[i] if lives else _MISSING, f"{path}[{i}]")
                for i, v in enumerate(saved)
            )
            return _MISSING if any(v is _MISSING for v in items) else items
        if not isinstance(saved, dict) or not isinstance(saved.get(_TAG), str):
            raise self.fail(path, f"holds a {type(saved).__name__}, which no saved state has")
        return getattr(self, f"_read_{saved[_TAG]}", self._unknown)(saved, live, path)

    def _unknown(self, saved: dict, live: Any, path: str) -> Any:
        raise self.fail(path, f"has the unknown entry kind {saved[_TAG]!r}")

    def _field(self, saved: dict, key: str, types_: type | tuple, path: str) -> Any:
        value = saved.get(key, _MISSING)
        if not isinstance(value, types_):
            raise self.fail(path, f"has no valid {key!r} (got {type(value).__name__})")
        return value

    def _read_keep(self, saved: dict, live: Any, path: str) -> Any:
        # code or a resource: the live one stays; _MISSING (none here) leaves the
        # attribute that holds it as it is
        return live

    def _read_ref(self, saved: dict, live: Any, path: str) -> Any:
        # the object was restored where it was first met; this reference shares it
        return live

    def _read_enum(self, saved: dict, live: Any, path: str) -> Any:
        name = self._field(saved, "name", str, path)
        if not isinstance(live, enum.Enum) or _qualname(live) != saved.get("type"):
            raise self.fail(path, f"is the enum {saved.get('type')!r} in the state, not here")
        try:
            return type(live)[name]
        except KeyError:
            raise self.fail(path, f"names no member {name!r} of {saved['type']}") from None

    def _read_np_scalar(self, saved: dict, live: Any, path: str) -> Any:
        dtype = self._dtype(self._field(saved, "dtype", str, path), path)
        return dtype.type(self._field(saved, "value", (bool, int, float, complex), path))

    def _dtype(self, text: str, path: str) -> np.dtype:
        try:
            dtype = np.dtype(text)
        except TypeError:
            raise self.fail(path, f"names the unknown numpy dtype {text!r}") from None
        if dtype.kind not in "biufc":
            raise self.fail(path, f"names the numpy dtype {text!r}, expected a numeric one")
        return dtype

    def _read_np_dtype(self, saved: dict, live: Any, path: str) -> Any:
        return self._dtype(self._field(saved, "str", str, path), path)

    def _read_size(self, saved: dict, live: Any, path: str) -> Any:
        dims = self._field(saved, "dims", list, path)
        if not all(isinstance(d, int) for d in dims):
            raise self.fail(path, f"has non-integer dims {dims!r}")
        return torch.Size(dims)

    def _read_device(self, saved: dict, live: Any, path: str) -> Any:
        try:
            return torch.device(self._field(saved, "str", str, path))
        except RuntimeError:
            raise self.fail(path, f"names the unknown device {saved['str']!r}") from None

    def _read_dtype(self, saved: dict, live: Any, path: str) -> Any:
        name = self._field(saved, "str", str, path)
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise self.fail(path, f"names the unknown torch dtype {name!r}")
        return dtype

    def _read_torch_generator(self, saved: dict, live: Any, path: str) -> Any:
        state = self._field(saved, "state", torch.Tensor, path)
        generator = live if isinstance(live, torch.Generator) else torch.Generator()
        try:
            generator.set_state(state)
        except RuntimeError as err:
            raise self.fail(path, f"holds an invalid torch generator state ({err})") from None
        return generator

    def _read_np_generator(self, saved: dict, live: Any, path: str) -> Any:
        state = self.read(self._field(saved, "state", dict, path), _MISSING, path)
        name = state.get("bit_generator") if isinstance(state, dict) else None
        if name not in _BIT_GENERATORS:
            raise self.fail(path, f"names the unknown bit generator {name!r}")
        if isinstance(live, np.random.Generator) and type(live.bit_generator).__name__ == name:
            generator = live
        else:
            generator = np.random.Generator(_BIT_GENERATORS[name]())
        try:
            generator.bit_generator.state = state
        except (TypeError, ValueError, KeyError) as err:
            raise self.fail(path, f"holds an invalid {name} state ({err})") from None
        return generator

    def _read_np_random_state(self, saved: dict, live: Any, path: str) -> Any:
        state = self.read(self._field(saved, "state", dict, path), _MISSING, path)
        generator = live if isinstance(live, np.random.RandomState) else np.random.RandomState()
        try:
            generator.set_state(state)
        except (TypeError, ValueError, KeyError) as err:
            raise self.fail(path, f"holds an invalid RandomState state ({err})") from None
        return generator

    def _read_ndarray(self, saved: dict, live: Any, path: str) -> Any:
        dtype = self._dtype(self._field(saved, "dtype", str, path), path)
        array = self._field(saved, "data", torch.Tensor, path).numpy().astype(dtype, copy=False)
        if (
            isinstance(live, np.ndarray)
            and live.shape == array.shape
            and live.dtype == dtype
            and live.flags.writeable
        ):
            live[...] = array
            return live
        return array.copy()

    def _read_tensordict(self, saved: dict, live: Any, path: str) -> Any:
        data = self._field(saved, "data", dict, path)
        batch = self._field(saved, "batch_size", list, path)
        try:
            td = TensorDict(data, batch_size=batch)
        except Exception as err:  # noqa: BLE001  (a malformed state names the entry)
            raise self.fail(path, f"holds an invalid TensorDict ({err})") from None
        if isinstance(live, TensorDictBase) and live.batch_size == td.batch_size:
            live.update(td.to(live.device) if live.device is not None else td)
            return live
        return td

    def _read_set(self, saved: dict, live: Any, path: str) -> Any:
        items = [self.read(v, _MISSING, path) for v in self._field(saved, "items", list, path)]
        if any(v is _MISSING for v in items):
            return _MISSING
        return frozenset(items) if saved.get("frozen") else set(items)

    def _read_deque(self, saved: dict, live: Any, path: str) -> Any:
        items = self._read_list(self._field(saved, "items", list, path), list(live)
                                if isinstance(live, deque) else _MISSING, path)  # fmt: skip
        if items is _MISSING:
            return _MISSING
        maxlen = saved.get("maxlen")
        if maxlen is not None and not isinstance(maxlen, int):
            raise self.fail(path, f"has an invalid deque maxlen {maxlen!r}")
        if isinstance(live, deque) and live.maxlen == maxlen:
            live.clear()
            live.extend(items)
            return live
        return deque(items, maxlen=maxlen)

    def _read_list(self, saved: list, live: Any, path: str) -> Any:
        lives = live if isinstance(live, list) and len(live) == len(saved) else None
        items = [
            self.read(v, lives[i] if lives else _MISSING, f"{path}[{i}]")
            for i, v in enumerate(saved)
        ]
        if any(v is _MISSING for v in items):
            return _MISSING
        if isinstance(live, list):
            live[:] = items
            return live
        return items

    def _read_dict(self, saved: dict, live: Any, path: str) -> Any:
        keys = self._field(saved, "keys", list, path)
        values = self._field(saved, "values", list, path)
        if len(keys) != len(values):
            raise self.fail(path, f"has {len(keys)} dict keys and {len(values)} values")
        lives = live if isinstance(live, dict) else {}
        keys = [self._key(k, lives, path) for k in keys]
        items = [
            (k, self.read(v, lives.get(k, _MISSING), f"{path}[{k!r}]"))
            for k, v in zip(keys, values)
        ]
        if any(v is _MISSING for _, v in items):
            return _MISSING
        if isinstance(live, dict):
            live.clear()
            live.update(items)
            return live
        return OrderedDict(items) if saved.get("ordered") else dict(items)

    def _key(self, key: Any, live: dict, path: str) -> Any:
        if _plain_key(key):
            return key
        if not (isinstance(key, dict) and key.get(_TAG) == "key_at"):
            raise self.fail(path, f"has the dict key {key!r}, expected a plain value")
        index, kind = key.get("index"), key.get("type")
        live_keys = list(live)
        if not (isinstance(index, int) and 0 <= index < len(live_keys)):
            raise self.fail(path, f"has an object key at position {index!r}, absent here")
        if _qualname(live_keys[index]) != kind:
            raise self.fail(
                path, f"has a {kind} key at position {index}, a {_qualname(live_keys[index])} here"
            )
        return live_keys[index]

    def _read_mjdata(self, saved: dict, live: Any, path: str) -> Any:
        state = self._field(saved, "state", torch.Tensor, path)
        if not _is_mjdata(live):
            raise self.fail(path, "is a mujoco MjData in the state, not here")
        import mujoco

        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        size = mujoco.mj_stateSize(live.model, spec)
        if state.dtype != torch.float64 or state.shape != (size,):
            raise self.fail(
                path, f"holds a MjData state of shape {tuple(state.shape)}, expected ({size},)"
            )
        mujoco.mj_setState(live.model, live, state.numpy().copy(), spec)
        mujoco.mj_forward(live.model, live)
        return live

    def _read_object(self, saved: dict, live: Any, path: str) -> Any:
        attrs = self._field(saved, "attrs", dict, path)
        kind = saved.get("type")
        if live is _MISSING:
            return _MISSING  # nothing here to restore into: the attribute stays as it is
        if _qualname(live) != kind:
            raise self.fail(path, f"is a {kind} in the saved state and a {_qualname(live)} here")
        target = getattr(live, "__dict__", None)
        slots = set(_slot_names(type(live)))
        for key, value in attrs.items():
            if not isinstance(key, str):
                raise self.fail(path, f"has the non-string attribute name {key!r}")
            if key in slots:
                restored = self.read(value, getattr(live, key, _MISSING), f"{path}.{key}")
                if restored is not _MISSING:
                    object.__setattr__(live, key, restored)
            elif isinstance(target, dict):
                restored = self.read(value, target.get(key, _MISSING), f"{path}.{key}")
                if restored is not _MISSING:
                    target[key] = restored
            else:
                raise self.fail(path, f"has the attribute {key!r}, which a {kind} cannot hold")
        return live

    def _read_tuple_of(self, saved: dict, live: Any, path: str) -> Any:
        items = self._field(saved, "items", list, path)
        if live is _MISSING:
            return _MISSING
        if _qualname(live) != saved.get("type") or len(live) != len(items):
            raise self.fail(path, f"is a {saved.get('type')} in the saved state, not here")
        values = [self.read(v, live[i], f"{path}[{i}]") for i, v in enumerate(items)]
        if any(v is _MISSING for v in values):
            return _MISSING
        make = getattr(type(live), "_make", None)  # a namedtuple: the live object's class
        return make(values) if make is not None else type(live)(values)


def object_state(
    obj: Any, *, name: str = "the object", skip: Callable[[Any], bool] | None = None
) -> Any:
    """``obj``'s attributes as tensors and plain data (see the module docstring).

    Args:
        obj: the object (an env, a gymnasium env, a transform ...).
        name: how errors call ``obj``.
        skip: values for which it returns ``True`` are left as they are on restore (a
            parent reference, specs that are configuration rather than state).

    Returns:
        A structure of tensors, numbers, strings, lists, tuples and dicts that
        ``torch.save`` writes and ``torch.load(weights_only=True)`` reads.

    Raises:
        TypeError: an attribute holds neither data nor an object with attributes, naming
            its path (``env.sim.handle is a ctypes.c_void_p ...``).

    Examples:
        >>> import numpy as np
        >>> class Sim:
        ...     def __init__(self):
        ...         self.rng = np.random.default_rng(0)
        ...         self.x = np.zeros(2)
        >>> sim = Sim()
        >>> state = object_state(sim)
        >>> a = sim.rng.normal(); sim.x += 1
        >>> load_object_state(sim, state)
        >>> bool(sim.rng.normal() == a), sim.x.tolist()
        (True, [0.0, 0.0])
    """
    return _Writer(name, skip).write(obj, "state")


def load_object_state(obj: Any, state: Any, *, name: str = "the object") -> None:
    """Writes :func:`object_state` back into ``obj`` and the objects it holds, in place.

    Nothing named in ``state`` is imported or constructed: values are assigned to the
    attributes of live objects of the same types.

    Raises:
        ValueError: ``state`` does not come from :func:`object_state` of an object of this
            kind (naming the first entry that differs).
    """
    if not (isinstance(state, dict) and isinstance(state.get(_TAG), str)):
        raise ValueError(
            f"cannot restore the state of {name}: expected a saved object state, got a "
            f"{type(state).__name__}"
        )
    saved_type = state.get("type")
    if state[_TAG] == "object" and _qualname(obj) != saved_type:
        raise ValueError(
            f"cannot restore the state of {name}: it was saved from a {saved_type}, and "
            f"this is a {_qualname(obj)}"
        )
    _Reader(name).read(state, obj, "state")
