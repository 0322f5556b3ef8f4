"""One Decision Transformer update with rl's modules and loss against plain PyTorch.

The update, batch 64 windows x 20 steps (TorchRL's D4RL setting: GPT-2 of 3 blocks, width
128, 1 head, feed-forward 512, dropout 0.1; HalfCheetah's 17 observations and 6 actions):
embed the return-to-go, state and action tokens, run the causal transformer over the 60
interleaved tokens, map the state tokens to actions (``DTActor`` + ``TanhDelta`` in a
``ProbabilisticActor``), ``DTLoss`` (squared error to the data's actions), one backward,
a gradient-norm clip and one AdamW step.

Floors, sharing the same weights:

- ``plain torch``: the same maths written out on tensors, GPT-2 included (its blocks as
  ``F.layer_norm``, ``F.scaled_dot_product_attention`` and matmuls on the Hugging Face
  module's own parameters), no TensorDict; checked equal to rl's output first (eval mode);
- ``plain torch + HF GPT2Model``: the same, calling the ``transformers`` backbone.

Variants run alternately in one process; each figure is the best of ``--repeats`` rounds
of ``--iters`` updates. ``--compile`` adds ``torch.compile`` of rl's loss and of the plain
loss (the backward and the optimizer step stay eager) and reports their speed-ups.

    python benchmarks/bench_dt.py [--iters 10] [--repeats 5] [--threads 1] [--compile]
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F
from tensordict import TensorDict

from rl.modules import (
    DecisionTransformer,
    DTActor,
    ProbabilisticActor,
    TanhDelta,
    TensorDictModule,
)
from rl.objectives import DTLoss

B, T, OBS, ACT = 64, 20, 17, 6
CONFIG = DecisionTransformer.DTConfig(
    n_embd=128, n_layer=3, n_head=1, n_inner=512, n_positions=1024, resid_pdrop=0.1, attn_pdrop=0.1
)
CLIP = 0.25


def build_rl(net: DTActor):
    actor = ProbabilisticActor(
        TensorDictModule(net, ["observation", "action", "return_to_go"], ["param"]),
        in_keys=["param"],
        distribution_class=TanhDelta,
        distribution_kwargs={"low": -1.0, "high": 1.0},
    )
    loss = DTLoss(actor)

    def loss_fn(data: TensorDict) -> torch.Tensor:
        return loss(data)["loss"]

    return loss_fn


def gpt2(gpt, tokens: torch.Tensor) -> torch.Tensor:
    """GPT-2's forward written out on the Hugging Face module's parameters."""
    p_drop = gpt.config.resid_pdrop if gpt.training else 0.0
    a_drop = gpt.config.attn_pdrop if gpt.training else 0.0
    n, length, width = tokens.shape
    heads = gpt.config.n_head
    x = tokens + gpt.wpe.weight[:length]
    x = F.dropout(x, gpt.config.embd_pdrop if gpt.training else 0.0)
    for block in gpt.h:
        h = F.layer_norm(x, (width,), block.ln_1.weight, block.ln_1.bias, block.ln_1.eps)
        qkv = torch.addmm(block.attn.c_attn.bias, h.view(-1, width), block.attn.c_attn.weight)
        q, k, v = qkv.view(n, length, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, dropout_p=a_drop, is_causal=True)
        att = att.transpose(1, 2).reshape(-1, width)
        att = torch.addmm(block.attn.c_proj.bias, att, block.attn.c_proj.weight)
        x = x + F.dropout(att.view(n, length, width), p_drop)
        h = F.layer_norm(x, (width,), block.ln_2.weight, block.ln_2.bias, block.ln_2.eps)
        h = torch.addmm(block.mlp.c_fc.bias, h.view(-1, width), block.mlp.c_fc.weight).relu()
        h = torch.addmm(block.mlp.c_proj.bias, h, block.mlp.c_proj.weight)
        x = x + F.dropout(h.view(n, length, width), p_drop)
    return F.layer_norm(x, (width,), gpt.ln_f.weight, gpt.ln_f.bias, gpt.ln_f.eps)


def build_plain(net: DTActor, backbone: str = "written out"):
    dt = net.transformer

    def loss_fn(data: TensorDict) -> torch.Tensor:
        obs, act, rtg = data["observation"], data["action"], data["return_to_go"]
        tokens = torch.stack(
            (
                F.linear(rtg, dt.embed_return.weight, dt.embed_return.bias),
                F.linear(obs, dt.embed_state.weight, dt.embed_state.bias),
                F.linear(act, dt.embed_action.weight, dt.embed_action.bias),
            ),
            dim=2,
        ).reshape(B, 3 * T, -1)
        tokens = F.layer_norm(
            tokens, (tokens.shape[-1],), dt.embed_ln.weight, dt.embed_ln.bias, dt.embed_ln.eps
        )
        if backbone == "written out":
            hidden = gpt2(dt.transformer, tokens)
        else:
            hidden = dt.transformer(inputs_embeds=tokens, use_cache=False).last_hidden_state
        pred = torch.tanh(F.linear(hidden[:, 1::3], net.action_layer.weight, net.action_layer.bias))
        return (pred - act).pow(2).mean()

    return loss_fn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile'd losses")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    net = DTActor(OBS, ACT, transformer_config=CONFIG)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4, weight_decay=1e-4)
    data = TensorDict(
        observation=torch.randn(B, T, OBS),
        action=torch.rand(B, T, ACT) * 2 - 1,
        return_to_go=torch.randn(B, T, 1),
        batch_size=[B, T],
    )
    variants = {
        "rl": build_rl(net),
        "plain torch": build_plain(net),
        "plain torch + HF GPT2Model": build_plain(net, backbone="hf"),
    }
    net.eval()  # same maths: equal losses without dropout
    reference = variants["plain torch"](data).item()
    for name, fn in variants.items():
        value = fn(data).item()
        if not math.isclose(value, reference, rel_tol=1e-4):
            raise RuntimeError(f"{name} computes loss {value}, plain torch {reference}")
    net.train()
    if args.compile:
        variants["rl, compiled loss"] = torch.compile(variants["rl"])
        variants["plain torch, compiled"] = torch.compile(variants["plain torch"])

    def update(loss_fn) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(data).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
        optimizer.step()

    for fn in variants.values():  # warm-up (and compilation)
        for _ in range(3):
            update(fn)
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(args.repeats):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            for _ in range(args.iters):
                update(fn)
            best[name] = min(best[name], (time.perf_counter() - t0) / args.iters)
    floor = best["plain torch"]
    print(
        f"DT update, batch {B}x{T} (60 tokens), GPT-2 {CONFIG.n_layer}x{CONFIG.n_embd}, "
        f"{args.threads} thread(s), torch {torch.__version__}"
    )
    for name, sec in best.items():
        print(f"{name:>28}: {sec * 1e3:8.2f} ms/update  ratio to plain torch {sec / floor:.3f}x")
    if args.compile:
        print(
            f"torch.compile speed-up: rl {best['rl'] / best['rl, compiled loss']:.2f}x, "
            f"plain torch {floor / best['plain torch, compiled']:.2f}x"
        )


if __name__ == "__main__":
    main()
