"""A character-level tokenizer with a ChatML template, and a tiny GPT-2 built from a config.

Nothing downloads: the vocabulary is ``string.printable`` plus three special tokens.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}"
    "{% endgeneration %}{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def make_tokenizer(chat_template: str | None = CHATML) -> PreTrainedTokenizerFast:
    """One token per printable character, plus ``<pad>``, ``<|im_start|>``, ``<|im_end|>``."""
    vocab = {t: i for i, t in enumerate(SPECIALS + list(string.printable))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<|im_end|>",
        additional_special_tokens=SPECIALS[1:],
    )
    tok.chat_template = chat_template
    return tok


def make_model(tok: PreTrainedTokenizerFast, n_positions: int = 256, seed: int = 0):
    """A one-layer GPT-2 with random weights over ``tok``'s vocabulary."""
    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=len(tok),
        n_positions=n_positions,
        n_embd=16,
        n_layer=1,
        n_head=2,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
    )
    return GPT2LMHeadModel(cfg).eval()
