"""One RND predictor update with rl.objectives.RNDLoss against plain PyTorch.

The update (Burda et al. 2018, random network distillation): next observations are
standardised by the running statistics of the ``RNDTransform`` and clipped to [-5, 5];
the fixed random target embeds them without gradient, the predictor embeds them, and the
per-sample loss is the mean squared difference over the embedding; each sample is kept
with probability 0.25 (the paper's update fraction) and the loss averages over the kept
ones; one backward, one Adam step of the predictor.

Two sizes: ``examples/ppo_rnd.py``'s (MountainCar observation 2, 64x64 ReLU nets,
embedding 32, a minibatch of 512 steps) and a larger one (observation 17, 256x256,
embedding 64, 1024 steps).

Floor: the same maths written in plain PyTorch on tensors (no TensorDict), on networks
with the same weights; the two losses are checked equal (same random mask) before timing.
Rounds alternate the two sides in one run on one thread; the figures are each side's best
and the median over rounds of the paired ratio rl / plain.

    python benchmarks/bench_rnd_update.py [--iters 50] [--repeats 15]

Writes benchmarks/results/rnd_update.md.
"""

from __future__ import annotations

import argparse
import copy
import platform
import sys
from pathlib import Path

import torch
from tensordict import TensorDict
from torch import nn

from rl.envs.transforms import RunningMeanStd
from rl.modules import MLP
from rl.objectives import RNDLoss

sys.path.insert(0, str(Path(__file__).parent))  # the shared helpers, when imported by path
from _timing import (  # noqa: E402
    best,
    interleaved,
    paired_ratio,
    paired_table,
    results_path,
    write_report,
)

LR, CLIP, FRACTION = 1e-4, 5.0, 0.25
CASES = {
    "ppo_rnd.py sizes (obs 2, 64x64, embed 32, batch 512)": (2, 64, 32, 512),
    "larger (obs 17, 256x256, embed 64, batch 1024)": (17, 256, 64, 1024),
}


def make_net(obs: int, hidden: int, embed: int) -> nn.Module:
    return MLP(
        in_features=obs, out_features=embed, num_cells=[hidden] * 2, activation_class=nn.ReLU
    )


def make_rms(obs: int) -> RunningMeanStd:
    rms = RunningMeanStd(shape=(obs,))
    rms.update(torch.randn(4096, obs) * 3 + 1)
    return rms


class OursUpdate:
    def __init__(self, predictor, target, rms, batch: TensorDict):
        self.loss = RNDLoss(predictor, target, obs_rms=rms, obs_clip=CLIP, update_fraction=FRACTION)
        self.opt = torch.optim.Adam(predictor.parameters(), lr=LR)
        self.batch = batch

    def value(self) -> torch.Tensor:
        return self.loss(self.batch)["loss_predictor"]

    def __call__(self) -> None:
        self.value().backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


class PlainUpdate:
    def __init__(self, predictor, target, rms, obs: torch.Tensor):
        self.predictor, self.target, self.rms = predictor, target, rms
        self.opt = torch.optim.Adam(predictor.parameters(), lr=LR)
        self.obs = obs

    def value(self) -> torch.Tensor:
        # the statistics move between updates (the transform updates them): read each time
        x = (self.obs - self.rms.mean) / self.rms.var.clamp_min(1e-8).sqrt()
        x = x.clamp(-CLIP, CLIP)
        with torch.no_grad():
            goal = self.target(x)
        err = (self.predictor(x) - goal).pow(2).mean(-1)
        keep = torch.rand(err.shape) < FRACTION
        return torch.where(keep, err, 0.0).sum() / keep.sum().clamp_min(1)

    def __call__(self) -> None:
        self.value().backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def build(obs: int, hidden: int, embed: int, batch_size: int) -> dict:
    predictor, target = make_net(obs, hidden, embed), make_net(obs, hidden, embed)
    rms = make_rms(obs)
    next_obs = torch.randn(batch_size, obs) * 3 + 1
    batch = TensorDict({"next": {"observation": next_obs}}, [batch_size])
    plain = PlainUpdate(copy.deepcopy(predictor), copy.deepcopy(target), rms, next_obs)
    ours = OursUpdate(predictor, target, rms, batch)
    torch.manual_seed(1)
    want = plain.value()
    torch.manual_seed(1)
    got = ours.value()
    torch.testing.assert_close(got, want)
    return {"plain": plain, "ours": ours}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=results_path("rnd_update.md"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)

    rows = []
    for label, sizes in CASES.items():
        times = interleaved(build(*sizes), args.iters, args.repeats)
        fastest, paired = best(times), paired_ratio(times, "ours", "plain")
        ratio = fastest["ours"] / fastest["plain"]
        rows.append((label, fastest, ratio, paired))
        print(
            f"{label}: plain {fastest['plain'] * 1e3:.3f} ms, rl {fastest['ours'] * 1e3:.3f} ms "
            f"(best {ratio:.3f}x, median paired {paired:.3f}x)",
            flush=True,
        )

    lines = [
        "# RNDLoss predictor update vs plain PyTorch",
        "",
        f"`python benchmarks/bench_rnd_update.py --iters {args.iters} --repeats {args.repeats}`; "
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, 1 thread. "
        "Each update: observation standardisation and clipping, target and predictor "
        f"forward, squared error kept with probability {FRACTION}, backward, Adam step; "
        "the plain side writes the same maths on tensors, on networks with the same "
        "weights (losses checked equal before timing). Rounds alternate the two sides in "
        "one run.",
        "",
        *paired_table("RNDLoss", rows),
        "",
        "Notes: the machine is shared (2 cores, several jobs); absolute times swing between runs.",
        "Each round times the plain update then the rl one; the paired ratio of a round",
        "cancels slow drifts of the load, and its median over the rounds is the headline.",
    ]
    write_report(lines, args.out)


if __name__ == "__main__":
    main()
