"""``VecGymEnvTransform``: the true last observation of a vector env that resets itself."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from ._base import FORWARD_NOT_IMPLEMENTED, Transform
from ._spec_utils import NestedKey

__all__ = ["VecGymEnvTransform"]


class VecGymEnvTransform(Transform):
    """Puts the final observation of an auto-reset vector env back where it belongs.

    A vectorized env that resets its done sub-envs by itself returns, for them, the
    first observation of the next episode in place of the last one, and the last one
    apart (gymnasium: ``infos["final_obs"]``). When the wrapped env writes that apart
    under ``final_name`` in its step output, this transform swaps them: ``("next",
    obs)`` gets the final observation, and the reset observation is kept until the
    done sub-envs are reset (``env.reset`` with a ``"_reset"`` mask equal to the done
    flags, as rollouts and collectors do), which then returns it in place of what the
    env's own reset gave for those rows (the env started that episode already).
    Without a final entry (old gym versions), the done rows of the next observations
    are filled with ``missing_obs_value`` (zeros for integer entries).

    ``rl``'s :class:`~rl.envs.GymWrapper` does this itself for gymnasium vector envs
    (from ``infos["final_obs"]`` in ``SAME_STEP`` mode, by resetting rows in
    ``NEXT_STEP`` mode), so it does not append this transform as TorchRL's does; it
    serves envs of one's own that write a final entry.

    Args:
        final_name: the entry of the step output that holds the final observations
            (a tensordict of observation entries).
        missing_obs_value: the value written into done rows when there is no final
            entry.
        native_autoreset: leave the data as the env returns it (only the
            ``final_name`` entry is removed at reset).

    Raises:
        RuntimeError: a reset mask that is neither all-true nor equal to the done flags
            of the last step (the env already reset the done rows), or no done entry.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.envs import EnvBase, TransformedEnv
        >>> from rl.core import Composite, Unbounded
        >>> class Auto(EnvBase):  # terminates at every step and resets itself
        ...     def __init__(self):
        ...         super().__init__(batch_size=(2,))
        ...         self.observation_spec = Composite(observation=Unbounded((2, 1)), shape=(2,))
        ...         self.action_spec = Unbounded((2, 1))
        ...     def _reset(self, td):
        ...         return TensorDict(observation=torch.zeros(2, 1), batch_size=(2,))
        ...     def _step(self, td):
        ...         final = TensorDict(observation=td["observation"] + 1, batch_size=(2,))
        ...         done = torch.tensor([[True], [False]])
        ...         obs = torch.where(done, 0.0, td["observation"] + 1)
        ...         return TensorDict(observation=obs, final=final, reward=torch.zeros(2, 1),
        ...                           done=done, terminated=done, batch_size=(2,))
        ...     def _set_seed(self, seed):
        ...         pass
        >>> env = TransformedEnv(Auto(), VecGymEnvTransform())
        >>> td = env.step(env.reset().set("action", torch.zeros(2, 1)))
        >>> td["next", "observation"].squeeze(-1).tolist()  # env 0's final observation
        [1.0, 1.0]
        >>> root = env.step_mdp(td)
        >>> env.reset(root.set("_reset", td["next", "done"].clone()))["observation"].squeeze(-1).tolist()
        [0.0, 1.0]
    """

    def __init__(
        self,
        final_name: str = "final",
        missing_obs_value: Any = np.nan,
        *,
        native_autoreset: bool = False,
    ):
        super().__init__()
        self.final_name = final_name
        self.native_autoreset = native_autoreset
        if not isinstance(missing_obs_value, torch.Tensor):
            missing_obs_value = torch.tensor(missing_obs_value)
        self.missing_obs_value = missing_obs_value
        self._memo: dict[str, Any] = {}

    def set_container(self, container) -> None:
        super().set_container(container)
        self.__dict__.pop("_done_keys", None)
        self.__dict__.pop("_obs_keys", None)

    @property
    def done_keys(self) -> list[NestedKey]:
        """The parent's done keys that end in ``"done"``."""
        keys = self.__dict__.get("_done_keys")
        if keys is None:
            keys = [
                key
                for key in self.parent.done_keys
                if (key[-1] if isinstance(key, tuple) else key) == "done"
            ]
            if not keys:
                raise RuntimeError(
                    f"VecGymEnvTransform found no 'done' key in the env's done keys "
                    f"{self.parent.done_keys}"
                )
            self.__dict__["_done_keys"] = keys
        return keys

    @property
    def obs_keys(self) -> list[NestedKey]:
        """The parent's observation keys."""
        keys = self.__dict__.get("_obs_keys")
        if keys is None:
            keys = list(self.parent.observation_spec.keys(True, True))
            self.__dict__["_obs_keys"] = keys
        return keys

    def _missing_value(self, obs: torch.Tensor) -> torch.Tensor:
        value = self.missing_obs_value
        if value.dtype.is_floating_point and not obs.dtype.is_floating_point:
            if bool(torch.isnan(value).any()):
                return torch.zeros((), dtype=obs.dtype, device=obs.device)
        return value.to(dtype=obs.dtype, device=obs.device)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self.native_autoreset:
            return next_tensordict
        done = None
        for key in self.done_keys:
            value = next_tensordict.get(key, None)
            if value is not None:
                done = value if done is None else done | value
        if done is None:
            raise RuntimeError(
                f"VecGymEnvTransform found none of the done keys {self.done_keys} in the "
                f"step output (keys {sorted(map(str, next_tensordict.keys(True, True)))})"
            )
        self._memo["done"] = done
        final = next_tensordict.pop(self.final_name, None)
        self._memo["saved_next"] = None
        if bool(done.any()):
            rows = done.reshape(next_tensordict.shape)
            if final is not None:
                keys = list(final.keys(True, True))
                self._memo["saved_next"] = next_tensordict.select(*keys).clone()
                for key in keys:
                    next_tensordict.get(key)[rows] = final.get(key)[rows]
            else:
                self._memo["saved_next"] = next_tensordict.select(*self.obs_keys).clone()
                for key in self.obs_keys:
                    obs = next_tensordict.get(key)
                    obs[rows] = self._missing_value(obs)
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        if self.native_autoreset or tensordict is None:
            tensordict_reset.pop(self.final_name, None)
            return tensordict_reset
        done = self._memo.get("done")
        reset = tensordict.get("_reset", done)
        if reset is None or not bool(reset.any()) or bool(reset.all()):
            # nothing to reset, or a full reset (the env itself was reset)
            tensordict_reset.pop(self.final_name, None)
            return tensordict_reset
        if done is None or not torch.equal(reset.reshape(done.shape), done):
            raise RuntimeError(
                "VecGymEnvTransform cannot partially reset an auto-reset vector env with a "
                f"'_reset' mask other than the last done flags: got _reset={reset.tolist()}, "
                f"done={None if done is None else done.tolist()}"
            )
        saved = self._memo.get("saved_next")
        if saved is None:
            raise RuntimeError(
                f"VecGymEnvTransform has no saved reset observation for _reset={reset.tolist()}"
            )
        # the env reset these rows at the last step: its reset observations come back
        tensordict_reset.update(saved)
        for key in self.done_keys:
            flags = tensordict_reset.get(key, None)
            if flags is not None:
                tensordict_reset.set(key, torch.zeros_like(flags))
        tensordict_reset.pop(self.final_name, None)
        return tensordict_reset

    def transform_observation_spec(self, observation_spec):
        if self.final_name in observation_spec.keys(True):
            del observation_spec[self.final_name]
        return observation_spec

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(FORWARD_NOT_IMPLEMENTED.format(type(self)))
