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
import ctypes
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.modules import MLP
from rl.objectives import GAILLoss

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


def timed(update, batch, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        update(batch)
    return (time.perf_counter() - start) / iters


def best_alternating(fns: dict, batch, iters: int, repeats: int) -> tuple[dict, float]:
    """Best time per side, and the median over rounds of the paired ratio ours / plain."""
    for fn in fns.values():
        for _ in range(3):
            fn(batch)
    best = {name: float("inf") for name in fns}
    ratios = []
    for _ in range(repeats):
        round_times = {name: timed(fn, batch, iters) for name, fn in fns.items()}
        ratios.append(round_times["ours"] / round_times["plain"])
        for name, value in round_times.items():
            best[name] = min(best[name], value)
    return best, statistics.median(ratios)


def raise_mmap_threshold() -> bool:
    """Keep glibc from mmapping (and page-faulting) each activation on every call (both sides)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 1 << 30)) and bool(
            libc.mallopt(m_trim_threshold, 1 << 30)
        )
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--default-malloc", action="store_true", help="keep glibc's mmap threshold")
    args = parser.parse_args()
    tuned = False if args.default_malloc else raise_mmap_threshold()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    batch = make_batch()

    rows = []
    for label, gp in (("BCE only", False), ("BCE + gradient penalty", True)):
        best, paired = best_alternating(
            {"plain": PlainUpdate(gp), "ours": OursUpdate(gp)}, batch, args.iters, args.repeats
        )
        ratio = best["ours"] / best["plain"]
        rows.append((label, best, ratio, paired))
        print(
            f"{label}: plain {best['plain'] * 1e3:.3f} ms, ours {best['ours'] * 1e3:.3f} ms "
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
        "| case | plain PyTorch (ms/update) | GAILLoss (ms/update) | ratio of bests | "
        "median paired ratio (target <= 1.1) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, best, ratio, paired in rows:
        lines.append(
            f"| {label} | {best['plain'] * 1e3:.3f} | {best['ours'] * 1e3:.3f} | {ratio:.3f}x "
            f"| {paired:.3f}x |"
        )
    lines += [
        "",
        "Notes: the machine is shared (2 cores, several jobs); absolute times swing between runs.",
        "Each round times the plain update then the rl one; the paired ratio of a round",
        "cancels slow drifts of the load, and its median over the rounds is the headline.",
    ]
    out = Path(__file__).parent / "results" / "gail_update.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
