"""IPPO on a VMAS scenario: ``mappo.py`` with a decentralised critic.

de Witt et al. 2020, "Is Independent Learning All You Need in the StarCraft Multi-Agent
Challenge?", https://arxiv.org/abs/2011.09533. Each agent's critic reads only its own
observation (``MultiAgentMLP(centralized=False)``); everything else is ``mappo.py``
(TorchRL runs both from one script, ``mappo_ippo.py``, switched by ``centralised_critic``).

    uv run examples/multiagent/ippo.py                      # navigation, 3 agents
    uv run examples/multiagent/ippo.py --no-share-params    # one actor and critic per agent
"""

from __future__ import annotations

import sys
from pathlib import Path

import tyro

sys.path.insert(0, str(Path(__file__).parent))
from mappo import Config, main  # noqa: E402

if __name__ == "__main__":
    main(tyro.cli(Config, default=Config(centralised_critic=False), description=__doc__))
