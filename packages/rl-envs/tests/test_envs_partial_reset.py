"""Partial resets of an env that is not batch-locked, run over more dims than its own:
only the masked rows restart, whatever the env's ``_reset`` returns for the others."""

import pytest
import torch
from tensordict import TensorDict

from rl.core import Bounded, Composite, Unbounded
from rl.envs import EnvBase


class CountToLimit(EnvBase):
    """Counts up by one per step; done when the count reaches the row's ``limit``. Its
    ``_reset`` ignores the ``"_reset"`` mask (every row gets a zero count)."""

    def __init__(self):
        super().__init__(batch_size=[])
        self.__dict__["_batch_locked"] = False
        self.observation_spec = Composite(
            count=Unbounded((1,), dtype=torch.float32), limit=Unbounded((1,), dtype=torch.float32)
        )
        self.action_spec = Bounded(-1, 1, (1,))
        self.reward_spec = Unbounded((1,))

    def _reset(self, td):
        shape = td.shape if td is not None else self.batch_size
        limit = td.get("limit", None) if td is not None else None
        if limit is None:
            limit = torch.full((*shape, 1), 3.0)
        return TensorDict(count=torch.zeros(*shape, 1), limit=limit, batch_size=shape)

    def _step(self, td):
        count = td["count"] + 1
        done = count >= td["limit"]
        return TensorDict(
            count=count,
            limit=td["limit"],
            reward=torch.ones_like(count),
            done=done,
            terminated=done.clone(),
            batch_size=td.shape,
        )

    def _set_seed(self, seed):
        pass


def _expected_counts(limit: int, steps: int) -> list[float]:
    """The root counts of one row counting to ``limit`` and restarting, step by step."""
    out, count = [], 0
    for _ in range(steps):
        out.append(float(count))
        count = 0 if count + 1 >= limit else count + 1
    return out


def test_reset_keeps_the_unmasked_rows_of_extra_dims():
    env = CountToLimit()
    td = TensorDict(count=torch.tensor([[1.0], [4.0]]), limit=torch.tensor([[2.0], [5.0]]))
    td.batch_size = [2]
    td.set("_reset", torch.tensor([[True], [False]]))
    out = env.reset(td)
    assert out["count"].squeeze(-1).tolist() == [0.0, 4.0]
    assert "_reset" not in out.keys()


@pytest.mark.parametrize("limits", [(2, 5), (3, 1, 4)])
def test_rollout_over_extra_dims_resets_only_done_rows(limits):
    env = CountToLimit()
    n = len(limits)
    td = env.reset(
        TensorDict(limit=torch.tensor(limits, dtype=torch.float32)[:, None], batch_size=[n])
    )
    out = env.rollout(9, break_when_any_done=False, tensordict=td, auto_reset=False)
    assert out.batch_size == torch.Size([n, 9])
    for row, limit in enumerate(limits):
        assert out["count"][row].squeeze(-1).tolist() == _expected_counts(limit, 9)
    done = out["next", "done"].squeeze(-1)
    assert torch.equal(done, out["next", "count"].squeeze(-1) >= out["limit"].squeeze(-1))
