"""Random network distillation: the loss that trains the predictor of the novelty bonus."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey, expand_as_right
from torch import nn

from ._loss import LossModule

__all__ = ["RNDLoss"]

_REDUCTIONS = ("mean", "sum", "none")
# validity masks a collector or a trajectory splitter writes (``True`` = a real step);
# as in TorchRL, padded steps are left out of the reduction
_MASK_KEYS: tuple[NestedKey, ...] = (("collector", "mask"), "shifted_valid")


class _Normalizer(Protocol):
    def normalize(self, x: torch.Tensor) -> torch.Tensor: ...


def _expand_mask(mask: torch.Tensor, loss: torch.Tensor, key) -> torch.Tensor:
    """``mask`` (``[*B]`` or ``[*B, 1]``) broadcast to the per-sample loss ``[*B]``."""
    mask = mask.bool()
    while mask.ndim > loss.ndim and mask.shape[-1] == 1:
        mask = mask.squeeze(-1)
    if mask.ndim > loss.ndim:
        raise ValueError(
            f"the mask {key!r} has shape {tuple(mask.shape)}, which does not fit the "
            f"per-sample loss of shape {tuple(loss.shape)} (expected a prefix of it)"
        )
    return expand_as_right(mask, loss)


class RNDLoss(LossModule):
    """Trains the predictor of random network distillation to match the fixed target.

    Burda et al. 2018, "Exploration by Random Network Distillation",
    https://arxiv.org/abs/1810.12894. For next observations ``x`` ``[*B, F]`` read from
    the batch, the per-sample loss is ``mean((predictor(x) - target(x)) ** 2, -1)``
    ``[*B]``, the target's output held constant. Give it the two networks of the
    :class:`~rl.envs.transforms.RNDTransform` that writes the bonus during collection:
    lowering this loss lowers the bonus of the observations it was trained on.

    With ``obs_rms`` (the transform's ``obs_rms``: it exists once the transform has
    stepped, e.g. after a short random rollout, the paper's initialisation), observations
    are standardised and clipped to ``[-obs_clip, obs_clip]`` exactly as the transform
    does, so that the predictor is trained on the inputs the bonus is computed from.

    As in the paper, each sample enters the loss with probability ``update_fraction``
    (a random mask, fixed-shape, so the loss compiles); ``"mean"`` then averages over the
    kept samples (0 when none is kept), ``"sum"`` sums them, ``"none"`` returns the
    per-sample losses with the dropped ones set to 0. Steps marked invalid by
    ``("collector", "mask")`` or ``"shifted_valid"`` (padding of split trajectories), when
    the batch holds them, are left out in the same way.

    Args:
        predictor_network: the trained network ``[*B, F] -> [*B, E]``.
        target_network: the fixed random network, same shapes; its parameters are frozen
            (``requires_grad=False``) here.

    Keyword Args:
        obs_rms: running observation statistics with a ``normalize(x)`` method (the
            transform's :class:`~rl.envs.transforms.RunningMeanStd`); ``None`` (default)
            feeds raw observations.
        obs_clip: bound of the standardised observations (only with ``obs_rms``,
            default 5.0).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        update_fraction: probability that a sample takes part in the loss, in
            ``[0, 1]`` (default 0.25, the paper's value).

    Raises:
        TypeError: a network is not an ``nn.Module``, or ``obs_rms`` has no
            ``normalize`` method.
        ValueError: ``update_fraction`` outside ``[0, 1]``, ``obs_clip`` not positive or
            an unknown ``reduction``.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from tensordict import TensorDict
        >>> from rl.objectives import RNDLoss
        >>> predictor = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64))
        >>> target = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64))
        >>> loss_fn = RNDLoss(predictor, target)
        >>> batch = TensorDict({"next": {"observation": torch.randn(32, 4)}}, [32])
        >>> loss = loss_fn(batch)["loss_predictor"]
        >>> loss.shape
        torch.Size([])
        >>> loss.backward()
        >>> all(p.grad is None for p in target.parameters())
        True
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read by RNDLoss.

        Attributes:
            observation: the observation the bonus was computed from (default
                ``("next", "observation")``: the step's output, as stored by collectors
                and replay buffers).
        """

        observation: NestedKey = ("next", "observation")

    def __init__(
        self,
        predictor_network: nn.Module,
        target_network: nn.Module,
        *,
        obs_rms: _Normalizer | None = None,
        obs_clip: float = 5.0,
        reduction: Literal["mean", "sum", "none"] = "mean",
        update_fraction: float = 0.25,
    ) -> None:
        super().__init__()
        for name, network in (
            ("predictor_network", predictor_network),
            ("target_network", target_network),
        ):
            if not isinstance(network, nn.Module):
                raise TypeError(
                    f"RNDLoss {name} must be an nn.Module, got {type(network).__name__}"
                )
        if not 0.0 <= update_fraction <= 1.0:
            raise ValueError(f"update_fraction must be in [0, 1], got {update_fraction!r}")
        if not obs_clip > 0:
            raise ValueError(f"RNDLoss obs_clip must be positive, got {obs_clip!r}")
        if reduction not in _REDUCTIONS:
            raise ValueError(f"unknown reduction {reduction!r}; valid ones are {list(_REDUCTIONS)}")
        if obs_rms is not None and not callable(getattr(obs_rms, "normalize", None)):
            raise TypeError(
                "RNDLoss obs_rms must have a normalize(x) method (the RNDTransform's "
                f"obs_rms), got {type(obs_rms).__name__}"
            )
        self.predictor_network = predictor_network
        self.target_network = target_network
        self.target_network.requires_grad_(False)
        self.obs_rms = obs_rms
        self.obs_clip = obs_clip
        self.reduction = reduction
        self.update_fraction = update_fraction
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        self.in_keys = [self.tensor_keys.observation]
        self.out_keys = ["loss_predictor"]

    def _required_key_names(self) -> tuple[str, ...]:
        return ("observation",)

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        pass  # no value estimator

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Computes the predictor's distillation loss.

        Args:
            tensordict: a batch ``[*B]`` holding the observation key.

        Returns:
            a TensorDict with ``loss_predictor`` (a scalar, or ``[*B]`` with
            ``reduction="none"``).
        """
        obs = self._get(tensordict, "observation").float()
        if self.obs_rms is not None:
            obs = self.obs_rms.normalize(obs).clamp(-self.obs_clip, self.obs_clip)
        with torch.no_grad():
            target = self.target_network(obs)
        loss = (self.predictor_network(obs) - target).pow(2).mean(-1)

        # one mask of the samples that enter the loss: the update fraction's draw and
        # the validity masks; the others are set to 0 in place (``"none"``) and left
        # out of the reduction
        keep = None
        if self.update_fraction < 1.0:
            keep = torch.rand(loss.shape, device=loss.device) < self.update_fraction
        for key in _MASK_KEYS:
            valid = tensordict.get(key, None)
            if valid is not None:
                valid = _expand_mask(valid, loss, key)
                keep = valid if keep is None else keep & valid
        if keep is not None:
            loss = torch.where(keep, loss, 0.0)
            if self.reduction == "mean":
                loss = loss.sum() / keep.sum().clamp_min(1)
            elif self.reduction == "sum":
                loss = loss.sum()
        elif self.reduction == "mean":
            loss = loss.mean()
        elif self.reduction == "sum":
            loss = loss.sum()
        return TensorDict(loss_predictor=loss)
