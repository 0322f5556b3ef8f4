"""MultiAction: a stack of actions (an action chunk) executed in one outer step."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from .._utils import step_mdp
from ._base import Transform
from ._spec_utils import NestedKey

__all__ = ["MultiAction"]


def _any_done(parent, td: TensorDictBase) -> torch.Tensor:
    """``[*B]`` bool: any done entry of ``parent`` is set in ``td``."""
    done = torch.zeros(td.batch_size, dtype=torch.bool, device=td.device)
    for key in parent.done_keys:
        value = td.get(key, None)
        if value is not None:
            done = done | value.reshape(*td.batch_size, -1).any(-1)
    return done


class MultiAction(Transform):
    """Executes a stack of actions (an action chunk) in one outer step.

    The policy writes actions stacked along the dim ``dim`` after the batch dims
    (``[*B, T, *A]`` with the default ``dim=1``); the transform steps the env below it
    once per action and returns one outer transition: the last step's observation and
    done flags, and the ``T`` rewards stacked along the same dim (``stack_rewards``) and,
    with ``stack_observations``, the ``T`` observations. When the env is done before the
    chunk ends the remaining actions are not executed (for a single env, or every
    sub-env of a batch; the reward stack then ends with one zero slot, as in TorchRL).
    A sub-env of a batched env that is done while others are not keeps stepping until
    the end of the chunk (the batched env receives a ``"_step"`` mask it may honor).

    The chunk length is free; since specs have no dynamic dims here, the action (and
    stacked reward / observation) specs show a chunk dim of size 1 (a random action is
    a chunk of one, as TorchRL samples it).

    Keyword Args:
        dim: where the chunk dim sits, counted after the batch dims (``>= 1``).
        stack_rewards: return the stack of rewards (else the last reward).
        stack_observations: return the stack of observations (else the last one).
        action_key: the env's one-step action key (default: every action key).
        chunk_key: the policy-facing key holding the stack (default ``action_key``).

    Raises:
        KeyError: the stacked actions are missing before the step.
        ValueError: ``dim < 1``, or action and chunk key lists of different lengths.

    Examples:
        >>> import torch
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), MultiAction())
        >>> td = env.reset()
        >>> td["action"] = torch.zeros(4, 1)
        >>> env.step(td)["next", "reward"].shape
        torch.Size([4, 1])
    """

    def __init__(
        self,
        *,
        dim: int = 1,
        stack_rewards: bool = True,
        stack_observations: bool = False,
        action_key: NestedKey | None = None,
        chunk_key: NestedKey | None = None,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"MultiAction dim must be an int >= 1, got {dim!r}")
        if action_key is None and chunk_key is not None:
            action_key = "action"
        if action_key is not None and chunk_key is None:
            chunk_key = action_key
        super().__init__(
            in_keys_inv=None if action_key is None else [action_key],
            out_keys_inv=None if chunk_key is None else [chunk_key],
        )
        self.stack_rewards = stack_rewards
        self.stack_observations = stack_observations
        self.dim = dim
        self.rewards: list = []
        self.obs: list = []

    @classmethod
    def from_vla(cls, *, action_key: NestedKey = "action", **kwargs) -> MultiAction:
        """A ``MultiAction`` reading the chunk from TorchRL's VLA key ``("vla_action", "chunk")``.

        Examples:
            >>> MultiAction.from_vla(stack_rewards=False).out_keys_inv
            [('vla_action', 'chunk')]
        """
        return cls(action_key=action_key, chunk_key=("vla_action", "chunk"), **kwargs)

    @property
    def has_inverse(self) -> bool:
        return True

    @property
    def has_step(self) -> bool:
        return True

    def _key_pairs(self, action_keys) -> list[tuple[NestedKey, NestedKey]]:
        actions = self.in_keys_inv or list(action_keys)
        chunks = self.out_keys_inv or actions
        if len(actions) != len(chunks):
            raise ValueError(
                "action_key and chunk_key lists must have the same length, got "
                f"{len(actions)} and {len(chunks)}."
            )
        return list(zip(actions, chunks))

    def _stack(self, tds: list, next_tensordict: TensorDictBase, keys) -> TensorDictBase:
        td = torch.stack([*tds, next_tensordict.select(*keys)], -1)
        if self.dim != 1:
            d = td.ndim - 1
            td.auto_batch_size_(d + self.dim)
            td = td.transpose(d, d + self.dim)
        return td

    def _step(self, tensordict, next_tensordict):
        parent = self.parent
        if self.stack_rewards:
            next_tensordict.update(self._stack(self.rewards, next_tensordict, parent.reward_keys))
        if self.stack_observations:
            next_tensordict.update(self._stack(self.obs, next_tensordict, parent.observation_keys))
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset

    def _actions(self, parent, tensordict: TensorDictBase) -> tuple:
        """The chunk of each action key, unbound along the chunk dim."""
        actions = tensordict.empty()
        for action_key, chunk_key in self._key_pairs(parent.action_keys):
            action = tensordict.get(chunk_key, None)
            if action is None:
                raise KeyError(
                    f"{type(self).__name__} expected stacked actions at key {chunk_key!r} "
                    "before env.step, but the key was missing. Available keys are "
                    f"{sorted(map(str, tensordict.keys(True, True)))}."
                )
            actions.set(action_key, action)
        return actions.auto_batch_size_(batch_dims=tensordict.ndim + self.dim).unbind(-1)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        parent = self.parent
        if parent is None:
            raise RuntimeError("MultiAction steps its env: it runs inside a TransformedEnv only")
        actions = self._actions(parent, tensordict)
        reward_keys = parent.reward_keys
        td = tensordict
        global_idx = None  # entries still running (envs that are not batch-locked)
        td_out = None
        reset = torch.zeros(tensordict.batch_size, dtype=torch.bool, device=tensordict.device)
        rewards: list = []
        obs: list = []
        self.rewards, self.obs = rewards, obs
        for action in actions[:-1]:
            if global_idx is not None:
                action = action[global_idx]
            td = parent.step(td.replace(action))
            if self.stack_rewards:
                reward_td = td.get("next").select(*reward_keys)
                if global_idx is not None:
                    full = reward_td.new_zeros(global_idx.shape + reward_td.shape[1:])
                    full[global_idx] = reward_td
                    rewards.append(full)
                else:
                    rewards.append(reward_td)
            if self.stack_observations:
                obs_td = td.get("next").select(*parent.observation_keys)
                if global_idx is not None:
                    full = obs_td.new_zeros(global_idx.shape + obs_td.shape[1:])
                    full[global_idx] = obs_td
                    obs_td = full
                obs.append(obs_td)
            td = step_mdp(
                td, reward_keys=reward_keys, action_keys=parent.action_keys, exclude_action=False
            )
            if self.stack_rewards:
                td.update(reward_td)
            done = _any_done(parent, td)
            if not bool(done.any()):
                continue
            # no step after a done: the rest of the chunk is skipped ("_step")
            reset = reset | done
            if bool(reset.all()):
                td.set("_step", ~reset)
                break
            if parent.batch_locked:
                td.set("_step", ~reset)
                continue
            # a stateless env: go on with the entries still running only
            idx = ~reset
            if global_idx is None:
                global_idx = idx.clone()
                td_out = td
                for key in self._stacked_keys(parent):  # de-alias from the stacks
                    td_out.set(key, td_out.get(key).clone())
            else:
                td_out[global_idx] = td
                global_idx = torch.masked_scatter(global_idx, global_idx, idx)
            td = td[idx]
            reset = reset[idx]
        if global_idx is None:
            td_out = td.replace(actions[-1])
            step = td_out.get("_step", None)
            if (self.stack_rewards or self.stack_observations) and (
                step is not None and not bool(step.any())
            ):
                # every entry is done inside the chunk: the final step is skipped, its
                # reward slot is a zero (as TorchRL)
                if self.stack_rewards:
                    for key in reward_keys:
                        td_out.set(key, torch.zeros_like(td_out.get(key)))
                td_out = self._step(None, td_out)
            return td_out
        td_out[global_idx] = td.replace(actions[-1][global_idx])
        if self.stack_rewards:
            for key in reward_keys:  # the skipped final step of the finished entries
                reward = td_out.get(key).clone()
                reward[~global_idx] = 0
                td_out.set(key, reward)
        if self.stack_rewards or self.stack_observations:
            td_out = self._step(None, td_out)
            if self.stack_rewards:
                self.rewards = list(torch.stack(rewards, -1)[global_idx].unbind(-1))
            if self.stack_observations:
                self.obs = list(torch.stack(obs, -1)[global_idx].unbind(-1))
        td_out.set("_step", global_idx)
        return td_out

    def _stacked_keys(self, parent) -> list:
        keys = list(parent.reward_keys) if self.stack_rewards else []
        if self.stack_observations:
            keys += list(parent.observation_keys)
        return keys

    def _chunk_spec(self, spec, ndim: int):
        for _ in range(self.dim):
            spec = spec.unsqueeze(ndim)
        return spec

    def transform_input_spec(self, input_spec):
        input_spec = input_spec.clone()
        actions = input_spec["full_action_spec"]
        ndim = len(input_spec.shape)
        for action_key, chunk_key in self._key_pairs(list(actions.keys(True, True))):
            if action_key not in actions.keys(True, True):
                raise KeyError(
                    f"MultiAction action_key {action_key!r} is not in the action spec; keys "
                    f"present: {sorted(map(str, actions.keys(True, True)))}"
                )
            leaf = self._chunk_spec(actions[action_key], ndim)
            if chunk_key != action_key:
                del actions[action_key]
            actions[chunk_key] = leaf
        return input_spec

    def transform_output_spec(self, output_spec):
        output_spec = output_spec.clone()
        ndim = len(output_spec.shape)
        for name, stack in (
            ("full_reward_spec", self.stack_rewards),
            ("full_observation_spec", self.stack_observations),
        ):
            if stack and name in output_spec.keys():
                spec = output_spec[name]
                for key in list(spec.keys(True, True)):
                    spec[key] = self._chunk_spec(spec[key], ndim)
        return output_spec

    def _repr_args(self) -> str:
        return (
            f"dim={self.dim}, stack_rewards={self.stack_rewards}, "
            f"stack_observations={self.stack_observations}"
        )
