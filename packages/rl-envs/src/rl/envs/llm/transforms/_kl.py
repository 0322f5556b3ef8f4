"""KL between the policy and a reference model, per token: ``RetrieveLogProb`` (a model's
log-probabilities of the sequence), ``KLComputation`` (their difference, optionally taken
off the reward), ``RetrieveKL`` (the three together) and the older ``KLRewardTransform``.

The models are LLM wrappers (``rl.modules.llm.TransformersWrapper``) passed in by the
user, set to score (``generate=False``); this package does not import them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, NestedKey, TensorDictBase
from torch.nn.utils.rnn import pad_sequence

from rl.core import Composite, Unbounded

from ...transforms import Compose, Transform
from .._base_env import input_mode_of

__all__ = ["KLComputation", "KLRewardTransform", "RetrieveKL", "RetrieveLogProb"]


def _as_tuple(key: NestedKey) -> tuple:
    return (key,) if isinstance(key, str) else tuple(key)


def _rows(td: TensorDictBase, key: NestedKey) -> list[torch.Tensor] | None:
    """The rows at ``key`` at their own lengths (padded, nested or lazily stacked)."""
    if key not in td.keys(True):
        return None
    if isinstance(td, LazyStackedTensorDict):
        return list(td.get(key, as_list=True))
    # row by row: a lazy stack of rows of their own length may sit inside a dense tensordict,
    # and a nested tensor unbinds into its rows
    return [row.get(key) for row in td.unbind(0)]


def _pack(rows: list[torch.Tensor], padded: bool, padding_side: str) -> torch.Tensor:
    if padded:
        return pad_sequence(rows, batch_first=True, padding_value=0.0, padding_side=padding_side)
    return torch.nested.as_nested_tensor(rows, layout=torch.strided)


def _check_scorer(model, what: str) -> None:
    if not getattr(model, "return_log_probs", True):
        raise ValueError(f"the {what} must have return_log_probs=True, got False")
    if getattr(model, "generate", False):
        raise ValueError(
            f"the {what} must score, not generate: build it with generate=False, got generate=True"
        )


class _NoPairs:
    """Transforms whose in_keys and out_keys are not one-to-one pairs."""

    def _on_keys_changed(self) -> None:
        self.__dict__["_io_pairs"] = []
        self.__dict__["_io_pairs_inv"] = []


class RetrieveLogProb(_NoPairs, Transform):
    """Writes a model's per-token log-probabilities of the ``full`` sequence into ``"next"``.

    After each step, ``model`` (an LLM wrapper with ``generate=False``) scores the
    sequence it reads from the root (``("history", "full")`` in history mode); its
    ``(log_probs_key, "full")`` is stored under ``log_probs_full_key`` in the step's
    ``"next"``. With ``assistant_only``, the tokens the assistant did not write
    (``("masks", "all_assistant_mask")``) hold 0.

    Args:
        model: the scoring LLM wrapper.

    Keyword Args:
        log_probs_full_key (NestedKey, optional): where to write; defaults to
            ``(model.log_probs_key, "full")``.
        assistant_only (bool): zero the non-assistant tokens (needs a history-mode model).
            Defaults to ``True``.
        tokenizer_kwargs (dict, optional): kept for TorchRL's signature (the wrapper
            tokenizes).
        detach (bool): no gradient through the log-probs. Defaults to ``True``.
        device (torch.device, optional): moves the model there.
        tokenizer: kept for TorchRL's signature.
        padding_side (str): ``"left"`` or ``"right"`` padding of padded outputs. Defaults
            to ``"left"``.

    Raises:
        ValueError: a model that generates or returns no log-probs, or
            ``assistant_only=True`` with a model whose ``input_mode`` is not ``"history"``.
    """

    def __init__(
        self,
        model,
        *,
        log_probs_full_key: NestedKey | None = None,
        assistant_only: bool = True,
        tokenizer_kwargs: dict | None = None,
        detach: bool = True,
        device: torch.device | None = None,
        tokenizer=None,
        padding_side: str = "left",
    ):
        _check_scorer(model, "model")
        mode = getattr(model, "input_mode", "history")
        if assistant_only and mode != "history":
            raise ValueError(
                f"assistant_only=True needs a model with input_mode='history' (the assistant's "
                f"tokens come from the chat template), got input_mode={mode!r}; set "
                "assistant_only=False"
            )
        if log_probs_full_key is None:
            log_probs_full_key = (*_as_tuple(model.log_probs_key), "full")
        super().__init__(in_keys=list(getattr(model, "in_keys", [])), out_keys=[log_probs_full_key])
        if device is not None:
            model = model.to(device)
        self.model = model
        self.log_probs_full_key = log_probs_full_key
        self.assistant_only = assistant_only
        self.tokenizer_kwargs = dict(tokenizer_kwargs or {})
        self.detach = detach
        self.tokenizer = tokenizer
        self.padding_side = padding_side

    def _log_probs(self, tensordict: TensorDictBase) -> torch.Tensor:
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.detach):
            out = self.model(tensordict.copy())
        key = (*_as_tuple(self.model.log_probs_key), "full")
        rows = _rows(out, key)
        if rows is None:
            raise KeyError(f"{type(self).__name__}: the model wrote no log-probs at {key}")
        if self.assistant_only:
            masks = _rows(out, ("masks", "all_assistant_mask"))
            if masks is None:
                raise KeyError(
                    f"{type(self).__name__}(assistant_only=True): the model wrote no "
                    "('masks', 'all_assistant_mask')"
                )
            rows = [r.masked_fill(~m.bool(), 0.0) for r, m in zip(rows, masks)]
        if self.detach:
            rows = [r.detach() for r in rows]
        return _pack(rows, bool(getattr(self.model, "pad_output", False)), self.padding_side)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        next_tensordict.set(self.log_probs_full_key, self._log_probs(tensordict))
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """On data: writes into ``tensordict["next"]`` if present, else into ``tensordict``."""
        next_td = tensordict.get("next", None)
        if next_td is None:
            return self._step(tensordict, tensordict)
        tensordict.set("next", self._step(tensordict, next_td))
        return tensordict


class KLComputation(_NoPairs, Transform):
    """Per-token KL estimate ``log p(x) - log q(x)`` (``x`` sampled from ``p``), optionally
    taken off the reward.

    Reads, in the step's ``"next"``, the policy's log-probs ``gen_log_probs_full_key``
    (``log p``) and the reference's ``ref_log_probs_full_key`` (``log q``), rows of equal
    length; writes their difference under ``kl_key`` (a NaN in either, an alignment pad,
    counts 0). With ``add_to_reward``, ``reward`` (``[*B, 1, 1]`` per sequence) becomes
    ``reward - coeff * kl`` per token (``[*B, T, 1]``).

    Args:
        gen_log_probs_full_key (NestedKey): defaults to ``("log_probs", "full")``.
        ref_log_probs_full_key (NestedKey): defaults to ``("ref_log_probs", "full")``.

    Keyword Args:
        kl_key (NestedKey): defaults to ``"kl_penalty"``.
        add_to_reward (bool): defaults to ``True``.
        coeff (float): the KL's weight in the reward. Defaults to ``1.0``.
        padding_side (str): kept for TorchRL's signature.

    Raises:
        KeyError: a log-prob entry is missing.
        ValueError: rows of different lengths, or a reward that is not one dim more than
            the KL.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.envs.llm import KLComputation
        >>> td = TensorDict({("log_probs", "full"): torch.tensor([[-1.0, -2.0]]),
        ...                  ("ref_log_probs", "full"): torch.tensor([[-1.5, -1.0]]),
        ...                  "reward": torch.ones(1, 1, 1)}, batch_size=(1,))
        >>> out = KLComputation()(td)
        >>> out["kl_penalty"], out["reward"].squeeze(-1)
        (tensor([[ 0.5000, -1.0000]]), tensor([[0.5000, 2.0000]]))
    """

    def __init__(
        self,
        gen_log_probs_full_key: NestedKey = ("log_probs", "full"),
        ref_log_probs_full_key: NestedKey = ("ref_log_probs", "full"),
        *,
        kl_key: NestedKey = "kl_penalty",
        add_to_reward: bool = True,
        coeff: float = 1.0,
        padding_side: str = "left",
    ):
        in_keys = [gen_log_probs_full_key, ref_log_probs_full_key]
        out_keys = [kl_key]
        if add_to_reward:
            in_keys.append("reward")
            out_keys.append("reward")
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        self.gen_log_probs_full_key = gen_log_probs_full_key
        self.ref_log_probs_full_key = ref_log_probs_full_key
        self.kl_key = kl_key
        self.add_to_reward = add_to_reward
        self.coeff = coeff
        self.padding_side = padding_side

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        gen = _rows(next_tensordict, self.gen_log_probs_full_key)
        ref = _rows(next_tensordict, self.ref_log_probs_full_key)
        for rows, key in ((gen, self.gen_log_probs_full_key), (ref, self.ref_log_probs_full_key)):
            if rows is None:
                raise KeyError(
                    f"KLComputation needs the log-probs at {key!r}; the tensordict has keys "
                    f"{sorted(map(str, next_tensordict.keys(True, True)))}"
                )
        if len(gen) != len(ref):
            raise ValueError(f"{len(gen)} rows of policy log-probs for {len(ref)} reference rows")
        kl = []
        for i, (g, r) in enumerate(zip(gen, ref)):
            if g.shape != r.shape:
                raise ValueError(
                    f"row {i}: {self.gen_log_probs_full_key} has shape {tuple(g.shape)}, "
                    f"{self.ref_log_probs_full_key} has shape {tuple(r.shape)}"
                )
            diff = g - r
            kl.append(torch.where(torch.isnan(g) | torch.isnan(r), torch.zeros_like(diff), diff))
        dense = isinstance(next_tensordict.get(self.gen_log_probs_full_key), torch.Tensor) and not (
            next_tensordict.get(self.gen_log_probs_full_key).is_nested
        )
        next_tensordict.set(
            self.kl_key, torch.stack(kl) if dense else torch.nested.as_nested_tensor(kl)
        )
        if self.add_to_reward:
            rewards = _rows(next_tensordict, "reward")
            if rewards is not None:
                out = []
                for r, k in zip(rewards, kl):
                    if r.ndim != k.ndim + 1:
                        raise ValueError(
                            f"the reward has shape {tuple(r.shape)} per row and the KL "
                            f"{tuple(k.shape)}: the reward needs one more (trailing) dim"
                        )
                    out.append(r - self.coeff * k.unsqueeze(-1))
                next_tensordict.set(
                    "reward", torch.stack(out) if dense else torch.nested.as_nested_tensor(out)
                )
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        next_td = tensordict.get("next", None)
        if next_td is None:
            return self._step(tensordict, tensordict)
        tensordict.set("next", self._step(tensordict, next_td))
        return tensordict

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        observation_spec[self.kl_key] = Unbounded(
            shape=(*observation_spec.shape, -1), device=observation_spec.device
        )
        return observation_spec

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        if self.add_to_reward and "reward" in reward_spec.keys():
            reward_spec["reward"] = Unbounded(
                shape=(*reward_spec.shape, -1, 1), device=reward_spec.device
            )
        return reward_spec


class RetrieveKL(Compose):
    """The policy's and the reference's log-probs, and their KL: a ``Compose`` of two
    :class:`RetrieveLogProb` and a :class:`KLComputation`.

    Args:
        gen_model: the policy, as a scoring wrapper (``generate=False``); TorchRL's
            ``"from_collector"`` (taken from a collector later) is not supported.
        ref_model: the reference model, a scoring wrapper with another ``log_probs_key``.

    Keyword Args:
        gen_model_factory, ref_model_factory (callable, optional): build the models.
        assistant_only (bool): count the assistant's tokens only. Defaults to ``True``.
        gen_log_probs_full_key (NestedKey): defaults to ``("log_probs", "full")``.
        ref_log_probs_full_key (NestedKey): defaults to ``("ref_log_probs", "full")``.
        kl_key (NestedKey): defaults to ``"kl_penalty"``.
        add_to_reward (bool): take ``coeff * kl`` off the reward. Defaults to ``True``.
        coeff (float): defaults to ``1.0``.
        history_key, tokenizer_kwargs, detach, device, tokenizer, padding_side: as
            :class:`RetrieveLogProb`.

    Raises:
        ValueError: a model that generates or has no log-probs; models that differ in
            ``pad_output`` or share a ``log_probs_key``; no model.
        NotImplementedError: ``gen_model="from_collector"``.
    """

    def __init__(
        self,
        gen_model: Any = "from_collector",
        ref_model: Any = None,
        *,
        gen_model_factory: Callable | None = None,
        ref_model_factory: Callable | None = None,
        assistant_only: bool = True,
        history_key: str = "history",
        tokenizer_kwargs: dict[str, Any] | None = None,
        detach: bool = True,
        device: torch.device | None = None,
        tokenizer=None,
        padding_side: str = "left",
        gen_log_probs_full_key: NestedKey = ("log_probs", "full"),
        ref_log_probs_full_key: NestedKey = ("ref_log_probs", "full"),
        kl_key: NestedKey = "kl_penalty",
        add_to_reward: bool = True,
        coeff: float = 1.0,
        use_ray_service: bool = False,
    ):
        if use_ray_service:
            raise NotImplementedError("use_ray_service is not supported")
        if gen_model_factory is not None:
            if gen_model not in (None, "from_collector"):
                raise ValueError("pass gen_model or gen_model_factory, not both")
            gen_model = gen_model_factory()
        if ref_model_factory is not None:
            if ref_model is not None:
                raise ValueError("pass ref_model or ref_model_factory, not both")
            ref_model = ref_model_factory()
        if isinstance(gen_model, str):
            raise NotImplementedError(
                f"gen_model={gen_model!r}: pass the policy as a scoring wrapper (generate=False)"
            )
        if gen_model is None or ref_model is None:
            raise ValueError("RetrieveKL needs a gen_model and a ref_model")
        _check_scorer(gen_model, "generation model")
        _check_scorer(ref_model, "reference model")
        if getattr(gen_model, "pad_output", None) != getattr(ref_model, "pad_output", None):
            raise ValueError(
                f"pad_output differs: gen_model.pad_output={gen_model.pad_output}, "
                f"ref_model.pad_output={ref_model.pad_output}"
            )
        if getattr(gen_model, "log_probs_key", 0) == getattr(ref_model, "log_probs_key", 1):
            raise ValueError(
                "gen_model and ref_model write their log-probs at the same log_probs_key "
                f"{gen_model.log_probs_key!r}: give them different ones"
            )
        common = dict(
            assistant_only=assistant_only,
            tokenizer_kwargs=tokenizer_kwargs,
            detach=detach,
            device=device,
            tokenizer=tokenizer,
            padding_side=padding_side,
        )
        super().__init__(
            RetrieveLogProb(gen_model, log_probs_full_key=gen_log_probs_full_key, **common),
            RetrieveLogProb(ref_model, log_probs_full_key=ref_log_probs_full_key, **common),
            KLComputation(
                gen_log_probs_full_key,
                ref_log_probs_full_key,
                kl_key=kl_key,
                add_to_reward=add_to_reward,
                coeff=coeff,
            ),
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for t in self.transforms:
            tensordict = t(tensordict)
        return tensordict


class KLRewardTransform(_NoPairs, Transform):
    """Takes ``coef * (log p - log q)`` off the reward, per token (TorchRL's older KL
    transform; :class:`RetrieveKL` is the current one).

    After each step, ``ref_model`` (a scoring wrapper with ``input_mode="tokens"``)
    scores the root's ``("tokens", "full")``; the policy's log-probs are read from the
    root at ``log_prob_key``. Writes, in ``"next"``: ``out_keys[0]`` (the reward minus
    ``coef * kl``, ``[*B, T, 1]``), ``out_keys[1]`` (``"kl_penalty"``) and
    ``out_keys[2]`` (``"ref_log_probs"``), both ``[*B, T, 1]``.

    Args:
        ref_model: the reference wrapper.

    Keyword Args:
        ref_model_factory (callable, optional): builds it.
        coef (float): the KL's weight. Defaults to ``1.0``.
        in_keys (list, optional): ``["reward"]``.
        out_keys (list, optional): ``[reward_out, kl_out, ref_log_probs_out]``; defaults
            to ``in_keys + ["kl_penalty", "ref_log_probs"]``.
        log_prob_key (NestedKey): the policy's log-probs. Defaults to
            ``("log_probs", "full")``.
        device (torch.device, optional): moves the model there.
        add_to_reward (bool): write the reward (else the KL only). Defaults to ``True``.
        tokenizer: kept for TorchRL's signature.
        assistant_only (bool): count the response's tokens only (the assistant mask, else
            the tokens past ``("tokens", "prompt")``). Defaults to ``True``.
        padding_side (str): of padded outputs. Defaults to ``"left"``.

    Raises:
        ValueError: a model that generates or does not read tokens, both or neither of
            ``ref_model`` / ``ref_model_factory``, key lists of the wrong length, or
            log-prob rows of different lengths.
    """

    DEFAULT_IN_KEYS = ["reward"]

    def __init__(
        self,
        ref_model=None,
        *,
        ref_model_factory: Callable | None = None,
        coef: float = 1.0,
        in_keys: list[NestedKey] | None = None,
        out_keys: list[NestedKey] | None = None,
        log_prob_key: NestedKey = ("log_probs", "full"),
        device: torch.device | None = None,
        add_to_reward: bool = True,
        tokenizer=None,
        assistant_only: bool = True,
        padding_side: str = "left",
        use_ray_service: bool = False,
    ):
        if use_ray_service:
            raise NotImplementedError("use_ray_service is not supported")
        if (ref_model is None) == (ref_model_factory is None):
            raise ValueError("KLRewardTransform takes exactly one of ref_model / ref_model_factory")
        if ref_model_factory is not None:
            ref_model = ref_model_factory()
        in_keys = list(self.DEFAULT_IN_KEYS if in_keys is None else in_keys)
        out_keys = list(in_keys if out_keys is None else out_keys)
        if len(out_keys) == len(in_keys):
            out_keys = out_keys + ["kl_penalty", "ref_log_probs"]
        if len(in_keys) != 1 or len(out_keys) != 3:
            raise ValueError(
                f"KLRewardTransform takes one in_key and three out_keys (reward, kl, ref "
                f"log-probs), got in_keys={in_keys}, out_keys={out_keys}"
            )
        if getattr(ref_model, "generate", False):
            raise ValueError("the ref_model must score, not generate: build it with generate=False")
        if getattr(ref_model, "input_mode", "tokens") != "tokens":
            raise ValueError(
                f"the ref_model must read tokens (input_mode='tokens'), got "
                f"input_mode={ref_model.input_mode!r}"
            )
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        if device is not None:
            ref_model = ref_model.to(device)
        self.ref_model = ref_model
        self.log_prob_full_key = log_prob_key
        self.add_to_reward = add_to_reward
        self.assistant_only = assistant_only
        self.padding_side = padding_side
        self._tokenizer = tokenizer
        self.register_buffer("coef", torch.as_tensor(coef))

    @property
    def action_key(self) -> NestedKey:
        return (input_mode_of(self, "tokens"), "full")

    def _mask(self, tensordict: TensorDictBase, lengths: list[int]) -> list[torch.Tensor]:
        masks = _rows(tensordict, ("masks", "all_assistant_mask"))
        if masks is not None:
            return [m.bool() for m in masks]
        prompts = _rows(tensordict, ("tokens", "prompt"))
        if prompts is None:
            raise KeyError(
                "assistant_only=True needs ('masks', 'all_assistant_mask') or ('tokens', 'prompt')"
            )
        return [torch.arange(n) >= p.numel() for n, p in zip(lengths, prompts)]

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.get(self.action_key, None) is None:
            raise KeyError(
                f"KLRewardTransform reads the policy's sequence at {self.action_key!r}, missing"
            )
        with torch.no_grad():
            ref_out = self.ref_model(tensordict.copy())
        ref = _rows(ref_out, (*_as_tuple(self.ref_model.log_probs_key), "full"))
        cur = _rows(tensordict, self.log_prob_full_key)
        if cur is None:
            raise KeyError(
                f"KLRewardTransform reads the policy's log-probs at {self.log_prob_full_key!r}"
            )
        if self.assistant_only:
            masks = self._mask(tensordict, [r.numel() for r in cur])
            ref = [r.masked_fill(~m, 0.0) for r, m in zip(ref, masks)]
            cur = [r.masked_fill(~m, 0.0) for r, m in zip(cur, masks)]
        kl = []
        for i, (c, r) in enumerate(zip(cur, ref)):
            if c.shape != r.shape:
                raise ValueError(
                    f"row {i}: the policy's log-probs have shape {tuple(c.shape)}, the "
                    f"reference's {tuple(r.shape)} (is the pad token the eos token?)"
                )
            kl.append((c - r).unsqueeze(-1))
        padded = bool(getattr(self.ref_model, "pad_output", False))
        if self.add_to_reward:
            rewards = _rows(next_tensordict, self.in_keys[0])
            if rewards is None:
                rewards = [torch.zeros(()) for _ in kl]
            out = []
            for rew, k in zip(rewards, kl):
                if rew.ndim and rew.ndim != k.ndim:
                    raise ValueError(
                        f"the reward has {rew.ndim} dims per row, the KL {k.ndim} ([T, 1])"
                    )
                out.append(rew - self.coef * k)
            next_tensordict.set(self.out_keys[0], _pack(out, padded, self.padding_side))
        next_tensordict.set(self.out_keys[1], _pack(kl, padded, self.padding_side))
        next_tensordict.set(
            self.out_keys[2], _pack([r.unsqueeze(-1) for r in ref], padded, self.padding_side)
        )
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        next_td = tensordict.get("next")
        tensordict.set("next", self._step(tensordict, next_td))
        return tensordict

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        key = self.out_keys[0]
        if self.add_to_reward:
            reward_spec[key] = Unbounded(
                shape=(*reward_spec.shape, -1, 1), device=reward_spec.device
            )
        return reward_spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for key in self.out_keys[1:]:
            observation_spec[key] = Unbounded(
                shape=(*observation_spec.shape, -1, 1), device=observation_spec.device
            )
        return observation_spec
