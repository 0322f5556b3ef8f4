"""examples/distributed/ppo_ray.py trains with Ray actors on a local Ray instance it starts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from rl.core import ExplorationType, set_exploration_type  # noqa: E402
from rl.core.ray_runtime import child_pids, processes_left  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str, folder: Path = EXAMPLES):
    for path in (EXAMPLES, folder):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(240)
def test_ppo_ray_learns_the_probe_action_and_stops_ray(tmp_path):
    assert not ray.is_initialized()
    ppo_ray = _load("ppo_ray", EXAMPLES / "distributed")
    env_id = "ObservationActionRewardProbe"
    cfg = ppo_ray.Config(
        env_id=env_id,
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
        exp_name="run",
        progress=False,
    )
    children_before = set(child_pids())
    out = ppo_ray.main(cfg)
    # every frame counted once, the loss finite at every update
    assert out["frames"] == 2048 and len(out["losses"]) == 8 and out["losses_finite"]
    rows = (tmp_path / "run" / "scalars" / "train" / "loss.csv").read_text().splitlines()
    assert [int(r.split(",")[0]) for r in rows] == [256 * i for i in range(1, 9)]
    # it learned: the deterministic action matches the observation's sign on fresh ones
    env = _load("_common").make_base_env(env_id, 8)
    env.set_seed(123)
    td = env.reset()
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        out["actor"](td)
    assert (td["action"].argmax(-1) == env.optimal_action(td["observation"])).all()
    assert out["eval_mean"] == 1.0
    # the example started Ray, so its collector's shutdown stopped it and its processes
    assert not ray.is_initialized()
    assert not processes_left([pid for pid in child_pids() if pid not in children_before])
