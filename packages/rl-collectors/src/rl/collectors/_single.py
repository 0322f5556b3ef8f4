"""``Collector``: batches of a policy acting in an env, in this process."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase
from torch import nn

from rl.core import ExplorationType, set_thread_exploration_type, tensor_policy
from rl.envs import EnvBase, InitTracker, mark_truncated, truncated_keys
from rl.envs.engine import non_tensor_keys
from rl.envs.utils import append_policy_transforms, missing_policy_transforms

from ._base import CollectorBase
from ._common import (
    AutoWrappedPolicy,
    TrajIds,
    _as_tuple,
    auto_wrap_policy,
    check_actions,
    check_batch_args,
    end_of_traj,
    load_weights,
    make_env,
    rng_state,
    set_rng_state,
    traj_end_keys,
    wrap_policy,
)
from ._dispatch import CollectorMeta
from ._interruptor import Interruptor
from ._utils import split_trajectories
from ._weight_update import WeightUpdaterBase

__all__ = ["Collector", "SyncDataCollector"]


def _device(device) -> torch.device | None:
    return None if device is None else torch.device(device)


def _cudagraph(policy: Any, options: bool | Mapping[str, Any], device: torch.device | None) -> Any:
    """``policy`` captured in a CUDA graph (tensordict's ``CudaGraphModule``)."""
    on_cuda = torch.cuda.is_available() and (device is None or device.type == "cuda")
    if not on_cuda:
        warnings.warn(
            f"cudagraph_policy needs a CUDA policy device (got {device}); the policy runs eagerly",
            UserWarning,
            stacklevel=4,
        )
        return policy
    from tensordict.nn import CudaGraphModule  # noqa: PLC0415

    return CudaGraphModule(policy, **({} if options is True else dict(options)))


class Collector(CollectorBase, metaclass=CollectorMeta):
    """Iterates over ``[*env_batch, T]`` batches of a policy acting in an environment.

    Each batch is one call of the env's own rollout machinery (``env.rollout``: its fast
    paths, one preallocated output, no TensorDict built per step), continued from where
    the previous batch stopped: episodes run on across batches and the env is reset only
    where a sub-environment is done (or at each batch with ``reset_at_each_iter``).
    Every step gets a ``("collector", "traj_ids")`` entry, unique per trajectory across
    batches.

    Args:
        create_env_fn: an :class:`~rl.envs.EnvBase`, or a callable returning one (also
            accepted as ``env=``).
        policy: a callable reading the root TensorDict and writing the action (e.g. a
            ``TensorDictModule``); ``None`` acts uniformly at random from the action spec.
        frames_per_batch: env steps per batch, a multiple of the env batch size
            (``T = frames_per_batch / env.batch_size.numel()``; rounded up, with a
            warning, as TorchRL, when it is not one).
        total_frames: frames to collect in all (the last batch is shortened so that the
            total is exact, up to whole steps of every env); ``-1`` collects until
            :meth:`shutdown`.
        device: default of ``storing_device``, ``policy_device`` and ``env_device``.
        storing_device: where the yielded batches live (default: the env's device).
        policy_device: where the policy runs; the root is moved there and back.
        env_device: the env's device (an env built elsewhere raises a ``ValueError``).
        create_env_kwargs: keyword arguments of ``create_env_fn``.
        max_frames_per_traj: truncate episodes at this many steps (a ``StepCounter``).
        init_random_frames: the first frames are collected with random actions.
        reset_at_each_iter: reset the env at the start of every batch.
        postproc: applied to each batch before it is yielded.
        split_trajs: yield ``[n_traj, max_len]`` trajectories padded with
            ``("collector", "mask")`` (see :func:`~rl.collectors.utils.split_trajectories`).
        exploration_type: the exploration type set while the policy acts
            (``ExplorationType.RANDOM``: sample from distributions).
        set_truncated: mark the last step of each batch ``truncated`` (and ``done``) in
            the yielded data (:func:`~rl.envs.mark_truncated`); the env itself continues
            the episode. The env needs a ``truncated`` entry (``env.add_truncated_keys()``):
            a ``RuntimeError`` at construction otherwise, as TorchRL.
        use_buffers: kept for TorchRL compatibility; outputs are always preallocated.
        replay_buffer: batches are written into it with its ``extend`` (flattened to
            ``[frames]`` for a one-dimensional storage) and the iterator yields ``None``.
        extend_buffer: kept for TorchRL compatibility (batches are always extended).
        trust_policy: skip the checks of the actions against the spec (before the first
            batch and at the last step of every batch).
        compile_policy: ``torch.compile`` the policy (``True`` or the compile kwargs).
        backend: where to collect (TorchRL's dispatch, done by the constructor before
            this class is built): ``"direct"`` (this class, in this process),
            ``"process"`` (:class:`MultiSyncCollector` with ``sync=True``, else
            :class:`MultiAsyncCollector`), ``"ray"`` (:class:`RayCollector`),
            ``"distributed"`` (:class:`DistributedCollector`); ``"rpc"`` and
            ``"submitit"`` are refused. Default: the enclosing
            :func:`rl.core.service_backend`, else ``"process"`` when ``num_collectors``
            is given, else ``"direct"``.
        backend_options: extra arguments of the back-end's collector class.
        num_collectors: how many collectors (one env constructor each) a
            multi-collector back-end runs.
        sync: whether a multi-collector back-end yields batches gathered from every
            collector (default ``False``: batches as they come).
        track_traj_ids: write ``("collector", "traj_ids")``.
        trajs_per_batch: yield batches of this many whole trajectories (cut from the
            collected frames by ``("collector", "traj_ids")``; a trajectory may span
            several collected batches) instead of fixed-size batches.
        traj_format: with ``trajs_per_batch``: ``"padded"`` (``[N, T_max]``, zeros after
            each trajectory's end and a ``("collector", "mask")`` of the valid steps) or
            ``"cat"`` (the trajectories concatenated along time, ``[sum T]``). Left out,
            ``"padded"`` with a ``FutureWarning`` (TorchRL's default becomes ``"cat"``).
        trajs_per_write: with ``trajs_per_batch`` and ``replay_buffer``, the whole
            trajectories of each collected batch are written to the buffer flat
            (``[sum T]``), at most this many per ``extend`` (default: all in one); the
            iterator yields ``None`` per collected batch.
        pre_collect_hook: called (no argument) before each batch is collected.
        post_collect_hook: called with each batch the collector yields (after
            ``postproc``; also when the batch goes to ``replay_buffer``). Both may be
            set or replaced later through the attributes of the same names.
        policy_factory: builds the policy (instead of ``policy``; useful when the policy
            cannot be pickled to a worker).
        return_same_td: yield the same TensorDict at every batch, its values overwritten
            (no new allocation per batch; clone what you keep). Not with
            ``replay_buffer``.
        reset_when_done: must be ``True`` (done sub-environments are always reset);
            ``False`` raises, as TorchRL, where it is deprecated.
        interruptor: an :class:`~rl.collectors.Interruptor` (TorchRL's
            ``_Interruptor``) asked after each env step: once its
            :meth:`~rl.collectors.Interruptor.stop_collection` was called, the batch
            ends after the step being taken. The batch keeps its ``[*env_batch, T]``
            shape: the steps not taken are zeros with ``("collector", "traj_ids")``
            ``-1`` (TorchRL leaves the previous batch's values there), and the next
            batch goes on from the last step taken. The frames counted are the whole
            batch's, as TorchRL's. :class:`MultiSyncCollector` sets it in its workers
            (``preemptive_threshold``). ``None`` (default): never asked.
        weight_updater: a :class:`~rl.collectors.WeightUpdaterBase` (or a callable
            returning one) that :meth:`update_policy_weights_` hands the weights to.
        track_policy_version: write the policy's version as ``"policy_version"`` (root
            and ``"next"``, ``int64``, ``[*env_batch, T]``); :meth:`update_policy_weights_`
            bumps it once per call. ``True`` counts from 0; an object with ``version``
            and ``increment_version()`` (TorchRL's ``PolicyVersion``) is used as given.
        worker_idx: this collector's index among several (read by
            :attr:`worker_idx`; the multiprocess collectors set it in their workers).
        auto_register_policy_transforms: append the :class:`~rl.envs.InitTracker` and
            ``TensorDictPrimer`` a recurrent policy needs (its submodules with
            ``make_tensordict_primer()``) when the env's specs lack them. ``None``
            (default) appends nothing and warns (``FutureWarning``) when something is
            missing; ``False`` is silent.
        weight_sync_schemes: ``{model_id: WeightSyncScheme}`` that
            :meth:`update_policy_weights_` sends through (set up as senders with this
            collector as context); not with ``weight_updater``.
        weight_recv_schemes: ``{model_id: WeightSyncScheme}`` this collector receives
            weights through (from a sender elsewhere): set up as receivers and
            connected at construction; weights are applied between batches.
        cudagraph_policy: wrap the policy in tensordict's ``CudaGraphModule`` (``True`` or
            its kwargs); on a machine without CUDA the policy runs eagerly, with a
            warning.
        no_cuda_sync: TorchRL's switch to bypass its explicit CUDA synchronizations
            (after non-blocking copies). This collector issues none in either case: its
            device copies are blocking, so ``True`` (what TorchRL recommends for envs
            running on CUDA, e.g. IsaacLab) and ``False`` collect the same data; the
            value is kept as ``no_cuda_sync``.
        compact_obs: drop the ``("next", ...)`` observation and state entries from the
            yielded batches (the next step's root holds them again; at a trajectory's
            last step they are lost). Rewards and done flags stay. Roughly halves the
            memory of observation-heavy batches, as TorchRL's.

    Raises:
        ValueError: a policy writes an action outside the action spec (the message names
            the key, the spec and the value). (A ``frames_per_batch`` that is not a
            multiple of the env batch size is rounded up with a warning.)

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.collectors import Collector
        >>> from rl.envs import GymEnv
        >>> env = GymEnv("Pendulum-v1", num_envs=2)
        >>> policy = TensorDictModule(
        ...     torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"]
        ... )
        >>> collector = Collector(env, policy, frames_per_batch=100, total_frames=400)
        >>> for batch in collector:
        ...     print(batch.batch_size, batch["collector", "traj_ids"].shape)
        torch.Size([2, 50]) torch.Size([2, 50])
        torch.Size([2, 50]) torch.Size([2, 50])
        torch.Size([2, 50]) torch.Size([2, 50])
        torch.Size([2, 50]) torch.Size([2, 50])
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: EnvBase | Callable[..., EnvBase],
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        *,
        backend: str | None = None,
        backend_options: Mapping[str, Any] | None = None,
        num_collectors: int | None = None,
        sync: bool | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        device=None,
        storing_device=None,
        policy_device=None,
        env_device=None,
        create_env_kwargs: Mapping[str, Any] | None = None,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool | None = None,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        set_truncated: bool = False,
        use_buffers: bool | None = None,
        replay_buffer: Any = None,
        extend_buffer: bool = True,
        trust_policy: bool | None = None,
        compile_policy: bool | Mapping[str, Any] | None = None,
        track_traj_ids: bool = True,
        trajs_per_batch: int | None = None,
        traj_format: str | None = None,
        trajs_per_write: int | None = None,
        pre_collect_hook: Callable[[], None] | None = None,
        post_collect_hook: Callable[[TensorDictBase], None] | None = None,
        policy_factory: Callable[[], Callable] | None = None,
        return_same_td: bool = False,
        reset_when_done: bool = True,
        interruptor: Interruptor | None = None,
        weight_updater: WeightUpdaterBase | Callable[[], WeightUpdaterBase] | None = None,
        track_policy_version: bool | Any = False,
        worker_idx: int | None = None,
        auto_register_policy_transforms: bool | None = None,
        weight_sync_schemes: Mapping[str, Any] | None = None,
        weight_recv_schemes: Mapping[str, Any] | None = None,
        cudagraph_policy: bool | Mapping[str, Any] | None = None,
        no_cuda_sync: bool = False,
        compact_obs: bool = False,
    ) -> None:
        if create_env_fn is None:
            raise TypeError("Collector needs an env: pass create_env_fn (an env or a factory)")
        self._check_reset_and_factory(reset_when_done, policy, policy_factory)
        self.reset_when_done = True
        if policy_factory is not None:
            policy = policy_factory()
        if return_same_td and replay_buffer is not None and not self._ignore_rb:
            raise TypeError(
                "return_same_td must be False when a replay buffer is passed: the batches "
                "go to the buffer, none is yielded"
            )
        self.return_same_td = bool(return_same_td)
        self._same_td: TensorDictBase | None = None
        self.worker_idx = worker_idx
        device = _device(device)
        self.env = make_env(create_env_fn, create_env_kwargs, max_frames_per_traj)
        self._auto_register_policy_transforms = auto_register_policy_transforms
        self.env = self._register_policy_transforms(self.env, policy)
        set_spec = getattr(policy, "set_action_spec_from_env", None)
        if callable(set_spec):  # a RandomPolicy built without a spec takes the env's
            set_spec(self.env)
        self.env_device = _device(env_device) or device or self.env.device
        env_dev = self.env.device or torch.device("cpu")
        if self.env_device is not None and self.env_device != env_dev:
            raise ValueError(
                f"env_device={self.env_device} but the env lives on {env_dev}: build the env "
                "on that device (e.g. GymEnv(..., device=...))"
            )
        self.policy_device = _device(policy_device) or device
        self.storing_device = _device(storing_device) or device
        self.total_frames = total_frames
        self.steps_per_batch = check_batch_args(self.env, frames_per_batch, total_frames)
        self.frames_per_batch = self.steps_per_batch * max(self.env.batch_size.numel(), 1)
        self.policy = policy
        runnable = auto_wrap_policy(policy, self.env, bool(trust_policy))
        self._policy = wrap_policy(runnable, self.policy_device, self.env.device, compile_policy)
        if cudagraph_policy:
            self._policy = _cudagraph(self._policy, cudagraph_policy, self.policy_device)
        # the same calls on tensors, without tensordict's per-call machinery (None: the
        # policy is not a plain TensorDictModule / TensorDictSequential of them)
        self._tensor_policy = tensor_policy(self._policy) if self._policy is runnable else None
        self.init_random_frames = int(init_random_frames or 0)
        self.reset_at_each_iter = reset_at_each_iter
        self.postproc = postproc
        self.split_trajs = bool(split_trajs)
        self.exploration_type = exploration_type
        if set_truncated:
            # TorchRL 0.14.1 raises here, at construction (its rollout raises on its own)
            truncated_keys(self.env.done_keys, when="before passing the env to the collector")
        self.set_truncated = set_truncated
        self.no_cuda_sync = bool(no_cuda_sync)
        self.compact_obs = bool(compact_obs)
        self._compact_keys = _compact_keys(self.env) if self.compact_obs else ()
        self.use_buffers = use_buffers
        self.replay_buffer = replay_buffer
        self.extend_buffer = extend_buffer
        self.trust_policy = bool(trust_policy)
        self.track_traj_ids = track_traj_ids
        self.pre_collect_hook = pre_collect_hook
        self.post_collect_hook = post_collect_hook
        self.interruptor = interruptor
        self._init_base()
        self._init_trajs(trajs_per_batch, traj_format, replay_buffer, split_trajs, trajs_per_write)
        self._root: TensorDictBase | None = None
        self._traj_ids = TrajIds(self.env.batch_size)
        self._end_keys = traj_end_keys(self.env.done_keys)
        self._checked = self.trust_policy or policy is None
        self._carry_keys: list | None = None
        self._policy_entries: TensorDictBase | None = None  # see _add_policy_entries
        self._version_tracker = _version_tracker(track_policy_version)
        self.weight_updater = weight_updater
        self._init_weight_sync(weight_sync_schemes)
        self._connect_weight_sync()
        if weight_recv_schemes is not None:
            self.register_scheme_receiver(weight_recv_schemes)

    def _register_policy_transforms(self, env: EnvBase, policy: Any) -> EnvBase:
        """``auto_register_policy_transforms``: the recurrent policy's env transforms."""
        flag = self._auto_register_policy_transforms
        if flag:
            return append_policy_transforms(env, policy)
        missing = missing_policy_transforms(env, policy)
        if missing and flag is None:
            names = ", ".join(type(t).__name__ for t in missing)
            warnings.warn(
                f"The env passed to {type(self).__name__} is missing transforms required "
                f"by the policy ({names}). TorchRL 0.15 appends them automatically; pass "
                "auto_register_policy_transforms=True to append them now (and silence "
                "this warning), or auto_register_policy_transforms=False to opt out.",
                FutureWarning,
                stacklevel=4,
            )
        if missing:
            # the policy cannot act on this env: say so now, as TorchRL (whose first policy
            # call at construction raises), rather than at the first batch
            # (only a policy reading the missing init flag: a recurrent module, which cannot
            # run without it; e.g. a consistent-dropout mask is drawn when absent)
            written, init = set(), set()
            for transform in missing:
                keys = getattr(transform, "init_keys", None) or list(
                    getattr(transform, "primers", {}).keys()
                )
                keys = {k if isinstance(k, str) else tuple(k) for k in keys}
                written |= keys
                if isinstance(transform, InitTracker):
                    init |= keys
            reads = {k if isinstance(k, str) else tuple(k) for k in getattr(policy, "in_keys", ())}
            lacking = sorted(reads & written, key=str)
            if reads & init:
                raise KeyError(
                    f"the policy reads {lacking}, which the env does not provide (its "
                    "specs lack them): pass auto_register_policy_transforms=True to append "
                    "the InitTracker / TensorDictPrimer transforms the policy needs"
                )
        return env

    # ------------------------------------------------------------------------ batches
    def _produce(self) -> TensorDictBase | None:
        steps = self.steps_per_batch
        left = self._frames_left()
        if left is not None:
            # the last batch: the steps left (rounded up to whole steps of every env)
            steps = min(steps, -(-left // max(self.env.batch_size.numel(), 1)))
            if steps <= 0:
                return None
        if self.receive_lock is not None:  # weights arriving wait for the batch's end
            with self.receive_lock:
                return self.rollout(steps)
        return self.rollout(steps)

    @torch.no_grad()
    def rollout(self, steps: int | None = None) -> TensorDictBase:
        """Collects one ``[*env_batch, steps]`` batch (without counting its frames).

        Args:
            steps: the number of env steps (default ``frames_per_batch / n_envs``).
        """
        env = self.env
        steps = self.steps_per_batch if steps is None else steps
        self._pre_hook()
        if self._root is None or self.reset_at_each_iter:
            self._root = env.reset()
            if self.reset_at_each_iter and self._iter > 0:
                # a reset ends every running trajectory
                self._traj_ids.assign(
                    torch.ones(*env.batch_size, 1, 1, dtype=torch.bool, device=env.device)
                )
        random = self._policy is None or self._frames < self.init_random_frames
        policy = None if random else self._acting_policy()
        with set_thread_exploration_type(self.exploration_type):
            if policy is not None and not self._checked:
                self._probe_policy(policy)
            interruptor = self.interruptor
            # stop_when only with an interruptor: an env overriding rollout() with
            # TorchRL's signature runs as before without one
            stop = {} if interruptor is None else {"stop_when": interruptor.collection_stopped}
            out = env.rollout(
                steps,
                policy,
                auto_reset=False,
                tensordict=self._root,
                break_when_any_done=False,
                **stop,
            )
        if policy is not None and not self.trust_policy:
            check_actions(env, out, [out.batch_size[-1] - 1])
        if random and self._policy is not None:
            self._add_policy_entries(out)
        self._root = self._next_root(out)
        if self.track_traj_ids:
            ends = end_of_traj(out.get("next"), self._end_keys, len(env.batch_size) + 1)
            ids = self._traj_ids.assign(ends)
            out.set(("collector", "traj_ids"), ids)
        if self._version_tracker is not None:
            self._write_version(out)
        if self.set_truncated:
            mark_truncated(out, env.done_keys)
        if out.batch_size[-1] < steps:  # cut short by the interruptor
            out = _pad_steps(out, steps, self.track_traj_ids)
        if self._compact_keys:  # after _next_root, which reads them
            out = out.exclude(*self._compact_keys)
        if out.names[-1] != "time":  # TorchRL's name of the rollout dim
            out.refine_names(..., "time")
        if self.storing_device is not None and out.device != self.storing_device:
            out = out.to(self.storing_device)
        if self.return_same_td:
            out = self._into_same_td(out)
        return out

    def _add_policy_entries(self, out: TensorDictBase) -> None:
        """A batch of random actions (``init_random_frames``) gets the entries the policy
        would have written (its other outputs, ``"next"`` ones such as a recurrent
        state), zero-filled, as TorchRL's: every batch has the same keys (a replay
        buffer initialised from the first batch takes the later ones), and the
        recurrent state the first policy step reads is zero."""
        if self._policy_entries is None:
            root = self.env.fake_tensordict().exclude("next")
            with (
                torch.no_grad(),
                torch.random.fork_rng(devices=[]),
                set_thread_exploration_type(self.exploration_type),
            ):
                written = self._policy(root.clone())
            known = set(root.keys(True, True))
            keys = [key for key in written.keys(True, True) if key not in known]
            self._policy_entries = written.select(*keys).zero_()
        nb = len(self.env.batch_size)
        steps = out.batch_size[-1]
        for key, value in self._policy_entries.items(True, True):
            if key not in out.keys(True, True):
                shape = (*value.shape[:nb], steps, *value.shape[nb:])
                out.set(key, value.unsqueeze(nb).expand(shape).clone())

    def _into_same_td(self, out: TensorDictBase) -> TensorDictBase:
        """``out`` copied into the one TensorDict yielded at every batch (reallocated
        only when the keys or shapes change, e.g. after ``init_random_frames``)."""
        same = self._same_td
        if (
            same is None
            or same.batch_size != out.batch_size
            or set(same.keys(True, True)) != set(out.keys(True, True))
        ):
            self._same_td = out
            return out
        return same.update_(out)

    # ---------------------------------------------------------------- policy version
    def _write_version(self, out: TensorDictBase) -> None:
        version = self._version_tracker.version
        if isinstance(version, str):
            value = NonTensorData(version, batch_size=out.batch_size, device=out.device)
        else:
            value = torch.full(out.batch_size, int(version), dtype=torch.int64, device=out.device)
        out.set("policy_version", value)
        out.set(("next", "policy_version"), value.clone())

    @property
    def policy_version(self) -> int | str | None:
        """The policy's version (``None`` without ``track_policy_version``)."""
        tracker = self._version_tracker
        return None if tracker is None else tracker.version

    def increment_version(self) -> None:
        """Bumps the policy version (no-op without ``track_policy_version``)."""
        if self._version_tracker is not None:
            self._version_tracker.increment_version()

    @torch.no_grad()
    def fake_tensordict(self) -> TensorDictBase:
        """A zero-filled TensorDict with the keys, shapes and dtypes of one batch, built
        from the specs and one policy call on a fake root (the env is not stepped; no
        random generator moves). For storage initialisation or compile warm-up.
        """
        env = self.env
        fake = env.fake_tensordict()
        nxt = fake.get("next")
        root = fake.exclude("next")
        policy = self._policy
        if policy is not None:
            with (
                torch.random.fork_rng(devices=[]),
                set_thread_exploration_type(self.exploration_type),
            ):
                root = policy(root.clone())
            written = root.get("next", None)
            if written is not None:  # a policy writing next entries (recurrent states)
                nxt = nxt.clone()
                nxt.update(written)
                root = root.exclude("next")
        root.set("next", nxt)
        steps = self.steps_per_batch
        out = root.unsqueeze(-1).expand(*root.batch_size, steps).clone().zero_()
        out.refine_names(..., "time")
        if self.track_traj_ids:
            ids = torch.zeros(out.batch_size, dtype=torch.int64, device=out.device)
            out.set(("collector", "traj_ids"), ids)
        if self._version_tracker is not None:
            self._write_version(out)
            if not isinstance(self._version_tracker.version, str):
                out.get("policy_version").zero_()
                out.get(("next", "policy_version")).zero_()
        if self.set_truncated:
            mark_truncated(out, env.done_keys)
        if self._compact_keys:
            out = out.exclude(*self._compact_keys)
        if self.storing_device is not None and out.device != self.storing_device:
            out = out.to(self.storing_device)
        if self.split_trajs:
            out = split_trajectories(out)
        if self.postproc is not None:
            out = self.postproc(out)
        return self._drop_private(out)

    def _acting_policy(self) -> Callable:
        """The policy's tensor twin where it still does what the policy does, else the
        policy (checked at each batch: a hook added since construction is honoured)."""
        fast = self._tensor_policy
        return fast if fast is not None and fast.usable() else self._policy

    def _probe_policy(self, policy: Callable) -> None:
        """Checks the policy's first action against the spec without moving any RNG."""
        with torch.random.fork_rng(devices=[]):
            probe = policy(self._root.clone())
        if probe is None:
            raise RuntimeError("the policy returned None; it must return the tensordict")
        check_actions(self.env, probe.unsqueeze(-1), [0])
        self._checked = True

    def _next_root(self, out: TensorDictBase) -> TensorDictBase:
        """The root the next batch starts from: the last ``"next"`` entries (rewards
        excluded), with the done sub-environments reset."""
        env = self.env
        nxt = out.get("next")
        if self._carry_keys is None:
            rewards = set(env.reward_keys)
            keys = [*nxt.keys(True, True), *non_tensor_keys(nxt)]  # strings too
            self._carry_keys = [k for k in keys if k not in rewards]
        nb = len(env.batch_size)
        root = _flat_last_root(out, nxt, self._carry_keys, nb)
        if root is None:
            # the last root (what a policy wrote there: recurrent states, counters...)
            # under the step's "next" entries, as the rollout carries them from step to
            # step; select-then-index keeps the batch dims of nested groups ([*B, n_agents])
            idx = (slice(None),) * nb + (-1,)
            root = out.exclude("next", "collector")[idx].clone()
            root.update(nxt.select(*self._carry_keys)[idx].clone())
        if self._end_keys == ["done"]:  # flags at the root only: "done" is their or
            done = root.get("done")
            if bool(done.any()):
                root.set("_reset", done.clone())
                root = env.reset(root)
        elif env.any_done(root):  # "_reset" next to each group's flags, as TorchRL
            root = env.reset(root)
        return root

    def reset(self, index=None, **kwargs) -> None:
        """Makes the next batch start from a reset env (every sub-env; ``index`` is
        accepted for TorchRL compatibility and ignored). Running trajectories end."""
        if self._root is not None:
            self._traj_ids.assign(torch.ones(*self.env.batch_size, 1, 1, dtype=torch.bool))
        self._root = None
        if self._trajs is not None:  # the episodes in flight and those not yet yielded
            self._trajs.clear()

    # ------------------------------------------------------------------ policy weights
    def update_policy_weights_(self, policy_or_weights: Any = None, **kwargs) -> None:
        """Makes the collector act with new weights from the next batch on.

        In this process the collector runs the policy it was given, so weights updated in
        place need no call; ``policy_or_weights`` (a module, a state dict or a
        TensorDict of parameters) is copied into the policy the collector runs.
        """
        worker_ids = kwargs.pop("worker_ids", None)
        if "policy_weights" in kwargs:  # TorchRL's older keyword
            policy_or_weights = kwargs.pop("policy_weights")
        model_id, weights_dict = kwargs.pop("model_id", None), kwargs.pop("weights_dict", None)
        if self._weight_sync_schemes:
            self._send_through_schemes(policy_or_weights, worker_ids, model_id, weights_dict)
            return
        if self._weight_updater is not None:
            self._weight_updater(policy_or_weights, worker_ids=worker_ids)
            self.increment_version()
            return
        target = self._policy
        if policy_or_weights is None:
            if target is not self.policy and isinstance(self.policy, nn.Module):
                load_weights(_inner(target), TensorDict.from_module(self.policy))
            self.increment_version()
            return
        if target is None:
            self._maybe_fallback_update(policy_or_weights)
        load_weights(_inner(target), policy_or_weights)
        self.increment_version()

    # ----------------------------------------------------------------------- seeding
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the env (and torch's generator, which draws random actions).

        Returns:
            the seed that follows (to seed another collector with).
        """
        torch.manual_seed(seed)
        return self.env.set_seed(seed, static_seed=static_seed)

    # -------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """What an exact resume needs: frames, trajectory ids, RNG states, the current
        root, the policy's weights and the env's state (:meth:`EnvBase.env_state`).

        Everything is a tensor or a plain value (``torch.save`` / ``torch.load`` with
        ``weights_only=True``); nothing is pickled, and :meth:`load_state_dict` only
        assigns values to the live env, so a crafted checkpoint cannot run code.

        Raises:
            TypeError: the env holds state that is not tensors or plain data (naming
                where), which is refused rather than pickled.
        """
        state: dict = {
            "frames": self._frames,
            "iter": self._iter,
            "traj_ids": self._traj_ids.state_dict(),
            "rng": rng_state(),
            "root": None if self._root is None else self._root.to_dict(),
        }
        if isinstance(self.policy, nn.Module):
            state["policy_state_dict"] = self.policy.state_dict()
        if self._root is not None:
            state["env_state"] = self.env.env_state()
        if self._version_tracker is not None:
            state["policy_version"] = self._version_tracker.version
        return state

    def load_state_dict(self, state: Mapping) -> None:
        """Restores :meth:`state_dict`: the next batch is the one the saved run would
        have collected next (given the env state could be saved)."""
        self._frames = int(state["frames"])
        self._iter = int(state["iter"])
        self._traj_ids.load_state_dict(state["traj_ids"])
        set_rng_state(state["rng"])
        if "policy_state_dict" in state and isinstance(self.policy, nn.Module):
            self.policy.load_state_dict(state["policy_state_dict"])
            self.update_policy_weights_()
        if "env_state" in state:
            self.env.load_env_state(state["env_state"])
        version = state.get("policy_version")
        if version is not None and self._version_tracker is not None:
            self._version_tracker.version = version
        root = state.get("root")
        self._root = (
            None
            if root is None
            else TensorDict(root, batch_size=self.env.batch_size, device=self.env.device)
        )

    def _close(self) -> None:
        self.env.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={self.env!r}, frames_per_batch={self.frames_per_batch}, "
            f"total_frames={self.total_frames}, frames={self._frames})"
        )


class _VersionCounter:
    """The integer policy version of ``track_policy_version=True`` (starts at 0)."""

    def __init__(self) -> None:
        self.version = 0

    def increment_version(self) -> None:
        self.version += 1


def _version_tracker(track: Any) -> Any:
    if track is None or track is False:
        return None
    if track is True:
        return _VersionCounter()
    if hasattr(track, "increment_version") and hasattr(track, "version"):
        return track
    raise TypeError(
        "track_policy_version must be a bool or an object with `version` and "
        f"`increment_version()` (e.g. a PolicyVersion), got {type(track).__name__}"
    )


def _flat_last_root(
    out: TensorDictBase, nxt: TensorDictBase, carry_keys: list, nb: int
) -> TensorDict | None:
    """``_next_root``'s root built from the entry dicts, where ``out`` and its ``"next"``
    are plain TensorDicts whose entries are tensors at string keys (one env's batch, the
    off-policy examples' 10-frame batches): the same copies of the last step, without
    tensordict's exclude / index / select / update per batch. ``None`` otherwise."""
    if type(out) is not TensorDict or type(nxt) is not TensorDict or out._has_names():
        return None  # (the general path keeps dim names)
    entries = {}
    carried = set(carry_keys)
    for key, value in out._tensordict.items():
        if key == "next" or key == "collector":
            continue
        if type(value) is not torch.Tensor:
            return None
        # a carried key takes its "next" value below, at this key's place in the order
        entries[key] = None if key in carried else value.select(nb, -1).clone()
    flat = nxt._tensordict
    for key in carry_keys:
        value = flat.get(key) if type(key) is str else None
        if type(value) is not torch.Tensor:
            return None
        entries[key] = value.select(nb, -1).clone()
    return TensorDict._new_unsafe(
        entries, batch_size=out.batch_size[:nb], device=out.device, nested=False
    )


def _pad_steps(out: TensorDictBase, steps: int, traj_ids: bool) -> TensorDictBase:
    """``out`` (``[*B, t]``, a batch an interruptor cut short) padded with zeros to
    ``[*B, steps]``, the padding marked by ``("collector", "traj_ids")`` ``-1``."""
    taken = out.batch_size[-1]
    pad = out[..., :1].clone().zero_()
    out = torch.cat([out, pad.expand(*pad.batch_size[:-1], steps - taken)], -1)
    if traj_ids:
        out.get(("collector", "traj_ids"))[..., taken:] = -1
    return out


def _compact_keys(env: EnvBase) -> tuple:
    """``("next", key)`` of the observation and state entries (``compact_obs``): the next
    step's root holds them again; rewards and done flags stay."""
    keys = [*env.observation_keys, *env.state_keys]
    return tuple(("next", *_as_tuple(k)) for k in dict.fromkeys(keys))


def _inner(policy: Any) -> Any:
    """The policy whose weights the collector's runnable policy uses."""
    inner = policy.policy if hasattr(policy, "env_device") else getattr(policy, "_orig_mod", policy)
    return inner.module if isinstance(inner, AutoWrappedPolicy) else inner


#: TorchRL's older name
SyncDataCollector = Collector
