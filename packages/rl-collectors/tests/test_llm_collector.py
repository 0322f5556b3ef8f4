"""rl.collectors.llm.LLMCollector: a scripted policy answering in a GSM8K chat env."""

from __future__ import annotations

import queue

import pytest
import torch

pytest.importorskip("transformers")

from tensordict import lazy_stack  # noqa: E402

from rl.collectors.llm import LLMCollector  # noqa: E402
from rl.data.llm import History  # noqa: E402
from rl.envs.llm import GSM8KEnv  # noqa: E402

ROWS = [{"question": f"{i}+{i}?", "answer": f"#### {2 * i}"} for i in range(6)]


class ScriptedPolicy:
    """Conversation slot 0 answers right at once; slot 1 never gives an <answer>."""

    def __call__(self, td):
        answers = [td["answer"][0].split("#### ")[1], None]
        contents = [f"<answer>{a}</answer>" if a else "hmm" for a in answers]
        turns = lazy_stack([History(role="assistant", content=c, batch_size=()) for c in contents])
        td["history"].full = td["history"].prompt.extend(turns.unsqueeze(-1))
        return td


def make_env():
    return GSM8KEnv(dataset=ROWS, num_envs=2, shuffle=False, max_steps=3)


class TestLLMCollector:
    def test_batches_of_turns(self):
        collector = LLMCollector(
            make_env(), policy=ScriptedPolicy(), dialog_turns_per_batch=4, total_dialog_turns=8
        )
        batches = list(collector)
        assert [tuple(b.shape) for b in batches] == [(2, 2), (2, 2)]
        first, second = batches
        # slot 0 answers each turn (a new conversation each time); slot 1 runs to max_steps=3
        assert first["collector", "traj_ids"].tolist() == [[0, 2], [1, 1]]
        assert second["collector", "traj_ids"].tolist() == [[3, 4], [1, 5]]
        assert first["next", "reward"].reshape(2, 2).tolist() == [[1.0, 1.0], [0.0, 0.0]]
        assert second["next", "done"].reshape(2, 2).tolist() == [[True, True], [True, False]]
        # slot 1 kept its conversation through slot 0's resets; slot 0 started afresh
        assert first[1, 1]["history"].prompt.role == ["system", "user", "assistant"]
        assert first[0, 1]["history"].prompt.role == ["system", "user"]
        assert first[0, 1]["history"].prompt[-1].content == "2+2?"  # rows 0, 1, then 2
        assert collector.stats()["frames"] == 8
        with pytest.raises(StopIteration):
            collector.next()

    def test_completed_trajectories(self):
        collector = LLMCollector(
            make_env(),
            policy=ScriptedPolicy(),
            yield_completed_trajectories=True,
            total_dialog_turns=6,
        )
        trajs = list(collector)
        assert [t.shape[0] for t in trajs] == [1, 1, 1, 3]
        long = trajs[-1]
        assert long["collector", "traj_ids"].tolist() == [1, 1, 1]
        assert long["next", "done"].reshape(-1).tolist() == [False, False, True]
        assert [len(h.role) for h in long["history"].prompt.unbind(0)] == [2, 3, 4]

    def test_only_last_steps_count_every_turn(self):
        collector = LLMCollector(
            make_env(), policy=ScriptedPolicy(), yield_only_last_steps=True, total_dialog_turns=6
        )
        trajs = list(collector)
        assert all(t.shape == (1,) for t in trajs) and len(trajs) == 4
        assert trajs[-1]["next", "step_count"].item() == 3  # the last turn of a 3-turn dialog
        assert collector.stats()["frames"] == 6

    def test_replay_buffer_queue_and_version(self):
        class ListBuffer:
            def __init__(self):
                self.data = []

            def extend(self, batch):
                self.data.append(batch)

        buffer = ListBuffer()
        collector = LLMCollector(
            make_env(),
            policy=ScriptedPolicy(),
            dialog_turns_per_batch=4,
            total_dialog_turns=4,
            replay_buffer=buffer,
            track_policy_version=True,
        )
        collector.increment_version()
        assert list(collector) == [None]
        assert buffer.data[0].shape == (4,)  # flattened for the buffer
        assert buffer.data[0]["policy_version"].tolist() == [1, 1, 1, 1]
        q = queue.Queue()
        collector = LLMCollector(
            make_env(), policy=ScriptedPolicy(), dialog_turns_per_batch=2, queue=q
        )
        assert collector.next() is None and q.get().shape == (2,)

    def test_errors(self):
        policy = ScriptedPolicy()
        with pytest.raises(TypeError, match="exactly one of policy / policy_factory"):
            LLMCollector(
                make_env(), policy=policy, policy_factory=lambda: policy, dialog_turns_per_batch=1
            )
        with pytest.raises(TypeError, match="dialog_turns_per_batch is required"):
            LLMCollector(make_env(), policy=policy)
        with pytest.raises(TypeError, match="requires yield_completed_trajectories"):
            LLMCollector(
                make_env(),
                policy=policy,
                yield_only_last_steps=True,
                yield_completed_trajectories=False,
            )
        with pytest.raises(NotImplementedError, match="async_envs"):
            LLMCollector(make_env(), policy=policy, dialog_turns_per_batch=1, async_envs=True)
        with pytest.raises(RuntimeError, match="a queue or a replay_buffer"):
            LLMCollector(
                make_env(),
                policy=policy,
                dialog_turns_per_batch=1,
                queue=queue.Queue(),
                replay_buffer=[],
            )


def test_policy_factory_and_env_factory():
    collector = LLMCollector(
        make_env, policy_factory=ScriptedPolicy, dialog_turns_per_batch=2, total_dialog_turns=2
    )
    (batch,) = list(collector)
    assert batch.shape == (2, 1)
    torch.testing.assert_close(batch["next", "reward"].reshape(-1), torch.tensor([1.0, 0.0]))
    collector.shutdown()


class TestLLMCollectorWeights:
    """update_policy_weights_: the trainer's weights reach the model the collector samples with."""

    def policy_with_model(self):
        policy = ScriptedPolicy()
        policy.model = torch.nn.Linear(2, 1)
        return policy

    def test_weights_copied_into_the_model(self):
        policy = self.policy_with_model()
        collector = LLMCollector(
            make_env(), policy=policy, dialog_turns_per_batch=2, track_policy_version=True
        )
        trained = torch.nn.Linear(2, 1)
        collector.update_policy_weights_(trained)
        torch.testing.assert_close(policy.model.weight, trained.weight)
        assert policy.model.weight is not trained.weight  # copied, not shared
        weights = {"weight": torch.full((1, 2), 3.0), "bias": torch.zeros(1)}
        collector.update_policy_weights_(policy_weights=weights)  # TorchRL's older keyword
        assert policy.model.weight.tolist() == [[3.0, 3.0]]
        collector.update_policy_weights_()  # nothing given, no updater: only the version
        assert policy.model.weight.tolist() == [[3.0, 3.0]]
        assert collector.policy_version == 3
        assert collector.next()["policy_version"].unique().tolist() == [3]
        with pytest.raises(KeyError, match="'layer.weight', which the collector's model"):
            collector.update_policy_weights_({"layer.weight": torch.zeros(1, 2)})

    def test_through_a_weight_updater(self):
        from tensordict import TensorDict

        from rl.collectors import VanillaWeightUpdater

        policy = self.policy_with_model()
        trained = torch.nn.Linear(2, 1)
        collector = LLMCollector(
            make_env(),
            policy=policy,
            dialog_turns_per_batch=2,
            weight_updater=VanillaWeightUpdater(
                weight_getter=lambda: TensorDict.from_module(trained).data,
                policy_weights=TensorDict.from_module(policy.model).data,
            ),
        )
        with torch.no_grad():
            trained.weight.fill_(-2.0)
        collector.update_policy_weights_()  # the updater reads the trained weights itself
        assert policy.model.weight.tolist() == [[-2.0, -2.0]]
        torch.testing.assert_close(policy.model.bias, trained.bias)
