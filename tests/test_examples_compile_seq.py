"""``--compile`` of the sequence, model-based and trainer-driven examples.

Decision Transformer (offline and online), the ``Trainer``-driven DQN, Dreamer, MPC and
MCTS: each script's compiled pieces are counted with dynamo's counters on a tiny budget
(graphs, graph breaks, no recompilation once every piece has run once), and the first
compiled update's losses equal the eager ones on the same weights, batch and random
draws (``_compile_checks.watch``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import ONE_GRAPH, Case, load, run_case  # noqa: E402

TINY_DT = {
    "num_updates": 4,
    "batch_size": 4,
    "context": 4,
    "n_embd": 16,
    "n_layer": 1,
    "warmup_steps": 2,
    "eval_interval": 100,
}

TINY_DREAMER = {
    "hidden": 16,
    "rnn_hidden": 16,
    "num_categoricals": 4,
    "num_classes": 4,
    "state_dim": 8,
    "batch_size": 4,
    "batch_length": 8,
    "imagination_horizon": 3,
    "imagination_starts": 16,
    "total_frames": 600,
    "init_random_frames": 200,
    "train_every": 50,
    "eval_every": 10**6,
}

CASES = {
    # the update step; the warm-up fills the tensor learning rate in place
    "decision_transformer": Case("decision_transformer", TINY_DT, 4, 1, 1, True),
    # 3 offline updates, then 2 episodes x 2 updates: the same step, the same graph
    "decision_transformer-online": Case(
        "decision_transformer",
        {
            **TINY_DT,
            "num_updates": 3,
            "online": True,
            "online_episodes": 2,
            "online_updates": 2,
            "replay_size": 2,
        },
        7,
        1,
        1,
        True,
    ),
    # 3 batches (from the random frames' end on) x 4 optimization steps; graphs: the stepper's
    # update (with the hard target update's counter after it) and the policy
    "dqn_trainer": Case(
        "dqn_trainer",
        {
            "total_frames": 512,
            "init_random_frames": 256,
            "frames_per_batch": 128,
            "optim_steps_per_batch": 4,
            "batch_size": 32,
            "hidden": 32,
            "target_update_interval": 2,
            "eval_interval": 2,
            "eval_frames": 50,
            "save_interval": 10**9,
        },
        12,
        4,  # the policy compiles at the first batch it collects, after the first updates
        2,
    ),
    # 3 episodes of 100 agent steps, 2 updates after each from the first (random) one;
    # graphs: the whole update (world model, imagination, actor and critic, Adam, slow
    # critic) and the acting step of each mode
    "dreamer": Case("dreamer", TINY_DREAMER, 6, 2, 3),
    "dreamer-v1": Case("dreamer", {**TINY_DREAMER, "version": 1}, 6, 2, 3),
    # 2 learned episodes x 3 ensemble steps; graphs: the ensemble's step, then the
    # dynamics and the reward of the acting planner and of the evaluation's
    "mpc-learned": Case(
        "mpc",
        {
            "model": "learned",
            "max_steps": 10,
            "planning_horizon": 3,
            "optim_steps": 2,
            "num_candidates": 16,
            "top_k": 4,
            "total_frames": 20,
            "init_random_frames": 10,
            "updates_per_episode": 3,
        },
        6,
        3,
        5,
    ),
}


@pytest.mark.slow  # compilation: 10-60 s a graph on a 2-core CPU
@pytest.mark.parametrize("compile", [True, ONE_GRAPH], ids=["inductor", "dynamo-fullgraph"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_script_update_compiled_once_in_one_graph(
    name, compile, fresh_dynamo, monkeypatch, tmp_path, request
):
    """Each script's update step under ``--compile``: one graph, compiled at its first
    call and never again, no graph break, the first step's losses equal to the eager
    ones; ``ONE_GRAPH`` (dynamo alone, ``fullgraph``) raises on a break."""
    run_case(CASES[name], compile, monkeypatch, tmp_path, request)


def test_update_step_refuses_clip_params_it_does_not_update():
    common = load("_common")
    net, stray = torch.nn.Linear(3, 2), torch.nn.Parameter(torch.zeros(4, 5))
    optimizer = torch.optim.Adam(net.parameters())

    def loss_fn(x):
        loss = net(x).sum()
        return loss, loss

    match = r"clip_params\[1\] \(a parameter of shape \(4, 5\)\) is in none of the optimizers"
    with pytest.raises(ValueError, match=match):
        common.UpdateStep(loss_fn, optimizer, max_grad_norm=1.0, clip_params=[net.weight, stray])
    with pytest.raises(ValueError, match="clip_params or clip_each_group, not both"):
        common.UpdateStep(
            loss_fn, optimizer, max_grad_norm=1.0, clip_params=[net.weight], clip_each_group=True
        )


def test_update_step_clips_only_clip_params():
    """``UpdateStep(clip_params=...)``: only those gradients are clipped (together), the
    others step unclipped, as a plain loop does it; compiled (one graph) as eager."""
    common = load("_common")
    torch._dynamo.reset()
    counters.clear()

    def make():
        torch.manual_seed(0)
        net = torch.nn.Linear(3, 2)
        temperature = torch.nn.Parameter(torch.tensor(2.0))
        optimizers = [
            torch.optim.AdamW(net.parameters(), lr=0.1, weight_decay=0.01),
            torch.optim.RMSprop([temperature], lr=0.1),
        ]

        def loss_fn(x):
            loss = net(x).pow(2).mean() * 100 + temperature.pow(2) * 100
            return loss, {"loss": loss}

        return net, temperature, optimizers, loss_fn

    plain = make()
    steps, params = [], [plain[:2]]
    for compile in (False, ONE_GRAPH):
        net, temperature, optimizers, loss_fn = make()
        steps.append(
            common.UpdateStep(
                loss_fn,
                optimizers,
                max_grad_norm=0.01,
                clip_params=list(net.parameters()),
                compile=compile,
            )
        )
        params.append((net, temperature))
    for _ in range(3):
        x = torch.randn(8, 3)
        # the plain loop: only the network's gradients clipped, RMSprop's (whose step
        # scales with the gradient's size over its running mean) unclipped
        net, temperature, optimizers, loss_fn = plain
        loss = loss_fn(x)[0]
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.01)
        for optimizer in optimizers:
            optimizer.step()
        for step in steps:
            torch.testing.assert_close(step(x)["loss"], loss.detach(), rtol=1e-5, atol=1e-5)
    for net, temperature in params[1:]:
        for p, q in zip(net.parameters(), params[0][0].parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(temperature, params[0][1], rtol=1e-5, atol=1e-6)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]


@pytest.mark.slow  # compilation: 10-60 s a graph on a 2-core CPU
@pytest.mark.parametrize("compile", [True, ONE_GRAPH], ids=["inductor", "dynamo-fullgraph"])
def test_mpc_true_model_compiled_once(compile, fresh_dynamo, tmp_path):
    """``mpc.py --compile`` with the true dynamics: the model and the reward the planner
    calls (on the evaluation's batch of envs) compiled once each, no break; dynamo's
    graphs (``ONE_GRAPH``) plan exactly as eager."""
    mpc = load("mpc")
    tiny = {
        "max_steps": 10,
        "eval_episodes": 2,
        "planning_horizon": 3,
        "optim_steps": 2,
        "num_candidates": 16,
        "top_k": 4,
        "progress": False,
        "log_dir": str(tmp_path),
    }
    compiled = mpc.main(mpc.Config(**tiny, compile=compile))
    assert counters["stats"]["unique_graphs"] == 2
    assert not counters["graph_break"]  # (a recompilation raises: error_on_recompile)
    if compile is ONE_GRAPH:
        eager = mpc.main(mpc.Config(**tiny))
        assert compiled["eval_returns"] == eager["eval_returns"]


@pytest.mark.slow  # compilation: 10-60 s a graph on a 2-core CPU
@pytest.mark.parametrize("compile", [True, ONE_GRAPH], ids=["inductor", "dynamo-fullgraph"])
def test_mcts_selection_compiled_once(compile, fresh_dynamo, tmp_path):
    """``mcts.py --compile``: the selection rule compiled once for every number of games
    (dynamic shapes), no break, the same moves as eager on the same random draws."""
    mcts = load("mcts")
    from rl.modules import UCBScore

    cfg = {"num_games": 6, "num_simulations": 8, "progress": False, "log_dir": str(tmp_path)}
    compiled = mcts.main(mcts.Config(**cfg, compile=compile))
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]  # (a recompilation raises: error_on_recompile)
    # the compiled rule against the eager one on the same inputs and random draws
    score = UCBScore(c=1.0)
    eager_select, compiled_select = mcts.make_select(score), mcts.make_select(score, compile)
    torch.manual_seed(0)
    for games in (5, 3, 1):
        visits = torch.randint(0, 3, (games, 9)).float()
        wins = visits * torch.rand(games, 9)
        legal = torch.rand(games, 9) > 0.3
        legal[:, 0] = True
        rng = torch.get_rng_state()
        expected = eager_select(wins, visits, legal)
        torch.set_rng_state(rng)
        assert torch.equal(compiled_select(wins, visits, legal), expected)
    if compile is ONE_GRAPH:
        eager = mcts.main(mcts.Config(**cfg))
        assert compiled == {**eager, "seconds": compiled["seconds"]}
