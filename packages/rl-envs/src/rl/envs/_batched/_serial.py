"""``SerialEnv``: ``num_workers`` copies of an env stepped one after the other in-process."""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from .._env_base import EnvBase
from ._base import BatchedEnvBase, _bind_workers
from ._dynamic import dynamic_spec_entry
from ._options import batched_options, given_options, warn_without_effect
from ._worker import WorkerCore

__all__ = ["SerialEnv"]


def _probe(args: tuple, kwargs: dict) -> tuple[EnvBase | None, tuple | None]:
    """Builds worker 0's sub-env from ``SerialEnv``'s arguments; returns it and the
    first entry of its specs that varies in shape (``None`` when none does)."""
    names = ("num_workers", "create_env_fn", "create_env_kwargs")
    given = dict(zip(names, args))
    given.update({name: kwargs[name] for name in names if name in kwargs})
    if "num_workers" not in given or "create_env_fn" not in given:
        return None, None  # __init__ reports the missing argument
    probe = types.SimpleNamespace()
    _bind_workers(
        probe, given["num_workers"], given["create_env_fn"], given.get("create_env_kwargs")
    )
    env = SerialEnv._check_env(probe._creators[0]())
    return env, dynamic_spec_entry(env)


class SerialEnv(BatchedEnvBase):
    """Runs ``num_workers`` sub-environments in this process as one batched env.

    The batch size is ``[num_workers, *sub_env.batch_size]`` and the specs are the
    sub-env's expanded to it. Each sub-env is stepped in turn and writes its outputs
    into a preallocated ``[num_workers, ...]`` buffer (no per-step stacking). A
    ``"_reset"`` mask resets only the selected sub-envs. Useful to debug what a
    :class:`ParallelEnv` would run, or when the sub-envs are too cheap for processes.

    Args:
        num_workers: the number of sub-environments.
        create_env_fn: a callable returning a sub-env (an :class:`EnvBase`), or a list
            of ``num_workers`` callables whose envs share the same specs.
        create_env_kwargs: keyword arguments of ``create_env_fn`` (one dict, or a list
            of one dict per worker).
        device: the device of the returned tensors (default: the sub-env's).
        run_type_checks: check actions against ``action_spec`` at each step.
        use_buffers: ``False`` stacks the sub-envs' outputs at each call instead of
            writing them into preallocated buffers: sub-envs whose entries differ in
            shape then work (their data is a ``LazyStackedTensorDict``). ``None`` (the
            default) uses the buffers unless the sub-env's specs have entries whose
            shape varies (a ``StackedComposite`` group of agents with different spaces),
            as TorchRL; ``True`` too, with a warning in that case.
        num_threads: torch threads of this process, set when the sub-envs are built
            (``None``: unchanged).
        share_individual_td: ``reset`` / ``step`` return a lazy stack of one
            tensordict per sub-env (TorchRL's layout then).
        pin_memory: pin the returned tensors (needs CUDA; ``ValueError`` otherwise).
        non_blocking: device copies of the outputs (``device=`` other than the CPU)
            are non-blocking.
        mp_start_method, num_sub_threads, daemon: TorchRL's worker-process arguments;
            there is no worker process here, so a non-default value warns.
        memmap, policy_proof, metadata_from_workers: TorchRL's arguments of its other
            transports; a non-default value warns (see ``_batched/_options.py``).
        shared_memory, allow_step_when_done, serial_for_single, consolidate,
            shutdown_timeout: accepted, with nothing to do in process.
            Every option is kept in ``env.batched_options``.

    Raises:
        ValueError: ``num_workers`` is not a positive int, or a list argument does not
            have ``num_workers`` entries, or the sub-envs' specs differ.
        TypeError: ``create_env_fn`` does not return an :class:`EnvBase`.

    Examples:
        >>> import torch
        >>> from rl.envs import CartPoleEnv, SerialEnv, check_env_specs
        >>> env = SerialEnv(3, CartPoleEnv)
        >>> env.batch_size
        torch.Size([3])
        >>> check_env_specs(env, seed=0)
        >>> rollout = env.rollout(10, break_when_any_done=False)
        >>> rollout["next", "observation"].shape
        torch.Size([3, 10, 4])
        >>> td = env.reset()
        >>> td["_reset"] = torch.tensor([[True], [False], [False]])
        >>> _ = env.reset(td)  # resets the first sub-env only
        >>> env.close()
    """

    def __new__(cls, *args, use_buffers: bool | None = None, **kwargs):
        first = None
        if cls is SerialEnv and use_buffers is not False:
            # TorchRL: specs whose entries vary in shape (a heterogeneous group) turn the
            # buffers off; the probed sub-env becomes worker 0
            first, entry = _probe(args, kwargs)
            if entry is not None:
                if use_buffers:
                    warnings.warn(
                        f"SerialEnv(use_buffers=True) cannot hold the entry {entry[0][1:]!r} "
                        f"of the sub-envs' {entry[0][0]} in buffers (its spec differs "
                        "across the stacked members): using use_buffers=False",
                        UserWarning,
                        stacklevel=2,
                    )
                use_buffers = False
        if cls is SerialEnv and use_buffers is False:
            from ._lazy_serial import LazySerialEnv

            cls = LazySerialEnv
        obj = super().__new__(cls)
        obj.__dict__["_first_env"] = first  # before nn.Module.__init__: not __setattr__
        return obj

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]],
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        pin_memory: bool = False,
        share_individual_td: bool | None = None,
        shared_memory: bool = True,
        memmap: bool = False,
        policy_proof: Callable | None = None,
        device: torch.device | str | None = None,
        allow_step_when_done: bool = False,
        num_threads: int | None = None,
        num_sub_threads: int = 1,
        serial_for_single: bool = False,
        non_blocking: bool = False,
        mp_start_method: str | None = None,
        use_buffers: bool | None = None,
        metadata_from_workers: bool = False,
        consolidate: bool = True,
        daemon: bool = False,
        shutdown_timeout: float = 10.0,
        run_type_checks: bool = False,
    ) -> None:
        options = given_options(locals())
        self.batched_options = batched_options(type(self).__name__, options)
        given = {
            "mp_start_method": mp_start_method,
            "num_sub_threads": num_sub_threads,
            "daemon": daemon,
        }
        defaults = {"mp_start_method": None, "num_sub_threads": 1, "daemon": False}
        warn_without_effect(
            type(self).__name__,
            {k: v for k, v in given.items() if v != defaults[k]},
            dict.fromkeys(given, "the sub-envs run in this process (no worker process)"),
        )
        self._envs: list[EnvBase] = []
        self._cores: list[WorkerCore] = []
        super().__init__(
            num_workers,
            create_env_fn,
            create_env_kwargs,
            device=device,
            run_type_checks=run_type_checks,
        )
        self._start(first=self._envs[0])

    def _make_meta_env(self) -> EnvBase:
        env = self.__dict__.pop("_first_env", None)
        if env is None:
            env = self._check_env(self._creators[0]())
        self._envs = [env]
        return env

    def _start(self, first: EnvBase | None = None) -> None:
        if self.batched_options["num_threads"] is not None:  # TorchRL: this process's threads
            torch.set_num_threads(self.batched_options["num_threads"])
        envs = [first if first is not None else self._creators[0]()]
        envs += [creator() for creator in self._creators[1:]]
        self._envs = envs
        self._cores = [
            WorkerCore(env, index, self._shm_buffers, self._layout)
            for index, env in enumerate(envs)
        ]
        self._pending_promote = []
        self.is_closed = False

    def _ensure_started(self) -> None:
        if self.is_closed:
            self._start()

    @property
    def envs(self) -> list[EnvBase]:
        """The sub-environments."""
        return self._envs

    def _do_step(self) -> None:
        for core in self._cores:
            core.step()

    def _do_step_workers(self, workers: list[int]) -> None:
        cores = self._cores
        for index in workers:
            cores[index].step()

    def _do_reset(self, workers: list[int]) -> None:
        cores = self._cores
        for index in workers:
            cores[index].reset()

    def _do_step_and_maybe_reset(self) -> list[int]:
        return [index for index, core in enumerate(self._cores) if core.step_and_maybe_reset()]

    def _do_seed(self, index: int, seed: int | None, static_seed: bool) -> int | None:
        return self._envs[index].set_seed(seed, static_seed)

    def _do_env_state(self, index: int) -> dict[str, Any]:
        return self._envs[index].env_state()

    def _do_load_env_state(self, index: int, state: dict[str, Any]) -> None:
        self._envs[index].load_env_state(state)

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Closes every sub-environment (a later reset recreates them)."""
        if self.is_closed:
            return
        for env in self._envs:
            env.close()
        self._envs = []
        self._cores = []
        self.is_closed = True
