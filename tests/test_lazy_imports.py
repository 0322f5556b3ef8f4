"""What ``import rl.*`` leaves out until it is used: optional back-ends and the modules of
names that load on first use, and the back-ends that ``import rl.core`` alone leaves out.
One child interpreter checks them all (each check on its own would cost an interpreter
start with torch, 7-10 s here)."""

import subprocess
import sys

CODE = """
import sys

# ``import rl.core`` (its trainer, loggers and plot module) loads no optional back-end
# beyond what torch itself imports (checked first, before the other packages import)
import numpy, tensordict, torch
before = set(sys.modules)
import rl.core, rl.core.loggers, rl.core.plot, rl.core.trainers
BACKENDS = {"tqdm", "tensorboard", "wandb", "mlflow", "matplotlib", "av"}
new = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in BACKENDS)
assert not new, f"imported by import rl.core: {new}"

# rl.core alone: the trainer helpers (which build rl-envs, rl-data, rl-collectors and
# rl-objectives objects) and those packages stay out
loaded = [
    name
    for name in ("rl.core.trainers.helpers", "rl.envs", "rl.data", "rl.collectors", "rl.modules")
    if name in sys.modules
]
assert not loaded, f"imported by import rl.core: {loaded}"
import rl.core.trainers.helpers
assert rl.core.make_dqn_actor is rl.core.trainers.helpers.make_dqn_actor
loaded = [name for name in ("rl.envs", "rl.data", "rl.collectors", "rl.modules") if name in sys.modules]
assert not loaded, f"imported by import rl.core.trainers.helpers: {loaded}"

import rl.envs, rl.data, rl.objectives, rl.collectors

NOT_LOADED = [
    # optional back-ends (extras), imported where used
    "mujoco", "ray", "h5py", "transformers", "envpool", "dm_control", "vmas", "pettingzoo",
    "wandb", "mlflow", "tensorboard", "pyspiel", "mo_gymnasium", "lbforaging", "minari", "av",
    "jax", "jumanji", "brax", "chess", "cairosvg",
    # rl modules whose names load on first use
    "rl.core.checkpoint", "rl.core.trainers.algorithms", "rl.data.llm", "rl.data.datasets",
    "rl.envs._native._mujoco", "rl.envs._native._trading", "rl.envs._native._chess",
]
loaded = [name for name in NOT_LOADED if name in sys.modules]
assert not loaded, f"imported by import rl.*: {loaded}"

# the lazy names resolve to their modules' objects, still without the back-ends
import rl.core.checkpoint, rl.core.trainers.algorithms, rl.data.llm, rl.envs._native._mujoco
for module, owner, names in (
    (rl.core, rl.core.checkpoint, rl.core._CHECKPOINT_NAMES),
    (rl.core, rl.core.trainers.algorithms, rl.core.trainers._ALGORITHM_NAMES),
    (rl.core.trainers, rl.core.trainers.algorithms, rl.core.trainers._ALGORITHM_NAMES),
    (rl.core, rl.core.trainers.helpers, rl.core.trainers._HELPER_NAMES),
    (rl.core.trainers, rl.core.trainers.helpers, rl.core.trainers._HELPER_NAMES),
    (rl.data, rl.data.llm, rl.data._LLM_NAMES),
    (rl.envs, rl.envs._native._mujoco, ["HopperEnv", "Walker2dEnv", "AntEnv", "HumanoidEnv"]),
):
    for name in names:
        assert getattr(module, name) is getattr(owner, name), (module.__name__, name)
assert set(rl.core._CHECKPOINT_NAMES) == set(rl.core.checkpoint.__all__) - {"CheckpointError"}
assert set(rl.core.trainers._ALGORITHM_NAMES) <= set(rl.core.trainers.algorithms.__all__)
assert set(rl.core.trainers._HELPER_NAMES) == set(rl.core.trainers.helpers.__all__)
from rl.data import RayReplayBuffer
from rl.data.replay_buffers import RayReplayBuffer as B
assert B is RayReplayBuffer
from rl.envs import FinancialRegimeEnv, LBForagingEnv, MOGymEnv, OpenSpielEnv
from rl.envs import BraxEnv, BraxWrapper, JumanjiEnv, JumanjiWrapper
import rl.envs.libs.gym, rl.envs.libs.lbforaging, rl.envs.libs.mo_gym, rl.envs.libs.openspiel
import rl.envs.libs.jumanji, rl.envs.libs.brax
assert rl.envs.libs.JumanjiEnv is JumanjiEnv and rl.envs.libs.BraxWrapper is BraxWrapper
import rl.envs.custom
assert rl.envs.custom.HopperEnv is rl.envs.HopperEnv
# ChessEnv's module loads on first use; python-chess only when an env is built
assert rl.envs.custom.ChessEnv is rl.envs.ChessEnv
assert "chess" not in sys.modules, "resolving ChessEnv imported python-chess"
# the offline datasets import minari only when a dataset is converted
import rl.data.datasets
for name in rl.data._DATASET_NAMES:
    assert getattr(rl.data, name) is getattr(rl.data.datasets, name), name
assert set(rl.data._DATASET_NAMES) == set(rl.data.datasets.__all__)
loaded = [
    name
    for name in (
        "ray", "mujoco", "pyspiel", "mo_gymnasium", "lbforaging", "pettingzoo", "vmas", "minari",
        "jax", "jumanji", "brax",
    )
    if name in sys.modules
]
assert not loaded, f"resolving the lazy names imported {loaded}"
print("ok")
"""


def test_import_rl_leaves_the_back_ends_and_lazy_modules_out():
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def test_unknown_names_raise_attribute_error():
    import pytest

    import rl.core
    import rl.core.trainers
    import rl.data
    import rl.envs

    for module in (rl.core, rl.core.trainers, rl.data, rl.envs):
        with pytest.raises(AttributeError, match="has no attribute 'NotAName'"):
            module.NotAName  # noqa: B018
