"""step_mdp's plain-TensorDict path gives what its generic path (the TensorDict API,
which also handles lazy stacks) gives: same keys, same tensors (shared, not copied), same
nested batch sizes, the input left as it was."""

from __future__ import annotations

import itertools

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from rl.envs import step_mdp
from rl.envs._utils import _finish, _key_set, _step_mdp_generic

GROUP_KEYS = dict(
    reward_keys=["reward", ("agents", "reward")],
    action_keys=[("agents", "action"), ("other", "action")],
)


def _generic(
    td,
    keep_other=True,
    exclude_reward=True,
    exclude_done=False,
    exclude_action=True,
    reward_keys="reward",
    done_keys="done",
    action_keys="action",
):
    nxt = td.get("next")
    excluded = _key_set(reward_keys) if exclude_reward else set()
    if exclude_done:
        excluded |= _key_set(done_keys)
    drop = excluded | {("_reset",)} if "_reset" in nxt.keys() else excluded
    root_excluded = excluded | _key_set(action_keys) if exclude_action else excluded
    out = _step_mdp_generic(td, nxt, keep_other, drop, root_excluded)
    return _finish(out, td, keep_other, exclude_action, reward_keys, done_keys, action_keys)


def _assert_same(a, b):
    assert type(a) is type(b) and a.batch_size == b.batch_size and a.device == b.device
    keys = set(a.keys(True, False))
    assert keys == set(b.keys(True, False))
    for key in keys:
        x, y = a.get(key), b.get(key)
        if isinstance(x, torch.Tensor):
            assert x is y, key  # the tensors are shared, never copied
        else:
            assert type(x) is type(y) and x.batch_size == y.batch_size, key


def _flat():
    b = [3]
    return TensorDict(
        obs=torch.zeros(3, 2),
        action=torch.ones(3, 1),
        done=torch.zeros(3, 1, dtype=torch.bool),
        hidden=torch.zeros(3, 4),
        next=TensorDict(
            obs=torch.ones(3, 2),
            reward=torch.ones(3, 1),
            done=torch.ones(3, 1, dtype=torch.bool),
            _reset=torch.ones(3, 1, dtype=torch.bool),
            batch_size=b,
        ),
        batch_size=b,
    )


def _grouped():
    def group(**entries):
        return TensorDict(entries, batch_size=[3, 2])

    return TensorDict(
        agents=group(obs=torch.zeros(3, 2, 5), action=torch.ones(3, 2, 1), _reset=torch.ones(3, 2)),
        # only at the root, with an excluded key inside: kept without it
        other=group(action=torch.zeros(3, 2, 1), memory=torch.zeros(3, 2, 7)),
        clash=torch.zeros(3, 1),  # a tensor at the root, a tensordict in "next"
        clash2=TensorDict(x=torch.zeros(3, 1), batch_size=[3]),  # and the other way round
        done=torch.zeros(3, 1, dtype=torch.bool),
        next=TensorDict(
            agents=group(obs=torch.ones(3, 2, 5), reward=torch.ones(3, 2, 1)),
            clash=TensorDict(y=torch.ones(3, 1), batch_size=[3]),
            clash2=torch.ones(3, 1),
            done=torch.ones(3, 1, dtype=torch.bool),
            reward=torch.ones(3, 1),
            batch_size=[3],
        ),
        batch_size=[3],
    )


OPTIONS = list(itertools.product([True, False], repeat=4))


class TestPlainPathMatchesGeneric:
    @pytest.mark.parametrize(
        ("make", "keys"),
        [(_flat, {}), (_grouped, {}), (_grouped, GROUP_KEYS)],
        ids=["flat", "grouped", "group-keys"],
    )
    @pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "".join(str(int(v)) for v in o))
    def test_same_result(self, make, keys, options):
        keep_other, exclude_reward, exclude_done, exclude_action = options
        td = make()
        before = {k: td.get(k) for k in td.keys(True, True)}
        kwargs = dict(
            keep_other=keep_other,
            exclude_reward=exclude_reward,
            exclude_done=exclude_done,
            exclude_action=exclude_action,
            **keys,
        )
        fast = step_mdp(td, **kwargs)
        _assert_same(fast, _generic(td, **kwargs))
        assert {k: td.get(k) for k in td.keys(True, True)} == before  # input untouched

    def test_values_of_the_grouped_case(self):
        td = _grouped()
        out = step_mdp(td, **GROUP_KEYS)
        assert sorted(map(str, out.keys(True, True))) == sorted(
            map(
                str,
                [
                    ("agents", "obs"),  # the root's ("agents", "_reset") is dropped
                    ("other", "memory"),
                    ("clash", "y"),
                    "clash2",
                    "done",
                ],
            )
        )
        assert out["agents"].batch_size == (3, 2) and out["other"].batch_size == (3, 2)
        assert out["agents", "obs"] is td["next", "agents", "obs"]
        assert out["other", "memory"] is td["other", "memory"]
        assert "action" not in td["next", "agents"].keys()  # "next" not modified

    def test_lazy_stacks_take_the_generic_path(self):
        def agent(n):
            return TensorDict(obs=torch.zeros(n), action=torch.zeros(1))

        root = TensorDict(
            agents=LazyStackedTensorDict(agent(2), agent(3), stack_dim=0), batch_size=[]
        )
        root["next"] = TensorDict(
            agents=LazyStackedTensorDict(agent(2), agent(3), stack_dim=0).exclude("action"),
            batch_size=[],
        )
        out = step_mdp(root, action_keys=[("agents", "action")])
        assert isinstance(out["agents"], LazyStackedTensorDict)
        assert [t["obs"].shape[0] for t in out["agents"].tensordicts] == [2, 3]
        assert all("action" not in t.keys() for t in out["agents"].tensordicts)
