"""RNDTransform: the random-network-distillation bonus, against TorchRL 0.14.1 and by hand.

The reference numbers were computed with ``torchrl==0.14.1``
(``torchrl.envs.transforms.RNDTransform._step``) on the same weights and observations as
built here (deterministic, no RNG).
"""

from __future__ import annotations

import doctest

import pytest
import torch
from tensordict import TensorDict
from torch import nn

import rl.envs.transforms._intrinsic as intrinsic
from rl.core import Composite, Unbounded
from rl.envs import GymEnv, TransformedEnv, check_env_specs
from rl.envs.transforms import RNDTransform


def _net(in_f: int, hidden: int, out: int, offset: float) -> nn.Sequential:
    """A two-layer MLP with fixed sinusoidal weights (the same in TorchRL's run)."""
    net = nn.Sequential(nn.Linear(in_f, hidden), nn.ReLU(), nn.Linear(hidden, out))
    with torch.no_grad():
        for i, p in enumerate(net.parameters()):
            k = torch.arange(p.numel(), dtype=torch.float32)
            p.copy_((torch.sin(k * 0.37 + offset + i) * 0.6).reshape(p.shape))
    return net


def _obs(step: int, n: int = 4, f: int = 3) -> torch.Tensor:
    k = torch.arange(n * f, dtype=torch.float32).reshape(n, f)
    return torch.cos(k * 0.9 + step * 1.3) * (1.0 + step) + 0.5 * step


def _transform(**kwargs) -> RNDTransform:
    return RNDTransform(
        _net(3, 8, 5, 0.0), _net(3, 8, 5, 1.0), obs_clip=2.0, reward_clip=3.0, **kwargs
    )


def _run(transform: RNDTransform) -> torch.Tensor:
    """Three steps in training mode, then one in eval mode: the bonuses ``[4, 4, 1]``."""
    out = []
    for step in range(4):
        transform.train(step < 3)
        next_td = TensorDict(observation=_obs(step), batch_size=[4])
        transform._step(TensorDict(batch_size=[4]), next_td)
        out.append(next_td["intrinsic_reward"])
    return torch.stack(out)


# torchrl.envs.transforms.RNDTransform(target, predictor, obs_clip=2.0, reward_clip=3.0,
# normalize_obs=..., normalize_reward=...) run as _run does
TORCHRL = {
    (True, True): [
        [1.2000443935394287, 1.354993462562561, 3.0, 1.4196300506591797],
        [1.2221624851226807, 2.8187472820281982, 2.2217156887054443, 1.3282666206359863],
        [0.847569465637207, 3.0, 0.5903022885322571, 2.131526470184326],
        [0.906112551689148, 1.374031901359558, 0.8142397403717041, 3.0],
    ],
    (False, False): [
        [1.0442922115325928, 1.0135219097137451, 1.8193013668060303, 0.8994783163070679],
        [1.0131736993789673, 2.6507155895233154, 2.3401553630828857, 1.032286524772644],
        [2.08062744140625, 26.327594757080078, 1.6910947561264038, 14.065664291381836],
        [10.452083587646484, 16.313861846923828, 1.8886350393295288, 47.07976150512695],
    ],
    (True, False): [
        [1.213584065437317, 1.370281457901001, 3.667742967605591, 1.4356472492218018],
        [1.0157495737075806, 2.342684745788574, 1.8464866876602173, 1.103933572769165],
        [1.638297438621521, 7.9497857093811035, 1.1410164833068848, 4.1201043128967285],
        [1.7514575719833374, 2.6559157371520996, 1.5738732814788818, 8.092374801635742],
    ],
}
TORCHRL_OBS_STATS = (
    [0.27718549966812134, 0.29327183961868286, 0.4658021032810211],
    [1.7203608751296997, 2.8233449459075928, 2.9882123470306396],
    12.000100135803223,
)
TORCHRL_REWARD_STATS = (2.4037559032440186, 3.736241340637207, 12.000100135803223)


class TestRNDTransform:
    @pytest.mark.parametrize(("normalize_obs", "normalize_reward"), list(TORCHRL))
    def test_matches_torchrl(self, normalize_obs, normalize_reward):
        transform = _transform(normalize_obs=normalize_obs, normalize_reward=normalize_reward)
        out = _run(transform)
        assert out.shape == (4, 4, 1)
        torch.testing.assert_close(
            out.squeeze(-1), torch.tensor(TORCHRL[normalize_obs, normalize_reward])
        )
        if normalize_obs:
            mean, var, count = TORCHRL_OBS_STATS
            torch.testing.assert_close(transform.obs_rms.mean, torch.tensor(mean))
            torch.testing.assert_close(transform.obs_rms.var, torch.tensor(var))
            assert transform.obs_rms.count.item() == pytest.approx(count)
        else:
            assert transform.obs_rms is None
        if normalize_reward:
            mean, var, count = TORCHRL_REWARD_STATS
            stats = transform.reward_rms
            assert (stats.mean.item(), stats.var.item()) == pytest.approx((mean, var))
            assert stats.count.item() == pytest.approx(count)
        else:
            assert transform.reward_rms is None

    def test_bonus_by_hand(self):
        transform = _transform()
        out = _run(transform)
        # the eval-mode step, from the statistics the three training steps left
        x = _obs(3)
        x = ((x - transform.obs_rms.mean) / transform.obs_rms.var.sqrt()).clamp(-2.0, 2.0)
        raw = (_net(3, 8, 5, 1.0)(x) - _net(3, 8, 5, 0.0)(x)).pow(2).mean(-1, keepdim=True)
        expected = (raw / transform.reward_rms.var.sqrt()).clamp(-3.0, 3.0)
        torch.testing.assert_close(out[3], expected.detach())
        # the first step's statistics include its own batch (folded in before normalising)
        fresh = _transform(normalize_reward=False)
        fresh._step(TensorDict(batch_size=[4]), TensorDict(observation=_obs(0), batch_size=[4]))
        x0 = _obs(0)
        prior = 1e-4  # the statistics' initial count, of mean 0 and variance 1
        mean = x0.mean(0) * 4 / (4 + prior)
        var = prior + x0.var(0, unbiased=False) * 4 + x0.mean(0) ** 2 * prior * 4 / (4 + prior)
        torch.testing.assert_close(fresh.obs_rms.mean, mean)
        torch.testing.assert_close(fresh.obs_rms.var, var / (4 + prior))

    def test_eval_mode_freezes_statistics(self):
        transform = _transform()
        _run(transform)  # its last step is in eval mode
        assert transform.obs_rms.count.item() == pytest.approx(12.0001)
        transform.eval()
        before = transform.reward_rms.var.clone()
        transform._step(TensorDict(batch_size=[4]), TensorDict(observation=_obs(7), batch_size=[4]))
        assert transform.obs_rms.count.item() == pytest.approx(12.0001)
        torch.testing.assert_close(transform.reward_rms.var, before)

    def test_target_frozen_and_no_gradient(self):
        transform = _transform()
        assert not any(p.requires_grad for p in transform.target_network.parameters())
        assert all(p.requires_grad for p in transform.predictor_network.parameters())
        next_td = TensorDict(observation=_obs(0), batch_size=[4])
        transform._step(TensorDict(batch_size=[4]), next_td)
        assert not next_td["intrinsic_reward"].requires_grad

    def test_custom_and_nested_keys(self):
        transform = _transform(in_keys=[("agent", "feat")], out_keys=["curiosity"])
        next_td = TensorDict({"agent": {"feat": _obs(0)}}, batch_size=[4])
        transform._step(TensorDict(batch_size=[4]), next_td)
        torch.testing.assert_close(
            next_td["curiosity"].squeeze(-1), torch.tensor(TORCHRL[True, True][0])
        )

    def test_forward_on_data_and_reset_writes_nothing(self):
        transform = _transform(normalize_obs=False, normalize_reward=False)
        td = transform(TensorDict(observation=_obs(2), batch_size=[4]))
        torch.testing.assert_close(
            td["intrinsic_reward"].squeeze(-1), torch.tensor(TORCHRL[False, False][2])
        )
        reset = transform._reset(
            TensorDict(batch_size=[4]), TensorDict(observation=_obs(0), batch_size=[4])
        )
        assert "intrinsic_reward" not in reset.keys()

    def test_state_dict_round_trip_builds_the_statistics(self):
        transform = _transform()
        _run(transform)
        state = transform.state_dict()
        assert {"_obs_rms.mean", "_obs_rms.var", "_obs_rms.count", "_reward_rms.var"} <= set(state)
        copy = RNDTransform(_net(3, 8, 5, 5.0), _net(3, 8, 5, 6.0))
        assert copy.obs_rms is None
        copy.load_state_dict(state)
        torch.testing.assert_close(copy.obs_rms.mean, transform.obs_rms.mean)
        torch.testing.assert_close(copy.reward_rms.var, transform.reward_rms.var)
        torch.testing.assert_close(copy.predictor_network[0].weight, _net(3, 8, 5, 1.0)[0].weight)

    @pytest.mark.parametrize(
        "device",
        [
            "cpu",
            pytest.param(
                "cuda",
                marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"),
            ),
        ],
    )
    def test_device(self, device):
        transform = _transform().to(device)
        next_td = TensorDict(observation=_obs(0, n=4).to(device), batch_size=[4], device=device)
        transform._step(TensorDict(batch_size=[4], device=device), next_td)
        assert next_td["intrinsic_reward"].device.type == device
        assert transform.obs_rms.mean.device.type == device
        torch.testing.assert_close(
            next_td["intrinsic_reward"].squeeze(-1).cpu(), torch.tensor(TORCHRL[True, True][0])
        )

    def test_reward_spec_takes_the_rewards_shape(self):
        spec = _transform().transform_reward_spec(
            Composite(reward=Unbounded(shape=(3, 1)), shape=(3,))
        )
        assert spec["intrinsic_reward"].shape == (3, 1)
        assert spec["intrinsic_reward"].dtype == torch.float32

    @pytest.mark.parametrize("num_envs", [1, 3])
    def test_in_a_gym_env(self, num_envs):
        torch.manual_seed(0)
        target, predictor = _net(2, 16, 8, 0.0), _net(2, 16, 8, 1.0)
        base = (
            GymEnv("MountainCar-v0", num_envs=num_envs)
            if num_envs > 1
            else GymEnv("MountainCar-v0")
        )
        env = TransformedEnv(base, RNDTransform(target, predictor))
        env.set_seed(0)
        check_env_specs(env)
        rollout = env.rollout(5)
        batch = (num_envs, 5) if num_envs > 1 else (5,)
        assert rollout["next", "intrinsic_reward"].shape == (*batch, 1)
        assert "intrinsic_reward" not in rollout.keys()  # nothing at reset / in the root
        assert sorted(env.reward_keys) == ["intrinsic_reward", "reward"]
        assert (rollout["next", "intrinsic_reward"] >= 0).all()
        transform = env.transform[0] if hasattr(env.transform, "transforms") else env.transform
        assert transform.predictor_network is predictor

    def test_the_bonus_falls_where_the_predictor_trained(self):
        """Trained with RNDLoss on one region of observations, the predictor's error (the
        bonus) there falls well below its error on observations it never saw."""
        from rl.objectives import RNDLoss

        torch.manual_seed(0)
        target = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 16))
        predictor = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 16))
        transform = RNDTransform(target, predictor, normalize_reward=False)
        seen = torch.rand(256, 2) * 0.5  # the region the agent visits
        novel = torch.rand(256, 2) * 0.5 + torch.tensor([2.0, -2.0])
        # statistics over both regions, as after a random warm-up rollout
        transform._step(
            TensorDict(batch_size=[512]),
            TensorDict(observation=torch.cat([seen, novel]), batch_size=[512]),
        )
        transform.eval()

        def bonus(obs):
            td = TensorDict(observation=obs, batch_size=[len(obs)])
            return transform._step(TensorDict(batch_size=[len(obs)]), td)["intrinsic_reward"].mean()

        before_seen, before_novel = bonus(seen), bonus(novel)
        loss = RNDLoss(predictor, target, obs_rms=transform.obs_rms, update_fraction=1.0)
        optim = torch.optim.Adam(predictor.parameters(), lr=1e-3)
        data = TensorDict({"next": {"observation": seen}}, [256])
        for _ in range(300):
            optim.zero_grad()
            loss(data)["loss_predictor"].backward()
            optim.step()
        after_seen, after_novel = bonus(seen), bonus(novel)
        assert after_seen < 0.05 * before_seen
        assert after_seen < 0.1 * after_novel
        assert before_seen > 0.1 * before_novel  # the gap was made by training, not there before

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            (
                {"in_keys": ["a", "b"], "out_keys": ["c", "d"]},
                ValueError,
                r"reads one observation and writes one reward, got in_keys=\['a', 'b'\]",
            ),
            ({"in_keys": ["a", "b"]}, ValueError, r"needs as many out_keys as in_keys"),
            ({"obs_clip": 0.0}, ValueError, r"obs_clip must be positive, got 0.0"),
            ({"reward_clip": -1.0}, ValueError, r"reward_clip must be positive, got -1.0"),
        ],
    )
    def test_bad_arguments(self, kwargs, error, match):
        with pytest.raises(error, match=match):
            RNDTransform(_net(3, 8, 5, 0.0), _net(3, 8, 5, 1.0), **kwargs)

    def test_bad_network_and_missing_observation(self):
        with pytest.raises(TypeError, match="target_network must be an nn.Module, got function"):
            RNDTransform(lambda x: x, _net(3, 8, 5, 1.0))
        with pytest.raises(
            KeyError, match="expected in_key 'observation'.*keys present: \\['pixels'\\]"
        ):
            _transform()._step(TensorDict(batch_size=[]), TensorDict(pixels=torch.zeros(3)))

    def test_docstring_example(self):
        result = doctest.testmod(
            intrinsic, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        )
        assert result.attempted > 0 and result.failed == 0
