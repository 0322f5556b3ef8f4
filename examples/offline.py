"""Offline RL (IQL or CQL) on the Pendulum dataset that ``sac.py --save-buffer`` writes.

Kostrikov et al. 2022, "Offline Reinforcement Learning with Implicit Q-Learning",
https://arxiv.org/abs/2110.06169 (expectile value regression, advantage-weighted actor);
Kumar et al. 2020, "Conservative Q-Learning for Offline Reinforcement Learning",
https://arxiv.org/abs/2006.04779 (Q-values pushed down on out-of-data actions). No
environment step is taken while learning: the replay buffer that a SAC run kept on disk
(a memmap storage) is the whole dataset.

IQL uses the paper's D4RL locomotion settings (lr 3e-4, 256x256 networks, 10k updates)
except its temperature and expectile: 10 instead of 3 and 0.9 instead of 0.7 (the
Pendulum dataset mixes a whole SAC run, random start included, and sharper advantage
weights and a more optimistic value follow its best actions: scores 97 / 89 / 93 on three
seeds, against 100 / 95 / 63 with expectile 0.7 and 38 with temperature 3).

CQL's defaults are the best found on that dataset, not the paper's (weight 5, critic lr
3e-4, actor lr 1e-4, 1M updates): observations standardised by the dataset's mean and std
(an ``ObservationNorm`` on the sampled batches and on the evaluation env, as CORL does),
128x128 networks, critic and actor lr 1e-3, target rate 0.02, 10k updates of which the
first 2.5k clone the data's actions, penalty weight 200 and a fixed entropy temperature 1:
scores 95 / 92 / 88 on three seeds. Without the normalisation the same settings scored
77 / 92 / 92, and 64x64 networks with 5k updates 94 / 74 / 89 (examples/README.md). The
Lagrange weight, backups and warm-up are flags (``--with-lagrange``, ``--max-q-backup``,
``--bc-steps``, ...). With the standardisation, the trained actor (``main``'s
``summary["actor"]``) reads standardised observations: run it in an env with
``summary["obs_norm"]`` appended (``env.append_transform(summary["obs_norm"].clone())``).

    uv run examples/sac.py --save-buffer data/pendulum     # the dataset (once)
    uv run examples/offline.py --dataset data/pendulum            # IQL
    uv run examples/offline.py --dataset data/pendulum --algo cql

The evaluation reports the return and the normalised score
``100 * (R - R_random) / (R_data - R_random)``, where ``R_data`` is the evaluation return
of the policy that collected the data and ``R_random`` that of uniformly random actions
(both saved with the dataset). Writes CSV logs (or another logger), a learning-curve PNG
and, with ``--video``, an evaluation video under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Literal

import torch

from rl.core import seed_everything
from rl.modules import MLP, ValueOperator
from rl.objectives import CQLLoss, IQLLoss, SoftUpdate

sys.path.insert(0, str(Path(__file__).parent))
from _common import UpdateStep  # noqa: E402
from _offline_data import observation_norms, report_score  # noqa: E402
from _offpolicy import (  # noqa: E402
    Run,
    RunConfig,
    cli,
    make_env,
    make_qvalue,
    make_tanh_normal_actor,
    open_dataset,
    resolve_device,
)


@dataclasses.dataclass
class Config(RunConfig):
    """Offline IQL / CQL hyperparameters."""

    dataset: str = "data/pendulum"
    """Folder of the memmap replay buffer written by ``sac.py --save-buffer``."""
    algo: Literal["iql", "cql"] = "iql"
    """Offline algorithm."""
    num_updates: int | None = None
    """Gradient steps on the dataset (default: 10,000)."""
    batch_size: int = 256
    """Transitions per gradient step."""
    lr: float | None = None
    """Adam learning rate of the critics (IQL: also of the value network and the actor;
    CQL: also of the Lagrange multiplier). Default: IQL 3e-4, CQL 1e-3."""
    actor_lr: float = 1e-3
    """CQL: Adam learning rate of the actor and the temperature."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float | None = None
    """Polyak averaging rate of the target critics (default: IQL 0.005, CQL 0.02)."""
    expectile: float = 0.9
    """IQL: expectile of the value regression (the paper's locomotion value 0.7 left one of
    three seeds at score 63 on the Pendulum dataset; 0.9 gives 89-97)."""
    temperature: float = 10.0
    """IQL: inverse temperature of the advantage weights (the paper's locomotion value: 3)."""
    min_q_weight: float = 200.0
    """CQL: weight of the conservative penalty."""
    num_random: int = 10
    """CQL: actions sampled per state for the penalty's log-sum-exp."""
    cql_temperature: float = 1.0
    """CQL: temperature of the penalty's log-sum-exp."""
    with_lagrange: bool = False
    """CQL: learn the penalty's weight (Lagrange multiplier) to hold it at ``lagrange_thresh``."""
    lagrange_thresh: float = 10.0
    """CQL: with ``with_lagrange``, the target gap between sampled and dataset Q-values."""
    max_q_backup: bool = False
    """CQL: back up the max of the target critics over ``num_random`` next actions."""
    deterministic_backup: bool = True
    """CQL: leave the entropy bonus out of the critics' target."""
    bc_steps: int = 2_500
    """CQL: first gradient steps in which the actor clones the data's actions."""
    alpha_init: float = 1.0
    """CQL: initial entropy temperature."""
    fixed_alpha: bool = True
    """CQL: keep the entropy temperature at ``alpha_init`` (else learn it towards an
    entropy of minus the action size)."""
    normalize_obs: bool | None = None
    """Standardise observations by the dataset's mean and std: an ``ObservationNorm`` on
    the sampled batches and the same one on the evaluation env (default: CQL yes, IQL no).
    The trained actor then reads standardised observations: run it in an env with the
    returned ``summary["obs_norm"]`` appended."""
    hidden: int | None = None
    """Width of the two hidden layers of every network (default: IQL 256, CQL 128)."""
    log_interval: int = 500
    """Gradient steps between two log lines."""
    eval_interval: int = 2_000
    """Gradient steps between two evaluations (the learning curve)."""
    eval_interval_episodes: int = 3
    """Deterministic episodes of each periodic evaluation."""


PRESETS = {"iql": ("IQL on the saved dataset", Config())}

#: each algorithm's values of the fields left at ``None``
DEFAULTS = {
    "iql": {"num_updates": 10_000, "lr": 3e-4, "tau": 0.005, "hidden": 256, "normalize_obs": False},
    "cql": {"num_updates": 10_000, "lr": 1e-3, "tau": 0.02, "hidden": 128, "normalize_obs": True},
}


def resolve(cfg: Config) -> Config:
    """Fills the fields left at ``None`` with ``cfg.algo``'s defaults (:data:`DEFAULTS`)."""
    for name, value in DEFAULTS[cfg.algo].items():
        if getattr(cfg, name) is None:
            setattr(cfg, name, value)
    return cfg


def make_learner(cfg: Config, env):
    """The actor, the critic, the loss (IQL or CQL, by ``cfg.algo``), the keys of the
    loss terms it sums, and its update step: the loss, the gradients, each optimizer's
    step and the soft target update; one graph with ``cfg.compile``. The step takes a
    batch and a boolean tensor, CQL's warm-up flag (the actor clones the data's actions
    while it is true). The networks, the loss's own tensors and the optimizers' live on
    ``cfg.device``."""
    # the pieces: actor, critics (and IQL's value network), loss, optimisers, targets
    device = resolve_device(cfg.device)
    actor = make_tanh_normal_actor(env, cfg.hidden, device=device)
    qvalue = make_qvalue(env, cfg.hidden, device=device)
    if cfg.algo == "iql":
        value = ValueOperator(
            MLP(out_features=1, num_cells=[cfg.hidden] * 2, activation_class=torch.nn.ReLU),
            in_keys=["observation"],
        )
        with torch.no_grad():
            value(env.fake_tensordict())  # materialise the lazy first layer
        value = value.to(device)
    with torch.device(device):  # the loss's own tensors and the optimizers'
        if cfg.algo == "iql":
            loss_module = IQLLoss(
                actor,
                qvalue,
                value,
                loss_function="l2",
                temperature=cfg.temperature,
                expectile=cfg.expectile,
                gamma=cfg.gamma,
            )
            loss_keys = ("loss_actor", "loss_qvalue", "loss_value")
            optimizers = [torch.optim.Adam(loss_module.parameters(), lr=cfg.lr)]
        else:
            loss_module = CQLLoss(
                actor,
                qvalue,
                loss_function="l2",
                action_spec=env.action_spec,
                gamma=cfg.gamma,
                min_q_weight=cfg.min_q_weight,
                num_random=cfg.num_random,
                temperature=cfg.cql_temperature,
                with_lagrange=cfg.with_lagrange,
                lagrange_thresh=cfg.lagrange_thresh,
                max_q_backup=cfg.max_q_backup,
                deterministic_backup=cfg.deterministic_backup,
                alpha_init=cfg.alpha_init,
                fixed_alpha=cfg.fixed_alpha,
            )
            loss_keys = ("loss_actor", "loss_qvalue", "loss_cql")
            actor_params = [*loss_module.actor_network_params.parameters()]
            if not cfg.fixed_alpha:
                loss_keys += ("loss_alpha",)
                actor_params.append(loss_module.log_alpha)
            optimizers = [
                torch.optim.Adam(actor_params, lr=cfg.actor_lr),
                torch.optim.Adam(loss_module.qvalue_network_params.parameters(), lr=cfg.lr),
            ]
            if cfg.with_lagrange:
                loss_keys += ("loss_alpha_prime",)
                optimizers.append(torch.optim.Adam([loss_module.log_alpha_prime], lr=cfg.lr))
        target_update = SoftUpdate(loss_module, tau=cfg.tau)

        def offline_loss(sample, behaviour_cloning):
            losses = loss_module(sample)
            # CQL's warm-up clones the data's actions (a tensor flag: one graph)
            if cfg.algo == "cql":
                losses["loss_actor"] = torch.where(
                    behaviour_cloning, losses["loss_actor_bc"], losses["loss_actor"]
                )
            return sum(losses[key] for key in loss_keys), losses.select(*loss_keys)

        # one gradient step of every network and the target update; one graph with --compile
        update = UpdateStep(
            offline_loss,
            optimizers,
            target_update=target_update,
            compile=cfg.compile,
            cudagraphs=cfg.cudagraphs,
        )
    return actor, qvalue, loss_module, loss_keys, update


def main(cfg: Config) -> dict:
    cfg = resolve(dataclasses.replace(cfg))
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    buffer, info = open_dataset(cfg.dataset, cfg.batch_size)
    cfg.env_id = info["env_id"]
    env = make_env(cfg.env_id)  # for the specs and the evaluation only
    obs_norm = None
    if cfg.normalize_obs:
        batch_norm, obs_norm = observation_norms(buffer)
        buffer.append_transform(batch_norm)

    actor, qvalue, loss_module, loss_keys, update = make_learner(cfg, env)
    run = Run(cfg.algo, cfg, cfg.num_updates, eval_transform=obs_norm)
    device = resolve_device(cfg.device)
    cloning, learning = torch.tensor(True, device=device), torch.tensor(False, device=device)

    # the loop: sample the dataset, update every network, move the targets
    for step in range(1, cfg.num_updates + 1):
        warm_up = cfg.algo == "cql" and step <= cfg.bc_steps
        # sampled (and standardised) on the CPU, where the dataset is, then moved
        losses = update(buffer.sample().to(device), cloning if warm_up else learning)
        run.frames = step  # the x axis of the logs: gradient steps
        if step % cfg.log_interval == 0:
            run.log(**{key: losses[key].item() for key in loss_keys})
        if step % cfg.eval_interval == 0 and step < cfg.num_updates:
            returns = run.evaluate(cfg.env_id, actor, cfg.eval_interval_episodes)
            run.logger.log_scalar("eval/return", sum(returns) / len(returns), step)
        run.step_bar(1)

    summary = run.finish(
        cfg.env_id,
        actor,
        curve_key="eval/return",
        actor=actor,
        qvalue=qvalue,
        loss_module=loss_module,
        obs_norm=obs_norm,
    )
    report_score(summary, info)
    return summary


def cli_config() -> Config:
    return cli(Config, PRESETS, "iql", __doc__)


if __name__ == "__main__":
    main(cli_config())
