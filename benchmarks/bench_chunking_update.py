"""One DiffusionBCLoss update and one ACTLoss update against the same maths in plain PyTorch.

- **DiffusionBCLoss** (diffusion policy, epsilon prediction): batch 256 of
  (observation 17, action 6); a timestep per sample in [0, 100), the DDPM forward
  noising, the default score network (256x256 SiLU MLP on ``[noisy action, obs, t]``),
  the squared error to the noise; backward, Adam step.
- **ACTLoss** (action chunking with transformers): batch 32 of (observation 14, expert
  chunk 20 x 7); an ACTModel of hidden 128, 4 heads, 2 encoder and 3 decoder layers,
  latent 32, dropout 0.1 (the paper's 256 wide 4 + 7 layers takes ~2 s an update on one
  CPU thread, where the loss's fixed cost cannot be seen), in training mode; L1 chunk
  reconstruction + 10 x KL; backward, Adam step.

Floor: the same networks called as plain modules on tensors and the same maths written
out (no TensorDict, no LossModule). Both sides are measured alternately in one run on one
thread, ``--repeats`` rounds; the figures are each side's best and the median of the
per-round ratios.

    python benchmarks/bench_chunking_update.py [--iters 20] [--act-iters 2] [--repeats 15]

Writes benchmarks/results/chunking_update.md.
"""

from __future__ import annotations

import argparse
import copy
import platform
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.core import ACTION_CHUNK_KEY
from rl.modules import ACTModel, DiffusionActor
from rl.objectives import ACTLoss, DiffusionBCLoss

sys.path.insert(0, str(Path(__file__).parent))  # the shared helpers, when imported by path
from _timing import (  # noqa: E402
    best,
    interleaved,
    paired_ratio,
    paired_table,
    results_path,
    write_report,
)

LR = 1e-4
DIFF_BATCH, OBS, ACT, STEPS = 256, 17, 6, 100
ACT_BATCH, ACT_OBS, ACT_DIM, CHUNK, KL_WEIGHT = 32, 14, 7, 20, 10.0
ACT_SIZES = {"hidden_dim": 128, "nheads": 4, "num_encoder_layers": 2, "num_decoder_layers": 3}


class DiffusionOurs:
    def __init__(self, actor: DiffusionActor):
        self.loss = DiffusionBCLoss(actor)
        self.opt = torch.optim.Adam(self.loss.parameters(), lr=LR)
        self.batch = TensorDict(
            observation=torch.randn(DIFF_BATCH, OBS),
            action=torch.randn(DIFF_BATCH, ACT),
            batch_size=[DIFF_BATCH],
        )

    def __call__(self) -> None:
        self.loss(self.batch)["loss_diffusion_bc"].backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class DiffusionPlain:
    def __init__(self, actor: DiffusionActor, batch: TensorDict):
        self.net = copy.deepcopy(actor.module.score_network)
        self.abar = torch.cumprod(1.0 - torch.linspace(1e-4, 0.02, STEPS), 0)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=LR)
        self.obs, self.action = batch["observation"], batch["action"]

    def __call__(self) -> None:
        t = torch.randint(0, STEPS, (DIFF_BATCH,))
        noise = torch.randn_like(self.action)
        abar = self.abar[t].unsqueeze(-1)
        noisy = abar.sqrt() * self.action + (1.0 - abar).sqrt() * noise
        pred = self.net(torch.cat([noisy, self.obs, t.unsqueeze(-1).float()], -1))
        F.mse_loss(pred, noise).backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class ACTOurs:
    def __init__(self, model: ACTModel):
        actor = TensorDictModule(
            model, ["observation", "action_chunk"], ["action_pred", "mu", "log_var"]
        )
        self.loss = ACTLoss(actor, kl_weight=KL_WEIGHT)
        self.opt = torch.optim.Adam(self.loss.parameters(), lr=LR)
        self.batch = TensorDict(
            {
                "observation": torch.randn(ACT_BATCH, ACT_OBS),
                ACTION_CHUNK_KEY: torch.randn(ACT_BATCH, CHUNK, ACT_DIM),
            },
            batch_size=[ACT_BATCH],
        )

    def __call__(self) -> None:
        self.loss(self.batch)["loss_act"].backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class ACTPlain:
    def __init__(self, model: ACTModel, batch: TensorDict):
        self.model = copy.deepcopy(model)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=LR)
        self.obs, self.chunk = batch["observation"], batch[ACTION_CHUNK_KEY]

    def __call__(self) -> None:
        pred, mu, log_var = self.model(self.obs, self.chunk)
        reconstruction = (pred - self.chunk).abs().mean()
        kl = (-0.5 * (1.0 + log_var - mu.pow(2) - log_var.exp())).sum(-1).mean()
        (reconstruction + KL_WEIGHT * kl).backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=20, help="DiffusionBC updates per round")
    parser.add_argument("--act-iters", type=int, default=2, help="ACT updates per round")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=results_path("chunking_update.md"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)

    diffusion = DiffusionOurs(DiffusionActor(action_dim=ACT, obs_dim=OBS, num_steps=STEPS))
    act = ACTOurs(ACTModel(ACT_OBS, ACT_DIM, CHUNK, **ACT_SIZES))
    cases = {
        "DiffusionBCLoss (batch 256, 256x256 score MLP)": {
            "plain": DiffusionPlain(diffusion.loss.actor_network, diffusion.batch),
            "ours": diffusion,
        },
        "ACTLoss (batch 32, chunk 20, ACTModel 2+3 layers x 128)": {
            "plain": ACTPlain(act.loss.actor_network.module, act.batch),
            "ours": act,
        },
    }
    rows = []
    iters = dict(zip(cases, (args.iters, args.act_iters), strict=True))
    for label, fns in cases.items():
        times = interleaved(fns, iters[label], args.repeats, warmup=2)
        fastest, paired = best(times), paired_ratio(times, "ours", "plain")
        ratio = fastest["ours"] / fastest["plain"]
        rows.append((label, fastest, ratio, paired))
        print(
            f"{label}: plain {fastest['plain'] * 1e3:.3f} ms, ours {fastest['ours'] * 1e3:.3f} ms "
            f"(best {ratio:.3f}x, median paired {paired:.3f}x)",
            flush=True,
        )

    lines = [
        "# DiffusionBCLoss and ACTLoss updates vs plain PyTorch",
        "",
        f"`python benchmarks/bench_chunking_update.py --iters {args.iters} --act-iters {args.act_iters} "
        f"--repeats {args.repeats}`; "
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, 1 thread. "
        "Each update: loss forward, backward, Adam step; the plain side calls the same "
        "networks on tensors with the maths written out. Rounds alternate the two sides in "
        "one run.",
        "",
        *paired_table("rl loss", rows),
        "",
        "Notes: the machine is shared (2 cores, several jobs); absolute times swing between runs.",
        "Each round times the plain update then the rl one; the paired ratio of a round",
        "cancels slow drifts of the load, and its median over the rounds is the headline.",
    ]
    write_report(lines, args.out)


if __name__ == "__main__":
    main()
