"""rl.core.trainers.helpers: each builder's output checked against what the config asks."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

pytest.importorskip("rl.collectors")
pytest.importorskip("rl.objectives")
pytest.importorskip("rl.data")

import rl.core  # noqa: E402
from rl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector  # noqa: E402
from rl.core import Bounded, Categorical, Composite, CSVLogger, OneHot, Unbounded  # noqa: E402
from rl.core.trainers import Trainer, helpers  # noqa: E402
from rl.core.trainers.helpers import (  # noqa: E402
    DiscreteModelConfig,
    DreamerConfig,
    EnvConfig,
    LoggerConfig,
    LossConfig,
    OffPolicyCollectorConfig,
    OnPolicyCollectorConfig,
    ReplayArgsConfig,
    TrainerConfig,
    _config,
    correct_for_frame_skip,
    get_stats_random_rollout,
    initialize_observation_norm_transforms,
    make_collector_offpolicy,
    make_collector_onpolicy,
    make_dqn_actor,
    make_dqn_loss,
    make_dreamer,
    make_replay_buffer,
    make_target_updater,
    make_trainer,
    parallel_env_constructor,
    retrieve_observation_norms_state_dict,
    sync_async_collector,
    sync_sync_collector,
    transformed_env_constructor,
)
from rl.core.trainers.helpers._collectors import split_env_fns  # noqa: E402
from rl.data import MultiStep, PrioritizedSampler, RandomSampler, TensorDictReplayBuffer  # noqa: E402
from rl.envs import (  # noqa: E402
    CartPoleEnv,
    CatTensors,
    EnvBase,
    EnvCreator,
    GymEnv,
    InitTracker,
    NoopResetEnv,
    ObservationNorm,
    ParallelEnv,
    RewardScaling,
    StepCounter,
    TensorDictPrimer,
    TransformedEnv,
    VecNorm,
)
from rl.modules import DistributionalQValueActor, NoisyLinear, QValueActor  # noqa: E402
from rl.objectives import DistributionalDQNLoss, DQNLoss, HardUpdate, SoftUpdate  # noqa: E402


def config(*classes, **overrides) -> SimpleNamespace:
    """One script config from the config dataclasses (as a script combines them)."""
    values = {}
    for cls in classes:
        values.update(dataclasses.asdict(cls()))
    values.update(overrides)
    return SimpleNamespace(**values)


class RampEnv(EnvBase):
    """``observation = [t, 5]`` at step t (or pixels all equal to t), reward = t; never
    done. Known statistics, and one trajectory per collected batch."""

    def __init__(self, pixels: int = 0, channels_last: bool = False, action_spec=None):
        super().__init__(batch_size=())
        self.pixel_shape = None
        if pixels:
            self.pixel_shape = (pixels, pixels, 3) if channels_last else (3, pixels, pixels)
            self.observation_spec = Composite(pixels=Unbounded(shape=self.pixel_shape))
        else:
            self.observation_spec = Composite(observation=Unbounded(shape=(2,)))
        self.action_spec = Bounded(-1.0, 1.0, shape=(2,)) if action_spec is None else action_spec
        self.reward_spec = Unbounded(shape=(1,))
        self.t = 0

    def _obs(self):
        if self.pixel_shape is not None:
            return {"pixels": torch.full(self.pixel_shape, float(self.t))}
        return {"observation": torch.tensor([float(self.t), 5.0])}

    def _reset(self, tensordict):
        self.t = 0
        flag = torch.zeros(1, dtype=torch.bool)
        return TensorDict(**self._obs(), done=flag, terminated=flag.clone())

    def _step(self, tensordict):
        self.t += 1
        flag = torch.zeros(1, dtype=torch.bool)
        reward = torch.full((1,), float(self.t))
        return TensorDict(**self._obs(), reward=reward, done=flag, terminated=flag.clone())

    def _set_seed(self, seed):
        return seed


class TestConfigErrors:
    def test_missing_field_names_it_and_its_config(self):
        with pytest.raises(AttributeError, match=r"reads cfg.frame_skip.*field of EnvConfig"):
            correct_for_frame_skip(SimpleNamespace(total_frames=10))

    def test_missing_package_names_the_extra(self, monkeypatch):
        monkeypatch.setitem(_config._INSTALLED, "rl.data", False)
        cfg = config(ReplayArgsConfig, TrainerConfig)
        with pytest.raises(
            ImportError, match=r"make_replay_buffer needs rl.data \(rl-data\).*rl-core\[helpers\]"
        ):
            make_replay_buffer("cpu", cfg)

    def test_config_dataclasses_defaults(self):
        assert LoggerConfig().logger == "csv" and LoggerConfig().recorder_log_keys is None
        assert OffPolicyCollectorConfig().init_random_frames == 50000
        assert issubclass(OffPolicyCollectorConfig, OnPolicyCollectorConfig)
        assert (
            EnvConfig().center_crop == [] and EnvConfig().center_crop is not EnvConfig().center_crop
        )


class TestImportPaths:
    def test_torchrl_submodule_paths(self):
        modules = [
            importlib.import_module(f"rl.core.trainers.helpers.{name}")
            for name in (
                "collectors",
                "envs",
                "logger",
                "losses",
                "models",
                "replay_buffer",
                "trainers",
            )
        ]
        names = [name for module in modules for name in module.__all__]
        assert sorted(names) == sorted(helpers.__all__)  # each name in one submodule
        for module in modules:
            for name in module.__all__:
                assert getattr(module, name) is getattr(helpers, name) is getattr(rl.core, name)


class TestCorrectForFrameSkip:
    def test_frame_counts_divided(self):
        cfg = SimpleNamespace(
            frame_skip=4, total_frames=1002, frames_per_batch=64, noops=7, init_env_steps=3, lr=0.1
        )
        assert correct_for_frame_skip(cfg) is cfg
        assert (cfg.total_frames, cfg.frames_per_batch, cfg.noops, cfg.init_env_steps) == (
            250,
            16,
            1,
            0,
        )
        assert cfg.lr == 0.1 and cfg.frame_skip == 4  # not a frame count

    def test_frame_skip_one_changes_nothing(self):
        cfg = config(EnvConfig, OffPolicyCollectorConfig)
        before = dict(vars(cfg))
        correct_for_frame_skip(cfg)
        assert vars(cfg) == before

    @pytest.mark.parametrize("skip", [0, -2, 1.5, True])
    def test_bad_frame_skip(self, skip):
        with pytest.raises(ValueError, match="frame_skip must be a positive integer"):
            correct_for_frame_skip(SimpleNamespace(frame_skip=skip, total_frames=10))


class TestTransformedEnv:
    def test_state_env_transforms_and_values(self):
        cfg = config(EnvConfig, reward_scaling=2.0, reward_loc=0.5, max_frames_per_traj=3)
        make = transformed_env_constructor(
            cfg, custom_env_maker=RampEnv, stats={"loc": 1.0, "scale": 2.0}
        )
        env = make()
        kinds = [type(t) for t in env.transform]
        assert kinds[:3] == [RewardScaling, CatTensors, ObservationNorm]
        assert kinds[-2:] == [StepCounter, InitTracker]
        td = env.rollout(10, break_when_any_done=False)
        t = torch.tensor([0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0])  # truncated at 3
        raw = torch.stack([t, torch.full_like(t, 5.0)], -1)
        torch.testing.assert_close(td["observation_vector"], (raw - 1.0) / 2.0)
        torch.testing.assert_close(
            td["next", "reward"][:3], torch.tensor([[1.0], [2.0], [3.0]]) * 2.0 + 0.5
        )
        assert td["next", "truncated"][:, 0].tolist() == [False, False, True] * 3 + [False]

    def test_gym_categorical_and_noops(self):
        cfg = config(EnvConfig, env_name="CartPole-v1", categorical_action_encoding=True, noops=2)
        cfg.collector_device = ["cpu"]
        make = transformed_env_constructor(
            cfg, stats={"loc": 0.0, "scale": 1.0}, use_env_creator=True
        )
        assert isinstance(make, EnvCreator)
        env = make()
        assert isinstance(env.action_spec, Categorical) and env.action_spec.space.n == 2
        inner = env.base_env  # the no-op resets wrap the simulator, under the other transforms
        assert isinstance(inner.base_env, GymEnv)
        assert [type(t) for t in inner.transform] == [NoopResetEnv] and inner.transform[
            0
        ].noops == 2

    def test_vecnorm_and_raw_env(self):
        cfg = config(EnvConfig, vecnorm=True)
        env = transformed_env_constructor(cfg, custom_env_maker=RampEnv)()
        assert any(isinstance(t, VecNorm) for t in env.transform)
        assert not any(isinstance(t, ObservationNorm) for t in env.transform)
        raw = transformed_env_constructor(
            cfg, custom_env_maker=RampEnv, return_transformed_envs=False
        )()
        assert isinstance(raw, RampEnv)

    def test_pixels_stacked_and_normalised(self):
        cfg = config(EnvConfig, from_pixels=True, catframes=2, image_size=8, grayscale=True)
        env = transformed_env_constructor(
            cfg,
            custom_env_maker=lambda: RampEnv(pixels=12, channels_last=True),
            stats={"loc": 0.0, "scale": 1.0},
        )()
        td = env.rollout(3)
        assert td["pixels"].shape == (3, 2, 8, 8)  # 2 stacked grayscale 8x8 frames

    def test_errors(self):
        cfg = config(EnvConfig)
        with pytest.raises(ValueError, match="custom_env or custom_env_maker, not both"):
            transformed_env_constructor(cfg, custom_env=RampEnv(), custom_env_maker=RampEnv)
        with pytest.raises(ValueError, match=r"env_library must be one of.*'mujoco'"):
            transformed_env_constructor(config(EnvConfig, env_library="mujoco"))
        with pytest.raises(ValueError, match="positive cfg.catframes"):
            transformed_env_constructor(
                config(EnvConfig, from_pixels=True), custom_env_maker=lambda: RampEnv(pixels=8)
            )()
        with pytest.raises(ValueError, match="batch_transform=True"):
            parallel_env_constructor(config(EnvConfig, OnPolicyCollectorConfig))

    def test_parallel_env_constructor_single_env(self):
        cfg = config(EnvConfig, OnPolicyCollectorConfig, batch_transform=True, env_per_collector=1)
        make = parallel_env_constructor(
            cfg, custom_env_maker=RampEnv, stats={"loc": 0.0, "scale": 1.0}
        )
        assert isinstance(make, EnvCreator)
        assert make().reset()["observation_vector"].tolist() == [0.0, 5.0]


class TestObservationStats:
    def test_random_rollout_stats_by_hand(self):
        stats = get_stats_random_rollout(SimpleNamespace(init_env_steps=6), RampEnv())
        t = torch.arange(6.0)  # the root observations of the 6 steps
        torch.testing.assert_close(stats["loc"], torch.tensor([t.mean(), 0.0]))
        torch.testing.assert_close(stats["scale"], torch.tensor([t.std(), 1.0]))  # constant: 0, 1

    def test_random_rollout_errors(self):
        with pytest.raises(AttributeError, match="init_env_steps"):
            get_stats_random_rollout(SimpleNamespace(), RampEnv())
        env = TransformedEnv(
            RampEnv(), TensorDictPrimer(random=False, default_value=0, extra=Unbounded(1))
        )
        with pytest.raises(RuntimeError, match="More than one key exists in the observation_specs"):
            get_stats_random_rollout(SimpleNamespace(init_env_steps=2), env)

    def test_initialize_and_retrieve_round_trip(self):
        cfg = config(EnvConfig)
        env = transformed_env_constructor(cfg, custom_env_maker=RampEnv)()
        ((index, norm),) = [
            (i, t) for i, t in enumerate(env.transform) if isinstance(t, ObservationNorm)
        ]
        assert not norm.initialized
        initialize_observation_norm_transforms(env, num_iter=5, key="observation_vector")
        assert norm.initialized
        ((got_index, state),) = retrieve_observation_norms_state_dict(env)
        assert got_index == index
        torch.testing.assert_close(state["loc"], norm.loc)
        rebuilt = transformed_env_constructor(
            cfg, custom_env_maker=RampEnv, obs_norm_state_dict=state
        )().transform[index]
        torch.testing.assert_close(rebuilt.state_dict(), state)
        assert retrieve_observation_norms_state_dict(TransformedEnv(RampEnv(), StepCounter())) == []


class TestCollectors:
    def test_split_env_fns(self):
        fns, kws = split_env_fns("f", {"a": 1}, num_env_per_collector=2, num_collectors=3)
        assert fns == [["f", "f"]] * 3 and kws == [[{"a": 1}] * 2] * 3
        fns, _ = split_env_fns(["a", "b", "c"], None, num_env_per_collector=None, num_collectors=2)
        assert fns == [["a", "b"], ["c"]]
        with pytest.raises(ValueError, match="give both num_env_per_collector and num_collectors"):
            split_env_fns("f", None, None, 2)
        with pytest.raises(
            ValueError, match=r"num_env_per_collector \* num_collectors=2 is less than the 3"
        ):
            split_env_fns(["a", "b", "c"], None, 1, 2)

    def test_onpolicy_frames_per_batch(self):
        cfg = config(
            EnvConfig,
            OnPolicyCollectorConfig,
            frames_per_batch=8,
            total_frames=16,
            num_workers=1,
            env_per_collector=1,
        )
        collector = make_collector_onpolicy(RampEnv, None, cfg)
        try:
            assert isinstance(collector, Collector)
            batches = list(collector)
            assert [int(batch["collector", "mask"].sum()) for batch in batches] == [8, 8]
        finally:
            collector.shutdown()
        assert cfg.collector_device == ["cpu"]  # not rewritten

    def test_offpolicy_multistep_and_random_frames(self):
        cfg = config(
            EnvConfig,
            OffPolicyCollectorConfig,
            LossConfig,
            frames_per_batch=6,
            total_frames=6,
            num_workers=1,
            env_per_collector=1,
            multi_step=True,
            n_steps_return=2,
            gamma=0.5,
            init_random_frames=6,
        )
        collector = make_collector_offpolicy(RampEnv, None, cfg)
        try:
            assert isinstance(collector.postproc, MultiStep)
            (batch,) = list(collector)
        finally:
            collector.shutdown()
        # rewards 1..6 in one trajectory: the 2-step return at t is r_t + 0.5 r_{t+1}
        reward = batch["next", "reward"].reshape(-1)[:4]
        torch.testing.assert_close(reward, torch.tensor([1 + 1.0, 2 + 1.5, 3 + 2.0, 4 + 2.5]))

    def test_sync_sync_collector_single(self):
        collector = sync_sync_collector(
            RampEnv,
            None,
            num_env_per_collector=1,
            num_collectors=1,
            policy=None,
            frames_per_batch=4,
            total_frames=8,
        )
        try:
            assert [batch.numel() for batch in collector] == [4, 4]
        finally:
            collector.shutdown()

    def test_multi_collectors_and_parallel_env(self):
        collector = sync_sync_collector(
            RampEnv,
            None,
            num_env_per_collector=1,
            num_collectors=2,
            policy=None,
            frames_per_batch=8,
            total_frames=16,
        )
        try:
            assert isinstance(collector, MultiSyncCollector)
            assert [batch.numel() for batch in collector] == [8, 8]
        finally:
            collector.shutdown()
        # two collectors of two envs each: a ParallelEnv per collector
        collector = sync_async_collector(
            RampEnv,
            None,
            num_env_per_collector=2,
            num_collectors=2,
            policy=None,
            frames_per_batch=8,
            total_frames=16,
        )
        try:
            assert isinstance(collector, MultiAsyncCollector)
            assert [batch.batch_size[0] for batch in collector] == [2, 2]  # 2 envs a batch
        finally:
            collector.shutdown()
        cfg = config(EnvConfig, OnPolicyCollectorConfig, batch_transform=True, env_per_collector=2)
        env = parallel_env_constructor(
            cfg, custom_env_maker=RampEnv, stats={"loc": 0.0, "scale": 1.0}
        )
        try:
            assert isinstance(env.base_env, ParallelEnv) and env.batch_size == (2,)
            td = env.rollout(3)
            assert td["observation_vector"][:, :, 0].tolist() == [[0.0, 1.0, 2.0]] * 2
        finally:
            env.close()

    def test_bad_config(self):
        cfg = config(
            EnvConfig,
            OnPolicyCollectorConfig,
            exploration_type="greedy",
            num_workers=1,
            env_per_collector=1,
        )
        with pytest.raises(ValueError, match="exploration_type must be one of"):
            make_collector_onpolicy(RampEnv, None, cfg)
        cfg = config(EnvConfig, OnPolicyCollectorConfig, num_workers=0)
        with pytest.raises(ValueError, match="num_workers and cfg.env_per_collector must be >= 1"):
            make_collector_onpolicy(RampEnv, None, cfg)
        with pytest.raises(AttributeError, match="multi_step.*OffPolicyCollectorConfig"):
            make_collector_offpolicy(RampEnv, None, config(EnvConfig, OnPolicyCollectorConfig))


def dqn_cfg(**overrides):
    return config(EnvConfig, DiscreteModelConfig, LossConfig, **overrides)


class TestDQN:
    @pytest.mark.parametrize("categorical", [False, True])
    def test_actor_shapes(self, categorical):
        env = CartPoleEnv(categorical_action_encoding=categorical)
        actor = make_dqn_actor(env, dqn_cfg(), "cpu")
        assert isinstance(actor, QValueActor)
        td = actor(env.reset())
        assert td["action_value"].shape == (2,)
        assert td["action"].shape == (() if categorical else (2,))
        greedy = td["action_value"].argmax()
        assert (td["action"] if categorical else td["action"].argmax()) == greedy
        torch.testing.assert_close(td["chosen_action_value"], td["action_value"].max().reshape(1))

    def test_distributional_noisy_and_pixels(self):
        env = RampEnv(pixels=36, action_spec=OneHot(3))
        actor = make_dqn_actor(
            env, dqn_cfg(from_pixels=True, distributional=True, atoms=7, noisy=True), "cpu"
        )
        assert isinstance(actor, DistributionalQValueActor)
        assert any(isinstance(m, NoisyLinear) for m in actor.modules())
        td = actor(env.reset())
        assert td["action_value"].shape == (7, 3)
        torch.testing.assert_close(td["action_value"].exp().sum(0), torch.ones(3))  # log-probs

    def test_actor_errors(self):
        with pytest.raises(ValueError, match="needs a discrete action"):
            make_dqn_actor(RampEnv(), dqn_cfg(), "cpu")
        with pytest.raises(ValueError, match="atoms must be a positive integer"):
            make_dqn_actor(CartPoleEnv(), dqn_cfg(distributional=True, atoms=0), "cpu")

    def test_loss_keys_and_updater(self):
        env = CartPoleEnv()
        actor = make_dqn_actor(env, dqn_cfg(), "cpu")
        loss, updater = make_dqn_loss(actor, dqn_cfg(gamma=0.5))
        assert isinstance(loss, DQNLoss) and isinstance(updater, SoftUpdate)
        assert set(loss(env.rollout(4, actor)).keys()) == {"loss"}
        loss, updater = make_dqn_loss(actor, dqn_cfg(loss="single"))
        assert updater is None
        dactor = make_dqn_actor(env, dqn_cfg(distributional=True, atoms=5), "cpu")
        loss, _ = make_dqn_loss(dactor, dqn_cfg(distributional=True))
        assert isinstance(loss, DistributionalDQNLoss)
        with pytest.raises(
            ValueError, match=r"cfg.loss must be one of \('single', 'double'\), got 'triple'"
        ):
            make_dqn_loss(actor, dqn_cfg(loss="triple"))

    def test_soft_update_by_hand(self):
        actor = make_dqn_actor(CartPoleEnv(), dqn_cfg(), "cpu")
        loss, updater = make_dqn_loss(actor, dqn_cfg(value_network_update_interval=4))
        online = loss.value_network_params
        with torch.no_grad():
            for p in online.values(True, True):
                p.add_(1.0)
        before = loss.target_value_network_params.clone()
        updater.step()  # eps = 1 - 1/4
        for key, target in loss.target_value_network_params.items(True, True):
            torch.testing.assert_close(target, 0.75 * before[key] + 0.25 * online[key])

    def test_hard_update_after_interval(self):
        actor = make_dqn_actor(CartPoleEnv(), dqn_cfg(), "cpu")
        loss, _ = make_dqn_loss(actor, dqn_cfg(loss="single"))
        loss, updater = make_dqn_loss(
            actor, dqn_cfg(hard_update=True, value_network_update_interval=2)
        )
        assert isinstance(updater, HardUpdate)
        with torch.no_grad():
            for p in loss.value_network_params.values(True, True):
                p.add_(1.0)
        key = next(iter(loss.value_network_params.keys(True, True)))
        updater.step()
        assert not torch.equal(
            loss.target_value_network_params[key], loss.value_network_params[key]
        )
        updater.step()
        torch.testing.assert_close(
            loss.target_value_network_params[key], loss.value_network_params[key]
        )

    def test_target_updater_errors(self):
        with pytest.raises(ValueError, match="hard_update needs target networks"):
            make_target_updater(dqn_cfg(loss="single", hard_update=True), None)


class TestReplayBufferAndTrainer:
    @pytest.mark.parametrize("prb", [False, True])
    def test_replay_buffer(self, prb, tmp_path):
        cfg = config(
            ReplayArgsConfig,
            TrainerConfig,
            buffer_size=10,
            prb=prb,
            batch_size=3,
            buffer_prefetch=0,
            buffer_scratch_dir=str(tmp_path),
        )
        rb = make_replay_buffer("cpu", cfg)
        assert isinstance(rb, TensorDictReplayBuffer)
        assert isinstance(rb.sampler, PrioritizedSampler if prb else RandomSampler)
        rb.extend(TensorDict(x=torch.arange(20.0)[:, None], batch_size=[20]))
        assert len(rb) == 10 and rb.sample()["x"].shape == (3, 1)

    def test_trainer_wiring_and_run(self, tmp_path):
        def make_env():
            return RampEnv(action_spec=OneHot(3))

        env = make_env()
        cfg = config(
            EnvConfig,
            OffPolicyCollectorConfig,
            LossConfig,
            TrainerConfig,
            DiscreteModelConfig,
            LoggerConfig,
            ReplayArgsConfig,
            frames_per_batch=8,
            total_frames=16,
            optim_steps_per_batch=2,
            batch_size=4,
            num_workers=1,
            env_per_collector=1,
            init_random_frames=0,
            lr=0.01,
            record_interval=1,
            record_frames=3,
            buffer_size=32,
            buffer_prefetch=0,
            log_interval=1,
        )
        actor = make_dqn_actor(env, cfg, "cpu")
        loss, updater = make_dqn_loss(actor, cfg)
        collector = make_collector_offpolicy(make_env, actor, cfg)
        rb = make_replay_buffer("cpu", cfg)
        logger = CSVLogger(exp_name="dqn", log_dir=tmp_path)
        trainer = make_trainer(collector, loss, env, updater, actor, rb, logger, cfg)
        try:
            assert isinstance(trainer, Trainer)
            group = trainer.optimizer.param_groups[0]
            assert group["lr"] == 0.01 and group["betas"] == (0.0, 0.9)
            assert trainer.total_frames == 16 and trainer.optim_steps_per_batch == 2
            target = loss.target_value_network_params.clone()
            trainer.train()
        finally:
            collector.shutdown()
        # the batches are kept as trajectories (split_trajs): one of 8 steps per batch
        assert len(rb) == 2 and rb.sample()["observation"].shape == (4, 8, 2)
        moved = [
            not torch.equal(target[k], v)
            for k, v in loss.target_value_network_params.items(True, True)
        ]
        assert any(moved)  # the soft update ran after the optimisation steps
        # the cosine schedule spans total_frames / frames_per_batch * optim steps = 4 steps
        assert group["lr"] == pytest.approx(0.01 * (1 + math.cos(math.pi * 4 / 4)) / 2, abs=1e-9)
        logger.close()
        files = {
            p.relative_to(logger.experiment).as_posix() for p in logger.experiment.rglob("*.*")
        }
        assert json.loads((logger.experiment / "hparams.json").read_text())["frames_per_batch"] == 8
        logged = {name.rsplit("/", 1)[-1].removesuffix(".csv") for name in files}
        # the learning rate, the validation rewards (deterministic and exploratory), frames
        assert {"lr", "r_evaluation", "r_evaluation_exploration", "n_frames"} <= logged, logged

    def test_trainer_errors_and_default_cfg(self):
        actor = make_dqn_actor(CartPoleEnv(), dqn_cfg(), "cpu")
        loss, _ = make_dqn_loss(actor, dqn_cfg())
        cfg = config(TrainerConfig, EnvConfig, OnPolicyCollectorConfig, optimizer="rmsprop")
        collector = SimpleNamespace(update_policy_weights_=lambda *args, **kwargs: None)
        with pytest.raises(
            ValueError, match=r"cfg.optimizer must be one of \['adam', 'adamax', 'sgd'\]"
        ):
            make_trainer(collector, loss, cfg=cfg)
        cfg = config(TrainerConfig, EnvConfig, OnPolicyCollectorConfig, lr_scheduler="step")
        with pytest.raises(ValueError, match="cfg.lr_scheduler must be one of"):
            make_trainer(collector, loss, cfg=cfg)
        with pytest.warns(UserWarning, match="got no cfg"):
            trainer = make_trainer(collector, loss)
        assert trainer.total_frames == 1000


class TestDreamer:
    def test_parts(self):
        cfg = config(DreamerConfig, state_dim=4, rssm_hidden_dim=8, mlp_num_units=8)
        env = TransformedEnv(
            RampEnv(pixels=64),
            TensorDictPrimer(
                random=False, default_value=0, state=Unbounded(4), belief=Unbounded(8)
            ),
        )
        world_model, mb_env, actor_sim, value_model, actor_real = make_dreamer(cfg, env)
        imagined = mb_env.rollout(3, actor_sim)
        assert imagined["next", "state"].shape == (3, 4)
        assert imagined["next", "belief"].shape == (3, 8)
        assert imagined["action"].abs().max() <= 1.0  # tanh-normal within the action bounds
        assert value_model(imagined)["state_value"].shape == (3, 1)
        real = actor_real(env.reset())
        assert real["action"].shape == (2,) and real["next", "belief"].shape == (8,)
        data = env.rollout(2, actor_real).unsqueeze(0)
        out = world_model(data)
        assert out["next", "reco_pixels"].shape == (1, 2, 3, 64, 64)
        assert out["next", "reward"].shape == (1, 2, 1)
