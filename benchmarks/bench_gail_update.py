"""One GAIL discriminator update with rl.objectives.GAILLoss against plain PyTorch.

The update: the discriminator (a 256x256 ReLU MLP on the concatenated observation and
action, sigmoid output) scores expert and collected pairs in one call; binary
cross-entropy (expert = 1, collected = 0), optionally the WGAN-GP gradient penalty at a
random interpolation of the two (a second forward and a double backward); one backward
and one Adam step. Batch 256, HalfCheetah-sized (observation 17, action 6).

Floor: the same maths written in plain PyTorch (one ``nn.Module``, tensors in, no
TensorDict). Both are measured alternately in the same run on one thread, ``--repeats``
rounds; the figures are each side's best and the median over rounds of the paired ratio
(the headline: it cancels slow drifts of a shared machine's load).

    python benchmarks/bench_gail_update.py [--iters 50] [--repeats 7]

Writes benchmarks/results/gail_update.md.
"""

from __future__ import annotations

import argparse
import platform
import sys
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.modules import MLP
from rl.objectives import GAILLoss

sys.path.insert(0, str(Path(__file__).parent))  # the shared helpers, when imported by path
from _timing import (  # noqa: E402
    best,
    interleaved,
    paired_ratio,
    paired_table,
    raise_mmap_threshold,
    results_path,
    write_report,
)

BATCH = 256
OBS, ACT = 17, 6
CELLS = [256, 256]
LR, GP_LAMBDA = 3e-4, 10.0


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MLP(
            in_features=OBS + ACT, out_features=1, num_cells=CELLS, activation_class=nn.ReLU
        )

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.mlp(torch.cat([obs, act], -1)))


def make_batch() -> TensorDict:
    return TensorDict(
        observation=torch.randn(BATCH, OBS),
        action=torch.rand(BATCH, ACT) * 2 - 1,
        collector_observation=torch.randn(BATCH, OBS),
        collector_action=torch.rand(BATCH, ACT) * 2 - 1,
        batch_size=[BATCH],
    )


class OursUpdate:
    def __init__(self, gp: bool):
        disc = TensorDictModule(Discriminator(), ["observation", "action"], ["d_logits"])
        self.loss = GAILLoss(disc, use_grad_penalty=gp, gp_lambda=GP_LAMBDA)
        self.opt = torch.optim.Adam(self.loss.parameters(), lr=LR)

    def __call__(self, batch: TensorDict) -> None:
        self.loss(batch)["loss"].backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class PlainUpdate:
    def __init__(self, gp: bool):
        self.disc = Discriminator()
        self.gp = gp
        self.opt = torch.optim.Adam(self.disc.parameters(), lr=LR)

    def __call__(self, batch: TensorDict) -> None:
        obs_e, act_e = batch["observation"], batch["action"]
        obs_c, act_c = batch["collector_observation"], batch["collector_action"]
        pred = self.disc(torch.cat([obs_e, obs_c]), torch.cat([act_e, act_c]))
        labels = torch.zeros_like(pred)
        labels[:BATCH] = 1.0
        bce = F.binary_cross_entropy(pred, labels, reduction="none")
        loss = bce[:BATCH] + bce[BATCH:]
        if self.gp:
            u_o, u_a = torch.rand_like(obs_e), torch.rand_like(act_e)
            obs = (u_o * obs_c + (1 - u_o) * obs_e).requires_grad_()
            act = (u_a * act_c + (1 - u_a) * act_e).requires_grad_()
            d = self.disc(obs, act)
            grads = torch.autograd.grad(d, (obs, act), torch.ones_like(d), create_graph=True)
            norm = torch.cat(grads, -1).norm(dim=-1)
            loss = loss + GP_LAMBDA * (norm - 1).pow(2).mean()
        loss.mean().backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--default-malloc", action="store_true", help="keep glibc's mmap threshold")
    parser.add_argument("--out", default=results_path("gail_update.md"))
    args = parser.parse_args(argv)
    tuned = False if args.default_malloc else raise_mmap_threshold()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    batch = make_batch()

    rows = []
    for label, gp in (("BCE only", False), ("BCE + gradient penalty", True)):
        fns = {"plain": PlainUpdate(gp), "ours": OursUpdate(gp)}
        times = interleaved(
            {k: partial(fn, batch) for k, fn in fns.items()}, args.iters, args.repeats
        )
        fastest, paired = best(times), paired_ratio(times, "ours", "plain")
        ratio = fastest["ours"] / fastest["plain"]
        rows.append((label, fastest, ratio, paired))
        print(
            f"{label}: plain {fastest['plain'] * 1e3:.3f} ms, ours {fastest['ours'] * 1e3:.3f} ms "
            f"(best {ratio:.3f}x, median paired {paired:.3f}x)",
            flush=True,
        )

    lines = [
        "# GAILLoss discriminator update vs plain PyTorch",
        "",
        f"`python benchmarks/bench_gail_update.py --iters {args.iters} --repeats {args.repeats}`; "
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, 1 thread, "
        f"batch {BATCH} expert + {BATCH} collected pairs (obs {OBS}, act {ACT}), 256x256 ReLU "
        "discriminator, Adam. Rounds measured alternately in one run; "
        + (
            "glibc mmap threshold raised to 1 GiB for both sides."
            if tuned
            else "default glibc malloc."
        ),
        "",
        *paired_table("GAILLoss", rows),
        "",
        "Notes: the machine is shared (2 cores, several jobs); absolute times swing between runs.",
        "Each round times the plain update then the rl one; the paired ratio of a round",
        "cancels slow drifts of the load, and its median over the rounds is the headline.",
    ]
    write_report(lines, args.out)


if __name__ == "__main__":
    main()
