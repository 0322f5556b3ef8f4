"""DreamerV3's recurrent state-space model (RSSM) with a discrete categorical latent.

The deterministic *belief* ``h`` is advanced by a recurrent core from the previous
stochastic *state* ``z`` and action ``a``: ``h_t = f(h_{t-1}, z_{t-1}, a_{t-1})``. The
*prior* predicts ``z_t ~ Cat(p(h_t))`` (used in imagination); the *posterior* also sees
the encoded observation: ``z_t ~ Cat(q(h_t, e_t))``. ``z`` is ``num_categoricals``
one-hot vectors of ``num_classes``, flattened, sampled with straight-through gradients.
Hafner et al., 2023, https://arxiv.org/abs/2301.04104.
"""

from __future__ import annotations

from typing import Literal

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from tensordict.utils import NestedKey, unravel_key
from torch import nn

from ._dreamer_v3_nets import (
    _block_gru_update,
    _BlockLinear,
    _dreamer_v3_init,
    _norm_silu_layers,
    _RMSNorm,
)

__all__ = ["RSSMPosteriorV3", "RSSMPriorV3", "RSSMRolloutV3", "RSSMStateEstimatorV3"]


def _unimix_probs(logits: torch.Tensor, unimix: float) -> torch.Tensor:
    """``softmax(logits)`` mixed with a fraction ``unimix`` of the uniform distribution."""
    probs = torch.softmax(logits, dim=-1)
    if unimix:
        probs = (1 - unimix) * probs + unimix / logits.shape[-1]
    return probs


def _check_unimix(unimix: float) -> None:
    if not 0 <= unimix < 1:
        raise ValueError(f"unimix must be in [0, 1), got {unimix}.")


def _straight_through_sample(logits: torch.Tensor, unimix: float) -> torch.Tensor:
    """A one-hot sample of each categorical of ``logits [..., C, K]``, flattened to ``C*K``.

    The forward value is the one-hot sample; its gradient is the one of the probabilities.
    The class is drawn by inverting the cumulative probabilities at one uniform number per
    categorical (class ``k`` when ``cdf[k-1] <= u < cdf[k]``): the distribution of
    ``torch.multinomial``, at a sixth of its CPU cost on the small categoricals of an RSSM.
    """
    probs = _unimix_probs(logits, unimix)
    cdf = probs.detach().cumsum(-1)
    uniform = torch.rand(*probs.shape[:-1], 1, dtype=cdf.dtype, device=cdf.device)
    # a cdf that rounds below 1 could place u past its end: that u goes to the last class
    index = torch.searchsorted(cdf, uniform, right=True).clamp_max_(probs.shape[-1] - 1)
    one_hot = torch.zeros_like(probs).scatter_(-1, index, 1.0)
    sample = probs + (one_hot - probs).detach()
    return sample.flatten(-2)


def _check_last_dim(name: str, value: torch.Tensor, expected: int, what: str) -> None:
    if value.shape[-1] != expected:
        raise ValueError(
            f"{name} has shape {tuple(value.shape)}, expected a last dim of {expected} ({what})."
        )


class _PriorBlockGRU(nn.Module):
    """The prior's block GRU: belief, state and action each projected, then the block update."""

    def __init__(
        self,
        *,
        state_dim: int,
        action_dim: int,
        hidden_dim: int,
        belief_dim: int,
        num_blocks: int,
        num_layers: int,
        norm_eps: float,
        device=None,
    ) -> None:
        super().__init__()
        if belief_dim % num_blocks:
            raise ValueError(
                f"rnn_hidden_dim must be divisible by num_blocks, got {belief_dim} and "
                f"{num_blocks}."
            )
        self.num_blocks = num_blocks
        self.belief_projection = nn.Sequential(
            *_norm_silu_layers([belief_dim, hidden_dim], norm_eps, device)
        )
        self.state_projection = nn.Sequential(
            *_norm_silu_layers([state_dim, hidden_dim], norm_eps, device)
        )
        self.action_projection = nn.Sequential(
            *_norm_silu_layers([action_dim, hidden_dim], norm_eps, device)
        )
        layers: list[nn.Module] = []
        fan_in = belief_dim + 3 * hidden_dim * num_blocks
        for _ in range(num_layers):
            layers += [
                _BlockLinear(fan_in, belief_dim, num_blocks, device=device),
                _RMSNorm(belief_dim, norm_eps, device=device),
                nn.SiLU(),
            ]
            fan_in = belief_dim
        self.hidden_layers = nn.Sequential(*layers)
        self.gates = _BlockLinear(belief_dim, 3 * belief_dim, num_blocks, device=device)
        self.apply(_dreamer_v3_init)

    def forward(self, state: torch.Tensor, belief: torch.Tensor, action: torch.Tensor):
        # actions beyond [-1, 1] are scaled back onto the unit box (no gradient to the scale)
        action = action / action.detach().abs().clamp_min(1)
        features = torch.cat(
            [
                self.belief_projection(belief),
                self.state_projection(state),
                self.action_projection(action),
            ],
            -1,
        )
        return _block_gru_update(
            features, belief, self.hidden_layers, self.gates, self.num_blocks, -1.0
        )


class RSSMPriorV3(nn.Module):
    """DreamerV3's prior: the recurrent core then the categorical prior head.

    ``h_t = f(h_{t-1}, [z_{t-1}, a_{t-1}])`` and ``z_t ~ Cat(MLP(h_t))``.

    Args:
        action_spec (TensorSpec, optional): only its ``shape`` is read; exclusive with
            ``action_shape``.
        hidden_dim (int, optional): width of the projections. Defaults to ``512``.
        rnn_hidden_dim (int, optional): belief size. Defaults to ``512``.
        num_categoricals (int, optional): categoricals of the latent. Defaults to ``32``.
        num_classes (int, optional): classes per categorical. Defaults to ``32``.
        action_dim (int, optional): action size; without it the ``"gru"`` core's input
            layer is lazy. Required by ``"block_gru"``.
        device (torch.device, optional): parameter device.

    Keyword Args:
        action_shape (torch.Size, optional): the action shape; exclusive with
            ``action_spec``.
        recurrent_model (str, optional): ``"gru"`` (a linear + SiLU projection of
            ``[z, a]`` into :class:`torch.nn.GRUCell`, TorchRL's historical core) or
            ``"block_gru"`` (the reference block-diagonal GRU with RMS-normalised
            projections and an RMS-normalised prior head). Defaults to ``"gru"``.
        num_blocks (int, optional): block-GRU groups. Defaults to ``8``.
        num_layers (int, optional): block-linear layers of the block GRU. Defaults to ``1``.
        prior_num_layers (int, optional): hidden layers of the block-GRU prior head.
            Defaults to ``2``.
        norm_eps (float, optional): RMSNorm epsilon. Defaults to ``1e-4``.
        unimix (float, optional): uniform fraction mixed into the sampled categoricals,
            in ``[0, 1)``. Defaults to ``0.0``.

    Returns (from ``forward(state, belief, action)``):
        ``(prior_logits [*B, C, K], state [*B, C*K], belief [*B, rnn_hidden_dim])``.

    Raises:
        ValueError: on conflicting or out-of-range arguments, and (in ``forward``) on a
            state, belief or action whose last dim is not the model's.

    Examples:
        >>> import torch
        >>> from rl.modules import RSSMPriorV3
        >>> prior = RSSMPriorV3(action_shape=torch.Size([2]), hidden_dim=16, rnn_hidden_dim=8,
        ...                     num_categoricals=4, num_classes=4, action_dim=2)
        >>> logits, state, belief = prior(torch.zeros(3, 16), torch.zeros(3, 8), torch.randn(3, 2))
        >>> logits.shape, state.shape, belief.shape
        (torch.Size([3, 4, 4]), torch.Size([3, 16]), torch.Size([3, 8]))
    """

    def __init__(
        self,
        action_spec=None,
        hidden_dim: int = 512,
        rnn_hidden_dim: int = 512,
        num_categoricals: int = 32,
        num_classes: int = 32,
        action_dim: int | None = None,
        device=None,
        *,
        action_shape: torch.Size | tuple[int, ...] | None = None,
        recurrent_model: Literal["gru", "block_gru"] = "gru",
        num_blocks: int = 8,
        num_layers: int = 1,
        prior_num_layers: int = 2,
        norm_eps: float = 1e-4,
        unimix: float = 0.0,
    ) -> None:
        super().__init__()
        if action_spec is not None and action_shape is not None:
            raise ValueError("Pass only one of `action_spec` or `action_shape`, not both.")
        if action_spec is not None:
            action_shape = action_spec.shape
        self.action_shape = torch.Size(action_shape) if action_shape is not None else None
        _check_unimix(unimix)
        if recurrent_model not in ("gru", "block_gru"):
            raise ValueError(
                f"recurrent_model must be 'gru' or 'block_gru', got {recurrent_model!r}."
            )
        if recurrent_model == "block_gru" and action_dim is None:
            raise ValueError("block_gru requires an explicit action_dim.")
        self.num_categoricals = num_categoricals
        self.num_classes = num_classes
        self.state_dim = num_categoricals * num_classes
        self.rnn_hidden_dim = rnn_hidden_dim
        self.action_dim = action_dim
        self.unimix = unimix
        self.recurrent_model = recurrent_model
        if recurrent_model == "block_gru":
            self.rnn = _PriorBlockGRU(
                state_dim=self.state_dim,
                action_dim=action_dim,
                hidden_dim=hidden_dim,
                belief_dim=rnn_hidden_dim,
                num_blocks=num_blocks,
                num_layers=num_layers,
                norm_eps=norm_eps,
                device=device,
            )
            head = _norm_silu_layers(
                [rnn_hidden_dim] + [hidden_dim] * prior_num_layers, norm_eps, device
            )
            head_in = hidden_dim if prior_num_layers else rnn_hidden_dim
            head.append(nn.Linear(head_in, self.state_dim, device=device))
            self.rnn_to_prior_projector = nn.Sequential(*head)
            self.rnn_to_prior_projector.apply(_dreamer_v3_init)
            self.action_state_projector = None
        else:
            self.rnn = nn.GRUCell(hidden_dim, rnn_hidden_dim, device=device)
            first = (
                nn.Linear(self.state_dim + action_dim, hidden_dim, device=device)
                if action_dim is not None
                else nn.LazyLinear(hidden_dim, device=device)
            )
            self.action_state_projector = nn.Sequential(first, nn.SiLU())
            self.rnn_to_prior_projector = nn.Sequential(
                nn.Linear(rnn_hidden_dim, hidden_dim, device=device),
                nn.SiLU(),
                nn.Linear(hidden_dim, self.state_dim, device=device),
            )

    def _check_inputs(self, state, belief, action) -> None:
        _check_last_dim(
            "state",
            state,
            self.state_dim,
            f"num_categoricals * num_classes = {self.num_categoricals} * {self.num_classes}",
        )
        _check_last_dim("belief", belief, self.rnn_hidden_dim, "rnn_hidden_dim")
        if self.action_dim is not None:
            _check_last_dim("action", action, self.action_dim, "action_dim")

    def update_belief(
        self, state: torch.Tensor, belief: torch.Tensor, action: torch.Tensor
    ) -> torch.Tensor:
        """The next belief ``[*B, rnn_hidden_dim]`` alone (the acting path needs no prior)."""
        self._check_inputs(state, belief, action)
        if not action.is_floating_point():
            action = action.to(belief.dtype)
        if self.recurrent_model == "block_gru":
            return self.rnn(state, belief, action)
        projected = self.action_state_projector(torch.cat([state, action], dim=-1))
        batch = projected.shape[:-1]
        # nn.GRUCell takes one batch dim; the cell runs in float32 (as TorchRL's, under autocast)
        with torch.autocast(device_type=projected.device.type, enabled=False):
            out = self.rnn(
                projected.float().reshape(-1, projected.shape[-1]),
                belief.float().reshape(-1, belief.shape[-1]),
            )
        return out.reshape(*batch, -1).to(projected.dtype)

    def forward(self, state: torch.Tensor, belief: torch.Tensor, action: torch.Tensor):
        belief = self.update_belief(state, belief, action)
        logits = self.rnn_to_prior_projector(belief)
        logits = logits.unflatten(-1, (self.num_categoricals, self.num_classes))
        return logits, _straight_through_sample(logits, self.unimix), belief


class RSSMPosteriorV3(nn.Module):
    """DreamerV3's posterior: ``z_t ~ Cat(MLP([h_t, e_t]))`` from belief and observation embedding.

    Args:
        hidden_dim (int, optional): hidden width. Defaults to ``512``.
        num_categoricals (int, optional): categoricals. Defaults to ``32``.
        num_classes (int, optional): classes per categorical. Defaults to ``32``.
        rnn_hidden_dim (int, optional): belief size; with ``obs_embed_dim`` the first
            layer is a plain ``nn.Linear`` (else lazy).
        obs_embed_dim (int, optional): embedding size.
        device (torch.device, optional): parameter device.

    Keyword Args:
        use_rms_norm (bool, optional): RMS-normalised DreamerV3 layers (needs both sizes).
            Defaults to ``False``.
        num_layers (int, optional): hidden layers with ``use_rms_norm``. Defaults to ``1``.
        norm_eps (float, optional): RMSNorm epsilon. Defaults to ``1e-4``.
        unimix (float, optional): uniform fraction of the samples. Defaults to ``0.0``.

    Returns (from ``forward(belief, obs_embedding)``):
        ``(posterior_logits [*B, C, K], state [*B, C*K])``.

    Examples:
        >>> import torch
        >>> from rl.modules import RSSMPosteriorV3
        >>> posterior = RSSMPosteriorV3(hidden_dim=16, num_categoricals=4, num_classes=4,
        ...                             rnn_hidden_dim=8, obs_embed_dim=12)
        >>> logits, state = posterior(torch.randn(3, 8), torch.randn(3, 12))
        >>> logits.shape, state.shape
        (torch.Size([3, 4, 4]), torch.Size([3, 16]))
    """

    def __init__(
        self,
        hidden_dim: int = 512,
        num_categoricals: int = 32,
        num_classes: int = 32,
        rnn_hidden_dim: int | None = None,
        obs_embed_dim: int | None = None,
        device=None,
        *,
        use_rms_norm: bool = False,
        num_layers: int = 1,
        norm_eps: float = 1e-4,
        unimix: float = 0.0,
    ) -> None:
        super().__init__()
        _check_unimix(unimix)
        sized = rnn_hidden_dim is not None and obs_embed_dim is not None
        if use_rms_norm and not sized:
            raise ValueError(
                "use_rms_norm=True requires explicit rnn_hidden_dim and obs_embed_dim."
            )
        self.num_categoricals = num_categoricals
        self.num_classes = num_classes
        self.rnn_hidden_dim = rnn_hidden_dim
        self.obs_embed_dim = obs_embed_dim
        self.unimix = unimix
        out = num_categoricals * num_classes
        if use_rms_norm:
            layers = _norm_silu_layers(
                [rnn_hidden_dim + obs_embed_dim] + [hidden_dim] * num_layers, norm_eps, device
            )
            layers.append(nn.Linear(hidden_dim, out, device=device))
            self.obs_rnn_to_post_projector = nn.Sequential(*layers)
            self.obs_rnn_to_post_projector.apply(_dreamer_v3_init)
        else:
            first = (
                nn.Linear(rnn_hidden_dim + obs_embed_dim, hidden_dim, device=device)
                if sized
                else nn.LazyLinear(hidden_dim, device=device)
            )
            self.obs_rnn_to_post_projector = nn.Sequential(
                first, nn.SiLU(), nn.Linear(hidden_dim, out, device=device)
            )

    def forward(self, belief: torch.Tensor, obs_embedding: torch.Tensor):
        if self.rnn_hidden_dim is not None:
            _check_last_dim("belief", belief, self.rnn_hidden_dim, "rnn_hidden_dim")
        if self.obs_embed_dim is not None:
            _check_last_dim("obs_embedding", obs_embedding, self.obs_embed_dim, "obs_embed_dim")
        if belief.shape[:-1] != obs_embedding.shape[:-1]:
            raise ValueError(
                f"belief {tuple(belief.shape)} and obs_embedding {tuple(obs_embedding.shape)} "
                "must share their batch dims."
            )
        logits = self.obs_rnn_to_post_projector(torch.cat([belief, obs_embedding], dim=-1))
        logits = logits.unflatten(-1, (self.num_categoricals, self.num_classes))
        return logits, _straight_through_sample(logits, self.unimix)


class RSSMStateEstimatorV3(TensorDictModuleBase):
    """The acting-time filter: the next belief, then a posterior state from the observation.

    With a reset flag, the previous state, belief and action are zeroed first (per stream).
    The prior head is not evaluated. Compose it between an observation encoder and an actor.

    Args:
        prior (RSSMPriorV3): the trained prior (shared with the world model).
        posterior (RSSMPosteriorV3): the trained posterior.

    Keyword Args:
        in_keys (list of NestedKey, optional): previous state, previous belief, previous
            action, encoded observation, reset flag. Defaults to ``["state", "belief",
            "previous_action", "encoded_latents", "is_init"]``.
        out_keys (list of NestedKey, optional): posterior state and belief. Defaults to
            ``["state", "belief"]``. Written in float32.

    Raises:
        ValueError: without five in_keys and two out_keys.
        KeyError: (in ``forward``) naming an absent input key.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import RSSMPosteriorV3, RSSMPriorV3, RSSMStateEstimatorV3
        >>> prior = RSSMPriorV3(action_shape=(2,), action_dim=2, hidden_dim=8,
        ...                     rnn_hidden_dim=8, num_categoricals=2, num_classes=4)
        >>> posterior = RSSMPosteriorV3(hidden_dim=8, rnn_hidden_dim=8, obs_embed_dim=6,
        ...                             num_categoricals=2, num_classes=4)
        >>> data = TensorDict(state=torch.randn(2, 8), belief=torch.randn(2, 8),
        ...                   previous_action=torch.randn(2, 2), encoded_latents=torch.randn(2, 6),
        ...                   is_init=torch.tensor([True, False]), batch_size=[2])
        >>> RSSMStateEstimatorV3(prior, posterior)(data)["state"].shape
        torch.Size([2, 8])
    """

    def __init__(
        self,
        prior: RSSMPriorV3,
        posterior: RSSMPosteriorV3,
        *,
        in_keys: list[NestedKey] | None = None,
        out_keys: list[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        self.prior = prior
        self.posterior = posterior
        self.in_keys = (
            ["state", "belief", "previous_action", "encoded_latents", "is_init"]
            if in_keys is None
            else list(in_keys)
        )
        self.out_keys = ["state", "belief"] if out_keys is None else list(out_keys)
        if len(self.in_keys) != 5 or len(self.out_keys) != 2:
            raise ValueError(
                f"Expected five input keys and two output keys, got in_keys={self.in_keys} "
                f"and out_keys={self.out_keys}."
            )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        values = []
        for key in self.in_keys:
            value = tensordict.get(key, None)
            if value is None:
                raise KeyError(
                    f"RSSMStateEstimatorV3 needs {key!r}; the input has "
                    f"{list(tensordict.keys(True, True))}."
                )
            values.append(value)
        state, belief, action, embedding, reset = values
        reset = reset.reshape(*tensordict.batch_size, 1)
        state = torch.where(reset, 0, state)
        belief = torch.where(reset, 0, belief)
        action = torch.where(reset, 0, action)
        belief = self.prior.update_belief(state, belief, action)
        _, state = self.posterior(belief, embedding)
        tensordict.set(self.out_keys[0], state.float())
        tensordict.set(self.out_keys[1], belief.float())
        return tensordict


class RSSMRolloutV3(TensorDictModuleBase):
    """Filter a sequence ``[*B, T]`` through the RSSM: prior then posterior at each step.

    Step ``t`` runs the prior on ``state``, ``belief`` and the action, then the posterior
    on its belief and the step's encoded observation; the posterior ``("next", "state")``
    and ``("next", "belief")`` become the ``state`` and ``belief`` of step ``t + 1`` (the
    input's are read at ``t = 0`` only). Where ``reset_key`` is set, the step's state,
    belief and action are zeroed first. The modules' tensors are called directly on
    per-step slices (no TensorDict per step); outputs are stacked once.

    Args:
        rssm_prior (TensorDictModule): wraps :class:`RSSMPriorV3`, in_keys
            ``["state", "belief", action]``.
        rssm_posterior (TensorDictModule): wraps :class:`RSSMPosteriorV3`.
        reset_key (NestedKey, optional): the episode-start flag. Defaults to ``"is_init"``.
        action_key (NestedKey, optional): the action, zeroed at a reset; by default the
            prior in_key that is neither ``"state"`` nor ``"belief"``.

    Returns (from ``forward``):
        the input's entries (``state``, ``belief`` and the action as used by each step)
        and the modules' outputs, ``[*B, T]``.

    Raises:
        TypeError: if a module is not a ``TensorDictModule``.
        ValueError: if the action key cannot be inferred.
        KeyError: (in ``forward``) naming an absent input key.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.modules import RSSMPosteriorV3, RSSMPriorV3, RSSMRolloutV3
        >>> prior = TensorDictModule(
        ...     RSSMPriorV3(action_shape=torch.Size([2]), hidden_dim=8, rnn_hidden_dim=8,
        ...                 num_categoricals=4, num_classes=4, action_dim=2),
        ...     in_keys=["state", "belief", "action"],
        ...     out_keys=[("next", "prior_logits"), ("next", "state"), ("next", "belief")])
        >>> posterior = TensorDictModule(
        ...     RSSMPosteriorV3(hidden_dim=8, num_categoricals=4, num_classes=4,
        ...                     rnn_hidden_dim=8, obs_embed_dim=6),
        ...     in_keys=[("next", "belief"), ("next", "encoded_latents")],
        ...     out_keys=[("next", "posterior_logits"), ("next", "state")])
        >>> td = TensorDict(state=torch.zeros(2, 4, 16), belief=torch.zeros(2, 4, 8),
        ...                 action=torch.randn(2, 4, 2),
        ...                 next=TensorDict(encoded_latents=torch.randn(2, 4, 6), batch_size=[2, 4]),
        ...                 batch_size=[2, 4])
        >>> RSSMRolloutV3(prior, posterior)(td)["next", "posterior_logits"].shape
        torch.Size([2, 4, 4, 4])
    """

    def __init__(
        self,
        rssm_prior: TensorDictModule,
        rssm_posterior: TensorDictModule,
        reset_key: NestedKey | None = "is_init",
        action_key: NestedKey | None = None,
    ) -> None:
        super().__init__()
        for name, module in (("rssm_prior", rssm_prior), ("rssm_posterior", rssm_posterior)):
            if not isinstance(module, TensorDictModule):
                raise TypeError(
                    f"{name} must be a TensorDictModule (a network with in_keys and out_keys), "
                    f"got {type(module).__name__}."
                )
        sequence = TensorDictSequential(rssm_prior, rssm_posterior)
        self.in_keys = sequence.in_keys
        self.out_keys = sequence.out_keys
        self.rssm_prior = rssm_prior
        self.rssm_posterior = rssm_posterior
        self.reset_key = unravel_key(reset_key) if reset_key is not None else None
        if action_key is None:
            candidates = [
                key
                for key in map(unravel_key, rssm_prior.in_keys)
                if key not in ("state", "belief")
            ]
            if len(candidates) > 1:
                raise ValueError(
                    f"Could not infer the action key from the prior in_keys "
                    f"{list(rssm_prior.in_keys)}: {candidates} are all candidates. Pass "
                    "action_key explicitly."
                )
            action_key = candidates[0] if candidates else None
        self.action_key = unravel_key(action_key) if action_key is not None else None
        # (module, in_keys, out_keys) with the keys unravelled once, for the step loop
        self._steps = [
            (m, [unravel_key(k) for k in m.in_keys], [unravel_key(k) for k in m.out_keys])
            for m in (rssm_prior, rssm_posterior)
        ]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        time_dim = tensordict.ndim - 1
        steps = tensordict.shape[-1]
        batch = tensordict.batch_size[:-1]
        base = tensordict.exclude(*self.out_keys)
        produced = {unravel_key(k) for k in self.out_keys}
        read = [k for _, in_keys, _ in self._steps for k in in_keys]
        if self.reset_key is not None and self.reset_key in base.keys(True, True):
            read.append(self.reset_key)
        slices = {}
        for key in read:
            if key in produced or key in slices:
                continue
            value = base.get(key, None)
            if value is None:
                raise KeyError(
                    f"RSSMRolloutV3 needs {key!r} in its input; it has "
                    f"{list(base.keys(True, True))}."
                )
            slices[key] = value.unbind(time_dim)
        for key in ("state", "belief"):
            if key not in slices:
                raise KeyError(f"RSSMRolloutV3 needs {key!r} in its input.")
        reset_slices = slices.get(self.reset_key) if self.reset_key is not None else None
        carried = {"state": slices["state"][0], "belief": slices["belief"][0]}
        used = {key: [] for key in ("state", "belief")}
        masked_actions = []
        outputs = {unravel_key(k): [] for k in self.out_keys}
        for t in range(steps):
            step = {key: value[t] for key, value in slices.items()}
            step.update(carried)
            if reset_slices is not None:
                reset = reset_slices[t].reshape(*batch, -1)[..., :1].bool()
                for key in ("state", "belief"):
                    step[key] = torch.where(reset, 0, step[key])
                if self.action_key is not None and self.action_key in step:
                    action = step[self.action_key]
                    mask = reset.reshape(*batch, *(1,) * (action.ndim - len(batch)))
                    step[self.action_key] = torch.where(mask, 0, action)
                    masked_actions.append(step[self.action_key])
            used["state"].append(step["state"])
            used["belief"].append(step["belief"])
            for module, in_keys, out_keys in self._steps:
                result = module.module(*(step[k] for k in in_keys))
                if isinstance(result, torch.Tensor):
                    result = (result,)
                for key, value in zip(out_keys, result):
                    step[key] = value
            for key, values in outputs.items():
                values.append(step[key])
            carried = {"state": step["next", "state"], "belief": step["next", "belief"]}
        out = base.copy()
        out.set("state", torch.stack(used["state"], time_dim))
        out.set("belief", torch.stack(used["belief"], time_dim))
        if masked_actions:
            out.set(self.action_key, torch.stack(masked_actions, time_dim))
        for key, values in outputs.items():
            out.set(key, torch.stack(values, time_dim))
        return out
