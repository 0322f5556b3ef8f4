"""Cost of a MAPPOLoss / IPPOLoss update step against the same update in plain PyTorch.

One update step on a minibatch of 4096 environment steps of 4 agents (the minibatch of the
examples' ``balance`` preset, BenchMARL's on-policy setting; ``--batch`` lists the sizes; 1024 is also run): the
loss forward,
backward, gradient-norm clipping (0.5) and an Adam step. Actor: a ``MultiAgentMLP``
(parameters shared by the agents, 64x64 tanh) writing a TanhNormal over 2 actions from an
18-dimensional observation; critic: a ``MultiAgentMLP`` that reads every agent's
observation (MAPPO) or its own (IPPO). The advantage is standardized per agent and the
critic loss is measured through a ``PopArtValueNorm`` (its statistics updated each step).

- rl: ``MAPPOLoss`` / ``IPPOLoss(actor, critic, value_norm=PopArtValueNorm(shape=1),
  critic_coeff=0.5, log_explained_variance=False)`` on a TensorDict minibatch;
- floor: the same networks (weights copied into plain ``nn.Sequential``), the same math
  (per-agent advantage standardization, TanhNormal log-density, one-sample entropy
  estimate, clipped surrogate, PopArt update and normalised smooth-L1 critic loss, and the
  diagnostics the loss reports: clip fraction, approximate KL, effective sample size over
  the first batch dimension, largest and mean ratio, mean entropy; the scale's lower
  bound of the NormalParamExtractor) in
  plain PyTorch on tensors.

Both run on one thread, interleaved in blocks; the median block is reported.

Usage:
    python benchmarks/bench_mappo_update.py [--steps 30] [--blocks 9] [--batch 4096]
"""

from __future__ import annotations

import argparse
import copy
import math
import platform
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

from rl.modules import (
    MultiAgentMLP,
    NormalParamExtractor,
    PopArtValueNorm,
    ProbabilisticActor,
    TanhNormal,
    TensorDictModule,
)
from rl.objectives import IPPOLoss, MAPPOLoss

sys.path.insert(0, str(Path(__file__).parent))  # the shared helpers, when imported by path
from _timing import interleaved, markdown_table, median, results_path, write_report  # noqa: E402

N_AGENTS, OBS, ACT, BATCH, CELLS = 4, 18, 2, 4096, 64
CLIP, ENT, VF, MAX_GRAD, BETA, EPS = 0.2, 0.01, 0.5, 0.5, 0.99999, 1e-5
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def make_rl(centralized: bool):
    torch.manual_seed(0)
    mlp = dict(depth=2, num_cells=CELLS, activation_class=nn.Tanh)
    actor_net = nn.Sequential(
        MultiAgentMLP(OBS, 2 * ACT, N_AGENTS, centralized=False, share_params=True, **mlp),
        NormalParamExtractor(),
    )
    actor = ProbabilisticActor(
        TensorDictModule(
            actor_net, [("agents", "observation")], [("agents", "loc"), ("agents", "scale")]
        ),
        in_keys=[("agents", "loc"), ("agents", "scale")],
        out_keys=[("agents", "action")],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )
    critic = TensorDictModule(
        MultiAgentMLP(OBS, 1, N_AGENTS, centralized=centralized, share_params=True, **mlp),
        [("agents", "observation")],
        [("agents", "state_value")],
    )
    cls = MAPPOLoss if centralized else IPPOLoss
    loss = cls(
        actor,
        critic,
        value_norm=PopArtValueNorm(shape=1),
        clip_epsilon=CLIP,
        entropy_coeff=ENT,
        critic_coeff=VF,
        log_explained_variance=False,
    )
    loss.set_keys(value=("agents", "state_value"), action=("agents", "action"))
    return actor, critic, loss


class PlainAgent(nn.Module):
    """The same update on tensors ``[B, n_agents, ...]`` with plain modules and buffers."""

    def __init__(self, actor_mlp, critic_mlp, scale_bias, min_scale, scale_lb, centralized) -> None:
        super().__init__()
        self.actor = actor_mlp
        self.critic = critic_mlp
        self.scale_bias, self.min_scale, self.centralized = scale_bias, min_scale, centralized
        self.scale_lb = scale_lb
        self.register_buffer("mean", torch.zeros(1))
        self.register_buffer("mean_sq", torch.zeros(1))
        self.register_buffer("debias", torch.zeros(()))

    def loss(self, obs, action, old_log_prob, advantage, returns):
        # advantage, returns: [B, n_agents, 1]; standardized per agent
        adv = (advantage - advantage.mean((0, 2), keepdim=True)) / advantage.std(
            (0, 2), keepdim=True
        ).clamp_min(1e-6)
        loc, scale_raw = self.actor(obs).chunk(2, -1)
        scale = (F.softplus(scale_raw + self.scale_bias) + self.min_scale).clamp_min(self.scale_lb)
        eps = torch.finfo(action.dtype).eps
        x = action.clamp(-1 + eps, 1 - eps).atanh()
        log_prob = self._log_prob_pre_tanh(loc, scale, x)  # [B, n_agents]
        entropy = -self._log_prob_pre_tanh(loc, scale, loc + torch.randn_like(loc) * scale)
        log_ratio = (log_prob - old_log_prob).unsqueeze(-1)
        ratio = log_ratio.exp()
        clipped = ratio.clamp(1 - CLIP, 1 + CLIP)
        gain = torch.minimum(ratio * adv, clipped * adv)
        with torch.no_grad():  # the diagnostics the loss reports
            lw = log_ratio.squeeze(-1)
            self.diagnostics = (
                (clipped != ratio).float().mean(),  # clip fraction
                -log_ratio.mean(),  # approximate KL
                (2 * lw.logsumexp(0) - (2 * lw).logsumexp(0)).exp() / lw.shape[0],  # ESS
                ratio.max(),
                ratio.mean(),
                entropy.mean(),
            )
        if self.centralized:
            value = self.critic(obs.flatten(-2, -1)).unsqueeze(-2).expand(returns.shape)
        else:
            value = self.critic(obs)
        with torch.no_grad():  # PopArt: debiased moving averages of the returns' moments
            self.mean.mul_(BETA).add_(returns.mean(), alpha=1 - BETA)
            self.mean_sq.mul_(BETA).add_(returns.square().mean(), alpha=1 - BETA)
            self.debias.mul_(BETA).add_(1 - BETA)
            w = self.debias.clamp_min(EPS)
            mean = self.mean / w
            std = (self.mean_sq / w - mean.square()).clamp_min(EPS).sqrt()
        v_loss = F.smooth_l1_loss((value - mean) / std, (returns - mean) / std)
        return -gain.mean(), -ENT * entropy.mean(), VF * v_loss

    @staticmethod
    def _log_prob_pre_tanh(loc, scale, x):
        z = (x - loc) / scale
        lp = -0.5 * z.pow(2) - scale.log() - HALF_LOG_2PI
        lp = lp - 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))
        return lp.sum(-1)


def make_batch(actor, batch: int):
    g = torch.Generator().manual_seed(1)
    td = TensorDict(
        {"agents": {"observation": torch.randn(batch, N_AGENTS, OBS, generator=g)}}, [batch]
    )
    with torch.no_grad():
        td = actor(td)
    # a collecting policy a little off the current one: ratios away from 1
    log_prob = td["agents", "action_log_prob"]
    td["agents", "action_log_prob"] = log_prob + 0.2 * torch.randn(log_prob.shape, generator=g)
    td["advantage"] = torch.randn(batch, N_AGENTS, 1, generator=g)
    td["value_target"] = 3.0 * torch.randn(batch, N_AGENTS, 1, generator=g) + 1.0
    return td.select(
        ("agents", "observation"),
        ("agents", "action"),
        ("agents", "action_log_prob"),
        "advantage",
        "value_target",
    )


def step_fn(params, optim, forward, total):
    params = list(params)

    def step(arg):
        loss = total(forward(arg))
        optim.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, MAX_GRAD)
        optim.step()

    return step


def build(centralized: bool, batch: int = BATCH):
    actor, critic, loss = make_rl(centralized)
    extractor = actor.module[0].module[1]
    plain = PlainAgent(
        copy.deepcopy(actor.module[0].module[0].get_stateful_net()),
        copy.deepcopy(critic.module.get_stateful_net()),
        float(extractor.scale_mapping.bias),
        float(extractor.scale_mapping.min_val),
        float(extractor.scale_lb),
        centralized,
    )
    td = make_batch(actor, batch)
    tensors = (
        td["agents", "observation"],
        td["agents", "action"],
        td["agents", "action_log_prob"],
        td["advantage"],
        td["value_target"],
    )
    check_equal(loss, plain, td, tensors)
    return loss, plain, td, tensors


def check_equal(loss, plain, td, tensors) -> None:
    """Same weights, same numbers (the entropy draws are random), statistics updated once."""
    with torch.no_grad():
        out = loss(td)
        objective, _, critic = plain.loss(*tensors)
    torch.testing.assert_close(out["loss_objective"], objective, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out["loss_critic"], critic, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loss.value_norm.running_mean, plain.mean)
    # the diagnostics the floor computes are the loss's (the entropy draws differ)
    for key, value in zip(
        ("clip_fraction", "kl_approx", "ESS", "max_ratio", "mean_ratio"), plain.diagnostics
    ):
        torch.testing.assert_close(out[key], value, rtol=1e-4, atol=1e-5)


def run(batch: int, steps: int, blocks: int) -> list[str]:
    """The table of one minibatch size."""

    def total(out):
        return out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]

    candidates = {}
    for name, centralized in (("MAPPOLoss", True), ("IPPOLoss", False)):
        loss, plain, td, tensors = build(centralized, batch)
        opt_rl = torch.optim.Adam(loss.parameters(), lr=3e-4)
        opt_plain = torch.optim.Adam(plain.parameters(), lr=3e-4)
        candidates[f"plain {name}"] = (
            step_fn(plain.parameters(), opt_plain, lambda t, p=plain: p.loss(*t), sum),
            tensors,
        )
        candidates[f"rl {name}"] = (step_fn(loss.parameters(), opt_rl, loss, total), td)
    # CPU seconds per step of each candidate: median over interleaved blocks
    res = median(
        interleaved(
            {name: partial(fn, arg) for name, (fn, arg) in candidates.items()},
            steps,
            blocks,
            clock=time.process_time,
        )
    )
    table = []
    for name in ("MAPPOLoss", "IPPOLoss"):
        floor = res[f"plain {name}"]
        for kind in ("plain", "rl"):
            secs = res[f"{kind} {name}"]
            label = f"plain PyTorch ({name} floor)" if kind == "plain" else f"rl {name}, eager"
            target = "<= 1.10x" if kind == "rl" else ""
            table.append(
                [label, f"{secs * 1e3:.2f}", f"{1 / secs:.0f}", f"{secs / floor:.3f}x", target]
            )
    header = ["update", "ms / step", "steps / s", "ratio to its plain floor", "target"]
    return [
        f"Minibatch of {batch} environment steps ({batch * N_AGENTS} agent steps):",
        "",
        *markdown_table(header, table, align="---:"),
        "",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="update steps per timed block")
    parser.add_argument("--blocks", type=int, default=9, help="interleaved blocks per candidate")
    parser.add_argument(
        "--batch",
        type=int,
        nargs="+",
        default=[BATCH, 1024],
        help="environment steps per minibatch",
    )
    parser.add_argument("--out", default=results_path("mappo_update.md"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    lines = [
        "# MAPPO / IPPO update benchmark",
        "",
        f"One update step on a minibatch of environment steps of {N_AGENTS} agents: loss "
        "forward, backward, grad-norm clip, Adam; MultiAgentMLP actor (shared parameters, "
        f"64x64 tanh, TanhNormal over {ACT} actions, observation {OBS}) and MultiAgentMLP "
        "critic (centralised for MAPPO, per agent for IPPO); advantage standardized per agent, "
        "critic loss through PopArtValueNorm. One thread; CPU time of the process, median of "
        f"{args.blocks} interleaved blocks of {args.steps} steps. Floor: the same update in "
        "plain PyTorch on tensors with the same weights (values checked equal before timing). "
        f"{BATCH} environment steps is the minibatch of the examples' `balance` preset "
        "(BenchMARL's); at smaller minibatches the loss's fixed cost (about 1 ms a step: "
        "TensorDict reads, the distribution object, diagnostics) weighs more.",
        "",
    ]
    for batch in args.batch:
        lines += run(batch, args.steps, args.blocks)
    lines += [
        f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python "
        f"{platform.python_version()}, torch {torch.__version__}, threads: {torch.get_num_threads()}.",
    ]
    write_report(lines, args.out)


if __name__ == "__main__":
    main()
