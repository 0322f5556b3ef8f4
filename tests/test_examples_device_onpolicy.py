"""The ``device`` option of the on-policy examples (ppo.py, a2c.py).

This machine has no GPU, so the device path runs on PyTorch's ``meta`` device, which
refuses a CPU tensor (other than a 0-dim scalar) meeting its own as CUDA does ("Tensor
on device cpu is not on the expected device meta!"). The scripts' own ``make_*``
functions build the networks, the loss, the advantage, the optimizer and the update
step with ``device="meta"``; a batch collected on the CPU (the environments stay there)
is moved to meta, as the collector's ``storing_device`` moves it, and the advantage and
two update steps run eagerly on it. On the CPU the option changes nothing.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path

import pytest
import torch
import tyro

from rl.collectors import Collector

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import load  # noqa: E402
from _device_checks import META  # noqa: E402


@pytest.fixture(scope="module")
def ppo():
    return load("ppo")


@pytest.fixture(scope="module")
def a2c():
    load("ppo")  # a2c.py imports ppo.py's agent and env
    return load("a2c")


@pytest.fixture
def meta_lr(monkeypatch):
    """torch.optim's constructors check ``0 <= lr`` on the host (a sync for a CUDA
    tensor), which a meta tensor cannot answer: Adam and RMSprop check a stand-in value
    here and then keep the learning-rate tensor the script made, where it made it."""
    for name in ("Adam", "RMSprop"):
        real = getattr(torch.optim, name)

        class Checked(real):
            def __init__(self, params, lr, **kwargs):
                super().__init__(params, lr=1.0 if torch.is_tensor(lr) else lr, **kwargs)
                if torch.is_tensor(lr):
                    for group in self.param_groups:
                        group["lr"] = lr

        monkeypatch.setattr(torch.optim, name, Checked)


def _recording_gae(module, monkeypatch) -> list:
    """The GAE instances ``module`` builds from now on."""
    made = []

    class RecordedGAE(module.GAE):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(module, "GAE", RecordedGAE)
    return made


def _cpu_batch(module, cfg):
    """One batch of ``cfg.num_envs x cfg.num_steps`` transitions collected on the CPU by a
    CPU copy of the agent, as the script's collector yields it."""
    cpu_cfg = dataclasses.replace(cfg, device="cpu")
    env = module.make_env(cpu_cfg, cfg.num_envs)
    env.set_seed(0)
    actor, _ = module.make_agent(cpu_cfg, env)
    frames = cfg.num_envs * cfg.num_steps
    collector = Collector(env, actor, frames_per_batch=frames, total_frames=frames)
    batch = next(iter(collector))
    collector.shutdown()
    assert not batch["next", "observation"].isnan().any()  # see meta_gae
    return env, batch


def _devices(tensors) -> set[str]:
    return {str(t.device) for t in tensors}


def _assert_on_meta(loss_module, actor, critic, optimizer) -> None:
    """Every parameter and buffer of the loss and the networks, and the optimizer's
    learning rate and per-parameter state, on meta; torch.optim's eager step counts are
    the exception: 0-dim CPU tensors by design (no device sync to read them), as on CUDA."""
    for module in (loss_module, actor, critic):
        assert _devices(module.parameters()) == {"meta"}
        assert _devices(module.buffers()) <= {"meta"}
    assert _devices(loss_module.buffers()) == {"meta"}  # its coefficients
    for group in optimizer.param_groups:
        assert _devices(group["params"]) == {"meta"}
        if torch.is_tensor(group["lr"]):
            assert group["lr"].device == META
    for param, state in optimizer.state.items():
        assert param.grad is not None and param.grad.device == META
        for name, value in state.items():
            if name == "step" and value.device.type == "cpu":
                assert value.dim() == 0
            else:
                assert value.device == META, (name, value.device)


class TestPPO:
    @pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
    def test_advantage_and_updates_run_on_the_device(
        self, ppo, env_id, meta_gae, monkeypatch, no_bound_reads
    ):
        cfg = ppo.Config(env_id=env_id, num_envs=2, num_steps=8, hidden=16, device="meta")
        cfg.update_epochs, cfg.num_minibatches = 1, 2
        env, batch = _cpu_batch(ppo, cfg)
        gaes = _recording_gae(ppo, monkeypatch)
        actor, critic = ppo.make_agent(cfg, env)
        advantage = ppo.make_advantage(cfg, critic)
        loss_module, optimizer = ppo.make_loss(cfg, actor, critic)
        step = ppo.make_update_step(cfg, loss_module, optimizer)
        assert _devices(gaes[0].buffers()) == {"meta"}  # gamma, lambda

        batch = advantage(batch.to(META))
        assert batch["advantage"].device == META and batch["value_target"].device == META
        indices = []

        def recorded(flat, index):
            indices.append(index)
            return step(flat, index)

        loss = ppo.update_epochs(cfg, loss_module, optimizer, batch, 8, recorded)
        assert loss.device == META and loss.shape == ()
        assert [(i.device, i.shape) for i in indices] == [(META, (8,))] * 2  # 2 minibatches
        _assert_on_meta(loss_module, actor, critic, optimizer)
        assert {s["step"].item() for s in optimizer.state.values()} == {2.0}

    def test_compiled_step_keeps_its_lr_and_state_on_the_device(self, ppo, meta_lr):
        """Compiled, the learning rate is a tensor annealed in place (a CUDA graph's
        replay reads it where it lies) and the optimizer's state is made up front; no
        step is compiled here: their placement is what is checked."""
        cfg = ppo.Config(num_envs=2, num_steps=8, hidden=16, compile=True, device="meta")
        env = ppo.make_env(dataclasses.replace(cfg, device="cpu"), 2)
        actor, critic = ppo.make_agent(cfg, env)
        loss_module, optimizer = ppo.make_loss(cfg, actor, critic)
        ppo.make_update_step(cfg, loss_module, optimizer)
        ppo.set_lr(optimizer, 5e-4)  # the script's annealing
        (group,) = optimizer.param_groups
        assert group["lr"].device == META
        states = list(optimizer.state.values())
        assert len(states) == len(group["params"])
        assert {str(v.device) for s in states for v in s.values()} == {"meta"}

    def test_a_config_without_a_device_field_stays_on_the_cpu(self, ppo):
        """A config of one's own passed to make_agent, make_loss and make_update_step (the
        scripts here all have the field): without a ``device`` field, the CPU."""
        fields = dataclasses.asdict(ppo.Config(num_envs=2, hidden=16))
        del fields["device"]
        cfg = types.SimpleNamespace(**fields)
        assert ppo.config_device(cfg) == torch.device("cpu")
        actor, critic = ppo.make_agent(cfg, ppo.make_env(cfg, 2))
        loss_module, _ = ppo.make_loss(cfg, actor, critic)
        assert _devices([*loss_module.parameters(), *loss_module.buffers()]) == {"cpu"}

    def test_the_command_line_takes_the_device(self, ppo):
        assert ppo.Config().device == "cpu"
        assert ppo.cli(["--device", "cuda:1"]).device == "cuda:1"
        assert ppo.cli(["pendulum", "--device", "auto"]).device == "auto"


class TestA2C:
    def test_advantage_and_updates_run_on_the_device(self, a2c, meta_gae, monkeypatch):
        cfg = a2c.Config(num_envs=2, num_steps=5, hidden=16, device="meta")
        env, batch = _cpu_batch(a2c, cfg)
        gaes = _recording_gae(a2c, monkeypatch)
        actor, critic = a2c.make_agent(cfg, env)
        loss_module, optimizer, advantage, update = a2c.make_learner(cfg, actor, critic)
        assert advantage is None  # inside the update step (without --cudagraphs)
        assert _devices(gaes[0].buffers()) == {"meta"}  # gamma, lambda

        batch = batch.to(META)
        losses = [update(batch), update(batch)]
        assert [(x.device, x.shape) for x in losses] == [(META, ())] * 2
        _assert_on_meta(loss_module, actor, critic, optimizer)
        assert {s["step"].item() for s in optimizer.state.values()} == {2.0}
        assert {str(s["square_avg"].device) for s in optimizer.state.values()} == {"meta"}

    def test_the_command_line_takes_the_device(self, a2c):
        assert a2c.Config().device == "cpu"
        assert tyro.cli(a2c.Config, args=["--device", "cuda:1"]).device == "cuda:1"

    def test_compiled_step_keeps_its_lr_and_state_on_the_device(self, a2c, meta_lr):
        cfg = a2c.Config(num_envs=2, num_steps=5, hidden=16, compile=True, device="meta")
        env = a2c.make_env(dataclasses.replace(cfg, device="cpu"), 2)
        actor, critic = a2c.make_agent(cfg, env)
        _, optimizer, _, _ = a2c.make_learner(cfg, actor, critic)
        a2c.set_lr(optimizer, 5e-4)
        (group,) = optimizer.param_groups
        assert group["lr"].device == META
        states = list(optimizer.state.values())
        assert len(states) == len(group["params"])
        assert {str(v.device) for s in states for v in s.values()} == {"meta"}


@pytest.mark.parametrize("name", ["ppo", "a2c"])
class TestDeviceOption:
    @pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
    def test_a_missing_cuda_device_stops_the_run_at_the_start(self, name, request, tmp_path):
        module = request.getfixturevalue(name)
        with pytest.raises(RuntimeError, match=r"--device 'cuda'"):
            module.resolve_device("cuda")
        assert module.resolve_device("auto") == torch.device("cpu")
        cfg = module.Config(device="cuda", progress=False, log_dir=str(tmp_path))
        with pytest.raises(RuntimeError, match=r"--device 'cuda'"):
            module.main(cfg)
        assert not any(tmp_path.iterdir())  # stopped before the logger was made

    def test_cudagraphs_on_the_cpu_device_names_the_option(
        self, name, request, monkeypatch, tmp_path
    ):
        """Where CUDA is present but ``--device`` is left on the CPU, the captured policy
        and update step refuse their CPU parameters at construction and name the option
        (the check that CUDA exists is switched off to reach them here)."""
        module = request.getfixturevalue(name)
        monkeypatch.setitem(module.compile_policy.__globals__, "check_cudagraphs", lambda c: None)
        cfg = module.Config(num_envs=2, num_steps=8, hidden=16, cudagraphs=True)
        cfg.progress, cfg.log_dir = False, str(tmp_path)
        what = r"captures {} on a CUDA device, but its parameters are on cpu.*--device cuda"
        with pytest.raises(RuntimeError, match=what.format("the policy")):
            module.main(cfg)
        actor, critic = module.make_agent(cfg, module.make_env(cfg, 2))
        with pytest.raises(RuntimeError, match=what.format("the update step")):
            if name == "ppo":
                module.make_update_step(cfg, *module.make_loss(cfg, actor, critic))
            else:
                module.make_learner(cfg, actor, critic)

    def test_the_cpu_device_changes_nothing(self, name, request, monkeypatch, tmp_path):
        """A seeded tiny run gives the same weights with the default config and with
        ``device="cpu"`` given; on the CPU the collector is given no device (as before the
        option existed: a ``storing_device`` would move each batch there again)."""
        module = request.getfixturevalue(name)
        small = {"total_frames": 128, "num_envs": 2, "num_steps": 32, "update_epochs": 2}
        if name == "a2c":
            small = {"total_frames": 60, "num_envs": 2, "num_steps": 5, "anneal_lr": True}
        small.update(eval_episodes=1, progress=False, log_dir=str(tmp_path), hidden=16)

        def weights(**kwargs):
            out = module.main(module.Config(**small, **kwargs))
            return {
                **{f"actor.{k}": v for k, v in out["actor"].state_dict().items()},
                **{f"critic.{k}": v for k, v in out["critic"].state_dict().items()},
            }

        default = weights()
        assert {str(v.device) for v in default.values()} == {"cpu"}
        given = []

        class RecordingCollector(Collector):
            def __init__(self, *args, **kwargs):
                given.append({k: kwargs.get(k) for k in ("policy_device", "storing_device")})
                super().__init__(*args, **kwargs)

        monkeypatch.setattr(module, "Collector", RecordingCollector)
        explicit = weights(device="cpu")
        assert given == [{"policy_device": None, "storing_device": None}]
        assert default.keys() == explicit.keys()
        for key, value in default.items():
            torch.testing.assert_close(explicit[key], value, rtol=0, atol=0)
