"""IDDPG on a VMAS scenario: ``maddpg.py`` with a decentralised critic.

Each agent's critic ``Q(o_i, a_i)`` reads only its own observation and action
(``MultiAgentMLP(centralized=False)``), so each agent learns as an independent DDPG
learner; everything else is ``maddpg.py`` (TorchRL runs both from one script,
``maddpg_iddpg.py``, switched by ``centralised_critic``).

    uv run --group multiagent examples/multiagent/iddpg.py                    # navigation, 3 agents
    uv run --group multiagent examples/multiagent/iddpg.py --no-share-params  # one actor and critic per agent
    uv run --group multiagent examples/multiagent/iddpg.py --device cuda --cudagraphs  # on a GPU
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _marl_common import preset_cli  # noqa: E402
from maddpg import main, presets  # noqa: E402

#: maddpg.py's presets with a decentralised critic
PRESETS = presets(centralised_critic=False)

if __name__ == "__main__":
    main(preset_cli(PRESETS, "navigation", __doc__))
