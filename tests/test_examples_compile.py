"""``--compile`` and ``--cudagraphs`` of the example scripts.

The update step (``_common.UpdateStep``) compiles to ONE graph: loss, gradients
(``torch.autograd.grad`` traced), clipping, the optimizer's arithmetic and the target
update; checked here with ``fullgraph=True`` on dynamo's eager backend (fast) against
``torch.optim``'s own step, and with dynamo's counters on the scripts (slow: inductor).
The collector's compiled policy is the policy's tensor twin compiled
(``_common.CompiledPolicy``), called on tensors.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import (  # noqa: E402
    ONE_GRAPH,
    Case,
    StrictCudaGraphs,
    check,
    cuda_graphs_on_cpu,
    load,
    record_dynamo_counters,
    run_case,
    watch,
    worker_counters,
)


@pytest.mark.slow  # compilation: 10-60 s each on a 2-core CPU
def test_ppo_compiled_once_in_one_graph_each(fresh_dynamo, monkeypatch, tmp_path):
    ppo = load("ppo")
    seen = watch(ppo, monkeypatch)
    cfg = ppo.Config(
        total_frames=400,  # not whole batches of 128: rounded up, no smaller last batch
        num_envs=4,
        num_steps=32,
        update_epochs=2,
        num_minibatches=2,
        eval_episodes=1,
        progress=False,
        log_dir=str(tmp_path),
        compile=True,
    )
    summary = ppo.main(cfg)
    assert summary["frames"] == 512
    assert len(seen) == 4 * 2 * 2  # batches x epochs x minibatches
    check(seen, first=4)  # the first batch's updates
    assert counters["frames"]["ok"] == 3  # update step, policy, advantage


def test_whole_batches_rounds_up_as_torchrls_collectors_do():
    whole_batches = load("_common").whole_batches
    assert whole_batches(100_000, 256) == 100_096  # 391 batches, not 390 and a 160-frame one
    assert whole_batches(512, 128) == 512
    assert whole_batches(1, 128) == 128
    with pytest.raises(ValueError, match="frames_per_batch must be >= 1, got 0"):
        whole_batches(10, 0)


@pytest.mark.slow  # compilation: 10-60 s each on a 2-core CPU
def test_sac_compiled_once_in_one_graph_each(fresh_dynamo, monkeypatch, tmp_path):
    sac = load("sac")
    seen = watch(sys.modules[OFF], monkeypatch)  # sac.py's step: _offpolicy.summed_update
    cfg = sac.Config(
        total_frames=300,
        init_random_frames=100,
        frames_per_batch=50,
        utd_ratio=0.2,
        batch_size=32,
        hidden=16,
        eval_episodes=1,
        progress=False,
        log_dir=str(tmp_path),
        compile=True,
    )
    summary = sac.main(cfg)
    assert summary["frames"] == 300
    assert len(seen) == 5 * 10  # batches past the random frames x updates per batch
    check(seen, first=10)  # the first batch's updates
    assert counters["frames"]["ok"] == 2  # update step, policy


TINY_CONTINUOUS = {
    "total_frames": 300,
    "init_random_frames": 100,
    "frames_per_batch": 50,
    "utd_ratio": 0.2,  # 10 updates per batch, 5 batches past the random frames
    "batch_size": 32,
    "hidden": 16,
}
TINY_ATARI = {"eval_max_steps": 20}
#: the module whose UpdateStep builds the steps of _offpolicy.summed_update's scripts
OFF = "_offpolicy"
TINY_OFFLINE = {"num_updates": 6, "batch_size": 16, "hidden": 8, "eval_interval": 100}


CASES = {
    "offline-iql": Case("offline", {**TINY_OFFLINE, "algo": "iql"}, 6, 1, 1, True),
    # the warm-up's end (step 4) flips a tensor flag: no recompilation
    "offline-cql": Case(
        "offline", {**TINY_OFFLINE, "algo": "cql", "bc_steps": 3, "num_random": 2}, 6, 1, 1, True
    ),
    "td3_bc": Case("td3_bc", TINY_OFFLINE, 6 + 3, 2, 2, True),
    "diffusion_bc": Case(
        "diffusion_bc", {**TINY_OFFLINE, "num_steps": 3, "top_episodes": 1}, 6, 1, 1, True
    ),
    "gail": Case(
        "gail",
        {**TINY_CONTINUOUS, "expert_episodes": 1, "disc_updates": 2, "disc_hidden": 8},
        5 * 12,
        12,
        3,
        True,
    ),
    # 10 batches of 10 frames, one update each; graphs: the update step (the advantage
    # inside it) and the policy (both compiled in the first batch)
    "a2c": Case("a2c", {"total_frames": 100, "num_envs": 2, "num_steps": 5}, 10, 1, 2),
    # 5 batches x 4 updates; the policy compiles in the second batch (the first is random)
    "dqn": Case(
        "dqn",
        {
            "total_frames": 500,
            "init_random_frames": 100,
            "frames_per_batch": 100,
            "updates_per_batch": 4,
            "batch_size": 16,
            "hidden": 16,
            "target_update_interval": 8,
            "eval_interval": 0,
        },
        20,
        4,
        2,
    ),
    "ddpg": Case("ddpg", TINY_CONTINUOUS, 50, 10, 2),
    # the critics' step at every update, the actor's (with the targets) at every second
    "td3": Case("td3", TINY_CONTINUOUS, 50 + 25, 15, 3),
    # the target subset is drawn in the graph: no Python index, no break
    # steps built by _offpolicy.summed_update
    "redq": Case("redq", {**TINY_CONTINUOUS, "num_qvalue_nets": 4}, 50, 10, 2, steps_in=OFF),
    "crossq": Case("crossq", {**TINY_CONTINUOUS, "critic_hidden": 16}, 50, 10, 3),
    "cql_online": Case("cql_online", {**TINY_CONTINUOUS, "num_random": 4}, 50, 10, 2, steps_in=OFF),
    "tqc": Case("tqc", {**TINY_CONTINUOUS, "num_quantiles": 5}, 50, 10, 2, steps_in=OFF),
    "discrete_sac": Case(
        "discrete_sac", {**TINY_CONTINUOUS, "eval_interval": 0}, 50, 10, 2, steps_in=OFF
    ),
    # 2 batches x 4 minibatches x (PPO step, predictor step); graphs: the two steps, the
    # policy, the two advantages
    "ppo_rnd": Case(
        "ppo_rnd",
        {"total_frames": 512, "num_envs": 2, "num_steps": 128, "update_epochs": 1},
        16,
        8,
        5,
    ),
    # 16 rollouts of one worker process, one update each; graphs: the update step
    # (V-trace inside it); the policy compiles in the worker, out of these counters
    "impala": Case(
        "impala",
        {
            "env_id": "ObservationActionRewardProbe",
            "total_frames": 512,
            "num_workers": 1,
            "envs_per_worker": 4,
            "num_steps": 8,
            "eval_interval": 0,
        },
        16,
        1,
        1,
    ),
    # 2 batches x 4 minibatches; graphs: the update step, the policy, the advantage
    "ppo_atari": Case(
        "ppo_atari",
        {**TINY_ATARI, "total_frames": 512, "num_envs": 2, "num_steps": 128, "update_epochs": 1},
        2 * 4,
        4,
        3,
        steps_in="ppo",  # ppo.make_update_step
    ),
    # an update every 4 frames from frame 360 on; graphs: the update step and the policy
    "dqn_atari": Case(
        "dqn_atari",
        {
            **TINY_ATARI,
            "total_frames": 400,  # a game played at random ends within it
            "learning_starts": 360,
            "buffer_size": 400,
            "batch_size": 8,
        },
        11,
        1,
        2,
    ),
}


@pytest.mark.slow  # compilation: 10-60 s a graph on a 2-core CPU
@pytest.mark.parametrize("compile", [True, ONE_GRAPH], ids=["inductor", "dynamo-fullgraph"])
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            name,
            marks=[pytest.mark.atari] * ("atari" in name),
        )
        for name in sorted(CASES)
    ],
)
def test_script_update_compiled_once_in_one_graph(
    name, compile, fresh_dynamo, monkeypatch, tmp_path, request
):
    """Each script's update step(s) under ``--compile``: one graph each, compiled at
    their first call and never again, no graph break, the first step's losses equal to
    the eager ones (``watch``); ``ONE_GRAPH`` (dynamo alone, ``fullgraph``) raises on a
    break and gives the same numbers bit for bit."""
    run_case(CASES[name], compile, monkeypatch, tmp_path, request)


def _nets(n: int = 2):
    torch.manual_seed(0)
    nets = [torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))]
    for _ in range(n - 1):
        nets.append(
            torch.nn.Sequential(
                *(
                    type(m)()
                    if not isinstance(m, torch.nn.Linear)
                    else torch.nn.Linear(m.in_features, m.out_features)
                    for m in nets[0]
                )
            )
        )
        nets[-1].load_state_dict(nets[0].state_dict())
    return nets


@pytest.mark.parametrize(
    ("make_optim", "max_grad_norm"),
    [
        (lambda p: torch.optim.Adam(p, lr=1e-2), None),
        (lambda p: torch.optim.Adam(p, lr=1e-2, betas=(0.5, 0.9), eps=1e-5), 0.1),
        (lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1), 0.1),
        (lambda p: torch.optim.RMSprop(p, lr=1e-2, alpha=0.99, eps=1e-5), 0.1),
    ],
    ids=["adam", "adam-betas-clipped", "adamw-clipped", "rmsprop-clipped"],
)
def test_update_step_one_graph_matches_torch_optim(make_optim, max_grad_norm):
    common = load("_common")
    torch._dynamo.reset()
    counters.clear()
    eager_net, fused_net = _nets()
    # an unused parameter: no gradient, left as it is (torch.optim skips it)
    eager_net.unused = torch.nn.Parameter(torch.ones(2))
    fused_net.unused = torch.nn.Parameter(torch.ones(2))

    def loss_of(net):
        def loss_fn(x):
            loss = net(x).pow(2).mean()
            return loss, {"loss": loss}

        return loss_fn

    eager_opt, fused_opt = make_optim(eager_net.parameters()), make_optim(fused_net.parameters())
    eager = common.UpdateStep(loss_of(eager_net), eager_opt, max_grad_norm=max_grad_norm)
    fused = common.UpdateStep(
        loss_of(fused_net), fused_opt, max_grad_norm=max_grad_norm, compile=ONE_GRAPH
    )
    for step in range(4):
        x = torch.randn(16, 3)
        if step == 2:  # annealed in place: no recompilation
            common.set_lr(eager_opt, 5e-3)
            common.set_lr(fused_opt, 5e-3)
        torch.testing.assert_close(fused(x)["loss"], eager(x)["loss"])
        for p, q in zip(fused_net.parameters(), eager_net.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    # one graph, traced once (a recompilation would add one), no break (fullgraph)
    assert counters["stats"]["unique_graphs"] == 1  # (a recompilation: a second graph)
    assert not counters["graph_break"]
    assert not fused_net.unused.grad and torch.equal(fused_net.unused, torch.ones(2))
    # the optimizer's own state: a checkpoint of it stays valid
    # (index 0 is ``unused``: a module's own parameters come before its children's)
    state, eager_state = fused_opt.state_dict()["state"], eager_opt.state_dict()["state"]
    assert float(state[1]["step"]) == 4 and float(state[0]["step"]) == 0
    for key in state[1]:
        torch.testing.assert_close(state[1][key], eager_state[1][key], rtol=1e-5, atol=1e-6)


def test_update_step_soft_and_hard_target_updates_match_eager():
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule

    from rl.objectives import DQNLoss, HardUpdate, SoftUpdate

    common = load("_common")
    torch._dynamo.reset()
    counters.clear()
    sample = TensorDict(
        observation=torch.randn(32, 3),
        action=torch.nn.functional.one_hot(torch.randint(2, (32,)), 2),
        next=TensorDict(
            observation=torch.randn(32, 3),
            reward=torch.randn(32, 1),
            done=torch.zeros(32, 1, dtype=torch.bool),
            terminated=torch.zeros(32, 1, dtype=torch.bool),
        ),
        batch_size=[32],
    )
    for updater in (
        lambda loss: SoftUpdate(loss, tau=0.1),
        lambda loss: HardUpdate(loss, value_network_update_interval=2),
    ):
        steps, losses = [], []
        for compile in (False, ONE_GRAPH):
            (net,) = _nets(1)
            qnet = TensorDictModule(net, ["observation"], ["action_value"])
            loss = DQNLoss(qnet, action_space="one-hot", delay_value=True)
            optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
            step = common.UpdateStep(
                lambda td, loss=loss: (loss(td)["loss"], loss(td).select("loss")),
                optim,
                target_update=updater(loss),
                compile=compile,
            )
            steps.append(step)
            losses.append(loss)
        for _ in range(3):
            torch.testing.assert_close(steps[1](sample.clone()), steps[0](sample.clone()))
        target = [dict(loss.target_value_network_params.flatten_keys()) for loss in losses]
        for key, value in target[0].items():
            torch.testing.assert_close(target[1][key], value, rtol=1e-5, atol=1e-6)
        online = dict(losses[0].value_network_params.flatten_keys())
        assert not all(torch.equal(online[k], v) for k, v in target[0].items())
    assert not counters["graph_break"]


def test_update_step_refuses_an_optimizer_it_does_not_write():
    common = load("_common")
    (net,) = _nets(1)
    optim = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="writes Adam, AdamW and RMSprop .* got SGD"):
        common.UpdateStep(lambda x: (net(x).sum(), {}), optim, compile=True)
    amsgrad = torch.optim.Adam(net.parameters(), amsgrad=True)
    with pytest.raises(ValueError, match="got Adam"):
        common.UpdateStep(lambda x: (net(x).sum(), {}), amsgrad, compile=True)


def test_update_step_traces_autograd_only_within_its_calls():
    """The compiled step traces ``torch.autograd.grad`` (one graph, fullgraph) at its
    first call and at a recompilation, and leaves dynamo's flag as it found it, also when
    its compilation fails."""
    common = load("_common")
    torch._dynamo.reset()
    counters.clear()
    config = torch._dynamo.config
    (net,) = _nets(1)
    optim = torch.optim.Adam(net.parameters(), lr=1e-2)
    compiled_with = []  # the flag as each compilation found it

    def backend(gm, example_inputs):
        compiled_with.append(config.trace_autograd_ops)
        sizes = [x.shape[0] for x in example_inputs if isinstance(x, torch.Tensor) and x.dim() == 2]
        if 0 in [n for n in sizes if isinstance(n, int)]:  # (symbolic sizes: not 0)
            raise ValueError("an empty batch")
        return gm.forward

    def loss_fn(x):
        loss = net(x).pow(2).mean()
        return loss, {"loss": loss}

    step = common.UpdateStep(loss_fn, optim, compile={"backend": backend, "fullgraph": True})
    assert config.trace_autograd_ops is False
    before = [p.detach().clone() for p in net.parameters()]
    step(torch.randn(4, 3))
    assert compiled_with == [True] and config.trace_autograd_ops is False
    assert all(not torch.equal(p, q) for p, q in zip(net.parameters(), before))
    step(torch.randn(4, 3))  # the cached graph
    assert compiled_with == [True]
    step(torch.randn(6, 3))  # a new batch size: compiled again, the flag on again
    assert compiled_with == [True, True] and config.trace_autograd_ops is False
    with pytest.raises(Exception, match="an empty batch"):
        step(torch.randn(0, 3))
    assert compiled_with[-1] is True and config.trace_autograd_ops is False
    with config.patch(trace_autograd_ops=True):  # a caller's own setting outlives a call
        step(torch.randn(4, 3))
        assert config.trace_autograd_ops is True
    assert config.trace_autograd_ops is False
    assert not counters["graph_break"]


def _torch_workarounds() -> dict:
    """The inductor settings _common adds for this torch's version: the loop reordering
    off before torch 2.13 (its scheduler asserted on PPO's update on CUDA, torch 2.11)."""
    from torch._inductor import config

    old = torch.torch_version.TorchVersion(torch.__version__) < "2.13"
    known = "loop_ordering_after_fusion" in config.get_config_copy()
    return {"loop_ordering_after_fusion": False} if old and known else {}


def test_compile_kwargs_carry_the_inductor_options_unless_mode_or_backend():
    common = load("_common")
    from _compile_passes import CommonSubexpressions, NarrowProducts

    assert common.INDUCTOR_OPTIONS == {"cpp.use_decompose_tanh": True}
    opts = common._inductor_options()  # those this torch's inductor knows, and the passes
    assert opts.pop("post_grad_custom_post_pass") == CommonSubexpressions()
    assert opts.pop("post_grad_custom_pre_pass") == NarrowProducts()
    fixes = _torch_workarounds()
    assert opts == {**common.INDUCTOR_OPTIONS, **fixes} or not hasattr(
        torch._inductor.config.cpp, "use_decompose_tanh"
    )
    cse = {
        "post_grad_custom_post_pass": CommonSubexpressions(),
        "post_grad_custom_pre_pass": NarrowProducts(),
    }
    assert common._compile_kwargs(True) == {"options": {**opts, **cse}}
    # the caller's own options win, and are kept
    assert common._compile_kwargs({"options": {"cpp.use_decompose_tanh": False, "a": 1}}) == {
        "options": {"cpp.use_decompose_tanh": False, "a": 1, **fixes, **cse}
    }
    # torch.compile takes a mode or options, not both; another backend takes no inductor
    # options
    assert common._compile_kwargs({"mode": "max-autotune"}) == {"mode": "max-autotune"}
    assert common._compile_kwargs(ONE_GRAPH) == ONE_GRAPH


def test_inductor_options_unknown_to_this_torch_are_left_out(monkeypatch):
    common = load("_common")
    wanted = {"cpp.use_decompose_tanh": True, "cpp.no_such_option": 1, "no_such_group.x": 2}
    monkeypatch.setattr(common, "INDUCTOR_OPTIONS", wanted)
    monkeypatch.setattr(common, "COMMON_SUBEXPRESSIONS", False)
    monkeypatch.setattr(common, "NARROW_PRODUCTS", False)
    known = hasattr(torch._inductor.config.cpp, "use_decompose_tanh")
    wanted = {"cpp.use_decompose_tanh": True} if known else {}
    assert common._inductor_options() == {**wanted, **_torch_workarounds()}


def test_the_loop_reordering_is_off_before_torch_2_13(monkeypatch):
    """torch <= 2.12's scheduler asserted reordering the loops of PPO's update on CUDA
    (torch 2.11, benchmarks/results/gpu.md): the option is off there, left alone after."""
    common = load("_common")
    from torch._inductor import config

    monkeypatch.setattr(common, "COMMON_SUBEXPRESSIONS", False)
    monkeypatch.setattr(common, "NARROW_PRODUCTS", False)
    if "loop_ordering_after_fusion" not in config.get_config_copy():
        pytest.skip("this torch's inductor has no loop_ordering_after_fusion option")
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    assert common._inductor_options()["loop_ordering_after_fusion"] is False
    assert _torch_workarounds() == {"loop_ordering_after_fusion": False}
    monkeypatch.setattr(torch, "__version__", "2.13.0")
    assert "loop_ordering_after_fusion" not in common._inductor_options()
    assert _torch_workarounds() == {}


@pytest.mark.slow
def test_compiled_tanh_within_float_error_of_torch_tanh():
    """The inductor kernels the examples compile compute tanh from exp: within 2e-7 of
    ``torch.tanh``, exact at the saturated ends, NaN kept (a network's activations)."""
    common = load("_common")
    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.tanh(x) * 1.0, **common._compile_kwargs(True))
    x = torch.cat([torch.linspace(-20, 20, 4001), torch.tensor([-1e4, 1e4, 0.0])])
    torch.testing.assert_close(fn(x), torch.tanh(x), atol=2e-7, rtol=0)
    assert fn(torch.tensor([float("nan")])).isnan().all()


def test_compiled_policy_is_the_collectors_tensor_twin():
    from tensordict.nn import NormalParamExtractor

    from rl.collectors import Collector
    from rl.core import ExplorationType, set_exploration_type, tensor_policy
    from rl.envs import PendulumEnv
    from rl.modules import MLP, ProbabilisticActor, TanhNormal, TensorDictModule

    common = load("_common")
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    env = PendulumEnv(batch_size=[4])
    actor = ProbabilisticActor(
        TensorDictModule(
            torch.nn.Sequential(
                MLP(in_features=3, out_features=2, num_cells=[8]), NormalParamExtractor()
            ),
            ["observation"],
            ["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -2.0, "high": 2.0},
        spec=env.action_spec,
    )
    compiled = common.compile_policy(actor, compile=ONE_GRAPH)
    assert isinstance(compiled, common.CompiledPolicy)
    twin = tensor_policy(compiled)
    assert twin.in_keys == ["observation"] and twin.out_keys == ["loc", "scale", "action"]
    collector = Collector(env, compiled, frames_per_batch=40, total_frames=120)
    for batch in collector:
        action = batch["action"]
        assert action.shape == (4, 10, 1) and action.abs().max() <= 2.0
    collector.shutdown()
    # compiled once, at the first step, called on tensors at every step since
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]
    # on a TensorDict, the same compiled function (the collector's exploration type:
    # another one is another program, compiled once more)
    with set_exploration_type(ExplorationType.RANDOM):
        td = compiled(env.reset())
    assert td["action"].shape == (4, 1)
    assert counters["stats"]["unique_graphs"] == 1
    # no twin: a TypeError naming the policy
    with pytest.raises(TypeError, match="needs a policy with a tensor twin .* got function"):
        common.CompiledPolicy(lambda td: td)


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_compiled_policy_in_worker_processes_acts_with_pushed_weights(
    start, fresh_dynamo, tmp_path
):
    """A ``CompiledPolicy`` in a process collector's worker (impala.py's actors: forked
    on Linux without CUDA, where the worker inherits it; spawned elsewhere, where it is
    rebuilt from its policy and compile arguments) is compiled there once and acts with
    the weights the learner pushes: after zeroing the actor's weights and
    ``update_policy_weights_()``, a later rollout's log-probabilities are those of the
    uniform policy."""
    import functools
    import math

    from rl.collectors import MultiAsyncCollector

    common = load("_common")
    ppo = load("ppo")
    torch.manual_seed(0)
    make_env = functools.partial(common.make_base_env, "CartPole-v1", 2, categorical=True)
    actor, _ = ppo.make_agent(ppo.Config(), make_env())
    policy = common.compile_policy(actor, compile=ONE_GRAPH)
    assert isinstance(policy, common.CompiledPolicy)
    collector = MultiAsyncCollector(
        [make_env],
        policy,
        frames_per_batch=16,
        total_frames=-1,
        mp_start_method=start,
        post_collect_hook=functools.partial(record_dynamo_counters, str(tmp_path)),
    )
    uniform = torch.tensor(math.log(0.5))
    try:
        collector.set_seed(0)
        batches = iter(collector)
        first = next(batches)["action_log_prob"]
        assert not torch.allclose(first, uniform.expand_as(first))  # the initial weights
        with torch.no_grad():
            for param in actor.parameters():
                param.zero_()  # logits 0: both actions at 0.5
        collector.update_policy_weights_()
        # a rollout in flight may still act with the old weights (asynchronous actors)
        later = [next(batches)["action_log_prob"] for _ in range(3)]
        assert torch.allclose(later[-1], uniform.expand_as(later[-1]))
    finally:
        collector.shutdown()
    # the worker (not this process) compiled the policy at its first batch, as one graph,
    # and nothing after (a recompilation would add a graph)
    (rows,) = worker_counters(tmp_path).values()
    assert len(rows) >= 4
    assert all(row["graphs"] == 1 and row["breaks"] == 0 for row in rows), rows
    assert counters["stats"]["unique_graphs"] == 0  # (this process compiled nothing)


def _egreedy_q_policy(env, eps: float):
    from rl.modules import MLP, EGreedyModule, QValueActor, TensorDictSequential

    qnet = QValueActor(
        MLP(in_features=4, out_features=2, num_cells=[8]),
        in_keys=["observation"],
        spec=env.action_spec,
    )
    explore = EGreedyModule(env.action_spec, eps_init=eps, eps_end=eps)
    return qnet, TensorDictSequential(qnet, explore)


def test_policy_without_twin_compiles_on_tensors_once(fresh_dynamo):
    """An epsilon-greedy Q policy (no tensor twin) is compiled on the tensors at its
    in_keys: one graph, no break, no recompilation across a collector's steps; it writes
    what the policy writes, greedy actions equal to the eager network's, random ones
    drawn from the spec."""
    from rl.collectors import Collector
    from rl.core import tensor_policy
    from rl.envs import CartPoleEnv

    common = load("_common")
    torch.manual_seed(0)
    env = CartPoleEnv(batch_size=[4])
    qnet, policy = _egreedy_q_policy(env, eps=0.0)
    assert tensor_policy(policy) is None  # the path under test: no twin
    compiled = common.compile_policy(policy, compile=ONE_GRAPH)
    collector = Collector(env, compiled, frames_per_batch=40, total_frames=120)
    for batch in collector:
        assert batch["action"].shape == (4, 10, 2)
        assert set(batch.keys()) >= {"action", "action_value", "chosen_action_value"}
        with torch.no_grad():  # eps 0: the eager network's greedy action at each step
            greedy = qnet(batch.select("observation").clone())["action"]
        torch.testing.assert_close(batch["action"], greedy)
    collector.shutdown()
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]
    # eps 1: random one-hot actions, both drawn; the TensorDict keeps its other keys
    _, policy = _egreedy_q_policy(env, eps=1.0)
    compiled = common.compile_policy(policy, compile=ONE_GRAPH)
    td = env.reset().expand(256, 4).clone()  # a second batch size: compiled once more
    td.set("marker", torch.ones(256, 4))
    with torch.no_grad():
        out = compiled(td)
    assert out is td and "marker" in out.keys() and out["action_value"].shape == (256, 4, 2)
    assert (out["action"].sum(-1) == 1).all()
    share = out["action"][..., 0].float().mean().item()
    assert 0.45 < share < 0.55  # 1,024 fair draws: 3.2 standard deviations of 0.5
    assert counters["stats"]["unique_graphs"] == 2
    with pytest.raises(KeyError, match="observation"):
        compiled(td.exclude("observation"))


class _GroupCoins(torch.nn.Module):
    """Writes one coin per element of the ``agents`` group it reads (its batch size)."""

    in_keys = [("agents", "observation")]
    out_keys = [("agents", "coin")]

    def forward(self, tensordict):
        group = tensordict.get("agents")
        tensordict.set(("agents", "coin"), torch.rand(group.batch_size))
        return tensordict


def test_policy_with_nested_keys_reads_each_group_at_its_batch_size(fresh_dynamo):
    """A policy of group keys keeps its groups' batch sizes when compiled (an exploration
    module draws per agent, not per env)."""
    from tensordict import TensorDict

    common = load("_common")
    compiled = common.compile_policy(_GroupCoins(), compile=ONE_GRAPH)
    td = TensorDict(
        agents=TensorDict(observation=torch.zeros(5, 3, 2), batch_size=[5, 3]), batch_size=[5]
    )
    out = compiled(td)
    coins = out["agents", "coin"]
    assert coins.shape == (5, 3) and not (coins == coins[:, :1]).all()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
@pytest.mark.parametrize(
    "script",
    [
        "ppo",
        "impala",
        "sac",
        "crossq",
        "tqc",
        "cql_online",
        "discrete_sac",
        "ppo_rnd",
        "dqn_trainer",
        "dreamer",
        "mpc",
        "mcts",
        pytest.param(
            "decision_transformer",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("transformers") is None, reason="needs transformers"
            ),
        ),
        pytest.param(
            "distributed/ppo_ray",
            marks=pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray"),
        ),
        *(
            pytest.param(
                name,
                marks=pytest.mark.skipif(
                    importlib.util.find_spec("transformers") is None, reason="needs transformers"
                ),
            )
            for name in ("llm/sft", "llm/grpo_countdown")
        ),
        *(f"multiagent/{name}" for name in ("mappo", "maddpg", "masac", "qmix")),
    ],
)
def test_cudagraphs_without_cuda_names_the_missing_device(script, tmp_path):
    module = load(script)
    cfg = module.Config(cudagraphs=True, progress=False, log_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="--cudagraphs needs a CUDA device"):
        module.main(cfg)


def test_cudagraphs_on_parameters_off_cuda_names_their_device(monkeypatch):
    """Where CUDA is present but a script's networks are on the CPU (``--device cpu``,
    the default): the update step and the policy refuse to be captured at construction,
    naming the device and the option, instead of failing at the capture after the
    warm-up calls."""
    common = load("_common")
    monkeypatch.setitem(common.__dict__, "check_cudagraphs", lambda *args: None)
    net = torch.nn.Linear(2, 1)
    adam = torch.optim.Adam(net.parameters(), lr=1e-3)
    match = r"captures the update step on a CUDA device, but its parameters are on cpu: run with --device cuda"
    with pytest.raises(RuntimeError, match=match):
        common.UpdateStep(lambda: (net.weight.sum(), None), adam, cudagraphs=True)
    common.UpdateStep(lambda: (net.weight.sum(), None), adam)  # no capture: no check
    policy = torch.nn.Sequential(net)
    with pytest.raises(RuntimeError, match="captures the policy on a CUDA device, .* on cpu"):
        common.compile_policy(policy, compile=False, cudagraphs=True)
    common.check_on_cuda("a function without parameters", [])  # nothing to refuse


@pytest.mark.filterwarnings("ignore:.*CudaGraphModule.*:UserWarning")
def test_cuda_graphed_step_packs_its_arguments_and_unpacks_its_logs():
    """``CudaGraphModule`` takes its tensors in one TensorDict and returns a TensorDict;
    an update step takes a batch and minibatch indices and returns a tensor, a dict or a
    TensorDict of logs. (Without CUDA the module runs the function eagerly: the packing is
    what is checked here; the capture ran on an H200, benchmarks/results/gpu.md.)"""
    from tensordict import TensorDict

    common = load("_common")
    batch = TensorDict(x=torch.arange(12.0).reshape(6, 2), batch_size=[6])
    idx = torch.tensor([4, 1, 3])
    seen = []

    def step(data, index):
        seen.append((data, index))
        return data["x"][index].sum(-1)

    graphed = common._cuda_graphed(step, warmup=100)  # no capture, with or without CUDA
    out = graphed(batch, idx)
    torch.testing.assert_close(out, torch.tensor([17.0, 5.0, 13.0]))
    ((data, index),) = seen
    assert torch.equal(index, idx) and torch.equal(data["x"], batch["x"])
    as_dict = common._cuda_graphed(lambda d: {"loss": d["x"].sum(), "n": d["x"][:, 0]}, 100)
    logs = as_dict(batch)
    assert type(logs) is dict and set(logs) == {"loss", "n"}
    torch.testing.assert_close(logs["loss"], torch.tensor(66.0))
    as_td = common._cuda_graphed(lambda d: TensorDict(loss=d["x"].mean()), 100)
    assert isinstance(as_td(batch), TensorDict) and as_td(batch)["loss"].item() == 5.5
    with pytest.raises(TypeError, match=r"argument 1 is a int \(3\)"):
        graphed(batch, 3)


def test_cuda_graphed_step_writes_back_what_the_loss_writes_into_its_batch(monkeypatch):
    """A loss writes ``td_error`` into the sampled batch for the replay buffer's
    priorities: under a CUDA graph that write lands in the graph's input copy, and the
    step writes it back into the caller's batch (replaced entries too), with the logs."""
    import tensordict.nn
    from tensordict import TensorDict

    common = load("_common")
    monkeypatch.setattr(tensordict.nn, "CudaGraphModule", StrictCudaGraphs)

    def step(batch):
        batch.set("td_error", batch["x"] * 2)
        batch.set("x", batch["x"] + 1)  # an entry replaced, not only added
        return {"loss": batch["td_error"].sum()}

    graphed = common._cuda_graphed(step, warmup=1)
    for call in range(3):  # the first runs on the caller's batch, the others on copies
        batch = TensorDict(x=torch.arange(4.0) + call, batch_size=[4])
        logs = graphed(batch)
        x = torch.arange(4.0) + call
        torch.testing.assert_close(batch["td_error"], x * 2)
        torch.testing.assert_close(batch["x"], x + 1)
        assert type(logs) is dict and logs["loss"].item() == (x * 2).sum().item()
    assert graphed(TensorDict(x=torch.ones(4), batch_size=[4]))["loss"].item() == 8.0


def test_eager_update_step_in_a_cuda_graph_makes_its_optimizers_capturable(monkeypatch):
    """torch.optim refuses to step inside a CUDA graph capture unless ``capturable``:
    ``UpdateStep(cudagraphs=True)`` without ``compile`` sets it on each param group that
    has the option (its own compiled step needs none); without CUDA graphs nothing
    changes."""
    common = load("_common")
    cuda_graphs_on_cpu(monkeypatch, capturable=True)
    net = torch.nn.Linear(2, 1)
    adam = torch.optim.Adam(net.parameters(), lr=1e-3)
    sgd = torch.optim.SGD(net.parameters(), lr=1e-3)  # no such option: left alone
    common.UpdateStep(lambda: (net.weight.sum(), None), [adam], cudagraphs=False)
    assert adam.param_groups[0]["capturable"] is False
    common.UpdateStep(lambda: (net.weight.sum(), None), [adam, sgd], cudagraphs=True)
    assert adam.param_groups[0]["capturable"] is True
    assert "capturable" not in sgd.param_groups[0]


@pytest.mark.parametrize("name", ["dqn", "ddpg", "td3", "a2c", "crossq"])
@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_example_with_cudagraphs_keeps_the_graph_contract(
    name, compile, monkeypatch, tmp_path, fresh_dynamo
):
    """An example's ``--cudagraphs`` run (its collector policy and its update step in
    CUDA graphs), on CPU with ``StrictCudaGraphs`` standing in for ``CudaGraphModule``:
    each graph is called as the real one requires and replays. dqn runs with prioritized
    replay, whose priorities read the ``td_error`` the loss writes into the batch."""
    case = CASES[name]
    module = load(case.script)
    cuda_graphs_on_cpu(monkeypatch)
    config = dict(case.config, prioritized=True) if name == "dqn" else case.config
    cfg = module.Config(**config, eval_episodes=1, progress=False, log_dir=str(tmp_path))
    cfg.compile = ONE_GRAPH if compile else False
    cfg.cudagraphs = True
    StrictCudaGraphs.made.clear()
    module.main(cfg)
    assert StrictCudaGraphs.made and all(g.calls > 0 for g in StrictCudaGraphs.made)
    assert any(g.replays > 0 for g in StrictCudaGraphs.made)


class _NoPythonAtReplay(StrictCudaGraphs):
    """As a real replay: after the warm-up calls no Python of the function runs (the
    captured kernels would); it returns the last output again."""

    def __call__(self, tensordict, *args, **kwargs):
        if self.calls < self.warmup:
            self.last = super().__call__(tensordict, *args, **kwargs)
        else:
            self.calls += 1
        return self.last.clone()


@pytest.mark.parametrize("cudagraphs", [False, True], ids=["plain", "cudagraphs"])
def test_a2c_computes_the_advantage_once_a_batch(cudagraphs, monkeypatch, tmp_path):
    """a2c's advantage runs once a batch, before the gradient step: inside the update
    step, or, with ``--cudagraphs``, outside the captured step (a replay, which runs no
    Python here, would otherwise skip it after the warm-up calls)."""
    import tensordict.nn

    module = load("a2c")
    calls = []

    class CountedGAE(module.GAE):
        def forward(self, *args, **kwargs):
            calls.append(torch.is_grad_enabled())
            return super().forward(*args, **kwargs)

    monkeypatch.setattr(module, "GAE", CountedGAE)
    if cudagraphs:
        cuda_graphs_on_cpu(monkeypatch)
        monkeypatch.setattr(tensordict.nn, "CudaGraphModule", _NoPythonAtReplay)
    batches = 14  # more than the capture's 10 warm-up calls
    cfg = module.Config(
        total_frames=batches * 10,
        num_envs=2,
        num_steps=5,
        eval_episodes=1,
        progress=False,
        log_dir=str(tmp_path),
        cudagraphs=cudagraphs,
    )
    module.main(cfg)
    assert calls == [False] * batches  # once a batch, without gradients


@pytest.mark.parametrize("cudagraphs", [False, True], ids=["plain", "cudagraphs"])
def test_impala_computes_vtrace_once_a_rollout(cudagraphs, monkeypatch, tmp_path):
    """impala's V-trace runs once a rollout, without gradients, before the gradient step:
    inside the update step, or, with ``--cudagraphs``, outside the captured step (as
    a2c's advantage); every update logs a finite loss and mean importance weight at its
    frame count (their values: test_examples_impala.py's TestUpdate)."""
    import tensordict.nn

    load("ppo")  # impala builds ppo.py's networks
    module = load("impala")
    calls = []
    vtrace = module.vtrace

    def counted(*args):
        calls.append(torch.is_grad_enabled())
        return vtrace(*args)

    monkeypatch.setattr(module, "vtrace", counted)
    if cudagraphs:
        cuda_graphs_on_cpu(monkeypatch)
        monkeypatch.setattr(tensordict.nn, "CudaGraphModule", _NoPythonAtReplay)
    rollouts = 14  # more than the capture's 10 warm-up calls
    cfg = module.Config(
        env_id="ObservationActionRewardProbe",
        total_frames=rollouts * 32,
        num_workers=1,
        envs_per_worker=4,
        num_steps=8,
        eval_interval=0,
        eval_episodes=1,
        progress=False,
        log_dir=str(tmp_path),
        exp_name="run",
        cudagraphs=cudagraphs,
    )
    out = module.main(cfg)
    assert out["updates"] == rollouts
    assert calls == [False] * rollouts  # once a rollout, without gradients
    train = tmp_path / "run" / "scalars" / "train"
    for name in ("loss", "importance_weight"):
        rows = [r.split(",") for r in (train / f"{name}.csv").read_text().split()]
        assert [int(f) for f, _ in rows] == [32 * i for i in range(1, rollouts + 1)]
        assert all(torch.isfinite(torch.tensor(float(v))) for _, v in rows)


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_hard_target_update_counts_outside_the_cuda_graph(compile, monkeypatch):
    """A HardUpdate counts its steps in Python, which a replay does not run: the update
    step steps it after the graph, so its copies keep their interval; the learning rates
    and step counts of the compiled optimizer live on the parameters' device."""
    import tensordict.nn
    from tensordict import TensorDict

    from rl.modules import QValueActor
    from rl.objectives import DQNLoss, HardUpdate

    common = load("_common")
    cuda_graphs_on_cpu(monkeypatch)
    monkeypatch.setattr(tensordict.nn, "CudaGraphModule", _NoPythonAtReplay)
    torch.manual_seed(0)
    actor = QValueActor(torch.nn.Linear(3, 2), in_keys=["observation"], action_space="one-hot")
    loss = DQNLoss(actor, action_space="one-hot", delay_value=True)
    hard = HardUpdate(loss, value_network_update_interval=5)
    copies = []
    monkeypatch.setattr(hard, "_copy", lambda: copies.append(hard.counter))
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    n = 8
    batch = TensorDict(
        observation=torch.randn(n, 3),
        action=torch.nn.functional.one_hot(torch.randint(2, (n,)), 2),
        next=TensorDict(
            observation=torch.randn(n, 3),
            reward=torch.randn(n, 1),
            done=torch.zeros(n, 1, dtype=torch.bool),
            terminated=torch.zeros(n, 1, dtype=torch.bool),
            batch_size=[n],
        ),
        batch_size=[n],
    )

    def dqn_loss(sample):
        out = loss(sample)["loss"]
        return out, out

    step = common.UpdateStep(
        dqn_loss,
        optim,
        compile=ONE_GRAPH if compile else False,
        cudagraphs=True,
        target_update=hard,
        warmup=3,
    )
    for _ in range(12):  # 3 warm-ups, then 9 calls that run no Python of the step
        step(batch.clone())
    # counted at every call, replays included: copies at calls 5 and 10, then 2 counted
    assert len(copies) == 2 and hard.counter == 2
    group = optim.param_groups[0]
    if compile:
        p = group["params"][0]
        assert group["lr"].device == p.device and optim.state[p]["step"].device == p.device
