"""How a loss calls its networks: one output, a distribution, an ensemble's stacked outputs.

A plain :class:`~tensordict.nn.TensorDictModule` is called on its input tensors directly,
skipping the copy of the input TensorDict and the writes of the outputs (the per-call cost
of TensorDict dispatch is comparable to a small network's compute); anything else runs as
a TensorDict module on a shallow copy, so the caller's TensorDict is never written.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModule
from torch import nn

__all__: list[str] = []


def _next_keys(keys) -> list:
    """``keys`` read under ``"next"``: ``"reward"`` -> ``("next", "reward")``."""
    return [("next", *k) if isinstance(k, tuple) else ("next", k) for k in keys]


def _is_plain_tdmodule(module) -> bool:
    """A TensorDictModule whose call is exactly ``module.module(*inputs)`` -> ``out_keys``."""
    return (
        isinstance(module, TensorDictModule)
        and type(module).forward is TensorDictModule.forward
        and module._kwargs is None
        and module.method is None
        and not module.method_kwargs
        and not module._forward_hooks
        and not module._forward_pre_hooks
    )


def _module_inputs(module, tensordict: TensorDictBase, overrides=None) -> list:
    """The entries of ``module.in_keys`` (``overrides`` first), None where absent."""
    if overrides:
        return [
            overrides[key] if key in overrides else tensordict.get(key, None)
            for key in module.in_keys
        ]
    return [tensordict.get(key, None) for key in module.in_keys]


def _network_output(
    module: nn.Module, tensordict: TensorDictBase, out_key, overrides=None
) -> torch.Tensor:
    """Entry ``out_key`` written by ``module`` on ``tensordict`` (left unchanged).

    ``overrides`` maps input keys to tensors used instead of the entries of
    ``tensordict`` (e.g. a freshly sampled action).
    """
    if _is_plain_tdmodule(module) and len(module.out_keys) == 1 and module.out_keys[0] == out_key:
        inputs = _module_inputs(module, tensordict, overrides)
        if all(x is not None for x in inputs):
            return module.module(*inputs)
    tensordict = tensordict.copy()
    if overrides:
        tensordict.update(overrides)
    return module(tensordict).get(out_key)


def _ensemble_output(members, tensordict: TensorDictBase, out_key, overrides=None) -> torch.Tensor:
    """:func:`_network_output` of every member of an ensemble, stacked: ``[N, *B, ...]``.

    ``members`` come from ``LossModule._ensemble(name, kind)``: online (gradients to the
    stacked parameters), detached (no gradient to them; gradients still reach the inputs)
    or target copies.
    """
    return torch.stack([_network_output(m, tensordict, out_key, overrides) for m in members])


def _network_dist(actor: nn.Module, tensordict: TensorDictBase):
    """``actor.get_dist(tensordict)`` without TensorDict writes for the common actor shape.

    The fast path covers a probabilistic sequence of one plain TensorDictModule that
    writes the distribution parameters followed by the distribution module.
    """
    modules = getattr(actor, "module", None)
    if (
        isinstance(actor, ProbabilisticTensorDictSequential)
        and isinstance(modules, nn.ModuleList)
        and len(modules) == 2
        and _is_plain_tdmodule(modules[0])
    ):
        params_module, dist_module = modules[0], modules[1]
        out_keys = list(params_module.out_keys)
        inputs = [tensordict.get(key, None) for key in params_module.in_keys]
        if all(key in out_keys for key in dist_module.in_keys) and all(
            x is not None for x in inputs
        ):
            outputs = params_module.module(*inputs)
            if isinstance(outputs, torch.Tensor):
                outputs = (outputs,)
            by_key = dict(zip(out_keys, outputs, strict=True))
            kwargs = {
                (name[-1] if isinstance(name, tuple) else name): by_key[key]
                for name, key in zip(dist_module.dist_keys, dist_module.in_keys, strict=True)
            }
            return dist_module.distribution_class(**kwargs, **dict(dist_module.distribution_kwargs))
    return actor.get_dist(tensordict.copy())
