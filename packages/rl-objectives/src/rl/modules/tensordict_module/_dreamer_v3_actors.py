"""DreamerV3's discrete policy and a policy wrapper with its own, checkpointed random stream.

Hafner et al., 2023, https://arxiv.org/abs/2301.04104.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictModuleBase,
)
from tensordict.utils import NestedKey
from torch import nn

from ..distributions import OneHotCategorical
from ..models._dreamer_v3_nets import DreamerV3MLP, _dreamer_v3_init
from ..models._rssm_v3 import _check_unimix, _unimix_probs

__all__ = ["DreamerV3DiscreteActor", "DreamerV3SeededPolicy"]


class _DiscreteActorNet(nn.Module):
    """``[belief, state] -> log(unimix(softmax(logits)))`` in float32."""

    def __init__(self, in_features, out_features, depth, num_cells, norm_eps, unimix, device):
        super().__init__()
        self.backbone = DreamerV3MLP(
            in_features, None, depth=depth, num_cells=num_cells, norm_eps=norm_eps, device=device
        )
        self.logits_head = nn.Linear(num_cells, out_features, device=device)
        _dreamer_v3_init(self.logits_head)
        with torch.no_grad():
            self.logits_head.weight.mul_(0.01)
        self.unimix = unimix

    def forward(self, state: torch.Tensor, belief: torch.Tensor) -> torch.Tensor:
        logits = self.logits_head(self.backbone(belief, state)).float()
        return _unimix_probs(logits, self.unimix).log()


class DreamerV3DiscreteActor(ProbabilisticTensorDictSequential):
    """DreamerV3's one-hot categorical policy on the latent ``(state, belief)``.

    An RMS-normalised SiLU MLP on ``[belief, state]`` (output weights scaled by ``0.01``)
    gives logits whose probabilities are mixed with a fraction ``unimix`` of the uniform
    distribution. A call writes the (mixed, log-probability) logits, a one-hot action
    (random unless the exploration type says otherwise) and its log-probability;
    ``get_dist(td).rsample()`` is a straight-through sample.

    Args:
        in_features (int): state size + belief size.
        out_features (int): number of actions.

    Keyword Args:
        depth (int, optional): hidden layers, at least 1. Defaults to ``3``.
        num_cells (int, optional): hidden width. Defaults to ``1024``.
        norm_eps (float, optional): RMSNorm epsilon. Defaults to ``1e-4``.
        unimix (float, optional): uniform fraction in ``[0, 1)``. Defaults to ``0.01``.
        in_keys (sequence of NestedKey, optional): the state then belief keys. Defaults
            to ``["state", "belief"]``.
        action_key (NestedKey, optional): Defaults to ``"action"``.
        logits_key (NestedKey, optional): Defaults to ``"logits"``.
        log_prob_key (NestedKey, optional): Defaults to ``"action_log_prob"``.
        device (torch.device, optional): parameter device.

    Raises:
        ValueError: for other than two in_keys, ``depth < 1`` or ``unimix`` out of range.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import DreamerV3DiscreteActor
        >>> actor = DreamerV3DiscreteActor(12, 3, depth=2, num_cells=32)
        >>> data = TensorDict(state=torch.randn(4, 8), belief=torch.randn(4, 4), batch_size=[4])
        >>> actor(data)["action"].sum(-1).tolist()
        [1, 1, 1, 1]
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        depth: int = 3,
        num_cells: int = 1024,
        norm_eps: float = 1e-4,
        unimix: float = 0.01,
        in_keys: Sequence[NestedKey] | None = None,
        action_key: NestedKey = "action",
        logits_key: NestedKey = "logits",
        log_prob_key: NestedKey = "action_log_prob",
        device=None,
    ) -> None:
        in_keys = list(in_keys) if in_keys is not None else ["state", "belief"]
        if len(in_keys) != 2:
            raise ValueError(
                f"in_keys must contain the state and belief keys, in that order; got {in_keys}."
            )
        if depth < 1:
            raise ValueError(f"depth must be positive, got {depth}.")
        _check_unimix(unimix)
        super().__init__(
            TensorDictModule(
                _DiscreteActorNet(
                    in_features, out_features, depth, num_cells, norm_eps, unimix, device
                ),
                in_keys=in_keys,
                out_keys=[logits_key],
            ),
            ProbabilisticTensorDictModule(
                in_keys={"logits": logits_key},
                out_keys=[action_key],
                distribution_class=OneHotCategorical,
                default_interaction_type=InteractionType.RANDOM,
                return_log_prob=True,
                log_prob_key=log_prob_key,
            ),
        )


class DreamerV3SeededPolicy(TensorDictModuleBase):
    """Run a policy on its own random stream, reproducible from a checkpoint.

    Call ``n`` seeds torch's generator (and the input device's) with a 64-bit number drawn
    from ``numpy.random.default_rng([seed, n, 0])``, runs the policy, then restores the
    caller's generator state. ``seed`` and the call count are the module's extra state
    (saved in its ``state_dict``).

    Args:
        module (TensorDictModuleBase): the policy.
        seed (int): the stream's seed, non-negative.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import DreamerV3DiscreteActor, DreamerV3SeededPolicy
        >>> policy = DreamerV3SeededPolicy(DreamerV3DiscreteActor(6, 3, depth=1, num_cells=8), seed=7)
        >>> data = TensorDict(state=torch.zeros(2, 4), belief=torch.zeros(2, 2), batch_size=[2])
        >>> saved = policy.state_dict()
        >>> first = policy(data.clone())["action"]
        >>> _ = policy.load_state_dict(saved)
        >>> torch.equal(policy(data.clone())["action"], first)
        True
    """

    def __init__(self, module: TensorDictModuleBase, seed: int) -> None:
        super().__init__()
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}.")
        self.module = module
        self.seed = seed
        self.counter = 0
        self.in_keys = module.in_keys
        self.out_keys = module.out_keys

    def get_extra_state(self) -> dict[str, int]:
        return {"seed": self.seed, "counter": self.counter}

    def set_extra_state(self, state: Mapping[str, int]) -> None:
        self.seed = int(state["seed"])
        self.counter = int(state["counter"])

    def reset_counter(self) -> None:
        """Restart the stream (a setup call may have advanced it)."""
        self.counter = 0

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        reference = tensordict.get("state", None)
        if reference is None:
            reference = tensordict.get(self.in_keys[0])
        device = reference.device
        devices = [device] if device.type != "cpu" else []
        with torch.random.fork_rng(devices=devices, device_type=device.type):
            words = np.random.default_rng([self.seed, self.counter, 0]).integers(
                0, np.iinfo(np.uint32).max, (2,), np.uint32
            )
            seed = (int(words[0]) << 32) | int(words[1])
            # seed only the generators fork_rng restores (torch.manual_seed would also
            # move the other accelerators' streams)
            torch.random.default_generator.manual_seed(seed)
            if devices:
                with getattr(torch, device.type).device(device):
                    getattr(torch, device.type).manual_seed(seed)
            self.counter += 1
            return self.module(tensordict)
