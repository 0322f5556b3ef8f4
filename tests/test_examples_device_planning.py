"""``--device`` of the model-based and planning example scripts (dreamer, mpc, mcts,
rollout), on a device other than the CPU.

As in ``tests/test_examples_device_offpolicy.py``, this machine has no GPU, so the
scripts' pieces are built on PyTorch's ``meta`` device, where an operation that meets a
non-scalar CPU tensor fails as it does on CUDA, and everything they own and make must be
there. A meta tensor has no values, so what reads one on the host cannot run there:
rl's rollout loop reads each step's done flags (the candidates of mpc's planners; not
dreamer's imagination, whose model env declares a constant ``any_done``), mcts's search
branches on its trees, a native env draws from a ``torch.Generator`` (which has no meta
kind) and ``StepCounter`` checks its spec's bounds. Those parts are checked where they
can be (one imagined or expanded step) and run whole by the ``gpu`` tests at the end, on
a GPU.
"""

from __future__ import annotations

import math
import sys
from itertools import chain
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import ONE_GRAPH, load  # noqa: E402
from _device_checks import META, assert_all_on_meta, cuda  # noqa: E402

# dreamer's tiny model (tests/test_examples_dreamer.py's)
TINY_DREAMER = dict(
    hidden=16,
    rnn_hidden=16,
    num_categoricals=4,
    num_classes=4,
    state_dim=8,
    depth=4,
    batch_size=4,
    batch_length=8,
    imagination_horizon=3,
    imagination_starts=16,
    progress=False,
)


def off_meta(*modules) -> list[str]:
    """The parameters and buffers of ``modules`` that are not on ``meta``."""
    named = chain(*(chain(m.named_parameters(), m.named_buffers()) for m in modules))
    return [name for name, t in named if t.device != META]


@pytest.fixture(scope="module")
def dreamer():
    return load("dreamer")


def replayed_sequences(dreamer, cfg) -> TensorDict:
    """A batch of ``cfg``'s replayed sequences ``[B * T]`` as dreamer's loop samples it,
    from one random episode played on the CPU."""
    cpu_cfg = dreamer.Config(**{**vars(cfg), "device": "cpu"})
    env = dreamer.make_env(cpu_cfg)
    env.set_seed(0)
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(1_000),
        sampler=SliceSampler(slice_len=cfg.batch_length, end_key=("next", "done")),
        batch_size=cfg.batch_size * cfg.batch_length,
    )
    buffer.extend(dreamer.play(env, dreamer.make_agent(cpu_cfg, env), "random"))
    return buffer.sample()


def dreamer_learner(dreamer, cfg):
    env = dreamer.make_env(cfg)
    agent = dreamer.make_agent(cfg, env)
    optimizers = dreamer.make_optimizers(cfg, agent)
    losses = torch.nn.ModuleList([agent[k] for k in ("model_loss", "actor_loss", "value_loss")])
    return env, agent, optimizers, losses


# ---------------------------------------------------------------- dreamer.py


@pytest.mark.parametrize("version", [3, 1])
def test_dreamer_agent_is_built_on_the_device(dreamer, version):
    """The networks (initialised on the CPU), the three losses' own tensors, the slow
    critic and the imagination env are on the device; the env's observations are moved
    there."""
    cfg = dreamer.Config(version=version, device="meta", **TINY_DREAMER)
    env, agent, _, losses = dreamer_learner(dreamer, cfg)
    assert not off_meta(losses, agent["world_model"], agent["actor"], agent["value"])
    assert agent["actor_loss"].model_based_env.device == META
    assert env.reset()["observation"].device == META


def test_dreamer_acts_and_models_on_the_device(dreamer):
    """DreamerV3's acting step (belief, posterior, action) and its world-model loss on a
    replayed batch run on the device. (Dreamer v1's RSSM prior enters
    ``torch.amp.autocast(device_type=...)``, which has no meta kind: it runs on a GPU.)"""
    cfg = dreamer.Config(device="meta", **TINY_DREAMER)
    env, agent, _, _ = dreamer_learner(dreamer, cfg)
    act = dreamer.make_act(agent, compile=False)["explore"]
    state = torch.zeros(agent["stoch"], device=META)
    belief = torch.zeros(cfg.rnn_hidden, device=META)
    action = torch.zeros(env.action_spec.shape, device=META)
    out = act(state, belief, action, env.reset()["observation"])
    assert [t.device for t in out] == [META] * 3
    assert out[2].shape == env.action_spec.shape

    batch = replayed_sequences(dreamer, cfg).to(META)
    batch = batch.reshape(cfg.batch_size, cfg.batch_length)
    batch["state"] = torch.zeros(*batch.shape, agent["stoch"], device=META)
    batch["belief"] = torch.zeros(*batch.shape, cfg.rnn_hidden, device=META)
    losses, world = agent["model_loss"](batch)
    assert all(v.device == META for v in losses.values()) and len(losses.keys()) == 4
    assert world["next", "state"].device == META
    losses["loss_model_reco"].sum().backward()
    grads = [p.grad for p in agent["world_model"].parameters() if p.grad is not None]
    assert grads and all(g.device == META for g in grads)


def test_dreamer_eager_update_runs_on_the_device(dreamer):
    """DreamerV3's eager update on the device: the imagination's rollout asks the model
    env's declared constant ``any_done`` instead of reading each step's done flags (no
    host read, which meta cannot do and a CUDA graph capture refuses)."""
    cfg = dreamer.Config(device="meta", **TINY_DREAMER)
    _, agent, optimizers, losses = dreamer_learner(dreamer, cfg)
    step = dreamer.make_update(agent, optimizers, cfg)
    step(replayed_sequences(dreamer, cfg).to(META))


@pytest.mark.slow  # dynamo traces the whole update: 10-35 s on a 2-core CPU
def test_dreamer_compiled_update_lives_on_the_device(dreamer):
    """DreamerV3's whole update (world model, imagination, actor, critic, Adam, slow
    critic) compiled as one graph, twice on a replayed batch: the losses' tensors, the
    optimizers' states and the logs stay on the device."""
    tiny = {**TINY_DREAMER, "batch_size": 2, "batch_length": 4, "imagination_horizon": 2}
    cfg = dreamer.Config(device="meta", **{**tiny, "imagination_starts": 4})
    cfg.compile = ONE_GRAPH  # dynamo alone, fullgraph: no eager code in between
    _, agent, optimizers, losses = dreamer_learner(dreamer, cfg)
    step = dreamer.make_update(agent, optimizers, cfg)
    batch = replayed_sequences(dreamer, cfg).to(META)
    for _ in range(2):
        logs = step(batch)
    assert {"loss_model", "loss_actor", "loss_value"} <= set(logs)
    assert_all_on_meta(losses, optimizers.values(), logs)


def test_dreamer_eager_update_in_a_cuda_graph(dreamer, monkeypatch, tmp_path):
    """``--cudagraphs`` without ``--compile``: the eager update (its imagination rollout
    reads no done flag on the host) in a CUDA graph, on CPU with ``StrictCudaGraphs``
    standing in for ``CudaGraphModule``: called as the real one requires, replayed after
    its warm-up calls, and the same losses as the run without it."""
    from _compile_checks import StrictCudaGraphs, cuda_graphs_on_cpu

    tiny = dict(
        **TINY_DREAMER,
        total_frames=600,
        init_random_frames=200,
        train_every=25,  # 12 updates: 10 warm-up calls, then replays
        eval_every=10**6,
        eval_episodes=1,
    )
    plain = dreamer.main(dreamer.Config(**tiny, log_dir=str(tmp_path / "plain")))
    cuda_graphs_on_cpu(monkeypatch)
    StrictCudaGraphs.made.clear()
    cfg = dreamer.Config(**tiny, cudagraphs=True, log_dir=str(tmp_path / "graphed"))
    graphed = dreamer.main(cfg)
    assert cfg.compile is False and graphed["updates"] == plain["updates"] == 12
    (graph,) = StrictCudaGraphs.made
    assert graph.calls == 12 and graph.replays == 2
    assert graphed["history"] == plain["history"]


# ---------------------------------------------------------------- mpc.py


@pytest.fixture(scope="module")
def mpc():
    return load("mpc")


def mpc_config(mpc, **kw):
    return mpc.Config(
        model="learned",
        ensemble_size=3,
        hidden=16,
        batch_size=8,
        max_steps=10,
        planning_horizon=3,
        optim_steps=2,
        num_candidates=16,
        top_k=4,
        **kw,
    )


def test_mpc_ensemble_learner_lives_on_the_device(mpc):
    """The ensemble (initialised on the CPU), its Adam state and its gradient step, on
    minibatches ``[E, M, in]`` as ``fit`` draws them, stay on the device."""
    cfg = mpc_config(mpc, device="meta")
    ensemble, optim, step = mpc.make_learner(cfg, 3, 1)
    x = torch.randn(cfg.ensemble_size, cfg.batch_size, 4).to(META)
    y = torch.randn(cfg.ensemble_size, cfg.batch_size, 3).to(META)
    for _ in range(2):
        loss = step(x, y)
    assert_all_on_meta(ensemble, [optim], loss)
    prediction = ensemble(torch.zeros(5, 3, device=META), torch.zeros(5, 1, device=META))
    assert prediction.device == META and prediction.shape == (5, 3)


def test_mpc_plans_in_a_model_on_the_device(mpc):
    """The env's observations are moved to the device, where the planner's model env
    lives, and an imagined step (the ensemble's prediction and the known reward) of the
    planner's candidates runs there. (A whole plan reads each imagined step's done flags
    on the host: rl's eager rollout loop; it runs on a GPU.)"""
    cfg = mpc_config(mpc, device="meta")
    env = mpc.make_env(cfg)
    ensemble, _, _ = mpc.make_learner(cfg, 3, 1)
    for planner in ("cem", "mppi"):
        cfg.planner = planner
        plan = mpc.make_planner(cfg, env, ensemble)
        assert plan.env.device == META
        start = env.reset().expand(cfg.num_candidates).clone()
        start["action"] = torch.zeros(cfg.num_candidates, 1, device=META)
        nxt = plan.env.step(start)["next"]
        assert nxt["observation"].device == META and nxt["reward"].device == META
        assert nxt["observation"].shape == (cfg.num_candidates, 3)


def test_mpc_true_model_simulates_where_the_states_are(mpc):
    """The true dynamics build their simulator on the device of the imagined states (on
    the CPU here: a native env's generator has no meta kind)."""
    model = mpc.TruePendulum()
    model(torch.tensor([[1.0, 0.0, 0.0]]), torch.zeros(1, 1))
    (sim,) = model.sims.values()
    assert sim.device == torch.device("cpu")


# ---------------------------------------------------------------- mcts.py


def test_mcts_trees_selection_and_expansion_live_on_the_device():
    """The games' env, the search trees, the selection rule and one expansion step (an
    env step and its winner) run on the device. (The search loop branches on its trees,
    host reads a GPU runs and meta cannot.)"""
    from rl.envs import TicTacToeEnv
    from rl.modules import UCBScore

    mcts = load("mcts")
    env = TicTacToeEnv(device=META)
    root = env.reset(TensorDict(batch_size=[4]))
    forest = mcts.Forest(root, max_nodes=5)
    tensors = [v for v in vars(forest).values() if torch.is_tensor(v)]
    tensors += list(forest.states.values())
    assert len(tensors) == 9 and all(t.device == META for t in tensors)
    node = torch.zeros(4, dtype=torch.long, device=META)
    rows = (forest.games, node)
    select = mcts.make_select(UCBScore(c=1.0))
    move = select(forest.wins[rows], forest.visits[rows], forest.states["mask"][rows])
    assert move.device == META and move.shape == (4,)
    root["action"] = move
    nxt = env.step(root)["next"]
    winner = mcts.winner_of(nxt, root["turn"].squeeze(-1).long())
    assert winner.device == META and winner.shape == (4,)


# ---------------------------------------------------------------- rollout.py


def test_rollout_moves_gym_outputs_to_the_policy_device():
    """Gymnasium's CartPole stays on the CPU and a ``DeviceCastTransform``, first of the
    transforms, moves its outputs to the device, where the (parameter-free) controller
    acts. (The step counter's spec checks its bounds on the host, and a native env's
    generator has no meta kind: the whole env runs on a GPU.)"""
    from rl.envs import DeviceCastTransform

    rollout = load("rollout")
    env = rollout.make_env(rollout.Config(device="meta"))
    assert isinstance(env.transform[0], DeviceCastTransform)
    assert env.transform[0].device == META and env.base_env.device in (None, torch.device("cpu"))
    cpu_env = rollout.make_env(rollout.Config())
    assert not any(isinstance(t, DeviceCastTransform) for t in cpu_env.transform)
    policy = rollout.make_policy(rollout.Config(device="meta"), cpu_env)
    obs = TensorDict(observation=torch.zeros(3, 4, device=META), batch_size=[3])
    action = policy(obs)["action"]
    assert action.device == META and action.shape == (3, 2)


def test_rollout_command_line_takes_a_device(monkeypatch):
    rollout = load("rollout")
    argv = ["rollout.py", "--native", "--num-envs", "4", "--device", "cuda:1"]
    monkeypatch.setattr(sys, "argv", argv)
    cfg = rollout.parse_args()
    assert (cfg.native, cfg.num_envs, cfg.device) == (True, 4, "cuda:1")


# ---------------------------------------------------------------- all four


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
@pytest.mark.parametrize("script", ["dreamer", "mpc", "mcts", "rollout"])
def test_a_cuda_device_this_machine_lacks_stops_the_script_at_the_start(script, tmp_path):
    module = load(script)
    extra = {} if script == "rollout" else {"progress": False, "log_dir": str(tmp_path)}
    with pytest.raises(RuntimeError, match="--device 'cuda': this machine has 0 CUDA"):
        module.main(module.Config(device="cuda", **extra))
    assert not list(tmp_path.iterdir())  # stopped before any logger was made


# ---------------------------------------------------------------- on a GPU
# These run where CUDA is (benchmarks/bench_gpu.py runs every file holding a ``gpu``
# test); here they are skipped. Each runs a script's main() with ``--device cuda
# --cudagraphs`` on a tiny budget and checks what the script's CPU tests check.


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("compile", [True, False], ids=["compiled", "eager"])
def test_dreamer_cudagraphs_on_the_gpu_learns_a_world_model(compile, tmp_path):
    """DreamerV3 with its update, compiled or eager, captured in a CUDA graph (past its 10
    warm-up calls): the world-model loss falls, the returns are Pendulum's (finite, <= 0)."""
    dreamer = load("dreamer")
    cfg = dreamer.Config(
        **TINY_DREAMER,
        model_lr=3e-3,
        total_frames=2_000,
        init_random_frames=200,
        train_every=10,
        eval_every=10**9,
        eval_episodes=1,
        log_dir=str(tmp_path),
        device="cuda",
        compile=compile,
        cudagraphs=True,
    )
    out = dreamer.main(cfg)
    assert out["frames"] == 2_000 and out["updates"] == 100
    assert len(out["eval_returns"]) == 1 and -2_000 < out["eval_returns"][0] <= 0
    assert {p.device.type for p in out["agent"]["world_model"].parameters()} == {"cuda"}
    losses = [h["loss_model"] for h in out["history"]]
    assert all(math.isfinite(v) for h in out["history"] for v in h.values())
    # one entry an episode, the first after 10 updates (a CPU run: 6.95 -> 4.45)
    assert sum(losses[-3:]) < 0.8 * sum(losses[:3]), losses


@pytest.mark.gpu
@cuda
def test_mpc_cudagraphs_on_the_gpu_learns_the_dynamics(tmp_path):
    """PETS-style MPC with the ensemble's gradient step captured in a CUDA graph: the
    learned model predicts the pendulum's next observations far better than no change."""
    from rl.envs import ActionScaling, GymEnv, TransformedEnv

    mpc = load("mpc")
    cfg = mpc.Config(
        model="learned",
        max_steps=200,
        total_frames=400,
        init_random_frames=200,
        updates_per_episode=150,
        eval_episodes=2,
        planning_horizon=5,
        optim_steps=2,
        num_candidates=32,
        top_k=4,
        lr=3e-3,
        progress=False,
        log_dir=str(tmp_path),
        device="cuda",
        cudagraphs=True,
    )
    out = mpc.main(cfg)
    assert out["frames"] == 400 and len(out["eval_returns"]) == 2
    assert all(-2_000 < r <= 0 for r in out["eval_returns"])
    ensemble = out["ensemble"]
    assert {p.device.type for p in ensemble.parameters()} == {"cuda"}
    env = TransformedEnv(GymEnv("Pendulum-v1"), ActionScaling())
    env.set_seed(7)
    data = env.rollout(100, break_when_any_done=False)
    with torch.no_grad():
        pred = ensemble(data["observation"].cuda(), data["action"].cuda()).cpu()
    error = (pred - data["next", "observation"]).square().mean()
    still = (data["observation"] - data["next", "observation"]).square().mean()
    assert error < 0.1 * still, (error, still)


@pytest.mark.gpu
@cuda
def test_mpc_true_model_on_the_gpu_pushes_the_pendulum_up():
    """CEM and MPPI in the true dynamics simulated on the GPU: tilted right and at rest,
    the planned torque pushes left (tests/test_examples_mpc.py's check)."""
    from rl.envs import ActionScaling, PendulumEnv, TransformedEnv

    mpc = load("mpc")
    for planner in ("cem", "mppi"):
        torch.manual_seed(0)
        cfg = mpc.Config(
            planner=planner, planning_horizon=10, optim_steps=3, num_candidates=64, top_k=8
        )
        env = TransformedEnv(PendulumEnv(device="cuda"), ActionScaling())
        plan = mpc.make_planner(cfg, env, mpc.TruePendulum())
        theta = torch.tensor(0.3)
        obs = torch.stack([theta.cos(), theta.sin(), torch.tensor(0.0)]).cuda()
        action = plan(TensorDict(observation=obs, device="cuda"))["action"]
        assert action.device.type == "cuda" and action.shape == (1,) and action.item() < 0


@pytest.mark.gpu
@cuda
def test_mcts_on_the_gpu_beats_the_random_player(tmp_path):
    """The batched search on the GPU (``--cudagraphs`` is refused: its batches change
    size) wins or draws nearly every game against the random player."""
    mcts = load("mcts")
    cfg = mcts.Config(
        num_games=20, num_simulations=100, progress=False, log_dir=str(tmp_path), device="cuda"
    )
    out = mcts.main(cfg)
    assert out["win_rate"] + out["draw_rate"] >= 0.9, out


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("native", [False, True], ids=["gym", "native"])
def test_rollout_cudagraphs_on_the_gpu_balances_the_pole(native):
    """The controller captured in a CUDA graph on the GPU (gymnasium's outputs moved
    there, or the native env living there) balances the pole to the step limit."""
    rollout = load("rollout")
    cfg = rollout.Config(
        episodes=2, max_steps=100, native=native, num_envs=8, device="cuda", cudagraphs=True
    )
    returns = rollout.main(cfg)
    assert returns == [100.0] * (16 if native else 2)
