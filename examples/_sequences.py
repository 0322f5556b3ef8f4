"""The saved dataset as the sequences ``decision_transformer.py``'s actor reads: episodes
of (standardised observation, action, scaled return-to-go), zero-padded windows of the
last ``context`` steps drawn from them, Online DT's replay of the best episodes, and the
transforms that stack the same sequences in an env."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tensordict import TensorDict

from rl.envs import Compose
from rl.envs.transforms import (
    CatFrames,
    ObservationNorm,
    Reward2GoTransform,
    TargetReturn,
    TensorDictPrimer,
    UnsqueezeTransform,
)

sys.path.insert(0, str(Path(__file__).parent))
from _offline_data import episode_bounds  # noqa: E402

__all__ = [
    "KEYS",
    "STACKED",
    "Windows",
    "acting_transform",
    "as_sequence",
    "best_episodes_first_replaced",
    "episodes",
    "relabelled",
]

#: the actor's input sequences: what the windows hold; in an env, CatFrames stacks the
#: first two and "return_to_go_cat", which the acting policy scales into the third
KEYS = ("observation_cat", "action_cat", "return_to_go_scaled")
STACKED = ["observation_cat", "action_cat", "return_to_go_cat"]


def episodes(
    buffer, loc: torch.Tensor, scale: torch.Tensor, reward_scale: float
) -> list[TensorDict]:
    """The dataset cut into episodes (at ``("next", "done")``), each with its return-to-go
    (times ``reward_scale``) and its observations standardised by ``loc`` and ``scale``,
    ``[T]`` each."""
    data = buffer[: len(buffer)].exclude("index")
    data = Reward2GoTransform(
        gamma=1.0, in_keys=[("next", "reward")], out_keys=["return_to_go"]
    ).inv(data)
    data["observation"] = (data["observation"] - loc) / scale
    return [as_sequence(data[s : e + 1], reward_scale) for s, e in episode_bounds(data)]


def as_sequence(episode: TensorDict, reward_scale: float) -> TensorDict:
    """One episode's observation, action and scaled return-to-go under the actor's keys."""
    return TensorDict(
        {
            KEYS[0]: episode["observation"],
            KEYS[1]: episode["action"],
            KEYS[2]: episode["return_to_go"] * reward_scale,
        },
        batch_size=episode.batch_size,
    )


def relabelled(rollout: TensorDict, reward_scale: float) -> TensorDict:
    """An episode the policy collected (its observations standardised by the env), as a
    sequence under the actor's keys with the return-to-go it actually reached (Online
    DT's hindsight relabelling), ``[T]``."""
    r2g = Reward2GoTransform(gamma=1.0, in_keys=[("next", "reward")], out_keys=["return_to_go"])
    rollout = r2g.inv(rollout.select("observation", "action", ("next", "reward"), ("next", "done")))
    return as_sequence(rollout, reward_scale)


def best_episodes_first_replaced(
    data: list[TensorDict], reward_scale: float, size: int, context: int
) -> tuple[Windows, list[float]]:
    """Zheng et al.'s replay: the ``size`` episodes of ``data`` with the highest return,
    lowest first (the first that ``replace`` in FIFO order removes), and their returns."""
    returns = [episode[KEYS[2]][0].item() / reward_scale for episode in data]
    kept = sorted(range(len(data)), key=lambda i: returns[i])[-size:]
    return Windows([data[i] for i in kept], context), [returns[i] for i in kept]


class Windows:
    """Episodes held zero-padded in one ``[E, K - 1 + T_max]`` TensorDict; ``sample(B)``
    draws ``B`` windows ``[B, K]`` ending at uniformly drawn steps."""

    def __init__(self, episodes: list[TensorDict], context: int) -> None:
        self.context = context
        self.length = max(len(e) for e in episodes)
        self.store = torch.stack([self._pad(e) for e in episodes])
        self.lengths = torch.tensor([len(e) for e in episodes])

    def _pad(self, episode: TensorDict) -> TensorDict:
        pad = self.context - 1 + self.length - len(episode)
        zeros = episode[:1].apply(torch.zeros_like).expand(pad).clone()
        return torch.cat([zeros[: self.context - 1], episode, zeros[self.context - 1 :]])

    def replace(self, index: int, episode: TensorDict) -> None:
        """Puts ``episode`` in the place of the ``index``-th one."""
        self.store[index] = self._pad(episode[: self.length])
        self.lengths[index] = min(len(episode), self.length)

    def sample(self, batch_size: int) -> TensorDict:
        ep = torch.randint(len(self.lengths), (batch_size,))
        end = (torch.rand(batch_size) * self.lengths[ep]).long()  # last step, episode time
        steps = end[:, None] + torch.arange(self.context)  # padded time: K - 1 zeros first
        window = self.store[ep[:, None], steps]
        window["action"] = window[KEYS[1]]  # the targets: the window's own actions
        return window


def acting_transform(cfg, obs_norm: ObservationNorm, target: float, action_spec) -> Compose:
    """What an env needs for the policy: standardised observations, the return-to-go
    counting down from ``target``, the previous action, the last ``context`` steps of each."""
    return Compose(
        obs_norm.clone(),
        TargetReturn(target, out_keys=["return_to_go"]),
        TensorDictPrimer(action_spec.clone()),  # carries the last action
        UnsqueezeTransform(-2, in_keys=["observation", "action", "return_to_go"], out_keys=STACKED),
        CatFrames(N=cfg.context, dim=-2, in_keys=STACKED, padding="constant"),
    )
