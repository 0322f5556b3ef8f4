"""IPPO on a VMAS scenario: ``mappo.py`` with a decentralised critic.

de Witt et al. 2020, "Is Independent Learning All You Need in the StarCraft Multi-Agent
Challenge?", https://arxiv.org/abs/2011.09533. Each agent's critic reads only its own
observation (``MultiAgentMLP(centralized=False)``); everything else is ``mappo.py``
(TorchRL runs both from one script, ``mappo_ippo.py``, switched by ``centralised_critic``).

    uv run --group multiagent examples/multiagent/ippo.py                    # navigation, 3 agents
    uv run --group multiagent examples/multiagent/ippo.py balance            # VMAS balance, 4 agents
    uv run --group multiagent examples/multiagent/ippo.py --no-share-params  # one actor and critic per agent
    uv run --group multiagent examples/multiagent/ippo.py --device cuda --cudagraphs  # on a GPU
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _marl_common import preset_cli  # noqa: E402
from mappo import main, presets  # noqa: E402

#: mappo.py's presets with a decentralised critic
PRESETS = presets(centralised_critic=False)

if __name__ == "__main__":
    main(preset_cli(PRESETS, "navigation", __doc__))
