"""Tree-search scores: how MCTS ranks the children of a node."""

from ._scores import EXP3Score, MCTSScore, MCTSScores, PUCTScore, UCB1TunedScore, UCBScore

__all__ = ["EXP3Score", "MCTSScore", "MCTSScores", "PUCTScore", "UCB1TunedScore", "UCBScore"]
