"""Tensor twins (``tensor_forward``) of TanhModule and the exploration modules.

DDPG's and TD3's acting policy (an MLP, a ``TanhModule``, an ``AdditiveGaussianModule``)
and DQN's (a Q-network, an ``EGreedyModule``) are run by collectors through their twin on
tensors: the twin must return exactly what the TensorDict forward writes, random draws
included, and decline (``None``) where it could not.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torch.nn.modules import module as torch_module
from torch.testing import assert_close

from rl.core import (
    Bounded,
    Categorical,
    Composite,
    ExplorationType,
    MultiCategorical,
    OneHot,
    set_exploration_type,
    tensor_policy,
)
from rl.modules import (
    MLP,
    AdditiveGaussianModule,
    EGreedyModule,
    QValueActor,
    TanhModule,
)

#: a Pendulum-like action spec, and one with different bounds per dim
PENDULUM = Bounded(-2.0, 2.0, shape=(1,))
SKEWED = Bounded(torch.tensor([-2.0, 0.5]), torch.tensor([2.0, 3.0]), shape=(2,))
BATCHES = [(6,), (2, 3), ()]


def assert_exact(got, expected, msg=None) -> None:
    assert_close(got, expected, rtol=0, atol=0, msg=msg)


def both_paths(policy, td: TensorDict, seed: int = 1) -> tuple[TensorDict, dict]:
    """``(policy's output, twin's outputs by key)`` from the same torch seed."""
    twin = tensor_policy(policy)
    assert twin is not None
    torch.manual_seed(seed)
    expected = policy(td.clone())
    torch.manual_seed(seed)
    got = twin.forward(*[td[key] for key in twin.in_keys])
    assert len(got) == len(twin.out_keys)
    return expected, dict(zip(twin.out_keys, got))


def assert_twin_matches(policy, td: TensorDict, seed: int = 1) -> dict:
    expected, got = both_paths(policy, td, seed)
    for key, value in got.items():
        assert_exact(value, expected[key], msg=key)
    return got


def deterministic_actor(spec, obs_dim: int = 3, hidden: int = 16) -> TensorDictSequential:
    """As examples/_offpolicy.py's ``make_deterministic_actor``: an MLP, then a tanh into
    the spec's bounds."""
    torch.manual_seed(0)
    return TensorDictSequential(
        TensorDictModule(
            MLP(
                in_features=obs_dim,
                out_features=spec.shape[-1],
                num_cells=[hidden] * 2,
                activation_class=nn.ReLU,
            ),
            in_keys=["observation"],
            out_keys=["param"],
        ),
        TanhModule(in_keys=["param"], out_keys=["action"], spec=spec),
    )


@pytest.fixture
def global_hook():
    """A global forward hook for the test's duration (every module has one then)."""
    handle = torch_module.register_module_forward_hook(lambda *args: None)
    yield
    handle.remove()


def unsafe_variants(cls, *args) -> list:
    """``cls(*args)`` with a forward hook, with a pre-hook, and a subclass's forward: the
    three configurations no twin may stand for."""
    hooked = cls(*args)
    hooked.register_forward_hook(lambda *a: None)
    pre_hooked = cls(*args)
    pre_hooked.register_forward_pre_hook(lambda *a: None)

    class Custom(cls):
        def forward(self, tensordict):
            return super().forward(tensordict)

    return [hooked, pre_hooked, Custom(*args)]


class TestTanhModule:
    @pytest.mark.parametrize("spec", [PENDULUM, SKEWED, None], ids=["pendulum", "skewed", "unit"])
    @pytest.mark.parametrize("clamp", [False, True])
    @pytest.mark.parametrize("batch", BATCHES, ids=str)
    def test_matches_forward(self, spec, clamp, batch):
        dim = spec.shape[-1] if spec is not None else 2
        module = TanhModule(["param"], ["action"], spec=spec, clamp=clamp)
        # large entries too: the clamp and the bounds are reached
        param = torch.randn(*batch, dim) * 5
        got = assert_twin_matches(module, TensorDict(param=param, batch_size=batch))
        assert list(got) == ["action"]
        if spec is not None:
            assert (got["action"] >= spec.space.low).all()
            assert (got["action"] <= spec.space.high).all()

    def test_in_place_and_several_pairs(self):
        module = TanhModule(
            ["a", "b"], spec=None, low=torch.tensor([-2.0, 0.0]), high=torch.tensor([2.0, 5.0])
        )
        twin = tensor_policy(module)
        assert (twin.in_keys, twin.out_keys) == (["a", "b"], ["a", "b"])
        td = TensorDict(a=torch.randn(4, 2) * 3, b=torch.randn(4, 2) * 3, batch_size=[4])
        assert_twin_matches(module, td)

    def test_follows_dtype_device_moves_and_loaded_bounds(self):
        module = TanhModule(["param"], ["action"], spec=PENDULUM)
        twin = tensor_policy(module)  # built before the changes below
        module.to(torch.float64)
        param = torch.randn(5, 1, dtype=torch.float64) * 3
        (out,) = twin.forward(param)
        assert out.dtype == torch.float64
        assert_exact(out, module(TensorDict(param=param, batch_size=[5]))["action"])
        # other bounds loaded into the buffers in place: the twin reads them
        state = {"action_low": torch.tensor([0.0]), "action_high": torch.tensor([1.0])}
        module.load_state_dict({k: v.double() for k, v in state.items()})
        (out,) = twin.forward(param)
        assert_exact(out, module(TensorDict(param=param, batch_size=[5]))["action"])
        assert (out >= 0).all() and (out <= 1).all()

    def test_global_hook_gives_no_twin(self, global_hook):
        assert tensor_policy(TanhModule(["param"], ["action"], spec=PENDULUM)) is None

    def test_hooks_subclasses_and_keys_without_twin(self):
        for module in (
            *unsafe_variants(TanhModule, ["param"], ["action"]),
            TanhModule([("nested", "param")], ["action"]),
            TanhModule(["param"], [("nested", "action")]),
            # the second pair reads what the first wrote
            TanhModule(["a", "b"], ["b", "c"]),
        ):
            assert module.tensor_forward() is None, module
            assert tensor_policy(module) is None, module


class TestAdditiveGaussian:
    @pytest.mark.parametrize("spec", [PENDULUM, SKEWED], ids=["pendulum", "skewed"])
    @pytest.mark.parametrize("batch", BATCHES, ids=str)
    @pytest.mark.parametrize("itype", [ExplorationType.RANDOM, None], ids=str)
    def test_matches_forward(self, spec, batch, itype):
        # sigma large enough that the projection into the bounds acts
        module = AdditiveGaussianModule(spec, sigma_init=2.0, sigma_end=0.1, mean=0.1, std=1.5)
        action = torch.rand(*batch, spec.shape[-1]) * 2 - 1
        td = TensorDict(action=action, batch_size=batch)
        if itype is None:
            got = assert_twin_matches(module, td)
        else:
            with set_exploration_type(itype):
                got = assert_twin_matches(module, td)
        assert not torch.equal(got["action"], action)  # noise was added

    def test_deterministic_leaves_the_action(self):
        module = AdditiveGaussianModule(PENDULUM, sigma_init=2.0)
        action = torch.rand(6, 1)
        td = TensorDict(action=action, batch_size=[6])
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            got = assert_twin_matches(module, td)
            assert module(td)["action"] is action
        assert got["action"] is action

    def test_follows_sigma_annealing_and_dtype(self):
        # noise within the bounds (no projection): the annealed sigma scales it exactly
        module = AdditiveGaussianModule(
            PENDULUM, sigma_init=0.5, sigma_end=0.0, annealing_num_steps=4
        )
        twin = tensor_policy(module)  # built before the changes below
        action = torch.zeros(8, 1)
        td = TensorDict(action=action, batch_size=[8])
        torch.manual_seed(0)
        (before,) = twin.forward(action)
        module.step(3)  # sigma 0.5 -> 0.125, in place
        torch.manual_seed(0)
        (after,) = twin.forward(action)
        assert_exact(after, before * 0.25)
        torch.manual_seed(0)
        assert_exact(after, module(td.clone())["action"])
        module.step(1)  # sigma 0: no noise left
        assert_exact(twin.forward(action)[0], action)
        module.to(torch.float64)
        module.sigma.fill_(0.5)
        action = action.double()
        torch.manual_seed(0)
        (out,) = twin.forward(action)
        torch.manual_seed(0)
        assert_exact(out, module(TensorDict(action=action, batch_size=[8]))["action"])
        # the buffers moved (the spec's projection keeps the spec's dtype, on both paths)
        assert module.sigma.dtype == torch.float64 and out.abs().max() > 0

    def test_spec_read_at_each_call(self):
        module = AdditiveGaussianModule(None, sigma_init=5.0)
        twin = tensor_policy(module)  # a spec may be set later (by the env)
        assert twin is not None
        action = torch.zeros(4, 1)
        with pytest.raises(RuntimeError, match="the spec has not been set") as from_forward:
            module(TensorDict(action=action, batch_size=[4]))
        with pytest.raises(RuntimeError, match="the spec has not been set") as from_twin:
            twin.forward(action)
        assert str(from_twin.value) == str(from_forward.value)
        module.spec = PENDULUM
        (out,) = twin.forward(action)
        assert out.abs().max() <= 2.0 and out.abs().max() > 0

    def test_unsafe_configurations_have_no_twin(self):
        for module in (
            *unsafe_variants(AdditiveGaussianModule, PENDULUM),
            AdditiveGaussianModule(PENDULUM, safe=True),
            AdditiveGaussianModule(PENDULUM, action_key=("agents", "action")),
        ):
            assert module.tensor_forward() is None, module
            assert tensor_policy(module) is None, module

    def test_global_hook_gives_no_twin(self, global_hook):
        assert tensor_policy(AdditiveGaussianModule(PENDULUM)) is None


class TestDeterministicActorWithNoise:
    """TD3's and DDPG's acting policy: the actor, then Gaussian noise."""

    @pytest.mark.parametrize("spec", [PENDULUM, SKEWED], ids=["pendulum", "skewed"])
    @pytest.mark.parametrize("batch", BATCHES, ids=str)
    def test_sequence_matches_forward(self, spec, batch):
        policy = TensorDictSequential(
            deterministic_actor(spec), AdditiveGaussianModule(spec, sigma_init=0.5)
        )
        twin = tensor_policy(policy)
        assert (twin.in_keys, twin.out_keys) == (["observation"], ["param", "action"])
        td = TensorDict(observation=torch.randn(*batch, 3) * 3, batch_size=batch)
        with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
            assert_twin_matches(policy, td)
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            expected, got = both_paths(policy, td)
            assert_exact(got["action"], expected["action"])
            assert_exact(got["action"], policy[0](td.clone())["action"])  # no noise

    def test_hook_on_the_noise_gives_no_twin(self):
        noise = AdditiveGaussianModule(PENDULUM)
        policy = TensorDictSequential(deterministic_actor(PENDULUM), noise)
        assert tensor_policy(policy) is not None
        noise.register_forward_hook(lambda *args: None)
        assert tensor_policy(policy) is None


def action_td(spec, batch) -> TensorDict:
    torch.manual_seed(7)
    n = 4
    if isinstance(spec, OneHot):
        action = torch.nn.functional.one_hot(torch.randint(n, batch), n)
    elif isinstance(spec, MultiCategorical):
        action = torch.zeros(*batch, 2, dtype=torch.long)
    else:
        action = torch.randint(n, batch)
    return TensorDict(action=action, batch_size=batch)


class TestEGreedy:
    @pytest.mark.parametrize(
        "spec",
        [Categorical(4), OneHot(4), MultiCategorical([4, 3])],
        ids=["categorical", "one_hot", "multi_categorical"],
    )
    @pytest.mark.parametrize("batch", BATCHES, ids=str)
    def test_matches_forward(self, spec, batch):
        module = EGreedyModule(spec, eps_init=0.5, eps_end=0.5)
        twin = tensor_policy(module)
        assert twin.in_keys == ["action"]
        assert twin.out_keys == ["action"]
        td = action_td(spec, batch)
        for seed in range(4):  # some elements kept, some replaced
            got = assert_twin_matches(module, td, seed=seed)
        assert got["action"].shape == td["action"].shape

    def test_deterministic_leaves_the_action(self):
        module = EGreedyModule(Categorical(4), eps_init=1.0, eps_end=1.0)
        td = action_td(Categorical(4), (6,))
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            got = assert_twin_matches(module, td)
        assert got["action"] is td["action"]

    def test_follows_eps_annealing(self):
        module = EGreedyModule(Categorical(4), eps_init=1.0, eps_end=0.0, annealing_num_steps=2)
        twin = tensor_policy(module)
        td = action_td(Categorical(4), (50,))
        module.step(2)  # eps 0: greedy, nothing replaced
        assert_exact(twin.forward(td["action"])[0], td["action"])

    def test_missing_spec_raises_as_forward(self):
        module = EGreedyModule(None)
        twin = tensor_policy(module)
        action = torch.zeros(3, dtype=torch.long)
        with pytest.raises(RuntimeError, match="the spec has not been set") as from_forward:
            module(TensorDict(action=action, batch_size=[3]))
        with pytest.raises(RuntimeError, match="the spec has not been set") as from_twin:
            twin.forward(action)
        assert str(from_twin.value) == str(from_forward.value)

    def test_unsafe_configurations_have_no_twin(self):
        for module in (
            *unsafe_variants(EGreedyModule, Categorical(4)),
            EGreedyModule(Categorical(4), action_key=("agents", "action")),
            EGreedyModule(Categorical(4), action_mask_key=("agents", "mask")),
            # forward reads the mask only while it explores; the twin's inputs are all read
            EGreedyModule(Categorical(4), action_mask_key="action_mask"),
            # a batched env's spec: forward draws a coin per env, the twin would not know
            EGreedyModule(OneHot(4, shape=(5, 4))),
            # the same leaf inside an unbatched Composite
            EGreedyModule(Composite(action=OneHot(4, shape=(2, 4)))),
            # a Composite without the action: forward raises when it explores
            EGreedyModule(Composite(other=OneHot(4))),
            # the dims of a Categorical may be the env's: the same ambiguity
            EGreedyModule(Categorical(4, shape=(5,))),
            # and of any other scalar action's spec (a batched env's integer box)
            EGreedyModule(Bounded(0, 3, shape=(5,), dtype=torch.int64)),
        ):
            assert module.tensor_forward() is None, module
            assert tensor_policy(module) is None, module

    def test_masked_policy_keeps_forwards_behaviour(self):
        """No twin with a mask: a collector calls forward, which without exploration
        does not read the (absent) mask, and with it masks the random actions."""
        module = EGreedyModule(Categorical(4), eps_init=1.0, eps_end=1.0, action_mask_key="mask")
        policy = TensorDictSequential(module)
        assert tensor_policy(policy) is None
        td = TensorDict(action=torch.zeros(200, dtype=torch.long), batch_size=[200])
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            assert (policy(td.clone())["action"] == 0).all()
        td["mask"] = torch.tensor([False, False, True, False]).expand(200, 4)
        assert (policy(td)["action"] == 2).all()

    def test_q_policy_matches_forward(self):
        torch.manual_seed(0)
        qnet = QValueActor(nn.Linear(4, 2), spec=OneHot(2))
        policy = TensorDictSequential(qnet, EGreedyModule(OneHot(2), eps_init=0.5, eps_end=0.5))
        twin = tensor_policy(policy)
        assert twin.in_keys == ["observation"]
        assert twin.out_keys == ["action_value", "action", "chosen_action_value"]
        td = TensorDict(observation=torch.randn(16, 4), batch_size=[16])
        for seed in range(3):
            assert_twin_matches(policy, td, seed=seed)


def _collect(env_fn, make_policy, fast: bool, batches: int = 3) -> list[TensorDict]:
    from rl.collectors import Collector

    env = env_fn()
    env.set_seed(3)
    policy = make_policy(env)
    torch.manual_seed(5)
    collector = Collector(env, policy, frames_per_batch=50)
    assert collector._tensor_policy is not None  # the policy has a twin
    if not fast:
        collector._tensor_policy = None  # the TensorDict path
    out = [collector.next() for _ in range(batches)]
    collector.shutdown()
    return out


def _td3_policy(env):
    spec = env.action_spec
    return TensorDictSequential(
        deterministic_actor(spec, obs_dim=3), AdditiveGaussianModule(spec, sigma_init=0.4)
    )


def _dqn_policy(env):
    torch.manual_seed(0)
    spec = env.action_spec
    return TensorDictSequential(
        QValueActor(nn.Linear(4, 2), spec=spec), EGreedyModule(spec, eps_init=0.5, eps_end=0.5)
    )


@pytest.mark.parametrize(
    "env_id,make_policy",
    [("Pendulum-v1", _td3_policy), ("CartPole-v1", _dqn_policy)],
    ids=["pendulum-td3", "cartpole-dqn"],
)
def test_collector_fast_and_general_paths_collect_the_same_data(env_id, make_policy):
    pytest.importorskip("gymnasium")
    from rl.envs import GymEnv

    fast = _collect(lambda: GymEnv(env_id), make_policy, fast=True)
    slow = _collect(lambda: GymEnv(env_id), make_policy, fast=False)
    for a, b in zip(fast, slow, strict=True):
        assert list(a.keys(True, True)) == list(b.keys(True, True))
        for key in a.keys(True, True):
            assert_exact(a[key], b[key], msg=str(key))
    actions = torch.cat([batch["action"] for batch in fast])
    assert actions.unique(dim=0).shape[0] > 1


def test_ornstein_uhlenbeck_has_no_twin():
    """Its noise and step count live in the TensorDict between calls: no twin (yet)."""
    from rl.modules import OrnsteinUhlenbeckProcessModule

    policy = TensorDictSequential(
        deterministic_actor(PENDULUM), OrnsteinUhlenbeckProcessModule(PENDULUM)
    )
    assert tensor_policy(policy) is None


@pytest.mark.parametrize("make_policy", ["td3", "dqn"])
def test_twins_trace_in_one_graph(make_policy):
    """What ``compile_policy`` compiles (examples/_common.py's ``CompiledPolicy``): the
    twin traced whole by dynamo (``fullgraph``: a graph break raises), and the same
    draws as the TensorDict forward."""
    import torch._dynamo

    if make_policy == "td3":
        policy = TensorDictSequential(
            deterministic_actor(SKEWED), AdditiveGaussianModule(SKEWED, sigma_init=0.5)
        )
        td = TensorDict(observation=torch.randn(3), batch_size=[])
    else:
        torch.manual_seed(0)
        policy = TensorDictSequential(
            QValueActor(nn.Linear(4, 2), spec=OneHot(2)),
            EGreedyModule(OneHot(2), eps_init=0.5, eps_end=0.5),
        )
        td = TensorDict(observation=torch.randn(4), batch_size=[])
    twin = tensor_policy(policy)
    torch._dynamo.reset()
    compiled = torch.compile(twin.forward, backend="eager", fullgraph=True)
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        for seed in range(3):
            torch.manual_seed(seed)
            expected = policy(td.clone())
            torch.manual_seed(seed)
            got = compiled(*[td[key] for key in twin.in_keys])
            for key, value in zip(twin.out_keys, got, strict=True):
                assert_exact(value, expected[key], msg=key)
    torch._dynamo.reset()


def test_gaussian_noise_built_on_a_device_keeps_its_spec_there():
    """As EGreedyModule's, ``device=`` puts the spec with the buffers (``meta`` stands for
    a GPU): the noise is clamped there, and the spec given is left where it was."""
    spec = Bounded(-1.0, 1.0, shape=(2,))
    module = AdditiveGaussianModule(spec, sigma_init=0.5, sigma_end=0.5, device="meta")
    assert module.spec["action"].device.type == "meta" and module.sigma.device.type == "meta"
    assert spec.device.type == "cpu"
    out = module(TensorDict(action=torch.empty(4, 2, device="meta"), batch_size=[4]))
    assert out["action"].device.type == "meta" and out["action"].shape == (4, 2)
