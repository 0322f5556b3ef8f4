"""rl.modules.llm batching: RequestBatcher alone, and TransformersWrapper(batching=True)."""

from __future__ import annotations

import copy
import sys
import threading
import time
from concurrent.futures import CancelledError, ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from tensordict import TensorDict, lazy_stack  # noqa: E402

from rl.data.llm import ChatHistory, History, Text  # noqa: E402
from rl.modules.llm import TransformersWrapper  # noqa: E402
from rl.modules.llm._batching import RequestBatcher  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_llm import make_model, make_tokenizer  # noqa: E402

WAIT_S = 20.0  # a test waits this long for a thread at most: a hang fails, never blocks
CHATS = [
    [{"role": "user", "content": c}, {"role": "assistant", "content": a}]
    for c, a in (("hi", "yo"), ("abcd", "xyz"), ("q", "a"), ("hello!", "bye"))
]


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return make_model(tok)


class Recorder:
    """A batched function ``y = 2 x`` that records the size of each batch it runs."""

    def __init__(self, fail: bool = False) -> None:
        self.sizes: list[int] = []
        self.fail = fail

    def __call__(self, td):
        self.sizes.append(td.batch_size[0])
        if self.fail:
            raise ValueError("the model failed")
        return td.set("y", td["x"] * 2)


def rows(*xs: float) -> TensorDict:
    return TensorDict(x=torch.tensor(xs), batch_size=(len(xs),))


def in_threads(fn, args: list) -> list:
    """``fn(a)`` for each ``a``, each in its own thread, started together; the results."""
    barrier = threading.Barrier(len(args))

    def call(a):
        barrier.wait(timeout=WAIT_S)
        return fn(a)

    with ThreadPoolExecutor(len(args)) as pool:
        futures = [pool.submit(call, a) for a in args]
        return [f.result(timeout=WAIT_S) for f in futures]


def wait_for(predicate) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


class TestRequestBatcher:
    def test_min_batch_size_joins_the_threads_calls(self):
        run = Recorder()
        batcher = RequestBatcher(min_batch_size=4, max_batch_size=None, timeout=WAIT_S)
        outs = in_threads(lambda x: batcher.submit(run, rows(x)), [1.0, 2.0, 3.0, 4.0])
        assert run.sizes == [4]  # one call for the four callers
        for x, out in zip([1.0, 2.0, 3.0, 4.0], outs):
            assert out.batch_size == (1,)
            torch.testing.assert_close(out["y"], torch.tensor([2 * x]))

    def test_one_row_call_returns_its_row(self):
        run = Recorder()
        batcher = RequestBatcher(min_batch_size=1, max_batch_size=None, timeout=WAIT_S)
        out = batcher.submit(run, TensorDict(x=torch.tensor(3.0)))
        assert out.batch_size == () and out["y"] == 6.0
        assert run.sizes == [1]

    def test_max_batch_size_splits_a_call(self):
        run = Recorder()
        batcher = RequestBatcher(min_batch_size=1, max_batch_size=2, timeout=WAIT_S)
        out = batcher.submit(run, rows(1.0, 2.0, 3.0, 4.0, 5.0))
        assert run.sizes == [2, 2, 1]
        torch.testing.assert_close(out["y"], torch.tensor([2.0, 4.0, 6.0, 8.0, 10.0]))

    def test_timeout_runs_a_partial_batch(self):
        run = Recorder()
        batcher = RequestBatcher(min_batch_size=3, max_batch_size=None, timeout=0.05)
        out = batcher.submit(run, rows(1.0, 2.0))  # 2 rows < 3, nobody else comes
        assert run.sizes == [2]
        torch.testing.assert_close(out["y"], torch.tensor([2.0, 4.0]))
        # two callers, still short of 3 rows: both answered, in one or two calls
        outs = in_threads(lambda x: batcher.submit(run, rows(x)), [5.0, 6.0])
        assert [o["y"].item() for o in outs] == [10.0, 12.0]
        assert sum(run.sizes[1:]) == 2 and len(run.sizes[1:]) <= 2
        assert batcher.state()["queue_size"] == 0

    def test_rest_below_min_batch_size_waits_then_runs(self):
        run = Recorder()
        batcher = RequestBatcher(min_batch_size=2, max_batch_size=2, timeout=0.05)
        out = batcher.submit(run, rows(1.0, 2.0, 3.0))
        assert run.sizes == [2, 1]
        torch.testing.assert_close(out["y"], torch.tensor([2.0, 4.0, 6.0]))

    def test_error_reaches_every_caller(self):
        run = Recorder(fail=True)
        batcher = RequestBatcher(min_batch_size=2, max_batch_size=None, timeout=WAIT_S)

        def call(x):
            with pytest.raises(ValueError, match="the model failed"):
                batcher.submit(run, rows(x))
            return True

        assert in_threads(call, [1.0, 2.0]) == [True, True]
        assert run.sizes == [2]
        assert batcher.state()["queue_size"] == 0 and not batcher.state()["processing"]

    def test_starts_no_thread(self):
        before = threading.active_count()
        batcher = RequestBatcher(min_batch_size=2, max_batch_size=None, timeout=0.01)
        batcher.submit(Recorder(), rows(1.0))
        assert threading.active_count() == before

    def test_copy_starts_empty(self):
        batcher = RequestBatcher(min_batch_size=2, max_batch_size=3, timeout=1.5)
        batcher._queue.append((rows(1.0), None))  # a row left queued
        twin = copy.deepcopy(batcher)
        assert twin.state() == {**batcher.state(), "queue_size": 0, "pending_futures": 0}
        assert twin._run_lock is not batcher._run_lock

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"min_batch_size": 0}, "min_batch_size must be >= 1, got 0"),
            ({"max_batch_size": 0}, "max_batch_size must be >= 1, got 0"),
            ({"min_batch_size": 1.5}, "min_batch_size must be an int >= 1, got 1.5"),
            ({"min_batch_size": 4, "max_batch_size": 2}, r"min_batch_size \(4\) must be <="),
            ({"timeout": 0}, "batching_timeout must be a positive number of seconds, got 0"),
            ({"timeout": None}, "batching_timeout must be .* got None"),
        ],
    )
    def test_bad_arguments(self, kwargs, match):
        args = {"min_batch_size": 1, "max_batch_size": None, "timeout": 1.0, **kwargs}
        with pytest.raises(ValueError, match=match):
            RequestBatcher(**args)

    def test_more_than_one_batch_dim(self):
        batcher = RequestBatcher(min_batch_size=1, max_batch_size=None, timeout=1.0)
        with pytest.raises(
            ValueError, match=r"at most one batch dimension, got batch size \(2, 2\)"
        ):
            batcher.submit(Recorder(), TensorDict(x=torch.zeros(2, 2), batch_size=(2, 2)))


def chat(i: int) -> TensorDict:
    """The ``i``-th chat as a ``[]`` tensordict a scorer reads."""
    history = History.from_chats([CHATS[i]])[0]
    return TensorDict({"history": ChatHistory(full=history)})


class CallCounter:
    """Counts the model's forward calls and the batch size of each."""

    def __init__(self, model) -> None:
        self.sizes: list[int] = []
        self._handle = model.register_forward_hook(
            lambda m, args, kwargs, out: self.sizes.append(kwargs["input_ids"].shape[0]),
            with_kwargs=True,
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.remove()


class TestTransformersWrapperBatching:
    def test_threads_get_their_own_results_from_one_call(self, tok, model):
        alone = TransformersWrapper(model, tokenizer=tok, generate=False)
        expected = [alone(chat(i)) for i in range(4)]
        wrapper = TransformersWrapper(
            model, tokenizer=tok, generate=False, min_batch_size=4, batching_timeout=WAIT_S
        )
        inputs = [chat(i) for i in range(4)]
        with CallCounter(model) as calls:
            outs = in_threads(wrapper, inputs)
        assert calls.sizes == [4]  # one model call instead of four
        for td, out, exp in zip(inputs, outs, expected):
            assert out is td  # inplace: each caller's own input, written
            assert out["text", "full"] == exp["text", "full"]
            torch.testing.assert_close(out["tokens", "full"], exp["tokens", "full"])
            torch.testing.assert_close(
                out["log_probs", "full"], exp["log_probs", "full"], atol=1e-5, rtol=1e-5
            )
            torch.testing.assert_close(
                out["masks", "all_assistant_mask"], exp["masks", "all_assistant_mask"]
            )

    @pytest.mark.parametrize("inplace", [True, False])
    def test_batch_input_split_by_max_batch_size(self, tok, model, inplace):
        history = ChatHistory(full=History.from_chats(CHATS[:3]), batch_size=(3,))
        alone = TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=True)
        expected = alone(TensorDict({"history": history}, batch_size=(3,)))
        wrapper = TransformersWrapper(
            model, tokenizer=tok, generate=False, max_batch_size=2, inplace=inplace
        )
        td = TensorDict({"history": history}, batch_size=(3,))
        with CallCounter(model) as calls:
            out = wrapper(td)
        assert calls.sizes == [2, 1]
        assert (out is td) == inplace and (("log_probs", "full") in td.keys(True)) == inplace
        lp = out.get(("log_probs", "full"), as_padded_tensor=True)
        torch.testing.assert_close(lp, expected["log_probs", "full"], atol=1e-5, rtol=1e-5)

    def test_timeout_flushes_a_partial_batch(self, tok, model):
        alone = TransformersWrapper(model, tokenizer=tok, generate=False)
        wrapper = TransformersWrapper(
            model, tokenizer=tok, generate=False, min_batch_size=3, batching_timeout=0.05
        )
        with CallCounter(model) as calls:
            outs = in_threads(wrapper, [chat(0), chat(1)])  # 2 rows < min_batch_size
        assert sum(calls.sizes) == 2 and len(calls.sizes) <= 2
        for i, out in enumerate(outs):
            torch.testing.assert_close(
                out["log_probs", "full"], alone(chat(i))["log_probs", "full"], atol=1e-5, rtol=1e-5
            )

    def test_greedy_generation_batched(self, tok, model):
        kwargs = {
            "input_mode": "text",
            "generate_kwargs": {"max_new_tokens": 3, "do_sample": False},
        }
        alone = TransformersWrapper(model, tokenizer=tok, **kwargs)
        wrapper = TransformersWrapper(
            model, tokenizer=tok, min_batch_size=2, batching_timeout=WAIT_S, **kwargs
        )
        prompts = [TensorDict({"text": Text(prompt=p)}) for p in ("ab", "hello")]
        with CallCounter(model) as calls:
            outs = in_threads(wrapper, prompts)
        assert len(calls.sizes) == 4  # 3 generation steps and the scoring, once for both
        for p, out in zip(("ab", "hello"), outs):
            exp = alone(TensorDict({"text": Text(prompt=p)}))
            assert out["text", "prompt"] == p
            torch.testing.assert_close(out["tokens", "response"], exp["tokens", "response"])

    @pytest.mark.parametrize("flush", [False, True])
    def test_cleanup_releases_a_waiting_caller(self, tok, model, flush):
        wrapper = TransformersWrapper(
            model, tokenizer=tok, generate=False, min_batch_size=2, batching_timeout=WAIT_S
        )
        td = TensorDict({"history": ChatHistory(full=History.from_chats(CHATS[:1]))})
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(wrapper, td)
            wait_for(lambda: wrapper.get_batching_state()["queue_size"] == 1)
            wrapper.cleanup_batching(flush=flush)
            if flush:  # run now: the caller gets its result
                out = future.result(timeout=WAIT_S)
                assert out["log_probs", "full"].shape == out["tokens", "full"].shape
            else:  # dropped: the caller raises at once, not after the timeout
                with pytest.raises(CancelledError, match="cleanup_batching"):
                    future.result(timeout=WAIT_S)
        state = wrapper.get_batching_state()
        assert state["queue_size"] == state["pending_futures"] == 0
        assert state["lock_state"] == "unlocked"

    def test_model_error_reaches_the_caller(self, tok, model):
        wrapper = TransformersWrapper(model, tokenizer=tok, generate=False, batching=True)
        bad = TensorDict({"history": ChatHistory(prompt=History.from_chats(CHATS[:1])[0])})
        with pytest.raises(KeyError, match="no History at"):
            wrapper(bad)
        assert wrapper.get_batching_state()["queue_size"] == 0
        assert wrapper(chat(0))["log_probs", "full"].ndim == 1  # still serves

    def test_batching_switches(self, tok, model):
        off = TransformersWrapper(model, tokenizer=tok)
        assert off.batching is False and off.get_batching_state() == {"batching_enabled": False}
        on = TransformersWrapper(model, tokenizer=tok, batching=True)
        state = on.get_batching_state()
        assert on.batching and state["min_batch_size"] == 1 and state["max_batch_size"] is None
        assert state["timeout"] == 10.0
        by_size = TransformersWrapper(model, tokenizer=tok, max_batch_size=8)
        assert by_size.batching and by_size.get_batching_state()["min_batch_size"] == 1
        twin = copy.deepcopy(on)  # a batching wrapper copies (its queue starts empty)
        assert twin.batching and twin.get_batching_state()["queue_size"] == 0

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            (
                {"batching": False, "min_batch_size": 2},
                "min_batch_size=2 and max_batch_size=None must be None when batching=False",
            ),
            (
                {"batching": False, "max_batch_size": 3},
                "min_batch_size=None and max_batch_size=3 must be None when batching=False",
            ),
            ({"min_batch_size": 4, "max_batch_size": 2}, r"min_batch_size \(4\) must be <= max"),
            ({"batching": True, "batching_timeout": -1.0}, "positive number of seconds, got -1.0"),
        ],
    )
    def test_bad_arguments(self, tok, model, kwargs, match):
        with pytest.raises(ValueError, match=match):
            TransformersWrapper(model, tokenizer=tok, **kwargs)

    def test_more_than_one_batch_dim(self, tok, model):
        wrapper = TransformersWrapper(model, tokenizer=tok, generate=False, batching=True)
        td = lazy_stack([lazy_stack([chat(0), chat(1)]), lazy_stack([chat(2), chat(3)])])
        with pytest.raises(ValueError, match=r"got batch size \(2, 2\)"):
            wrapper(td)
