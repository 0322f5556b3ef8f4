"""Reward-model datasets: ``RewardData`` and chosen/rejected pairs (``PairwiseDataset``)."""

from __future__ import annotations

import torch
from tensordict import tensorclass

from ._dataset import TensorDictTokenizer, TokenizedDatasetLoader, _columns

__all__ = ["PairwiseDataset", "RewardData", "pre_tokenization_hook"]

DEFAULT_DATASET = "CarperAI/openai_summarize_comparisons"


@tensorclass
class RewardData:
    """Tokens scored by a reward model: ``input_ids``, ``attention_mask`` ``[B, T]``,
    optional ``rewards`` and ``end_scores``."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    rewards: torch.Tensor | None = None
    end_scores: torch.Tensor | None = None


@tensorclass
class PairwiseDataset:
    """Pairs of answers to one prompt: ``chosen_data`` and ``rejected_data`` (``RewardData``)."""

    chosen_data: RewardData
    rejected_data: RewardData

    @classmethod
    def from_dataset(
        cls,
        split,
        dataset_name: str | None = None,
        max_length: int = 550,
        root_dir: str | None = None,
        from_disk: bool = False,
        num_workers: int | None = None,
        *,
        tokenizer=None,
    ):
        """Tokenizes a local comparison dataset (rows with ``prompt``, ``chosen``, ``rejected``).

        Rows go through :func:`pre_tokenization_hook` (``prompt + "\\n" + answer`` under
        ``"text"``, chosen rows first), then :class:`~rl.data.llm.TensorDictTokenizer`.

        Args:
            split (str): the split, e.g. ``"train"`` or ``"valid"``.
            dataset_name (optional): the local dataset, see
                :class:`~rl.data.llm.TokenizedDatasetLoader`. TorchRL's default,
                ``"CarperAI/openai_summarize_comparisons"``, is a Hub name and is refused.
            max_length (int, optional): the sequence length. Defaults to ``550``.
            root_dir (path, optional): where the memory-mapped cache is written.
            from_disk (bool, optional): read with ``datasets.load_from_disk``.
            num_workers (int, optional): see :class:`~rl.data.llm.TokenizedDatasetLoader`.
            tokenizer (optional): a tokenizer instance (else ``gpt2`` through
                ``AutoTokenizer``).

        Returns: a :class:`PairwiseDataset` of shape ``[N]`` whose halves are zero-copy
        views of one memory-mapped TensorDict.
        """
        if dataset_name is None:
            dataset_name = DEFAULT_DATASET
        loader = TokenizedDatasetLoader(
            split,
            max_length,
            dataset_name,
            TensorDictTokenizer,
            pre_tokenization_hook,
            root_dir=root_dir,
            from_disk=from_disk,
            num_workers=num_workers,
            tokenizer=tokenizer,
        )
        data = loader.load()
        half = data.shape[0] // 2
        batch_size = [half]
        return cls(
            chosen_data=RewardData(**data[:half], batch_size=batch_size),
            rejected_data=RewardData(**data[half:], batch_size=batch_size),
            batch_size=batch_size,
        )


def pre_tokenization_hook(dataset, min_length=5):
    """Keeps the comparisons worth learning from, as ``"text"`` rows.

    A row (``prompt``, ``chosen``, ``rejected``) is kept when ``chosen != rejected`` and both
    have at least ``min_length`` words. Returns ``{"text": [...]}``: the kept
    ``prompt + "\\n" + chosen`` strings, then the ``prompt + "\\n" + rejected`` ones.

    Examples:
        >>> rows = [{"prompt": "p", "chosen": "a b c d e", "rejected": "v w x y z"}]
        >>> pre_tokenization_hook(rows)
        {'text': ['p\\na b c d e', 'p\\nv w x y z']}
    """
    columns = _columns(dataset)
    chosen, rejected = [], []
    for prompt, good, bad in zip(columns["prompt"], columns["chosen"], columns["rejected"]):
        if good == bad or len(good.split()) < min_length or len(bad.split()) < min_length:
            continue
        chosen.append(prompt + "\n" + good)
        rejected.append(prompt + "\n" + bad)
    return {"text": chosen + rejected}
