"""EnvBase: the environment contract every component of ``rl`` relies on."""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import Composite, TensorSpec, Unbounded, load_object_state, object_state

from ._done import complete_done, complete_done_spec
from ._env_helpers import EnvHelpers
from ._env_module import EnvModule, normalize_device
from ._env_specs import EnvSpecs
from ._partial_step import peek_step_mask, skip_tensordict, step_masked
from ._policy import ActionsPolicy, compatible_policy, device_casting_policy
from ._rollout import is_lazy, rollout_stacked
from ._td_utils import mark_truncated
from ._utils import step_mdp
from .engine import EnvKernel, RolloutKernel, run_rollout

__all__ = ["EnvBase"]

NestedKey = str | tuple[str, ...]

_OUTPUT_KEYS = ("full_observation_spec", "full_reward_spec", "full_done_spec")
_INPUT_KEYS = ("full_action_spec", "full_state_spec")
_MAX_SEED = 2**32 - 1


def _seed_generator(seed: int) -> int:
    """Derives the seed that follows ``seed`` (deterministic, like TorchRL's ``seed_generator``)."""
    rng = np.random.default_rng(seed)
    return int.from_bytes(rng.bytes(8), "big") % _MAX_SEED


class _EnvMeta(ABCMeta):
    """Runs ``_post_init`` once the subclass ``__init__`` has set the specs.

    As TorchRL's metaclass, it takes ``spec_locked``, ``auto_reset`` and
    ``auto_reset_replace`` out of the constructor arguments (so every subclass accepts
    them, whatever its ``__init__`` signature) and wraps an ``auto_reset=True`` env in an
    :class:`~rl.envs.transforms.AutoResetEnv`.
    """

    def __call__(cls, *args, **kwargs):
        spec_locked = kwargs.pop("spec_locked", None)
        auto_reset = kwargs.pop("auto_reset", False)
        auto_reset_replace = kwargs.pop("auto_reset_replace", True)
        env = super().__call__(*args, **kwargs)
        env._post_init()
        if spec_locked is None:
            spec_locked = env.__dict__.get("_is_spec_locked", True)
        env.set_spec_lock_(spec_locked)
        if auto_reset or env.__dict__.get("_auto_reset_requested", False):
            from .transforms._auto_reset import AutoResetEnv, AutoResetTransform

            env.__dict__["_auto_reset_requested"] = False
            env = AutoResetEnv(env, AutoResetTransform(replace=auto_reset_replace))
        return env


class EnvBase(EnvSpecs, EnvHelpers, EnvModule, metaclass=_EnvMeta):
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
        env = super().__new__(cls)
        env.__dict__["_inplace_update"] = _inplace_update
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
        EnvModule.__init__(self)
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
        self._output_spec = Composite(
            {key: Composite(shape=bs, device=spec_device) for key in _OUTPUT_KEYS},
            shape=bs,
            device=spec_device,
        )
        self._input_spec = Composite(
            {key: Composite(shape=bs, device=spec_device) for key in _INPUT_KEYS},
            shape=bs,
            device=spec_device,
        )
        self.is_closed = False

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
            raise ValueError(
                f"{where} got a tensordict of batch_size {tuple(bs)}, "
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
        if (
            mask is not None
            and self.batch_size
            and not self._reset_keeps_unmasked
            and not bool(mask.all())
        ):
            _merge_partial_reset(td_reset, tensordict, mask, len(self.batch_size))
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
        except KeyError:
            self._raise_missing_action(tensordict)
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

    def _raise_missing_action(self, tensordict: TensorDictBase) -> None:
        for key in self.action_keys:
            if key not in tensordict.keys(True, True):
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
        if is_lazy(tensordict):  # heterogeneous data: one tensordict per step, stacked
            return self._finish_rollout(
                rollout_stacked(
                    self,
                    max_steps,
                    tensordict,
                    policy=policy,
                    callback=callback,
                    break_when_any_done=break_when_any_done,
                    break_when_all_done=break_when_all_done,
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
        )
        return self._finish_rollout(out_td, set_truncated, out, storing_device)

    def rollout_kernel(self) -> RolloutKernel:
        """The back-end of :meth:`rollout` (see :mod:`rl.envs.engine`): how this env steps
        into the rollout's preallocated buffers. The default, :class:`EnvKernel`, calls
        :meth:`_step` and :meth:`reset`; a simulator wrapper returns its own kernel."""
        return EnvKernel(self)

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

    def close(self) -> None:
        """Releases the resources held by the environment (idempotent)."""
        self.is_closed = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_size={self.batch_size}, device={self.device})"


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
