"""rl.modules.llm.RemoteTransformersWrapper on a local Ray instance: a tiny GPT-2 saved to a
temporary folder, loaded by the actor, answers as the same model does here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
ray = pytest.importorskip("ray")

from tensordict import TensorDict  # noqa: E402

from rl.core.ray_runtime import processes_left  # noqa: E402
from rl.data.llm import Text  # noqa: E402
from rl.modules.llm import RemoteTransformersWrapper, TransformersWrapper  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_llm import make_model, make_tokenizer  # noqa: E402

pytestmark = pytest.mark.timeout(300)  # the actor's worker imports torch and transformers

KWARGS = {"input_mode": "text", "generate_kwargs": {"max_new_tokens": 4, "do_sample": False}}


def _prompts():
    rows = [
        TensorDict({"text": Text(prompt=p, batch_size=())}, batch_size=()) for p in ("ab", "xyz")
    ]
    return torch.stack(rows)


class TestRemoteTransformersWrapper:
    def test_answers_as_the_local_model(self, shared_ray, tmp_path):
        tok = make_tokenizer()
        model = make_model(tok)
        model.save_pretrained(tmp_path)
        local = TransformersWrapper(model, tokenizer=tok, **KWARGS)
        with RemoteTransformersWrapper(
            str(tmp_path), num_gpus=0, num_cpus=1, tokenizer=tok, **KWARGS
        ) as remote:
            out = remote(_prompts())
            expected = local(_prompts())
            assert [r["text", "response"] for r in out.unbind(0)] == [
                r["text", "response"] for r in expected.unbind(0)
            ]
            for got, want in zip(out.unbind(0), expected.unbind(0)):
                torch.testing.assert_close(got["tokens", "response"], want["tokens", "response"])
            assert remote.in_keys == local.in_keys and remote.out_keys == local.out_keys
            assert remote.tokens_key == local.tokens_key and remote.generate is True
            assert remote.get_batching_state() is None
            remote.cleanup_batching()
            pid = remote.worker_pid
        assert not processes_left([pid])  # the actor is gone with the with block
        assert ray.is_initialized()  # started by the fixture, left running
        with pytest.raises(RuntimeError, match="was shut down"):
            remote(_prompts())

    def test_bad_arguments(self, shared_ray):
        with pytest.raises(ValueError, match="model name or path \\(str\\), got GPT2LMHeadModel"):
            RemoteTransformersWrapper(make_model(make_tokenizer()))
        with pytest.raises(ValueError, match="num_gpus=1 and the Ray cluster has 0 GPU"):
            RemoteTransformersWrapper("some/model")
