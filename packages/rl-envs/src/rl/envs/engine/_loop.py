"""The rollout engine: one preallocated ``[*B, T]`` time loop for every env."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import tensor_policy

from .._utils import _merge_plain
from ._buffers import (
    RolloutBuffers,
    StepViews,
    StepWriter,
    flat_leaves,
    nested_batch_dims,
    non_tensor_keys,
    numpy_or_none,
    patched,
    restore_nested_batch,
)
from ._kernel import EnvKernel, RolloutKernel

if TYPE_CHECKING:
    from .._env_base import EnvBase

__all__ = ["declared_any_done", "policy_runner", "presample_actions", "run_rollout"]


def presample_actions(
    env: EnvBase, max_steps: int, extra: tuple = ()
) -> list[tuple[Any, torch.Tensor]]:
    """Draws the random actions of all steps at once: ``[(key, tensor[*E, *B, T, *F])]``.

    ``extra``: leading batch dims of the input beyond the env's (non batch-locked envs).
    """
    actions = env.full_action_spec.rand((max_steps, *extra))
    nb = len(extra) + len(env.batch_size)
    out = []
    for key in actions.keys(True, True):
        value = actions[key]
        out.append((key, value.movedim(0, nb).contiguous() if nb else value))
    return out


def policy_runner(policy: Callable | None) -> Callable | None:
    """The callable the engine runs at each step: the policy's tensor-level twin
    (:func:`rl.core.tensor_policy`: the same tensor calls without tensordict's per-call
    machinery) where it still does what the policy does, else the policy itself."""
    if policy is None:
        return None
    twin = tensor_policy(policy)
    return twin if twin is not None and twin.usable() else policy


def _set(td: TensorDictBase, key, value: torch.Tensor) -> None:
    """``td.set(key, value)`` for a value of the td's batch size (no checks for a plain
    TensorDict and a string key)."""
    if type(key) is str and type(td) is TensorDict:
        td._set_str(key, value, inplace=False, validated=True)
    else:
        td.set(key, value)


def _copy(done):
    """A copy of a step's done flags (a kernel may reuse its array at the next step)."""
    if type(done) is bool:
        return done
    return done.copy() if isinstance(done, np.ndarray) else done.clone()


def _allocate(
    bufs, next_td, sources: dict, reward_keys: set, presampled: set, kernel=None
) -> tuple:
    """The buffers of a rollout, once step 0 is known: the ``"next"`` ones of a kernel's
    TensorDict (``next_td``) and the root ones of ``sources`` (the root of step 0).

    Returns:
        ``(next_writes, next_keys, carry_keys, root_writes, root_carried, shared)``: the
        ``"next"`` entries the engine records, those the kernel writes, the entries
        carried into the next root, the root entries written at each step, the root
        entries filled from the previous ``"next"`` ones, and the ``"next"`` entries of
        ``next_td`` that are rows of buffers the kernel filled
        (:meth:`RolloutKernel.shared_next`): ``[(key, index in its views)]``, recorded by
        taking those buffers.
    """
    prefix = (slice(None),) * bufs.nb
    next_writes, shared = [], []
    if next_td is not None:
        found = kernel.shared_next() if kernel is not None else None
        row, index = (found[1][0], {k: i for i, k in enumerate(found[0])}) if found else ((), {})
        for key, value in flat_leaves(next_td).items():
            i = index.get(key)
            if i is not None and value is row[i]:
                bufs.next[key] = found[1].bufs[i]
                shared.append((key, i))
                continue
            buf = bufs.next[key] = bufs.like(value)
            next_writes.append((key, buf))
    recorded = {key for key, _ in next_writes} | {key for key, _ in shared}
    next_keys = [key for key in bufs.next if key not in recorded]
    carry_keys = [key for key in bufs.next if key not in reward_keys]
    carry_set = set(carry_keys)
    root_writes, root_carried = [], []
    for key, value in sources.items():
        if key == "_reset" or key in presampled:
            continue
        buf = bufs.root[key] = bufs.like(value)
        buf[(*prefix, 0)] = value
        (root_carried if key in carry_set else root_writes).append((key, buf))
    return next_writes, next_keys, carry_keys, root_writes, root_carried, shared


def _unshare(bufs, shared: list, next_writes: list, next_flat: dict, row: tuple, t: int) -> bool:
    """Moves the shared ``"next"`` entries (see :func:`_allocate`) whose value at step ``t``
    is not the kernel's own view to buffers of the engine's, which hold the kernel's rows
    of the earlier steps; returns whether any moved (a missing entry raises ``KeyError``)."""
    for key, i in shared:  # per step: no allocation while every entry is the kernel's own
        if next_flat[key] is not row[i]:
            break
    else:
        return False
    moved = [(key, i) for key, i in shared if next_flat[key] is not row[i]]
    prefix = (slice(None),) * bufs.nb
    for item in moved:
        key = item[0]
        value = next_flat[key]
        old, buf = bufs.next[key], bufs.like(value)
        if t:
            buf[(*prefix, slice(0, t))] = old[(*prefix, slice(0, t))]
        bufs.next[key] = buf
        next_writes.append((key, buf))
        shared.remove(item)
    return True


def _tensor_slots(runner, td, root_writes: list, root_arrays: list) -> list | None:
    """The outputs of a policy given as a tensor twin (``in_keys``, ``out_keys``,
    ``forward(*tensors) -> tensors``, not a module), recorded through numpy views of the root
    buffers, when from step 1 on the engine can call ``forward`` on the root's entries
    directly: a plain TensorDict root, and the twin writes exactly the root entries the
    rollout records at each step. ``None`` otherwise (the runner takes the TensorDict)."""
    if runner is None or isinstance(runner, torch.nn.Module):
        return None
    in_keys = getattr(runner, "in_keys", None)
    out_keys = getattr(runner, "out_keys", None)
    if in_keys is None or out_keys is None or not callable(getattr(runner, "forward", None)):
        return None
    if type(td) is not TensorDict or not all(type(key) is str for key in in_keys):
        return None
    if any(key not in td._tensordict for key in in_keys):
        return None
    arrays = {key: array for (key, _), array in zip(root_writes, root_arrays)}
    if set(out_keys) != set(arrays) or len(set(out_keys)) != len(out_keys):
        return None
    return [(key, arrays[key], td._tensordict[key].shape) for key in out_keys]


def _apply_rows(buf: torch.Tensor, patches: list, nb: int) -> None:
    """Writes the ``(t, rows, values)`` patches of kernel resets into the root buffer
    ``buf``: for a CPU buffer of one batch dim, one numpy scatter per buffer (each patch
    is a few rows of one step: one write each costs more than the rows)."""
    array = numpy_or_none(buf)
    if array is None or nb != 1:
        prefix = (slice(None),) * nb
        for t, rows, values in patches:
            if array is not None:
                array[(*prefix, t)][rows] = values
            else:
                view = buf[(*prefix, t)]
                view[rows] = values if isinstance(values, bool) else torch.as_tensor(values)
        return
    first = patches[0][2]  # one bool for every patch (reset done flags): no gather
    scalar = type(first) is bool and all(values is first for _, _, values in patches)
    envs = [np.asarray(rows) for _, rows, _ in patches]
    envs = [np.flatnonzero(rows) if rows.dtype == np.bool_ else rows for rows in envs]
    counts = [len(rows) for rows in envs]
    steps = np.repeat([t for t, _, _ in patches], counts)
    if scalar:
        array[np.concatenate(envs), steps] = first
    else:
        shape = array.shape[2:]
        parts = [np.asarray(v) for _, _, v in patches]
        if any(p.shape != (n, *shape) for p, n in zip(parts, counts)):  # values to broadcast
            parts = [np.broadcast_to(p, (n, *shape)) for p, n in zip(parts, counts)]
        array[np.concatenate(envs), steps] = np.concatenate(parts)


def _raise_shape(env: EnvBase, key, value: torch.Tensor, shape: torch.Size) -> None:
    """The error of a policy output whose shape changed after step 0 (named by key and,
    for an action, by its spec)."""
    where = f"action {key!r}" if key in env.action_keys else repr(key)
    spec = f" from action_spec {env.full_action_spec[key]!r}" if key in env.action_keys else ""
    raise ValueError(
        f"{where} has shape {tuple(value.shape)}, expected {tuple(shape)}{spec} (the policy's "
        "output at the first step)"
    )


def _begin(kernel: RolloutKernel):
    """The kernel's ``begin``, or ``None`` where it declares it has none
    (:attr:`RolloutKernel.uses_begin`): not called per step."""
    return kernel.begin if kernel.uses_begin else None


def declared_any_done(env: EnvBase, tensordict: TensorDictBase) -> bool | None:
    """What ``env.any_done`` answers at every step, for an env that declares it a constant
    (:attr:`EnvBase._constant_any_done`: an imagination env, never done); ``None`` for any
    other env, whose rollout reads each step's done flags.

    Asked once per rollout, on the done entries of ``tensordict`` (the root of step 0): a
    selection, so the ``"_reset"`` mask ``any_done`` may write stays out of the rollout. A
    rollout that uses the answer reads no done flag to decide whether to stop
    (``break_when_any_done``) or reset: no host read (a device sync per step, refused inside
    a CUDA graph capture). ``break_when_all_done`` still reads the flags (whether every
    sub-env has been done is not what ``any_done`` answers).

    Raises:
        TypeError: the declaring env's ``any_done`` returned something else than a bool.

    Examples:
        >>> from rl.envs import PendulumEnv
        >>> from rl.envs.engine import declared_any_done
        >>> env = PendulumEnv()
        >>> declared_any_done(env, env.reset()) is None  # an ordinary env: flags are read
        True
    """
    if not env._constant_any_done:
        return None
    answer = env.any_done(tensordict.select(*env.done_keys, strict=False))
    if type(answer) is not bool:
        raise TypeError(
            f"{type(env).__name__} declares a constant any_done (_constant_any_done), so "
            f"any_done must return a bool, got {type(answer).__name__}"
        )
    return answer


def _lean_loop(
    kernel,
    max_steps: int,
    break_any: bool,
    break_all: bool,
    resets: list,
    declared: bool | None,
    stop_when: Callable[[], bool] | None = None,
) -> int:
    """The time loop of a rollout without a root per step (no policy, no callback, a kernel
    that reads the presampled actions): the kernel's steps and resets only; returns the
    number of steps taken. ``declared``: the env's constant any_done
    (:func:`declared_any_done`), or ``None`` to read each step's done flags; ``stop_when``:
    see :func:`run_rollout`."""
    step = kernel.step
    begin = _begin(kernel)
    reset = kernel.reset
    last = max_steps - 1
    seen = None
    for t in range(max_steps):
        if begin is not None:
            begin(t, None)
        done = step(t, None)
        if stop_when is not None and t < last and stop_when():
            return t + 1
        if declared is None:
            any_done = done if done.__class__ is bool else bool(done.any())
        else:
            any_done = declared
        if not any_done:
            continue
        if break_any:
            return t + 1
        if break_all:
            seen = _copy(done) if seen is None else seen | done
            if seen if type(seen) is bool else bool(seen.all()):
                return t + 1
        if t < last:
            resets.append((t + 1, reset(t + 1, done, None)))
    return max_steps


def run_rollout(
    env: EnvBase,
    max_steps: int,
    tensordict: TensorDictBase,
    *,
    policy: Callable[[TensorDictBase], TensorDictBase] | None,
    callback: Callable[[EnvBase, TensorDictBase], Any] | None = None,
    break_when_any_done: bool,
    break_when_all_done: bool,
    kernel: RolloutKernel | None = None,
    stop_when: Callable[[], bool] | None = None,
) -> TensorDictBase:
    """Steps ``env`` up to ``max_steps`` times from the reset ``tensordict``.

    The one time loop of ``rl.envs``: :meth:`EnvBase.rollout`, every batched env and every
    collector run it. It records each step into ``[*B, T, ...]`` buffers allocated once;
    root entries that the next step carries over (observations, done flags) are filled
    from the ``"next"`` buffers in one copy at the end, except where a reset or the policy
    replaced them.

    Args:
        env: the env (its specs, done and reward keys).
        max_steps: ``T``.
        tensordict: the root of step 0 (already reset).
        policy: reads the root and writes the action; ``None`` draws uniform random
            actions from the action spec, all at once.
        callback: ``callback(env, tensordict)`` after each step (the root with its
            ``"next"``).
        break_when_any_done: stop after the first step where a sub-env is done.
        break_when_all_done: stop once every sub-env has been done at least once.
        kernel: the back-end (default: ``env.rollout_kernel()`` for a tensordict of the
            env's batch size, else :class:`EnvKernel`).
        stop_when: called with no argument after each step; the rollout ends after the
            step where it returns ``True`` (a collector's interruptor, see
            :class:`rl.collectors.Collector`). ``None`` (default): never asked, no cost
            per step.

    Returns:
        a TensorDict of batch size ``[*B, T']``, ``T' <= max_steps``.
    """
    batch_size = tensordict.batch_size
    nb = len(batch_size)
    prefix = (slice(None),) * nb
    if kernel is None:
        kernel = env.rollout_kernel() if batch_size == env.batch_size else EnvKernel(env)
    runner = policy_runner(policy)
    if runner is None and env._draws_actions_per_step():
        runner = env.rand_action  # a spec that changes at every step (action masks)
    done_key = env.done_key
    reward_keys = set(env.reward_keys)
    reward_drop = {(k,) if isinstance(k, str) else tuple(k) for k in reward_keys}
    bufs = RolloutBuffers(batch_size, max_steps, env.device)
    actions = None
    if runner is None:
        actions = presample_actions(env, max_steps, batch_size[: nb - len(env.batch_size)])
        for key, value in actions:
            bufs.root[key] = value
    eager = runner is not None or callback is not None or kernel.reads_root
    td = tensordict
    if runner is not None:
        out = runner(td)
        if out is not None:
            td = out
        if not kernel.accepts(td):  # before the env moved
            kernel = EnvKernel(env)
    elif eager:
        for key, value in actions:
            td.set(key, value[(*prefix, 0)])
    nested = nested_batch_dims(td, nb) if eager else {}
    stops = break_when_any_done or break_when_all_done
    first = kernel.start(bufs, td, actions, eager=eager, stops=stops)
    first = td if first is None else first  # the root of step 0 the buffers record
    presampled = {key for key, _ in actions} if actions is not None else set()
    root_writes: list = []  # (key, buf): root entries copied at every step (eager)
    root_carried: list = []  # (key, buf): root entries equal to the previous "next" ones
    next_writes: list = []  # (key, buf): "next" entries the engine records (from a TD)
    shared: list = []  # (key, i): "next" entries in the kernel's own buffers (shared_next)
    shared_views = None
    carried: dict = {}  # key -> the tensor object set in the root by the last carry
    overrides: list = []  # (t, key, value): carried root entries replaced (reset, policy)
    resets: list = []  # (t, {key: value}): a kernel's resets (no root per step)
    next_keys: list = []  # the "next" keys the kernel writes itself, in buffer order
    str_keys, root_arrays = False, None  # set at step 0
    write_root = write_next = None  # the StepWriters of the root / "next" entries (step 0)
    tensor_slots = None  # (key, numpy view): the outputs of a tensor twin, from step 1
    merge = isinstance(kernel, EnvKernel)
    lazy_keys: set = set()  # carried entries recorded without a root (a tensor twin)
    seen_done = None
    # non-tensor entries (strings, objects): kept per step in lists, stacked at the end
    nt_root: dict = {}  # key -> [value at each step]
    nt_next: dict = {}
    nt_carry: list = []  # the "next" ones the next root takes (all but rewards)
    step = kernel.step
    begin = _begin(kernel)
    steps = max_steps
    last = max_steps - 1
    declared = declared_any_done(env, tensordict)  # None: each step's flags are read
    if not eager:  # no root per step: the kernel reads the presampled actions
        layout = _allocate(bufs, None, dict(first.items(True, True)), reward_keys, presampled)
        root_writes, root_carried = layout[3], layout[4]
        steps = _lean_loop(
            kernel, max_steps, break_when_any_done, break_when_all_done, resets, declared, stop_when
        )
    for t in range(max_steps if eager else 0):
        if t > 0:
            if tensor_slots is not None:  # the policy's tensor twin, on the root's entries
                entries = td._tensordict
                outs = runner.forward(*[entries[key] for key in runner.in_keys])
                for (key, _, shape), value in zip(tensor_slots, outs):
                    if value.shape != shape:
                        _raise_shape(env, key, value, shape)
                    entries[key] = value
            elif runner is not None:
                out = runner(td)
                if out is not None:
                    td = out
            else:
                for key, value in actions:
                    _set(td, key, value[(*prefix, t)])
        root = td
        if begin is not None:
            begin(t, root)
        if tensor_slots is not None and t > 0:  # recorded while the kernel's workers step
            for (key, array, _), value in zip(tensor_slots, outs):
                if value.requires_grad or not value.is_cpu:
                    bufs.root[key][(*prefix, t)] = value
                else:
                    array[(*prefix, t)] = value.numpy()
        elif t > 0 and (root_writes or root_carried):
            # a plain TensorDict with string keys is read from its entry dict
            root_flat = td._tensordict if str_keys and type(td) is TensorDict else flat_leaves(td)
            for key, _ in root_carried:
                value = root_flat[key]
                if value is not carried[key]:
                    overrides.append((t, key, value.clone()))
            if root_writes:
                try:
                    srcs = [root_flat[key] for key, _ in root_writes]
                except KeyError as err:
                    raise KeyError(
                        f"the root entry {err.args[0]!r} written at the first step is missing "
                        f"at step {t} (a policy must write the same entries at every step)"
                    ) from None
                write_root(t, srcs)
        result = step(t, root)
        # a kernel returns its done flags (a bool, an array) or the step's TensorDict
        cls = result.__class__
        flags = cls is bool or cls is np.ndarray or cls is torch.Tensor
        next_td = None if flags else result
        if t == 0:
            # the buffers: known once the policy and the env wrote step 0
            if next_td is not None:
                nested.update({("next", *k): v for k, v in nested_batch_dims(next_td, nb).items()})
            layout = _allocate(bufs, next_td, flat_leaves(td), reward_keys, presampled, kernel)
            next_writes, next_keys, carry_keys, root_writes, root_carried, shared = layout
            shared_views = kernel.shared_next()[1] if shared else None
            write_root = StepWriter(root_writes, nb, max_steps, check=True)
            write_next = StepWriter(next_writes, nb, max_steps)
            kernel_views = StepViews([bufs.next[key] for key in next_keys], nb, max_steps)
            str_keys = all(type(key) is str for key, _ in root_carried + root_writes)
            str_keys = str_keys and all(type(key) is str for key in carry_keys)
            # numpy views of the CPU root buffers written at each step (None: torch writes)
            root_arrays = [numpy_or_none(buf) for _, buf in root_writes]
            if any(a is None for a in root_arrays) or not all(
                td.get(key).device.type == "cpu" for key, _ in root_writes
            ):
                root_arrays = None
            if next_td is None and str_keys and root_arrays is not None:
                tensor_slots = _tensor_slots(runner, td, root_writes, root_arrays)
            if tensor_slots is not None and kernel.root_inputs is not None:
                # only what the twin and the kernel read lives in the root; the other
                # carried entries are filled at the end, as in a rollout without a policy
                live = {*runner.in_keys, *kernel.root_inputs}
                lazy_keys = {key for key in carry_keys if key not in live}
                carry_keys = [key for key in carry_keys if key in live]
            # the kernel's "next" views the next root takes (those it writes itself)
            carry_views = StepViews([bufs.next[key] for key in carry_keys], nb, max_steps)
        if t == 0 and next_td is not None:
            nt_root = {key: [] for key in non_tensor_keys(td)}
            nt_next = {key: [] for key in non_tensor_keys(next_td)}
            nt_carry = [key for key in nt_next if key not in reward_keys]
        if nt_root or nt_next:
            for key, values in nt_root.items():
                values.append(td.get(key))
            for key, values in nt_next.items():
                values.append(next_td.get(key))
        if next_td is not None:
            next_flat = flat_leaves(next_td)
            try:
                srcs = [next_flat[key] for key, _ in next_writes]
                moved = shared and _unshare(
                    bufs, shared, next_writes, next_flat, shared_views[t], t
                )
            except KeyError:  # the step left out an entry step 0 had (a done flag)
                kernel.completed(next_td)
                next_flat = flat_leaves(next_td)
                srcs = [next_flat[key] for key, _ in next_writes]
                moved = shared and _unshare(
                    bufs, shared, next_writes, next_flat, shared_views[t], t
                )
            if moved:  # entries a transform replaced from this step on: copied from now
                write_next = StepWriter(next_writes, nb, max_steps)
                srcs = [next_flat[key] for key, _ in next_writes]
            write_next(t, srcs)
            done = next_flat[done_key]
        else:
            done = result
            next_flat = None  # the carried entries come from carry_views
        if callback is not None:
            if next_td is None:
                next_td = TensorDict({}, batch_size=batch_size, device=env.device)
                for key, value in zip(next_keys, kernel_views[t]):
                    next_td.set(key, value)
            td.set("next", next_td)
            callback(env, td)
            td.del_("next")
        if declared is None:
            any_done = done if done.__class__ is bool else bool(done.any())
        else:
            any_done = declared
        if any_done and break_when_any_done:
            steps = t + 1
            break
        if break_when_all_done:
            seen_done = _copy(done) if seen_done is None else seen_done | done
            if seen_done if type(seen_done) is bool else bool(seen_done.all()):
                steps = t + 1
                break
        if t == last:
            break
        if stop_when is not None and stop_when():
            steps = t + 1
            break
        # the next root: the step's "next" entries (but the rewards) over this root
        entries = None
        if merge and type(td) is TensorDict and type(next_td) is TensorDict:
            # an env's own outputs: merged as step_mdp does (keys may vary by step)
            entries = _merge_plain(next_td, td, reward_drop, set(), set(), ())
        if entries is not None:
            td = TensorDict._new_unsafe(
                entries, batch_size=td.batch_size, device=td.device, nested=False
            )
            carried = {key: next_flat[key] for key in carry_keys}
        else:
            entries = td._tensordict if str_keys and type(td) is TensorDict else None
            values = carry_views[t] if next_flat is None else [next_flat[key] for key in carry_keys]
            for key, value in zip(carry_keys, values):
                if entries is not None:  # a view of a buffer of the td's batch size
                    entries[key] = value
                else:
                    _set(td, key, value)
                carried[key] = value
        for key in nt_carry:
            td.set(key, next_td.get(key))
        if any_done:
            reset = kernel.reset(t + 1, done, td)
            if reset.__class__ is not dict and isinstance(reset, TensorDictBase):
                td = reset
            else:
                later = {}
                entries = td._tensordict if str_keys and type(td) is TensorDict else None
                for key, value in reset.items():
                    if key in lazy_keys:
                        later[key] = value
                        continue
                    if entries is not None:
                        value = entries[key] = patched(entries[key], value)
                    else:
                        value = patched(td.get(key), value)  # a new tensor: recorded as it is
                        _set(td, key, value)
                    if key in carried:
                        overrides.append((t + 1, key, value))
                        carried[key] = value
                if later:
                    resets.append((t + 1, later))
            if tensor_slots is None:
                for key, _ in root_carried:
                    value = td.get(key)
                    if value is not carried[key]:
                        overrides.append((t + 1, key, value.clone()))
                        carried[key] = value
    kernel.finish(steps)
    if not eager:  # the root entries no step changes (a rollout without a root per step)
        for _, buf in root_writes:
            if steps > 1:
                buf[(*prefix, slice(1, steps))] = buf[(*prefix, slice(0, 1))]
    for key, buf in root_carried:
        if steps > 1:
            buf[(*prefix, slice(1, steps))] = bufs.next[key][(*prefix, slice(0, steps - 1))]
    arrays: dict = {}  # numpy views of CPU root buffers (a row write costs less there)
    patches: dict = {}  # key -> [(t, rows, values)]: the (rows, values) of kernel resets
    for t, entries in resets:  # the kernel's resets of a rollout without a root per step
        if t < steps:
            for key, value in entries.items():
                if type(value) is tuple:
                    patches.setdefault(key, []).append((t, *value))
                else:
                    overrides.append((t, key, value))
    for key, rows in patches.items():  # before the whole-value overrides (made later)
        _apply_rows(bufs.root[key], rows, nb)
    for t, key, value in overrides:  # whole values (a reset's (rows, values) went above)
        if t >= steps:
            continue
        array = arrays.get(key)
        if array is None:
            array = arrays[key] = numpy_or_none(bufs.root[key])
        if array is not None and value.device.type == "cpu" and not value.requires_grad:
            array[(*prefix, t)] = value.numpy()
        else:
            bufs.root[key][(*prefix, t)] = value
    out = bufs.output(steps)
    if nested:
        restore_nested_batch(out, nested, nb)
    for target, recorded in ((out, nt_root), (out.get("next"), nt_next)):
        for key, values in recorded.items():
            target.set(key, torch.stack(values[:steps], dim=nb))
    return kernel.output(out)
