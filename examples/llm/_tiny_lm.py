"""What the LLM examples share: a character-level tokenizer with a ChatML template and a
small GPT-2 defined from a ``transformers`` config. Nothing downloads: the weights start
random and the vocabulary is built here."""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

__all__ = ["CHATML", "make_model", "make_tokenizer"]

#: ChatML, its assistant turns marked with ``{% generation %}`` (for ``assistant_masks``)
CHATML = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def make_tokenizer(extra_tokens: list[str] = ()) -> PreTrainedTokenizerFast:
    """One token per printable character, ``<pad>``, the ChatML markers, and
    ``extra_tokens`` as whole tokens (kept when responses are decoded)."""
    specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate(specials + list(string.printable) + list(extra_tokens))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<|im_end|>",
        additional_special_tokens=specials[1:],
    )
    if extra_tokens:
        tok.add_tokens(list(extra_tokens))
    tok.chat_template = CHATML
    return tok


def make_model(
    tok: PreTrainedTokenizerFast, n_embd: int, n_layer: int, n_head: int, n_positions: int
) -> GPT2LMHeadModel:
    """A GPT-2 with random weights over ``tok``'s vocabulary."""
    config = GPT2Config(
        vocab_size=len(tok),
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
        resid_pdrop=0.0,  # no dropout: short runs, and GRPO's ratios need a deterministic model
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config)
