"""``Evaluator``: evaluation rollouts of a policy, blocking or in the background.

Each evaluation round collects ``num_trajectories`` whole episodes of the eval env with a
:class:`~rl.collectors.Collector` (its preallocated rollout engine) and reduces them to
TorchRL's metrics (``"<prefix>/reward"``, ``"<prefix>/reward_std"``,
``"<prefix>/num_episodes"``, ``"<prefix>/episode_length"``, ``"<prefix>/fps"``,
``"<prefix>/step"``). The ``"thread"`` back-end runs the background rounds in one daemon
thread of this process; the ``"process"`` back-end runs the rollout in a worker process
(a one-worker :class:`~rl.collectors.MultiSyncCollector`).
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

import rl.collectors as _collectors_pkg
from rl.core import ExplorationType
from rl.envs import EnvBase
from rl.envs.transforms import Compose, StepCounter, TransformedEnv, VecNorm, VecNormV2

from ._common import load_weights
from ._multi import MultiSyncCollector
from ._single import Collector
from ._trajs import TrajectoryAssembler

logger = logging.getLogger(__name__)

NestedKey = str | tuple[str, ...]

_BACKENDS = ("thread", "process")
_BUSY_POLICIES = ("skip", "error", "queue")
_EPISODE_REWARD_KEY = ("next", "episode_reward")
_STEP_COUNT_KEY = ("next", "step_count")
# the longest the background loop (and wait()) sleeps before checking the stop flag
_IDLE_WAKE_S = 1.0


class Evaluator:
    """Evaluates a policy on an eval env, blocking (:meth:`evaluate`) or in the
    background (:meth:`trigger_eval`, then :meth:`poll` / :meth:`wait`), as TorchRL's.

    Each evaluation collects ``num_trajectories`` complete episodes (in the order they
    finish; a batched env runs its sub-envs together) with the policy under
    ``exploration_type`` and returns a dict of metrics, each name prefixed with
    ``log_prefix``:

    - ``"eval/reward"``: mean episode return (the last ``("next", "episode_reward")``
      of each episode when the env has a ``RewardSum``, else the sum of
      ``reward_keys`` over the episode); ``"eval/reward_std"`` its standard deviation
      (0 for one episode);
    - ``"eval/num_episodes"``, ``"eval/episode_length"`` (mean; the last
      ``("next", "step_count")`` when present, else the number of steps);
    - ``"eval/fps"`` (env steps per second of the round), ``"eval/step"`` (the step the
      evaluation was asked for);
    - ``"eval/<name>"`` for each entry ``metrics_fn(trajectories)`` returns.

    Weights: ``weights`` (a module, or a TensorDict of its parameters) is copied (to the
    CPU) when :meth:`evaluate` / :meth:`trigger_eval` is called and loaded into the eval
    policy, in place, when the round starts, so a background evaluation uses the weights
    of trigger time even if training changes them meanwhile. Without ``weights`` the
    eval policy is used as it is when the round runs.

    Rounds never overlap: :meth:`evaluate` waits for a background round in progress.
    A background round that raises makes the next :meth:`poll` / :meth:`wait` raise a
    ``RuntimeError`` carrying the error. :meth:`shutdown` stops a round in progress
    between two collected batches, joins the thread and closes the env (and the worker
    process).

    Args:
        env: an :class:`~rl.envs.EnvBase`, or a callable returning one. With the
            ``"thread"`` back-end and a ``policy_factory``, a callable is called (and
            ``policy_factory(env)`` too) in the thread of the first evaluation, which
            suits an env on a dedicated device; with ``policy``, it is called here. The
            ``"process"`` back-end needs a callable (called in the worker process).
        policy: the evaluation policy (not with ``policy_factory``).

    Keyword Args:
        policy_factory: builds the policy: ``policy_factory(env)`` (``"thread"``), or
            ``policy_factory()`` in the worker process (``"process"``, as TorchRL).
        num_trajectories: complete episodes per evaluation (default 10).
        max_steps: episodes are truncated after this many steps (a ``StepCounter``
            appended to the env, as the collector's ``max_frames_per_traj``). Ignored,
            in both back-ends, when the env already has a ``"step_count"`` entry (e.g.
            its own ``StepCounter``, whose limit then applies). ``None``: episodes run
            until done.
        frames_per_batch: env steps per collected batch (internal; default
            ``max_steps``, or 1000). A shutdown takes effect between two batches.
        collector_cls: :class:`~rl.collectors.Collector` (default) or a subclass, or
            its name in :mod:`rl.collectors` (``"thread"`` back-end).
        collector_kwargs: extra arguments of the collector (``traj_format``:
            ``"padded"``, the default, or ``"cat"``: the layout ``metrics_fn`` gets).
        weight_sync_schemes: ``{model_id: WeightSyncScheme}``: the rollout runs in a
            worker process (as with ``backend="process"``) and the weights are sent
            through these schemes.
        log_prefix: prefix of the metric names (default ``"eval"``).
        reward_keys: the reward entry summed when the env has no ``RewardSum``.
        done_keys: TorchRL's argument, kept (episodes end at any done-like flag).
        device: where the eval policy's weights are loaded (default: where its
            parameters are).
        exploration_type: exploration type of the rollouts (default
            ``ExplorationType.DETERMINISTIC``).
        metrics_fn: ``(trajectories) -> {name: value}``, called on the collected
            episodes of each round.
        dump_video: after each round, call ``dump`` on the env's transforms that have
            one (e.g. a ``VideoRecorder``), with ``step=`` when they accept it
            (``"thread"`` back-end; the process back-end does not dump).
        on_result: called with a flat TensorDict of the metrics after each round (in
            the evaluator's thread for background rounds); its errors are logged.
        busy_policy: what :meth:`trigger_eval` does while an evaluation is pending:
            ``"skip"`` (default: returns ``False``), ``"error"`` (raises a
            ``RuntimeError``) or ``"queue"`` (runs it after the current one; each
            queued request holds a copy of its weights).
        backend: ``"thread"`` (default) or ``"process"``. TorchRL's ``"ray"`` is
            refused (``NotImplementedError``).
        init_fn: called first in the worker process (``"process"``).
        num_gpus, ray_kwargs: TorchRL's Ray options, accepted for its signature; the
            Ray back-end is not available here.

    Raises:
        ValueError: an unknown ``backend`` or ``busy_policy``; neither or both of
            ``policy`` / ``policy_factory``; ``"process"`` without a callable ``env`` or
            without ``policy_factory``.
        NotImplementedError: ``backend="ray"``.
        TypeError: ``collector_cls`` is not a :class:`~rl.collectors.Collector` class.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.collectors import Evaluator
        >>> from rl.envs import GymEnv
        >>> env = GymEnv("Pendulum-v1")
        >>> policy = TensorDictModule(
        ...     torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"]
        ... )
        >>> evaluator = Evaluator(env, policy, num_trajectories=2, max_steps=20)
        >>> metrics = evaluator.evaluate(step=0)
        >>> metrics["eval/num_episodes"], metrics["eval/episode_length"]
        (2, 20.0)
        >>> evaluator.trigger_eval(policy, step=1)
        True
        >>> evaluator.wait(timeout=60)["eval/step"]
        1
        >>> evaluator.shutdown()
    """

    def __init__(
        self,
        env: EnvBase | Callable[[], EnvBase],
        policy: Callable | None = None,
        *,
        policy_factory: Callable[..., Callable] | None = None,
        num_trajectories: int = 10,
        max_steps: int | None = None,
        frames_per_batch: int | None = None,
        collector_cls: type | str | None = None,
        collector_kwargs: dict | None = None,
        weight_sync_schemes: dict[str, Any] | None = None,
        log_prefix: str = "eval",
        reward_keys: NestedKey = ("next", "reward"),
        done_keys: NestedKey = ("next", "done"),
        device: torch.device | str | None = None,
        exploration_type: ExplorationType = ExplorationType.DETERMINISTIC,
        metrics_fn: Callable[[TensorDictBase], dict[str, float]] | None = None,
        dump_video: bool = True,
        on_result: Callable[[TensorDictBase], None] | None = None,
        busy_policy: str = "skip",
        backend: str = "thread",
        init_fn: Callable[[], None] | None = None,
        num_gpus: int = 1,
        ray_kwargs: dict | None = None,
    ) -> None:
        if backend == "ray":
            raise NotImplementedError(
                "rl's Evaluator has no 'ray' back-end (for evaluation in a Ray actor use "
                "rl.collectors.distributed.RayEvalWorker); supported back-ends: 'thread' and "
                "'process'"
            )
        if backend not in _BACKENDS:
            raise ValueError(f"Unknown backend {backend!r}. Choose 'thread' or 'process'.")
        if busy_policy not in _BUSY_POLICIES:
            raise ValueError(
                f"Unknown busy_policy {busy_policy!r}. Choose 'skip', 'error' or 'queue'."
            )
        if policy is not None and policy_factory is not None:
            raise ValueError("Provide either `policy` or `policy_factory`, not both.")
        if policy is None and policy_factory is None:
            raise ValueError("Either `policy` or `policy_factory` must be provided.")
        if isinstance(num_trajectories, bool) or not isinstance(num_trajectories, int):
            raise TypeError(f"num_trajectories must be a positive int, got {num_trajectories!r}")
        if num_trajectories < 1:
            raise ValueError(f"num_trajectories must be a positive int, got {num_trajectories}")
        in_process = backend == "thread" and weight_sync_schemes is None
        env_is_factory = callable(env) and not isinstance(env, EnvBase)
        if not in_process:
            what = "backend='process'" if backend == "process" else "weight_sync_schemes"
            if not env_is_factory:
                raise ValueError(
                    f"{what} builds the env in a worker process: `env` must be a callable "
                    f"returning an env, got {type(env).__name__}"
                )
            if policy_factory is None:
                raise ValueError(
                    f"{what} builds the policy in a worker process: pass `policy_factory` "
                    "(a callable returning the policy) instead of `policy`"
                )
        self._done_keys = done_keys
        self._backend = backend
        runner = _Runner(
            env=env,
            policy=policy,
            policy_factory=policy_factory,
            in_process=in_process,
            num_trajectories=num_trajectories,
            max_steps=max_steps,
            frames_per_batch=frames_per_batch,
            collector_cls=collector_cls,
            collector_kwargs=collector_kwargs,
            weight_sync_schemes=weight_sync_schemes,
            device=device,
            exploration_type=exploration_type,
            init_fn=init_fn,
        )
        # The thread, its queues and the runner live in a separate object that holds
        # only a weak reference to this one: an Evaluator dropped without shutdown() is
        # collected, and its finalizer stops the thread and closes the env / worker.
        self._impl = _Backend(
            runner,
            owner=weakref.ref(self),
            log_prefix=log_prefix,
            reward_keys=reward_keys,
            metrics_fn=metrics_fn,
            on_result=on_result,
            dump_video=bool(dump_video),
            busy_policy=busy_policy,
        )
        self._finalizer = weakref.finalize(self, self._impl.shutdown, 2.0)

    # ---------------------------------------------------------------------- blocking
    def evaluate(
        self,
        weights: TensorDictBase | nn.Module | None = None,
        step: int | None = None,
        *,
        weights_dict: dict[str, TensorDictBase | nn.Module] | None = None,
    ) -> dict[str, Any]:
        """Runs one evaluation now and returns its metrics.

        Args:
            weights: the policy's weights to evaluate with (a module or a TensorDict of
                its parameters); ``None``: the eval policy as it is.
            step: the step reported as ``"<prefix>/step"``; ``None``: an internal
                counter (0, 1, ...).

        Keyword Args:
            weights_dict: ``{model_id: weights}`` (``"policy"``, or a model of the
                collector such as ``"env.transform[0]"``); ``weights`` fills
                ``"policy"`` when it is not there.

        Returns:
            the metrics (see the class docstring).
        """
        return self._impl.evaluate(_prepare_weights(weights, weights_dict), step)

    # -------------------------------------------------------------------- background
    def trigger_eval(
        self,
        weights: TensorDictBase | nn.Module | None = None,
        step: int | None = None,
        *,
        weights_dict: dict[str, TensorDictBase | nn.Module] | None = None,
    ) -> bool:
        """Starts an evaluation in the background (arguments as :meth:`evaluate`; the
        weights are copied now).

        Returns:
            ``True`` when the request was accepted, ``False`` when it was skipped
            (another evaluation pending and ``busy_policy="skip"``).

        Raises:
            RuntimeError: an evaluation is pending and ``busy_policy="error"``, or the
                evaluator was shut down.
        """
        self._impl.check_open()
        return self._impl.submit(_prepare_weights(weights, weights_dict), step)

    def poll(self, timeout: float = 0) -> dict[str, Any] | None:
        """The oldest finished background result, or ``None`` if none is ready within
        ``timeout`` seconds (``0``: do not wait).

        Raises:
            RuntimeError: that background evaluation failed (its error chained).
        """
        return self._impl.take(timeout, wait_for_pending=timeout > 0)

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        """Waits (at most ``timeout`` seconds; ``None``: as long as it takes) for the
        oldest background result. Returns ``None`` at once when nothing is pending or
        ready, and after ``timeout`` when the evaluation has not finished.

        Raises:
            RuntimeError: that background evaluation failed (its error chained).
        """
        return self._impl.take(timeout, wait_for_pending=True)

    @property
    def pending(self) -> bool:
        """Whether a background evaluation runs or is queued."""
        return self._impl.pending

    # --------------------------------------------------------------------- lifecycle
    def shutdown(self, timeout: float = 5.0) -> None:
        """Stops the background thread (a round in progress stops after its current
        batch), joins it (at most ``timeout`` seconds), drops queued requests and closes
        the env (or the worker process). Idempotent. An Evaluator that is garbage
        collected without it is shut down by its finalizer."""
        self._impl.shutdown(timeout)

    def state_dict(self) -> dict[str, Any]:
        """The evaluator's progress (``{"step_counter": int}``).

        Raises:
            RuntimeError: evaluation work is pending, queued, or unread.
        """
        return self._impl.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`.

        Raises:
            RuntimeError: evaluation work is pending, queued, or unread.
            TypeError: ``step_counter`` is not an int.
        """
        self._impl.load_state_dict(state_dict)

    @staticmethod
    def extract_weights(policy: nn.Module) -> TensorDictBase:
        """A detached CPU copy of ``policy``'s parameters and buffers (safe to hand to
        another thread)."""
        return TensorDict.from_module(policy).data.detach().clone().cpu()


def _copy_weights(weights: Any, name: str) -> TensorDictBase:
    if isinstance(weights, nn.Module):
        return Evaluator.extract_weights(weights)
    if isinstance(weights, TensorDictBase):
        return weights.detach().clone().cpu()
    raise TypeError(
        f"{name} must be an nn.Module or a TensorDict of its parameters, got "
        f"{type(weights).__name__}"
    )


def _prepare_weights(
    weights: Any, weights_dict: Mapping[str, Any] | None
) -> dict[str, TensorDictBase] | None:
    out = {
        model_id: _copy_weights(w, f"weights_dict[{model_id!r}]")
        for model_id, w in (weights_dict or {}).items()
    }
    if weights is not None and "policy" not in out:
        out["policy"] = _copy_weights(weights, "weights")
    return out or None


class _Backend:
    """The state of an :class:`Evaluator`: its runner, the background thread and its
    request / result queues. It holds the Evaluator only weakly (the thread runs this
    object's loop), so dropping the Evaluator ends the thread: the finalizer sets the
    stop flag, and the loop, which wakes at least every ``_IDLE_WAKE_S`` seconds, also
    quits when the Evaluator is gone."""

    def __init__(
        self,
        runner: _Runner,
        *,
        owner: weakref.ref,
        log_prefix: str,
        reward_keys: NestedKey,
        metrics_fn: Callable | None,
        on_result: Callable | None,
        dump_video: bool,
        busy_policy: str,
    ) -> None:
        self.runner = runner
        self.owner = owner
        self.log_prefix = log_prefix
        self.reward_keys = reward_keys
        self.metrics_fn = metrics_fn
        self.on_result = on_result
        self.dump_video = dump_video
        self.busy_policy = busy_policy
        self.step_counter = 0
        self.thread: threading.Thread | None = None
        # background state and the step counter, guarded by cond's lock
        self.cond = threading.Condition()
        self.requests: deque[tuple[dict[str, TensorDictBase] | None, int]] = deque()
        self.results: deque[dict[str, Any] | BaseException] = deque()
        self.running = False
        self.stop = runner.stop
        # one round at a time (a blocking evaluate and a background round share the env)
        self.run_lock = threading.Lock()

    # ----------------------------------------------------------------------- requests
    def check_open(self) -> None:
        if self.stop.is_set():
            raise RuntimeError("the Evaluator was shut down")

    def next_step(self, step: int | None) -> int:
        with self.cond:
            if step is not None:
                return step
            step, self.step_counter = self.step_counter, self.step_counter + 1
            return step

    def evaluate(self, weights: dict[str, TensorDictBase] | None, step: int | None) -> dict:
        step = self.next_step(step)
        raw = self.run_round(weights, step)
        if raw is None:
            raise RuntimeError("the Evaluator was shut down")
        result = self.format(raw, step)
        self.call_on_result(result)
        return result

    def submit(self, weights: dict[str, TensorDictBase] | None, step: int | None) -> bool:
        with self.cond:
            self.check_open()
            busy = self.running or bool(self.requests)
            if busy and self.busy_policy == "error":
                raise RuntimeError(
                    "Evaluation already pending. Wait for completion or set "
                    "busy_policy='skip' or busy_policy='queue'."
                )
            if busy and self.busy_policy == "skip":
                return False
            self.requests.append((weights, self.next_step(step)))
            self.cond.notify_all()
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self.loop, name="rl-evaluator", daemon=True)
                self.thread.start()
        return True

    @property
    def pending(self) -> bool:
        with self.cond:
            return self.running or bool(self.requests)

    def state_dict(self) -> dict[str, Any]:
        with self.cond:
            self._check_quiet("Evaluator checkpointing requires no")
            return {"step_counter": self.step_counter}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        with self.cond:
            self._check_quiet("Evaluator state cannot be restored with")
            counter = state_dict.get("step_counter", 0)
            if isinstance(counter, torch.Tensor):
                counter = counter.item()
            if isinstance(counter, bool) or not isinstance(counter, int):
                raise TypeError(f"step_counter must be an int, got {counter!r}")
            self.step_counter = counter

    def _check_quiet(self, prefix: str) -> None:
        if self.running or self.requests or self.results:
            raise RuntimeError(f"{prefix} pending, queued, or unread evaluation results.")

    # ------------------------------------------------------------------------ rounds
    def run_round(self, weights: dict[str, TensorDictBase] | None, step: int) -> dict | None:
        with self.run_lock:
            if self.stop.is_set():
                return None
            # building the collector (spawning the worker) and loading the weights are
            # not part of the rollout: the fps timer starts after them, as TorchRL's
            self.runner.prepare(weights)
            start = time.perf_counter()
            trajectories = self.runner.rollout()
            elapsed = time.perf_counter() - start
            if trajectories is None:  # stopped by shutdown
                return None
            raw = episode_metrics(trajectories, self.reward_keys, self.metrics_fn)
            if elapsed > 0:
                raw["fps"] = raw["frame_count"] / elapsed
            if self.dump_video:
                self.runner.dump_video(step)
            return raw

    def _should_quit(self) -> bool:
        return self.stop.is_set() or self.owner() is None

    def loop(self) -> None:
        try:
            while True:
                with self.cond:
                    while not self.requests and not self._should_quit():
                        self.cond.wait(_IDLE_WAKE_S)
                    if self._should_quit():
                        return
                    weights, step = self.requests.popleft()
                    self.running = True
                outcome: dict[str, Any] | BaseException | None = None
                try:
                    raw = self.run_round(weights, step)
                    outcome = None if raw is None else self.format(raw, step)
                except BaseException as err:  # handed to poll / wait
                    outcome = err
                try:
                    if isinstance(outcome, dict):
                        self.call_on_result(outcome)
                finally:  # whatever happens, wait() / pending see the round over
                    with self.cond:
                        self.running = False
                        if outcome is not None:
                            self.results.append(outcome)
                        if not isinstance(outcome, Exception | dict | None):
                            # the thread ends: the queued requests will not run
                            for _ in self.requests:
                                self.results.append(
                                    RuntimeError(
                                        f"not run: the evaluator thread stopped on {outcome!r}"
                                    )
                                )
                            self.requests.clear()
                            self.thread = None  # the next trigger_eval starts a new one
                        self.cond.notify_all()
                if not isinstance(outcome, Exception | dict | None):
                    logger.error("Evaluator thread stopped on %r", outcome)
                    return  # a new trigger_eval starts a new thread
        finally:
            if self._should_quit():
                self.stop.set()
                self._close_runner(timeout=None)

    def take(self, timeout: float | None, wait_for_pending: bool) -> dict[str, Any] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while not self.results and wait_for_pending:
                thread_alive = self.thread is not None and self.thread.is_alive()
                if not (self.running or (self.requests and thread_alive)):
                    break
                left = _IDLE_WAKE_S if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(min(left, _IDLE_WAKE_S))
            if not self.results:
                return None
            outcome = self.results.popleft()
        if isinstance(outcome, BaseException):
            raise RuntimeError(f"the background evaluation failed: {outcome!r}") from outcome
        return outcome

    def format(self, raw: dict[str, Any], step: int) -> dict[str, Any]:
        prefix = self.log_prefix
        out = {
            f"{prefix}/{key}": raw[key]
            for key in ("reward", "reward_std", "num_episodes", "episode_length", "fps")
            if key in raw
        }
        out[f"{prefix}/step"] = step
        for key, value in raw.get("custom", {}).items():
            out[f"{prefix}/{key}"] = value
        return out

    def call_on_result(self, result: dict[str, Any]) -> None:
        if self.on_result is None:
            return
        data = {
            key: value.detach().cpu() if isinstance(value, torch.Tensor) else torch.as_tensor(value)
            for key, value in result.items()
            if value is not None
        }
        try:
            self.on_result(TensorDict(data, batch_size=[]))
        except Exception:
            logger.warning("Evaluator on_result callback failed", exc_info=True)

    # --------------------------------------------------------------------- lifecycle
    def shutdown(self, timeout: float) -> None:
        self.stop.set()
        with self.cond:
            self.requests.clear()
            self.cond.notify_all()
        thread = self.thread
        if thread is threading.current_thread():
            return  # called from the loop (e.g. a finalizer run by gc there): it closes
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                logger.warning(
                    "Evaluator thread still runs %.1f s after shutdown (an env step that "
                    "does not return?); it closes its env when that step returns",
                    timeout,
                )
                return
        with self.cond:
            self.running = False
        self._close_runner(timeout)

    def _close_runner(self, timeout: float | None) -> None:
        # a blocking evaluate() in another thread stops after its current batch too
        if not self.run_lock.acquire(timeout=-1 if timeout is None else timeout):
            logger.warning("Evaluator: an evaluation still runs after shutdown; env left open")
            return
        try:
            self.runner.close()
        finally:
            self.run_lock.release()


def episode_metrics(
    trajectories: TensorDictBase,
    reward_key: NestedKey = ("next", "reward"),
    metrics_fn: Callable[[TensorDictBase], Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Episode statistics of a batch of whole trajectories.

    Args:
        trajectories: ``[N, T_max]`` padded with a ``("collector", "mask")`` of the valid
            steps, or ``[sum T]`` flat with ``("collector", "traj_ids")``, or (with
            neither) one trajectory ``[T]``.
        reward_key: the reward summed over each episode when there is no
            ``("next", "episode_reward")`` (a ``RewardSum``), whose last value is the
            episode's return otherwise.
        metrics_fn: its ``{name: value}`` for ``trajectories`` go under ``"custom"``.

    Returns:
        ``{"reward", "reward_std", "num_episodes", "episode_length", "frame_count"}``
        (the mean return, its standard deviation, the number of episodes, the mean
        length (the last ``("next", "step_count")`` when present) and the number of
        steps), plus ``"custom"`` with ``metrics_fn``. Without episodes the means are
        ``nan``.
    """
    mask = trajectories.get(("collector", "mask"), None)
    if mask is not None:
        mask = mask.reshape(trajectories.shape[0], -1)
        episodes = [trajectories[i, : int(mask[i].sum())] for i in range(trajectories.shape[0])]
    else:
        ids = trajectories.get(("collector", "traj_ids"), None)
        if ids is None:
            episodes = [trajectories.reshape(-1)]
        else:
            ids = ids.reshape(-1)
            flat = trajectories.reshape(-1)
            episodes = [flat[ids == traj] for traj in torch.unique_consecutive(ids)]
    returns, lengths, frames = [], [], 0
    for episode in episodes:
        length = episode.shape[0]
        if length == 0:
            continue
        frames += length
        episode_reward = episode.get(_EPISODE_REWARD_KEY, None)
        if episode_reward is not None:
            returns.append(float(episode_reward[length - 1].sum()))
        else:
            returns.append(float(episode.get(reward_key).sum()))
        step_count = episode.get(_STEP_COUNT_KEY, None)
        lengths.append(
            float(step_count[length - 1].sum()) if step_count is not None else float(length)
        )
    n = len(returns)
    values = torch.tensor(returns, dtype=torch.float64)
    out: dict[str, Any] = {
        "reward": values.mean().item() if n else float("nan"),
        "reward_std": (values.std().item() if n > 1 else 0.0) if n else float("nan"),
        "num_episodes": n,
        "episode_length": sum(lengths) / n if n else float("nan"),
        "frame_count": frames,
    }
    if metrics_fn is not None:
        out["custom"] = dict(metrics_fn(trajectories))
    return out


def freeze_vecnorm(env: EnvBase) -> EnvBase:
    """Freezes the ``VecNorm`` / ``VecNormV2`` transforms of ``env`` (an eval env uses
    the statistics it is given and does not update them); returns ``env``."""
    if isinstance(env, TransformedEnv):
        stack = [env.transform]
        while stack:
            transform = stack.pop()
            if isinstance(transform, VecNorm | VecNormV2):
                transform.freeze()
            elif isinstance(transform, Compose):
                stack.extend(transform)
        freeze_vecnorm(env.base_env)
    return env


class _FrozenEnvFactory:
    """``factory()`` with its VecNorm transforms frozen and, when ``max_steps`` is set
    and the env does not count steps already, a ``StepCounter(max_steps)`` appended: the
    thread back-end's rule for ``max_steps``, applied in the worker process (picklable
    where ``factory`` is)."""

    def __init__(self, factory: Callable[[], EnvBase], max_steps: int | None = None) -> None:
        self.factory = factory
        self.max_steps = max_steps

    def __call__(self, **kwargs) -> EnvBase:
        env = freeze_vecnorm(self.factory(**kwargs))
        if self.max_steps is not None and self.max_steps > 0 and not _counts_steps(env):
            env = TransformedEnv(env, StepCounter(max_steps=self.max_steps))
        return env


def _collector_class(cls: type | str | None) -> type:
    if cls is None:
        return Collector
    if isinstance(cls, str):
        resolved = getattr(_collectors_pkg, cls, None)
        if resolved is None:
            raise ValueError(f"rl.collectors has no collector named {cls!r}")
        cls = resolved
    if not (isinstance(cls, type) and issubclass(cls, Collector)):
        raise TypeError(
            f"the Evaluator's collector_cls must be Collector or a subclass of it, got {cls!r}"
        )
    return cls


def _counts_steps(env: EnvBase) -> bool:
    return any(
        "step_count" in (key if isinstance(key, tuple) else (key,))
        for key in env.output_spec.keys(True, True)
    )


class _Runner:
    """The env, policy and collector of the evaluation rounds (built on first use)."""

    def __init__(
        self,
        *,
        env,
        policy,
        policy_factory,
        in_process: bool,
        num_trajectories: int,
        max_steps: int | None,
        frames_per_batch: int | None,
        collector_cls,
        collector_kwargs,
        weight_sync_schemes,
        device,
        exploration_type,
        init_fn,
    ) -> None:
        kwargs = dict(collector_kwargs or {})
        for name in ("trajs_per_batch", "total_frames", "frames_per_batch"):
            if name in kwargs:
                raise ValueError(
                    f"collector_kwargs may not set {name!r}: the Evaluator sets it "
                    "(num_trajectories, frames_per_batch)"
                )
        self.traj_format = kwargs.pop("traj_format", None) or "padded"
        if self.traj_format not in ("padded", "cat"):
            raise ValueError(f"traj_format must be 'padded' or 'cat', got {self.traj_format!r}")
        self.collector_kwargs = kwargs
        self.in_process = in_process
        self.collector_cls = _collector_class(collector_cls) if in_process else None
        self.num_trajectories = num_trajectories
        self.max_steps = max_steps
        self.frames_per_batch = frames_per_batch or max_steps or 1000
        self.weight_sync_schemes = weight_sync_schemes
        self.exploration_type = exploration_type
        self.init_fn = init_fn
        self.stop = threading.Event()
        self.device = None if device is None else torch.device(device)
        self.collector = None
        self.env = self.policy = None
        self.env_factory = self.policy_factory = None
        env_is_factory = callable(env) and not isinstance(env, EnvBase)
        if not in_process:
            # the worker applies max_steps as the thread back-end does (below)
            self.env_factory = _FrozenEnvFactory(env, max_steps)
            self.policy_factory = policy_factory
        elif env_is_factory and policy_factory is not None:
            self.env_factory, self.policy_factory = env, policy_factory  # built lazily
        else:
            self._set_env_and_policy(env() if env_is_factory else env, policy, policy_factory)

    def _set_env_and_policy(self, env, policy, policy_factory) -> None:
        self.env = freeze_vecnorm(env)
        self.policy = policy_factory(env) if policy_factory is not None else policy
        if self.device is None:
            params = self.policy.parameters() if isinstance(self.policy, nn.Module) else ()
            self.device = next(iter(params), torch.empty(0)).device

    def _build(self) -> None:
        if self.in_process:
            if self.env is None:
                self._set_env_and_policy(self.env_factory(), None, self.policy_factory)
                self.env_factory = self.policy_factory = None
            max_frames = 0 if _counts_steps(self.env) else self.max_steps
            self.collector = self.collector_cls(
                self.env,
                self.policy,
                frames_per_batch=self.frames_per_batch,
                total_frames=-1,
                max_frames_per_traj=max_frames,
                exploration_type=self.exploration_type,
                **self.collector_kwargs,
            )
        else:
            self.collector = MultiSyncCollector(
                [self.env_factory],
                policy_factory=self.policy_factory,
                frames_per_batch=self.frames_per_batch,
                total_frames=-1,
                max_frames_per_traj=0,  # applied by env_factory (_FrozenEnvFactory)
                exploration_type=self.exploration_type,
                weight_sync_schemes=self.weight_sync_schemes,
                init_fn=self.init_fn,
                **self.collector_kwargs,
            )

    def _load(self, weights: dict[str, TensorDictBase]) -> None:
        if not self.in_process:
            if self.weight_sync_schemes is not None:
                self.collector.update_policy_weights_(weights_dict=weights)
                return
            unknown = sorted(set(weights) - {"policy"})
            if unknown:
                raise ValueError(
                    f"backend='process' without weight_sync_schemes updates the policy "
                    f"only, got weights for {unknown}: pass weight_sync_schemes"
                )
            self.collector.update_policy_weights_(weights["policy"])
            return
        for model_id, w in weights.items():
            target = self.policy if model_id == "policy" else self.collector.get_model(model_id)
            device = self.device if model_id == "policy" else None
            load_weights(target, w if device is None else w.to(device))

    def prepare(self, weights: dict[str, TensorDictBase] | None) -> None:
        """Builds the collector (the env, the worker process) on first use, loads
        ``weights`` and resets the collector: the next :meth:`rollout` starts afresh."""
        if self.collector is None:
            self._build()
        if weights:
            self._load(weights)
        if self.in_process:
            self.collector.reset()
        else:
            self.collector.map_fn("reset")  # the worker's next batch starts from a reset env

    def rollout(self) -> TensorDictBase | None:
        """``num_trajectories`` episodes (after :meth:`prepare`; ``None`` when stopped)."""
        collector = self.collector
        trajs = TrajectoryAssembler(self.num_trajectories, self.traj_format)
        was_training = isinstance(self.policy, nn.Module) and self.policy.training
        if was_training:
            self.policy.eval()
        try:
            with torch.no_grad():
                while len(trajs) < self.num_trajectories:
                    if self.stop.is_set():
                        return None
                    trajs.ingest(collector.next())
        finally:
            if was_training:
                self.policy.train()
        return trajs.pop()

    def dump_video(self, step: int) -> None:
        """Calls ``dump`` on the collector env's transforms that have one."""
        if self.collector is None or not self.in_process:
            return
        env = self.collector.env
        while isinstance(env, TransformedEnv):
            transforms = (
                list(env.transform) if isinstance(env.transform, Compose) else [env.transform]
            )
            for transform in transforms:
                dump = getattr(transform, "dump", None)
                if callable(dump):
                    takes_step = "step" in inspect.signature(dump).parameters
                    dump(step=step) if takes_step else dump()
            env = env.base_env

    def close(self) -> None:
        collector, self.collector = self.collector, None
        if collector is not None:
            collector.shutdown()
        elif self.env is not None and not self.env.is_closed:
            self.env.close()
