"""The ``nn.Module`` side of :class:`~rl.envs.EnvBase`: attribute writes, ``to``, ``forward``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["EnvModule", "normalize_device"]


# exact types whose assignment to an existing plain attribute skips nn.Module.__setattr__
_PLAIN_TYPES = frozenset(
    {
        torch.Tensor,
        np.ndarray,
        int,
        float,
        bool,
        str,
        type(None),
        list,
        tuple,
        dict,
        torch.Size,
        torch.device,
    }
)


class EnvModule(nn.Module):
    """Makes an env an ``nn.Module`` (as TorchRL's) while keeping per-step writes cheap."""

    def __setattr__(self, name: str, value: Any) -> None:
        # nn.Module.__setattr__ costs microseconds (Parameter / Buffer instance checks);
        # an env that keeps its state in plain attributes (``self.state = new``) at every
        # step skips it when the name already is a plain attribute and the value a plain
        # tensor / python object (parameters, buffers and modules live outside __dict__)
        d = self.__dict__
        if name in d and type(value) in _PLAIN_TYPES:
            if type(value) is not torch.Tensor or not getattr(value, "_is_buffer", False):
                d[name] = value
                return
        nn.Module.__setattr__(self, name, value)

    def forward(self, *args, **kwargs):
        """Envs are stepped with :meth:`step` / :meth:`rollout`, not called."""
        raise NotImplementedError(
            f"{type(self).__name__} is not callable: use env.step(td), env.reset() or env.rollout()"
        )

    def to(self, *args, **kwargs) -> EnvModule:
        """Moves the specs, buffers and parameters to a device (and/or casts a dtype).

        Returns:
            the env itself.
        """
        device, dtype, *_ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None:
            device = normalize_device(device)
            self._move_specs(device)
            self.__dict__["_device"] = device
        nn.Module.to(self, *args, **kwargs)
        return self

    def _move_specs(self, device: torch.device) -> None:
        self.output_spec = self.output_spec.to(device)
        self.input_spec = self.input_spec.to(device)

    def train(self, mode: bool = True) -> EnvModule:
        nn.Module.train(self, mode)
        return self


def normalize_device(device) -> torch.device | None:
    """``torch.device`` with an explicit index for CUDA (``"cuda"`` -> ``"cuda:0"``)."""
    if device is None:
        return None
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device
