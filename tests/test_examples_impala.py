"""examples/impala.py: V-trace corrects with the actors' own log-probabilities, the
asynchronous learner learns a probe env's observation-dependent action and its value,
CartPole's return rises on a small budget, the worker processes (and with --ray the Ray
actors and the local Ray instance) are gone after the run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from rl.collectors import Collector
from rl.core import ExplorationType, set_exploration_type
from rl.core.ray_runtime import child_pids, processes_left
from rl.objectives.value.functional import vtrace_advantage_estimate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PROBE = "ObservationActionRewardProbe"


def _load(name: str):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and `from ppo import ...` look it up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def impala():
    _load("ppo")
    return _load("impala")


def _probe_config(impala, tmp_path, **kwargs):
    defaults = {
        "env_id": PROBE,
        "total_frames": 6144,
        "num_workers": 2,
        "envs_per_worker": 16,
        "num_steps": 8,
        "gamma": 0.9,
        "lr": 3e-3,
        "ent_coef": 0.0,
        "eval_interval": 0,
        "eval_episodes": 1,
        "log_dir": str(tmp_path),
        "exp_name": "run",
        "progress": False,
    }
    return impala.Config(**{**defaults, **kwargs})


def _assert_learned_the_probe(out, gamma: float):
    env = _load("_common").make_base_env(PROBE, 8)
    env.set_seed(123)
    td = env.reset()
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        out["actor"](td)
        out["critic"](td)
    obs = td["observation"]
    assert (td["action"].argmax(-1) == env.optimal_action(obs)).all()
    torch.testing.assert_close(td["state_value"], env.expected_value(obs, gamma), atol=0.2, rtol=0)


class TestVTrace:
    def test_behaviour_log_probs_are_the_collectors(self, impala):
        """log mu is read from the batch (what the collecting policy wrote), log pi is the
        learner's current policy on the stored action: after the learner's weights move,
        the importance weights are their ratio, computed by hand here."""
        torch.manual_seed(0)
        cfg = impala.Config(envs_per_worker=4, num_steps=10)
        env = impala.make_base_env(cfg.env_id, cfg.envs_per_worker, categorical=True)
        actor, critic = impala.make_agent(cfg, env)
        collector = Collector(env, actor, frames_per_batch=40, total_frames=40)
        batch = next(iter(collector))
        collector.shutdown()
        assert batch.shape == (4, 10)

        with torch.no_grad():
            impala.vtrace(cfg, actor, critic, batch)  # the same weights: on-policy
        torch.testing.assert_close(batch["importance_weight"], torch.ones(4, 10, 1))

        with torch.no_grad():  # the learner moves on; the batch keeps the actor's log-probs
            for p in actor.parameters():
                p.add_(torch.randn_like(p) * 0.3)
            impala.vtrace(cfg, actor, critic, batch)
            logits = actor.module[0](batch["observation"])
        log_pi = torch.log_softmax(logits, -1).gather(-1, batch["action"].unsqueeze(-1))
        rho = (log_pi - batch["action_log_prob"].unsqueeze(-1)).exp()
        torch.testing.assert_close(batch["importance_weight"], rho)
        assert (rho - 1).abs().max() > 0.05
        value = critic(batch.select("observation"))["state_value"].detach()
        next_value = critic(batch["next"].select("observation"))["state_value"].detach()
        advantage, target = vtrace_advantage_estimate(
            cfg.gamma,
            log_pi,
            batch["action_log_prob"].unsqueeze(-1),
            value,
            next_value,
            batch["next", "reward"],
            batch["next", "done"],
            batch["next", "terminated"],
        )
        torch.testing.assert_close(batch["advantage"], advantage)
        torch.testing.assert_close(batch["value_target"], target)


class TestUpdate:
    def test_step_is_vtrace_then_a_clipped_rmsprop_step(self, impala):
        """The learner's step (eager) equals the update written out by hand: V-trace with
        the weights before the step, A2CLoss on the flattened rollouts, backward, the
        gradient norm clipped over every parameter, RMSprop; the logs are that loss and
        the mean importance weight. Three steps, parameters equal to the bit."""
        import copy

        from rl.objectives import A2CLoss

        torch.manual_seed(0)
        cfg = impala.Config(envs_per_worker=4, num_steps=8, ent_coef=0.01)
        env = impala.make_base_env(cfg.env_id, cfg.envs_per_worker, categorical=True)
        actor, critic = impala.make_agent(cfg, env)
        collector = Collector(env, actor, frames_per_batch=32, total_frames=96)
        batches = [batch.exclude("collector") for batch in collector]
        collector.shutdown()
        with torch.no_grad():  # the learner's weights apart from the actor's: rho != 1
            for p in actor.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        hand_actor, hand_critic = copy.deepcopy(actor), copy.deepcopy(critic)
        before = [p.detach().clone() for p in actor.parameters()]
        _, advantage, update = impala.make_update(cfg, actor, critic)
        assert advantage is None  # (V-trace before the step with cudagraphs only)

        loss_module = A2CLoss(
            hand_actor,
            hand_critic,
            entropy_coeff=cfg.ent_coef,
            critic_coeff=cfg.vf_coef,
            loss_critic_type="l2",
        )
        params = list(loss_module.parameters())
        optimizer = torch.optim.RMSprop(
            params, lr=cfg.lr, alpha=cfg.rmsprop_alpha, eps=cfg.rmsprop_eps
        )
        for batch in batches:
            logs = update(batch.clone())
            by_hand = batch.clone()
            with torch.no_grad():
                impala.vtrace(cfg, hand_actor, hand_critic, by_hand)
            losses = loss_module(by_hand.reshape(-1))
            loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
            optimizer.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            assert norm > cfg.max_grad_norm  # the clipping acts
            optimizer.step()
            assert torch.equal(logs["loss"], loss.detach())
            iw = by_hand["importance_weight"]
            assert torch.equal(logs["importance_weight"], iw.mean())
            assert (iw - 1).abs().max() > 0.01  # off-policy: the weights matter
        ours = [*actor.parameters(), *critic.parameters()]
        theirs = [*hand_actor.parameters(), *hand_critic.parameters()]
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
        assert all(not torch.equal(a, b) for a, b in zip(actor.parameters(), before))  # moved

    def test_frames_are_rounded_up_to_whole_updates(self, impala):
        cfg = impala.Config(total_frames=100, envs_per_worker=8, num_steps=5)
        assert impala.total_frames(cfg) == 120  # 3 rollouts of 40
        cfg.batch_size = 2
        assert impala.total_frames(cfg) == 160  # 2 updates of 2 rollouts
        cfg.total_frames = 500_000
        assert impala.total_frames(cfg) == 500_000


class TestIMPALA:
    def test_learns_the_probe_with_worker_processes_and_leaves_none(self, impala, tmp_path):
        children_before = set(child_pids())
        cfg = _probe_config(impala, tmp_path)
        out = impala.main(cfg)
        assert out["frames"] == 6144 and out["updates"] == 6144 // 128
        _assert_learned_the_probe(out, cfg.gamma)
        assert out["eval_mean"] == 1.0
        # every rollout's update is logged at its frame count; the weights are near 1
        train = tmp_path / "run" / "scalars" / "train"
        rows = [r.split(",") for r in (train / "importance_weight.csv").read_text().split()]
        assert [int(f) for f, _ in rows] == [128 * i for i in range(1, 49)]
        assert all(0.5 < float(w) < 1.5 for _, w in rows)
        assert out["curve"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert not processes_left([p for p in child_pids() if p not in children_before], 10)

    def test_a_total_of_part_updates_is_rounded_up(self, impala, tmp_path):
        """200 frames in updates of 2 rollouts of 2 x 8: 7 whole updates, 224 frames
        (every update of one shape), as the collectors are told."""
        cfg = _probe_config(impala, tmp_path, total_frames=200, envs_per_worker=2, batch_size=2)
        out = impala.main(cfg)
        assert out["frames"] == 224 and out["updates"] == 7

    @pytest.mark.slow  # compilation: the learner's step and each worker's policy
    def test_compiled_learns_the_probe(self, impala, tmp_path):
        """--compile: each worker compiles its own copy of the policy, the learner's step
        (V-trace inside) is one graph, and the run learns the probe as the eager one does
        (that the workers act with the pushed weights: test_examples_compile.py's
        test_compiled_policy_in_worker_processes_acts_with_pushed_weights)."""
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()
        cfg = _probe_config(impala, tmp_path, compile=True)
        out = impala.main(cfg)
        assert out["updates"] == 6144 // 128
        _assert_learned_the_probe(out, cfg.gamma)
        assert out["eval_mean"] == 1.0
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
        # every update logged, its mean importance weight near 1, as in the eager run
        train = tmp_path / "run" / "scalars" / "train"
        rows = [r.split(",") for r in (train / "importance_weight.csv").read_text().split()]
        assert len(rows) == 48 and all(0.5 < float(w) < 1.5 for _, w in rows)

    def test_cartpole_return_rises_on_a_small_budget(self, impala, tmp_path):
        cfg = impala.Config(
            total_frames=16_384,
            eval_interval=0,
            eval_episodes=2,
            log_dir=str(tmp_path),
            exp_name="run",
            progress=False,
        )
        out = impala.main(cfg)
        rows = (tmp_path / "run" / "scalars" / "train" / "episode_return.csv").read_text()
        returns = [float(r.split(",")[1]) for r in rows.split()]
        # random play lasts about 22 steps; the last 20 episodes last several times that
        # (about 140 to 160 here: the margin leaves room for the actors' timing)
        assert returns[0] < 40 and returns[-1] > 60
        assert out["eval_mean"] > 60

    def test_help_lists_every_field(self, impala, capsys, monkeypatch):
        import tyro

        monkeypatch.setattr(sys, "argv", ["impala.py", "--help"])
        with pytest.raises(SystemExit) as exit_info:
            tyro.cli(impala.Config, description=impala.__doc__)
        assert exit_info.value.code == 0
        help_text = capsys.readouterr().out
        for field in impala.Config.__dataclass_fields__:
            assert "--" + field.replace("_", "-") in help_text, field


@pytest.mark.timeout(240)
def test_ray_actors_learn_the_probe_and_ray_stops(impala, tmp_path):
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    children_before = set(child_pids())
    cfg = _probe_config(impala, tmp_path, ray=True, num_cpus=2)
    out = impala.main(cfg)
    assert out["frames"] == 6144
    _assert_learned_the_probe(out, cfg.gamma)
    # the example started Ray, so its collector's shutdown stopped it and its processes
    assert not ray.is_initialized()
    assert not processes_left([p for p in child_pids() if p not in children_before])
