"""Transforms over the last frames of an episode: CatFrames, TimeMaxPool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from tensordict import TensorDictBase

from rl.core import Bounded

from . import _frames_unfold as unfold
from ._base import Transform, _missing_key_error
from ._reward import _reset_entry_mask
from ._spec_utils import NestedKey, normalize_key, spec_with
from ._utils import episode_starts, masked_reset, reset_mask

__all__ = ["CatFrames", "TimeMaxPool"]


def _windows(
    root: torch.Tensor,
    starts: torch.Tensor,
    n: int,
    newest: torch.Tensor | None = None,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The last ``n`` frames of each step of a stored trajectory, oldest first.

    Args:
        root: frames ``[*B, T, *F]`` (time at dim ``starts.ndim - 1``).
        starts: ``[*B, T]`` episode starts.
        n: window length.
        newest: when given (``("next", key)`` frames ``[*B, T, *F]``), the window of step
            ``t`` ends with ``newest[t]`` preceded by ``root[t - n + 2 .. t]``.

    Returns:
        ``n`` pairs ``(frames [*B, T, *F], valid [*B, T])``: ``valid`` is False where the
        frame would precede the episode start (the frame is then the first of the episode).
    """
    tdim = starts.ndim - 1
    extra = root.ndim - starts.ndim
    T = starts.shape[-1]
    t = torch.arange(T, device=starts.device).expand(starts.shape)
    last_start = torch.where(starts, t, torch.zeros_like(t)).cummax(-1).values
    out = []
    shift = 1 if newest is not None else 0
    for k in range(n - 1, -1, -1):
        if newest is not None and k == 0:
            out.append((newest, torch.ones_like(starts)))
            continue
        src = t - k + shift
        valid = src >= last_start
        idx = torch.maximum(src, last_start)
        idx = idx.reshape(*idx.shape, *((1,) * extra)).expand(root.shape)
        out.append((root.gather(tdim, idx), valid))
    return out


def _tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


class CatFrames(Transform):
    """Stacks the last ``N`` observations along ``dim`` (frame stacking).

    Inside an env, a buffer of the last ``N`` frames is kept per in_key; at reset it is
    filled with the first frame (``padding="same"``) or with ``padding_value`` and the first
    frame last (``padding="constant"``). Partial resets refill only the reset entries.

    On a stored trajectory ``[*B, T]`` (``transform(td)``, e.g. as a replay-buffer
    transform on raw frames), it builds the stacks of both ``key`` and ``("next", key)``,
    padding at episode starts (found from ``("next", "done")``).

    Args:
        N: number of frames.
        dim: concatenation dim (negative, e.g. ``-3`` for ``[C, H, W]`` images).
        in_keys: keys (default ``["pixels"]``).
        out_keys: where to write (default ``in_keys``).
        padding: ``"same"`` or ``"constant"``.
        padding_value: the constant of ``padding="constant"``.
        as_inverse: build the stacks in ``inv`` (a replay buffer's ``extend``) instead of
            ``forward`` (its ``sample``); not in an env.
        reset_key: the reset entry (the env's ``"_reset"`` by default).
        done_key: the done entry, under ``"next"``, that delimits stored episodes
            (default ``"done"``).
        future: on data, forward-looking windows ``[t, ..., t + N - 1]`` (padded past the
            episode end); not in an env.
        mask_key: on data, where to write a ``[*B, T, N]`` mask, True on padded frames.

    On data, the time dim is the one named ``"time"`` (else the last batch dim). A
    ``("next", key)`` in ``in_keys`` is stacked from the next frames, completed before
    the episode start by the root frames when ``key`` is an in_key too (TorchRL's
    layout); when ``in_keys`` holds no ``"next"`` key, ``("next", key)`` is stacked
    along with each ``key`` (as if it were listed).

    Raises:
        ValueError: ``N < 1``, non-negative ``dim`` or unknown ``padding``.
        RuntimeError: ``future``, ``mask_key`` or ``as_inverse`` in an env.

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), CatFrames(N=4, dim=-1, in_keys=["observation"]))
        >>> env.reset()["observation"].shape
        torch.Size([12])
    """

    def __init__(
        self,
        N: int,
        dim: int,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        padding: Literal["same", "constant"] = "same",
        padding_value: float = 0.0,
        as_inverse: bool = False,
        reset_key: NestedKey | None = None,
        done_key: NestedKey | None = None,
        future: bool = False,
        mask_key: NestedKey | None = None,
    ):
        if not isinstance(N, int) or N < 1:
            raise ValueError(f"CatFrames N must be a positive int, got {N!r}")
        if not isinstance(dim, int) or dim >= 0:
            raise ValueError(
                f"CatFrames dim must be a negative int (counted from the end), got {dim!r}"
            )
        if padding not in ("same", "constant"):
            raise ValueError(f"CatFrames padding must be 'same' or 'constant', got {padding!r}")
        super().__init__(["pixels"] if in_keys is None else in_keys, out_keys)
        self.N = N
        self.dim = dim
        self.padding = padding
        self.padding_value = padding_value
        self.as_inverse = as_inverse
        self.reset_key = None if reset_key is None else normalize_key(reset_key)
        self.done_key = "done" if done_key is None else normalize_key(done_key)
        self.future = bool(future)
        self.mask_key = None if mask_key is None else normalize_key(mask_key)
        self.__dict__["_frames"] = {}

    @property
    def has_inverse(self) -> bool:
        return self.as_inverse

    def _check_env_use(self) -> None:
        for flag, name in ((self.as_inverse, "as_inverse"), (self.future, "future")):
            if flag:
                raise RuntimeError(
                    f"CatFrames({name}=True) only works on stored data (a replay buffer), "
                    "not in an env"
                )
        if self.mask_key is not None:
            raise RuntimeError(
                "CatFrames(mask_key=...) only works on stored data (a replay buffer), not in an env"
            )

    @property
    def has_step(self) -> bool:
        return True

    def _fill(self, obs: torch.Tensor) -> torch.Tensor:
        if self.padding == "same" or self.N == 1:
            return torch.cat([obs] * self.N, self.dim)
        pad = torch.full_like(obs, self.padding_value)
        return torch.cat([pad] * (self.N - 1) + [obs], self.dim)

    def _reset(self, tensordict, tensordict_reset):
        self._check_env_use()
        if self.reset_key is not None and tensordict is not None:
            reset = tensordict.get(self.reset_key, None)
            mask = None if reset is None else reset.reshape(*tensordict.batch_size, -1).any(-1)
        else:
            mask = reset_mask(tensordict)
        frames = self.__dict__["_frames"]
        for in_key, out_key in self._io_pairs:
            obs = tensordict_reset.get(in_key, None)
            if obs is None:
                continue
            fresh = self._fill(obs)
            stack = masked_reset(fresh, frames.get(out_key), mask)
            frames[out_key] = stack
            tensordict_reset.set(out_key, stack)
        return tensordict_reset

    def _call(self, next_tensordict):
        frames = self.__dict__["_frames"]
        for in_key, out_key in self._io_pairs:
            obs = next_tensordict.get(in_key, None)
            if obs is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, in_key, next_tensordict)
            stack = frames.get(out_key)
            if stack is None:
                stack = self._fill(obs)
            else:
                d = obs.shape[self.dim]
                keep = stack.narrow(self.dim, d, stack.shape[self.dim] - d)
                # a new tensor each step: values handed out earlier are never mutated
                stack = torch.cat([keep, obs], self.dim)
            frames[out_key] = stack
            next_tensordict.set(out_key, stack)
        return next_tensordict

    def _step(self, tensordict, next_tensordict):
        return self._call(next_tensordict)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Builds the stacks of a stored trajectory ``[*B, T]`` (root and ``"next"`` keys)."""
        if self.as_inverse:
            return tensordict
        return self.unfolding(tensordict)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.as_inverse:
            return self.unfolding(tensordict)
        return tensordict

    def unfolding(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The frame stacks of a stored trajectory ``[*B, T]``, written in place."""
        if tensordict.batch_dims == 0:
            raise ValueError(
                "CatFrames on data needs a trajectory with a time dim (batch_size [*B, T]), "
                "got batch_size []"
            )
        nb = tensordict.batch_dims
        names = tensordict.names if tensordict._has_names() else [None] * nb
        tdim = names.index("time") if "time" in names else nb - 1

        def to_last(x: torch.Tensor) -> torch.Tensor:
            return x if tdim == nb - 1 else x.transpose(tdim, nb - 1)

        done_key = (
            ("next", self.done_key) if isinstance(self.done_key, str) else ("next", *self.done_key)
        )
        done = tensordict.get(done_key, None)
        shape = list(tensordict.batch_size)
        shape[tdim], shape[nb - 1] = shape[nb - 1], shape[tdim]
        if done is None:
            if not self.future:
                raise KeyError(
                    f"CatFrames on data needs the {done_key!r} entry to delimit the stored "
                    "episodes (or future=True, which treats each row as one trajectory); "
                    f"keys present: {sorted(map(str, tensordict.keys(True, True)))}"
                )
            done = torch.zeros(shape, dtype=torch.bool, device=tensordict.device)
        else:
            done = to_last(done.reshape(*tensordict.batch_size, -1).any(-1))
        starts = torch.zeros_like(done)
        starts[..., 0] = True
        starts[..., 1:] = done[..., :-1]
        ends = unfold.episode_ends(done) if self.future else None

        def windows(frames):
            if self.future:
                return unfold.future_windows(frames, ends, self.N)
            return unfold.past_windows(frames, starts, self.N)

        pairs = sorted(self._io_pairs, key=lambda p: not isinstance(p[0], str))
        explicit_next = any(not isinstance(k, str) and k[0] == "next" for k, _ in pairs)
        root_of = dict(pairs)
        results = []
        if not explicit_next and not self.future:
            # no "next" key listed: ("next", key) is stacked along with each root key, the
            # newest frame after the last root frames
            for in_key, out_key in pairs:
                root = tensordict.get(in_key, None)
                new = tensordict.get(("next", *_tuple(in_key)), None)
                if root is not None and new is not None:
                    win = _windows(to_last(root), starts, self.N, newest=to_last(new))
                    stack = unfold.pad_stack(win, self.dim, self.padding, self.padding_value)
                    results.append((("next", *_tuple(out_key)), to_last(stack)))
        for in_key, out_key in pairs:
            value = tensordict.get(in_key, None)
            if value is None:
                raise _missing_key_error(self, in_key, tensordict)
            win = windows(to_last(value))
            if not isinstance(in_key, str) and in_key[0] == "next":
                root = in_key[1] if len(in_key) == 2 else in_key[1:]
                if root in root_of:
                    if self.future:
                        raise NotImplementedError(
                            "CatFrames(future=True) cannot stack a ('next', key) entry along "
                            f"with its root entry {root!r}"
                        )
                    root_win = windows(to_last(tensordict.get(root)))
                    win = unfold.next_windows(root_win, win)
            stack = unfold.pad_stack(win, self.dim, self.padding, self.padding_value)
            results.append((out_key, to_last(stack)))
        if self.mask_key is not None:
            win = windows(starts)
            mask = torch.stack([~valid for _, valid in win], -1)
            results.append(
                (self.mask_key, to_last(mask) if tdim == nb - 1 else mask.transpose(tdim, nb - 1))
            )
        for key, value in results:
            tensordict.set(key, value)
        return tensordict

    def _stack(self, windows) -> torch.Tensor:
        parts = []
        for frames, valid in windows:
            if self.padding == "constant":
                m = valid.reshape(*valid.shape, *((1,) * (frames.ndim - valid.ndim)))
                frames = torch.where(m, frames, torch.full_like(frames, self.padding_value))
            parts.append(frames)
        return torch.cat(parts, self.dim)

    def _leaf_spec(self, spec, in_key):
        shape = list(spec.shape)
        shape[self.dim] *= self.N
        if isinstance(spec, Bounded):
            low = spec.low.expand(spec.shape)
            high = spec.high.expand(spec.shape)
            if self.padding == "constant":
                low = low.clamp_max(self.padding_value)
                high = high.clamp_min(self.padding_value)
            return spec_with(
                spec,
                shape=shape,
                low=torch.cat([low] * self.N, self.dim),
                high=torch.cat([high] * self.N, self.dim),
            )
        return spec_with(spec, shape=shape)

    def _repr_args(self) -> str:
        return f"N={self.N}, dim={self.dim}, keys={self.in_keys}"


class TimeMaxPool(Transform):
    """Element-wise max over the last ``T`` observations of the episode.

    Args:
        in_keys: keys (default ``["observation"]``).
        out_keys: where to write.
        T: window length.
        reset_key: the partial-reset entry read at reset (default: the env's
            ``"_reset"``).

    Raises:
        ValueError: ``T < 1``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = TimeMaxPool(in_keys=["x"], T=2)
        >>> traj = TensorDict({"x": torch.tensor([[1.0], [3.0], [2.0]])}, [3])
        >>> t(traj)["x"].squeeze(-1)
        tensor([1., 3., 3.])
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        T: int = 1,
        reset_key: NestedKey | None = None,
    ):
        if not isinstance(T, int) or T < 1:
            raise ValueError(f"TimeMaxPool T must be a positive int, got {T!r}")
        super().__init__(["observation"] if in_keys is None else in_keys, out_keys)
        self.T = T
        self.reset_key = None if reset_key is None else normalize_key(reset_key)
        self.__dict__["_frames"] = {}

    @property
    def has_step(self) -> bool:
        return True

    def _reset(self, tensordict, tensordict_reset):
        mask = _reset_entry_mask(tensordict, self.reset_key)
        frames = self.__dict__["_frames"]
        for in_key, out_key in self._io_pairs:
            obs = tensordict_reset.get(in_key, None)
            if obs is None:
                continue
            fresh = obs.unsqueeze(0).expand(self.T, *obs.shape).clone()
            old = frames.get(out_key)
            if mask is not None and old is not None and old.shape == fresh.shape:
                m = mask.reshape(1, *mask.shape, *((1,) * (obs.ndim - mask.ndim)))
                fresh = torch.where(m, fresh, old)
            frames[out_key] = fresh
            tensordict_reset.set(out_key, fresh.amax(0))
        return tensordict_reset

    def _call(self, next_tensordict):
        frames = self.__dict__["_frames"]
        for in_key, out_key in self._io_pairs:
            obs = next_tensordict.get(in_key, None)
            if obs is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, in_key, next_tensordict)
            buf = frames.get(out_key)
            if buf is None:
                buf = obs.unsqueeze(0).expand(self.T, *obs.shape)
            buf = torch.cat([buf[1:], obs.unsqueeze(0)], 0)
            frames[out_key] = buf
            next_tensordict.set(out_key, buf.amax(0))
        return next_tensordict

    def _step(self, tensordict, next_tensordict):
        return self._call(next_tensordict)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Sliding max over a stored trajectory ``[*B, T]`` (within episodes)."""
        if tensordict.batch_dims == 0:
            raise ValueError(
                "TimeMaxPool on data needs a trajectory with a time dim (batch_size [*B, T]), "
                "got batch_size []"
            )
        starts = episode_starts(tensordict)
        nxt = tensordict.get("next", None)
        results = []
        for in_key, out_key in self._io_pairs:
            root = tensordict.get(in_key, None)
            if root is None:
                raise _missing_key_error(self, in_key, tensordict)
            frames = [f for f, _ in _windows(root, starts, self.T)]
            results.append((out_key, torch.stack(frames, 0).amax(0)))
            if nxt is not None and nxt.get(in_key, None) is not None:
                frames = [f for f, _ in _windows(root, starts, self.T, newest=nxt.get(in_key))]
                key = ("next", out_key) if isinstance(out_key, str) else ("next", *out_key)
                results.append((key, torch.stack(frames, 0).amax(0)))
        for key, value in results:
            tensordict.set(key, value)
        return tensordict

    def _repr_args(self) -> str:
        return f"T={self.T}, keys={self.in_keys}"
