"""The algorithm trainers of ``rl.core.trainers.algorithms`` (``torchrl.trainers.algorithms``).

Each trainer is checked for what it registers and what that does, with the workspace's
real pieces (rl.envs, rl.collectors, rl.data, rl.modules, rl.objectives): advantages before
the loss (against a GAE loop by hand), replay-buffer writes and samples, target-network
updates, weight pushes to the collector, offline training without a collector, the
offline-to-online hand-over, and the errors on bad arguments. PPO on CartPole and DQN on
a probe environment show learning on a small budget.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn

pytest.importorskip("rl.collectors")
pytest.importorskip("rl.objectives")

from rl.collectors import Collector  # noqa: E402
from rl.core import Bounded  # noqa: E402
from rl.core.trainers import Trainer  # noqa: E402
from rl.core.trainers.algorithms import (  # noqa: E402
    A2CTrainer,
    CQLTrainer,
    DDPGTrainer,
    DQNTrainer,
    IQLTrainer,
    OfflineToOnlineAnnealHook,
    OfflineToOnlineReplayBufferHook,
    OfflineToOnlineTrainer,
    OnPolicyTrainer,
    PPOTrainer,
    ReinforceTrainer,
    SACTrainer,
    TD3OptimizationStepper,
    TD3Trainer,
)
from rl.data import (  # noqa: E402
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from rl.envs import ActionRewardProbe, ConstantRewardProbe, GymEnv  # noqa: E402
from rl.modules import (  # noqa: E402
    MLP,
    EGreedyModule,
    OneHotCategorical,
    ProbabilisticActor,
    QValueActor,
    TanhNormal,
    ValueOperator,
)
from rl.objectives import (  # noqa: E402
    A2CLoss,
    ClipPPOLoss,
    CQLLoss,
    DDPGLoss,
    DQNLoss,
    HardUpdate,
    IQLLoss,
    ReinforceLoss,
    SACLoss,
    SoftUpdate,
    TD3Loss,
)

pytestmark = pytest.mark.filterwarnings("ignore:.*experimental/prototype:UserWarning")


# ----------------------------------------------------------------------------- helpers
@pytest.fixture
def one_thread():
    """The learning runs use one intra-op thread: tiny networks on a shared machine run
    faster without thread hand-offs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class RecordingCollector:
    """A list of batches that records the weights pushed to it."""

    def __init__(self, batches):
        self.batches = batches
        self.pushed = []

    def __iter__(self):
        return iter(self.batches)

    def update_policy_weights_(self, weights=None):
        self.pushed.append(None if weights is None else weights.clone())


def discrete_actor_critic(n_obs=4, n_act=2, spec=None):
    actor = ProbabilisticActor(
        TensorDictModule(
            MLP(in_features=n_obs, out_features=n_act, num_cells=[32]),
            in_keys=["observation"],
            out_keys=["logits"],
        ),
        in_keys=["logits"],
        spec=spec,
        distribution_class=OneHotCategorical,
        return_log_prob=True,
    )
    critic = ValueOperator(
        MLP(in_features=n_obs, out_features=1, num_cells=[32]), in_keys=["observation"]
    )
    return actor, critic


def on_policy_batch(actor, T=12, n_obs=4, seed=0):
    """A [T] trajectory with two episode ends, as a collector writes it."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T + 1, n_obs, generator=g)
    done = torch.zeros(T, 1, dtype=torch.bool)
    done[4] = done[T - 1] = True
    td = TensorDict(
        {
            "observation": obs[:-1],
            ("next", "observation"): obs[1:],
            ("next", "reward"): torch.randn(T, 1, generator=g),
            ("next", "done"): done,
            ("next", "terminated"): done.clone(),
        },
        batch_size=[T],
    )
    with torch.no_grad():
        actor(td)
    return td


def gae_by_hand(reward, value, next_value, done, terminated, gamma, lmbda):
    """GAE with a plain loop over time ([T, 1] tensors)."""
    T = reward.shape[0]
    adv = torch.zeros_like(reward)
    running = torch.zeros(1)
    for t in reversed(range(T)):
        delta = reward[t] + gamma * (1 - terminated[t].float()) * next_value[t] - value[t]
        running = delta + gamma * lmbda * (1 - done[t].float()) * running
        adv[t] = running
    return adv


def continuous_actor(n_obs=1, low=-2.0, high=2.0, spec=None):
    return ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(
                MLP(in_features=n_obs, out_features=2, num_cells=[16]), NormalParamExtractor()
            ),
            in_keys=["observation"],
            out_keys=["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        spec=spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": torch.tensor([low]), "high": torch.tensor([high])},
    )


def qvalue_net(n_obs=1, n_act=1):
    return ValueOperator(
        MLP(in_features=n_obs + n_act, out_features=1, num_cells=[16]),
        in_keys=["observation", "action"],
    )


def transitions(n, seed=0, action_dim=1):
    """``n`` one-step transitions of a continuous probe (reward ``1 - (a - 1.5)²``)."""
    g = torch.Generator().manual_seed(seed)
    action = torch.rand(n, action_dim, generator=g) * 4 - 2
    ones = torch.ones(n, 1, dtype=torch.bool)
    return TensorDict(
        {
            "observation": torch.zeros(n, 1),
            "action": action,
            ("next", "observation"): torch.zeros(n, 1),
            ("next", "reward"): 1 - (action - 1.5).pow(2),
            ("next", "done"): ones,
            ("next", "terminated"): ones.clone(),
            ("next", "reward_sum"): 1 - (action - 1.5).pow(2),
        },
        batch_size=[n],
    )


def buffer(size, batch_size, sampler=None):
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(size),
        sampler=sampler if sampler is not None else RandomSampler(),
        batch_size=batch_size,
    )


# ----------------------------------------------------------------------------- on-policy
class TestOnPolicyTrainer:
    def _trainer(self, cls=PPOTrainer, batches=None, **kwargs):
        torch.manual_seed(0)
        actor, critic = discrete_actor_critic()
        loss = ClipPPOLoss(actor, critic, entropy_coeff=0.0, normalize_advantage=False)
        if batches is None:
            batches = [on_policy_batch(actor, seed=i) for i in range(2)]
        collector = RecordingCollector(batches)
        kwargs.setdefault("optimizer", torch.optim.Adam(loss.parameters(), lr=1e-2))
        trainer = cls(
            collector=collector,
            total_frames=sum(b.numel() for b in batches),
            frame_skip=1,
            optim_steps_per_batch=kwargs.pop("optim_steps_per_batch", 1),
            loss_module=loss,
            progress_bar=False,
            **kwargs,
        )
        return trainer, loss, critic, collector

    def test_advantage_is_gae_computed_before_the_loss(self):
        trainer, loss, critic, _ = self._trainer(num_epochs=2, gamma=0.9, lmbda=0.8)
        seen = []

        def record(sub_batch):
            # the critic as the loss sees it now (post_loss runs before the optimizer step)
            with torch.no_grad():
                value = critic(sub_batch.clone())["state_value"]
                next_value = critic(sub_batch["next"].clone())["state_value"]
            seen.append((sub_batch.clone(), value, next_value))

        trainer.register_op("post_loss", record)
        trainer.train()
        assert len(seen) == 4  # 2 batches x 2 epochs x 1 step
        for sub_batch, value, next_value in seen:
            adv = gae_by_hand(
                sub_batch["next", "reward"],
                value,
                next_value,
                sub_batch["next", "done"],
                sub_batch["next", "terminated"],
                0.9,
                0.8,
            )
            # average_gae=True, as TorchRL's trainers: standardized advantages
            expected = (adv - adv.mean()) / adv.std().clamp_min(1e-6)
            torch.testing.assert_close(sub_batch["advantage"], expected, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(sub_batch["value_target"], adv + value, atol=1e-5, rtol=0)

    def test_registered_hooks(self):
        scheduler_opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
        trainer, *_ = self._trainer(
            lr_scheduler=torch.optim.lr_scheduler.StepLR(scheduler_opt, 1),
            log_observations=True,
        )
        names = set(trainer._modules)
        assert {"value_estimator", "update_weights", "lr_scheduler", "optimizer"} <= names
        loggers = [op.logname for op, _ in trainer._ops["pre_steps_log"]]
        assert loggers == [
            "done_percentage",
            "r_training",
            "r_max",
            "r_total",
            "action_norm",
            "obs_norm",
        ]
        trainer, *_ = self._trainer(enable_logging=False, add_gae=False)
        assert trainer._ops["pre_steps_log"] == []
        assert "value_estimator" not in trainer._modules

    @pytest.mark.parametrize(
        "cls, epochs",
        [(PPOTrainer, 4), (A2CTrainer, 1), (ReinforceTrainer, 1), (OnPolicyTrainer, 1)],
    )
    def test_default_epochs(self, cls, epochs):
        trainer, *_ = self._trainer(cls)
        assert trainer.num_epochs == epochs
        trainer.train()
        assert trainer._optim_count == 2 * epochs
        trainer, *_ = self._trainer(cls, num_epochs=3)
        assert trainer.num_epochs == 3

    @pytest.mark.parametrize("loss_cls", [A2CLoss, ReinforceLoss])
    def test_a2c_and_reinforce_losses_train(self, loss_cls):
        torch.manual_seed(0)
        actor, critic = discrete_actor_critic()
        loss = loss_cls(actor, critic)
        batches = [on_policy_batch(actor, seed=i) for i in range(2)]
        cls = A2CTrainer if loss_cls is A2CLoss else ReinforceTrainer
        before = [p.clone() for p in loss.parameters()]
        trainer = cls(
            collector=batches,
            total_frames=24,
            frame_skip=1,
            optim_steps_per_batch=1,
            loss_module=loss,
            optimizer=torch.optim.Adam(loss.parameters(), lr=1e-2),
            progress_bar=False,
        )
        trainer.train()
        assert trainer._optim_count == 2
        assert "advantage" in batches[0].keys()
        assert any(not torch.equal(a, b) for a, b in zip(before, loss.parameters(), strict=True))

    def test_replay_buffer_epochs_are_full_passes(self):
        rb = buffer(12, 4, SamplerWithoutReplacement())
        trainer, *_ = self._trainer(num_epochs=3, optim_steps_per_batch=3, replay_buffer=rb)
        sizes = []
        trainer.register_op("post_loss", lambda sub: sizes.append(sub.numel()))
        trainer.train()
        # each epoch refills the buffer and iterates over it once: 3 mini-batches of 4
        assert sizes == [4] * (2 * 3 * 3)
        assert len(rb) == 12
        # optim_steps_per_batch larger than the buffer holds: the epoch ends with its pass
        rb = buffer(12, 4, SamplerWithoutReplacement())
        trainer, *_ = self._trainer(num_epochs=2, optim_steps_per_batch=10, replay_buffer=rb)
        trainer.train()
        assert trainer._optim_count == 2 * 2 * 3  # the attempt that finds it empty does not count

    def test_replay_buffer_holds_this_epochs_advantages(self):
        rb = buffer(12, 12, SamplerWithoutReplacement())
        trainer, loss, critic, _ = self._trainer(
            num_epochs=2, optim_steps_per_batch=1, replay_buffer=rb
        )
        advantages = []
        trainer.register_op("post_loss", lambda sub: advantages.append(sub["advantage"].clone()))
        trainer.train()
        # the critic moved between the two epochs of a batch: the estimates differ
        assert not torch.allclose(advantages[0], advantages[1])

    def test_weights_pushed_to_collector(self):
        trainer, loss, _, collector = self._trainer()
        trainer.train()
        assert len(collector.pushed) == 2
        expected = TensorDict.from_module(loss.actor_network)
        torch.testing.assert_close(collector.pushed[-1], expected.data)

    def test_custom_gae_and_keys(self):
        calls = []

        def gae(td):
            calls.append(td.batch_size)
            return td.set("advantage", torch.ones(td.shape[0], 1)).set(
                "value_target", torch.zeros(td.shape[0], 1)
            )

        trainer, loss, *_ = self._trainer(gae=gae, reward_key="reward")
        trainer.train()
        assert len(calls) == 2 * 4
        assert loss.tensor_keys.reward == "reward"

    def test_errors(self):
        with pytest.raises(ValueError, match="gae must not be given when add_gae=False"):
            self._trainer(add_gae=False, gae=lambda td: td)
        with pytest.raises(TypeError, match="gae must be callable"):
            self._trainer(gae=3)
        with pytest.raises(ValueError, match="replay_buffer, which has no batch_size"):
            self._trainer(replay_buffer=buffer(12, None, SamplerWithoutReplacement()))
        with pytest.warns(UserWarning, match="batch_size is unused by on-policy trainers"):
            self._trainer(batch_size=4)
        with pytest.warns(UserWarning, match="expects a SamplerWithoutReplacement"):
            self._trainer(replay_buffer=buffer(12, 4))
        with pytest.raises(TypeError, match="target_net_updater must have a step"):
            self._trainer(target_net_updater=object())
        with pytest.raises(ValueError, match="make_value_estimator"):
            PPOTrainer(
                collector=[],
                total_frames=1,
                frame_skip=1,
                optim_steps_per_batch=1,
                loss_module=lambda td: td,
            )
        with pytest.raises(ValueError, match="no update_policy_weights_"):
            PPOTrainer(
                collector=[],
                total_frames=1,
                frame_skip=1,
                optim_steps_per_batch=1,
                loss_module=lambda td: td,
                add_gae=False,
                weight_update_map={"policy": "loss_module"},
            )

    def test_prototype_warning(self):
        with pytest.warns(UserWarning, match="PPOTrainer is an experimental/prototype feature"):
            self._trainer()

    def test_ppo_learns_cartpole(self, one_thread):
        torch.manual_seed(0)
        env = GymEnv("CartPole-v1")
        env.set_seed(0)
        actor, critic = discrete_actor_critic(spec=env.action_spec)
        loss = ClipPPOLoss(actor, critic, entropy_coeff=0.0, critic_coeff=0.5)
        frames_per_batch, total = 256, 256 * 12
        collector = Collector(env, actor, frames_per_batch=frames_per_batch, total_frames=total)
        trainer = PPOTrainer(
            collector=collector,
            total_frames=total,
            frame_skip=1,
            optim_steps_per_batch=4,
            loss_module=loss,
            optimizer=torch.optim.Adam(loss.parameters(), lr=1e-2),
            replay_buffer=buffer(frames_per_batch, 64, SamplerWithoutReplacement()),
            clip_norm=1.0,
            progress_bar=False,
            enable_logging=False,
            seed=0,
        )
        lengths = []

        def episode_length(batch):
            # steps per episode end in this batch
            lengths.append(batch.numel() / max(batch["next", "done"].sum().item(), 1))

        trainer.register_op("pre_steps_log", episode_length)
        trainer.train()
        first, last = sum(lengths[:2]) / 2, sum(lengths[-3:]) / 3
        assert last > 2.5 * first, lengths
        assert last > 50, lengths


# ----------------------------------------------------------------------------- off-policy
def sac_pieces(seed=0):
    torch.manual_seed(seed)
    env = ConstantRewardProbe(batch_size=[4], continuous=True)
    actor = continuous_actor(spec=env.action_spec)
    loss = SACLoss(actor, qvalue_net(), action_spec=env.action_spec, gamma=0.9)
    return env, actor, loss


class TestOffPolicyTrainers:
    def _batches(self, n=3, size=8):
        return [transitions(size, seed=i) for i in range(n)]

    def _build(self, cls, loss, updater, batches, **kwargs):
        return cls(
            collector=kwargs.pop("collector", RecordingCollector(batches)),
            total_frames=sum(b.numel() for b in batches),
            frame_skip=1,
            optim_steps_per_batch=kwargs.pop("optim_steps_per_batch", 2),
            loss_module=loss,
            optimizer=kwargs.pop("optimizer", torch.optim.Adam(loss.parameters(), lr=1e-2)),
            target_net_updater=updater,
            progress_bar=False,
            **kwargs,
        )

    def test_sac_extends_samples_and_updates_targets(self):
        _, _, loss = sac_pieces()
        batches = self._batches()
        rb = buffer(100, 4)
        updater = SoftUpdate(loss, tau=0.5)
        target_before = loss.target_qvalue_network_params.clone()
        trainer = self._build(SACTrainer, loss, updater, batches, replay_buffer=rb)
        sampled = []
        trainer.register_op("post_loss", lambda sub: sampled.append(sub.numel()))
        trainer.train()
        assert len(rb) == 24  # every collected frame was written
        assert sampled == [4] * 6  # 3 batches x 2 steps, the buffer's batch_size each
        assert rb.write_count == 24
        # the soft update moved the target networks towards the trained ones
        flat = lambda td: torch.cat([v.flatten() for v in td.values(True, True)])  # noqa: E731
        assert not torch.allclose(flat(target_before), flat(loss.target_qvalue_network_params))
        assert {"replay_buffer", "target_net_updater", "update_weights", "utdr_hook"} <= set(
            trainer._modules
        )
        assert len(trainer.collector.pushed) == 3
        loggers = [getattr(op, "logname", None) for op, _ in trainer._ops["pre_steps_log"]]
        assert loggers[:5] == ["done_percentage", "r_training", "r_max", "r_total", "action_norm"]
        assert trainer.last_losses is not None and "loss_actor" in trainer.last_losses.keys()
        assert loss.tensor_keys.action == "action"

    def test_soft_update_math(self):
        _, _, loss = sac_pieces()
        updater = SoftUpdate(loss, tau=0.25)
        batches = self._batches(1)
        trainer = self._build(
            SACTrainer, loss, updater, batches, replay_buffer=buffer(100, 4),
            optim_steps_per_batch=1, enable_logging=False,
        )  # fmt: skip
        target = [t.clone() for t in loss.target_qvalue_network_params.values(True, True)]
        trainer.train()
        online = list(loss.qvalue_network_params.values(True, True))
        after = list(loss.target_qvalue_network_params.values(True, True))
        for t0, p, t1 in zip(target, online, after, strict=True):
            torch.testing.assert_close(t1, 0.75 * t0 + 0.25 * p.detach())

    def test_batch_size_samples_that_many(self):
        _, _, loss = sac_pieces()
        rb = buffer(100, None)
        trainer = self._build(
            SACTrainer, loss, SoftUpdate(loss, tau=0.1), self._batches(1), replay_buffer=rb,
            batch_size=6, enable_logging=False,
        )  # fmt: skip
        sizes = []
        trainer.register_op("post_loss", lambda sub: sizes.append(sub.numel()))
        trainer.train()
        assert sizes == [6, 6]

    def test_ddpg(self):
        torch.manual_seed(0)
        env = ConstantRewardProbe(batch_size=[4], continuous=True)
        actor = TensorDictModule(
            nn.Sequential(MLP(in_features=1, out_features=1, num_cells=[16]), nn.Tanh()),
            in_keys=["observation"],
            out_keys=["action"],
        )
        loss = DDPGLoss(actor, qvalue_net(), gamma=0.9)
        rb = buffer(100, 4)
        trainer = self._build(
            DDPGTrainer, loss, SoftUpdate(loss, tau=0.1), self._batches(), replay_buffer=rb
        )
        trainer.train()
        assert len(rb) == 24 and trainer._optim_count == 6
        assert len(trainer.collector.pushed) == 3
        del env

    def test_td3_delays_the_actor(self):
        torch.manual_seed(0)
        env = ConstantRewardProbe(batch_size=[4], continuous=True)
        actor = TensorDictModule(
            nn.Sequential(MLP(in_features=1, out_features=1, num_cells=[16]), nn.Tanh()),
            in_keys=["observation"],
            out_keys=["action"],
        )
        loss = TD3Loss(actor, qvalue_net(), action_spec=env.action_spec, gamma=0.9)
        actor_params = list(loss.actor_network_params.values(True, True))
        critic_params = list(loss.qvalue_network_params.values(True, True))
        stepper = TD3OptimizationStepper(
            torch.optim.SGD(actor_params, lr=0.1),
            torch.optim.SGD(critic_params, lr=0.1),
            policy_update_delay=2,
        )
        rb = buffer(100, 4)
        trainer = TD3Trainer(
            collector=RecordingCollector(self._batches(1)),
            total_frames=8,
            frame_skip=1,
            optim_steps_per_batch=4,
            loss_module=loss,
            optimization_stepper=stepper,
            replay_buffer=rb,
            target_net_updater=SoftUpdate(loss, tau=0.1),
            progress_bar=False,
        )
        changes = []

        def snapshot(_=None):
            changes.append([p.detach().clone() for p in actor_params])

        snapshot()
        trainer.register_op("post_optim", snapshot)
        trainer.train()
        moved = [
            any(not torch.equal(a, b) for a, b in zip(x, y, strict=True))
            for x, y in zip(changes, changes[1:], strict=False)
        ]
        assert moved == [False, True, False, True]
        assert trainer._modules["optimization_stepper"] is stepper
        assert stepper.state_dict()["update_counter"] == 4
        with pytest.raises(ValueError, match="policy_update_delay must be a positive int"):
            TD3OptimizationStepper(
                stepper.optimizer_actor, stepper.optimizer_critic, policy_update_delay=0
            )

    def _dqn(self, env, **kwargs):
        torch.manual_seed(0)
        qnet = QValueActor(
            MLP(in_features=1, out_features=2, num_cells=[16]),
            in_keys=["observation"],
            spec=env.action_spec,
        )
        loss = DQNLoss(qnet, action_space=env.action_spec, delay_value=True, gamma=0.9)
        return qnet, loss

    def test_dqn_greedy_annealing_and_hard_update(self):
        env = ActionRewardProbe(batch_size=[4])
        qnet, loss = self._dqn(env)
        greedy = EGreedyModule(env.action_spec, eps_init=1.0, eps_end=0.0, annealing_num_steps=40)
        collector = Collector(
            env, TensorDictSequential(qnet, greedy), frames_per_batch=8, total_frames=32
        )
        rb = buffer(100, 8)
        updater = HardUpdate(loss, value_network_update_interval=3)
        trainer = DQNTrainer(
            collector=collector,
            total_frames=32,
            frame_skip=1,
            optim_steps_per_batch=2,
            loss_module=loss,
            optimizer=torch.optim.Adam(loss.parameters(), lr=1e-2),
            replay_buffer=rb,
            target_net_updater=updater,
            greedy_module=greedy,
            progress_bar=False,
            log_rewards=False,
        )
        trainer.train()
        # epsilon annealed by the 32 frames collected: 1 - 32 / 40
        assert greedy.eps.item() == pytest.approx(0.2)
        assert len(rb) == 32
        assert trainer._modules["greedy_annealer"].state_dict() == {"greedy_last_frames": 32}
        assert "action_norm" not in [
            getattr(o, "logname", None) for o, _ in trainer._ops["pre_steps_log"]
        ]

    def test_dqn_learns_action_reward_probe(self, one_thread):
        env = ActionRewardProbe(batch_size=[8])
        qnet, loss = self._dqn(env)
        greedy = EGreedyModule(env.action_spec, eps_init=1.0, eps_end=0.1, annealing_num_steps=400)
        collector = Collector(
            env, TensorDictSequential(qnet, greedy), frames_per_batch=32, total_frames=640
        )
        trainer = DQNTrainer(
            collector=collector,
            total_frames=640,
            frame_skip=1,
            optim_steps_per_batch=8,
            loss_module=loss,
            optimizer=torch.optim.Adam(loss.parameters(), lr=2e-2),
            replay_buffer=buffer(1000, 32),
            target_net_updater=HardUpdate(loss, value_network_update_interval=10),
            greedy_module=greedy,
            progress_bar=False,
            enable_logging=False,
        )
        trainer.train()
        with torch.no_grad():
            out = qnet(TensorDict(observation=torch.zeros(1, 1), batch_size=[1]))
        # one step then the end: Q(action 1) = +1, Q(action 0) = -1
        torch.testing.assert_close(
            out["action_value"], torch.tensor([[-1.0, 1.0]]), atol=0.1, rtol=0
        )
        assert out["action"].argmax(-1).item() == 1

    def test_dqn_mixing_strategies(self):
        env = ActionRewardProbe(batch_size=[4])
        _, loss = self._dqn(env)
        common = dict(
            collector=[], total_frames=1, frame_skip=1, optim_steps_per_batch=1,
            loss_module=loss, target_net_updater=HardUpdate(loss), progress_bar=False,
        )  # fmt: skip
        with pytest.raises(ValueError, match="mixing_strategy must be one of"):
            DQNTrainer(mixing_strategy="sum", **common)
        with pytest.raises(ValueError, match="aggregated_reward_key and aggregated_episode"):
            DQNTrainer(mixing_strategy="qmix", **common)
        trainer = DQNTrainer(
            mixing_strategy="vdn",
            reward_key=("agents", "reward"),
            episode_reward_key=("agents", "reward_sum"),
            aggregated_reward_key="reward",
            aggregated_episode_reward_key="reward_sum",
            **common,
        )
        batch = TensorDict(
            {("next", "agents", "reward"): torch.tensor([[[1.0], [3.0]]])}, batch_size=[1]
        )
        out = trainer._call_transform("batch_process", batch)
        torch.testing.assert_close(out["next", "reward"], torch.tensor([[2.0]]))
        with pytest.raises(TypeError, match="greedy_module must have a step"):
            DQNTrainer(greedy_module=object(), **common)

    @pytest.mark.parametrize("cls", [SACTrainer, DDPGTrainer, DQNTrainer])
    def test_off_policy_errors(self, cls):
        _, _, loss = sac_pieces()
        common = dict(
            collector=[], total_frames=1, frame_skip=1, optim_steps_per_batch=1,
            loss_module=loss, progress_bar=False,
        )  # fmt: skip
        with pytest.raises(ValueError, match=f"{cls.__name__} requires a target_net_updater"):
            cls(**common)
        with pytest.raises(TypeError, match="target_net_updater must have a step"):
            cls(target_net_updater=object(), **common)
        with pytest.raises(ValueError, match="which has no batch_size"):
            cls(
                target_net_updater=SoftUpdate(loss, tau=0.1),
                replay_buffer=buffer(10, None),
                **common,
            )
        with pytest.raises(ValueError, match="batch_size must be a positive int"):
            cls(
                target_net_updater=SoftUpdate(loss, tau=0.1),
                replay_buffer=buffer(10, 2),
                batch_size=0,
                **common,
            )
        common["collector"] = None
        with pytest.raises(ValueError, match="needs a collector"):
            cls(target_net_updater=SoftUpdate(loss, tau=0.1), **common)


# ----------------------------------------------------------------------------- offline
class TestOfflineTrainers:
    def _dataset(self, n=64, batch_size=16):
        rb = buffer(n, batch_size)
        rb.extend(transitions(n))
        return rb

    def test_iql_trains_offline_on_the_buffer(self):
        torch.manual_seed(0)
        actor = continuous_actor()
        value = ValueOperator(
            MLP(in_features=1, out_features=1, num_cells=[16]), in_keys=["observation"]
        )
        loss = IQLLoss(actor, qvalue_net(), value, gamma=0.9, expectile=0.7)
        rb = self._dataset()
        updater = SoftUpdate(loss, tau=0.1)
        trainer = IQLTrainer(
            collector=None,
            total_frames=16 * 4 * 5,  # 5 rounds of 4 steps on 16 samples
            frame_skip=1,
            optim_steps_per_batch=4,
            loss_module=loss,
            optimizer=torch.optim.Adam(loss.parameters(), lr=1e-2),
            replay_buffer=rb,
            target_net_updater=updater,
            progress_bar=False,
        )
        seen = []
        trainer.register_op("post_loss", lambda sub: seen.append(sub["index"].clone()))
        losses = []
        trainer.register_op(
            "post_steps", lambda: losses.append(trainer.last_losses["loss_qvalue"].item())
        )
        trainer.train()
        assert trainer._optim_count == 20 and trainer.collected_frames == 320
        assert len(rb) == 64 and rb.write_count == 64  # nothing written: offline
        assert all(s.numel() == 16 and s.max() < 64 for s in seen)
        assert losses[-1] < losses[0]
        assert "update_weights" not in trainer._modules
        # statistics of the samples (no collected batch offline), no episode return
        names = [getattr(op, "logname", None) for op, _ in trainer._ops["post_optim_log"]]
        assert names == ["done_percentage", "r_training", "r_max", "action_norm"]

    def test_cql_offline_minimizes_its_components(self):
        torch.manual_seed(0)
        actor = continuous_actor()
        # offline there is no environment to read the action spec from: give it to the loss
        loss = CQLLoss(actor, qvalue_net(), gamma=0.9, action_spec=Bounded(-2.0, 2.0, shape=(1,)))
        rb = self._dataset()
        trainer = CQLTrainer(
            collector=None,
            total_frames=16 * 2 * 2,
            frame_skip=1,
            optim_steps_per_batch=2,
            loss_module=loss,
            optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3),
            replay_buffer=rb,
            target_net_updater=SoftUpdate(loss, tau=0.1),
            progress_bar=False,
            enable_logging=False,
        )
        assert trainer.optimization_stepper.loss_components == [
            "loss_actor", "loss_qvalue", "loss_cql", "loss_alpha",
        ]  # fmt: skip
        trainer.train()
        assert trainer._optim_count == 4
        assert "grad_norm" in trainer.last_losses.keys()

    @pytest.mark.filterwarnings("ignore:No target network updater")
    def test_iql_online_extends(self):
        torch.manual_seed(0)
        actor = continuous_actor()
        value = ValueOperator(
            MLP(in_features=1, out_features=1, num_cells=[16]), in_keys=["observation"]
        )
        loss = IQLLoss(actor, qvalue_net(), value, gamma=0.9)
        rb = buffer(100, 4)
        collector = RecordingCollector([transitions(8, seed=i) for i in range(2)])
        trainer = IQLTrainer(
            collector=collector, total_frames=16, frame_skip=1, optim_steps_per_batch=1,
            loss_module=loss, optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3),
            replay_buffer=rb, progress_bar=False,
        )  # fmt: skip
        trainer.train()
        assert len(rb) == 16 and len(collector.pushed) == 2
        assert "target_net_updater" not in trainer._modules

    def test_offline_errors(self):
        torch.manual_seed(0)
        loss = CQLLoss(continuous_actor(), qvalue_net())
        common = dict(total_frames=10, frame_skip=1, loss_module=loss, progress_bar=False)
        with pytest.raises(ValueError, match="collector=None .* but no replay_buffer"):
            IQLTrainer(collector=None, optim_steps_per_batch=1, **common)
        with pytest.raises(ValueError, match="optim_steps_per_batch, the optimization steps"):
            CQLTrainer(
                collector=None, optim_steps_per_batch=None, replay_buffer=self._dataset(), **common
            )
        with pytest.raises(ValueError, match="which has no batch_size"):
            CQLTrainer(
                collector=None, optim_steps_per_batch=1, replay_buffer=buffer(4, None), **common
            )
        with pytest.raises(ValueError, match="async_collection=True needs a collector"):
            IQLTrainer(
                collector=None, optim_steps_per_batch=1, replay_buffer=self._dataset(),
                async_collection=True, **common,
            )  # fmt: skip
        # the offline rounds never run out: without a frame budget the run would not end
        with pytest.raises(ValueError, match="needs total_frames, the transitions to sample"):
            CQLTrainer(
                collector=None, optim_steps_per_batch=1, replay_buffer=self._dataset(),
                **{**common, "total_frames": None},
            )  # fmt: skip


# ----------------------------------------------------------------------------- offline -> online
class TestOfflineToOnline:
    def _buffer(self, **kwargs):
        # a plain ReplayBuffer: its samples carry no "index", as the online part's
        offline = ReplayBuffer(storage=LazyTensorStorage(64), batch_size=8)
        offline.extend(transitions(64).exclude(("next", "reward_sum")))
        kwargs.setdefault("offline_fraction", 0.5)
        return OfflineToOnlineReplayBuffer(offline, online_capacity=100, batch_size=8, **kwargs)

    def test_trainer_writes_online_and_anneals(self):
        _, _, loss = sac_pieces()
        rb = self._buffer(offline_fraction=0.8)
        batches = []
        for i in range(4):
            td = transitions(8, seed=10 + i)
            td["loc"] = torch.zeros(8, 1)  # a policy output the dataset lacks
            td["collector", "traj_ids"] = torch.zeros(8, dtype=torch.long)
            batches.append(td)
        trainer = OfflineToOnlineTrainer(
            collector=RecordingCollector(batches),
            total_frames=32,
            frame_skip=1,
            optim_steps_per_batch=2,
            loss_module=loss,
            replay_buffer=rb,
            optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3),
            target_net_updater=SoftUpdate(loss, tau=0.1),
            progress_bar=False,
        )
        fractions = []
        trainer.register_op("post_steps", lambda: fractions.append(rb.offline_fraction))
        trainer.train()
        assert len(rb.online_buffer) == 32
        stored = rb.online_buffer.sample(4)
        assert "loc" not in stored.keys() and "collector" not in stored.keys()
        # linear decay over total_frames: 0.8 * (1 - frames / 32) after each batch of 8
        assert fractions == pytest.approx([0.6, 0.4, 0.2, 0.0])
        assert trainer._optim_count == 8
        assert {"replay_buffer", "offline_to_online_anneal"} <= set(trainer._modules)

    def test_hook_state_round_trip(self):
        rb = self._buffer()
        hook = OfflineToOnlineReplayBufferHook(rb)
        hook.extend(transitions(20).exclude(("next", "reward_sum")))
        rb.anneal(step=50, total_steps=100)
        rb2 = self._buffer(offline_fraction=0.8)
        hook2 = OfflineToOnlineReplayBufferHook(rb2)
        hook2.load_state_dict(hook.state_dict())
        assert len(rb2.online_buffer) == 20
        assert rb2.offline_fraction == pytest.approx(0.25)
        rb2.anneal(step=50, total_steps=100)  # annealing starts from the restored 0.5
        assert rb2.offline_fraction == pytest.approx(0.25)

    def test_anneal_hook(self):
        rb = self._buffer(offline_fraction=0.8)

        class Frames:
            collected_frames = 0

        stub = Frames()
        hook = OfflineToOnlineAnnealHook(stub, rb, anneal_frames=100)
        for frames, expected in [(0, 0.8), (50, 0.4), (100, 0.0), (200, 0.0)]:
            stub.collected_frames = frames
            hook()
            assert rb.offline_fraction == pytest.approx(expected)
        with pytest.raises(ValueError, match="anneal_frames must be a positive int"):
            OfflineToOnlineAnnealHook(stub, rb, anneal_frames=0)

    def test_errors(self):
        _, _, loss = sac_pieces()
        common = dict(
            collector=[], total_frames=8, frame_skip=1, optim_steps_per_batch=1,
            loss_module=loss, target_net_updater=SoftUpdate(loss, tau=0.1), progress_bar=False,
        )  # fmt: skip
        with pytest.raises(TypeError, match="requires an OfflineToOnlineReplayBuffer, got"):
            OfflineToOnlineTrainer(replay_buffer=buffer(10, 2), **common)
        with pytest.raises(ValueError, match="does not support async_collection"):
            OfflineToOnlineTrainer(replay_buffer=self._buffer(), async_collection=True, **common)
        with pytest.raises(
            ValueError, match="anneal_frames defaults to total_frames, which is None"
        ):
            OfflineToOnlineTrainer(replay_buffer=self._buffer(), **{**common, "total_frames": None})
        trainer = OfflineToOnlineTrainer(
            replay_buffer=self._buffer(), anneal_frames=4, **{**common, "total_frames": None}
        )
        assert trainer.anneal_frames == 4
        trainer = OfflineToOnlineTrainer(replay_buffer=self._buffer(), anneal_frames=0, **common)
        assert "offline_to_online_anneal" not in trainer._modules


def test_algorithm_trainers_are_trainers():
    for cls in (
        PPOTrainer, A2CTrainer, ReinforceTrainer, SACTrainer, TD3Trainer, DDPGTrainer,
        DQNTrainer, IQLTrainer, CQLTrainer, OfflineToOnlineTrainer,
    ):  # fmt: skip
        assert issubclass(cls, Trainer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import rl.core.trainers.algorithms  # noqa: F401  (importing warns nothing)


@pytest.mark.parametrize(
    "module",
    [
        "rl.core.trainers.algorithms._on_policy",
        "rl.core.trainers.algorithms._off_policy",
        "rl.core.trainers.algorithms._td3",
        "rl.core.trainers.algorithms._dqn",
        "rl.core.trainers.algorithms._offline",
        "rl.core.trainers.algorithms._offline_to_online",
        "rl.core.trainers.algorithms._wiring",
    ],
)
def test_doctests(module):
    import doctest
    import importlib

    torch.manual_seed(0)
    result = doctest.testmod(
        importlib.import_module(module),
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
        verbose=False,
    )
    assert result.failed == 0
