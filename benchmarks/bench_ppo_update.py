"""Cost of a ClipPPOLoss update step against the same update written CleanRL-style.

One update step on a minibatch of 4096 transitions: the loss forward, backward,
gradient-norm clipping (0.5) and an Adam step, for a 64x64 tanh MLP actor writing a
TanhNormal over 6 actions (observation size 17) and a 64x64 tanh MLP critic.

- rl: ``ProbabilisticActor`` + ``ValueOperator`` from ``rl.modules`` and
  ``ClipPPOLoss(actor, critic, entropy_coeff=0.01, critic_coeff=0.5, loss_critic_type="l2",
  log_explained_variance=False)`` on a TensorDict minibatch;
- floor: the same networks, the same math (TanhNormal log-density, one-sample entropy
  estimate, clipped surrogate, squared-error critic loss) in plain PyTorch on tensors, as
  CleanRL's ppo_continuous_action.py writes its update.

Both run on one thread, interleaved in blocks, and the median block is reported. The
``torch.compile`` rows compile the loss forward (rl) and the plain loss function
(floor); backward, clipping and Adam stay eager. The "whole step" rows compile all of
it, each with its own copy of the networks and its own Adam:

- rl: ``UpdateStep`` (examples/_common.py, what the examples' ``--compile`` runs): the
  loss, ``torch.autograd.grad``, the clipping and Adam's arithmetic in one graph;
- plain: the plain step function (loss, ``backward()``, ``clip_grad_norm_``,
  ``optimizer.step()``) passed whole to ``torch.compile``, as LeanRL compiles its
  updates (dynamo breaks the graph at ``backward()``).

"speed vs plain eager" is a row's steps/s over the plain eager loop's.

Usage:
    python benchmarks/bench_ppo_update.py [--steps 30] [--no-compile]
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

from rl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from rl.objectives import ClipPPOLoss

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))  # the shared helpers, when imported by path
# examples/ is no package: UpdateStep, the compiled whole step of the examples' --compile,
# is imported from examples/_common.py by path
sys.path.insert(0, str(ROOT / "examples"))
from _common import UpdateStep  # noqa: E402
from _timing import interleaved, markdown_table, median, results_path, write_report  # noqa: E402

OBS, ACT, BATCH, CELLS = 17, 6, 4096, [64, 64]
CLIP, ENT, VF, MAX_GRAD = 0.2, 0.01, 0.5, 0.5
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def make_rl():
    torch.manual_seed(0)
    actor_net = nn.Sequential(
        MLP(in_features=OBS, out_features=2 * ACT, num_cells=CELLS, activation_class=nn.Tanh),
        NormalParamExtractor(),
    )
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, ["observation"], ["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )
    critic = ValueOperator(
        MLP(in_features=OBS, out_features=1, num_cells=CELLS, activation_class=nn.Tanh),
        in_keys=["observation"],
    )
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=CLIP,
        entropy_coeff=ENT,
        critic_coeff=VF,
        loss_critic_type="l2",
        log_explained_variance=False,
    )
    return actor, critic, loss


class PlainAgent(nn.Module):
    """CleanRL-style agent with the same layers (weights copied from the rl modules)."""

    def __init__(self, actor_mlp: nn.Module, critic_mlp: nn.Module, scale_bias: float) -> None:
        super().__init__()
        self.actor = actor_mlp
        self.critic = critic_mlp
        self.scale_bias = scale_bias

    def loss(self, obs, action, old_log_prob, advantage, returns):
        loc, scale_raw = self.actor(obs).chunk(2, -1)
        scale = F.softplus(scale_raw + self.scale_bias) + 0.01
        # TanhNormal log-density of the stored action (atanh clamped as TanhNormal's safe_atanh)
        eps = torch.finfo(action.dtype).eps
        x = action.clamp(-1 + eps, 1 - eps).atanh()
        log_prob = self._log_prob_pre_tanh(loc, scale, x)
        # one-sample entropy estimate from a reparameterized draw
        x_new = loc + torch.randn_like(loc) * scale
        entropy = -self._log_prob_pre_tanh(loc, scale, x_new)
        logratio = log_prob - old_log_prob
        ratio = logratio.exp()
        pg_loss = torch.max(-advantage * ratio, -advantage * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
        value = self.critic(obs).squeeze(-1)
        v_loss = ((value - returns) ** 2).mean()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - logratio).mean()
            clipfrac = ((ratio - 1.0).abs() > CLIP).float().mean()
        return pg_loss - ENT * entropy.mean() + VF * v_loss, approx_kl, clipfrac

    @staticmethod
    def _log_prob_pre_tanh(loc, scale, x):
        z = (x - loc) / scale
        lp = -0.5 * z.pow(2) - scale.log() - HALF_LOG_2PI
        lp = lp - 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))
        return lp.sum(-1)


def make_batch(actor):
    g = torch.Generator().manual_seed(1)
    td = TensorDict({"observation": torch.randn(BATCH, OBS, generator=g)}, [BATCH])
    with torch.no_grad():
        td = actor(td)
    td["advantage"] = torch.randn(BATCH, 1, generator=g)
    td["value_target"] = torch.randn(BATCH, 1, generator=g)
    return td.select("observation", "action", "action_log_prob", "advantage", "value_target")


def rl_step_fn(loss, optim, forward):
    params = list(loss.parameters())

    def step(td):
        out = forward(td)
        total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
        optim.zero_grad(set_to_none=True)
        total.backward()
        nn.utils.clip_grad_norm_(params, MAX_GRAD)
        optim.step()

    return step


def rl_whole_step(loss, optim) -> UpdateStep:
    """The rl step compiled whole, as examples/ppo.py builds it with ``--compile``."""

    def ppo_loss(td):
        out = loss(td)
        total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
        return total, total

    return UpdateStep(ppo_loss, optim, max_grad_norm=MAX_GRAD, compile=True)


def plain_step_fn(agent, optim, loss_fn):
    params = list(agent.parameters())

    def step(tensors):
        total, _, _ = loss_fn(*tensors)
        optim.zero_grad(set_to_none=True)
        total.backward()
        nn.utils.clip_grad_norm_(params, MAX_GRAD)
        optim.step()

    return step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="update steps per timed block")
    parser.add_argument("--blocks", type=int, default=9, help="interleaved blocks per candidate")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    parser.add_argument("--out", default=results_path("ppo_update.md"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    actor, critic, loss = make_rl()
    mlp_actor = actor.module[0].module[0]
    mlp_critic = critic.module
    scale_bias = float(actor.module[0].module[1].scale_mapping.bias)
    plain = PlainAgent(_clone(mlp_actor), _clone(mlp_critic), scale_bias)
    td = make_batch(actor)
    tensors = (
        td["observation"],
        td["action"],
        td["action_log_prob"],
        td["advantage"].squeeze(-1),
        td["value_target"].squeeze(-1),
    )
    # same weights, same numbers: the two losses agree (the entropy draws are random)
    check_equal(loss, plain, td, tensors)
    plain_whole = _clone(plain)  # the whole-step candidates' own networks, same weights
    _, _, loss_whole = make_rl()

    opt_rl = torch.optim.Adam(loss.parameters(), lr=3e-4)
    opt_plain = torch.optim.Adam(plain.parameters(), lr=3e-4)
    candidates = {
        "plain": (plain_step_fn(plain, opt_plain, plain.loss), tensors),
        "rl": (rl_step_fn(loss, opt_rl, loss), td),
    }
    compile_note = "not run (--no-compile)"
    if not args.no_compile:
        try:
            t0 = time.perf_counter()
            compiled_loss = torch.compile(loss)
            rl_c = rl_step_fn(loss, opt_rl, compiled_loss)
            rl_c(td)
            plain_c = plain_step_fn(plain, opt_plain, torch.compile(plain.loss))
            plain_c(tensors)
            compile_note = f"compiled in {time.perf_counter() - t0:.0f} s (both, inductor)"
            candidates["plain_compiled"] = (plain_c, tensors)
            candidates["rl_compiled"] = (rl_c, td)
        except Exception as err:  # noqa: BLE001 - report, do not fail the benchmark
            compile_note = f"torch.compile failed: {type(err).__name__}: {err}"[:300]
        try:
            t0 = time.perf_counter()
            rl_w = rl_whole_step(loss_whole, torch.optim.Adam(loss_whole.parameters(), lr=3e-4))
            rl_w(td)
            opt_w = torch.optim.Adam(plain_whole.parameters(), lr=3e-4)
            plain_w = torch.compile(plain_step_fn(plain_whole, opt_w, plain_whole.loss))
            plain_w(tensors)
            compile_note += f"; whole steps compiled in {time.perf_counter() - t0:.0f} s (both)"
            candidates["plain_whole"] = (plain_w, tensors)
            candidates["rl_whole"] = (rl_w, td)
        except Exception as err:  # noqa: BLE001 - report, do not fail the benchmark
            compile_note += f"; whole step failed: {type(err).__name__}: {err}"[:300]
    # CPU time of this process (one torch thread): on a shared machine it does not count
    # the time another job held the core, which wall-clock time does
    res = median(
        interleaved(
            {name: partial(fn, arg) for name, (fn, arg) in candidates.items()},
            args.steps,
            args.blocks,
            clock=time.process_time,
        )
    )

    lines = [
        "# PPO update benchmark",
        "",
        f"One update step on {BATCH} transitions: loss forward, backward, grad-norm clip, Adam; "
        f"64x64 tanh actor (TanhNormal over {ACT} actions, observation {OBS}) and 64x64 tanh critic. "
        f"One thread; CPU time of the process, median of {args.blocks} interleaved blocks of "
        f"{args.steps} steps. Floor: the same "
        "update written CleanRL-style in plain PyTorch with the same weights (values checked equal "
        "before timing).",
        "",
    ]
    labels = {
        "plain": "plain PyTorch, eager (floor)",
        "rl": "rl ClipPPOLoss, eager",
        "plain_compiled": "plain PyTorch, torch.compile",
        "rl_compiled": "rl ClipPPOLoss, torch.compile",
        "plain_whole": "plain PyTorch, whole step torch.compile (LeanRL-style)",
        "rl_whole": "rl ClipPPOLoss, whole step compiled (UpdateStep)",
    }
    targets = {"rl": "<= 1.05x", "rl_whole": "speed > 1x"}
    table = [
        [
            labels[name],
            f"{secs * 1e3:.2f}",
            f"{1 / secs:.0f}",
            f"{secs / res['plain']:.3f}x",
            f"{res['plain'] / secs:.2f}x",
            targets.get(name, ""),
        ]
        for name, secs in res.items()
    ]
    header = [
        "update",
        "ms / step",
        "steps / s",
        "ratio to plain eager",
        "speed vs plain eager",
        "target",
    ]
    lines += markdown_table(header, table, align="---:")
    if "rl_compiled" in res:
        lines += [
            "",
            f"torch.compile speed-up of the rl update: {res['rl'] / res['rl_compiled']:.2f}x eager "
            f"(plain: {res['plain'] / res['plain_compiled']:.2f}x).",
        ]
    if "rl_whole" in res:
        lines += [
            "",
            f"Whole step compiled: rl (UpdateStep) at {res['plain'] / res['rl_whole']:.2f}x the "
            f"plain eager loop's steps/s, the plain step compiled whole at "
            f"{res['plain'] / res['plain_whole']:.2f}x.",
        ]
    lines += [
        "",
        f"Compile: {compile_note}.",
        f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, threads: {torch.get_num_threads()}.",
    ]
    write_report(lines, args.out)


def _clone(module: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(module)


def check_equal(loss, plain, td, tensors) -> None:
    """The rl loss and the plain one give the same surrogate and critic losses."""
    with torch.no_grad():
        out = loss(td)
        loc, scale_raw = plain.actor(tensors[0]).chunk(2, -1)
        scale = F.softplus(scale_raw + plain.scale_bias) + 0.01
        eps = torch.finfo(tensors[1].dtype).eps
        x = tensors[1].clamp(-1 + eps, 1 - eps).atanh()
        ratio = (plain._log_prob_pre_tanh(loc, scale, x) - tensors[2]).exp()
        adv = tensors[3]
        pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
        v = VF * ((plain.critic(tensors[0]).squeeze(-1) - tensors[4]) ** 2).mean()
    torch.testing.assert_close(out["loss_objective"], pg, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out["loss_critic"], v, rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
    main()
