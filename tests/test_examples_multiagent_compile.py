"""``--compile`` of the multi-agent scripts (mappo, ippo, maddpg, iddpg, masac, qmix).

Each script's update step (``_common.UpdateStep``) compiles to one graph, compiled at
its first call and never again, with no graph break, and its first compiled step's
losses equal the eager ones on the same weights and batch (the machinery of
``_compile_checks``, run here on the multi-agent sign probe). The collector's
policy (a ``MultiAgentMLP`` behind group keys) and MAPPO's advantage compile once each.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _compile_checks import EXAMPLES, ONE_GRAPH, Case, check, load_path, watch  # noqa: E402


def _load(name: str):
    """``examples/multiagent/<name>.py`` as the module ``name`` (``from mappo import ...``
    finds it), loaded once."""
    if name in sys.modules:
        return sys.modules[name]
    return load_path(name, EXAMPLES / "multiagent" / f"{name}.py")


PROBE = {"scenario": "probe", "n_agents": 2, "max_steps": 4, "hidden": 16, "eval_episodes": 2}
#: 3 batches of 8 envs x 4 steps, 2 minibatches of 16 each: 6 update steps
ON_POLICY = {**PROBE, "num_envs": 8, "total_frames": 96, "update_epochs": 1, "minibatch_size": 16}
#: 3 batches of 8 envs x 2 steps, 3 updates of 8 transitions after each: 9 update steps
OFF_POLICY = {
    **PROBE,
    "num_envs": 8,
    "collect_steps": 2,
    "total_frames": 48,
    "updates_per_batch": 3,
    "batch_size": 8,
}
#: 3 batches of 8 envs x 4 steps, 3 updates of 8 transitions after each: 9 update steps
QMIX = {**PROBE, "num_envs": 8, "total_frames": 96, "updates_per_batch": 3, "batch_size": 8}
#: each script on its navigation preset (ippo / iddpg: a decentralised critic), made tiny
CASES = {
    "mappo": Case("mappo", ON_POLICY, 6, 2, 3, steps_in="ppo"),
    "mappo-unshared": Case("mappo", {**ON_POLICY, "share_params": False}, 6, 2, 3, steps_in="ppo"),
    "ippo": Case("ippo", ON_POLICY, 6, 2, 3, steps_in="ppo"),
    "maddpg": Case("maddpg", OFF_POLICY, 9, 3, 2, steps_in="_marl_common"),
    "iddpg": Case("iddpg", OFF_POLICY, 9, 3, 2, steps_in="_marl_common"),
    "masac": Case("masac", OFF_POLICY, 9, 3, 2, steps_in="_marl_common"),
    "qmix": Case("qmix", QMIX, 9, 3, 2, steps_in="qmix"),
    "vdn": Case("qmix", {**QMIX, "mixer": "vdn"}, 9, 3, 2, steps_in="qmix"),
}


@pytest.mark.slow  # compilation: 10-60 s a graph on a 2-core CPU
@pytest.mark.parametrize("compile", [True, ONE_GRAPH], ids=["inductor", "dynamo-fullgraph"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_multiagent_update_compiled_once_in_one_graph(
    name, compile, fresh_dynamo, monkeypatch, tmp_path
):
    """The script's update step, policy (and advantage) under ``--compile``: one graph
    each, compiled at their first call and never again, no graph break, the first
    step's losses equal to the eager ones."""
    case = CASES[name]
    module = _load(case.script)
    seen = watch(sys.modules[case.steps_in], monkeypatch)
    preset = module.PRESETS["navigation"][1]
    cfg = dataclasses.replace(
        preset, **case.config, compile=compile, progress=False, log_dir=str(tmp_path)
    )
    torch.manual_seed(0)
    module.main(cfg)
    if case.script != "qmix":  # ippo / iddpg: their presets' decentralised critic
        assert cfg.centralised_critic == (name not in ("ippo", "iddpg"))
    assert len(seen) == case.calls
    check(seen, first=case.first, graphs=case.graphs)
