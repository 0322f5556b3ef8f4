"""Environment builders of a config-driven script (TorchRL's ``trainers.helpers.envs``).

:func:`transformed_env_constructor` turns a config (:class:`EnvConfig` fields) into an
env maker: the simulator (gymnasium or dm_control, or a maker of the user's) wrapped in
the usual transforms (pixels to a normalised stack of frames, or the state vectors
concatenated and normalised; reward scaling; step counter; init tracker).
:func:`parallel_env_constructor` runs several of them in a ``ParallelEnv`` with the
transforms applied once to the batch. The environments come from rl-envs
(``pip install "rl-core[helpers]"``), imported when a builder runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import torch
from tensordict.utils import NestedKey

from ._config import collector_device, field, require

__all__ = [
    "EnvConfig",
    "correct_for_frame_skip",
    "get_norm_state_dict",
    "get_stats_random_rollout",
    "initialize_observation_norm_transforms",
    "make_env_transforms",
    "parallel_env_constructor",
    "retrieve_observation_norms_state_dict",
    "transformed_env_constructor",
]

_log = logging.getLogger(__name__)

#: the config fields that count frames, divided by ``frame_skip`` by correct_for_frame_skip
FRAME_COUNT_FIELDS = (
    "max_frames_per_traj",
    "total_frames",
    "frames_per_batch",
    "record_frames",
    "annealing_frames",
    "init_random_frames",
    "init_env_steps",
    "noops",
)
#: ``cfg.env_library`` -> the name of the rl.envs class that builds the simulator
_LIBRARIES = {"gym": "GymEnv", "dm_control": "DMControlEnv"}


@dataclass
class EnvConfig:
    """The environment fields of a script's config."""

    env_library: str = "gym"
    """Simulator library: ``"gym"`` (gymnasium) or ``"dm_control"``."""
    env_name: str = "Humanoid-v2"
    """Environment (gym id, or dm_control domain)."""
    env_task: str = ""
    """dm_control task (ignored by gym)."""
    from_pixels: bool = False
    """Observe rendered pixels rather than the state vectors."""
    frame_skip: int = 1
    """Repeat each action this many times; see :func:`correct_for_frame_skip`."""
    reward_scaling: Any = None
    """Multiply rewards by this (``None``: no reward scaling)."""
    reward_loc: float = 0.0
    """Add this to the rewards (with ``reward_scaling``)."""
    init_env_steps: int = 1000
    """Random steps used to compute the observation statistics."""
    vecnorm: bool = False
    """Normalise observations (and rewards, with ``norm_rewards``) with running stats."""
    norm_rewards: bool = False
    """With ``vecnorm``, normalise the rewards online as well."""
    norm_stats: bool = True
    """Normalise the observations with statistics of a random rollout."""
    noops: int = 0
    """Random no-op steps after each reset (0: none)."""
    catframes: int = 0
    """Stack this many consecutive frames (0: no stacking)."""
    center_crop: Any = dataclass_field(default_factory=list)
    """``[w]`` or ``[w, h]`` center crop of the pixels (empty: none)."""
    grayscale: bool = True
    """Turn the pixels to grayscale."""
    max_frames_per_traj: int = 1000
    """Steps before a trajectory is reset."""
    batch_transform: bool = False
    """Apply the transforms to the parallel env rather than to each worker's env."""
    image_size: int = 84
    """Side of the square pixel observations after resizing."""
    categorical_action_encoding: bool = False
    """Discrete actions as integers rather than one-hot (gym only)."""


def correct_for_frame_skip(cfg: Any) -> Any:
    """Divides the frame counts of ``cfg`` by ``cfg.frame_skip``, in place.

    A script that asks for 1M frames with a frame skip of 4 would otherwise run 4M
    simulator steps. Each field of ``max_frames_per_traj``, ``total_frames``,
    ``frames_per_batch``, ``record_frames``, ``annealing_frames``,
    ``init_random_frames``, ``init_env_steps`` and ``noops`` that ``cfg`` has becomes
    ``value // frame_skip``; nothing changes when ``frame_skip`` is 1.

    Args:
        cfg: a config with a ``frame_skip`` field.

    Returns:
        ``cfg`` itself.

    Raises:
        AttributeError: ``cfg`` has no ``frame_skip``.
        ValueError: ``frame_skip`` is not a positive integer.

    Examples:
        >>> from types import SimpleNamespace
        >>> cfg = SimpleNamespace(frame_skip=4, total_frames=1000, frames_per_batch=64)
        >>> correct_for_frame_skip(cfg)
        namespace(frame_skip=4, total_frames=250, frames_per_batch=16)
    """
    frame_skip = field(cfg, "frame_skip", "correct_for_frame_skip", "EnvConfig")
    if isinstance(frame_skip, bool) or not isinstance(frame_skip, int) or frame_skip < 1:
        raise ValueError(f"cfg.frame_skip must be a positive integer, got {frame_skip!r}")
    if frame_skip != 1:
        for name in FRAME_COUNT_FIELDS:
            if hasattr(cfg, name):
                setattr(cfg, name, getattr(cfg, name) // frame_skip)
    return cfg


def _obs_norm_stats(stats: dict | None, obs_norm_state_dict: dict | None) -> dict:
    """The ``loc``/``scale`` an ObservationNorm starts with: ``stats``, else a saved state."""
    source = stats if stats is not None else obs_norm_state_dict
    if source is None:
        return {}  # left uninitialized: see initialize_observation_norm_transforms
    return {name: source[name] for name in ("loc", "scale") if name in source}


def make_env_transforms(
    env,
    cfg,
    video_tag,
    logger,
    env_name,
    stats,
    norm_obs_only,
    env_library,
    action_dim_gsde,
    state_dim_gsde,
    batch_dims=0,
    obs_norm_state_dict=None,
):
    """Wraps ``env`` in the transforms ``cfg`` asks for (see :func:`transformed_env_constructor`).

    In order: a video recorder (when ``video_tag`` is set); for pixels, ``ToTensorImage``,
    the center crop, the resize to ``image_size``, grayscale, ``catframes`` stacked frames
    and an ``ObservationNorm``; the reward scaling; for states, every observation but the
    pixels and the state entries concatenated into ``"observation_vector"``, normalised
    (``ObservationNorm``, or ``VecNorm`` with ``cfg.vecnorm``) and stacked
    ``catframes`` times; ``DoubleToFloat``; gSDE noise (``cfg.gSDE``); a ``StepCounter``
    that truncates trajectories at ``cfg.max_frames_per_traj`` steps (when positive; TorchRL
    leaves the limit to the collector, which then refuses the env's step counter) and an
    ``InitTracker``.

    Args:
        env: the env to wrap.
        cfg: an :class:`EnvConfig`-like config.
        video_tag: tag of the recorded video ("" records none).
        logger: the logger the video is written to.
        env_name: name used in the video tag.
        stats: ``{"loc": ..., "scale": ...}`` of the observation normalisation.
        norm_obs_only: with ``VecNorm``, leave the rewards alone (and no reward scaling).
        env_library: unused; kept for TorchRL's signature.
        action_dim_gsde: action dimension of the gSDE noise.
        state_dim_gsde: state dimension of the gSDE noise.
        batch_dims: batch dimensions of ``env`` (unused: the transforms read the env's
            batch size).
        obs_norm_state_dict: a saved ``ObservationNorm`` state used when ``stats`` is None.

    Returns:
        The ``TransformedEnv``.

    Raises:
        ValueError: pixels are asked for with ``cfg.catframes`` 0.
    """
    envs = require("rl.envs", "make_env_transforms")
    needed = "make_env_transforms"
    env = envs.TransformedEnv(env)
    from_pixels = field(cfg, "from_pixels", needed, "EnvConfig")
    vecnorm = field(cfg, "vecnorm", needed, "EnvConfig")
    norm_rewards = vecnorm and field(cfg, "norm_rewards", needed, "EnvConfig")
    reward_scaling = field(cfg, "reward_scaling", needed, "EnvConfig")
    reward_loc = field(cfg, "reward_loc", needed, "EnvConfig")
    catframes = getattr(cfg, "catframes", 0)
    center_crop = list(getattr(cfg, "center_crop", None) or [])

    if video_tag:
        env.append_transform(
            envs.VideoRecorder(
                logger=logger,
                tag=f"{video_tag}_{env_name}_video",
                center_crop=center_crop[0] if center_crop else None,
            )
        )
    if from_pixels:
        if not catframes:
            raise ValueError(
                "cfg.from_pixels needs a positive cfg.catframes (the number of stacked "
                f"frames), got {catframes!r}"
            )
        env.append_transform(envs.ToTensorImage())
        if center_crop:
            env.append_transform(envs.CenterCrop(*center_crop))
        size = field(cfg, "image_size", needed, "EnvConfig")
        env.append_transform(envs.Resize(size, size))
        if field(cfg, "grayscale", needed, "EnvConfig"):
            env.append_transform(envs.GrayScale())
        env.append_transform(envs.FlattenObservation(0, -3, allow_positive_dim=True))
        env.append_transform(envs.CatFrames(N=catframes, in_keys=["pixels"], dim=-3))
        env.append_transform(
            envs.ObservationNorm(
                **_obs_norm_stats(stats, obs_norm_state_dict),
                in_keys=["pixels"],
                standard_normal=True,
            )
        )
    if norm_rewards or norm_obs_only:
        # the rewards are normalised by VecNorm, or deliberately left as they are
        reward_scaling, reward_loc = 1.0, 0.0
    if reward_scaling is not None:
        env.append_transform(envs.RewardScaling(reward_loc, reward_scaling))
    if not from_pixels:
        state_keys = set(env.state_spec.keys(True, True))
        selected = [
            key
            for key in env.observation_spec.keys(True, True)
            if "pixels" not in (key if isinstance(key, tuple) else (key,)) and key not in state_keys
        ]
        out_key = "observation_vector"  # even a single observation is renamed
        env.append_transform(envs.CatTensors(in_keys=selected, out_key=out_key))
        if not vecnorm:
            env.append_transform(
                envs.ObservationNorm(
                    **_obs_norm_stats(stats, obs_norm_state_dict),
                    in_keys=[out_key],
                    standard_normal=True,
                )
            )
        else:
            normalize_rewards = norm_rewards and not norm_obs_only
            env.append_transform(
                envs.VecNorm(
                    in_keys=[out_key, "reward"] if normalize_rewards else [out_key],
                    decay=0.9999,
                )
            )
        env.append_transform(envs.DoubleToFloat())
        if catframes:
            env.append_transform(envs.CatFrames(N=catframes, in_keys=[out_key], dim=-1))
    else:
        env.append_transform(envs.DoubleToFloat())
    if getattr(cfg, "gSDE", False):
        env.append_transform(envs.gSDENoise(action_dim=action_dim_gsde, state_dim=state_dim_gsde))
    # the envs enforce the trajectory limit (a collector refuses an env that already
    # counts steps, so the collector builders leave it to them)
    max_steps = getattr(cfg, "max_frames_per_traj", None)
    env.append_transform(
        envs.StepCounter(max_steps=max_steps if max_steps and max_steps > 0 else None)
    )
    env.append_transform(envs.InitTracker())
    return env


def get_norm_state_dict(env) -> dict[str, torch.Tensor]:
    """The entries of ``env.state_dict()`` whose name ends with ``loc`` or ``scale``."""
    return {
        key: value
        for key, value in env.state_dict().items()
        if key.endswith("loc") or key.endswith("scale")
    }


def transformed_env_constructor(
    cfg: Any,
    video_tag: str = "",
    logger: Any | None = None,
    stats: dict | None = None,
    norm_obs_only: bool = False,
    use_env_creator: bool = False,
    custom_env_maker: Callable | None = None,
    custom_env: Any | None = None,
    return_transformed_envs: bool = True,
    action_dim_gsde: int | None = None,
    state_dim_gsde: int | None = None,
    batch_dims: int | None = 0,
    obs_norm_state_dict: dict | None = None,
) -> Callable:
    """An env maker built from a script's config (:class:`EnvConfig` fields).

    The maker builds the simulator (``GymEnv`` or ``DMControlEnv`` after
    ``cfg.env_library``, on the first of ``cfg.collector_device``), or calls
    ``custom_env_maker``, or takes ``custom_env``; adds ``NoopResetEnv(cfg.noops)`` when
    ``cfg.noops`` is set (not to a ``custom_env``, usually a parallel env whose workers
    have it); and wraps the result in :func:`make_env_transforms`. Keyword arguments
    given to the maker go to the simulator class (or ``custom_env_maker``).

    Args:
        cfg: the config.
        video_tag: tag of a recorded video ("" records none).
        logger: the logger the video goes to.
        stats: ``{"loc": ..., "scale": ...}`` for the ``ObservationNorm``; ``None`` leaves
            it uninitialized (see :func:`initialize_observation_norm_transforms`) unless
            ``obs_norm_state_dict`` is given.
        norm_obs_only: with ``VecNorm``, leave the rewards alone.
        use_env_creator: return an ``EnvCreator`` (shares ``VecNorm`` statistics between
            workers) rather than the plain function.
        custom_env_maker: builds the env in place of the simulator library.
        custom_env: an env to transform (exclusive with ``custom_env_maker``).
        return_transformed_envs: ``False`` returns the env without the transforms.
        action_dim_gsde: action dimension of the gSDE noise.
        state_dim_gsde: state dimension of the gSDE noise.
        batch_dims: batch dimensions of the env (1 for a parallel env).
        obs_norm_state_dict: a saved ``ObservationNorm`` state to start from.

    Returns:
        A callable returning the env (an ``EnvCreator`` with ``use_env_creator``).

    Raises:
        ValueError: both ``custom_env`` and ``custom_env_maker`` are given (raised here,
            where TorchRL raises when the maker runs); ``cfg.env_library`` is unknown;
            ``categorical_action_encoding`` is asked of a library other than gym.

    Examples:
        >>> from types import SimpleNamespace
        >>> from rl.envs import PendulumEnv
        >>> cfg = SimpleNamespace(**vars(EnvConfig(env_name="Pendulum-v1")))
        >>> make_env = transformed_env_constructor(
        ...     cfg, custom_env_maker=PendulumEnv, stats={"loc": 0.0, "scale": 1.0}
        ... )
        >>> env = make_env()
        >>> env.reset()["observation_vector"].shape
        torch.Size([3])
    """
    if custom_env is not None and custom_env_maker is not None:
        raise ValueError(
            "transformed_env_constructor takes custom_env or custom_env_maker, not both"
        )
    needed = "transformed_env_constructor"
    library = field(cfg, "env_library", needed, "EnvConfig")
    if library not in _LIBRARIES:
        raise ValueError(f"cfg.env_library must be one of {sorted(_LIBRARIES)}, got {library!r}")

    def make_transformed_env(**kwargs):
        envs = require("rl.envs", needed)
        env_name = field(cfg, "env_name", needed, "EnvConfig")
        if custom_env is not None:
            env = custom_env
        elif custom_env_maker is not None:
            env = custom_env_maker(**kwargs)
        else:
            from_pixels = field(cfg, "from_pixels", needed, "EnvConfig")
            env_kwargs = {
                "env_name": env_name,
                "device": collector_device(cfg, needed),
                "frame_skip": field(cfg, "frame_skip", needed, "EnvConfig"),
                "from_pixels": bool(from_pixels or video_tag),
                "pixels_only": from_pixels,
            }
            categorical = getattr(cfg, "categorical_action_encoding", False)
            if library == "gym":
                env_kwargs["categorical_action_encoding"] = categorical
            elif categorical:
                raise ValueError(
                    "cfg.categorical_action_encoding=True is only supported with "
                    f"env_library='gym', got {library!r}"
                )
            if library == "dm_control":
                env_kwargs["task_name"] = field(cfg, "env_task", needed, "EnvConfig")
            env_kwargs.update(kwargs)
            env = getattr(envs, _LIBRARIES[library])(**env_kwargs)
        noops = getattr(cfg, "noops", 0)
        if noops and custom_env is None:
            env = envs.TransformedEnv(env, envs.NoopResetEnv(noops))
        if not return_transformed_envs:
            return env
        return make_env_transforms(
            env,
            cfg,
            video_tag,
            logger,
            env_name,
            stats,
            norm_obs_only,
            library,
            action_dim_gsde,
            state_dim_gsde,
            batch_dims=batch_dims,
            obs_norm_state_dict=obs_norm_state_dict,
        )

    if use_env_creator:
        return require("rl.envs", needed).EnvCreator(make_transformed_env)
    return make_transformed_env


def parallel_env_constructor(cfg: Any, **kwargs) -> Any:
    """Builds the collection envs of a script: ``cfg.env_per_collector`` workers.

    With one env per collector this is ``transformed_env_constructor(cfg,
    use_env_creator=True, **kwargs)`` (an ``EnvCreator``). Otherwise the workers of a
    ``ParallelEnv`` build the bare env (with its no-ops) and the transforms are applied
    once to the batched env, so that their statistics are shared.

    Args:
        cfg: the config (:class:`EnvConfig` fields, ``env_per_collector``, ``pin_memory``).
        **kwargs: passed to :func:`transformed_env_constructor`.

    Returns:
        An ``EnvCreator`` (one env per collector) or the transformed ``ParallelEnv``.

    Raises:
        ValueError: ``cfg.batch_transform`` is false (TorchRL raises
            ``NotImplementedError``: the per-worker transforms it would mean are not
            supported there either).
    """
    needed = "parallel_env_constructor"
    if not field(cfg, "batch_transform", needed, "EnvConfig"):
        raise ValueError(
            "parallel_env_constructor needs cfg.batch_transform=True: the transforms are "
            "applied to the parallel env so that the recorder is synced with the collection envs"
        )
    env_per_collector = field(cfg, "env_per_collector", needed, "OnPolicyCollectorConfig")
    kwargs = {**kwargs, "cfg": cfg, "use_env_creator": True}
    if env_per_collector == 1:
        return transformed_env_constructor(**kwargs)
    envs = require("rl.envs", needed)
    make_worker_env = transformed_env_constructor(**kwargs, return_transformed_envs=False)
    parallel_env = envs.ParallelEnv(
        num_workers=env_per_collector,
        create_env_fn=make_worker_env,
        create_env_kwargs=None,
        pin_memory=getattr(cfg, "pin_memory", False),
    )
    # the workers built the envs (with custom_env_maker, if given); the transforms wrap
    # the batch (TorchRL passes both and fails)
    kwargs.pop("custom_env_maker", None)
    kwargs.update(use_env_creator=False, custom_env=parallel_env, batch_dims=1)
    return transformed_env_constructor(**kwargs)()


def _single_observation_key(env, needed_by: str) -> NestedKey:
    keys = list(env.observation_spec.keys(True, True))
    if len(keys) != 1:
        raise RuntimeError(
            f"More than one key exists in the observation_specs: {keys} were found, "
            f"thus {needed_by} cannot infer which to compute the stats of; pass key="
        )
    return keys[0]


@torch.no_grad()
def get_stats_random_rollout(
    cfg: Any,
    proof_environment: Any = None,
    key: str | None = None,
) -> dict[str, torch.Tensor]:
    """The mean and standard deviation of an observation over random rollouts.

    Rollouts of at most ``cfg.init_env_steps`` steps with random actions run until
    ``cfg.init_env_steps`` transitions are gathered; the statistics are taken over every
    batch and time dimension (over all the values for ``"pixels"``). A zero standard
    deviation becomes 1, with a mean of 0, so that a constant entry passes through.

    Args:
        cfg: a config with ``init_env_steps`` (and the :class:`EnvConfig` fields when
            ``proof_environment`` is None).
        proof_environment: the env to roll out; ``None`` builds one from ``cfg`` (and
            closes it afterwards).
        key: the observation; ``None`` takes the env's only observation.

    Returns:
        ``{"loc": mean, "scale": std}``, each of the observation's feature shape (scalars
        for ``"pixels"``).

    Raises:
        AttributeError: ``cfg`` has no ``init_env_steps``.
        RuntimeError: ``key`` is None and the env has several observations; the
            statistics are not finite.
    """
    needed = "get_stats_random_rollout"
    steps = field(cfg, "init_env_steps", needed, "EnvConfig")
    built_here = proof_environment is None
    if built_here:
        proof_environment = transformed_env_constructor(
            cfg=cfg, use_env_creator=False, stats={"loc": 0.0, "scale": 1.0}
        )()
    if key is None:
        key = _single_observation_key(proof_environment, needed)
    feature_shape = proof_environment.observation_spec[key].shape[
        len(proof_environment.batch_size) :
    ]
    values, gathered = [], 0
    while gathered < steps:
        rollout = proof_environment.rollout(max_steps=steps)
        gathered += rollout.numel()
        values.append(rollout.get(key).cpu().reshape(-1, *feature_shape))
    values = torch.cat(values, 0)
    if key == "pixels":
        loc, scale = values.mean(), values.std()
    else:
        loc, scale = values.mean(dim=0), values.std(dim=0)
    constant = scale == 0
    loc = torch.where(constant, torch.zeros_like(loc), loc)
    scale = torch.where(constant, torch.ones_like(scale), scale)
    _log.debug("stats of %s over %d steps: loc=%s, scale=%s", key, values.shape[0], loc, scale)
    if not torch.isfinite(loc).all():
        raise RuntimeError(f"non-finite values found in the mean of {key!r}")
    if not torch.isfinite(scale).all():
        raise RuntimeError(f"non-finite values found in the standard deviation of {key!r}")
    if built_here:
        proof_environment.close()
    return {"loc": loc, "scale": scale}


def _observation_norms(env) -> list[tuple[int, Any]]:
    """``(index, transform)`` of each ObservationNorm of ``env.transform`` (itself or in a
    Compose)."""
    envs = require("rl.envs", "the observation-norm helpers")
    transform = env.transform
    if isinstance(transform, envs.Compose):
        return [(i, t) for i, t in enumerate(transform) if isinstance(t, envs.ObservationNorm)]
    if isinstance(transform, envs.ObservationNorm):
        return [(0, transform)]
    return []


def initialize_observation_norm_transforms(
    proof_environment: Any,
    num_iter: int = 1000,
    key: str | tuple[str, ...] | None = None,
) -> None:
    """Calls ``init_stats`` on each uninitialized ``ObservationNorm`` of a ``TransformedEnv``.

    Initialized norms are left alone, and an env without any ``ObservationNorm`` is a
    no-op.

    Args:
        proof_environment: the ``TransformedEnv``.
        num_iter: steps of the random rollout each ``init_stats`` runs.
        key: the observation to compute the statistics of; ``None`` takes the base env's
            only observation.

    Raises:
        RuntimeError: ``key`` is None and the base env has several observations.
    """
    norms = _observation_norms(proof_environment)
    if not norms:
        return
    if key is None:
        key = _single_observation_key(
            proof_environment.base_env, "initialize_observation_norm_transforms"
        )
    for _, norm in norms:
        if not norm.initialized:
            norm.init_stats(num_iter=num_iter, key=key)


def retrieve_observation_norms_state_dict(proof_environment: Any) -> list[tuple[int, dict]]:
    """``(index, state_dict)`` of each ``ObservationNorm`` of a ``TransformedEnv``.

    The index is the norm's position in the env's ``Compose`` (0 when the transform is the
    norm itself); the list is empty when there is none. Pass a state to
    :func:`transformed_env_constructor` (``obs_norm_state_dict``) to rebuild the env with it.
    """
    return [(index, norm.state_dict()) for index, norm in _observation_norms(proof_environment)]
