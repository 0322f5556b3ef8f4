"""Checks every test of the workspace shares: a test may not leave process-wide state
behind that changes what later tests in the same worker compute."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def _no_leaked_exploration_type():
    """tensordict's interaction type (rl's exploration type) is process-wide: one left
    set by a test (or by a thread it started) makes every later probabilistic module in
    that worker sample otherwise. Fails the test that left it, and clears it."""
    yield
    nn = sys.modules.get("tensordict.nn")
    if nn is None:
        return
    leaked = nn.interaction_type()
    if leaked is not None:
        nn.set_interaction_type(None).__enter__()  # cleared: the next test starts unset
        pytest.fail(
            f"the test left the exploration type set to {leaked} outside any "
            "set_exploration_type block (a block that never ended, or one ended out of "
            "order by another thread)"
        )
