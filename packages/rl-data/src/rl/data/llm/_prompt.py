"""Prompt datasets: ``PromptData`` and the prompt + label tokenizer."""

from __future__ import annotations

import torch
from tensordict import TensorDict, tensorclass

from ._dataset import TensorDictTokenizer, TokenizedDatasetLoader

__all__ = ["PromptData", "PromptTensorDictTokenizer"]

DEFAULT_DATASET = "CarperAI/openai_summarize_tldr"


@tensorclass
class PromptData:
    """A prompt dataset: prompt + label tokens, and where the prompt ends.

    Fields: ``input_ids`` and ``attention_mask`` ``[B, T]``, ``prompt_rindex`` ``[B]``
    (the index of the prompt's last token), optional ``labels``, ``logits``, ``loss``.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_rindex: torch.Tensor
    labels: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    loss: torch.Tensor | None = None

    def mask_label(self, pad_token_id=50256):
        """The prompts alone: tokens from ``prompt_rindex`` on become ``pad_token_id``.

        Returns a :class:`PromptData` (batch size ``[]``, as TorchRL's) whose
        ``attention_mask`` is ``1`` on positions ``< prompt_rindex``.
        """
        _, block_size = self.input_ids.shape
        positions = torch.arange(block_size, device=self.prompt_rindex.device)
        attention_mask = (positions < self.prompt_rindex[:, None]).to(torch.int64)
        input_ids = torch.where(attention_mask == 1, self.input_ids, pad_token_id)
        return type(self)(
            input_ids=input_ids,
            attention_mask=attention_mask,
            prompt_rindex=self.prompt_rindex,
            loss=self.loss,
            batch_size=[],
        )

    @classmethod
    def from_dataset(
        cls,
        split,
        dataset_name=None,
        max_length=550,
        root_dir=None,
        from_disk=False,
        num_workers: int | None = None,
        *,
        tokenizer=None,
    ):
        """Tokenizes a local prompt dataset (rows with ``"prompt"`` and ``"label"``).

        Args:
            split (str): the split, e.g. ``"train"`` or ``"valid"``.
            dataset_name (optional): the local dataset, see
                :class:`~rl.data.llm.TokenizedDatasetLoader`. TorchRL's default,
                ``"CarperAI/openai_summarize_tldr"``, is a Hub name and is refused.
            max_length (int, optional): the sequence length. Defaults to ``550``.
            root_dir (path, optional): where the memory-mapped cache is written.
            from_disk (bool, optional): read with ``datasets.load_from_disk``.
            num_workers (int, optional): see :class:`~rl.data.llm.TokenizedDatasetLoader`.
            tokenizer (optional): a tokenizer instance (else ``gpt2`` through
                ``AutoTokenizer``).

        Returns: a memory-mapped :class:`PromptData` whose ``labels`` are its ``input_ids``.
        """
        dataset_name = dataset_name if dataset_name is not None else DEFAULT_DATASET
        loader = TokenizedDatasetLoader(
            split,
            max_length,
            dataset_name,
            PromptTensorDictTokenizer,
            root_dir=root_dir,
            from_disk=from_disk,
            num_workers=num_workers,
            tokenizer=tokenizer,
        )
        data = loader.load()
        return cls(**data, labels=data["input_ids"], batch_size=data.shape)


class PromptTensorDictTokenizer(TensorDictTokenizer):
    """Tokenization recipe for prompt datasets: ``prompt + label`` with the prompt's end.

    Args:
        tokenizer: a ``transformers`` tokenizer.
        max_length (int): the maximum sequence length.
        key (str, optional): the entry holding the prompt. Defaults to ``"prompt"``; the
            label is read from ``"label"``.
        padding (str, optional): padding of ``prompt + label``. Defaults to ``"max_length"``.
        truncation (bool, optional): truncate to ``max_length``. Defaults to ``True``.
        return_tensordict (bool, optional): return a ``TensorDict``. Defaults to ``True``.
        device (torch.device, optional): the device of the returned ``TensorDict``.

    Calling it on a batch ``{"prompt": [B strings], "label": [B strings]}`` returns:

    - ``input_ids``, ``attention_mask`` ``[B, max_length]``: ``prompt + label`` tokenized;
    - ``prompt_rindex`` ``[B]``: the index of the prompt's last token (its length - 1);
    - ``valid_sample`` ``[B]``: ``True`` where the last token is the tokenizer's
      ``eos_token_id``, i.e. where ``prompt + label`` fits with room for padding (the
      loader pads with ``eos``); rows without it are dropped by the loader.
    """

    def __init__(
        self,
        tokenizer,
        max_length,
        key="prompt",
        padding="max_length",
        truncation=True,
        return_tensordict=True,
        device=None,
    ):
        super().__init__(
            tokenizer,
            max_length,
            key=key,
            padding=padding,
            truncation=truncation,
            return_tensordict=return_tensordict,
            device=device,
        )

    def __call__(self, sample):
        prompts = self._text(sample)
        if "label" not in sample:
            raise KeyError(f"the sample has no entry 'label'; it has {sorted(sample)}")
        tokenizer = self.tokenizer
        prompt_tokens = tokenizer(prompts, max_length=self.max_length, truncation=True)
        prompt_rindex = [len(ids) - 1 for ids in prompt_tokens["input_ids"]]
        tokens = tokenizer(
            [prompt + label for prompt, label in zip(prompts, sample["label"])],
            max_length=self.max_length,
            padding=self.padding,
            truncation=self.truncation,
        )
        tokens["prompt_rindex"] = prompt_rindex
        # a row whose last token is not eos filled the whole block: prompt + label was cut
        tokens["valid_sample"] = [ids[-1] == tokenizer.eos_token_id for ids in tokens["input_ids"]]
        if not self.return_tensordict:
            return tokens
        return TensorDict(
            {k: torch.as_tensor(v) for k, v in dict(tokens).items()},
            batch_size=[len(prompts)],
            device=self.device,
        )
