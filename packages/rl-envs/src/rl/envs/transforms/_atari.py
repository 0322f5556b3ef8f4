"""Atari-specific transforms: the end-of-life signal of games with several lives."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from rl.core import Categorical, Unbounded

from ._base import Transform
from ._spec_utils import NestedKey, normalize_key

__all__ = ["EndOfLifeTransform"]


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
        >>> from rl.objectives.value import GAE
        >>> gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)  # doctest: +SKIP
        >>> env.transform.register_keys(gae)  # doctest: +SKIP  (bootstrap stops at a life lost)
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
