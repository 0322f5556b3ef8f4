"""Image transforms: to-tensor layout, resize, center crop, crop, grayscale.

Images are ``[*B, C, H, W]`` after :class:`ToTensorImage` (``[*B, H, W, C]`` uint8 before).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F

from rl.core import Bounded

from ._base import ObservationTransform
from ._spec_utils import NestedKey, spec_with

__all__ = ["CenterCrop", "Crop", "GrayScale", "Resize", "ToTensorImage"]


_PIXELS = ["pixels"]


def _check_image(obs: torch.Tensor, who: str) -> None:
    if obs.ndim < 3:
        raise ValueError(
            f"{who} expects images [*B, C, H, W], got a tensor of shape {tuple(obs.shape)}"
        )


class ToTensorImage(ObservationTransform):
    """``[*B, H, W, C]`` integer images to ``[*B, C, H, W]`` floats in ``[0, 1]``.

    Args:
        from_int: divide by 255 (default: when the input dtype is an integer type).
        unsqueeze: add a leading dim to the result.
        dtype: output dtype.
        in_keys: image keys (default ``["pixels"]``).
        out_keys: where to write (default ``in_keys``).
        shape_tolerant: leave images already channel-first (``C`` in {1, 3} at dim -3
            and not at dim -1) in their layout.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"pixels": torch.full((4, 5, 3), 255, dtype=torch.uint8)}, [])
        >>> out = ToTensorImage()(td)["pixels"]
        >>> out.shape, out.dtype, float(out.max())
        (torch.Size([3, 4, 5]), torch.float32, 1.0)
    """

    _elementwise = True

    def __init__(
        self,
        from_int: bool | None = None,
        unsqueeze: bool = False,
        dtype: torch.dtype | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        shape_tolerant: bool = False,
    ):
        super().__init__(_PIXELS if in_keys is None else in_keys, out_keys)
        self.from_int = from_int
        self.unsqueeze = unsqueeze
        self.dtype = dtype if dtype is not None else torch.get_default_dtype()
        self.shape_tolerant = shape_tolerant

    def _channel_last(self, shape) -> bool:
        if self.shape_tolerant and shape[-1] not in (1, 3) and shape[-3] in (1, 3):
            return False
        return True

    def _apply_transform(self, obs):
        _check_image(obs, "ToTensorImage")
        from_int = self.from_int if self.from_int is not None else not obs.is_floating_point()
        if self._channel_last(obs.shape):
            obs = obs.permute(*range(obs.ndim - 3), -1, -3, -2)
        out = obs.to(self.dtype)
        if from_int:
            out = out.div_(255) if out.data_ptr() != obs.data_ptr() else out / 255
        out = out.contiguous()
        return out.unsqueeze(0) if self.unsqueeze else out

    def _leaf_spec(self, spec, in_key):
        shape = tuple(spec.shape)
        if len(shape) < 3:
            raise ValueError(
                f"ToTensorImage expects the spec of {in_key!r} to be an image [*B, H, W, C], "
                f"got shape {shape}"
            )
        if self._channel_last(shape):
            shape = (*shape[:-3], shape[-1], shape[-3], shape[-2])
        if self.unsqueeze:
            shape = (1, *shape)
        from_int = self.from_int if self.from_int is not None else not spec.dtype.is_floating_point
        if from_int:
            return Bounded(0.0, 1.0, shape=shape, device=spec.device, dtype=self.dtype)
        return spec_with(spec, shape=shape, dtype=self.dtype)

    def _repr_args(self) -> str:
        return f"keys={self.in_keys}"


class Resize(ObservationTransform):
    """Resizes images ``[*B, C, H, W]`` to ``[*B, C, w, h]`` (TorchRL's argument order).

    Args:
        w: output size of dim -2.
        h: output size of dim -1 (default ``w``).
        interpolation: ``"bilinear"``, ``"nearest"``, ``"bicubic"`` or ``"area"``.
        in_keys: image keys (default ``["pixels"]``).
        out_keys: where to write.

    Raises:
        ValueError: non-positive sizes or an unknown interpolation.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> Resize(4, 6)(TensorDict({"pixels": torch.rand(3, 8, 8)}, []))["pixels"].shape
        torch.Size([3, 4, 6])
    """

    _elementwise = True

    _MODES = ("bilinear", "nearest", "bicubic", "area")

    def __init__(
        self,
        w: int,
        h: int | None = None,
        interpolation: Literal["bilinear", "nearest", "bicubic", "area"] = "bilinear",
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ):
        h = w if h is None else h
        for name, v in (("w", w), ("h", h)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"Resize {name} must be a positive int, got {v!r}")
        if interpolation not in self._MODES:
            raise ValueError(
                f"Resize interpolation must be one of {self._MODES}, got {interpolation!r}"
            )
        super().__init__(_PIXELS if in_keys is None else in_keys, out_keys)
        self.w, self.h = w, h
        self.interpolation = interpolation

    def _apply_transform(self, obs):
        _check_image(obs, "Resize")
        lead = obs.shape[:-3]
        flat = obs.reshape(-1, *obs.shape[-3:])
        x = flat if flat.is_floating_point() else flat.float()
        kwargs = {"align_corners": False} if self.interpolation in ("bilinear", "bicubic") else {}
        out = F.interpolate(x, size=(self.w, self.h), mode=self.interpolation, **kwargs)
        if not obs.is_floating_point():
            info = torch.iinfo(obs.dtype)
            out = out.round_().clamp_(info.min, info.max).to(obs.dtype)
        return out.reshape(*lead, *out.shape[-3:])

    def _leaf_spec(self, spec, in_key):
        shape = (*spec.shape[:-2], self.w, self.h)
        if isinstance(spec, Bounded):
            low, high = spec.low.min(), spec.high.max()
            return Bounded(low, high, shape=shape, device=spec.device, dtype=spec.dtype)
        return spec_with(spec, shape=shape)

    def _repr_args(self) -> str:
        return f"w={self.w}, h={self.h}, interpolation={self.interpolation!r}, keys={self.in_keys}"


class CenterCrop(ObservationTransform):
    """Crops the center ``[w, h]`` of images ``[*B, C, H, W]`` (dims -2, -1).

    Args:
        w: output size of dim -2.
        h: output size of dim -1 (default ``w``).
        in_keys: image keys (default ``["pixels"]``).
        out_keys: where to write.

    Raises:
        ValueError: non-positive sizes; at spec time or call time, a crop larger than the image.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> img = torch.arange(16.0).reshape(1, 4, 4)
        >>> CenterCrop(2)(TensorDict({"pixels": img}, []))["pixels"]
        tensor([[[ 5.,  6.],
                 [ 9., 10.]]])
    """

    _elementwise = True

    def __init__(
        self,
        w: int,
        h: int | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ):
        h = w if h is None else h
        for name, v in (("w", w), ("h", h)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"CenterCrop {name} must be a positive int, got {v!r}")
        super().__init__(_PIXELS if in_keys is None else in_keys, out_keys)
        self.w, self.h = w, h

    def _offsets(self, shape, key="image"):
        H, W = shape[-2], shape[-1]
        if self.w > H or self.h > W:
            raise ValueError(
                f"CenterCrop({self.w}, {self.h}) is larger than {key!r} of shape {tuple(shape)}"
            )
        return int(round((H - self.w) / 2.0)), int(round((W - self.h) / 2.0))

    def _apply_transform(self, obs):
        _check_image(obs, "CenterCrop")
        top, left = self._offsets(obs.shape)
        return obs[..., top : top + self.w, left : left + self.h].contiguous()

    def _leaf_spec(self, spec, in_key):
        self._offsets(spec.shape, in_key)
        shape = (*spec.shape[:-2], self.w, self.h)
        if isinstance(spec, Bounded):
            return Bounded(
                spec.low.min(), spec.high.max(), shape=shape, device=spec.device, dtype=spec.dtype
            )
        return spec_with(spec, shape=shape)

    def _repr_args(self) -> str:
        return f"w={self.w}, h={self.h}, keys={self.in_keys}"


class GrayScale(ObservationTransform):
    """RGB images ``[*B, 3, H, W]`` to grayscale ``[*B, 1, H, W]`` (ITU-R 601-2 luma).

    Args:
        in_keys: image keys (default ``["pixels"]``).
        out_keys: where to write.

    Raises:
        ValueError: the channel dim (-3) is not 3.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> GrayScale()(TensorDict({"pixels": torch.ones(3, 2, 2)}, []))["pixels"].shape
        torch.Size([1, 2, 2])
    """

    _elementwise = True

    _WEIGHTS = (0.2989, 0.587, 0.114)

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ):
        super().__init__(_PIXELS if in_keys is None else in_keys, out_keys)

    def _apply_transform(self, obs):
        _check_image(obs, "GrayScale")
        if obs.shape[-3] != 3:
            raise ValueError(
                f"GrayScale expects 3 channels at dim -3, got an image of shape {tuple(obs.shape)}"
            )
        r, g, b = obs.unbind(-3)
        x = (
            r.float() * self._WEIGHTS[0]
            + g.float() * self._WEIGHTS[1]
            + b.float() * self._WEIGHTS[2]
        )
        if not obs.is_floating_point():
            x = x.round_()
        return x.to(obs.dtype).unsqueeze(-3)

    def _leaf_spec(self, spec, in_key):
        if len(spec.shape) < 3 or spec.shape[-3] != 3:
            raise ValueError(
                f"GrayScale expects the spec of {in_key!r} to have 3 channels at dim -3, got "
                f"shape {tuple(spec.shape)}"
            )
        shape = (*spec.shape[:-3], 1, *spec.shape[-2:])
        if isinstance(spec, Bounded):
            return Bounded(
                spec.low.min(), spec.high.max(), shape=shape, device=spec.device, dtype=spec.dtype
            )
        return spec_with(spec, shape=shape)

    def _repr_args(self) -> str:
        return f"keys={self.in_keys}"


class Crop(ObservationTransform):
    """Crops images ``[..., H, W]`` from ``(top, left)``, as TorchRL's ``Crop``.

    As in TorchRL (which calls ``torchvision.transforms.functional.crop(img, top, left,
    w, h)``), the output has height ``w`` and width ``h``; regions outside the image are
    zero-padded.

    Args:
        w: the first (height) extent of the crop.
        h: the second (width) extent (default ``w``).
        top: first row.
        left: first column.
        in_keys: image keys (default ``["pixels"]``).
        out_keys: where to write (default ``in_keys``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> Crop(2, 3)(TensorDict(pixels=torch.zeros(3, 8, 8)))["pixels"].shape
        torch.Size([3, 2, 3])
    """

    _elementwise = True

    def __init__(
        self,
        w: int,
        h: int | None = None,
        top: int = 0,
        left: int = 0,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ):
        super().__init__(["pixels"] if in_keys is None else in_keys, out_keys)
        self.w = int(w)
        self.h = int(h) if h else self.w
        self.top = int(top)
        self.left = int(left)
        if self.w < 1 or self.h < 1:
            raise ValueError(f"Crop sizes must be positive, got w={w} and h={h}")

    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.ndim < 2:
            raise ValueError(f"Crop needs an image [..., H, W], got shape {tuple(obs.shape)}")
        H, W = obs.shape[-2:]
        rows, cols = self.w, self.h
        r0, c0 = self.top, self.left
        r1, c1 = r0 + rows, c0 + cols
        pad = (max(0, -c0), max(0, c1 - W), max(0, -r0), max(0, r1 - H))
        out = obs[..., max(r0, 0) : min(r1, H), max(c0, 0) : min(c1, W)]
        if any(pad):
            out = (
                F.pad(out, pad)
                if out.is_floating_point()
                else F.pad(out.float(), pad).to(obs.dtype)
            )
        return out

    def _leaf_spec(self, spec, in_key):
        shape = torch.Size([*spec.shape[:-2], self.w, self.h])
        if isinstance(spec, Bounded):
            low = self._apply_transform(spec.low.expand(spec.shape))
            high = self._apply_transform(spec.high.expand(spec.shape))
            return spec_with(spec, shape=shape, low=low, high=high)
        return spec_with(spec, shape=shape)

    def _repr_args(self) -> str:
        return f"w={self.w}, h={self.h}, top={self.top}, left={self.left}, keys={self.in_keys}"
