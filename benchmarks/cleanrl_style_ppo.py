"""The floor for PPO training speed: a CleanRL-style PPO in plain PyTorch + gymnasium.

One file, no rl import: gymnasium's ``SyncVectorEnv``, a 64x64 tanh actor and critic,
GAE as a Python loop over time, the clipped objective, Adam with a linearly annealed
learning rate. The hyperparameters are CleanRL's ``ppo.py`` defaults for CartPole, the
same as ``examples/ppo.py``'s, so ``bench_ppo_train.py`` compares the two on equal work.

    python benchmarks/cleanrl_style_ppo.py --total-frames 100000
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical


def _layer(inp: int, out: int, std: float = 2**0.5) -> nn.Linear:
    layer = nn.Linear(inp, out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, 0.0)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            _layer(obs_dim, 64), nn.Tanh(), _layer(64, 64), nn.Tanh(), _layer(64, 1, 1.0)
        )
        self.actor = nn.Sequential(
            _layer(obs_dim, 64), nn.Tanh(), _layer(64, 64), nn.Tanh(), _layer(64, n_actions, 0.01)
        )

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs)

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        dist = Categorical(logits=self.actor(obs))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(obs)


def train(
    total_frames: int = 500_000,
    num_envs: int = 4,
    num_steps: int = 128,
    lr: float = 2.5e-4,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
    num_minibatches: int = 4,
    update_epochs: int = 4,
    clip_coef: float = 0.2,
    ent_coef: float = 0.01,
    vf_coef: float = 0.5,
    max_grad_norm: float = 0.5,
    seed: int = 0,
    env_id: str = "CartPole-v1",
) -> dict:
    """Trains and returns ``{"frames", "seconds", "fps", "cpu_fps", "last_returns"}``."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.RecordEpisodeStatistics(gym.make(env_id)) for _ in range(num_envs)]
    )
    obs_dim = envs.single_observation_space.shape[0]
    agent = Agent(obs_dim, envs.single_action_space.n)
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
    batch_size = num_envs * num_steps
    minibatch_size = batch_size // num_minibatches
    obs_buf = torch.zeros(num_steps, num_envs, obs_dim)
    act_buf = torch.zeros(num_steps, num_envs, dtype=torch.int64)
    logp_buf = torch.zeros(num_steps, num_envs)
    rew_buf = torch.zeros(num_steps, num_envs)
    term_buf = torch.zeros(num_steps, num_envs)
    val_buf = torch.zeros(num_steps, num_envs)
    returns: list[float] = []

    start, cpu_start = time.perf_counter(), time.process_time()
    next_obs, _ = envs.reset(seed=seed)
    next_obs = torch.as_tensor(next_obs, dtype=torch.float32)
    next_done = torch.zeros(num_envs)
    num_updates = total_frames // batch_size
    for update in range(num_updates):
        optimizer.param_groups[0]["lr"] = lr * (1.0 - update / num_updates)
        for step in range(num_steps):
            obs_buf[step] = next_obs
            term_buf[step] = next_done
            with torch.no_grad():
                action, logp, _, value = agent.act(next_obs)
            val_buf[step] = value.flatten()
            act_buf[step] = action
            logp_buf[step] = logp
            next_obs, reward, terminated, truncated, info = envs.step(action.numpy())
            rew_buf[step] = torch.as_tensor(reward)
            next_obs = torch.as_tensor(next_obs, dtype=torch.float32)
            next_done = torch.as_tensor(np.logical_or(terminated, truncated), dtype=torch.float32)
            if "episode" in info:
                returns.extend(info["episode"]["r"][info["_episode"]].tolist())
        # GAE, a Python loop over time as CleanRL writes it (bootstraps through truncation
        # as CleanRL does, i.e. treats it as termination)
        with torch.no_grad():
            next_value = agent.value(next_obs).flatten()
            adv = torch.zeros_like(rew_buf)
            last = 0.0
            for t in reversed(range(num_steps)):
                if t == num_steps - 1:
                    nonterminal, nextv = 1.0 - next_done, next_value
                else:
                    nonterminal, nextv = 1.0 - term_buf[t + 1], val_buf[t + 1]
                delta = rew_buf[t] + gamma * nextv * nonterminal - val_buf[t]
                adv[t] = last = delta + gamma * gae_lambda * nonterminal * last
            ret = adv + val_buf
        b_obs = obs_buf.reshape(-1, obs_dim)
        b_act, b_logp = act_buf.reshape(-1), logp_buf.reshape(-1)
        b_adv, b_ret, b_val = adv.reshape(-1), ret.reshape(-1), val_buf.reshape(-1)
        for _ in range(update_epochs):
            perm = torch.randperm(batch_size)
            for s in range(0, batch_size, minibatch_size):
                idx = perm[s : s + minibatch_size]
                _, new_logp, entropy, new_value = agent.act(b_obs[idx], b_act[idx])
                ratio = (new_logp - b_logp[idx]).exp()
                mb_adv = b_adv[idx]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(
                    -mb_adv * ratio, -mb_adv * ratio.clamp(1 - clip_coef, 1 + clip_coef)
                ).mean()
                new_value = new_value.view(-1)
                v_clipped = b_val[idx] + (new_value - b_val[idx]).clamp(-clip_coef, clip_coef)
                v_loss = (
                    0.5
                    * torch.max((new_value - b_ret[idx]) ** 2, (v_clipped - b_ret[idx]) ** 2).mean()
                )
                loss = pg_loss - ent_coef * entropy.mean() + v_loss * vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), max_grad_norm)
                optimizer.step()
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    envs.close()
    frames = num_updates * batch_size
    return {
        "frames": frames,
        "seconds": seconds,
        "fps": frames / seconds,
        "cpu_fps": frames / cpu_seconds,
        "last_returns": returns[-20:],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-frames", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = train(total_frames=args.total_frames, seed=args.seed)
    recent = out["last_returns"]
    mean = sum(recent) / max(len(recent), 1)
    print(f"{out['frames']} frames in {out['seconds']:.1f} s: {out['fps']:.0f} frames/s, ", end="")
    print(f"mean of the last {len(recent)} episode returns {mean:.1f}")
