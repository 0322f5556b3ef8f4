"""Decision Transformer on the Pendulum dataset that ``sac.py --save-buffer`` writes.

Chen et al. 2021, "Decision Transformer: Reinforcement Learning via Sequence Modeling",
https://arxiv.org/abs/2106.01345: a causal GPT-2 reads windows of (return-to-go, state,
action) tokens and is trained to output the dataset's action at each state token
(``DTLoss``, squared error). Acting, it is conditioned on a target return that counts down
by the rewards received (``TargetReturn``), with the last ``context`` steps stacked by
``CatFrames`` and ``DecisionTransformerInferenceWrapper`` keeping the last action.

``--online`` follows Zheng et al. 2022, "Online Decision Transformer",
https://arxiv.org/abs/2202.05607: a stochastic actor (``OnlineDTActor``, a ``TanhNormal``)
is pretrained offline with ``OnlineDTLoss`` (action log-likelihood plus an entropy bonus
with a learned temperature) on the whole dataset, evaluated, then fine-tuned on a replay of
trajectories as Zheng et al.'s is: it starts with the dataset's ``replay_size`` best
episodes (by return) and each episode the policy collects, sampling its actions while
conditioned on a higher ``online_target_return`` (exploration), enters it relabelled with
the return-to-go it actually reached (hindsight), in the place of the oldest one (the
lowest-return dataset episode first). The summary reports the normalised score before
(``offline_score``) and after (``score``) on the same evaluation episodes, and the noise of
their difference (``score_change`` and its standard error ``score_change_se``).

Windows end at every step of every episode; those reaching before an episode's start are
zero-padded, as ``CatFrames(padding="constant")`` pads the first steps of an evaluation
episode. Observations are standardised by the dataset's mean and std, returns-to-go
scaled by ``reward_scale`` inside the policy.

    uv run examples/sac.py --save-buffer data/pendulum      # the dataset (once)
    uv run --group llm examples/decision_transformer.py --dataset data/pendulum
    uv run --group llm examples/decision_transformer.py --dataset data/pendulum --online

With ``--compile``, each gradient step (the loss, backward, clipping, AdamW, and online
the temperature's Adam step) is one compiled graph (``_common.UpdateStep``), the same
for the offline and the online updates; the learning rate is a tensor that the warm-up
fills in place. The acting policy is left eager: an evaluation episode calls it on a
context that grows for its first ``context`` steps. ``--cudagraphs`` captures the step
in a CUDA graph (with ``--device cuda``). With ``--device``, the actor, the loss and the
optimizers live on that device and the windows are moved there; the evaluation and the
online episodes run a CPU copy of the policy in the CPU envs.

The normalised score is ``100 * (R - R_random) / (R_data - R_random)``, as ``offline.py``
reports it. Writes CSV logs (or another logger) and a learning-curve PNG of the periodic
evaluations under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch
from tensordict import TensorDict

from rl.core import ExplorationType, seed_everything, set_exploration_type
from rl.envs.transforms import ObservationNorm
from rl.modules import (
    DecisionTransformer,
    DecisionTransformerInferenceWrapper,
    DTActor,
    OnlineDTActor,
    ProbabilisticActor,
    TanhDelta,
    TanhNormal,
    TensorDictModule,
    TensorDictSequential,
)
from rl.objectives import DTLoss, OnlineDTLoss

sys.path.insert(0, str(Path(__file__).parent))
from _common import UpdateStep, check_cudagraphs, on_cpu, summed_losses  # noqa: E402
from _offline_data import (  # noqa: E402
    mean_std,
    normalised_score,
    observation_stats,
    report_score,
    score_change,
)
from _offpolicy import (  # noqa: E402
    Run,
    RunConfig,
    cli,
    make_env,
    open_dataset,
    resolve_device,
    set_lr,
)
from _sequences import (  # noqa: E402
    KEYS,
    STACKED,
    Windows,
    acting_transform,
    best_episodes_first_replaced,
    episodes,
    relabelled,
)


@dataclasses.dataclass
class Config(RunConfig):
    """Decision Transformer hyperparameters."""

    dataset: str = "data/pendulum"
    """Folder of the memmap replay buffer written by ``sac.py --save-buffer``."""
    num_updates: int = 1_500
    """Gradient steps on the dataset (the online pretraining too)."""
    batch_size: int = 64
    """Windows per gradient step."""
    context: int = 20
    """Steps per window (K): the policy sees the last ``context`` steps."""
    lr: float = 1e-3
    """AdamW learning rate (after a linear warm-up)."""
    warmup_steps: int = 300
    """Gradient steps of the linear learning-rate warm-up."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    clip_grad: float = 0.25
    """Gradient norm clip."""
    n_embd: int = 64
    """Width of the GPT-2 backbone."""
    n_layer: int = 3
    """Transformer blocks."""
    n_head: int = 1
    """Attention heads."""
    dropout: float = 0.1
    """Dropout of the residual branches and of the attention weights."""
    reward_scale: float = 0.001
    """Returns-to-go are multiplied by this before the network reads them."""
    target_return: float | None = None
    """Return the policy is conditioned on (default: the evaluation return of the policy
    that collected the dataset, saved with it)."""
    online: bool = False
    """Online DT: pretrain a stochastic actor with OnlineDTLoss, then fine-tune it online."""
    online_episodes: int = 10
    """Online: episodes collected (one before each round of updates)."""
    online_updates: int = 30
    """Online: gradient steps after each collected episode."""
    replay_size: int = 80
    """Online: the replay starts with the dataset's ``replay_size`` best episodes by return
    (Zheng et al.; here the SAC learner's 20 first, near-random episodes stay out)."""
    online_target_return: float | None = None
    """Online: return the collecting policy is conditioned on (default: a return twice as
    good as ``target_return``: twice it when positive, half of it when negative)."""
    online_lr: float = 1e-4
    """Online: learning rate of the fine-tuning."""
    alpha_init: float = 0.1
    """Online: initial entropy temperature."""
    log_interval: int = 250
    """Gradient steps between two log lines."""
    eval_interval: int = 500
    """Gradient steps between two evaluations (the learning curve)."""
    eval_interval_episodes: int = 2
    """Deterministic episodes of each periodic evaluation."""


PRESETS = {"dt": ("Decision Transformer on the saved dataset", Config())}


def make_actor(cfg: Config, obs_dim: int, action_spec) -> ProbabilisticActor:
    """``DTActor`` + ``TanhDelta`` (or, online, ``OnlineDTActor`` + ``TanhNormal``) in the
    action spec's bounds, on ``cfg.device`` (initialised on the CPU, then moved, with the
    distribution's bounds)."""
    config = DecisionTransformer.DTConfig(
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_inner=4 * cfg.n_embd,
        n_positions=3 * cfg.context,
        resid_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout,
    )
    net_cls, dist_cls, params = (
        (OnlineDTActor, TanhNormal, ["loc", "scale"])
        if cfg.online
        else (DTActor, TanhDelta, ["param"])
    )
    net = TensorDictModule(
        net_cls(obs_dim, action_spec.shape[-1], transformer_config=config),
        in_keys=list(KEYS),
        out_keys=params,
    )
    actor = ProbabilisticActor(
        net,
        in_keys=params,
        spec=action_spec,
        distribution_class=dist_cls,
        distribution_kwargs={"low": action_spec.space.low, "high": action_spec.space.high},
    )
    return actor.to(resolve_device(cfg.device))


def make_learner(cfg: Config, actor: ProbabilisticActor):
    """The loss (``DTLoss``, or online ``OnlineDTLoss`` with its learned temperature), its
    optimizers (AdamW; online, Adam for the temperature) and the update step: the actor's
    gradients clipped, each optimizer's step; one graph with ``cfg.compile``. The loss's
    own tensors and the optimizers' live on ``cfg.device``, with the actor. Returns
    ``(loss_module, loss_keys, optimizer, update_step)``, ``optimizer`` the actor's (whose
    learning rate the warm-up sets), ``update_step(batch)`` returning the losses."""
    with torch.device(resolve_device(cfg.device)):
        if cfg.online:
            loss_module = OnlineDTLoss(actor, alpha_init=cfg.alpha_init)
            loss_keys = ("loss_log_likelihood", "loss_entropy", "loss_alpha")
        else:
            loss_module = DTLoss(actor)
            loss_keys = ("loss",)
        optimizer = torch.optim.AdamW(actor.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        optimizers = [optimizer]
        if cfg.online:
            optimizers.append(torch.optim.Adam([loss_module.log_alpha], lr=1e-4))
        update_step = UpdateStep(
            summed_losses(loss_module, loss_keys),
            optimizers,
            max_grad_norm=cfg.clip_grad,
            clip_params=list(actor.parameters()),
            compile=cfg.compile,
            cudagraphs=cfg.cudagraphs,
        )
    return loss_module, loss_keys, optimizer, update_step


def main(cfg: Config) -> dict:
    check_cudagraphs(cfg.cudagraphs)  # before the dataset is read
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    buffer, info = open_dataset(cfg.dataset, cfg.batch_size)
    cfg.env_id = info["env_id"]
    env = make_env(cfg.env_id)  # for the specs, the evaluation and the online episodes
    loc, scale = observation_stats(buffer)
    obs_norm = ObservationNorm(loc, scale, standard_normal=True)
    data = episodes(buffer, loc, scale, cfg.reward_scale)
    target = cfg.target_return
    if target is None:
        target = info["policy_return"]
    windows = Windows(data, cfg.context)
    act = acting_transform(cfg, obs_norm, target, env.full_action_spec)

    # the pieces: actor, its loss, the optimiser with warm-up, the acting policy; one
    # gradient step (the actor's gradients clipped, AdamW, online the temperature's Adam
    # step), one graph with --compile
    device = resolve_device(cfg.device)
    actor = make_actor(cfg, loc.shape[-1], env.action_spec)
    loss_module, loss_keys, optimizer, update_step = make_learner(cfg, actor)
    # acting: scale the env's return-to-go window, mask the context, keep the last action
    # (the wrapper writes the last return-to-go back at its key: one of the policy's own)
    wrapper = DecisionTransformerInferenceWrapper(actor, inference_context=cfg.context)
    wrapper.set_tensor_keys(observation=KEYS[0], action=KEYS[1], return_to_go=KEYS[2])
    scale_rtg = TensorDictModule(lambda r: r * cfg.reward_scale, [STACKED[2]], [KEYS[2]])
    policy = TensorDictSequential(scale_rtg, wrapper)
    run = Run("dt", cfg, cfg.num_updates, eval_transform=act)

    def update(batch: TensorDict, lr: float) -> TensorDict:
        actor.train()
        set_lr(optimizer, lr)
        # the windows are cut on the CPU, where the episodes are, then moved
        return update_step(batch.to(device))

    def evaluate(episodes: int, seed_offset: int) -> float:
        return mean_std(evaluate_returns(episodes, seed_offset))[0]

    def evaluate_returns(episodes: int, seed_offset: int) -> list[float]:
        actor.eval()
        with torch.no_grad():
            return run.evaluate(cfg.env_id, policy, episodes, seed_offset=seed_offset)

    def score(ret: float) -> float:
        return normalised_score(ret, info)

    # offline: windows of the dataset
    for step in range(1, cfg.num_updates + 1):
        # the linear warm-up of the learning rate
        lr = cfg.lr * min(1.0, step / cfg.warmup_steps)
        losses = update(windows.sample(cfg.batch_size), lr)
        run.frames = step  # the x axis of the logs: gradient steps
        if step % cfg.log_interval == 0:
            run.log(**{key: losses[key].item() for key in loss_keys})
        if step % cfg.eval_interval == 0 and step < cfg.num_updates:
            mean = evaluate(cfg.eval_interval_episodes, seed_offset=2000 + step)
            run.logger.log_scalar("eval/return", mean, step)
        run.step_bar(1)

    # online: the best episodes; collect one aiming higher, relabel it, replace the oldest
    summary_extra = {}
    if cfg.online:
        offline_returns = evaluate_returns(cfg.eval_episodes, seed_offset=1000)
        offline_return, offline_std = mean_std(offline_returns)
        summary_extra = {
            "offline_returns": offline_returns,
            "offline_return": offline_return,
            "offline_score": score(offline_return),
        }
        print(
            f"offline pretraining: return {offline_return:.1f} (std {offline_std:.1f} over "
            f"{len(offline_returns)} episodes), score {score(offline_return):.1f}"
        )
        windows, kept_returns = best_episodes_first_replaced(
            data, cfg.reward_scale, cfg.replay_size, cfg.context
        )
        online_target = cfg.online_target_return
        if online_target is None:
            online_target = 2 * target if target > 0 else 0.5 * target
        print(
            f"replay: the dataset's best {len(kept_returns)} episodes (returns "
            f"{kept_returns[0]:.1f} to {kept_returns[-1]:.1f}); collecting with the target "
            f"return {online_target:.1f}"
        )
        collected = []
        collect_env = make_env(cfg.env_id)
        collect_env.append_transform(
            acting_transform(cfg, obs_norm, online_target, env.full_action_spec)
        )
        collect_env.set_seed(cfg.seed + 3000)
        step = cfg.num_updates
        for episode in range(cfg.online_episodes):
            actor.eval()  # the CPU env acts with a CPU copy of the policy (as it evaluates)
            with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
                rollout = collect_env.rollout(1000, on_cpu(policy), break_when_any_done=True)
            collected.append(rollout["next", "reward"].sum().item())
            run.log(episode_return=collected[-1])
            # hindsight: relabelled with the return-to-go it reached
            windows.replace(episode % len(windows.lengths), relabelled(rollout, cfg.reward_scale))
            for _ in range(cfg.online_updates):
                losses = update(windows.sample(cfg.batch_size), cfg.online_lr)
                step += 1
                run.frames = step
            run.log(**{key: losses[key].item() for key in loss_keys})

    actor.eval()
    summary = run.finish(
        cfg.env_id, policy, curve_key="eval/return", actor=actor, loss_module=loss_module
    )
    summary.update(summary_extra)
    if cfg.online:  # the same evaluation episodes before and after: a paired difference
        summary["online_returns"] = collected
        summary["online_target_return"] = online_target
        summary["score_change"], summary["score_change_se"] = score_change(
            summary["eval_returns"], offline_returns, info
        )
        print(
            f"online fine-tuning on {len(collected)} episodes (returns "
            f"{', '.join(f'{r:.0f}' for r in collected)}): score change "
            f"{summary['score_change']:+.1f} +- {summary['score_change_se']:.1f} (standard "
            f"error of the paired difference); evaluation std before {offline_std:.1f}, "
            f"after {mean_std(summary['eval_returns'])[1]:.1f}"
        )
    summary["target_return"] = target
    report_score(summary, info)
    print(f"(conditioned on the target return {target:.1f})")
    return summary


def cli_config() -> Config:
    return cli(Config, PRESETS, "dt", __doc__)


if __name__ == "__main__":
    main(cli_config())
