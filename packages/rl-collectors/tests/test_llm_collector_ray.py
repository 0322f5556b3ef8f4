"""rl.collectors.llm.RayLLMCollector on a local Ray instance: a tiny GPT-2 answering in a GSM8K
chat env inside the actor gives the batches a local LLMCollector gives, weights sent from here
reach it, a replay buffer here is extended, and no process is left behind."""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
ray = pytest.importorskip("ray")
llm_modules = pytest.importorskip("rl.modules.llm")  # the policy (rl-objectives[llm])

from rl.collectors.llm import LLMCollector, RayLLMCollector  # noqa: E402
from rl.core.ray_runtime import processes_left  # noqa: E402
from rl.envs.llm import GSM8KEnv  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "rl-envs" / "tests"))
from _tiny_llm import make_model, make_tokenizer  # noqa: E402

# the env class and factories below reach the actor by value (this file is not importable there)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(sys.modules["_tiny_llm"])

# a bound that catches a hang: the actor's worker imports torch, transformers and rl
pytestmark = pytest.mark.timeout(300)

ROWS = [{"question": f"{i}+{i}?", "answer": f"#### {2 * i}"} for i in range(6)]


class ShortGSM8KEnv(GSM8KEnv):
    SYSTEM_PROMPT = "Answer in <answer></answer>."  # short prompts keep the model small


def make_env():
    return ShortGSM8KEnv(dataset=ROWS, num_envs=2, shuffle=False)


def greedy_policy(model, tok):
    """Greedy decoding: the same weights give the same answers here and in the actor."""
    return llm_modules.TransformersWrapper(
        model,
        tokenizer=tok,
        pad_output=True,
        generate_kwargs={"max_new_tokens": 4, "do_sample": False},
    )


def failing_policy_factory():
    raise ValueError("no policy today")


def answers(batch):
    return [row["text", "response"] for row in batch.reshape(-1).unbind(0)]


class TestRayLLMCollector:
    def test_same_batches_as_a_local_collector_and_weights_sent_to_the_actor(self, shared_ray):
        tok = make_tokenizer()
        model = make_model(tok, n_positions=128)
        kwargs = {
            "dialog_turns_per_batch": 4,
            "total_dialog_turns": 8,
            "track_policy_version": True,
        }
        local = LLMCollector(make_env, policy=greedy_policy(model, tok), **kwargs)
        remote = RayLLMCollector(make_env, policy=greedy_policy(model, tok), **kwargs)
        assert remote.policy_version == 0
        first_local, first_remote = local.next(), remote.next()
        assert first_remote.shape == first_local.shape == (2, 2)
        assert answers(first_remote) == answers(first_local)
        torch.testing.assert_close(
            first_remote["collector", "traj_ids"], first_local["collector", "traj_ids"]
        )
        torch.testing.assert_close(first_remote["next", "reward"], first_local["next", "reward"])
        # new weights: a module here, sent to the actor; its answers change with them
        other = make_model(tok, n_positions=128, seed=1)
        local.update_policy_weights_(other.state_dict())
        remote.update_policy_weights_(other)
        assert remote.policy_version == local.policy_version == 1
        second_local, second_remote = local.next(), remote.next()
        assert answers(second_remote) == answers(second_local)
        assert answers(second_remote) != answers(first_remote)
        assert second_remote["policy_version"].unique().tolist() == [1]
        assert remote.stats()["frames"] == 8 and remote.stats()["batches"] == 2
        with pytest.raises(StopIteration):
            remote.next()
        assert len(remote) == 2 and remote.dialog_turns_per_batch == 4
        remote.shutdown()
        assert remote.closed and ray.is_initialized()  # Ray was started by the fixture
        assert not processes_left([remote.worker_pid])  # the actor's process is gone
        local.shutdown()

    def test_replay_buffer_here_and_collection_ahead(self, shared_ray):
        data = pytest.importorskip("rl.data")
        tok = make_tokenizer()
        buffer = data.ReplayBuffer(storage=data.LazyStackStorage(16))
        collector = RayLLMCollector(
            make_env,
            policy_factory=lambda: greedy_policy(make_model(tok, n_positions=128), tok),
            dialog_turns_per_batch=4,
            total_dialog_turns=12,
            replay_buffer=buffer,
            sync_iter=False,  # the actor collects the next batch while this one is stored
        )
        assert list(collector) == [None, None, None]
        assert len(buffer) == 12 and collector.stats()["frames"] == 12
        stored = buffer[:]
        assert stored.shape == (12,)  # flattened, as LLMCollector with a buffer
        assert sorted(stored["collector", "traj_ids"].tolist()) == list(range(12))  # one turn each
        with pytest.raises(RuntimeError, match="pass a RayReplayBuffer"):
            collector.start()
        collector.shutdown()

    def test_ray_replay_buffer_written_by_the_actor(self, shared_ray):
        data = pytest.importorskip("rl.data")
        tok = make_tokenizer()
        rb = data.RayReplayBuffer(
            replay_buffer_cls=data.ReplayBuffer,
            storage=functools.partial(data.LazyStackStorage, 16),
            remote_config={"num_cpus": 0},
        )
        collector = RayLLMCollector(
            make_env,
            policy=greedy_policy(make_model(tok, n_positions=128), tok),
            dialog_turns_per_batch=4,
            total_dialog_turns=12,
            replay_buffer=rb,
        )
        assert collector.next() is None and len(rb) == 4  # written in the actor
        collector.start()  # the rest, in the actor's background thread
        deadline = time.monotonic() + 120
        while collector.is_running() and time.monotonic() < deadline:
            time.sleep(0.2)
        collector.async_shutdown()
        assert len(rb) == 12 and collector.closed
        assert sorted(rb[:12]["collector", "traj_ids"].tolist()) == list(range(12))
        rb.shutdown()

    def test_errors(self, shared_ray):
        tok = make_tokenizer()
        policy = greedy_policy(make_model(tok, n_positions=128), tok)
        with pytest.raises(TypeError, match="exactly one of policy / policy_factory"):
            RayLLMCollector(
                make_env, policy=policy, policy_factory=lambda: policy, dialog_turns_per_batch=2
            )
        with pytest.raises(
            RuntimeError, match="(?s)RayLLMCollector actor failed during start-up.*no policy today"
        ):
            RayLLMCollector(
                make_env, policy_factory=failing_policy_factory, dialog_turns_per_batch=2
            )
