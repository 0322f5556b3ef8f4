"""Hash modules that turn tensors into integer keys (TorchRL 0.14.1's ``torchrl.data.map.hash``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["BinaryToDecimal", "RandomProjectionHash", "SipHash"]


class BinaryToDecimal(nn.Module):
    """Reads groups of ``num_bits`` binary digits as integers and sums the groups.

    The last dimension of the input is cut into chunks of ``num_bits`` digits
    (most significant first); each chunk is read as a base-2 number and the
    chunk values are summed, so ``[B, F]`` gives ``[B]``.

    Args:
        num_bits (int): digits per chunk; must not exceed, and must divide, the
            input's last dimension.
        device (torch.device): device of inputs and outputs.
        dtype (torch.dtype): output dtype.
        convert_to_binary (bool, optional): map the input to ``{0, 1}`` first
            (``x > 0`` gives 1). Defaults to ``False``.
    """

    def __init__(
        self,
        num_bits: int,
        device: torch.device,
        dtype: torch.dtype,
        convert_to_binary: bool = False,
    ):
        super().__init__()
        self.convert_to_binary = convert_to_binary
        self.num_bits = num_bits
        powers = torch.arange(num_bits - 1, -1, -1, device=device, dtype=dtype)
        self.bases = 2**powers
        self.zero_tensor = torch.zeros((1,), device=device)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        width = features.shape[-1]
        if self.num_bits > width:
            raise ValueError(f"num_features={width} is less than self.num_bits={self.num_bits}")
        if width % self.num_bits:
            raise ValueError(
                f"num_features={width} is not divisible by self.num_bits={self.num_bits}"
            )
        if self.convert_to_binary:
            features = torch.heaviside(features, self.zero_tensor)
        chunks = features.reshape(-1, width // self.num_bits, self.num_bits)
        values = (chunks.to(self.bases.dtype) * self.bases).sum(-1)
        return values.sum(-1)


class SipHash(nn.Module):
    """Hashes each row of a ``[B, F]`` tensor through Python's ``hash`` of its bytes.

    Equal rows give equal keys within one process. Python salts ``hash`` of
    bytes, so keys are reproducible across runs only with a fixed
    ``PYTHONHASHSEED``.

    Args:
        as_tensor (bool, optional): return an int64 tensor of shape ``[B]``;
            with ``False`` the rows' bytes are returned as a list. Defaults to ``True``.
    """

    def __init__(self, as_tensor: bool = True):
        super().__init__()
        self.as_tensor = as_tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor | list[bytes]:
        if x.dtype == torch.bfloat16:  # numpy has no bfloat16
            x = x.to(torch.float16)
        rows = [row.tobytes() for row in x.detach().cpu().numpy()]
        if not self.as_tensor:
            return rows
        return torch.tensor([hash(row) for row in rows], dtype=torch.int64)


class RandomProjectionHash(SipHash):
    """Projects rows onto ``n_components`` random directions, then hashes them as :class:`SipHash`.

    The projection matrix is drawn (``init_method``, normal by default) on the
    first call, from the input's width, and cast to ``dtype_cast``.

    Keyword Args:
        n_components (int, optional): projection width. Defaults to 16.
        dtype_cast (torch.dtype, optional): dtype of the projection. Defaults to ``torch.bfloat16``.
        as_tensor (bool, optional): see :class:`SipHash`. Defaults to ``True``.
        init_method (callable, optional): in-place initialiser of the projection.
    """

    _N_COMPONENTS_DEFAULT = 16

    def __init__(
        self,
        *,
        n_components: int | None = None,
        dtype_cast: torch.dtype = torch.bfloat16,
        as_tensor: bool = True,
        init_method: Callable[[torch.Tensor], torch.Tensor | None] | None = None,
        **kwargs,
    ):
        super().__init__(as_tensor=as_tensor)
        if n_components is None:
            n_components = self._N_COMPONENTS_DEFAULT
        self.register_buffer("_n_components", torch.as_tensor(n_components))
        self.init_method = torch.nn.init.normal_ if init_method is None else init_method
        self.dtype_cast = dtype_cast
        self._init = False
        self.register_buffer("transform", nn.UninitializedBuffer())

    @property
    def n_components(self) -> int:
        return int(self._n_components.item())

    def fit(self, x: torch.Tensor) -> None:
        """Draws the projection for inputs of ``x``'s width."""
        self.transform.materialize(
            (x.shape[-1], self.n_components), dtype=self.dtype_cast, device=x.device
        )
        self.init_method(self.transform)
        self._init = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._init:
            self.fit(x)
        return super().forward(x.to(self.dtype_cast) @ self.transform)
