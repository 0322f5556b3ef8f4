"""``--device`` of impala.py, dqn_trainer.py, distributed/ppo_ray.py and
distributed/collect_torchrun.py.

This machine has no GPU, so each learner is built on PyTorch's ``meta`` device: a tensor
there has a shape and a device but no values, and an operation that meets a non-scalar
CPU tensor fails as it does on CUDA ("Tensor on device cpu is not on the expected device
meta!"). Each script's own construction (its ``make_*`` functions with
``cfg.device="meta"``) is built, its update step runs twice on a batch shaped as its loop
makes it and moved there, and everything the learner owns must be there.

The actors of the distributed scripts (worker processes, Ray actors, collector ranks)
stay on the CPU by design and act with a CPU copy of the learner's policy, which takes
the learner's weights after each update. Here that copy is forced (``on_cpu`` copying a
CPU policy too, as it copies a GPU one) and a short CPU run must end with the copy
holding the learner's final weights. The ``gpu`` tests run the scripts on CUDA with
``--cudagraphs``; they are skipped without a CUDA device.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from rl.collectors import Collector
from rl.core import ExplorationType, set_exploration_type

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import StrictCudaGraphs, cuda_graphs_on_cpu, load  # noqa: E402
from _device_checks import META, assert_all_on_meta, cuda  # noqa: E402

PROBE = "ObservationActionRewardProbe"


def _rollouts(env, actor, frames: int):
    """One batch of ``frames`` transitions of ``env`` (a batched env, time last) collected
    on the CPU by ``actor``, as a collector hands it over."""
    collector = Collector(env, actor, frames_per_batch=frames, total_frames=frames)
    batch = next(iter(collector))
    collector.shutdown()
    assert not batch["next", "observation"].isnan().any()  # (conftest's meta_gae)
    return batch


def _recording(module, name: str, monkeypatch) -> list:
    """The instances of ``module.<name>`` (a class) that ``module`` builds from now on."""
    made = []
    real = getattr(module, name)

    class Recorded(real):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(module, name, Recorded)
    return made


def _copying_on_cpu(module, monkeypatch) -> list:
    """``module``'s ``on_cpu`` copies a CPU policy too, as it copies a GPU one: the actors
    then act with a module of their own, not the learner's. Returns the copies made."""
    copies = []

    def on_cpu(policy):
        copies.append(copy.deepcopy(policy))
        return copies[-1]

    monkeypatch.setattr(module, "on_cpu", on_cpu)
    return copies


def _recording_agent(module, monkeypatch) -> list[dict]:
    """The actor's initial weights (copies) each time ``module.make_agent`` builds one."""
    made = []
    real = module.make_agent

    def make_agent(*args, **kwargs):
        actor, critic = real(*args, **kwargs)
        made.append({k: v.detach().cpu().clone() for k, v in actor.named_parameters()})
        return actor, critic

    monkeypatch.setattr(module, "make_agent", make_agent)
    return made


def _assert_copy_follows(copy_, learner, initial) -> None:
    """``copy_`` (the actors' policy) is another module than ``learner``, on the CPU, with
    the learner's final weights, which moved away from ``initial``."""
    assert copy_ is not learner
    mine, theirs = dict(copy_.named_parameters()), dict(learner.named_parameters())
    assert sorted(mine) == sorted(theirs)
    assert {p.device.type for p in mine.values()} == {"cpu"}
    assert all(torch.equal(mine[k], theirs[k].cpu()) for k in theirs)
    assert any(not torch.equal(theirs[k].cpu(), initial[k]) for k in theirs)


# ------------------------------------------------------------------------------ impala
@pytest.fixture(scope="module")
def impala():
    load("ppo")  # impala.py imports ppo.py's agent
    return load("impala")


class TestIMPALA:
    @pytest.mark.parametrize("cudagraphs", [False, True])
    def test_learner_lives_on_the_device(self, impala, cudagraphs, monkeypatch):
        """V-trace, the A2C loss, RMSprop and the step on a ``[batch_size x envs, T]``
        batch of rollouts moved to the device (with ``cudagraphs``, V-trace first, then
        the captured step: CPU stand-ins of the CUDA graph)."""
        if cudagraphs:
            cuda_graphs_on_cpu(monkeypatch)
        graphs = len(StrictCudaGraphs.made)
        cfg = impala.Config(
            envs_per_worker=4,
            num_steps=8,
            batch_size=2,
            hidden=16,
            ent_coef=0.01,
            device="meta",
            cudagraphs=cudagraphs,
        )
        env = impala.make_base_env(cfg.env_id, cfg.envs_per_worker, categorical=True)
        cpu_actor, _ = impala.make_agent(dataclasses.replace(cfg, device="cpu"), env)
        rollouts = [_rollouts(env, cpu_actor, 32).exclude("collector") for _ in range(2)]
        losses = _recording(impala, "A2CLoss", monkeypatch)
        actor, critic = impala.make_agent(cfg, env)
        optimizer, advantage, update = impala.make_update(cfg, actor, critic)
        assert (advantage is not None) == cudagraphs
        batch = torch.cat(rollouts, 0).to(META)  # as the loop moves it
        assert batch.shape == (8, 8)
        for _ in range(2):
            if advantage is not None:
                advantage(batch)
            logs = update(batch)
        assert set(logs) == {"loss", "importance_weight"}
        assert_all_on_meta(losses[0], [optimizer], logs)
        if cudagraphs:  # V-trace ran before the step, on the batch itself
            assert batch["advantage"].device == META
        assert [g.calls for g in StrictCudaGraphs.made[graphs:]] == ([2] if cudagraphs else [])
        assert actor(batch.exclude("action"))["action"].device == META  # the learner's policy

    def test_actors_copy_takes_the_learners_weights(self, impala, monkeypatch, tmp_path):
        """The worker processes act with a CPU copy of the policy (forced here; a CPU run
        needs none); after every update it takes the learner's weights, before they are
        pushed: at the end it holds the learner's last ones."""
        copies = _copying_on_cpu(impala, monkeypatch)
        agents = _recording_agent(impala, monkeypatch)
        cfg = impala.Config(
            env_id=PROBE,
            total_frames=6 * 64,
            num_workers=2,
            envs_per_worker=8,
            num_steps=8,
            hidden=16,
            eval_interval=0,
            eval_episodes=1,
            log_dir=str(tmp_path),
            progress=False,
        )
        out = impala.main(cfg)
        assert out["updates"] == 6
        (acting,) = copies
        _assert_copy_follows(acting, out["actor"], agents[0])


# ------------------------------------------------------------------------- dqn_trainer
@pytest.fixture(scope="module")
def dqn_trainer():
    return load("dqn_trainer")


def _transitions(dqn_trainer, cfg, size: int):
    """``size`` transitions of random actions, with the keys the replay buffer keeps, as
    the trainer samples them (``[size]``)."""
    env = dqn_trainer.make_env(cfg, cfg.num_envs)
    env.set_seed(0)
    rollout = env.rollout(size, break_when_any_done=False)
    return rollout.select(*dqn_trainer.TRANSITION_KEYS).reshape(-1)[:size]


class TestDQNTrainer:
    def test_trainer_hooks_step_on_the_device(self, dqn_trainer):
        """The eager path: the trainer computes the loss and its ``optimizer`` hook
        (backward, clipping, Adam) and ``post_optim`` hook (the target copy) step."""
        from rl.core.trainers import OptimizerHook
        from rl.modules import TensorDictSequential

        cfg = dqn_trainer.Config(hidden=16, target_update_interval=1, device="meta")
        env = dqn_trainer.make_env(cfg, 1)
        qnet = dqn_trainer.make_qnet(cfg, env).to(META)
        loss_module, target_update, optimizer, stepper = dqn_trainer.make_learner(cfg, env, qnet)
        assert stepper is None
        hook = OptimizerHook(optimizer)
        batch = _transitions(dqn_trainer, cfg, cfg.batch_size).to(META)
        for _ in range(2):
            losses = hook(loss_module(batch), True, cfg.max_grad_norm)
            target_update.step()
        assert set(losses.keys()) == {"loss", "grad_norm_0"}
        assert_all_on_meta(loss_module, [optimizer], dict(losses.items()))
        # the collector's policy: the Q-network, then epsilon-greedy drawing on the device
        egreedy = dqn_trainer.make_egreedy(
            env, cfg.eps_start, cfg.eps_end, cfg.exploration_fraction * cfg.total_frames, cfg.device
        )
        assert egreedy.eps.device == META and egreedy.spec["action"].device == META
        policy = TensorDictSequential(qnet, egreedy)
        assert policy(batch.exclude("action"))["action"].device == META

    @pytest.mark.parametrize("target_update", ["hard", "soft"])
    def test_captured_step_runs_on_the_device(self, dqn_trainer, target_update, monkeypatch):
        """``--cudagraphs`` (CPU stand-ins of the CUDA graph): the trainer's
        ``optimization_stepper`` runs the whole step (loss, Adam, target update)."""
        module = dqn_trainer
        cuda_graphs_on_cpu(monkeypatch)
        graphs = len(StrictCudaGraphs.made)
        cfg = module.Config(hidden=16, target_update=target_update, cudagraphs=True, device="meta")
        env = module.make_env(cfg, 1)
        qnet = module.make_qnet(cfg, env).to(META)
        loss_module, _, optimizer, stepper = module.make_learner(cfg, env, qnet)
        batch = _transitions(module, cfg, cfg.batch_size).to(META)
        for _ in range(2):
            logs = stepper.step(None, batch.clone())
        assert set(logs.keys()) == {"loss"}
        assert_all_on_meta(loss_module, [optimizer], logs)
        assert [g.calls for g in StrictCudaGraphs.made[graphs:]] == [2]

    def test_validation_policy_moves_its_inputs_to_the_device(self, dqn_trainer):
        """LogValidationReward rolls the CPU evaluation env out with ``OnDevice(qnet)``:
        the Q-network sees its inputs on the device, the env gets the output back on the
        CPU, and eval()/train() reach the Q-network."""
        from tensordict import TensorDict

        seen = []

        class Recorder(torch.nn.Module):
            def forward(self, tensordict):
                seen.append((tensordict["observation"].device, self.training))
                # (no leaves: a meta tensor has no values to copy back to the CPU)
                return tensordict.empty()

        policy = dqn_trainer.OnDevice(Recorder(), META)
        td = TensorDict({"observation": torch.zeros(3, 4)}, batch_size=[3], device="cpu")
        policy.eval()
        out = policy(td)
        assert seen == [(META, False)]
        assert out.device == torch.device("cpu") and out.batch_size == (3,)


# ------------------------------------------------------------------------------ ppo_ray
@pytest.fixture(scope="module")
def ppo_ray():
    pytest.importorskip("ray")
    return load("distributed/ppo_ray")


class TestPPORay:
    def test_learner_lives_on_the_device(self, ppo_ray, meta_gae):
        """GAE, the PPO loss, Adam and the minibatch steps on a batch stacked from every
        actor (``[num_collectors, envs_per_collector, T]``) and moved to the device."""
        ppo = ppo_ray.ppo
        cfg = ppo_ray.Config(num_envs=4, num_steps=8, hidden=16, num_collectors=2, device="meta")
        cfg.update_epochs, cfg.num_minibatches = 1, 2
        env = ppo_ray.make_base_env(cfg.env_id, 2, categorical=True)
        cpu_actor, _ = ppo.make_agent(dataclasses.replace(cfg, device="cpu"), env)
        pieces = [_rollouts(env, cpu_actor, 16) for _ in range(cfg.num_collectors)]
        actor, critic = ppo.make_agent(cfg, env)
        advantage = ppo.make_advantage(cfg, critic)
        loss_module, optimizer = ppo.make_loss(cfg, actor, critic)
        step = ppo.make_update_step(cfg, loss_module, optimizer)
        batch = advantage(torch.stack(pieces, 0).to(META))  # as the loop moves it
        assert batch.shape == (2, 2, 8) and batch["advantage"].device == META
        for _ in range(2):
            loss = ppo.update_epochs(cfg, loss_module, optimizer, batch, 16, step)
        assert_all_on_meta(loss_module, [optimizer], loss)
        assert actor(batch.exclude("action"))["action"].device == META

    @pytest.mark.slow  # a local Ray instance and its actors: about 30 s on 2 cores
    @pytest.mark.timeout(240)
    def test_actors_copy_takes_the_learners_weights(self, ppo_ray, monkeypatch, tmp_path):
        """The Ray actors act with a CPU copy of the policy (forced here), which takes the
        learner's weights after every update: Ray broadcasts those before the next batch."""
        copies = _copying_on_cpu(ppo_ray, monkeypatch)
        agents = _recording_agent(ppo_ray.ppo, monkeypatch)
        cfg = ppo_ray.Config(
            env_id=PROBE,
            total_frames=3 * 64,
            num_envs=4,
            num_steps=16,
            hidden=16,
            update_epochs=1,
            num_minibatches=2,
            eval_episodes=1,
            num_collectors=2,
            num_cpus=2,
            log_dir=str(tmp_path),
            progress=False,
        )
        out = ppo_ray.main(cfg)
        assert out["frames"] == 192 and len(out["losses"]) == 3
        (acting,) = copies
        _assert_copy_follows(acting, out["actor"], agents[0])


# --------------------------------------------------------------------- collect_torchrun
@pytest.fixture(scope="module")
def torchrun():
    return load("distributed/collect_torchrun")


class TestCollectTorchrun:
    @pytest.mark.parametrize("cudagraphs", [False, True])
    def test_learner_lives_on_the_device(self, torchrun, cudagraphs, monkeypatch):
        """The REINFORCE step (reward-to-go, normalised advantage, Adam) on a batch of a
        collector rank (``[frames_per_batch]``) moved to the device."""
        script = torchrun
        if cudagraphs:
            cuda_graphs_on_cpu(monkeypatch)
        graphs = len(StrictCudaGraphs.made)
        cfg = script.Config(device="meta", cudagraphs=cudagraphs)
        env = script.make_env()
        env.set_seed(0)
        cpu_policy = script.make_policy(env)
        collector = Collector(env, cpu_policy, frames_per_batch=64, total_frames=64)
        batch = next(iter(collector))
        collector.shutdown()
        policy = script.make_policy(env).to(META)
        optimizer, step = script.make_learner(cfg, policy)
        batch = batch.to(META)
        for _ in range(2):
            loss = step(batch)
        assert_all_on_meta(policy, [optimizer], loss)
        assert [g.calls for g in StrictCudaGraphs.made[graphs:]] == ([2] if cudagraphs else [])
        assert policy(batch.exclude("action"))["action"].device == META

    def test_ranks_copy_takes_the_learners_weights(self, torchrun, monkeypatch):
        """The collector ranks act with a CPU copy of the policy (forced here), which
        takes the learner's weights after every step, before they are sent."""
        copies = _copying_on_cpu(torchrun, monkeypatch)
        policies = []
        real = torchrun.make_policy

        def make_policy(env):
            policies.append(real(env))
            initial.update({k: v.detach().clone() for k, v in policies[-1].named_parameters()})
            return policies[-1]

        initial: dict = {}
        monkeypatch.setattr(torchrun, "make_policy", make_policy)
        cfg = torchrun.Config(total_frames=600, frames_per_batch=100, num_workers=2)
        out = torchrun.main(cfg)
        assert out["frames"] == 600 and out["policy"] is policies[0]
        (acting,) = copies
        _assert_copy_follows(acting, out["policy"], initial)


# ---------------------------------------------------------------------------- the option
SCRIPTS = [
    "impala",
    "dqn_trainer",
    pytest.param(
        "distributed/ppo_ray",
        marks=pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray"),
    ),
    "distributed/collect_torchrun",
]


def _script(name: str):
    if name == "impala":
        load("ppo")
    return load(name)


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_command_line_takes_the_device(name):
    import tyro

    config = _script(name).Config
    assert config().device == "cpu"  # CPU runs are as they were
    assert tyro.cli(config, args=["--device", "cuda:1"]).device == "cuda:1"
    assert tyro.cli(config, args=["--device", "auto"]).device == "auto"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("name", SCRIPTS)
def test_a_cuda_device_this_machine_lacks_stops_the_script_at_the_start(name, tmp_path):
    """Before any worker process, Ray instance or collector rank is started."""
    from rl.core.ray_runtime import child_pids

    module = _script(name)
    fields = module.Config.__dataclass_fields__
    extra = {k: v for k, v in {"progress": False, "log_dir": str(tmp_path)}.items() if k in fields}
    children = set(child_pids())
    with pytest.raises(RuntimeError, match="--device 'cuda': this machine has 0 CUDA"):
        module.main(module.Config(device="cuda", **extra))
    assert set(child_pids()) <= children


# ---------------------------------------------------------------------------- on a GPU
# These run where CUDA is (benchmarks/bench_gpu.py runs every file holding a ``gpu``
# test); here they are skipped. Each script runs with its learner on the GPU and its
# update step captured in a CUDA graph, on the probe env its CPU tests learn (impala,
# dqn_trainer, ppo_ray: the same assertions as theirs) or, for collect_torchrun (a
# plumbing demo, not a tuned learner), on CartPole: frames, placement, finite weights.


def _probe_actions(actor, n: int = 8):
    """The deterministic actions and the observations of ``n`` fresh probe states."""
    env = load("_common").make_base_env(PROBE, n)
    env.set_seed(123)
    td = env.reset()
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        td = actor(td.to(next(actor.parameters()).device)).cpu()
    return env, td


@pytest.mark.gpu
@cuda
@pytest.mark.timeout(300)
def test_impala_cudagraphs_on_the_gpu_learns_the_probe(tmp_path):
    load("ppo")
    impala = load("impala")
    cfg = impala.Config(
        env_id=PROBE,
        total_frames=6144,
        num_workers=2,
        envs_per_worker=16,
        num_steps=8,
        gamma=0.9,
        lr=3e-3,
        eval_interval=0,
        eval_episodes=1,
        log_dir=str(tmp_path),
        progress=False,
        device="cuda",
        cudagraphs=True,
    )
    out = impala.main(cfg)
    assert out["frames"] == 6144 and out["updates"] == 6144 // 128
    assert {p.device.type for p in out["actor"].parameters()} == {"cuda"}
    env, td = _probe_actions(out["actor"])
    assert (td["action"].argmax(-1) == env.optimal_action(td["observation"])).all()
    with torch.no_grad():
        value = out["critic"](td.to("cuda"))["state_value"].cpu()
    expected = env.expected_value(td["observation"], cfg.gamma)
    torch.testing.assert_close(value, expected, atol=0.2, rtol=0)
    assert out["eval_mean"] == 1.0


@pytest.mark.gpu
@cuda
def test_dqn_trainer_cudagraphs_on_the_gpu_learns_the_probe(tmp_path):
    dqn_trainer = load("dqn_trainer")
    cfg = dqn_trainer.Config(
        env_id=PROBE,
        num_envs=8,
        total_frames=1536,
        frames_per_batch=64,
        init_random_frames=128,
        optim_steps_per_batch=16,
        batch_size=32,
        hidden=32,
        lr=3e-3,
        gamma=0.9,
        target_update_interval=16,
        exploration_fraction=0.5,
        eval_interval=2,
        eval_frames=16,
        eval_episodes=1,
        save_interval=256,
        log_dir=str(tmp_path),
        exp_name="run",
        progress=False,
        device="cuda",
        cudagraphs=True,
    )
    out = dqn_trainer.main(cfg)
    qnet = out["qnet"]
    assert {p.device.type for p in qnet.parameters()} == {"cuda"}
    env, td = _probe_actions(qnet, 16)
    obs = td["observation"]
    assert (td["action"].argmax(-1) == env.optimal_action(obs)).all()
    expected = torch.cat([-torch.ones_like(obs), torch.ones_like(obs)], -1)
    expected = torch.where(obs > 0, expected, expected.flip(-1))
    torch.testing.assert_close(td["action_value"], expected, atol=0.15, rtol=0)
    assert out["eval_returns"] == [1.0]


@pytest.mark.gpu
@cuda
@pytest.mark.timeout(300)
def test_ppo_ray_cudagraphs_on_the_gpu_learns_the_probe(tmp_path):
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    ppo_ray = load("distributed/ppo_ray")
    cfg = ppo_ray.Config(
        env_id=PROBE,
        total_frames=2048,
        num_envs=16,
        num_steps=16,
        gamma=0.9,
        lr=3e-3,
        anneal_lr=False,
        update_epochs=4,
        num_minibatches=4,
        gae_lambda=0.95,
        eval_episodes=2,
        num_collectors=2,
        num_cpus=2,
        log_dir=str(tmp_path),
        progress=False,
        device="cuda",
        cudagraphs=True,
    )
    out = ppo_ray.main(cfg)
    assert out["frames"] == 2048 and len(out["losses"]) == 8 and out["losses_finite"]
    assert {p.device.type for p in out["actor"].parameters()} == {"cuda"}
    env, td = _probe_actions(out["actor"])
    assert (td["action"].argmax(-1) == env.optimal_action(td["observation"])).all()
    assert out["eval_mean"] == 1.0
    assert not ray.is_initialized()


@pytest.mark.gpu
@cuda
@pytest.mark.timeout(300)
def test_collect_torchrun_cudagraphs_on_the_gpu(monkeypatch):
    import cloudpickle

    script = load("distributed/collect_torchrun")
    # CUDA is initialised: the collector ranks are spawned, and unpickle the env factory
    # of this module, which they cannot import (loaded from its path): it goes by value
    cloudpickle.register_pickle_by_value(script)
    try:
        cfg = script.Config(total_frames=2000, frames_per_batch=200, device="cuda", cudagraphs=True)
        out = script.main(cfg)
    finally:
        cloudpickle.unregister_pickle_by_value(script)
    assert out["frames"] == 2000
    params = list(out["policy"].parameters())
    assert {p.device.type for p in params} == {"cuda"}
    assert all(p.isfinite().all() for p in params)
