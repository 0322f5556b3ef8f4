"""VLAWrapperBase: the TensorDict contract every Vision-Language-Action policy keeps."""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, TensorDictModuleBase
from tensordict.nn.probabilistic import interaction_type
from tensordict.utils import NestedKey
from torch import distributions as D

from rl.core.vla import (
    ACTION_KEY,
    IMAGE_KEY,
    INSTRUCTION_KEY,
    STATE_KEY,
    VLA_ACTION_KEY,
    ActionTokenizerBase,
    VLAAction,
    VLAObservation,
)

__all__ = ["VLAWrapperBase"]

ActionHead = Literal["continuous", "tokens"]
InputMode = Literal["canonical", "preprocessed"]
LogProbsMode = Literal["sequence", "token"]
OutputMode = Literal["chunk", "tokens", "both"]
SamplingMode = Literal["greedy", "sample"]

# the key fields that default to a field of the VLA action group, and that field's name
_ACTION_FIELDS = {
    "action_chunk": "chunk",
    "action_tokens": "tokens",
    "action_logits": "logits",
    "action_mask": "mask",
    "log_probs": "log_probs",
}


def _under(group: NestedKey, field: str) -> tuple:
    return (group, field) if isinstance(group, str) else (*group, field)


def _as_tuple(key: NestedKey) -> tuple:
    return (key,) if isinstance(key, str) else tuple(key)


class VLAWrapperBase(TensorDictModuleBase):
    """Base class of TensorDict Vision-Language-Action (VLA) policies.

    A VLA policy maps camera images, an optional proprioceptive state and a language
    instruction to a continuous action chunk ``[*B, chunk_size, action_dim]`` (the
    ``"continuous"`` head) or to discrete action tokens of the same shape drawn from
    per-token logits ``[*B, chunk_size, action_dim, vocab_size]`` (the ``"tokens"``
    head, RT-2 / OpenVLA style). Outputs go to a :class:`~rl.core.vla.VLAAction`
    container at ``"vla_action"``, whose fields are ordinary nested keys:
    ``td["vla_action"].chunk`` is ``td["vla_action", "chunk"]``.

    A subclass implements one hook, :meth:`_predict`, returning the flat head output
    (``[*B, chunk_size * action_dim]`` or ``[*B, chunk_size * action_dim *
    vocab_size]``); it reads its inputs with :meth:`_get_image`, :meth:`_get_state`
    and :meth:`_get_instruction`, which follow ``input_mode``.

    The token head reads out argmax tokens under a deterministic exploration type and
    samples under :attr:`~rl.core.ExplorationType.RANDOM`; outside any
    :func:`~rl.core.set_exploration_type` context ``default_interaction_type`` decides.
    A boolean mask at the ``action_mask`` key (``True`` = allowed) is applied to the
    logits before sampling.

    Args:
        model: the wrapped network, kept as :attr:`model` for a subclass's hook.

    Keyword Args:
        processor: the model's input processor, kept as :attr:`processor` for a
            subclass's hook.
        input_mode (str): ``"canonical"`` reads the image, state and instruction
            keys; ``"preprocessed"`` reads a :class:`~rl.core.vla.VLAObservation`
            (its ``preprocessed`` group first, when set) or a TensorDict at
            ``observation_key``. Defaults to ``"canonical"``.
        output_mode (str, optional): ``"chunk"``, ``"tokens"`` or ``"both"``.
            Defaults to ``"chunk"`` for the continuous head, ``"tokens"`` for the
            token head. A chunk from tokens (or tokens from a chunk) needs
            ``action_tokenizer``.
        return_vla_action_container (bool): write the :class:`~rl.core.vla.VLAAction`
            container at ``vla_action_key``; ``False`` writes plain nested entries.
            Defaults to ``True``.
        action_dim (int): the size of one action.
        chunk_size (int): the number of actions predicted at once.
        action_head (str): ``"continuous"`` or ``"tokens"``. Defaults to
            ``"continuous"``.
        vocab_size (int, optional): the number of bins per action dim (required by
            the token head).
        action_tokenizer (ActionTokenizerBase, optional): converts between chunks and
            tokens when ``output_mode`` asks for the other representation.
        action_kwargs (dict, optional): extra keyword arguments for a subclass's model
            call, kept as :attr:`action_kwargs`.
        return_log_probs (bool, optional): write the log-probability of the chosen
            tokens. Defaults to ``True`` for the token head.
        return_logits (bool): write the token logits. Defaults to ``False``.
        logits_only (bool): the token head writes its logits and draws nothing
            (also per call: ``policy(td, logits_only=True)``). Defaults to ``False``.
        use_state (bool): read the state key in canonical mode. Defaults to ``True``.
        default_interaction_type (InteractionType): the token read-out outside an
            exploration context. Defaults to ``InteractionType.DETERMINISTIC``.
        log_probs_mode (str): ``"sequence"`` sums the log-probabilities over the
            chunk (one per sample, ``[*B]``); ``"token"`` keeps them per token
            (``[*B, chunk_size, action_dim]``). Defaults to ``"sequence"``.
        mode (str, optional): older spelling of ``default_interaction_type``:
            ``"sample"`` is RANDOM, ``"greedy"`` DETERMINISTIC.
        image_key, wrist_image_key, state_key, instruction_key, observation_key,
            action_key, vla_action_key (NestedKey): the keys read and written.
        action_chunk_key, action_tokens_key, action_logits_key, action_mask_key,
            log_probs_key (NestedKey, optional): the output fields; by default the
            fields of ``vla_action_key`` (``("vla_action", "chunk")``, ...).
        inplace (bool or "empty"): ``True`` writes into the input tensordict,
            ``False`` returns a new tensordict of the outputs, ``"empty"`` returns an
            empty tensordict holding the outputs. Defaults to ``True``.
        device (torch.device, optional): the policy's device.
        num_samples (int, optional): draw this many token sequences per input; the
            outputs get a sample dim right after the batch dims.

    Raises:
        ValueError: on an unknown ``action_head``, ``input_mode``, ``output_mode``,
            ``mode``, ``log_probs_mode`` or ``inplace``, a
            ``default_interaction_type`` that is not an ``InteractionType``, a token
            head without ``vocab_size``, or ``num_samples < 1``.

    Examples:
        >>> import torch
        >>> from tensordict import NonTensorStack, TensorDict
        >>> from rl.modules import TinyVLA
        >>> policy = TinyVLA(action_dim=7, chunk_size=4)
        >>> td = TensorDict(
        ...     {
        ...         "observation": {
        ...             "image": torch.zeros(2, 3, 16, 16, dtype=torch.uint8),
        ...             "state": torch.zeros(2, 5),
        ...         },
        ...         "language_instruction": NonTensorStack("pick", "place"),
        ...     },
        ...     batch_size=[2],
        ... )
        >>> policy(td)["vla_action", "chunk"].shape
        torch.Size([2, 4, 7])
    """

    @dataclass
    class _AcceptedKeys:
        """The keys a VLA policy reads and writes (remap them with ``set_keys``)."""

        image: NestedKey = IMAGE_KEY
        wrist_image: NestedKey | None = ("observation", "wrist_image")
        state: NestedKey | None = STATE_KEY
        instruction: NestedKey = INSTRUCTION_KEY
        observation: NestedKey = "vla_observation"
        action: NestedKey = ACTION_KEY
        vla_action: NestedKey = VLA_ACTION_KEY
        action_chunk: NestedKey = (VLA_ACTION_KEY, "chunk")
        action_tokens: NestedKey = (VLA_ACTION_KEY, "tokens")
        action_logits: NestedKey = (VLA_ACTION_KEY, "logits")
        action_mask: NestedKey = (VLA_ACTION_KEY, "mask")
        log_probs: NestedKey = (VLA_ACTION_KEY, "log_probs")

    def __init__(
        self,
        model=None,
        *,
        processor=None,
        input_mode: InputMode = "canonical",
        output_mode: OutputMode | None = None,
        return_vla_action_container: bool = True,
        action_dim: int,
        chunk_size: int,
        action_head: ActionHead = "continuous",
        vocab_size: int | None = None,
        action_tokenizer: ActionTokenizerBase | None = None,
        action_kwargs: dict | None = None,
        return_log_probs: bool | None = None,
        return_logits: bool = False,
        logits_only: bool = False,
        use_state: bool = True,
        default_interaction_type: InteractionType = InteractionType.DETERMINISTIC,
        log_probs_mode: LogProbsMode = "sequence",
        mode: SamplingMode | None = None,
        image_key: NestedKey = IMAGE_KEY,
        wrist_image_key: NestedKey | None = ("observation", "wrist_image"),
        state_key: NestedKey | None = STATE_KEY,
        instruction_key: NestedKey = INSTRUCTION_KEY,
        observation_key: NestedKey = "vla_observation",
        action_key: NestedKey = ACTION_KEY,
        vla_action_key: NestedKey = VLA_ACTION_KEY,
        action_chunk_key: NestedKey | None = None,
        action_tokens_key: NestedKey | None = None,
        action_logits_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        log_probs_key: NestedKey | None = None,
        inplace: Literal[True, False, "empty"] | None = True,
        device: torch.device | str | None = None,
        num_samples: int | None = None,
    ) -> None:
        super().__init__()
        if action_head not in ("continuous", "tokens"):
            raise ValueError(f"action_head must be 'continuous' or 'tokens', got {action_head!r}.")
        if input_mode not in ("canonical", "preprocessed"):
            raise ValueError(
                f"input_mode must be 'canonical' or 'preprocessed', got {input_mode!r}."
            )
        if output_mode is None:
            output_mode = "chunk" if action_head == "continuous" else "tokens"
        if output_mode not in ("chunk", "tokens", "both"):
            raise ValueError(
                f"output_mode must be 'chunk', 'tokens' or 'both', got {output_mode!r}."
            )
        if action_head == "tokens" and vocab_size is None:
            raise ValueError(
                "the 'tokens' action head needs vocab_size (the number of bins), got None."
            )
        if mode is not None:
            readouts = {"sample": InteractionType.RANDOM, "greedy": InteractionType.DETERMINISTIC}
            if mode not in readouts:
                raise ValueError(f"mode must be 'greedy' or 'sample', got {mode!r}.")
            default_interaction_type = readouts[mode]
        if not isinstance(default_interaction_type, InteractionType):
            raise ValueError(
                f"default_interaction_type must be an InteractionType, got {default_interaction_type!r}."
            )
        if log_probs_mode not in ("sequence", "token"):
            raise ValueError(
                f"log_probs_mode must be 'sequence' or 'token', got {log_probs_mode!r}."
            )
        if inplace not in (True, False, "empty", None):
            raise ValueError(f"inplace must be True, False, 'empty' or None, got {inplace!r}.")
        if num_samples is not None and int(num_samples) < 1:
            raise ValueError(f"num_samples must be at least 1, got {num_samples}.")
        self.model = model
        self.processor = processor
        self.action_dim = int(action_dim)
        self.chunk_size = int(chunk_size)
        self.action_head = action_head
        self.input_mode = input_mode
        self.output_mode = output_mode
        self.return_vla_action_container = bool(return_vla_action_container)
        self.vocab_size = None if vocab_size is None else int(vocab_size)
        self.action_tokenizer = action_tokenizer
        self.action_kwargs = dict(action_kwargs or {})
        self.return_log_probs = (
            action_head == "tokens" if return_log_probs is None else bool(return_log_probs)
        )
        self.return_logits = bool(return_logits)
        self.logits_only = bool(logits_only)
        self.use_state = bool(use_state)
        self.default_interaction_type = default_interaction_type
        self.log_probs_mode = log_probs_mode
        self.inplace = True if inplace is None else inplace
        self.device = None if device is None else torch.device(device)
        self.num_samples = None if num_samples is None else int(num_samples)
        field_keys = {
            "action_chunk": action_chunk_key,
            "action_tokens": action_tokens_key,
            "action_logits": action_logits_key,
            "action_mask": action_mask_key,
            "log_probs": log_probs_key,
        }
        for name, key in field_keys.items():
            if key is None:
                field_keys[name] = _under(vla_action_key, _ACTION_FIELDS[name])
        self._tensor_keys = self._AcceptedKeys(
            image=image_key,
            wrist_image=wrist_image_key,
            state=state_key,
            instruction=instruction_key,
            observation=observation_key,
            action=action_key,
            vla_action=vla_action_key,
            **field_keys,
        )
        self._update_keys()

    # -- keys ---------------------------------------------------------------
    @property
    def tensor_keys(self) -> _AcceptedKeys:
        """The keys this policy reads and writes."""
        return self._tensor_keys

    def set_keys(self, **kwargs) -> VLAWrapperBase:
        """Remaps the keys; the output fields follow a new ``vla_action`` group.

        An output field (``action_chunk``, ...) still at its default place under the
        old group moves under the new one unless it is given too.

        Raises:
            ValueError: for a name that is not a key field.
        """
        accepted = [f.name for f in fields(self._AcceptedKeys)]
        for name in kwargs:
            if name not in accepted:
                raise ValueError(f"{name!r} is not an accepted key; accepted keys are {accepted}.")
        old_group = self._tensor_keys.vla_action
        for name, value in kwargs.items():
            setattr(self._tensor_keys, name, value)
        if "vla_action" in kwargs:
            new_group = self._tensor_keys.vla_action
            for name, field in _ACTION_FIELDS.items():
                if name not in kwargs and getattr(self._tensor_keys, name) == _under(
                    old_group, field
                ):
                    setattr(self._tensor_keys, name, _under(new_group, field))
        self._update_keys()
        return self

    def _update_keys(self) -> None:
        keys = self._tensor_keys
        if self.input_mode == "canonical":
            in_keys = [keys.image]
            if self.use_state and keys.state is not None:
                in_keys.append(keys.state)
            in_keys.append(keys.instruction)
        else:
            in_keys = [keys.observation]
        self.in_keys = in_keys
        if self.action_head == "tokens" and self.logits_only:
            self.out_keys = [keys.action_logits]
            return
        out_keys = []
        if self.output_mode in ("chunk", "both"):
            out_keys.append(keys.action_chunk)
        if self.output_mode in ("tokens", "both"):
            out_keys.append(keys.action_tokens)
        if self.action_head == "tokens":
            if self.return_log_probs:
                out_keys.append(keys.log_probs)
            if self.return_logits:
                out_keys.append(keys.action_logits)
        self.out_keys = out_keys

    # -- inputs -------------------------------------------------------------
    def _observation(self, tensordict: TensorDictBase):
        obs = tensordict.get(self._tensor_keys.observation)
        if isinstance(obs, VLAObservation) and obs.preprocessed is not None:
            return obs.preprocessed
        if not isinstance(obs, (VLAObservation, TensorDictBase)):
            raise TypeError(
                f"input_mode='preprocessed' reads a VLAObservation or a TensorDict at "
                f"{self._tensor_keys.observation!r}, got {type(obs).__name__}."
            )
        return obs

    def _read(self, tensordict: TensorDictBase, key: NestedKey | None, short: str):
        """A canonical key, or in a preprocessed observation that key, else ``short``."""
        if self.input_mode == "canonical":
            return tensordict.get(key)
        obs = self._observation(tensordict)
        value = obs.get(key, None) if key is not None else None
        return obs.get(short) if value is None else value

    def _get_image(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The primary camera image, ``[*B, C, H, W]``."""
        if self.input_mode == "preprocessed":
            obs = self._observation(tensordict)
            if isinstance(obs, VLAObservation):
                if obs.images is None or obs.images.image is None:
                    raise KeyError(
                        "the preprocessed VLAObservation has no primary image (images.image)."
                    )
                return obs.images.image
        return self._read(tensordict, self._tensor_keys.image, "image")

    def _get_state(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The proprioceptive state, ``[*B, S]``."""
        if self.input_mode == "preprocessed" and isinstance(
            self._observation(tensordict), VLAObservation
        ):
            return self._observation(tensordict).state
        return self._read(tensordict, self._tensor_keys.state, "state")

    def _get_instruction(self, tensordict: TensorDictBase):
        """The language instruction (non-tensor strings, or token ids)."""
        if self.input_mode == "preprocessed" and isinstance(
            self._observation(tensordict), VLAObservation
        ):
            return self._observation(tensordict).instruction
        return self._read(tensordict, self._tensor_keys.instruction, "instruction")

    # -- the hook -----------------------------------------------------------
    def _predict(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The flat head output: ``[*B, chunk_size * action_dim (* vocab_size)]``."""
        raise NotImplementedError(f"{type(self).__name__} must implement _predict(tensordict).")

    def _predict_chunk(self, tensordict: TensorDictBase) -> torch.Tensor:
        return self._predict(tensordict).unflatten(-1, (self.chunk_size, self.action_dim))

    def _action_logits(self, tensordict: TensorDictBase) -> torch.Tensor:
        return self._predict(tensordict).unflatten(
            -1, (self.chunk_size, self.action_dim, self.vocab_size)
        )

    # -- token distribution -------------------------------------------------
    def _dist(self, logits: torch.Tensor, mask: torch.Tensor | None) -> D.Distribution:
        if mask is not None:
            logits = logits.masked_fill(~mask.to(torch.bool), float("-inf"))
        dist = D.Categorical(logits=logits)
        # "sequence": the chunk and action dims are event dims, so log_prob sums them
        return D.Independent(dist, 2) if self.log_probs_mode == "sequence" else dist

    def _with_samples(self, x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """``x`` repeated along a sample dim placed right after the batch dims."""
        b = logits.ndim - 3
        return x.unsqueeze(b).expand(*x.shape[:b], self.num_samples, *x.shape[b:])

    def _draw(self, dist: D.Distribution, logits: torch.Tensor) -> torch.Tensor:
        readout = interaction_type() or self.default_interaction_type
        if readout != InteractionType.RANDOM:
            greedy = logits.argmax(-1)
            return greedy if self.num_samples is None else self._with_samples(greedy, logits)
        if self.num_samples is None:
            return dist.sample()
        return dist.sample((self.num_samples,)).movedim(0, logits.ndim - 3)

    def _token_log_prob(
        self, dist: D.Distribution, tokens: torch.Tensor, logits: torch.Tensor
    ) -> torch.Tensor:
        if tokens.ndim == logits.ndim - 1:
            return dist.log_prob(tokens)
        # tokens carry a sample dim after the batch dims: move it first to broadcast
        b = logits.ndim - 3
        return dist.log_prob(tokens.movedim(b, 0)).movedim(0, b)

    # -- outputs ------------------------------------------------------------
    def _write(self, out: TensorDictBase, **values: torch.Tensor | None) -> None:
        """Write outputs as a VLAAction container and/or at their own keys."""
        keys = self._tensor_keys
        if self.return_vla_action_container:
            out.set(
                keys.vla_action, VLAAction(**values, batch_size=out.batch_size, device=out.device)
            )
        for field, value in values.items():
            if value is None:
                continue
            name = next(n for n, f in _ACTION_FIELDS.items() if f == field)
            key = getattr(keys, name)
            in_container = self.return_vla_action_container and key == _under(
                keys.vla_action, field
            )
            if not in_container:
                out.set(key, value)

    def _finish(
        self, tensordict: TensorDictBase, out: TensorDictBase, tensordict_out
    ) -> TensorDictBase:
        if tensordict_out is None:
            if self.inplace is False:
                return out
            if self.inplace is True:
                tensordict_out = tensordict
            else:
                tensordict_out = TensorDict({}, batch_size=out.batch_size, device=out.device)
        if tensordict_out is out:
            return out
        group = self._tensor_keys.vla_action
        value = out.get(group, None)
        if value is not None:
            tensordict_out.set(group, value)
        prefix = _as_tuple(group)
        for key in out.keys(True, True):
            if _as_tuple(key)[: len(prefix)] != prefix:
                tensordict_out.set(key, out.get(key))
        return tensordict_out

    def forward(
        self,
        tensordict: TensorDictBase,
        *,
        tensordict_out: TensorDictBase | None = None,
        logits_only: bool = False,
        **kwargs,
    ) -> TensorDictBase:
        """Predict an action chunk or draw action tokens.

        Args:
            tensordict: the inputs (``in_keys``).

        Keyword Args:
            tensordict_out: write the outputs here instead (overrides ``inplace``).
            logits_only: the token head writes its logits only, as the
                ``logits_only`` constructor argument.

        Raises:
            RuntimeError: when ``output_mode`` needs a conversion between chunks and
                tokens and no ``action_tokenizer`` was given.
        """
        if self.action_head == "continuous":
            chunk = self._predict_chunk(tensordict)
            tokens = None
            if self.output_mode in ("tokens", "both"):
                tokens = self._tokenizer("action tokens").encode(chunk)
            out = TensorDict({}, batch_size=chunk.shape[:-2], device=chunk.device)
            self._write(out, chunk=chunk if self.output_mode != "tokens" else None, tokens=tokens)
            return self._finish(tensordict, out, tensordict_out)

        logits = self._action_logits(tensordict)
        mask = tensordict.get(self._tensor_keys.action_mask, None)
        if self.logits_only or logits_only:
            out = TensorDict({}, batch_size=logits.shape[:-3], device=logits.device)
            self._write(out, logits=logits, mask=mask)
            return self._finish(tensordict, out, tensordict_out)
        dist = self._dist(logits, mask)
        tokens = self._draw(dist, logits)
        log_probs = self._token_log_prob(dist, tokens, logits) if self.return_log_probs else None
        chunk = None
        if self.output_mode in ("chunk", "both"):
            chunk = self._tokenizer("decoded chunks").decode(tokens)
        logits_out = logits if self.return_logits else None
        if self.num_samples is not None:
            logits_out = None if logits_out is None else self._with_samples(logits_out, logits)
            mask = None if mask is None else self._with_samples(mask, logits)
        out = TensorDict({}, batch_size=tokens.shape[:-2], device=tokens.device)
        self._write(
            out,
            chunk=chunk,
            tokens=tokens if self.output_mode != "chunk" else None,
            logits=logits_out,
            log_probs=log_probs,
            mask=mask,
        )
        return self._finish(tensordict, out, tensordict_out)

    def _tokenizer(self, what: str) -> ActionTokenizerBase:
        if self.action_tokenizer is None:
            raise RuntimeError(
                f"output_mode={self.output_mode!r} needs {what} but no action_tokenizer was provided."
            )
        return self.action_tokenizer

    def get_dist(
        self,
        tensordict: TensorDictBase,
        *,
        tensordict_out: TensorDictBase | None = None,
        logits_key: NestedKey | None = None,
        mask_key: NestedKey | None = None,
        **kwargs,
    ) -> D.Distribution:
        """The action-token distribution, from stored logits or a new forward pass.

        Logits are read at ``logits_key`` (default: the ``action_logits`` key) in
        ``tensordict_out`` then ``tensordict``, else recomputed; a mask at
        ``mask_key`` is applied.

        Raises:
            RuntimeError: for the continuous head (a deterministic regressor).
        """
        if self.action_head != "tokens":
            raise RuntimeError(
                "get_dist is only defined for the 'tokens' action head; the 'continuous' head is "
                "a deterministic regressor."
            )
        logits_key = self._tensor_keys.action_logits if logits_key is None else logits_key
        mask_key = self._tensor_keys.action_mask if mask_key is None else mask_key
        sources = [td for td in (tensordict_out, tensordict) if td is not None]
        logits = next(
            (td.get(logits_key) for td in sources if td.get(logits_key, None) is not None), None
        )
        if logits is None:
            logits = self._action_logits(tensordict)
        mask = next(
            (td.get(mask_key) for td in sources if td.get(mask_key, None) is not None), None
        )
        return self._dist(logits, mask)

    def log_prob(
        self,
        tensordict: TensorDictBase,
        *,
        action_key: NestedKey | None = None,
        log_probs_key: NestedKey | None = None,
        **kwargs,
    ) -> TensorDictBase:
        """Recompute the log-probability of stored tokens and write it.

        Args:
            tensordict: holds the tokens (``action_key``, default the
                ``action_tokens`` key) and the policy's inputs (or stored logits).

        Returns:
            ``tensordict`` with the log-probabilities at ``log_probs_key``.

        Raises:
            RuntimeError: for the continuous head.
        """
        if self.action_head != "tokens":
            raise RuntimeError("log_prob is only defined for the 'tokens' action head.")
        action_key = self._tensor_keys.action_tokens if action_key is None else action_key
        log_probs_key = self._tensor_keys.log_probs if log_probs_key is None else log_probs_key
        tokens = tensordict.get(action_key)
        logits = tensordict.get(self._tensor_keys.action_logits, None)
        if logits is None:
            logits = self._action_logits(tensordict)
        dist = self._dist(logits, tensordict.get(self._tensor_keys.action_mask, None))
        log_probs = self._token_log_prob(dist, tokens, logits)
        tensordict.set(log_probs_key, log_probs)
        container = tensordict.get(self._tensor_keys.vla_action, None)
        if isinstance(container, VLAAction):
            container.log_probs = log_probs
        return tensordict

    def get_new_version(self, **kwargs) -> VLAWrapperBase:
        """A copy sharing the weights, with some attributes or keys changed.

        Keyword Args:
            <attribute>: any attribute (``inplace=False``, ``num_samples=4``, ...).
            <field>_key: a key field (``action_chunk_key=("pred", "a")``).

        Raises:
            TypeError: for a name that is neither an attribute nor a key field.
        """
        new = copy.copy(self)
        new._modules = dict(self._modules)
        new._parameters = dict(self._parameters)
        new._buffers = dict(self._buffers)
        new._tensor_keys = copy.copy(self._tensor_keys)
        key_fields = {f.name for f in fields(self._AcceptedKeys)}
        for name, value in kwargs.items():
            if name.endswith("_key") and name[: -len("_key")] in key_fields:
                setattr(new._tensor_keys, name[: -len("_key")], value)
            elif hasattr(new, name):
                setattr(new, name, value)
            else:
                raise TypeError(f"{type(self).__name__} has no parameter {name!r}.")
        new._update_keys()
        return new
