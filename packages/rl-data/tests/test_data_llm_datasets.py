"""rl.data.llm datasets: the tokenizing recipes, the memory-mapped loader, the pair/prompt
tensorclasses, the dataloader, and chat templates added by name."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from rl.data.llm import (  # noqa: E402
    History,
    PairwiseDataset,
    PromptData,
    PromptTensorDictTokenizer,
    RewardData,
    TensorDictTokenizer,
    TokenizedDatasetLoader,
    _chat_templates,  # noqa: E402
    add_chat_template,
    create_infinite_iterator,
    get_dataloader,
)

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_tokenizer import SPECIALS, make_tokenizer  # noqa: E402

_has_datasets = importlib.util.find_spec("datasets") is not None
PAD = EOS = SPECIALS.index("<|im_end|>")  # the loader pads with eos, as TorchRL's


@pytest.fixture
def tok():
    t = make_tokenizer()
    t.pad_token = t.eos_token
    return t


def ids(tok, text):
    return tok(text)["input_ids"]


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


PAIRS = [
    {"prompt": "P0", "chosen": "a b c d e", "rejected": "v w x y z"},
    {"prompt": "P1", "chosen": "same same same same same", "rejected": "same same same same same"},
    {"prompt": "P2", "chosen": "f g h i j", "rejected": "too short"},
    {"prompt": "P3", "chosen": "k l m n o", "rejected": "p q r s t"},
]
PROMPTS = [
    {"prompt": "ab", "label": "x"},
    {"prompt": "abcd", "label": "yyyyyy"},  # 10 tokens: fills a block of 8, dropped
    {"prompt": "c", "label": "zz"},
]


class TestTensorDictTokenizer:
    def test_one_string(self, tok):
        out = TensorDictTokenizer(tok, max_length=6)({"text": "ab"})
        assert out.batch_size == torch.Size([])
        assert out["input_ids"].tolist() == ids(tok, "ab") + [PAD] * 4
        assert out["attention_mask"].tolist() == [1, 1, 0, 0, 0, 0]

    def test_batch_truncates(self, tok):
        out = TensorDictTokenizer(tok, max_length=6)({"text": ["ab", "abcdefgh"]})
        assert out.batch_size == torch.Size([2])
        assert out["input_ids"].tolist() == [
            ids(tok, "ab") + [PAD] * 4,
            ids(tok, "abcdef"),
        ]
        assert out["attention_mask"].tolist() == [[1, 1, 0, 0, 0, 0], [1] * 6]

    def test_key_and_raw_output(self, tok):
        out = TensorDictTokenizer(tok, 3, key="body", return_tensordict=False)({"body": ["a"]})
        assert dict(out) == {
            "input_ids": [ids(tok, "a") + [PAD] * 2],
            "attention_mask": [[1, 0, 0]],
        }

    def test_missing_key(self, tok):
        with pytest.raises(KeyError, match="no entry 'text'"):
            TensorDictTokenizer(tok, 4)({"prompt": "a"})


class TestPromptTensorDictTokenizer:
    def test_values(self, tok):
        # the same ids, masks and rindex as TorchRL 0.14.1 on this tokenizer
        out = PromptTensorDictTokenizer(tok, max_length=7)(
            {"prompt": ["ab", "abcd"], "label": ["x", "yyyy"]}
        )
        assert out.batch_size == torch.Size([2])
        assert out["input_ids"].tolist() == [
            ids(tok, "abx") + [PAD] * 4,
            ids(tok, "abcdyyy"),
        ]
        assert out["attention_mask"].tolist() == [[1, 1, 1, 0, 0, 0, 0], [1] * 7]
        assert out["prompt_rindex"].tolist() == [1, 3]
        # the second row fills the block: its last token is not eos
        assert out["valid_sample"].tolist() == [True, False]

    def test_missing_label(self, tok):
        with pytest.raises(KeyError, match="no entry 'label'"):
            PromptTensorDictTokenizer(tok, 7)({"prompt": ["a"]})


class TestPromptData:
    def test_mask_label(self, tok):
        out = PromptTensorDictTokenizer(tok, max_length=7)(
            {"prompt": ["ab", "abcd"], "label": ["x", "yyyy"]}
        )
        data = PromptData(
            input_ids=out["input_ids"],
            attention_mask=out["attention_mask"],
            prompt_rindex=out["prompt_rindex"],
            batch_size=[2],
        )
        masked = data.mask_label(pad_token_id=99)
        # positions < prompt_rindex are kept (TorchRL's rule)
        a, b = ids(tok, "a"), ids(tok, "abc")
        assert masked.input_ids.tolist() == [a + [99] * 6, b + [99] * 4]
        assert masked.attention_mask.tolist() == [[1] + [0] * 6, [1, 1, 1] + [0] * 4]

    def test_from_dataset(self, tok, tmp_path):
        path = write_jsonl(tmp_path / "prompts.jsonl", PROMPTS)
        data = PromptData.from_dataset(
            "train", path, max_length=8, root_dir=tmp_path / "c", tokenizer=tok
        )
        assert isinstance(data, PromptData) and data.batch_size == torch.Size([2])
        assert data.input_ids.tolist() == [
            ids(tok, "abx") + [EOS] * 5,
            ids(tok, "czz") + [EOS] * 5,
        ]
        assert data.prompt_rindex.tolist() == [1, 0]
        torch.testing.assert_close(data.labels, data.input_ids)
        assert data.logits is None


class TestTokenizedDatasetLoader:
    def test_memmap_round_trip(self, tok, tmp_path):
        path = write_jsonl(
            tmp_path / "texts.jsonl", [{"text": "ab", "n": 1}, {"text": "abc", "n": 2}]
        )
        loader = TokenizedDatasetLoader(
            "train", 5, str(path), TensorDictTokenizer, root_dir=tmp_path / "c", tokenizer=tok
        )
        data = loader.load()
        assert set(data.keys()) == {"input_ids", "attention_mask", "n"}  # "text" excluded
        assert data["input_ids"].tolist() == [
            ids(tok, "ab") + [EOS] * 3,
            ids(tok, "abc") + [EOS] * 2,
        ]
        assert data["attention_mask"].tolist() == [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0]]
        assert data["n"].tolist() == [1, 2]
        assert data.is_memmap()
        (cache_dir,) = (tmp_path / "c").glob("texts-*")  # no unfinished write left behind
        assert (cache_dir / "train" / "5").is_dir()
        assert (cache_dir / "train" / "5.complete").exists()  # the write completed
        # a second load reads the cache back without the source
        path.unlink()
        again = TokenizedDatasetLoader(
            "train", 5, str(path), TensorDictTokenizer, root_dir=tmp_path / "c", tokenizer=tok
        ).load()
        assert (again == data).all()

    def test_different_datasets_never_share_a_cache(self, tok, tmp_path):
        rows_a, rows_b = [{"text": "ab"}], [{"text": "ba"}, {"text": "abc"}]
        first = TokenizedDatasetLoader(
            "train", 4, rows_a, TensorDictTokenizer, root_dir=tmp_path, tokenizer=tok
        ).load()
        second = TokenizedDatasetLoader(
            "train", 4, rows_b, TensorDictTokenizer, root_dir=tmp_path, tokenizer=tok
        ).load()
        assert first.shape == (1,) and second.shape == (2,)
        assert second["input_ids"][0].tolist() == ids(tok, "ba") + [EOS] * 2
        # two files whose names share the part before a dash
        for name, text in (("my-train.jsonl", "ab"), ("my-other.jsonl", "abc")):
            write_jsonl(tmp_path / name, [{"text": text}])
        a, b = (
            TokenizedDatasetLoader(
                "train",
                4,
                tmp_path / name,
                TensorDictTokenizer,
                root_dir=tmp_path / "c",
                tokenizer=tok,
            ).load()
            for name in ("my-train.jsonl", "my-other.jsonl")
        )
        assert a["input_ids"][0].tolist() != b["input_ids"][0].tolist()

    def test_an_interrupted_write_is_rebuilt(self, tok, tmp_path):
        rows = [{"text": "ab"}]
        loader = TokenizedDatasetLoader(
            "train", 4, rows, TensorDictTokenizer, root_dir=tmp_path, tokenizer=tok
        )
        first = loader.load()
        (marker,) = tmp_path.glob("*/train/4.complete")
        marker.unlink()  # as if the process died before the write completed
        again = loader.load()
        assert again["input_ids"].tolist() == first["input_ids"].tolist()
        assert marker.exists()

    def test_tokenizer_from_local_folder(self, tok, tmp_path):
        tok.save_pretrained(tmp_path / "tok")
        rows = [{"text": "hello"}]
        loader = TokenizedDatasetLoader(
            "train",
            6,
            rows,
            TensorDictTokenizer,
            root_dir=tmp_path / "c",
            tokenizer_model_name=str(tmp_path / "tok"),
        )
        assert loader.tokenizer.pad_token == loader.tokenizer.eos_token
        assert loader.load()["input_ids"].tolist() == [ids(tok, "hello") + [EOS]]

    def test_folder_of_splits_and_valid_size(self, tok, tmp_path):
        write_jsonl(tmp_path / "valid.jsonl", [{"text": c} for c in "abcde"])
        loader = TokenizedDatasetLoader(
            "valid",
            2,
            tmp_path,
            TensorDictTokenizer,
            root_dir=tmp_path / "c",
            valid_size=3,
            tokenizer=tok,
        )
        assert loader.load()["input_ids"][:, 0].tolist() == [ids(tok, c)[0] for c in "abc"]

    def test_valid_sample_rows_dropped(self, tok, tmp_path):
        loader = TokenizedDatasetLoader(
            "train", 8, PROMPTS, PromptTensorDictTokenizer, root_dir=tmp_path, tokenizer=tok
        )
        data = loader.load()
        assert "valid_sample" not in data.keys()
        assert data["prompt_rindex"].tolist() == [1, 0]

    def test_pre_tokenization_hook(self, tok, tmp_path):
        rows = [{"text": "keep"}, {"text": "drop"}]
        hook = lambda d: [r for r in d if r["text"] != "drop"]  # noqa: E731  (rows, as a Dataset)
        data = TokenizedDatasetLoader(
            "train", 4, rows, TensorDictTokenizer, hook, root_dir=tmp_path, tokenizer=tok
        ).load()
        assert data["input_ids"].tolist() == [ids(tok, "keep")]

    def test_hub_name_refused(self, tok, tmp_path):
        loader = TokenizedDatasetLoader(
            "train",
            4,
            "CarperAI/openai_summarize_tldr",
            TensorDictTokenizer,
            root_dir=tmp_path,
            tokenizer=tok,
        )
        with pytest.raises(ValueError, match="not a local file or folder: nothing downloads"):
            loader.load()

    def test_missing_split_file(self, tok, tmp_path):
        write_jsonl(tmp_path / "train.jsonl", [{"text": "a"}])
        loader = TokenizedDatasetLoader(
            "test", 4, tmp_path, TensorDictTokenizer, root_dir=tmp_path / "c", tokenizer=tok
        )
        with pytest.raises(FileNotFoundError, match="no test.jsonl"):
            loader.load()

    def test_missing_split_in_mapping(self, tok, tmp_path):
        loader = TokenizedDatasetLoader(
            "test",
            4,
            {"train": [{"text": "a"}]},
            TensorDictTokenizer,
            root_dir=tmp_path,
            tokenizer=tok,
        )
        with pytest.raises(ValueError, match="split='test' is not in the dataset"):
            loader.load()

    def test_bad_suffix(self, tok, tmp_path):
        (tmp_path / "d.txt").write_text("a")
        loader = TokenizedDatasetLoader(
            "train", 4, tmp_path / "d.txt", TensorDictTokenizer, root_dir=tmp_path, tokenizer=tok
        )
        with pytest.raises(ValueError, match="suffix '.txt'"):
            loader.load()

    @pytest.mark.skipif(_has_datasets, reason="checks the error raised without `datasets`")
    def test_from_disk_needs_datasets(self, tok, tmp_path):
        loader = TokenizedDatasetLoader(
            "train",
            4,
            tmp_path,
            TensorDictTokenizer,
            root_dir=tmp_path,
            from_disk=True,
            tokenizer=tok,
        )
        with pytest.raises(ImportError, match="pip install datasets"):
            loader.load()

    def test_dataset_to_tensordict(self, tmp_path):
        columns = {"tokens": torch.arange(6).view(3, 2), "ok": torch.tensor([True, False, True])}

        class Columns(dict):
            features = ["tokens", "ok"]

        out = TokenizedDatasetLoader.dataset_to_tensordict(
            Columns(columns), data_dir=tmp_path, prefix=("some", "prefix"), valid_mask_key="ok"
        )
        assert out["some", "prefix", "tokens"].tolist() == [[0, 1], [4, 5]]
        assert out.is_memmap() and (tmp_path / "some" / "prefix").is_dir()


class TestPairwiseDataset:
    def test_from_dataset(self, tok, tmp_path):
        path = write_jsonl(tmp_path / "pairs.jsonl", PAIRS)
        data = PairwiseDataset.from_dataset(
            "train", str(path), max_length=12, root_dir=tmp_path / "c", tokenizer=tok
        )
        # P1 (chosen == rejected) and P2 (rejected under 5 words) are filtered
        assert data.batch_size == torch.Size([2])
        assert isinstance(data.chosen_data, RewardData)

        def row(text):
            t = ids(tok, text)
            return t + [EOS] * (12 - len(t))

        assert data.chosen_data.input_ids.tolist() == [row("P0\na b c d e"), row("P3\nk l m n o")]
        assert data.rejected_data.input_ids.tolist() == [row("P0\nv w x y z"), row("P3\np q r s t")]
        assert data.chosen_data.rewards is None and data.rejected_data.end_scores is None


class TestDataloader:
    def test_get_dataloader(self, tok, tmp_path):
        path = write_jsonl(tmp_path / "pairs.jsonl", PAIRS + [dict(PAIRS[0], prompt="P4")])
        loader = get_dataloader(
            2,
            12,
            PairwiseDataset,
            "cpu",
            dataset_name=str(path),
            root_dir=tmp_path / "c",
            tokenizer=tok,
        )
        seen = []
        for _ in range(3):  # one epoch of 3 pairs in batches of 2: the last one dropped
            batch = next(loader)
            assert isinstance(batch, PairwiseDataset) and batch.batch_size == torch.Size([2])
            assert type(batch.chosen_data.input_ids) is torch.Tensor  # as_tensor: no memmap
            seen.append(batch.chosen_data.input_ids[:, 1].tolist())
        prompts = {ids(tok, c)[0] for c in "034"}
        assert all(set(s) <= prompts and len(set(s)) == 2 for s in seen)

    def test_finite(self, tok, tmp_path):
        path = write_jsonl(tmp_path / "prompts.jsonl", PROMPTS)
        rb = get_dataloader(
            1,
            8,
            PromptData,
            "cpu",
            dataset_name=path,
            root_dir=tmp_path / "c",
            infinite=False,
            tokenizer=tok,
        )
        rindex = sorted(b.prompt_rindex.item() for b in rb)
        assert rindex == [0, 1]

    def test_create_infinite_iterator(self):
        it = create_infinite_iterator([1, 2])
        assert [next(it) for _ in range(5)] == [1, 2, 1, 2, 1]


PLAIN = (
    "{% for message in messages %}{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '|' }}{% endgeneration %}"
    "{% else %}{{ message['role'] + ':' + message['content'] + '|' }}{% endif %}{% endfor %}"
)


@pytest.fixture
def registry():
    regs = (
        _chat_templates._CHAT_TEMPLATES,
        _chat_templates._CUSTOM_INVERSE_PARSERS,
        _chat_templates._CUSTOM_MODEL_FAMILY_KEYWORDS,
    )
    saved = [dict(r) for r in regs]
    yield
    for reg, before in zip(regs, saved):
        reg.clear()
        reg.update(before)


def _parse_plain(text):
    turns = [t for t in text.split("|") if t]
    return History.from_chats(
        [
            [
                {"role": t.split(":", 1)[0], "content": t.split(":", 1)[1]}
                if ":" in t
                else {"role": "assistant", "content": t}
                for t in turns
            ]
        ]
    )[0]


class TestAddChatTemplate:
    CHAT = [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]]

    def test_by_name(self, tok, registry):
        add_chat_template("plain_test", PLAIN)
        h = History.from_chats(self.CHAT)[0]
        assert (
            h.apply_chat_template(
                tokenizer=tok, chat_template_name="plain_test", add_generation_prompt=False
            )
            == "user:hi|yo|"
        )
        out = h.apply_chat_template(
            tokenizer=tok,
            chat_template_name="plain_test",
            add_generation_prompt=False,
            return_assistant_tokens_mask=True,
        )
        assert out["assistant_masks"].tolist() == [0] * 8 + [1] * 3

    def test_family_keywords_and_inverse_parser(self, tok, registry):
        add_chat_template(
            "plain_family", PLAIN, inverse_parser=_parse_plain, model_family_keywords=["TinyPlain"]
        )
        tok.name_or_path = "org/tinyplain-7b"
        tok.chat_template = None  # the registered family template is picked instead
        h = History.from_chats(self.CHAT)[0]
        text = h.apply_chat_template(tokenizer=tok, add_generation_prompt=False)
        assert text == "user:hi|yo|"
        back = History.from_text(text, tokenizer=tok)
        assert back.role == ["user", "assistant"] and back.content == ["hi", "yo"]
        assert History.from_text(text, chat_template_name="plain_family").content == ["hi", "yo"]

    def test_needs_generation_block(self, registry):
        with pytest.raises(ValueError, match=r"Template 'bad' must include '\{% generation %\}'"):
            add_chat_template("bad", "{{ messages }}")
        assert "bad" not in _chat_templates._CHAT_TEMPLATES


@pytest.mark.parametrize("name", ["_dataset", "_reward", "_chat_templates"])
def test_docstring_examples(name, registry, tmp_path):
    tokenizer = make_tokenizer()
    result = doctest.testmod(
        importlib.import_module(f"rl.data.llm.{name}"),
        extraglobs={"tokenizer": tokenizer, "tmpdir": tmp_path},
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0 and result.failed == 0
