"""``RemoteTransformersWrapper``: a :class:`TransformersWrapper` in a Ray actor, called from here."""

from __future__ import annotations

import logging
import os
from typing import Any

from rl.core.ray_runtime import acquire_runtime, import_ray, release_runtime, wait_started

from ._transformers import TransformersWrapper

__all__ = ["RemoteTransformersWrapper"]

logger = logging.getLogger(__name__)

_STARTUP_TIMEOUT_S = 300.0  # a worker importing torch and transformers on a loaded machine


class _TransformersWrapperActor:
    """What runs in the actor: one :class:`TransformersWrapper` and the calls on it."""

    def __init__(self, model: Any, kwargs: dict[str, Any]) -> None:
        if isinstance(model, str):
            from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

            if kwargs.get("tokenizer") is None and kwargs.get("input_mode", "history") != "tokens":
                kwargs = {**kwargs, "tokenizer": AutoTokenizer.from_pretrained(model)}
            model = AutoModelForCausalLM.from_pretrained(model).eval()
        self.wrapper = TransformersWrapper(model, **kwargs)

    def ready(self) -> int:
        return os.getpid()

    def call(self, method: str, *args, **kwargs) -> Any:
        return getattr(self.wrapper, method)(*args, **kwargs)

    def get(self, name: str) -> Any:
        return getattr(self.wrapper, name)

    def set(self, name: str, value: Any) -> None:
        setattr(self.wrapper, name, value)

    def cleanup_batching(self) -> None:
        self.wrapper.cleanup_batching()

    def get_batching_state(self) -> Any:
        return self.wrapper.get_batching_state()


def _remote_property(name: str, doc: str, settable: bool = False) -> property:
    def getter(self: RemoteTransformersWrapper) -> Any:
        return self._get_attr(name)

    def setter(self: RemoteTransformersWrapper, value: Any) -> None:
        self._ray_get(self._remote_wrapper.set.remote(name, value))

    return property(getter, setter if settable else None, doc=doc)


class RemoteTransformersWrapper:
    """A :class:`TransformersWrapper` running in a Ray actor, called as if it were here.

    The actor loads the model with ``transformers.AutoModelForCausalLM.from_pretrained``
    (and the tokenizer with ``AutoTokenizer``, unless ``tokenizer=`` is given) from a model
    name or a local path: a model object is not sent to the actor unless
    ``validate_model=False``. Calls (``wrapper(td)``, :meth:`get_dist`, ...) and attributes
    (``in_keys``, ``tokens_key``, ...) go to the actor and wait for its answer. Ray is started
    (``ray.init()``) when it does not run, and shut down with the last rl object using it
    (:meth:`shutdown`, or leaving a ``with`` block).

    Args:
        model: a model name or path (or, with ``validate_model=False``, a model object).
        max_concurrency: calls the actor serves at once.
        validate_model: refuse a ``model`` that is not a string.
        actor_name: a name for the actor; an actor of that name that already runs is used
            (and not killed by :meth:`shutdown`).
        num_gpus: GPUs reserved for the actor (TorchRL's default, 1: pass 0 on a CPU).
        num_cpus: CPUs reserved for the actor.
        **kwargs: the arguments of :class:`TransformersWrapper` (``tokenizer``,
            ``input_mode``, ``generate``, ``generate_kwargs``, ...).

    Raises:
        ValueError: ``model`` is not a string (with ``validate_model``), or Ray's cluster has
            fewer GPUs than ``num_gpus``.
        ImportError: Ray is not installed (``pip install "rl-objectives[ray]"``).

    Examples:
        >>> from rl.modules.llm import RemoteTransformersWrapper
        >>> policy = RemoteTransformersWrapper(  # doctest: +SKIP
        ...     "path/to/model", num_gpus=0, input_mode="text",
        ...     generate_kwargs={"max_new_tokens": 8},
        ... )
        >>> out = policy(td)  # doctest: +SKIP
        >>> policy.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        model,
        max_concurrency: int = 16,
        validate_model: bool = True,
        actor_name: str | None = None,
        num_gpus: int = 1,
        num_cpus: int = 1,
        **kwargs,
    ):
        if validate_model and not isinstance(model, str):
            raise ValueError(
                f"RemoteTransformersWrapper's model must be a model name or path (str), got "
                f"{type(model).__name__}: the actor loads it itself (validate_model=False sends "
                f"the object)"
            )
        ray = import_ray("RemoteTransformersWrapper", "rl-objectives[ray]")
        self._ray = ray
        self._remote_wrapper = None
        self._owns_actor = False
        self._held_runtime = acquire_runtime(ray, None)
        try:
            if actor_name is not None:
                try:
                    self._remote_wrapper = ray.get_actor(actor_name)
                    logger.info("Using the running actor %s", actor_name)
                    return
                except ValueError:
                    logger.info("Creating the actor %s", actor_name)
            gpus = ray.cluster_resources().get("GPU", 0)
            if num_gpus > gpus:
                raise ValueError(
                    f"RemoteTransformersWrapper asks num_gpus={num_gpus} and the Ray cluster has "
                    f"{gpus:g} GPU(s): pass num_gpus=0 to run the model on CPUs"
                )
            self._remote_wrapper = (
                ray.remote(_TransformersWrapperActor)
                .options(
                    max_concurrency=max_concurrency,
                    name=actor_name,
                    num_gpus=num_gpus,
                    num_cpus=num_cpus,
                )
                .remote(model, kwargs)
            )
            self._owns_actor = True
            (self.worker_pid,) = wait_started(
                ray,
                [self._remote_wrapper.ready.remote()],
                what="the RemoteTransformersWrapper actor",
                timeout=_STARTUP_TIMEOUT_S,
            )
        except BaseException:
            self.shutdown()
            raise

    # ------------------------------------------------------------------ plumbing
    def _ray_get(self, ref: Any) -> Any:
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayActorError as err:
            raise RuntimeError(f"the RemoteTransformersWrapper actor died: {err}") from err

    def _call(self, method: str, *args, **kwargs) -> Any:
        if self._remote_wrapper is None:
            raise RuntimeError("the RemoteTransformersWrapper was shut down")
        return self._ray_get(self._remote_wrapper.call.remote(method, *args, **kwargs))

    def _get_attr(self, name: str) -> Any:
        if self._remote_wrapper is None:
            raise RuntimeError("the RemoteTransformersWrapper was shut down")
        return self._ray_get(self._remote_wrapper.get.remote(name))

    # ------------------------------------------------------------------ calls
    def __call__(self, tensordict, **kwargs):
        """The wrapper's forward on ``tensordict``, run in the actor."""
        return self._call("forward", tensordict, **kwargs)

    def get_new_version(self, **kwargs):
        """The actor's ``get_new_version(**kwargs)`` (a new local wrapper)."""
        return self._call("get_new_version", **kwargs)

    def get_dist(self, tensordict, **kwargs):
        """The token distribution of ``tensordict`` (see :meth:`TransformersWrapper.get_dist`)."""
        return self._call("get_dist", tensordict, **kwargs)

    def get_dist_with_prompt_mask(self, tensordict, **kwargs):
        """The distribution over the response tokens only."""
        return self._call("get_dist_with_prompt_mask", tensordict, **kwargs)

    def _get_dist_with_assistant_mask(self, tensordict, **kwargs):
        return self._call("_get_dist_with_assistant_mask", tensordict, **kwargs)

    def _get_dist_with_attention_mask(self, tensordict, **kwargs):
        return self._call("_get_dist_with_attention_mask", tensordict, **kwargs)

    def _get_dist_with_custom_mask(self, tensordict, **kwargs):
        return self._call("_get_dist_with_custom_mask", tensordict, **kwargs)

    def _get_sft_dist(self, tensordict, **kwargs):
        return self._call("_get_sft_dist", tensordict, **kwargs)

    def _get_rlhf_dist(self, tensordict, **kwargs):
        return self._call("_get_rlhf_dist", tensordict, **kwargs)

    def _get_generic_dist(self, tensordict, **kwargs):
        return self._call("_get_generic_dist", tensordict, **kwargs)

    def log_prob(self, data, **kwargs):
        """The actor's ``log_prob(data, **kwargs)``."""
        return self._call("log_prob", data, **kwargs)

    def cleanup_batching(self):
        """Drops the calls queued in the actor's wrapper (nothing without batching)."""
        if self._remote_wrapper is not None:
            self._ray_get(self._remote_wrapper.cleanup_batching.remote())

    def get_batching_state(self):
        """The actor's batching state (``{"batching_enabled": False}`` without batching)."""
        if self._remote_wrapper is None:
            raise RuntimeError("the RemoteTransformersWrapper was shut down")
        return self._ray_get(self._remote_wrapper.get_batching_state.remote())

    # ------------------------------------------------------------------ life cycle
    def shutdown(self) -> None:
        """Kills the actor this wrapper created and gives back the Ray runtime."""
        actor, self._remote_wrapper = getattr(self, "_remote_wrapper", None), None
        if actor is not None and self._owns_actor:
            self._ray.kill(actor)
        held, self._held_runtime = getattr(self, "_held_runtime", False), False
        if held:
            release_runtime(self._ray, held)

    def __enter__(self) -> RemoteTransformersWrapper:
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        self.shutdown()

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:  # interpreter shutdown: Ray may be gone already
            pass

    # ------------------------------------------------------------------ attributes
    generate = _remote_property("generate", "Whether the wrapper generates.")
    pad_output = _remote_property("pad_output", "Whether outputs are padded.")
    text_key = _remote_property("text_key", "The key of the text.")
    tokens_key = _remote_property("tokens_key", "The key of the tokens.")
    masks_key = _remote_property("masks_key", "The key of the masks.")
    log_probs_key = _remote_property("log_probs_key", "The key of the log-probabilities.")
    in_keys = _remote_property("in_keys", "The keys the wrapper reads.")
    out_keys = _remote_property("out_keys", "The keys the wrapper writes.")
    inplace = _remote_property("inplace", "Whether the input TensorDict is written in place.")
    device = _remote_property("device", "The device of the model.")
    layout = _remote_property("layout", "The layout of the outputs.")
    num_samples = _remote_property("num_samples", "Answers generated per prompt.")
    batching = _remote_property("batching", "Whether requests are batched.")
    collector = _remote_property("collector", "The collector the wrapper is registered with.")
    log_prob_keys = _remote_property("log_prob_keys", "The log-probability keys.", settable=True)
    dist_params_keys = _remote_property("dist_params_keys", "The distribution parameter keys.")
    dist_sample_keys = _remote_property("dist_sample_keys", "The distribution sample keys.")
