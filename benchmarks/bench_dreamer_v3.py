"""One DreamerV3 update with rl's modules and losses against plain PyTorch.

The update, batch 16 x 64 of 3x64x64 pixels: DreamerV3 image encoder, RSSM rollout
(block-GRU prior with 8 x 8 categoricals + posterior, straight-through samples), image
decoder, two-hot reward head; DreamerV3ModelLoss (balanced categorical KL with free bits,
symlog reconstruction, two-hot reward); from the 1024 posterior latents, a 15-step
imagination with the actor in DreamerEnv, the two-hot value of the imagined latents, the
TD(lambda) target and its percentile return normalisation; DreamerV3ActorLoss
(reparameterised, entropy bonus) and DreamerV3ValueLoss (two-hot); one backward of the sum
and one Adam step.

Floor: the same networks (shared weights) called as plain functions on tensors, with the
same maths written out (no TensorDict, no env). Both run alternately in one process; each
figure is the best of ``--repeats`` rounds. ``--compile`` adds both with each network
``torch.compile``-d (encoder, decoder, heads, the recurrent core and the latent heads),
the loops staying in Python.

    python benchmarks/bench_dreamer_v3.py [--iters 3] [--repeats 3] [--compile]
"""

from __future__ import annotations

import argparse
import time

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
    DreamerV3ImageDecoder,
    DreamerV3ImageEncoder,
    DreamerV3MLP,
    RSSMPosteriorV3,
    RSSMPriorV3,
    RSSMRolloutV3,
    SymExpTwoHot,
)
from rl.objectives import DreamerV3ActorLoss, DreamerV3ModelLoss, DreamerV3ValueLoss
from rl.objectives.value import ValueEstimators

B, T, HORIZON = 16, 64, 15
CATS, CLASSES, H, HID, A = 8, 8, 64, 64, 2
S = CATS * CLASSES
DEPTH, MULTS = 8, (1, 2, 2, 2)
EMB = DEPTH * MULTS[-1] * 4 * 4
BINS = 255
GAMMA, LMBDA, FREE, ALPHA, ENT = 0.99, 0.95, 1.0, 0.8, 3e-4


class ActorNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = DreamerV3MLP(S + H, 2 * A, depth=2, num_cells=HID)

    def forward(self, state, belief):
        loc, scale = self.mlp(state, belief).chunk(2, -1)
        return loc, nn.functional.softplus(scale) + 0.1


class Nets(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = DreamerV3ImageEncoder(depth=DEPTH, mults=MULTS)
        self.dec = DreamerV3ImageDecoder(S + H, depth=DEPTH, mults=MULTS)
        self.prior = RSSMPriorV3(
            action_shape=(A,),
            hidden_dim=HID,
            rnn_hidden_dim=H,
            num_categoricals=CATS,
            num_classes=CLASSES,
            action_dim=A,
            recurrent_model="block_gru",
        )
        self.post = RSSMPosteriorV3(
            hidden_dim=HID,
            num_categoricals=CATS,
            num_classes=CLASSES,
            rnn_hidden_dim=H,
            obs_embed_dim=EMB,
            use_rms_norm=True,
        )
        self.reward = DreamerV3MLP(S + H, BINS, depth=2, num_cells=HID, outscale=0.0)
        self.two_hot = SymExpTwoHot(BINS)
        self.actor = ActorNet()
        self.value = DreamerV3MLP(S + H, BINS, depth=2, num_cells=HID, outscale=0.0)


def build_rl(nets):
    nx = lambda k: ("next", k)  # noqa: E731
    prior = TensorDictModule(
        nets.prior, ["state", "belief", "action"], [nx("prior_logits"), nx("state"), nx("belief")]
    )
    post = TensorDictModule(
        nets.post, [nx("belief"), nx("encoded_latents")], [nx("posterior_logits"), nx("state")]
    )
    world_model = TensorDictSequential(
        TensorDictModule(nets.enc, [nx("pixels")], [nx("encoded_latents")]),
        RSSMRolloutV3(prior, post),
        TensorDictModule(nets.dec, [nx("state"), nx("belief")], [nx("reco_pixels")]),
        TensorDictModule(nets.reward, [nx("state"), nx("belief")], [nx("reward_logits")]),
        TensorDictModule(nets.two_hot, [nx("reward_logits")], [nx("reward")]),
    )
    env_model = TensorDictSequential(
        TensorDictModule(nets.prior, ["state", "belief", "action"], ["_", "state", "belief"]),
        TensorDictModule(nets.reward, ["state", "belief"], ["reward_logits"]),
        TensorDictModule(nets.two_hot, ["reward_logits"], ["reward"]),
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
    value = TensorDictSequential(
        TensorDictModule(nets.value, ["state", "belief"], ["state_value_logits"]),
        TensorDictModule(nets.two_hot, ["state_value_logits"], ["state_value"]),
    )
    model_loss = DreamerV3ModelLoss(world_model, num_reward_bins=BINS, free_bits=FREE)
    actor_loss = DreamerV3ActorLoss(actor, value, env, imagination_horizon=HORIZON)
    actor_loss.make_value_estimator(ValueEstimators.TDLambda, gamma=GAMMA, lmbda=LMBDA)
    value_loss = DreamerV3ValueLoss(
        value, value_loss="two_hot", num_value_bins=BINS, actor_loss=actor_loss
    )

    def update(data):
        lm, wm = model_loss(data)
        start = TensorDict(
            state=wm["next", "state"].reshape(-1, S),
            belief=wm["next", "belief"].reshape(-1, H),
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

    return update, actor_loss


def _symlog(x):
    return torch.sign(x) * torch.log1p(x.abs())


def _two_hot_ce(logits, target, bins):
    target = target.clamp(bins[0], bins[-1])
    low = (torch.searchsorted(bins, target.contiguous(), right=True) - 1).clamp(0, len(bins) - 2)
    w_high = (target - bins[low]) / (bins[low + 1] - bins[low])
    log_p = torch.log_softmax(logits, -1)
    lp_low = log_p.gather(-1, low.unsqueeze(-1)).squeeze(-1)
    lp_high = log_p.gather(-1, (low + 1).unsqueeze(-1)).squeeze(-1)
    return -((1 - w_high) * lp_low + w_high * lp_high)


def _decode(logits, bins):
    return (torch.softmax(logits, -1) * bins).sum(-1, keepdim=True)


def _sample(logits):
    probs = torch.softmax(logits, -1)
    cdf = probs.detach().cumsum(-1)  # inverse-cdf draw, as rl's RSSM samples
    index = torch.searchsorted(cdf, torch.rand(*probs.shape[:-1], 1), right=True)
    index = index.clamp_max_(CLASSES - 1)
    one_hot = torch.zeros_like(probs).scatter_(-1, index, 1.0)
    return (probs + (one_hot - probs).detach()).flatten(-2)


def build_plain(nets, retnorm):
    bins = nets.two_hot.bins
    prior, post = nets.prior, nets.post
    head = prior.rnn_to_prior_projector

    def update(data):
        pixels, action, reward = data["next", "pixels"], data["action"], data["next", "reward"]
        emb = nets.enc(pixels)
        state, belief = data["state"][:, 0], data["belief"][:, 0]
        pl, ql, st, bl = [], [], [], []
        for t in range(T):
            belief = prior.rnn(state, belief, action[:, t])
            p_logits = head(belief).unflatten(-1, (CATS, CLASSES))
            _sample(p_logits)  # the prior's sample (unused, as in the rollout)
            q_logits = post.obs_rnn_to_post_projector(torch.cat([belief, emb[:, t]], -1))
            q_logits = q_logits.unflatten(-1, (CATS, CLASSES))
            state = _sample(q_logits)
            pl.append(p_logits), ql.append(q_logits), st.append(state), bl.append(belief)
        pl, ql, st, bl = (torch.stack(x, 1) for x in (pl, ql, st, bl))
        q, p = torch.softmax(ql, -1).clamp_min(1e-8), torch.softmax(pl, -1).clamp_min(1e-8)
        kl_prior = (q.detach() * (q.detach().log() - p.log())).sum(-1).clamp_min(FREE).mean()
        kl_post = (q * (q.log() - p.detach().log())).sum(-1).clamp_min(FREE).mean()
        kl = ALPHA * kl_prior + (1 - ALPHA) * kl_post
        reco = (_symlog(nets.dec(st, bl)) - _symlog(pixels)).square().sum((-3, -2, -1)).mean()
        rew = _two_hot_ce(nets.reward(st, bl), reward.squeeze(-1), bins).mean()
        # imagination, the world model and the critic held out
        state, belief = st.reshape(-1, S).detach(), bl.reshape(-1, H).detach()
        held = [*prior.parameters(), *nets.reward.parameters(), *nets.value.parameters()]
        for p_ in held:
            p_.requires_grad_(False)
        s_in, b_in, locs, scales, rs, vs = [], [], [], [], [], []
        for _ in range(HORIZON):
            s_in.append(state), b_in.append(belief)
            loc, scale = nets.actor(state, belief)
            a = loc + scale * torch.randn_like(loc)
            locs.append(loc), scales.append(scale)
            belief = prior.rnn(state, belief, a)
            state = _sample(head(belief).unflatten(-1, (CATS, CLASSES)))
            rs.append(_decode(nets.reward(state, belief), bins))
            vs.append(_decode(nets.value(state, belief), bins))
        for p_ in held:
            p_.requires_grad_(True)
        r, v = torch.stack(rs, 1), torch.stack(vs, 1)
        g, targets = v[:, -1], []
        for t in reversed(range(HORIZON)):
            g = r[:, t] + GAMMA * ((1 - LMBDA) * v[:, t] + LMBDA * g)
            targets.append(g)
        target = torch.stack(targets[::-1], 1)
        disc = (GAMMA ** torch.arange(HORIZON, dtype=target.dtype)).reshape(HORIZON, 1)
        with torch.no_grad():
            low, high = torch.quantile(target.reshape(-1), torch.tensor([0.05, 0.95]))
            retnorm.low.lerp_(low.reshape(1), 0.01)
            retnorm.high.lerp_(high.reshape(1), 0.01)
        scale_ = (retnorm.high - retnorm.low).clamp_min(1.0)
        s_in, b_in = torch.stack(s_in, 1).detach(), torch.stack(b_in, 1).detach()
        loc, scale = nets.actor(s_in, b_in)
        entropy = torch.distributions.Normal(loc, scale).entropy().sum(-1, keepdim=True)
        actor_loss = -(disc * target / scale_).mean() - ENT * (disc * entropy).mean()
        logits = nets.value(s_in, b_in)
        value_loss = disc.squeeze(-1) * _two_hot_ce(logits, target.detach().squeeze(-1), bins)
        return kl + reco + rew + actor_loss + value_loss.mean()

    return update


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--compile", action="store_true", help="also time both with torch.compile'd networks"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
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
    rl_update, actor_loss = build_rl(nets)
    plain_update = build_plain(nets, actor_loss.retnorm)
    variants = {"rl": rl_update, "plain torch": plain_update}
    if args.compile:
        compiled = Nets()
        compiled.load_state_dict(nets.state_dict())
        for name in ("enc", "dec", "reward", "actor", "value"):
            getattr(compiled, name).compile()
        compiled.prior.rnn.compile()
        compiled.post.obs_rnn_to_post_projector.compile()
        compiled.prior.rnn_to_prior_projector.compile()
        compiled_rl, compiled_actor_loss = build_rl(compiled)
        variants["rl (compiled networks)"] = compiled_rl
        variants["plain torch (compiled networks)"] = build_plain(
            compiled, compiled_actor_loss.retnorm
        )
        opt.add_param_group({"params": list(compiled.parameters())})
    # the process's CPU time as well as the wall clock: on a shared machine the wall
    # clock of a single-threaded update mostly measures the other processes
    best = {k: [float("inf"), float("inf")] for k in variants}
    for _ in range(args.repeats):
        for name, fn in variants.items():
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(args.iters):
                opt.zero_grad()
                fn(data.clone()).backward()
                opt.step()
            wall = (time.perf_counter() - t0) / args.iters
            cpu = (time.process_time() - c0) / args.iters
            best[name] = [min(best[name][0], wall), min(best[name][1], cpu)]
    floor_wall, floor_cpu = best["plain torch"]
    print(
        f"DreamerV3 update, batch {B}x{T} pixels 3x64x64, {CATS}x{CLASSES} latents, "
        f"horizon {HORIZON}, {args.threads} thread(s)"
    )
    for name, (wall, cpu) in best.items():
        print(
            f"{name:>24}: wall {wall * 1e3:8.1f} ms ({wall / floor_wall:.2f}x)   "
            f"cpu {cpu * 1e3:8.1f} ms ({cpu / floor_cpu:.2f}x plain torch)"
        )


if __name__ == "__main__":
    main()
