"""Importing rl.envs and the rl.envs.libs modules imports no simulator back-end: each is
imported when one of its envs is built."""

from __future__ import annotations

import subprocess
import sys

BACKENDS = ["pyspiel", "mo_gymnasium", "lbforaging", "pettingzoo", "vmas", "dm_control"]


def test_importing_the_wrappers_imports_no_back_end():
    code = (
        "import sys, rl.envs, rl.envs.libs.gym, rl.envs.libs.openspiel, "
        "rl.envs.libs.mo_gym, rl.envs.libs.lbforaging\n"
        "from rl.envs import OpenSpielEnv, MOGymEnv, LBForagingEnv\n"
        f"print(sorted(m for m in {BACKENDS!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"
