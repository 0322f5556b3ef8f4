"""Episode control: what ends an episode or a step (user predicates, random horizons, the
end of a life), no-op starts, skipped steps and a second policy on chosen steps.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from rl.core import Categorical, Unbounded

from .._utils import step_mdp
from ._base import Transform
from ._spec_utils import NestedKey, normalize_key
from ._utils import reset_mask, sibling_key

__all__ = [
    "ConditionalPolicySwitch",
    "ConditionalSkip",
    "EndOfLifeTransform",
    "NoopResetEnv",
    "RandomTruncationTransform",
    "TerminateTransform",
]


_MAX_NOOP_TRIALS = 10


class NoopResetEnv(Transform):
    """Takes a random number (``0`` to ``noops - 1``) of random steps after each reset.

    It runs on a single env (batch size of one element); on a batch of envs put it inside
    each sub-env (``SerialEnv(n, lambda: TransformedEnv(make_env(), NoopResetEnv()))``).

    Args:
        noops: the maximum number of no-op steps.
        random: draw the number of steps uniformly; else always ``noops``.

    Raises:
        ValueError: ``noops`` is negative; at reset, the env has more than one element.

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> from rl.envs.transforms import Compose, StepCounter
        >>> env = TransformedEnv(PendulumEnv(), Compose(StepCounter(), NoopResetEnv(4, random=False)))
        >>> int(env.reset()["step_count"])  # the 4 no-op steps are counted
        4
    """

    def __init__(self, noops: int = 30, random: bool = True):
        if not isinstance(noops, int) or noops < 0:
            raise ValueError(f"NoopResetEnv noops must be a non-negative int, got {noops!r}")
        super().__init__()
        self.noops = noops
        self.random = random

    @property
    def has_step(self) -> bool:
        return False

    def _reset(self, tensordict, tensordict_reset):
        mask = reset_mask(tensordict)
        if self.noops == 0 or (mask is not None and not bool(mask.all())):
            return tensordict_reset
        parent = self.parent
        if parent is None:
            raise RuntimeError(
                "NoopResetEnv.parent not found. Make sure that the parent is set. NoopResetEnv needs to be inside a TransformedEnv"
            )
        if parent.batch_size.numel() > 1:
            # one draw of random steps for the whole batch would start every sub-env
            # after the same number of steps (and a done one would reset them all)
            raise ValueError(
                "The parent environment batch-size is non-null "
                f"(batch_size={tuple(parent.batch_size)}): NoopResetEnv works on a single env (as "
                "TorchRL's); put it inside each sub-env, e.g. "
                "SerialEnv(n, lambda: TransformedEnv(make_env(), NoopResetEnv(30)))"
            )
        n = int(torch.randint(self.noops, ())) if self.random else self.noops
        keys = list(tensordict_reset.keys(True, True))
        done_key = parent.done_key
        td, i, trials = tensordict_reset, 0, 0
        while i < n:
            stepped = parent.rand_step(td.select(*keys, strict=False))
            nxt = stepped.get("next")
            if bool(nxt.get(done_key).any()):
                trials += 1
                if trials > _MAX_NOOP_TRIALS:
                    raise RuntimeError(
                        f"NoopResetEnv: the env was done within {n} random steps "
                        f"{_MAX_NOOP_TRIALS} times in a row; use fewer noops"
                    )
                td, i = parent.reset(), 0
                continue
            td = nxt.select(*keys, strict=False)
            i += 1
        if td is not tensordict_reset:
            for key in keys:
                value = td.get(key, None)
                if value is not None:
                    tensordict_reset.set(key, value)
        return tensordict_reset

    def _repr_args(self) -> str:
        return f"noops={self.noops}, random={self.random}"


class EndOfLifeTransform(Transform):
    """Writes ``"end-of-life"``: True at a step where the game lost a life (or ended).

    DeepMind's DQN treats the loss of a life as the end of an episode for the value
    targets, while the game itself goes on. This transform reads the lives counter of the
    gym env (``env.unwrapped.ale.lives()`` for ALE games) after each step and reset, keeps
    it under ``lives_key`` and sets ``eol_key`` where it dropped or where ``done_key`` is
    set. The signal is not part of the done spec, so it never resets the env; hand it to
    the value estimator or loss instead with :meth:`register_keys`.

    As TorchRL's, ``in_keys`` is ``[done_key]`` and ``out_keys`` is
    ``[eol_key, lives_key]``; the ``eol_key`` spec is a copy of the env's ``done_key``
    spec and the ``lives_key`` one an int64 ``Unbounded`` of the env batch size. The base
    env is a single gymnasium env (``GymEnv``) or a gymnasium ``SyncVectorEnv`` (its
    sub-envs are read one by one); put the transform inside each sub-env of a
    ``SerialEnv`` / ``ParallelEnv``. Another base env is read through ``eol_attribute``
    itself, with a ``UserWarning`` (as TorchRL).

    Args:
        eol_key: where the end-of-life flag is written (``[*B, 1]``, like ``done``).
        lives_key: where the lives counter is kept (int64 ``[*B]``).
        done_key: the done entry that also ends a life.
        eol_attribute: the dotted path of the lives counter from the gym env (a value or
            a method returning it).

    Raises:
        RuntimeError: the transform is not in an env, or its base env has no
            ``eol_attribute``.

    Examples:
        >>> t = EndOfLifeTransform()
        >>> t.in_keys, t.out_keys
        (['done'], ['end-of-life', 'lives'])
        >>> from rl.envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("ALE/Breakout-v5"), t)  # doctest: +SKIP
        >>> td = env.rollout(500, break_when_any_done=False)  # doctest: +SKIP
        >>> td["next", "lives"][-1], td["next", "end-of-life"].sum()  # doctest: +SKIP
        (tensor(3), tensor(2))
        >>> from rl.objectives.value import GAE  # doctest: +SKIP
        >>> gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)  # doctest: +SKIP
        >>> # the value estimator's bootstrap stops where a life was lost
        >>> env.transform.register_keys(gae)  # doctest: +SKIP
    """

    def __init__(
        self,
        eol_key: NestedKey = "end-of-life",
        lives_key: NestedKey = "lives",
        done_key: NestedKey = "done",
        eol_attribute: str = "unwrapped.ale.lives",
    ) -> None:
        if not isinstance(eol_attribute, str) or not eol_attribute:
            raise ValueError(
                f"EndOfLifeTransform eol_attribute must be a dotted attribute path, got "
                f"{eol_attribute!r}"
            )
        self.eol_key = normalize_key(eol_key)
        self.lives_key = normalize_key(lives_key)
        self.done_key = normalize_key(done_key)
        super().__init__(in_keys=[self.done_key], out_keys=[self.eol_key, self.lives_key])
        self.eol_attribute = eol_attribute

    def _on_keys_changed(self) -> None:
        # one in_key, two out_keys (TorchRL's): no in/out pairs, _step writes them itself
        d = self.__dict__
        d["_io_pairs"] = []
        d["_io_pairs_inv"] = []
        self.empty_cache()

    @property
    def has_step(self) -> bool:
        return True

    def _gym_envs(self) -> tuple[list[Any], Any]:
        parts = self._parent_parts()
        if parts is None:
            raise RuntimeError("EndOfLifeTransform needs to be inside a TransformedEnv")
        base = parts[0]
        gym_env = getattr(base, "env", None)
        if gym_env is None or not hasattr(base, "is_vector"):
            first = self.eol_attribute.split(".")[0]
            if not hasattr(base, first):
                raise RuntimeError(
                    f"EndOfLifeTransform reads the lives of a gym env; the base env is "
                    f"{type(base).__name__}, which has no {self.eol_attribute!r} either "
                    f"(put the transform inside each sub-env of a SerialEnv / ParallelEnv)"
                )
            warnings.warn(
                f"EndOfLifeTransform: the base env {type(base).__name__} is not a gym env; "
                f"its lives are read from base_env.{self.eol_attribute}",
                UserWarning,
                stacklevel=3,
            )
            return [base], base
        if base.is_vector:
            envs = getattr(gym_env, "envs", None)
            if envs is None:
                raise RuntimeError(
                    f"EndOfLifeTransform reads the sub-envs of a SyncVectorEnv; "
                    f"{type(gym_env).__name__} keeps them in other processes (use "
                    f"vectorization_mode='sync' or one transform per sub-env)"
                )
            return list(envs), base
        return [gym_env], base

    def _read(self, env: Any) -> torch.Tensor:
        value = env
        for name in self.eol_attribute.split("."):
            if not hasattr(value, name):
                raise RuntimeError(
                    f"EndOfLifeTransform: the env {env} has no attribute path "
                    f"{self.eol_attribute!r} (missing {name!r})"
                )
            value = getattr(value, name)
        return torch.as_tensor(value() if callable(value) else value, dtype=torch.int64)

    def _lives(self) -> torch.Tensor:
        envs, base = self._gym_envs()
        lives = torch.cat([self._read(e).reshape(-1) for e in envs])
        return lives.reshape(base.batch_size).to(base.device or "cpu")

    def _reset(self, tensordict, tensordict_reset):
        lives = self._lives()
        done = tensordict_reset.get(self.done_key, None)
        shape = (*tensordict_reset.batch_size, 1) if done is None else done.shape
        dtype = torch.bool if done is None else done.dtype
        tensordict_reset.set(self.eol_key, torch.zeros(shape, dtype=dtype, device=lives.device))
        tensordict_reset.set(self.lives_key, lives)
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        lives = self._lives()
        done = next_tensordict.get(self.done_key, None)
        if done is None:
            present = sorted(map(str, next_tensordict.keys(True, True)))
            raise KeyError(
                f"EndOfLifeTransform: no done entry {self.done_key!r} in the step's output; "
                f"keys present: {present}"
            )
        before = tensordict.get(self.lives_key, None)
        lost = torch.zeros_like(lives, dtype=torch.bool) if before is None else lives < before
        next_tensordict.set(self.eol_key, lost.reshape(done.shape) | done)
        next_tensordict.set(self.lives_key, lives)
        return next_tensordict

    def forward(self, tensordict):
        raise RuntimeError(
            "EndOfLifeTransform reads the lives of its env: it runs inside a TransformedEnv only"
        )

    def transform_observation_spec(self, observation_spec):
        shape, device = observation_spec.shape, observation_spec.device
        observation_spec[self.eol_key] = Categorical(
            2, shape=(*shape, 1), dtype=torch.bool, device=device
        )
        observation_spec[self.lives_key] = Unbounded(shape=shape, dtype=torch.int64, device=device)
        return observation_spec

    def transform_output_spec(self, output_spec):
        output_spec = super().transform_output_spec(output_spec)
        done = output_spec["full_done_spec"] if "full_done_spec" in output_spec.keys() else None
        if done is not None and self.done_key in done.keys(True, True):
            # as TorchRL: the flag's spec is a copy of the done entry's
            output_spec["full_observation_spec"][self.eol_key] = done[self.done_key].clone()
        return output_spec

    def register_keys(self, loss_or_advantage: Any) -> None:
        """Makes a loss or value estimator stop bootstrapping at the end of a life:
        ``loss_or_advantage.set_keys(done=eol_key, terminated=eol_key)``."""
        loss_or_advantage.set_keys(done=self.eol_key, terminated=self.eol_key)


_PARTIAL_ERR = (
    "Cannot run partial steps in a batched locked environment. "
    "Hint: Parallel and Serial envs can be unlocked through a keyword argument in "
    "the constructor."
)


def _done_mask(env, td: TensorDictBase) -> torch.Tensor:
    """``[*B]`` bool: any done entry of ``env`` set in ``td``."""
    done = torch.zeros(td.batch_size, dtype=torch.bool, device=td.device)
    for key in env.done_keys:
        value = td.get(key, None)
        if value is not None:
            done = done | value.reshape(*td.batch_size, -1).any(-1)
    return done


def _last(key: NestedKey) -> str:
    return key if isinstance(key, str) else key[-1]


class TerminateTransform(Transform):
    """Ends an episode when a user predicate on the step's output is true.

    After each step, ``stop(next_tensordict)`` (a bool, or a bool tensor broadcastable
    to the done entries) is OR-ed into every ``terminated`` entry and, with
    ``write_done``, every ``done`` entry (``truncated`` entries are left alone), so
    ``rollout(break_when_any_done=True)`` stops there.

    Args:
        stop: ``next_tensordict -> bool or bool tensor``.

    Keyword Args:
        write_done: also set the ``done`` entries.

    Raises:
        ValueError: ``stop`` is not callable.

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), TerminateTransform(lambda td: td["observation"][..., 2] > 0))
        >>> r = env.rollout(200)
        >>> bool(r["next", "observation"][-1, 2] > 0), bool(r["next", "terminated"][-1])
        (True, True)
    """

    def __init__(self, stop: Callable[[TensorDictBase], Any], *, write_done: bool = True) -> None:
        if not callable(stop):
            raise ValueError("`stop` must be a callable.")
        super().__init__()
        self.stop = stop
        self.write_done = write_done

    @property
    def has_step(self) -> bool:
        return True

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        flag = self.stop(next_tensordict)
        if not isinstance(flag, torch.Tensor):
            flag = torch.as_tensor(flag, device=next_tensordict.device)
        flag = flag.bool()
        parts = self._parent_parts()
        done_keys = self.parent.done_keys if parts is not None else ["done"]
        for key in done_keys:
            name = _last(key)
            if name == "truncated" or (name == "done" and not self.write_done):
                continue
            current = next_tensordict.get(key, None)
            if current is None:
                continue
            value = flag
            while value.ndim < current.ndim:
                value = value.unsqueeze(-1)
            next_tensordict.set(key, current | value.expand(current.shape))
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(f"class {type(self)} cannot be executed without a parent environment.")

    def _repr_args(self) -> str:
        return f"stop={self.stop!r}, write_done={self.write_done}"


class RandomTruncationTransform(Transform):
    """Truncates episodes at random horizons, so that batched envs do not reset in sync.

    At the first reset every sub-env draws a horizon uniformly in ``[1, max_horizon]``;
    at each later reset of a sub-env, with probability ``prob`` (``first_episode_prob``
    for its first episode after that) it draws one in ``[min_horizon, max_horizon]``,
    else it gets ``max_horizon``. A step whose step count (from a :class:`StepCounter`
    placed before this transform) reaches the horizon sets ``truncated`` and ``done``
    next to the step counter.

    Args:
        min_horizon: smallest random horizon (``>= 1``).
        max_horizon: largest horizon, and the horizon of episodes that are not cut.
        prob: probability of a random horizon at each later reset.
        first_episode_prob: the same for the first episode after the initial spread
            (default ``prob``).

    Keyword Args:
        step_count_key: the step counter's key (a string matches the last part of a
            nested key).
        truncated_key: the truncation flag (a string sits next to the step counter).
        done_key: the done flag (a string sits next to the step counter).

    Raises:
        ValueError: probabilities outside ``[0, 1]``, horizons below 1 or
            ``min_horizon > max_horizon``.
        RuntimeError: no step counter before the transform (at spec time).

    Examples:
        >>> import torch
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> from rl.envs.transforms import Compose, StepCounter
        >>> env = TransformedEnv(PendulumEnv(), Compose(StepCounter(),
        ...     RandomTruncationTransform(min_horizon=5, max_horizon=10)))
        >>> _ = torch.manual_seed(0)
        >>> r = env.rollout(100)
        >>> r.shape[-1] <= 10, bool(r["next", "truncated"][-1])
        (True, True)
    """

    def __init__(
        self,
        min_horizon: int,
        max_horizon: int,
        prob: float = 0.0,
        first_episode_prob: float | None = None,
        *,
        step_count_key: NestedKey = "step_count",
        truncated_key: NestedKey = "truncated",
        done_key: NestedKey = "done",
    ) -> None:
        super().__init__()
        if first_episode_prob is None:
            first_episode_prob = prob
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"prob must be in [0, 1], got {prob}")
        if not 0.0 <= first_episode_prob <= 1.0:
            raise ValueError(f"first_episode_prob must be in [0, 1], got {first_episode_prob}")
        if min_horizon < 1:
            raise ValueError(f"min_horizon must be >= 1, got {min_horizon}")
        if max_horizon < 1:
            raise ValueError(f"max_horizon must be >= 1, got {max_horizon}")
        if min_horizon > max_horizon:
            raise ValueError(f"min_horizon ({min_horizon}) must be <= max_horizon ({max_horizon})")
        self.prob = prob
        self.first_episode_prob = first_episode_prob
        self.min_horizon = min_horizon
        self.max_horizon = max_horizon
        self.step_count_key = normalize_key(step_count_key)
        self.truncated_key = normalize_key(truncated_key)
        self.done_key = normalize_key(done_key)
        self._horizons: torch.Tensor | None = None
        self._first_episode: torch.Tensor | None = None
        self._initialized = False

    @property
    def has_step(self) -> bool:
        return True

    def _match(self, keys: Sequence[NestedKey]) -> NestedKey | None:
        target = self.step_count_key
        leaf = None
        for key in keys:
            if key == target:
                return key
            if leaf is None and isinstance(target, str) and _last(key) == target:
                leaf = key
        return leaf

    def _companion(self, step_count_key: NestedKey, key: NestedKey) -> NestedKey:
        return key if isinstance(key, tuple) else sibling_key(step_count_key, key)

    def _locate(self, td: TensorDictBase) -> NestedKey | None:
        cached = self.__dict__.get("_located_key")
        if cached is not None:
            return cached
        found = self._match(list(td.keys(True, True)))
        if found is not None:
            self.__dict__["_located_key"] = found
        return found

    def set_container(self, container) -> None:
        self.__dict__.pop("_located_key", None)
        super().set_container(container)
        if self._parent_parts() is not None:  # in an env: the counter must come first
            try:
                self._step_count_key_in(self.parent.observation_spec)
            except RuntimeError:
                self.reset_parent()  # refused: free to go elsewhere
                raise

    def _step_count_key_in(self, observation_spec) -> NestedKey:
        """The step-count key of ``observation_spec``; RuntimeError when it has none."""
        key = self._match(list(observation_spec.keys(True, True)))
        if key is None:
            raise RuntimeError(
                "RandomTruncationTransform requires a StepCounter earlier in the transform "
                f"chain that writes the {self.step_count_key!r} step-count key. Use:\n"
                "  Compose(StepCounter(), RandomTruncationTransform(...))\n"
                "or add StepCounter() before RandomTruncationTransform in your transform "
                "pipeline. If StepCounter uses a custom step_count_key, pass the same key to "
                "RandomTruncationTransform."
            )
        return key

    def _step(self, tensordict, next_tensordict):
        key = self._locate(next_tensordict)
        if key is None or self._horizons is None:
            return next_tensordict
        cut = next_tensordict.get(key) >= self._horizons
        for name in (self.truncated_key, self.done_key):
            flag_key = self._companion(key, name)
            flag = next_tensordict.get(flag_key, None)
            next_tensordict.set(flag_key, cut if flag is None else flag | cut)
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        key = self._locate(tensordict_reset)
        if key is None:
            return tensordict_reset
        count = tensordict_reset.get(key)
        done = tensordict_reset.get(self._companion(key, self.done_key), None)
        if done is not None:
            tensordict_reset.set(self._companion(key, self.truncated_key), torch.zeros_like(done))
        if not self._initialized:
            self._horizons = torch.randint(
                1, self.max_horizon + 1, count.shape, device=count.device
            )
            self._first_episode = torch.ones(count.shape, dtype=torch.bool, device=count.device)
            self._initialized = True
            return tensordict_reset
        mask = None
        if tensordict is not None:
            mask = tensordict.get(sibling_key(key, "_reset"), None)
            if mask is None:
                mask = tensordict.get("_reset", None)
        if mask is None:
            return tensordict_reset
        mask = mask.reshape(self._horizons.shape).bool()
        if not bool(mask.any()):
            return tensordict_reset
        if self.prob == 0.0 and self.first_episode_prob == 0.0:
            self._horizons[mask] = self.max_horizon
            self._first_episode[mask] = False
            return tensordict_reset
        n = int(mask.sum())
        device = self._horizons.device
        new = torch.randint(self.min_horizon, self.max_horizon + 1, (n,), device=device)
        prob = torch.where(
            self._first_episode[mask],
            torch.tensor(self.first_episode_prob, device=device),
            torch.tensor(self.prob, device=device),
        )
        new[torch.rand(n, device=device) > prob] = self.max_horizon
        self._horizons[mask] = new
        self._first_episode[mask] = False
        return tensordict_reset

    def transform_output_spec(self, output_spec):
        output_spec = output_spec.clone()
        observations = output_spec["full_observation_spec"]
        dones = output_spec["full_done_spec"]
        key = self._step_count_key_in(observations)
        truncated_key = self._companion(key, self.truncated_key)
        done_key = self._companion(key, self.done_key)
        present = set(dones.keys(True, True))
        if truncated_key not in present:
            template = dones[done_key] if done_key in present else None
            if template is None:
                template = next((dones[k] for k in present if _last(k) == "done"), None)
            if template is not None:
                dones[truncated_key] = Categorical(
                    2, shape=template.shape, dtype=torch.bool, device=template.device
                )
        return output_spec

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError(
            "RandomTruncationTransform cannot be called independently, only its "
            "step and reset methods are functional."
        )

    def _repr_args(self) -> str:
        return (
            f"min_horizon={self.min_horizon}, max_horizon={self.max_horizon}, "
            f"prob={self.prob}, first_episode_prob={self.first_episode_prob}"
        )


class ConditionalSkip(Transform):
    """Skips the env step wherever ``cond(tensordict)`` is true.

    Before the step, ``cond`` runs on the input tensordict and ``"_step"`` (``[*B]`` bool,
    False where the step is skipped, combined with a ``"_step"`` already there) is
    written into the tensordict handed to the env below. The skipped entries keep their
    data: their ``"next"`` holds their current observations and done flags with a zero
    reward, and the transforms of the same ``TransformedEnv`` do not run on them (wrap
    the env in another ``TransformedEnv`` for transforms that must see every step).

    A batch-locked env skips the step altogether when ``cond`` holds for every entry and
    otherwise trusts its ``_step`` with the mask (``SerialEnv`` / ``ParallelEnv`` step
    the selected sub-envs only); an env that is not batch-locked (stateless) steps the
    selected entries only. This is TorchRL's behaviour.

    Args:
        cond: ``tensordict -> bool or [*B] bool tensor``; True skips the step.

    Raises:
        ValueError: ``cond`` is not callable.
        NotImplementedError: in ``forward`` (the transform needs an env).

    Examples:
        >>> import torch
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> from rl.envs.transforms import Compose, StepCounter
        >>> inner = TransformedEnv(PendulumEnv(), StepCounter(step_count_key="inner"))
        >>> middle = TransformedEnv(
        ...     inner, ConditionalSkip(cond=lambda td: td["count"] % 2 == 1), auto_unwrap=False
        ... )
        >>> env = TransformedEnv(middle, StepCounter(step_count_key="count"), auto_unwrap=False)
        >>> r = env.rollout(6)
        >>> r["count"].squeeze(-1).tolist(), r["inner"].squeeze(-1).tolist()
        ([0, 1, 2, 3, 4, 5], [0, 1, 1, 2, 2, 3])
    """

    _reads_outer_root = True

    def __init__(self, cond: Callable[[TensorDictBase], bool | torch.Tensor]) -> None:
        if not callable(cond):
            raise ValueError(f"ConditionalSkip cond must be callable, got {cond!r}")
        super().__init__()
        self.cond = cond

    @property
    def has_inverse(self) -> bool:
        return True

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        cond = self.cond(tensordict)
        cond = torch.as_tensor(cond, device=tensordict.device).bool()
        step = tensordict.get("_step", None)
        step = ~cond if step is None else step.bool() & ~cond
        if step.shape != tensordict.batch_size:
            step = step.reshape(tensordict.batch_size)
        tensordict.set("_step", step)
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError(
            f"{type(self).__name__}.forward is not implemented: the transform only acts "
            "inside an env (env.step)."
        )

    def _repr_args(self) -> str:
        return f"cond={self.cond!r}"


def _check_cond(cond, shape: torch.Size, device) -> torch.Tensor:
    if not isinstance(cond, (bool, torch.Tensor)):
        raise RuntimeError("Calling the condition function should return a boolean or a tensor.")
    if isinstance(cond, torch.Tensor):
        if tuple(cond.shape) not in ((1,), (), tuple(shape)):
            raise RuntimeError(
                "Tensor outputs must have the shape of the tensordict, or contain a single "
                f"element; got {tuple(cond.shape)} for a tensordict of shape {tuple(shape)}."
            )
        return cond.bool()
    return torch.tensor(cond, device=device)


class ConditionalPolicySwitch(Transform):
    """Lets a second policy act on the steps where ``condition`` holds.

    After each step (and reset), ``condition(next_tensordict)`` is evaluated; where it
    is true, ``policy`` reads the resulting state and the env below takes its action at
    once, so the outer policy only sees the states where ``condition`` is false (turns
    of a two-player game, scripted phases). A done step is returned as it is.

    Args:
        policy: ``tensordict -> tensordict`` writing the action.
        condition: ``tensordict -> bool or [*B] bool tensor``.

    Raises:
        RuntimeError: ``condition`` returns something else than a bool or a bool tensor
            of the batch shape; the condition holds for part of a batch-locked batched
            env; ``forward`` is called (the transform needs an env).

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule as Mod
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> from rl.envs.transforms import Compose, StepCounter
        >>> switch = Mod(lambda: torch.zeros(1), in_keys=[], out_keys=["action"])
        >>> env = TransformedEnv(PendulumEnv(), Compose(StepCounter(step_count_key="total"),
        ...     ConditionalPolicySwitch(condition=lambda td: td["total"] % 2 == 1, policy=switch)))
        >>> env.rollout(4)["total"].squeeze(-1)
        tensor([0, 2, 4, 6])
    """

    def __init__(
        self,
        policy: Callable[[TensorDictBase], TensorDictBase],
        condition: Callable[[TensorDictBase], bool | torch.Tensor],
    ) -> None:
        super().__init__()
        self.__dict__["policy"] = policy
        self.condition = condition

    @property
    def has_step(self) -> bool:
        return True

    def _step(self, tensordict, next_tensordict):
        cond = _check_cond(
            self.condition(next_tensordict), tensordict.batch_size, tensordict.device
        )
        if not bool(cond.any()):
            return next_tensordict
        step = tensordict.get("_step", None)
        if step is not None:
            cond = cond & step.reshape(cond.shape)
        parent = self.parent
        done = _done_mask(parent, next_tensordict)
        if bool(done.any()):
            if next_tensordict.numel() == 1 or bool(done.all()):
                return next_tensordict
            if parent.batch_locked:
                raise RuntimeError(_PARTIAL_ERR)
        if not bool(cond.all()) and parent.batch_locked:
            raise RuntimeError(_PARTIAL_ERR)
        td = tensordict.copy().set("next", next_tensordict)
        td = step_mdp(td, reward_keys=parent.reward_keys, action_keys=parent.action_keys)
        td = self.policy(td)
        return parent._step(td)

    def _reset(self, tensordict, tensordict_reset):
        cond = _check_cond(
            self.condition(tensordict_reset), tensordict_reset.batch_size, tensordict_reset.device
        )
        if not bool(cond.any()):
            return tensordict_reset
        if tensordict is not None:
            reset = tensordict.get("_reset", None)
            if reset is not None:
                cond = cond & reset.reshape(cond.shape)
                if not bool(cond.any()):
                    return tensordict_reset
        parent = self.parent
        if not bool(cond.all()) and parent.batch_locked:
            raise RuntimeError(_PARTIAL_ERR)
        td = self.policy(tensordict_reset)
        return parent._step(td).exclude(*parent.reward_keys)

    def forward(self, tensordict: TensorDictBase) -> Any:
        raise RuntimeError(
            "ConditionalPolicySwitch cannot be called independently, only its step and reset "
            "methods are functional."
        )

    def _repr_args(self) -> str:
        return f"policy={self.policy!r}, condition={self.condition!r}"
