"""One Dreamer (v1) update with rl's modules and losses against plain PyTorch.

The update, batch 16 x 64 of 3x64x64 pixels: encode, RSSM rollout (prior + posterior),
decode, reward; DreamerModelLoss (KL with free nats, reconstruction, reward); from the
1024 posterior latents, a 15-step imagination with the actor in DreamerEnv, the value of
the imagined latents, the TD(lambda) target; DreamerActorLoss and DreamerValueLoss; one
backward of the sum and one Adam step.

Floor: the same networks (shared weights) called as plain functions on tensors, with the
same maths written out (no TensorDict, no env). Both run alternately in one process;
each figure is the best of ``--repeats`` rounds.

    python benchmarks/bench_dreamer_update.py [--iters 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from tensordict import TensorDict
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
)
from torch import nn

from rl.core import Composite, Unbounded
from rl.envs import DreamerEnv
from rl.modules import (
    MLP,
    DreamerActor,
    ObsDecoder,
    ObsEncoder,
    RSSMPosterior,
    RSSMPrior,
    RSSMRollout,
)
from rl.objectives import DreamerActorLoss, DreamerModelLoss, DreamerValueLoss
from rl.objectives.value import ValueEstimators

sys.path.insert(0, str(Path(__file__).parent))  # the shared helpers, when imported by path
from _timing import best, interleaved  # noqa: E402

B, T, HORIZON = 16, 64, 15
S, H, HID, A, CH = 30, 64, 64, 2, 8
EMB = CH * 8 * 2 * 2
GAMMA, LMBDA, FREE = 0.99, 0.95, 3.0


class Nets(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = ObsEncoder(channels=CH, in_channels=3)
        self.dec = ObsDecoder(channels=CH, latent_dim=S + H)
        self.prior = RSSMPrior(
            Unbounded(A), hidden_dim=HID, rnn_hidden_dim=H, state_dim=S, action_dim=A
        )
        self.post = RSSMPosterior(hidden_dim=HID, state_dim=S, rnn_hidden_dim=H, obs_embed_dim=EMB)
        self.reward = MLP(in_features=S + H, out_features=1, depth=2, num_cells=HID)
        self.actor = DreamerActor(A, depth=2, num_cells=HID)
        self.value = MLP(in_features=S + H, out_features=1, depth=2, num_cells=HID)


def build_rl(nets):
    nx = lambda k: ("next", k)  # noqa: E731
    prior = TensorDictModule(
        nets.prior,
        ["state", "belief", "action"],
        [nx("prior_mean"), nx("prior_std"), "_", nx("belief")],
    )
    post = TensorDictModule(
        nets.post,
        [nx("belief"), nx("encoded_latents")],
        [nx("posterior_mean"), nx("posterior_std"), nx("state")],
    )
    world_model = TensorDictSequential(
        TensorDictSequential(
            TensorDictModule(nets.enc, [nx("pixels")], [nx("encoded_latents")]),
            RSSMRollout(prior, post),
            TensorDictModule(nets.dec, [nx("state"), nx("belief")], [nx("reco_pixels")]),
        ),
        TensorDictModule(nets.reward, [nx("state"), nx("belief")], [nx("reward")]),
    )
    env_model = TensorDictSequential(
        TensorDictModule(nets.prior, ["state", "belief", "action"], ["_", "_", "state", "belief"]),
        TensorDictModule(nets.reward, ["state", "belief"], ["reward"]),
    )
    env = DreamerEnv(env_model, prior_shape=(S,), belief_shape=(H,))
    env.observation_spec = Composite(state=Unbounded(S), belief=Unbounded(H))
    env.state_spec = Composite(state=Unbounded(S), belief=Unbounded(H))
    env.action_spec = Unbounded(A)
    env.reward_spec = Unbounded(1)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(nets.actor, ["state", "belief"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(
            ["loc", "scale"], ["action"], distribution_class=torch.distributions.Normal
        ),
    )
    value = TensorDictModule(nets.value, ["state", "belief"], ["state_value"])
    model_loss = DreamerModelLoss(world_model, free_nats=FREE)
    actor_loss = DreamerActorLoss(actor, value, env, imagination_horizon=HORIZON)
    actor_loss.make_value_estimator(ValueEstimators.TDLambda, gamma=GAMMA, lmbda=LMBDA)
    value_loss = DreamerValueLoss(value, gamma=GAMMA)

    def update(data):
        lm, wm = model_loss(data)
        start = TensorDict(
            state=wm["next", "state"].reshape(-1, S).detach(),
            belief=wm["next", "belief"].reshape(-1, H).detach(),
            batch_size=[B * T],
        )
        la, fake = actor_loss(start)
        lv, _ = value_loss(fake.detach())
        loss = (
            lm["loss_model_kl"]
            + lm["loss_model_reco"]
            + lm["loss_model_reward"]
            + la["loss_actor"]
            + lv["loss_value"]
        )
        return loss.sum()

    return update


def build_plain(nets):
    def update(data):
        pixels, action, reward = data["next", "pixels"], data["action"], data["next", "reward"]
        emb = nets.enc(pixels)
        state, belief = torch.zeros(B, S), torch.zeros(B, H)
        pm, ps, qm, qs, st, bl = [], [], [], [], [], []
        for t in range(T):
            m, s_, _, belief = nets.prior(state, belief, action[:, t])
            m2, s2, state = nets.post(belief, emb[:, t])
            (
                pm.append(m),
                ps.append(s_),
                qm.append(m2),
                qs.append(s2),
                st.append(state),
                bl.append(belief),
            )
        pm, ps, qm, qs, st, bl = (torch.stack(x, 1) for x in (pm, ps, qm, qs, st, bl))
        kl = (torch.log(ps / qs) + (qs**2 + (pm - qm) ** 2) / (2 * ps**2) - 0.5).sum(-1)
        kl = kl.clamp_min(FREE).mean()
        reco = ((nets.dec(st, bl) - pixels) ** 2).sum((-3, -2, -1)).mean()
        rew = ((nets.reward(st, bl) - reward) ** 2).mean()
        # imagination
        state, belief = st.reshape(-1, S).detach(), bl.reshape(-1, H).detach()
        for p in (
            list(nets.prior.parameters())
            + list(nets.reward.parameters())
            + list(nets.value.parameters())
        ):
            p.requires_grad_(False)
        s_in, b_in, rs, vs = [], [], [], []
        for _ in range(HORIZON):
            s_in.append(state), b_in.append(belief)
            loc, scale = nets.actor(state, belief)
            a = loc + scale * torch.randn_like(loc)
            _, _, state, belief = nets.prior(state, belief, a)
            rs.append(nets.reward(state, belief))
            vs.append(nets.value(state, belief))
        for p in (
            list(nets.prior.parameters())
            + list(nets.reward.parameters())
            + list(nets.value.parameters())
        ):
            p.requires_grad_(True)
        r, v = torch.stack(rs, 1), torch.stack(vs, 1)
        g, targets = v[:, -1], []
        for t in reversed(range(HORIZON)):
            nxt = v[:, t] if t == HORIZON - 1 else (1 - LMBDA) * v[:, t] + LMBDA * g
            g = r[:, t] + GAMMA * nxt
            targets.append(g)
        target = torch.stack(targets[::-1], 1)
        disc = (GAMMA ** torch.arange(HORIZON, dtype=target.dtype)).reshape(HORIZON, 1)
        actor_loss = -(target * disc).sum((-2, -1)).mean()
        pred = nets.value(torch.stack(s_in, 1).detach(), torch.stack(b_in, 1).detach())
        value_loss = (disc * (pred - target.detach()) ** 2).sum((-2, -1)).mean()
        return kl + reco + rew + actor_loss + value_loss

    return update


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--compile", action="store_true", help="also time torch.compile of the plain update"
    )
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    nets = Nets()
    opt = torch.optim.Adam(nets.parameters(), lr=1e-4)
    data = TensorDict(
        {
            "action": torch.rand(B, T, A) * 2 - 1,
            "state": torch.zeros(B, T, S),
            "belief": torch.zeros(B, T, H),
            ("next", "pixels"): torch.rand(B, T, 3, 64, 64),
            ("next", "reward"): torch.randn(B, T, 1),
        },
        [B, T],
    )
    variants = {"rl": build_rl(nets), "plain torch": build_plain(nets)}
    if args.compile:
        variants["plain torch (compiled)"] = torch.compile(build_plain(nets))

    def step(fn):
        opt.zero_grad()
        fn(data.clone()).backward()
        opt.step()

    steps = {name: lambda fn=fn: step(fn) for name, fn in variants.items()}
    fastest = best(interleaved(steps, args.iters, args.repeats, warmup=0))
    floor = fastest["plain torch"]
    print(f"Dreamer update, batch {B}x{T} pixels 3x64x64, horizon {HORIZON}, 1 thread")
    for name, sec in fastest.items():
        print(f"{name:>24}: {sec * 1e3:8.1f} ms/update  ratio to plain torch {sec / floor:.2f}x")


if __name__ == "__main__":
    main()
