"""EnvBase: the environment contract every component of ``rl`` relies on.

One class: its specs (two composites, ``output_spec`` and ``input_spec``, that every
other spec property reads or writes), ``reset`` / ``step`` / ``rollout`` (the rollout
engine, :mod:`rl.envs.engine`), seeding and state, TorchRL's convenience methods and
the ``nn.Module`` side (attribute writes kept cheap for per-step state).
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from rl.core import Composite, TensorSpec, Unbounded, load_object_state, object_state

from ._done import complete_done, complete_done_spec
from ._partial_step import peek_step_mask, skip_tensordict, step_masked
from ._policy import ActionsPolicy, compatible_policy, device_casting_policy
from ._rollout import is_lazy, rollout_stacked
from ._td_utils import mark_truncated
from ._utils import step_mdp
from .engine import EnvKernel, RolloutKernel, run_rollout

__all__ = ["EnvBase"]

NestedKey = str | tuple[str, ...]

# the two spec containers and the sub-specs each one always holds
_SPEC_CONTAINERS = {
    "_output_spec": ("full_observation_spec", "full_reward_spec", "full_done_spec"),
    "_input_spec": ("full_action_spec", "full_state_spec"),
}
_MAX_SEED = 2**32 - 1

# exact types whose assignment to an existing plain attribute skips nn.Module.__setattr__
_PLAIN_TYPES = frozenset(
    {
        torch.Tensor,
        np.ndarray,
        int,
        float,
        bool,
        str,
        type(None),
        list,
        tuple,
        dict,
        torch.Size,
        torch.device,
    }
)


def _seed_generator(seed: int) -> int:
    """Derives the seed that follows ``seed`` (deterministic, like TorchRL's ``seed_generator``)."""
    rng = np.random.default_rng(seed)
    return int.from_bytes(rng.bytes(8), "big") % _MAX_SEED


class _BatchSizeError(ValueError, RuntimeError):
    """A tensordict of the wrong batch size: a ValueError (a bad argument), and the
    RuntimeError TorchRL raises for it."""


class _EnvMeta(ABCMeta):
    """Runs ``_post_init`` once the subclass ``__init__`` has set the specs.

    As TorchRL's metaclass, it takes ``spec_locked``, ``auto_reset``,
    ``auto_reset_replace`` and ``policy`` out of the constructor arguments (so every
    subclass accepts them, whatever its ``__init__`` signature), wraps an
    ``auto_reset=True`` env in an :class:`~rl.envs.transforms.AutoResetEnv` and, given a
    ``policy`` with recurrent submodules, appends the ``InitTracker`` and
    ``TensorDictPrimer`` it needs and the env lacks
    (:func:`rl.envs.utils.append_policy_transforms`).
    """

    def __call__(cls, *args, **kwargs):
        spec_locked = kwargs.pop("spec_locked", None)
        auto_reset = kwargs.pop("auto_reset", False)
        auto_reset_replace = kwargs.pop("auto_reset_replace", True)
        policy = kwargs.pop("policy", None)
        env = super().__call__(*args, **kwargs)
        env._post_init()
        if spec_locked is None:
            spec_locked = env.__dict__.get("_is_spec_locked", True)
        env.set_spec_lock_(spec_locked)
        if auto_reset or env.__dict__.get("_auto_reset_requested", False):
            from .transforms._auto_reset import AutoResetEnv, AutoResetTransform

            env.__dict__["_auto_reset_requested"] = False
            env = AutoResetEnv(env, AutoResetTransform(replace=auto_reset_replace))
        if policy is not None:  # the InitTracker / TensorDictPrimer a recurrent policy needs
            from ._policy_transforms import append_policy_transforms

            env = append_policy_transforms(env, policy)
        return env


def _unbatched(name: str) -> property:
    """TorchRL's ``<name>_unbatched``: the spec ``name`` of one env of the batch (indexed
    at 0 on each batch dim); setting it expands the given spec to ``batch_size``."""

    def get(self):
        return self._make_single_env_spec(getattr(self, name))

    def set_(self, spec) -> None:
        setattr(self, name, self._expand_to_batch(spec))

    return property(get, set_, doc=f"``{name}`` without the batch dims (setting expands it).")


class EnvBase(nn.Module, metaclass=_EnvMeta):
    """Base class of every environment: a TensorDict in, a TensorDict out.

    A subclass sets its specs in ``__init__`` and implements three methods:

    - ``_reset(tensordict)`` returns a TensorDict (batch size ``env.batch_size``) with
      every observation key and the done flags of ``full_done_spec`` (all ``False``;
      missing flags are filled in). When ``tensordict`` holds a ``"_reset"`` mask of shape
      ``[*batch, 1]``, only the masked entries need to be reset; :meth:`reset` keeps the
      current values of the other entries.
    - ``_step(tensordict)`` reads ``"action"`` (and the state keys) from the root and
      returns a TensorDict with the next observation keys, ``"reward"`` and the done
      flags (``"done"``, ``"terminated"``, ``"truncated"`` when declared), not nested
      under ``"next"``.
    - ``_set_seed(seed)`` seeds the environment's own randomness.

    As in TorchRL, ``done_spec`` defaults to boolean ``done`` and ``terminated`` entries
    of shape ``[*batch, 1]`` (no ``truncated``: call :meth:`add_truncated_keys` or declare
    it in ``full_done_spec``), a done spec with only one of ``done`` / ``terminated`` gets
    the other (``auto_complete_done_specs = False`` turns this off), and ``reward_spec``
    defaults to ``Unbounded(shape=[*batch, 1])``. Flags ``_step`` leaves out are filled in:
    ``terminated`` from ``done``, ``done`` as ``terminated | truncated``, others ``False``;
    ``done`` is always ``terminated | truncated``.

    Args:
        device: the device of the tensors the env reads and writes (``None``: CPU).
        batch_size: the batch shape of the env (``[]`` for a single env, ``[N]`` for N
            envs stepped together).
        run_type_checks: debug mode; when ``True``, every :meth:`step` checks the action
            against ``action_spec`` and raises a ``ValueError`` naming the key, the spec
            and the value when it is outside.
        allow_done_after_reset: with ``run_type_checks``, do not raise when ``_reset``
            returns a done flag set (envs that may be done right after a reset).
        spec_locked: lock the specs once the env is built (TorchRL's default ``True``):
            changing a spec in place (``env.observation_spec["x"] = spec``) then raises a
            ``RuntimeError`` until :meth:`set_spec_lock_` ``(False)``; the ``*_spec``
            setters (``env.observation_spec = spec``) work either way.
        auto_reset: the env resets itself when done (its ``_step`` returns the first
            observation of the next episode): the constructed env is wrapped in an
            :class:`~rl.envs.transforms.AutoResetEnv` (see ``AutoResetTransform``).

    Like TorchRL's, the class is a :class:`torch.nn.Module`: an env may
    ``register_buffer`` and hold parameters, ``env.to(device)`` moves its specs and
    buffers, ``state_dict()`` holds its buffers and parameters. ``batch_locked = False``
    as a class attribute (or ``_batch_locked=False`` passed to ``__new__``) lets
    :meth:`reset` / :meth:`step` / :meth:`rollout` take tensordicts with extra leading
    batch dims (stateless envs that read their state from the input).

    Examples:
        A complete custom environment: a point on a line that the action pushes, which
        terminates when it leaves ``[-1, 1]``.

        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Bounded, Composite, Unbounded
        >>> from rl.envs import EnvBase, check_env_specs
        >>> class LineEnv(EnvBase):
        ...     def __init__(self, batch_size=(), device=None):
        ...         super().__init__(batch_size=batch_size, device=device)
        ...         bs = self.batch_size
        ...         self.observation_spec = Composite(
        ...             position=Unbounded(shape=(*bs, 1)), shape=bs
        ...         )
        ...         self.action_spec = Bounded(-0.5, 0.5, shape=(*bs, 1))
        ...         self.reward_spec = Unbounded(shape=(*bs, 1))
        ...         self.position = torch.zeros(*bs, 1)
        ...         self.generator = torch.Generator()
        ...
        ...     def _reset(self, tensordict):
        ...         new = torch.rand(self.position.shape, generator=self.generator) - 0.5
        ...         if tensordict is not None and "_reset" in tensordict.keys():
        ...             new = torch.where(tensordict["_reset"], new, self.position)
        ...         self.position = new
        ...         flag = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        ...         return TensorDict(
        ...             position=new.clone(), done=flag, terminated=flag.clone(),
        ...             batch_size=self.batch_size,
        ...         )
        ...
        ...     def _step(self, tensordict):
        ...         self.position = self.position + tensordict["action"]
        ...         terminated = self.position.abs() > 1
        ...         return TensorDict(
        ...             position=self.position.clone(), reward=-self.position.abs(),
        ...             done=terminated.clone(), terminated=terminated,
        ...             batch_size=self.batch_size,
        ...         )
        ...
        ...     def _set_seed(self, seed):
        ...         self.generator.manual_seed(seed)
        >>> env = LineEnv(batch_size=[4])
        >>> check_env_specs(env)
        >>> _ = env.set_seed(0)
        >>> rollout = env.rollout(10, break_when_any_done=False)
        >>> rollout.batch_size
        torch.Size([4, 10])
        >>> rollout["next", "position"].shape
        torch.Size([4, 10, 1])
    """

    #: complete the done spec at construction (TorchRL's flag): ``done`` <-> ``terminated``
    auto_complete_done_specs: bool = True
    #: set by subclasses whose ``_reset`` already returns the current values of the entries
    #: outside a ``"_reset"`` mask, to skip :meth:`reset`'s merge
    _reset_keeps_unmasked: bool = False
    #: whether ``_step`` may read the root observations of its input (TorchRL hands it the
    #: caller's whole root); batched envs copy them for their sub-envs only when it may.
    #: Wrappers of simulators that step from the action alone set it to False.
    _step_reads_observations: bool = True

    def __new__(cls, *args, _inplace_update: bool = False, _batch_locked: bool = True, **kwargs):
        # TorchRL's subclasses override ``__new__`` as
        # ``super().__new__(cls, *args, _batch_locked=False, **kwargs)``: the extra
        # arguments are accepted here and the constructor ones ignored
        # specs a subclass's ``__new__`` assigned to the class (``cls._output_spec = ...``,
        # as TorchRL's mock envs do) belong to the instance: taken off the class here,
        # kept by ``__init__``
        specs = {}
        for name in _SPEC_CONTAINERS:
            if name in cls.__dict__ and isinstance(cls.__dict__[name], Composite):
                specs[name] = cls.__dict__[name].clone()
                delattr(cls, name)
        env = super().__new__(cls)
        env.__dict__.update(specs)
        env.__dict__["_inplace_update"] = _inplace_update
        # TorchRL's subclasses may set specs before calling ``super().__init__()``: a single
        # env on no device until ``__init__`` says otherwise (specs made on first use,
        # see ``__getattr__``)
        env.__dict__["_batch_size"] = torch.Size([])
        env.__dict__["_device"] = None
        if not _batch_locked:
            env.__dict__["_batch_locked"] = False
        return env

    def __init__(
        self,
        *,
        device: torch.device | str | int | None = None,
        batch_size: Sequence[int] | torch.Size | int | None = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
        auto_reset: bool = False,
    ) -> None:
        nn.Module.__init__(self)
        if isinstance(batch_size, int):
            batch_size = (batch_size,)
        self._batch_size = torch.Size(batch_size if batch_size is not None else ())
        self._device = normalize_device(device)
        self.run_type_checks = run_type_checks
        self.allow_done_after_reset = allow_done_after_reset
        self.__dict__.setdefault("_is_spec_locked", bool(spec_locked))
        if auto_reset:  # passed through super().__init__: the metaclass wraps the env
            self.__dict__["_auto_reset_requested"] = True
        bs = self._batch_size
        spec_device = self._device
        for name, keys in _SPEC_CONTAINERS.items():
            spec = self.__dict__.get(name)  # set by __new__ from the class (see there)
            if spec is None:
                spec = Composite(shape=bs, device=spec_device)
            elif spec_device is not None and spec.device != spec_device:
                spec = spec.to(spec_device)
            for key in keys:
                if key not in spec.keys():
                    spec[key] = Composite(shape=spec.shape, device=spec.device)
            self.__dict__[name] = spec
        self.is_closed = False

    def __getattr__(self, name: str) -> Any:
        # only reached for a missing attribute: the spec containers of a subclass that
        # sets specs before ``EnvBase.__init__`` ran (TorchRL's EnvBase allows it)
        keys = _SPEC_CONTAINERS.get(name)
        if keys is not None:
            d = self.__dict__
            spec = Composite(shape=d["_batch_size"], device=d["_device"])
            for key in keys:
                spec[key] = Composite(shape=spec.shape, device=spec.device)
            d[name] = spec
            return spec
        return nn.Module.__getattr__(self, name)

    def _post_init(self) -> None:
        bs = self.batch_size
        if self.auto_complete_done_specs:
            spec = self.full_done_spec.clone()
            if complete_done_spec(spec, self._device):
                self.full_done_spec = spec
        if not list(self.full_reward_spec.keys()):
            self.reward_spec = Unbounded(shape=(*bs, 1), device=self._device)

    # ------------------------------------------------------------------ basic properties
    @property
    def batch_size(self) -> torch.Size:
        """The batch shape of the environment (``torch.Size([])`` for a single env)."""
        return self._batch_size

    @property
    def device(self) -> torch.device | None:
        """The device of the tensors the environment reads and writes."""
        return self._device

    @property
    def batch_locked(self) -> bool:
        """Inputs must have exactly ``batch_size`` (no extra leading dims), as in TorchRL.

        A subclass sets ``batch_locked = False`` (class attribute) for envs that take any
        leading batch dims (stateless envs reading their state from the input).
        """
        return self.__dict__.get("_batch_locked", True)

    @property
    def _allow_done_after_reset(self) -> bool:
        """TorchRL's name of :attr:`allow_done_after_reset` (settable)."""
        return self.allow_done_after_reset

    @_allow_done_after_reset.setter
    def _allow_done_after_reset(self, value: bool) -> None:
        self.allow_done_after_reset = value

    @property
    def is_spec_locked(self) -> bool:
        """Whether the specs are locked (``spec_locked``, :meth:`set_spec_lock_`); settable."""
        return self.__dict__.get("_is_spec_locked", True)

    @is_spec_locked.setter
    def is_spec_locked(self, value: bool) -> None:
        self.set_spec_lock_(value)

    @property
    def specs(self) -> Composite:
        """``Composite(output_spec=..., input_spec=...)``, as TorchRL's ``env.specs``."""
        return Composite(
            output_spec=self.output_spec,
            input_spec=self.input_spec,
            shape=self.batch_size,
            device=self.device,
        )

    # ------------------------------------------------------------------- subclass hooks
    @abstractmethod
    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        """Returns the reset observations and (False) done flags, see the class doc."""

    @abstractmethod
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Returns the next observations, reward and done flags (not under "next")."""

    @abstractmethod
    def _set_seed(self, seed: int | None) -> None:
        """Seeds the environment's own randomness."""

    # ------------------------------------------------------------------------ public API
    def _check_batch(self, tensordict: TensorDictBase, where: str) -> None:
        bs = tensordict.batch_size
        if bs != self.batch_size:
            nb = len(self.batch_size)
            if not self.batch_locked and len(bs) >= nb and bs[len(bs) - nb :] == self.batch_size:
                return
            raise _BatchSizeError(
                f"Expected a tensordict with shape==env.batch_size, got {tuple(bs)} and "
                f"{tuple(self.batch_size)}: {where} got a tensordict of batch_size {tuple(bs)}, "
                f"expected the env batch_size {tuple(self.batch_size)}"
                + ("" if self.batch_locked else " (with any leading dims: batch_locked=False)")
            )

    def _extra_dims(self, tensordict: TensorDictBase | None) -> torch.Size:
        """The leading batch dims of ``tensordict`` beyond the env's (non batch-locked envs)."""
        if tensordict is None:
            return torch.Size(())
        bs = tensordict.batch_size
        return bs[: len(bs) - len(self.batch_size)]

    def _complete_done(self, td: TensorDictBase) -> None:
        """Adds the done-spec entries ``td`` lacks, as TorchRL does (see ``complete_done``)."""
        complete_done(self.full_done_spec, td, len(self.batch_size))

    def _complete_outputs(self, td: TensorDictBase) -> None:
        """``_complete_done`` on a ``_reset`` / ``_step`` output that lacks a done entry.

        Checked at every call, as TorchRL does: an env may write a flag (``truncated``)
        on some steps only. The check is a dict lookup per done key (a nested key looks
        in the nested view), far below a step's cost.
        """
        keys = td.keys()
        for key in self._done_keys_view():
            if key not in keys and (isinstance(key, str) or key not in td.keys(True)):
                self._complete_done(td)
                return

    def reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        """Resets the environment (or the entries selected by a ``"_reset"`` mask).

        Args:
            tensordict: optional input; a ``"_reset"`` boolean entry of shape
                ``[*batch, 1]`` restricts the reset to the masked sub-environments, the
                others keep the values they have in ``tensordict``.
            **kwargs: extra entries written into the input tensordict first.

        Returns:
            the reset observations and done flags. When ``tensordict`` is given, it is
            updated in place (without ``"_reset"``) and returned.
        """
        if kwargs:
            if tensordict is None:
                tensordict = TensorDict({}, batch_size=self.batch_size, device=self.device)
            tensordict.update(kwargs)
        mask = None
        if tensordict is not None:
            self._check_batch(tensordict, "reset()")
            mask = tensordict.get("_reset", None)
            if mask is not None and not bool(mask.any()):
                tensordict.del_("_reset")
                return tensordict
        td_reset = self._reset(tensordict)
        self._complete_outputs(td_reset)
        # the input's batch dims: an env that is not batch-locked may run over more
        nb = tensordict.batch_dims if tensordict is not None else 0
        if mask is not None and nb and not self._reset_keeps_unmasked and not bool(mask.all()):
            _merge_partial_reset(td_reset, tensordict, mask, nb)
        if self.run_type_checks and not self.allow_done_after_reset:
            done = td_reset[self.done_key]
            reset_entries = done if mask is None else done & mask.reshape(done.shape)
            if bool(reset_entries.any()):
                raise RuntimeError(
                    f"{type(self).__name__}._reset returned done=True for a reset entry: {done}"
                )
        if tensordict is None:
            return td_reset
        if td_reset is not tensordict:
            tensordict.update(td_reset)
        if "_reset" in tensordict.keys():
            tensordict.del_("_reset")
        keys = self.reset_keys
        if len(keys) > 1 or (keys and keys[0] != "_reset"):  # the groups' masks go too
            for key in keys:
                tensordict.pop(key, None)
        return tensordict

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Applies ``tensordict["action"]`` and writes the outcome under ``"next"``.

        A boolean ``"_step"`` entry (``[*batch]``, removed from ``tensordict``) makes the
        step partial, as in TorchRL: the entries where it is False are skipped (their
        ``"next"`` holds their current values and a zero reward). A batch-locked env
        skips the step when no entry is selected and otherwise trusts its ``_step`` with
        the mask (``SerialEnv`` / ``ParallelEnv`` step the selected sub-envs only); an
        env that is not batch-locked steps the selected entries only.

        Raises:
            KeyError: the action key is missing.
            ValueError: the batch size differs from ``env.batch_size``, or (with
                ``run_type_checks=True``) the action is outside ``action_spec``.
        """
        self._check_batch(tensordict, "step()")
        partial = peek_step_mask(tensordict)
        if partial is not None:
            tensordict.del_("_step")
        if self.run_type_checks:
            self.check_action(tensordict)
        next_preset = tensordict.get("next", None)
        try:
            if partial is None:
                next_td = self._step(tensordict)
            else:
                next_td = step_masked(self, tensordict, partial)
        except KeyError as err:
            self._raise_missing_action(tensordict, err)
            raise
        if next_preset is not None:
            for key in next_preset.keys(True, True):
                if key not in next_td.keys(True, True):
                    next_td.set(key, next_preset[key])
        self._complete_outputs(next_td)
        tensordict.set("next", next_td)
        return tensordict

    def _skip_tensordict(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The ``"next"`` of a skipped step (TorchRL's name): current values, zero reward."""
        return skip_tensordict(self, tensordict)

    def _raise_missing_action(
        self, tensordict: TensorDictBase, error: KeyError | None = None
    ) -> None:
        for key in self.action_keys:
            if key not in tensordict.keys(True, True):
                message = error.args[0] if error is not None and error.args else None
                if isinstance(message, str) and repr(key) in message:
                    return  # the step's own error already names the missing key
                raise KeyError(
                    f"step() needs the action key {key!r} (action_spec {self.action_spec!r}) "
                    f"but the tensordict has keys {sorted(map(str, tensordict.keys(True, True)))}"
                )

    def check_action(self, tensordict: TensorDictBase) -> None:
        """Raises if an action entry of ``tensordict`` is missing or outside its spec."""
        self._raise_missing_action(tensordict)
        extra = len(self._extra_dims(tensordict)) if not self.batch_locked else 0
        for key in self.action_keys:
            spec = self.full_action_spec[key]
            value = tensordict[key]
            if value.shape[extra:] != spec.shape:
                raise ValueError(
                    f"action {key!r} has shape {tuple(value.shape)}, expected "
                    f"{tuple(spec.shape)} from action_spec {spec!r}"
                )
            values = value.reshape(-1, *spec.shape).unbind(0) if extra else (value,)
            if not all(spec.is_in(v) for v in values):
                raise ValueError(f"action {key!r} = {value} is outside action_spec {spec!r}")

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Steps, then resets the sub-environments that are done.

        Returns:
            ``(tensordict, root_next)``: the input with its ``"next"`` entry, and the root
            of the next step (``step_mdp`` of it) where done entries are reset.
        """
        tensordict = self.step(tensordict)
        root_next = step_mdp(  # the action stays in the next root, as in TorchRL
            tensordict,
            keep_other=True,
            exclude_action=False,
            reward_keys=self.reward_keys,
            action_keys=self.action_keys,
        )
        done = root_next[self.done_key]
        if bool(done.any()):
            root_next.set("_reset", done.clone())
            root_next = self.reset(root_next)
        return tensordict, root_next

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Writes a uniformly random action (from ``action_spec``) into ``tensordict``."""
        if tensordict is None:
            tensordict = TensorDict({}, batch_size=self.batch_size, device=self.device)
        extra = self._extra_dims(tensordict) if not self.batch_locked else ()
        tensordict.update(self.full_action_spec.rand(extra))
        return tensordict

    def rand_step(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Takes a random step, resetting first when ``tensordict`` is ``None``.

        The action is checked against ``action_spec`` (so a spec whose ``rand`` yields
        values it rejects is reported here).
        """
        if tensordict is None:
            tensordict = self.reset()
        tensordict = self.rand_action(tensordict)
        self.check_action(tensordict)
        return self.step(tensordict)

    def rollout(
        self,
        max_steps: int,
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        callback: Callable[[EnvBase, TensorDictBase], Any] | None = None,
        *,
        actions: Any = None,
        auto_reset: bool = True,
        auto_cast_to_device: bool = False,
        break_when_any_done: bool | None = True,
        break_when_all_done: bool | None = False,
        return_contiguous: bool | None = True,
        tensordict: TensorDictBase | None = None,
        set_truncated: bool = False,
        out: TensorDictBase | None = None,
        trust_policy: bool = False,
        storing_device=None,
        set_state: bool | None = None,
        stop_when: Callable[[], bool] | None = None,
    ) -> TensorDictBase:
        """Runs ``max_steps`` steps and returns them in one ``[*batch, T]`` TensorDict.

        The output is preallocated at the first step and filled in place; random actions
        (``policy=None``) are drawn for all steps at once from ``action_spec``.

        Args:
            max_steps: the number of steps ``T``.
            policy: a callable reading the root tensordict and writing ``"action"``
                (e.g. a ``TensorDictModule``); ``None`` draws uniform random actions. A
                plain ``nn.Module`` on tensors is wrapped in a ``TensorDictModule``
                reading the observations and writing the actions (as TorchRL does).
            callback: called as ``callback(env, tensordict)`` after each step.
            auto_reset: reset before the first step (else ``tensordict`` is the start).
            break_when_any_done: stop after the first step where any env is done.
            break_when_all_done: stop once every sub-environment has been done at least
                once (done sub-environments are reset and keep running until then).
            tensordict: the initial tensordict (passed to ``reset`` when ``auto_reset``).
            set_truncated: mark the last step ``truncated`` (and ``done``); a
                ``RuntimeError`` when the done spec has no ``truncated`` entry.
            return_contiguous: kept for TorchRL compatibility; the output is always a
                contiguous TensorDict.
            actions: the actions to take, one per step (tensors, or tensordicts of
                action entries), instead of a policy.
            auto_cast_to_device: run ``policy`` on the device of its parameters (the
                tensordict goes there and back).
            out: a tensordict of the output's shape to write the rollout into.
            trust_policy: call ``policy`` as given (no wrapping of plain modules).
            storing_device: move the output there.
            set_state: TorchRL's argument; only ``None`` / ``False`` are supported.
            stop_when: called with no argument after each step; the rollout ends after
                the step where it returns ``True`` (how a collector's ``interruptor``
                cuts a batch short). Not a TorchRL argument; ``None`` costs nothing.

        Returns:
            a TensorDict of batch size ``[*batch_size, T']`` (time last), ``T' <= T``.
            When steps continue past a done, ``("next", obs)`` holds the final observation
            and the root observation of the following step the reset one.
        """
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        if set_state:
            raise NotImplementedError("rollout(set_state=True) is not supported by rl.envs")
        if break_when_any_done is None:  # TorchRL's default: stop at the first done
            break_when_any_done = not break_when_all_done
        break_when_all_done = bool(break_when_all_done)
        if actions is not None:
            if policy is not None:
                raise ValueError("rollout takes a policy or actions, not both")
            policy, trust_policy = ActionsPolicy(actions, self.action_key), True
        if auto_reset:
            tensordict = self.reset(tensordict)
        elif tensordict is None:
            raise RuntimeError("rollout(auto_reset=False) needs an initial tensordict, got None")
        else:
            self._check_batch(tensordict, "rollout()")
        if policy is not None and not trust_policy:
            policy = compatible_policy(self, policy)
        if policy is not None and auto_cast_to_device:
            policy = device_casting_policy(self, policy)
        if is_lazy(tensordict) or self._has_dynamic_specs() or torch.compiler.is_compiling():
            # heterogeneous data (lazy stacks, shapes that change from step to step), or a
            # rollout traced by torch.compile (a Dreamer loss's imagination; the engine's
            # numpy views do not trace): one tensordict per step, stacked
            return self._finish_rollout(
                rollout_stacked(
                    self,
                    max_steps,
                    tensordict,
                    policy=policy,
                    callback=callback,
                    break_when_any_done=break_when_any_done,
                    break_when_all_done=break_when_all_done,
                    stop_when=stop_when,
                ),
                set_truncated,
                out,
                storing_device,
            )
        out_td = run_rollout(
            self,
            max_steps,
            tensordict,
            policy=policy,
            callback=callback,
            break_when_any_done=break_when_any_done,
            break_when_all_done=break_when_all_done,
            stop_when=stop_when,
        )
        return self._finish_rollout(out_td, set_truncated, out, storing_device)

    def rollout_kernel(self) -> RolloutKernel:
        """The back-end of :meth:`rollout` (see :mod:`rl.envs.engine`): how this env steps
        into the rollout's preallocated buffers. The default, :class:`EnvKernel`, calls
        :meth:`_step` and :meth:`reset`; a simulator wrapper returns its own kernel."""
        return EnvKernel(self)

    def _has_dynamic_specs(self) -> bool:
        """Whether an observation or state entry has a dim of size ``-1`` (its shape
        changes from step to step, e.g. ``Unbounded(shape=(3, -1, 2))``): such entries
        are stacked lazily instead of written into preallocated buffers. Read once per
        state of the (locked) specs."""

        def compute() -> bool:
            specs = (s for s in (self.observation_spec, self.state_spec) if s is not None)
            return any(-1 in leaf.shape for spec in specs for leaf in spec.values(True, True))

        return self._cached_keys("dynamic_specs", compute)

    def _draws_actions_per_step(self) -> bool:
        """Whether random actions must be drawn at each step (an action spec that changes
        with the state) rather than all at once."""
        return False

    def _finish_rollout(
        self, result: TensorDictBase, set_truncated: bool, out=None, storing_device=None
    ) -> TensorDictBase:
        if set_truncated:
            mark_truncated(result, self.done_keys)
        if storing_device is not None:
            result = result.to(storing_device)
        if out is not None:
            out.update_(result)
            return out
        return result

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seeds the environment and returns the next seed (to seed another env with).

        Random actions of :meth:`rollout` / :meth:`rand_action` come from torch's global
        generator (``torch.manual_seed``), as in TorchRL.
        """
        self._set_seed(seed)
        if seed is not None and not static_seed:
            seed = _seed_generator(seed)
        return seed

    # ------------------------------------------------------------------------ state
    def env_state(self) -> dict[str, Any]:
        """The env's runtime state (simulator, random generators, counters) as tensors and
        plain data, for an exact resume: ``torch.save`` writes it and
        ``torch.load(weights_only=True)`` reads it back; nothing in it is pickled.

        Unlike :meth:`state_dict` (the transforms' parameters and buffers, as in TorchRL),
        this is what the env *is doing*: a gymnasium env's physics and ``np_random``, its
        time-limit counter, a native env's tensors and ``torch.Generator``. Specs and
        other envs it holds are configuration and are left out; batched and transformed
        envs gather the states of the envs they hold.

        Raises:
            TypeError: an attribute holds something that is neither data nor an object
                with attributes (an extension handle, a socket ...), naming where it is:
                such an env is refused rather than pickled.

        Examples:
            >>> import torch
            >>> from rl.envs import PendulumEnv
            >>> env = PendulumEnv(); _ = env.set_seed(0)
            >>> push = lambda td: td.set("action", torch.ones(1))
            >>> root = env.reset(); state = env.env_state()
            >>> a = env.rollout(3, push, auto_reset=False, tensordict=root.clone())
            >>> _ = env.reset()  # another episode: other physics
            >>> env.load_env_state(state)
            >>> b = env.rollout(3, push, auto_reset=False, tensordict=root.clone())
            >>> torch.equal(a["next", "observation"], b["next", "observation"])
            True
        """
        return {"object": object_state(self, name=repr(self), skip=self._held_config)}

    def load_env_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`env_state` in place (assigning values, never creating objects).

        Raises:
            ValueError: ``state`` comes from another kind of env (naming what differs).
        """
        load_object_state(self, _state_entry(self, state, "object"), name=repr(self))

    def _held_config(self, value: Any) -> bool:
        """Specs and the envs this one holds are not part of its own state."""
        return value is not self and isinstance(value, TensorSpec | EnvBase)

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Releases the resources held by the environment.

        Args:
            raise_if_closed: TorchRL's argument, accepted by every env. Closing is
                idempotent in ``rl`` (collectors, finalizers and users may all close the
                same env), so a second ``close()`` never raises, whatever its value.
        """
        self.is_closed = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_size={self.batch_size}, device={self.device})"

    # -- specs and keys (TorchRL's layout: input_spec / output_spec) ----------------

    @property
    def output_spec(self) -> Composite:
        """Composite of ``full_observation_spec``, ``full_reward_spec`` and ``full_done_spec``."""
        return self._output_spec

    @output_spec.setter
    def output_spec(self, value: Composite) -> None:
        old = self.__dict__.get("_output_spec")
        self._output_spec = value
        if old is not None and _is_locked(old) and isinstance(value, Composite):
            value.lock_(recurse=True)

    @property
    def input_spec(self) -> Composite:
        """Composite of ``full_action_spec`` and ``full_state_spec``."""
        return self._input_spec

    @input_spec.setter
    def input_spec(self, value: Composite) -> None:
        old = self.__dict__.get("_input_spec")
        self._input_spec = value
        if old is not None and _is_locked(old) and isinstance(value, Composite):
            value.lock_(recurse=True)

    def _set_spec(self, parent: str, key: str, value: Composite) -> None:
        """``output_spec[key] = value`` (or ``input_spec``), through the spec lock: the env's
        setters may change locked specs (as TorchRL's), direct item assignment may not."""
        self.__dict__.pop("_keys_cache", None)
        composite = getattr(self, parent)
        if not _is_locked(composite):
            composite[key] = value
            return
        composite.unlock_()
        try:
            composite[key] = value
        finally:
            composite.lock_(recurse=True)

    def _check_composite(self, name: str, value: Any) -> Composite:
        if not isinstance(value, Composite):
            raise TypeError(
                f"{name} must be a Composite with shape {tuple(self.batch_size)}, got {value!r}"
            )
        if tuple(value.shape) != tuple(self.batch_size):
            raise ValueError(
                f"{name} must have shape {tuple(self.batch_size)} (the env batch_size), "
                f"got a Composite of shape {tuple(value.shape)}"
            )
        return value

    def _check_leaf(self, name: str, value: Any) -> None:
        if tuple(value.shape[: len(self.batch_size)]) != tuple(self.batch_size):
            raise ValueError(
                f"{name} must have leading dims {tuple(self.batch_size)} (the env batch_size), "
                f"got shape {tuple(value.shape)} for {value!r}"
            )

    def _wrap_leaf(self, name: str, key: str, value: Any) -> Composite:
        if isinstance(value, Composite):
            return self._check_composite(name, value)
        self._check_leaf(name, value)
        return Composite({key: value}, shape=self.batch_size, device=self._device)

    @property
    def full_observation_spec(self) -> Composite:
        """All the observation entries, as a Composite of shape ``batch_size``."""
        return self.output_spec["full_observation_spec"]

    @full_observation_spec.setter
    def full_observation_spec(self, value: Composite) -> None:
        self._set_spec(
            "output_spec", "full_observation_spec", self._check_composite("observation_spec", value)
        )

    observation_spec = full_observation_spec

    @property
    def full_reward_spec(self) -> Composite:
        """The reward entries (``"reward"`` by default), as a Composite."""
        return self.output_spec["full_reward_spec"]

    @full_reward_spec.setter
    def full_reward_spec(self, value: Composite) -> None:
        self._set_spec(
            "output_spec", "full_reward_spec", self._check_composite("reward_spec", value)
        )

    @property
    def reward_spec(self):
        """The reward leaf spec when there is a single reward key, else the Composite."""
        return _single_leaf(self.full_reward_spec)

    @reward_spec.setter
    def reward_spec(self, value) -> None:
        self.full_reward_spec = self._wrap_leaf("reward_spec", "reward", value)

    @property
    def full_done_spec(self) -> Composite:
        """The done flags (``done``, ``terminated``, maybe ``truncated``), as a Composite."""
        return self.output_spec["full_done_spec"]

    @full_done_spec.setter
    def full_done_spec(self, value: Composite) -> None:
        self._set_spec("output_spec", "full_done_spec", self._check_composite("done_spec", value))

    @property
    def done_spec(self):
        """The done leaf spec when there is a single done key, else the Composite."""
        return _single_leaf(self.full_done_spec)

    @done_spec.setter
    def done_spec(self, value) -> None:
        if isinstance(value, Composite):
            if getattr(self, "auto_complete_done_specs", True):
                value = value.clone()  # completed as TorchRL's setter does
                complete_done_spec(value, self._device)
            self.full_done_spec = value
            return
        self._check_leaf("done_spec", value)
        self.full_done_spec = Composite(
            done=value, terminated=value.clone(), shape=self.batch_size, device=self._device
        )

    def add_truncated_keys(self):
        """Adds a ``truncated`` flag next to every done flag of the done spec (TorchRL's).

        Each done key gets a sibling with its last name replaced by ``"truncated"`` (a
        clone of that flag's spec): ``done`` / ``terminated`` give ``truncated``,
        ``("agents", "done")`` gives ``("agents", "truncated")``, a lone ``stop`` flag
        gives ``truncated``.

        Returns:
            the env itself.

        Raises:
            KeyError: the done spec has no entry at all.
        """
        spec = self.full_done_spec.clone()
        keys = _leaf_keys(spec)
        if not keys:
            raise KeyError(f"add_truncated_keys found no done key in the done spec {spec!r}")
        for key in keys:  # as TorchRL: the last flag of a group gives the spec
            trunc = "truncated" if isinstance(key, str) else (*key[:-1], "truncated")
            spec[trunc] = spec[key].clone()
        self.full_done_spec = spec
        return self

    @property
    def full_action_spec(self) -> Composite:
        """The action entries (``"action"`` by default), as a Composite."""
        return self.input_spec["full_action_spec"]

    @full_action_spec.setter
    def full_action_spec(self, value: Composite) -> None:
        self._set_spec(
            "input_spec", "full_action_spec", self._check_composite("action_spec", value)
        )

    @property
    def action_spec(self):
        """The action leaf spec when there is a single action key, else the Composite."""
        return _single_leaf(self.full_action_spec)

    @action_spec.setter
    def action_spec(self, value) -> None:
        self.full_action_spec = self._wrap_leaf("action_spec", "action", value)

    @property
    def full_state_spec(self) -> Composite:
        """Inputs other than the action that ``_step`` reads from the root."""
        return self.input_spec["full_state_spec"]

    @full_state_spec.setter
    def full_state_spec(self, value: Composite) -> None:
        self._set_spec("input_spec", "full_state_spec", self._check_composite("state_spec", value))

    state_spec = full_state_spec

    # -- unbatched views: the spec of one env of the batch (TorchRL's *_spec_unbatched) ----
    def _make_single_env_spec(self, spec):
        """``spec`` indexed at 0 on each of the env's batch dims."""
        if not self.batch_dims:
            return spec
        return spec[(0,) * self.batch_dims]

    def _expand_to_batch(self, spec):
        """A spec of one env, expanded to the env's ``batch_size``."""
        return spec.expand(*self.batch_size, *spec.shape)

    full_action_spec_unbatched = _unbatched("full_action_spec")
    action_spec_unbatched = _unbatched("action_spec")
    full_observation_spec_unbatched = _unbatched("full_observation_spec")
    observation_spec_unbatched = full_observation_spec_unbatched
    full_reward_spec_unbatched = _unbatched("full_reward_spec")
    reward_spec_unbatched = _unbatched("reward_spec")
    full_done_spec_unbatched = _unbatched("full_done_spec")
    done_spec_unbatched = _unbatched("done_spec")
    full_state_spec_unbatched = _unbatched("full_state_spec")
    state_spec_unbatched = full_state_spec_unbatched
    output_spec_unbatched = _unbatched("output_spec")
    input_spec_unbatched = _unbatched("input_spec")

    # ------------------------------------------------------------------------------ keys
    def _cached_keys(self, name: str, compute) -> Any:
        """``compute()`` (keys derived from the specs), cached while the specs are locked.

        Locked specs cannot change in place (a nested spec cannot be unlocked without its
        root), so the keys hold until a spec setter (``_set_spec``), a new ``output_spec``
        / ``input_spec`` object or an unlock. Per-step code reads them for free.
        """
        if torch.compiler.is_compiling():
            # constants of the trace; a cache filled inside a graph is a guard on the
            # cache, which fails at the next call (a recompilation)
            return compute()
        out, inp = self.output_spec, self.input_spec
        if not (_is_locked(out) and _is_locked(inp)):
            self.__dict__.pop("_keys_cache", None)  # the specs may change while unlocked
            return compute()
        cache = self.__dict__.get("_keys_cache")
        if cache is None or cache[0] is not out or cache[1] is not inp:
            cache = self.__dict__["_keys_cache"] = (out, inp, {})
        values = cache[2]
        if name not in values:
            values[name] = compute()
        return values[name]

    @property
    def action_keys(self) -> list[NestedKey]:
        return list(self._cached_keys("action", lambda: _leaf_keys(self.full_action_spec)))

    @property
    def action_key(self) -> NestedKey:
        """The action key (``"action"`` unless the subclass chose another)."""
        return _only_key(self.action_keys, "action")

    @property
    def reward_keys(self) -> list[NestedKey]:
        return list(self._cached_keys("reward", lambda: _leaf_keys(self.full_reward_spec)))

    @property
    def reward_key(self) -> NestedKey:
        return _only_key(self.reward_keys, "reward")

    @property
    def done_keys(self) -> list[NestedKey]:
        return list(self._done_keys_view())

    def _done_keys_view(self) -> list[NestedKey]:
        """The done keys without a copy: the same list object for as long as the specs are
        locked and unchanged, a new one after any spec change (or on each call while the
        specs are unlocked). Callers must not modify it."""
        return self._cached_keys("done", lambda: _leaf_keys(self.full_done_spec))

    @property
    def done_key(self) -> NestedKey:
        """The key of the ``done`` flag (``"done"``)."""
        return self._cached_keys("done_key", lambda: _done_key(self.done_keys))

    @property
    def observation_keys(self) -> list[NestedKey]:
        return list(
            self._cached_keys("observation", lambda: _leaf_keys(self.full_observation_spec))
        )

    @property
    def state_keys(self) -> list[NestedKey]:
        return list(self._cached_keys("state", lambda: _leaf_keys(self.full_state_spec)))

    @property
    def shape(self):
        """The batch size (TorchRL's ``env.shape``)."""
        return self.batch_size

    @property
    def batch_dims(self) -> int:
        """The number of batch dims (``len(env.batch_size)``)."""
        return len(self.batch_size)

    ndim = batch_dims

    def ndimension(self) -> int:
        return len(self.batch_size)

    def numel(self) -> int:
        """The number of environments in the batch."""
        return self.batch_size.numel()

    @property
    def done_keys_groups(self) -> list[list[NestedKey]]:
        """The done keys grouped by the sub-tensordict they live in (root first)."""
        groups: dict[tuple, list] = {}
        for key in self.done_keys:
            path = (key,) if isinstance(key, str) else tuple(key)
            groups.setdefault(path[:-1], []).append(key)
        return list(groups.values())

    @property
    def reset_keys(self) -> list[NestedKey]:
        """Where a ``"_reset"`` mask goes: one per group of done keys (``"_reset"`` at the root)."""
        return list(self._cached_keys("reset", self._reset_keys))

    def _reset_keys(self) -> list[NestedKey]:
        out = []
        for group in self.done_keys_groups:
            first = group[0]
            parent = () if isinstance(first, str) else tuple(first[:-1])
            out.append((*parent, "_reset") if parent else "_reset")
        return out

    def fake_tensordict(self) -> TensorDictBase:
        """A zero-filled transition ``(root, ("next", ...))`` laid out as the specs say."""
        root = self.full_observation_spec.zero()
        root.update(self.full_state_spec.zero())
        root.update(self.full_action_spec.zero())
        root.update(self.full_done_spec.zero())
        nxt = self.full_observation_spec.zero()
        nxt.update(self.full_reward_spec.zero())
        nxt.update(self.full_done_spec.zero())
        root.set("next", nxt)
        return root

    # -- TorchRL's convenience methods: transforms, done handling, checks --------

    def append_transform(self, transform) -> EnvBase:
        """Returns ``TransformedEnv(self, transform)`` (TorchRL's ``EnvBase.append_transform``).

        ``transform`` is a :class:`~rl.envs.transforms.Transform` or a callable taking and
        returning a tensordict (applied to the step and reset outputs; specs unchanged).
        A :class:`~rl.envs.TransformedEnv` appends to its own list instead (and returns
        itself).

        Raises:
            TypeError: ``transform`` is neither a Transform nor callable.
        """
        from ._callable_transform import CallableTransform
        from .transforms import Transform, TransformedEnv

        if not isinstance(transform, Transform):
            if not callable(transform):
                raise TypeError(
                    "append_transform expects a Transform or a callable, got "
                    f"{type(transform).__name__}: {transform!r}"
                )
            transform = CallableTransform(transform)
        return TransformedEnv(self, transform)

    #: ``any_done`` is a constant (no branch on data): a rollout, eager or traced, asks it
    #: once (:func:`rl.envs.engine.declared_any_done`) instead of reading ``done_key`` at
    #: each step (imagination envs, whose rollouts never end early: no host sync per step)
    _constant_any_done: bool = False

    def any_done(self, tensordict: TensorDictBase) -> torch.Tensor | bool:
        """Whether a done flag is set (0-d bool tensor, as TorchRL); writes ``"_reset"`` if so."""
        from ._td_utils import terminated_or_truncated

        return terminated_or_truncated(tensordict, full_done_spec=self.full_done_spec)

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Resets the entries whose ``"_reset"`` mask is set (see :meth:`any_done`)."""
        if "_reset" in tensordict.keys():
            return self.reset(tensordict)
        return tensordict

    def step_mdp(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        """``step_mdp`` with this env's reward / done / action keys."""
        from ._utils import step_mdp

        return step_mdp(
            next_tensordict,
            reward_keys=self.reward_keys,
            done_keys=self.done_keys,
            action_keys=self.action_keys,
        )

    def check_env_specs(self, *args, **kwargs) -> None:
        """:func:`~rl.envs.check_env_specs` on this env."""
        from ._utils import check_env_specs

        check_env_specs(self, *args, **kwargs)

    def set_spec_lock_(self, mode: bool = True) -> EnvBase:
        """Locks (or unlocks) the env's specs, as TorchRL's method.

        Locked specs refuse direct changes (``env.observation_spec["x"] = spec`` raises a
        ``RuntimeError``); the env's spec setters (``env.observation_spec = spec``)
        still work. Envs are built locked unless given ``spec_locked=False``.

        Returns:
            the env.
        """
        mode = bool(mode)
        self.__dict__.pop("_keys_cache", None)
        for name in ("output_spec", "input_spec"):
            spec = getattr(self, name, None)
            if spec is None or not hasattr(spec, "lock_"):
                continue
            if mode:
                spec.lock_(recurse=True)
            elif spec.is_locked:
                spec.unlock_()
        self.__dict__["_is_spec_locked"] = mode
        return self

    def empty_cache(self) -> None:
        """Drops cached specs (nothing is cached by a plain env)."""

    # -- the nn.Module side: cheap attribute writes, to(), forward ---------------

    def __setattr__(self, name: str, value: Any) -> None:
        # nn.Module.__setattr__ costs microseconds (Parameter / Buffer instance checks);
        # an env that keeps its state in plain attributes (``self.state = new``) at every
        # step skips it when the name already is a plain attribute and the value a plain
        # tensor / python object (parameters, buffers and modules live outside __dict__)
        d = self.__dict__
        if name in d and type(value) in _PLAIN_TYPES:
            if type(value) is not torch.Tensor or not getattr(value, "_is_buffer", False):
                d[name] = value
                return
        nn.Module.__setattr__(self, name, value)

    def forward(self, *args, **kwargs):
        """Envs are stepped with :meth:`step` / :meth:`rollout`, not called."""
        raise NotImplementedError(
            f"{type(self).__name__} is not callable: use env.step(td), env.reset() or env.rollout()"
        )

    def to(self, *args, **kwargs) -> EnvBase:
        """Moves the specs, buffers and parameters to a device (and/or casts a dtype).

        Returns:
            the env itself.
        """
        device, dtype, *_ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None:
            device = normalize_device(device)
            self._move_specs(device)
            self.__dict__["_device"] = device
        nn.Module.to(self, *args, **kwargs)
        return self

    def _move_specs(self, device: torch.device) -> None:
        self.output_spec = self.output_spec.to(device)
        self.input_spec = self.input_spec.to(device)

    def train(self, mode: bool = True) -> EnvBase:
        nn.Module.train(self, mode)
        return self


def _state_entry(env: EnvBase, state: Any, key: str) -> Any:
    """``state[key]``, or a ValueError naming the env and what it was given."""
    if not isinstance(state, dict) or key not in state:
        got = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ValueError(
            f"cannot restore the state of {env!r}: expected a dict with {key!r} from "
            f"{type(env).__name__}.env_state(), got {got}"
        )
    return state[key]


def _merge_partial_reset(
    td_reset: TensorDictBase, previous: TensorDictBase, mask: torch.Tensor, nb: int
) -> None:
    """Keeps in ``td_reset`` the values of ``previous`` where ``mask`` is False."""
    mask = mask.reshape(mask.shape[:nb])
    for key in td_reset.keys(True, True):
        old = previous.get(key, None)
        if old is None:
            continue
        new = td_reset[key]
        if old.shape != new.shape:
            continue
        m = mask.reshape(*mask.shape, *((1,) * (new.ndim - nb)))
        td_reset.set(key, torch.where(m, new, old))


def _is_locked(spec: Any) -> bool:
    return bool(getattr(spec, "is_locked", False))


def _leaf_keys(spec: Composite) -> list[NestedKey]:
    return list(spec.keys(include_nested=True, leaves_only=True))


def _done_key(keys: list[NestedKey]) -> NestedKey:
    for key in keys:
        if (key if isinstance(key, str) else key[-1]) == "done":
            return key
    return keys[0]


def _only_key(keys: list[NestedKey], default: str) -> NestedKey:
    if default in keys:
        return default
    if len(keys) == 1:
        return keys[0]
    raise KeyError(f"cannot pick a single {default!r} key among {keys}")


def _single_leaf(spec: Composite):
    keys = _leaf_keys(spec)
    if len(keys) == 1:
        return spec[keys[0]]
    return spec


def normalize_device(device) -> torch.device | None:
    """``torch.device`` with an explicit index for CUDA (``"cuda"`` -> ``"cuda:0"``)."""
    if device is None:
        return None
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device
