"""MultiStepActorWrapper: which action of the cached chunk is played, and when the actor runs."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.modules import MultiStepActorWrapper


def _chunk_actor(n_steps, calls, out_key="action"):
    """Chunks ``call + k / 10`` for k in [0, n_steps): call number and step are readable."""

    def make(obs):
        calls.append(obs.shape[0])
        base = torch.full((obs.shape[0], n_steps, 1), float(len(calls)))
        return base + torch.arange(n_steps).view(1, n_steps, 1) / 10

    return TensorDictModule(make, in_keys=["observation"], out_keys=[out_key])


def _data(batch=2, init=True):
    return TensorDict(
        observation=torch.zeros(batch, 1),
        is_init=torch.full((batch, 1), init),
        batch_size=[batch],
    )


def _play(actor, td, steps, init_key="is_init"):
    played = []
    for _ in range(steps):
        td = actor(td)
        played.append(round(td["action"][0, 0].item(), 1))
        td[init_key] = torch.zeros_like(td[init_key])
    return played, td


class TestMultiStepActorWrapper:
    @pytest.mark.parametrize("replan_interval", [None, 1, 2, 3])
    def test_cadence_matches_a_plain_loop(self, replan_interval):
        calls = []
        actor = MultiStepActorWrapper(
            _chunk_actor(3, calls), n_steps=3, replan_interval=replan_interval
        )
        played, td = _play(actor, _data(), 7)
        every = replan_interval or 3
        expected = [round(step // every + 1 + (step % every) / 10, 1) for step in range(7)]
        assert played == expected
        assert len(calls) == -(-7 // every)
        assert td["action_orig"].shape == (2, 3, 1)
        assert td["counter"].dtype == torch.int32

    def test_partial_reset_replans_only_the_reset_element(self):
        calls = []
        actor = MultiStepActorWrapper(_chunk_actor(3, calls), n_steps=3)
        td = actor(_data())
        td["is_init"] = torch.tensor([[True], [False]])
        td = actor(td)
        assert calls == [2, 1]  # the second call saw one element
        torch.testing.assert_close(td["action"], torch.tensor([[2.0], [1.1]]))
        torch.testing.assert_close(td["counter"], torch.tensor([[1], [2]], dtype=torch.int32))

    def test_chunk_key_feeds_the_action_key(self):
        calls = []
        actor = MultiStepActorWrapper(_chunk_actor(4, calls, ("vla_action", "chunk")), n_steps=4)
        assert actor.action_keys == ["action"]
        assert actor.out_keys == [("vla_action", "chunk"), "action", "counter"]
        played, td = _play(actor, _data(), 5)
        assert played == [1.0, 1.1, 1.2, 1.3, 2.0]
        assert "action_orig" not in td.keys()

    def test_custom_keys_and_nested_init_key(self):
        calls = []
        actor = MultiStepActorWrapper(
            _chunk_actor(2, calls, "plan_chunk"),
            n_steps=2,
            init_key=("agent", "is_init"),
            keep_dim=True,
        )
        assert actor.action_keys == ["plan"] and actor.counter_key == ("agent", "counter")
        td = TensorDict(
            observation=torch.zeros(2, 1),
            agent=TensorDict(is_init=torch.ones(2, 1, dtype=torch.bool), batch_size=[2]),
            batch_size=[2],
        )
        td = actor(td)
        assert td["plan"].shape == (2, 1, 1)

    def test_unknown_length_wraps_around(self):
        calls = []
        actor = MultiStepActorWrapper(_chunk_actor(2, calls))
        played, _ = _play(actor, _data(), 5)
        assert played == [1.0, 1.1, 1.0, 1.1, 1.0] and len(calls) == 1

    def test_errors(self):
        calls = []
        base = _chunk_actor(3, calls)
        with pytest.raises(ValueError, match="Only a single init_key"):
            MultiStepActorWrapper(base, init_key=["a"])
        with pytest.raises(ValueError, match=r"replan_interval must be in \[1, n_steps=3\], got 4"):
            MultiStepActorWrapper(base, n_steps=3, replan_interval=4)
        with pytest.raises(KeyError, match="No init key was passed"):
            MultiStepActorWrapper(base, n_steps=3)(_data().exclude("is_init"))
        with pytest.raises(RuntimeError, match="partial is_init"):
            MultiStepActorWrapper(base, n_steps=3)(_data(init=False))
        with pytest.raises(RuntimeError, match="doesn't match the n_steps argument"):
            MultiStepActorWrapper(base, n_steps=4)(_data())
        with pytest.raises(RuntimeError, match="chunk length"):
            MultiStepActorWrapper(base, replan_interval=4)(_data())
