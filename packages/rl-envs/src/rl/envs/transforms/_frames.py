"""Several frames per step: stacks of the last frames (``CatFrames``), their max
(``TimeMaxPool``), a repeated action (``FrameSkipTransform``) and action chunks
(``MultiAction``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Literal

import torch
from tensordict import TensorDictBase

from rl.core import Bounded

from .._utils import step_mdp
from . import _frames_unfold as unfold
from ._base import ObservationTransform, Transform, _missing_key_error
from ._spec_utils import NestedKey, normalize_key, spec_with
from ._utils import episode_starts, masked_reset, reset_entry_mask, reset_mask

__all__ = ["CatFrames", "FrameSkipTransform", "MultiAction", "TimeMaxPool"]


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


class CatFrames(ObservationTransform):
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
        padding_value: float = 0,
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
                f"dim must be < 0 to accommodate for tensordict of different batch-sizes: CatFrames dim must be a negative int (counted from the end), got {dim!r}"
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
        if self.as_inverse:
            raise RuntimeError(
                "CatFrames as inverse is not supported as a transform for environments, only "
                "for replay buffers."
            )
        if self.future:
            raise RuntimeError(
                "CatFrames(future=True) only works offline, on stored data (a replay buffer), "
                "not in an env"
            )
        if self.mask_key is not None:
            raise RuntimeError(
                "CatFrames(mask_key=...) only works offline, on stored data (a replay buffer), not in an env"
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
                # a step before any reset: the history is padding_value whatever the
                # padding (TorchRL); a reset fills it as ``padding`` says
                pad = torch.full_like(obs, self.padding_value)
                stack = torch.cat([pad] * (self.N - 1) + [obs], self.dim)
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
                "CatFrames cannot process unbatched tensordict instances: CatFrames on data needs a trajectory with a time dim (batch_size [*B, T]), "
                "got batch_size []"
            )
        nb = tensordict.batch_dims
        names = tensordict.names if tensordict._has_names() else [None] * nb
        if "time" in names:
            tdim = names.index("time")
        else:
            tdim = nb - 1
            warnings.warn(
                "CatFrames unfolds stored data along its last batch dim, taken as time: name "
                "the time dim of the tensordict 'time' (tensordict.refine_names(..., 'time')) "
                "to choose it and silence this warning",
                UserWarning,
                stacklevel=2,
            )

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
                            f"with its root entry {root!r}: the one-step offset between them "
                            "is only implemented for history (backward) windows"
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
        mask = reset_entry_mask(tensordict, self.reset_key)
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


class FrameSkipTransform(Transform):
    """Repeats each action ``frame_skip`` times, summing the rewards.

    Repetition stops early when a sub-environment is done.

    Args:
        frame_skip: number of env steps per agent step (``>= 1``).

    Raises:
        ValueError: ``frame_skip`` is smaller than 1.
        RuntimeError: called on data (it repeats env steps, so it runs in an env only).

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> from rl.envs.transforms import Compose, StepCounter
        >>> env = TransformedEnv(PendulumEnv(), Compose(FrameSkipTransform(3), StepCounter()))
        >>> env.rollout(4)["next", "step_count"].squeeze(-1)  # 4 agent steps, 12 env steps
        tensor([1, 2, 3, 4])
    """

    def __init__(self, frame_skip: int = 1):
        if not isinstance(frame_skip, int) or frame_skip < 1:
            raise ValueError(
                f"frame_skip should have a value greater or equal to one: FrameSkipTransform frame_skip must be an int >= 1, got {frame_skip!r}"
            )
        super().__init__()
        self.frame_skip = frame_skip

    @property
    def has_step(self) -> bool:
        return self.frame_skip > 1

    def _step(self, tensordict, next_tensordict):
        if self.frame_skip == 1:
            return next_tensordict
        parent = self.parent
        if parent is None:
            raise RuntimeError(
                "parent not found for FrameSkipTransform: it needs to be inside a TransformedEnv"
            )
        reward_keys = parent.reward_keys
        done_key = parent.done_key
        rewards = [next_tensordict.get(k) for k in reward_keys]
        for _ in range(self.frame_skip - 1):
            if bool(next_tensordict.get(done_key).any()):
                break
            next_tensordict = parent._step(tensordict)
            rewards = [r + next_tensordict.get(k) for r, k in zip(rewards, reward_keys)]
        for k, r in zip(reward_keys, rewards):
            next_tensordict.set(k, r)
        return next_tensordict

    def forward(self, tensordict):
        raise RuntimeError(
            "FrameSkipTransform can only be used when appended to a transformed env: "
            "repeating an action needs the env to step"
        )

    def _repr_args(self) -> str:
        return f"frame_skip={self.frame_skip}"


def _any_done(parent, td: TensorDictBase) -> torch.Tensor:
    """``[*B]`` bool: any done entry of ``parent`` is set in ``td``."""
    done = torch.zeros(td.batch_size, dtype=torch.bool, device=td.device)
    for key in parent.done_keys:
        value = td.get(key, None)
        if value is not None:
            done = done | value.reshape(*td.batch_size, -1).any(-1)
    return done


class MultiAction(Transform):
    """Executes a stack of actions (an action chunk) in one outer step.

    The policy writes actions stacked along the dim ``dim`` after the batch dims
    (``[*B, T, *A]`` with the default ``dim=1``); the transform steps the env below it
    once per action and returns one outer transition: the last step's observation and
    done flags, and the ``T`` rewards stacked along the same dim (``stack_rewards``) and,
    with ``stack_observations``, the ``T`` observations. When the env is done before the
    chunk ends the remaining actions are not executed (for a single env, or every
    sub-env of a batch; the reward stack then ends with one zero slot, as in TorchRL).
    A sub-env of a batched env that is done while others are not keeps stepping until
    the end of the chunk (the batched env receives a ``"_step"`` mask it may honor).

    The chunk length is free; since specs have no dynamic dims here, the action (and
    stacked reward / observation) specs show a chunk dim of size 1 (a random action is
    a chunk of one, as TorchRL samples it).

    Keyword Args:
        dim: where the chunk dim sits, counted after the batch dims (``>= 1``).
        stack_rewards: return the stack of rewards (else the last reward).
        stack_observations: return the stack of observations (else the last one).
        action_key: the env's one-step action key (default: every action key).
        chunk_key: the policy-facing key holding the stack (default ``action_key``).

    Raises:
        KeyError: the stacked actions are missing before the step.
        ValueError: ``dim < 1``, or action and chunk key lists of different lengths.

    Examples:
        >>> import torch
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), MultiAction())
        >>> td = env.reset()
        >>> td["action"] = torch.zeros(4, 1)
        >>> env.step(td)["next", "reward"].shape
        torch.Size([4, 1])
    """

    #: its ``inv`` steps the env below: the transforms' ``_step`` then read the root
    #: ``inv`` returns (the env advanced by the chunk's first actions), as TorchRL
    _inv_steps_env = True

    def __init__(
        self,
        *,
        dim: int = 1,
        stack_rewards: bool = True,
        stack_observations: bool = False,
        action_key: NestedKey | None = None,
        chunk_key: NestedKey | None = None,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"MultiAction dim must be an int >= 1, got {dim!r}")
        if action_key is None and chunk_key is not None:
            action_key = "action"
        if action_key is not None and chunk_key is None:
            chunk_key = action_key
        super().__init__(
            in_keys_inv=None if action_key is None else [action_key],
            out_keys_inv=None if chunk_key is None else [chunk_key],
        )
        self.stack_rewards = stack_rewards
        self.stack_observations = stack_observations
        self.dim = dim
        self.rewards: list = []
        self.obs: list = []

    @classmethod
    def from_vla(cls, *, action_key: NestedKey = "action", **kwargs) -> MultiAction:
        """A ``MultiAction`` reading the chunk from TorchRL's VLA key ``("vla_action", "chunk")``.

        Examples:
            >>> MultiAction.from_vla(stack_rewards=False).out_keys_inv
            [('vla_action', 'chunk')]
        """
        return cls(action_key=action_key, chunk_key=("vla_action", "chunk"), **kwargs)

    @property
    def has_inverse(self) -> bool:
        return True

    @property
    def has_step(self) -> bool:
        return True

    def _key_pairs(self, action_keys) -> list[tuple[NestedKey, NestedKey]]:
        actions = self.in_keys_inv or list(action_keys)
        chunks = self.out_keys_inv or actions
        if len(actions) != len(chunks):
            raise ValueError(
                "action_key and chunk_key lists must have the same length, got "
                f"{len(actions)} and {len(chunks)}."
            )
        return list(zip(actions, chunks))

    def _stack(self, tds: list, next_tensordict: TensorDictBase, keys) -> TensorDictBase:
        td = torch.stack([*tds, next_tensordict.select(*keys)], -1)
        if self.dim != 1:
            d = td.ndim - 1
            td.auto_batch_size_(d + self.dim)
            td = td.transpose(d, d + self.dim)
        return td

    def _step(self, tensordict, next_tensordict):
        parent = self.parent
        if self.stack_rewards:
            next_tensordict.update(self._stack(self.rewards, next_tensordict, parent.reward_keys))
        if self.stack_observations:
            next_tensordict.update(self._stack(self.obs, next_tensordict, parent.observation_keys))
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return tensordict_reset

    def _actions(self, parent, tensordict: TensorDictBase) -> tuple:
        """The chunk of each action key, unbound along the chunk dim."""
        actions = tensordict.empty()
        for action_key, chunk_key in self._key_pairs(parent.action_keys):
            action = tensordict.get(chunk_key, None)
            if action is None:
                raise KeyError(
                    f"{type(self).__name__} expected stacked actions at key {chunk_key!r} "
                    "before env.step, but the key was missing. For VLA policies, use "
                    "MultiAction.from_vla() or pass chunk_key=('vla_action', 'chunk'). "
                    "Available keys are "
                    f"{sorted(map(str, tensordict.keys(True, True)))}."
                )
            actions.set(action_key, action)
        return actions.auto_batch_size_(batch_dims=tensordict.ndim + self.dim).unbind(-1)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        parent = self.parent
        if parent is None:
            raise RuntimeError("MultiAction steps its env: it runs inside a TransformedEnv only")
        actions = self._actions(parent, tensordict)
        reward_keys = parent.reward_keys
        td = tensordict
        global_idx = None  # entries still running (envs that are not batch-locked)
        td_out = None
        reset = torch.zeros(tensordict.batch_size, dtype=torch.bool, device=tensordict.device)
        rewards: list = []
        obs: list = []
        self.rewards, self.obs = rewards, obs
        for action in actions[:-1]:
            if global_idx is not None:
                action = action[global_idx]
            td = parent.step(td.replace(action))
            if self.stack_rewards:
                reward_td = td.get("next").select(*reward_keys)
                if global_idx is not None:
                    full = reward_td.new_zeros(global_idx.shape + reward_td.shape[1:])
                    full[global_idx] = reward_td
                    rewards.append(full)
                else:
                    rewards.append(reward_td)
            if self.stack_observations:
                obs_td = td.get("next").select(*parent.observation_keys)
                if global_idx is not None:
                    full = obs_td.new_zeros(global_idx.shape + obs_td.shape[1:])
                    full[global_idx] = obs_td
                    obs_td = full
                obs.append(obs_td)
            td = step_mdp(
                td, reward_keys=reward_keys, action_keys=parent.action_keys, exclude_action=False
            )
            if self.stack_rewards:
                td.update(reward_td)
            done = _any_done(parent, td)
            if not bool(done.any()):
                continue
            # no step after a done: the rest of the chunk is skipped ("_step")
            reset = reset | done
            if bool(reset.all()):
                td.set("_step", ~reset)
                break
            if parent.batch_locked:
                td.set("_step", ~reset)
                continue
            # a stateless env: go on with the entries still running only
            idx = ~reset
            if global_idx is None:
                global_idx = idx.clone()
                td_out = td
                for key in self._stacked_keys(parent):  # de-alias from the stacks
                    td_out.set(key, td_out.get(key).clone())
            else:
                td_out[global_idx] = td
                global_idx = torch.masked_scatter(global_idx, global_idx, idx)
            td = td[idx]
            reset = reset[idx]
        if global_idx is None:
            td_out = td.replace(actions[-1])
            step = td_out.get("_step", None)
            if (self.stack_rewards or self.stack_observations) and (
                step is not None and not bool(step.any())
            ):
                # every entry is done inside the chunk: the final step is skipped, its
                # reward slot is a zero (as TorchRL)
                if self.stack_rewards:
                    for key in reward_keys:
                        td_out.set(key, torch.zeros_like(td_out.get(key)))
                td_out = self._step(None, td_out)
            return td_out
        td_out[global_idx] = td.replace(actions[-1][global_idx])
        if self.stack_rewards:
            for key in reward_keys:  # the skipped final step of the finished entries
                reward = td_out.get(key).clone()
                reward[~global_idx] = 0
                td_out.set(key, reward)
        if self.stack_rewards or self.stack_observations:
            td_out = self._step(None, td_out)
            if self.stack_rewards:
                self.rewards = list(torch.stack(rewards, -1)[global_idx].unbind(-1))
            if self.stack_observations:
                self.obs = list(torch.stack(obs, -1)[global_idx].unbind(-1))
        td_out.set("_step", global_idx)
        return td_out

    def _stacked_keys(self, parent) -> list:
        keys = list(parent.reward_keys) if self.stack_rewards else []
        if self.stack_observations:
            keys += list(parent.observation_keys)
        return keys

    def _chunk_spec(self, spec, ndim: int):
        for _ in range(self.dim):
            spec = spec.unsqueeze(ndim)
        # the chunk length is free: a dynamic (-1) dim, as TorchRL's
        chunk_dim = ndim + self.dim - 1
        return spec.expand(*(-1 if i == chunk_dim else d for i, d in enumerate(spec.shape)))

    def transform_input_spec(self, input_spec):
        input_spec = input_spec.clone()
        actions = input_spec["full_action_spec"]
        ndim = len(input_spec.shape)
        for action_key, chunk_key in self._key_pairs(list(actions.keys(True, True))):
            if action_key not in actions.keys(True, True):
                raise KeyError(
                    f"MultiAction action_key {action_key!r} is not in the action spec; keys "
                    f"present: {sorted(map(str, actions.keys(True, True)))}"
                )
            leaf = self._chunk_spec(actions[action_key], ndim)
            if chunk_key != action_key:
                del actions[action_key]
            actions[chunk_key] = leaf
        return input_spec

    def transform_output_spec(self, output_spec):
        output_spec = output_spec.clone()
        ndim = len(output_spec.shape)
        for name, stack in (
            ("full_reward_spec", self.stack_rewards),
            ("full_observation_spec", self.stack_observations),
        ):
            if stack and name in output_spec.keys():
                spec = output_spec[name]
                for key in list(spec.keys(True, True)):
                    spec[key] = self._chunk_spec(spec[key], ndim)
        return output_spec

    def _repr_args(self) -> str:
        return (
            f"dim={self.dim}, stack_rewards={self.stack_rewards}, "
            f"stack_observations={self.stack_observations}"
        )
