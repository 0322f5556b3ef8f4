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


# parameter-free layers that act on each feature vector alone (elementwise): a batched
# evaluation applies them to ``[members, N, features]`` as each member would to ``[N, ...]``
_ELEMENTWISE = frozenset(
    {
        nn.CELU,
        nn.ELU,
        nn.GELU,
        nn.Hardsigmoid,
        nn.Hardswish,
        nn.Hardtanh,
        nn.Identity,
        nn.LeakyReLU,
        nn.LogSigmoid,
        nn.Mish,
        nn.ReLU,
        nn.ReLU6,
        nn.SELU,
        nn.SiLU,
        nn.Sigmoid,
        nn.Softplus,
        nn.Softsign,
        nn.Tanh,
        nn.Tanhshrink,
    }
)


def _hooked(module: nn.Module) -> bool:
    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks
        or module._backward_pre_hooks
    )


class _BatchedMLP:
    """An ensemble of one MLP structure run as batched matrix products on its stacks.

    Eagerly, N members called one by one cost N small products per layer, and the
    backward of their views stacks the N gradients of every parameter again; a batched
    product (``baddbmm`` on the ``[N, out, in]`` weight stack) gives the stacked
    gradients directly. Built by :meth:`of` for a plain TensorDictModule around an
    :class:`~rl.modules.MLP` (or ``nn.Sequential``) of ``nn.Linear`` layers and
    parameter-free elementwise activations, every parameter stacked; anything else
    (norms, dropout, noisy or custom layers, buffers, hooks) keeps the member calls.
    """

    def __init__(self, network, sequential, steps, out_shape):
        self.network = network
        self.sequential = sequential
        self.steps = steps
        self.out_shape = out_shape
        self.layers = [sequential, *sequential.children()]
        self._linear = [step for step in steps if step[2] is None]

    @classmethod
    def of(cls, network: nn.Module, keys: list) -> _BatchedMLP | None:
        """The plan for ``network`` (member 0 of an ensemble whose stacked parameters
        are ``keys``, in order), or None when it is not such an MLP."""
        from rl.modules.models._mlp import MLP

        if not (_is_plain_tdmodule(network) and len(network.out_keys) == 1):
            return None
        seq = network.module
        if type(seq) is MLP:
            out_shape = tuple(seq.out_features) if seq._reshape_out else None
        elif type(seq) is nn.Sequential and len(network.in_keys) == 1:
            out_shape = None
        else:
            return None
        position = {key: i for i, key in enumerate(keys)}
        steps, used = [], 0
        for name, layer in seq.named_children():
            if type(layer) is nn.Linear:
                weight = position.get(("module", name, "weight"))
                bias = position.get(("module", name, "bias")) if layer.bias is not None else None
                if weight is None or (layer.bias is not None and bias is None):
                    return None
                steps.append((weight, bias, None))
                used += 1 + (bias is not None)
            elif type(layer) in _ELEMENTWISE:
                steps.append((None, None, layer))
            else:
                return None
        if used != len(keys) or not steps:
            return None
        return cls(network, seq, steps, out_shape)

    def usable(self, network: nn.Module) -> bool:
        """Whether member 0 is still the network planned for, with no hook to honour."""
        return (
            network is self.network
            and network.module is self.sequential
            and _is_plain_tdmodule(network)
            and not _global_hooks()
            and not any(_hooked(m) for m in self.layers)
        )

    def macs(self, tensors: list[torch.Tensor], inputs: list[torch.Tensor]) -> int:
        """Multiply-adds of the largest layer product for one member on ``inputs``."""
        rows = inputs[0].shape[:-1].numel()
        return rows * max(tensors[w].shape[1] * tensors[w].shape[2] for w, _, _ in self._linear)

    def __call__(self, tensors: list[torch.Tensor], inputs: list[torch.Tensor]) -> torch.Tensor:
        """Every member's output on ``inputs``, stacked: ``[N, *B, ...]``."""
        x = torch.cat(inputs, -1) if len(inputs) > 1 else inputs[0]
        lead = x.shape[:-1]
        members = tensors[0].shape[0]
        h = x.reshape(1, -1, x.shape[-1]).expand(members, -1, -1)
        for weight, bias, layer in self.steps:
            if layer is not None:
                h = layer(h)
            elif bias is None:
                h = torch.bmm(h, tensors[weight].transpose(1, 2))
            else:
                h = torch.baddbmm(tensors[bias].unsqueeze(1), h, tensors[weight].transpose(1, 2))
        out = h.view(members, *lead, h.shape[-1])
        return out if self.out_shape is None else out.view(*out.shape[:-1], *self.out_shape)


def _global_hooks() -> bool:
    """Whether a hook was registered for every module (``register_module_forward_hook``...)."""
    module = nn.modules.module
    return bool(
        module._global_forward_hooks
        or module._global_forward_pre_hooks
        or module._global_backward_hooks
        or module._global_backward_pre_hooks
    )


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
