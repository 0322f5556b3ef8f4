"""What every example script shares: evaluation episodes, the progress bar, the run's end,
the command line of a script's presets.

Kept apart so that each script reads as the algorithm alone; nothing here is specific to
an algorithm, and all of it is thin glue over rl's pieces.
"""

from __future__ import annotations

import copy
import functools
import sys
import types
from pathlib import Path
from typing import Annotated, Union

import torch
import tyro
from tensordict import LazyStackedTensorDict, TensorDict, is_tensor_collection
from torch import nn

from rl.core import ExplorationType, TensorPolicy, set_exploration_type, tensor_policy
from rl.core.loggers import CSVLogger
from rl.core.trainers import EpisodeReturns, ProgressBar
from rl.envs import PROBES, GymEnv, VideoRecorder

__all__ = [
    "CompiledPolicy",
    "EpisodeReturns",
    "ProgressBar",
    "UpdateStep",
    "check_cudagraphs",
    "check_on_cuda",
    "summed_losses",
    "compile_advantage",
    "compile_policy",
    "compile_update",
    "own_compiled",
    "evaluate",
    "zero_grad",
    "finish_run",
    "prime_soft_update",
    "set_lr",
    "make_base_env",
    "preset_cli",
    "record_video",
    "whole_batches",
]


def make_base_env(
    env_id: str, num_envs: int = 1, from_pixels: bool = False, categorical: bool = False
):
    """A gymnasium env (a vector env when ``num_envs > 1``) or a probe env by name.

    Probe names are those of ``rl.envs.PROBES`` (``"ActionRewardProbe"``), with
    ``"-continuous"`` appended for the continuous version; probes are native batched envs.
    ``categorical=True`` gives a gym env's discrete actions as integers (TorchRL's
    ``categorical_action_encoding``) instead of one-hot vectors.
    """
    probes = {cls.__name__: cls for cls in PROBES}
    name, _, variant = env_id.partition("-")
    if name in probes:
        return probes[name](batch_size=[num_envs], continuous=variant == "continuous")
    kwargs = {"categorical_action_encoding": True} if categorical else {}
    if from_pixels:
        return GymEnv(env_id, from_pixels=True, pixels_only=False, **kwargs)
    if num_envs > 1:
        return GymEnv(env_id, num_envs=num_envs, **kwargs)
    return GymEnv(env_id, **kwargs)


def check_cudagraphs(cudagraphs: bool) -> None:
    """Raises a clear error when ``--cudagraphs`` is asked for without a CUDA device."""
    if cudagraphs and not torch.cuda.is_available():
        raise RuntimeError(
            "--cudagraphs needs a CUDA device, and torch.cuda.is_available() is False on this "
            "machine (no CUDA GPU, or a CPU-only torch build); run without --cudagraphs "
            "(--compile alone works on CPU)"
        )


def check_on_cuda(what: str, tensors) -> None:
    """Raises a clear error when a CUDA graph would capture ``what`` with ``tensors`` (its
    parameters) off CUDA: a replay would not run their CPU work, and tensordict's
    ``CudaGraphModule`` refuses CPU inputs only at the capture, after its warm-up calls.
    On a GPU machine ``--cudagraphs`` without ``--device cuda`` stops here, at the start."""
    devices = sorted({str(t.device) for t in tensors if t.device.type != "cuda"})
    if devices:
        raise RuntimeError(
            f"--cudagraphs captures {what} on a CUDA device, but its parameters are on "
            f"{', '.join(devices)}: run with --device cuda (the networks, the update step "
            "and the replay buffer then live on the GPU)"
        )


def resolve_device(name: str) -> torch.device:
    """The device that ``--device name`` asks for: any torch device name (``cpu``,
    ``cuda``, ``cuda:1``), or ``auto``: the first CUDA device where one is visible, else
    the CPU. A CUDA device this machine does not have is refused here, at the start."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"--device {name!r} is not a torch device name: {err}") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise RuntimeError(
                f"--device {name!r}: this machine has {count} CUDA device(s) visible to "
                "torch (torch.cuda.is_available() is "
                f"{torch.cuda.is_available()}); run with --device cpu"
            )
        if device.index is None:  # indexed, as the tensors' devices are (cuda:0 != cuda)
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def collector_devices(device: torch.device) -> dict:
    """The ``Collector`` arguments for a policy and batches on ``device``: none on the
    CPU, where the environments' outputs already are (a batch given a ``storing_device``
    is moved there again, a walk of its structure per batch: 2% of a one-env collector's
    speed)."""
    if device.type == "cpu":
        return {}
    return {"policy_device": device, "storing_device": device}


def on_cpu(policy):
    """``policy`` itself when its parameters and buffers are on the CPU (or it has none),
    else a copy of it on the CPU: what the evaluations run in the CPU environments, so
    that a run on a GPU evaluates its networks as they are, without moving every step."""
    tensors = [*policy.parameters(), *policy.buffers()] if isinstance(policy, nn.Module) else []
    if all(t.device.type == "cpu" for t in tensors):
        return policy
    return copy.deepcopy(policy).to("cpu")


def compile_update(fn, *, compile: bool, cudagraphs: bool = False, warmup: int = 10):
    """``fn`` (one whole update step: loss, backward, clipping, optimizer step, target
    update) compiled once with ``torch.compile``, and/or captured in a CUDA graph.

    As LeanRL: ``torch.compile`` with the default mode (``fullgraph`` is not forced: an
    optimizer step may be traced in parts, but none of it runs eagerly), and
    ``tensordict.nn.CudaGraphModule`` for the CUDA graph, replayed after ``warmup`` eager
    calls. The returned callable takes the same arguments as ``fn``; with CUDA graphs
    those must keep their shapes (a fixed batch size), and ``fn`` must return a TensorDict
    (or None), as ``CudaGraphModule`` does.
    """
    check_cudagraphs(cudagraphs)
    if compile:
        fn = torch.compile(fn, **_compile_kwargs(compile))
    if cudagraphs:
        from tensordict.nn import CudaGraphModule

        fn = CudaGraphModule(fn, in_keys=[], out_keys=[], warmup=warmup)
    return fn


def summed_losses(loss_module, terms: tuple[str, ...], logs: tuple[str, ...] | None = None):
    """The ``loss_fn`` of an :class:`UpdateStep` that sums ``loss_module``'s ``terms`` and
    logs its ``logs`` entries (the terms by default)."""
    logs = terms if logs is None else logs

    def summed(sample):
        losses = loss_module(sample)
        loss = losses[terms[0]]
        for key in terms[1:]:
            loss = loss + losses[key]
        return loss, losses.select(*logs)

    return summed


class UpdateStep:
    """One gradient step: ``loss_fn``, the gradients, clipping, every optimizer's step
    and the target update; compiled, all of it is ONE graph.

    ``loss_fn(*args)`` returns ``(loss, logs)`` (``logs``: a tensor, a dict or a
    TensorDict of tensors, returned detached). Eager (``compile=False``), a call runs what a script
    would write: ``zero_grad``, ``loss.backward()``, ``clip_grad_norm_`` (with
    ``max_grad_norm``: over all parameters, or over each parameter group on its own with
    ``clip_each_group``, or over ``clip_params`` alone when given), ``optimizer.step()``
    of each optimizer, ``target_update.step()``.

    Compiled, a call runs one graph that computes the loss, its gradients
    (``torch.autograd.grad``, traced by dynamo with ``trace_autograd_ops``), the
    clipping, each optimizer's update (Adam / AdamW / RMSprop, written here with the
    same arithmetic as ``torch.optim``'s, on the optimizers' own state, so that their
    ``state_dict`` stays valid) and a ``SoftUpdate``'s Polyak step, and returns the new
    parameter and target values; one ``torch._foreach_copy_`` writes them (the losses
    keep views of their parameters that a graph cannot mutate). A ``HardUpdate`` (a
    counter and, every ``interval`` steps, a copy) runs after it, eagerly. The
    learning rates become tensors (``set_lr`` fills them in place: no recompilation
    when they are annealed). Optional ``cudagraphs`` wraps the call in a
    ``tensordict.nn.CudaGraphModule`` (fixed shapes).

    ``compile`` may be a dict of ``torch.compile`` arguments (``{"fullgraph": True}``).

    Raises:
        ValueError: an optimizer the compiled step does not write (other than Adam,
            AdamW, RMSprop without momentum / centering / amsgrad / weight decay on
            Adam's gradient).
    """

    def __init__(
        self,
        loss_fn,
        optimizers,
        *,
        compile: bool | dict = False,
        cudagraphs: bool = False,
        max_grad_norm: float | None = None,
        clip_each_group: bool = False,
        target_update=None,
        warmup: int = 10,
        clip_params=None,
    ) -> None:
        check_cudagraphs(cudagraphs)
        if isinstance(optimizers, torch.optim.Optimizer):
            optimizers = [optimizers]
        self.loss_fn = loss_fn
        self.optimizers = list(optimizers)
        self.max_grad_norm = max_grad_norm
        self.target_update = target_update
        groups = [g["params"] for o in self.optimizers for g in o.param_groups]
        self.params = [p for params in groups for p in params]
        if cudagraphs:
            check_on_cuda("the update step", self.params)
        # the parameter sets clipped together: all, each group on its own, or those given
        at = {id(p): i for i, p in enumerate(self.params)}
        if clip_params is not None:
            if clip_each_group:
                raise ValueError("UpdateStep takes clip_params or clip_each_group, not both")
            self._clipped = [list(clip_params)]
            for i, param in enumerate(self._clipped[0]):
                if id(param) not in at:
                    raise ValueError(
                        f"clip_params[{i}] (a parameter of shape {tuple(param.shape)}) is in "
                        "none of the optimizers' param_groups: only parameters the step "
                        "updates can be clipped"
                    )
        else:
            self._clipped = [list(g) for g in groups] if clip_each_group else [self.params]
        self._clip_index = [[at[id(p)] for p in params] for params in self._clipped]
        self.compiled = compile
        counted = target_update is not None and hasattr(target_update, "counter")
        self._counted = target_update if counted else None
        fn = self._eager
        if compile:
            for optimizer in self.optimizers:
                _check_fusable(optimizer)
                _init_state(optimizer)
            soft = target_update is not None and self._counted is None
            self._soft = _soft_pairs(target_update) if soft else None
            if soft:  # the copies hold the targets, in place
                self._dst = self.params + self._soft[0]
                index = {id(p): i for i, p in enumerate(self.params)}
                self._at = [index.get(id(src)) for src in self._soft[1]]
            else:
                self._dst = self.params
            graph = _tracing_autograd(own_compiled(self._graph, compile))

            def fn(*args):
                logs, new = graph(*args)
                with torch.no_grad():
                    torch._foreach_copy_(self._dst, list(new))
                return logs

        if cudagraphs and not compile:
            # torch.optim's step inside a CUDA graph: capturable (its step counts and
            # learning-rate arithmetic on the device, no host sync), or the capture fails
            _capturable(self.optimizers)
        if cudagraphs:
            fn = _cuda_graphed(fn, warmup)
        self._fn = fn

    def __call__(self, *args):
        logs = self._fn(*args)
        if self._counted is not None:
            # a HardUpdate counts its steps in Python, which a CUDA graph's replay would
            # not run: it steps here, after the (compiled, captured) step, in either mode
            self._counted.step()
        return logs

    def _eager(self, *args):
        loss, logs = self.loss_fn(*args)
        zero_grad(*self.optimizers)
        loss.backward()
        if self.max_grad_norm is not None:
            for params in self._clipped:
                nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        for optimizer in self.optimizers:
            optimizer.step()
        if self.target_update is not None and self._counted is None:
            self.target_update.step()
        return _detached(logs)

    def _graph(self, *args):
        loss, logs = self.loss_fn(*args)
        logs = _detached(logs)
        # retain_graph: the losses keep module attributes that reference the graph
        grads = torch.autograd.grad(loss, self.params, retain_graph=True, allow_unused=True)
        with torch.no_grad():
            if self.max_grad_norm is not None:
                grads = list(grads)
                for index in self._clip_index:
                    clipped = _clip([grads[i] for i in index], self.max_grad_norm)
                    for i, grad in zip(index, clipped):
                        grads[i] = grad
            new = []
            i = 0
            for optimizer in self.optimizers:
                for group in optimizer.param_groups:
                    n = len(group["params"])
                    new += _optimizer_step(optimizer, group, grads[i : i + n])
                    i += n
            if self._soft is not None:  # towards the online values just computed
                targets, sources, tau = self._soft
                ahead = [s.detach() if i is None else new[i] for s, i in zip(sources, self._at)]
                new += torch._foreach_lerp([t.detach() for t in targets], ahead, tau)
        return logs, new


def _capturable(optimizers) -> None:
    """Sets ``capturable`` on every param group that has the option (Adam, AdamW,
    RMSprop, ...), with its learning rate a tensor on the parameters' device (annealed in
    place by :func:`set_lr`), moving step counts already made to their parameters'
    device."""
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            if "capturable" not in group:
                continue
            group["capturable"] = True
            _tensor_lr(group)  # a float would be a constant of the capture
            for param in group["params"]:
                step = optimizer.state.get(param, {}).get("step")
                if torch.is_tensor(step) and step.device != param.device:
                    optimizer.state[param]["step"] = step.to(param.device)


def _cuda_graphed(fn, warmup: int):
    """``fn(*args) -> logs`` in a ``tensordict.nn.CudaGraphModule``, which takes its
    tensors in one TensorDict and returns a TensorDict: the arguments (tensors and
    TensorDicts, as an update step takes: a batch, minibatch indices) are packed into one,
    and the logs (a tensor, a dict or a TensorDict of tensors) unpacked to what ``fn``
    returns.

    What ``fn`` writes into a TensorDict argument (a loss's ``td_error`` for the
    priorities of a replay buffer) is returned with the logs and written into the
    caller's TensorDict: a replayed graph reads and writes its own copy of the inputs."""
    from tensordict.nn import CudaGraphModule

    kind = {}

    def packed(arguments: TensorDict) -> TensorDict:
        args = [arguments.get(f"arg{i}") for i in range(len(arguments.keys()))]
        # the entries of each TensorDict argument before the call (a lazy stack makes new
        # tensors at each read: not followed)
        leaves = {
            i: dict(arg.items(True, True))
            for i, arg in enumerate(args)
            if is_tensor_collection(arg) and not isinstance(arg, LazyStackedTensorDict)
        }
        logs = fn(*args)
        kind["logs"] = type(logs)
        out = TensorDict()
        if logs is not None:
            out.set("logs", TensorDict(dict(logs)) if isinstance(logs, dict) else logs)
        for i, before in leaves.items():
            written = [k for k, v in args[i].items(True, True) if before.get(k) is not v]
            if written:
                out.set(("written", f"arg{i}"), args[i].select(*written))
        return out

    graphed = CudaGraphModule(packed, in_keys=[], out_keys=[], warmup=warmup)

    def call(*args):
        for i, arg in enumerate(args):
            if not (isinstance(arg, torch.Tensor) or is_tensor_collection(arg)):
                raise TypeError(
                    f"an update step captured in a CUDA graph takes tensors and TensorDicts; "
                    f"argument {i} is a {type(arg).__name__} ({arg!r})"
                )
        out = graphed(TensorDict({f"arg{i}": arg for i, arg in enumerate(args)}))
        written = out.get("written", None)
        if written is not None:
            for name, values in written.items():
                args[int(name[3:])].update(values)
        logs = out.get("logs", None)
        if kind["logs"] is dict:
            return dict(logs.items())
        return logs

    return call


def _own_code(fn):
    """``fn`` (a function or a bound method) with a copy of its code object: dynamo keeps
    its compiled graphs per code object, so each ``UpdateStep`` (each compiled advantage)
    gets a cache of its own (a script's second step, the actor's after the critics', is
    then no recompilation of the first)."""
    method = fn if isinstance(fn, types.MethodType) else None
    fn = fn.__func__ if method is not None else fn
    copy = types.FunctionType(
        fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    return copy if method is None else types.MethodType(copy, method.__self__)


def _detached(logs):
    if isinstance(logs, dict):
        return {key: value.detach() for key, value in logs.items()}
    return logs.detach()


#: inductor options of every function the examples compile (unless ``compile`` names a
#: ``mode`` or another backend): on CPU, ``tanh`` as ``2 / (1 + exp(-2x)) - 1`` in the
#: generated kernels instead of SLEEF's vectorised ``tanh``: 7 against 25 us a kernel on
#: ppo's 256x64 activations (a tenth of its compiled update step). Its error is absolute,
#: 2e-7 at most: near 0 the relative error is large (tanh(1e-8) gives 0), which is why
#: inductor keeps it off by default (pytorch#148241: an ``atan2`` of such a value flips);
#: harmless for the activations of Tanh networks and TanhNormal's squashing (whose
#: log-probability reads the pre-tanh value). No effect on CUDA kernels; left out on a
#: torch whose inductor lacks the option (it came with torch 2.8).
INDUCTOR_OPTIONS = {"cpp.use_decompose_tanh": True}


#: the examples' compiled graphs run ``_compile_passes.CommonSubexpressions`` among
#: inductor's post-grad passes: what a graph computes twice from the same inputs (IQL's
#: target critics on the dataset actions, for two of its losses), it computes once; the
#: same values, faster compiled update steps (``bench_compile.py --micro ... --cse-ab``,
#: figures in benchmarks/results/compile.md).
COMMON_SUBEXPRESSIONS = True

#: and ``_compile_passes.NarrowProducts`` before inductor's post-grad passes: a matrix
#: product with a narrow result (a first layer's weight gradient over a few observation
#: features) computed transposed, the orientation MKL runs up to 8x faster on this project's
#: CPU (one thread, an AMD EPYC), and an outer product (a one-output layer's input
#: gradient) as a broadcast product. The bounds were measured on that one CPU: on another
#: CPU or BLAS, time ``benchmarks/bench_compile.py --micro ... --narrow-ab`` before
#: relying on them
NARROW_PRODUCTS = True


def _inductor_options() -> dict:
    """:data:`INDUCTOR_OPTIONS` this torch's inductor knows, by the dotted names its config
    lists, and the :data:`COMMON_SUBEXPRESSIONS` and :data:`NARROW_PRODUCTS` passes
    (inductor is imported at a compile, not with this module: importing it costs a
    second)."""
    from torch._inductor import config

    known = config.get_config_copy()
    options = {key: value for key, value in INDUCTOR_OPTIONS.items() if key in known}
    if (
        torch.torch_version.TorchVersion(torch.__version__) < "2.13"
        and "loop_ordering_after_fusion" in known
    ):
        # torch <= 2.12's scheduler asserts while reordering the loops of a fused node
        # that holds a non-loop node (PPO's update on CUDA, torch 2.11); 2.13 skips the
        # reordering there, as this does
        options["loop_ordering_after_fusion"] = False
    if COMMON_SUBEXPRESSIONS and "post_grad_custom_post_pass" in known:
        from _compile_passes import CommonSubexpressions

        options["post_grad_custom_post_pass"] = CommonSubexpressions()
    if NARROW_PRODUCTS and "post_grad_custom_pre_pass" in known:
        from _compile_passes import NarrowProducts

        options["post_grad_custom_pre_pass"] = NarrowProducts()
    return options


def _compile_kwargs(compile: bool | dict) -> dict:
    """``torch.compile``'s arguments for ``compile`` (True or a dict of them), with
    :data:`INDUCTOR_OPTIONS` under the caller's own ``options``."""
    kwargs = dict(compile) if isinstance(compile, dict) else {}
    if "mode" not in kwargs and kwargs.get("backend", "inductor") == "inductor":
        kwargs["options"] = {**_inductor_options(), **kwargs.get("options", {})}
    return kwargs


def _check_fusable(optimizer) -> None:
    kind = type(optimizer)
    for group in optimizer.param_groups:
        if kind in (torch.optim.Adam, torch.optim.AdamW):
            adam_wd = group["weight_decay"] and not _decoupled(optimizer, group)
            if group["amsgrad"] or group["maximize"] or adam_wd:
                break
        elif kind is torch.optim.RMSprop:
            if group["momentum"] or group["centered"] or group["weight_decay"]:
                break
            if group["maximize"]:
                break
        else:
            break
    else:
        return
    raise ValueError(
        f"the compiled update step writes Adam, AdamW and RMSprop (no amsgrad, maximize, "
        f"momentum, centering, or L2 weight decay on Adam), got {kind.__name__} with "
        f"{ {k: v for k, v in optimizer.defaults.items() if k not in ('params',)} }"
    )


def _decoupled(optimizer, group) -> bool:
    return isinstance(optimizer, torch.optim.AdamW) or bool(group.get("decoupled_weight_decay"))


def _init_state(optimizer) -> None:
    """The optimizer's per-parameter state as its first ``step`` creates it (kept where it
    exists); float learning rates become tensors."""
    adam = isinstance(optimizer, torch.optim.Adam)
    for group in optimizer.param_groups:
        # the learning rate and the step counts on the parameters' device: a CUDA graph
        # replays device work only (CPU scalars would keep their values at the capture)
        _tensor_lr(group)
        for p in group["params"]:
            state = optimizer.state[p]
            if state:
                continue
            state["step"] = torch.tensor(0.0, device=p.device)
            if adam:
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            else:
                state["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)


def _tensor_lr(group: dict) -> None:
    """A float learning rate of ``group`` becomes a tensor on its parameters' device
    (:func:`set_lr` fills it in place)."""
    if not isinstance(group["lr"], torch.Tensor):
        device = group["params"][0].device if group["params"] else None
        group["lr"] = torch.tensor(float(group["lr"]), device=device)


def _clip(grads, max_norm: float):
    """``clip_grad_norm_``'s arithmetic on a list of gradients (``None``: unused)."""
    used = [g for g in grads if g is not None]
    if not used:
        return list(grads)
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(used)))
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    scaled = iter(torch._foreach_mul(used, coef))
    return [None if g is None else next(scaled) for g in grads]


def _optimizer_step(optimizer, group, grads) -> list[torch.Tensor]:
    """The new values of ``group``'s parameters after one step (its state updated in
    place), with ``torch.optim``'s arithmetic (single-tensor Adam / RMSprop)."""
    lr = group["lr"]
    out = []
    for p, g in zip(group["params"], grads):
        value = p.detach()
        if g is None:  # no gradient: torch.optim leaves the parameter and its state
            out.append(value)
            continue
        state = optimizer.state[p]
        step = state["step"]
        step.add_(1)
        if isinstance(optimizer, torch.optim.Adam):
            beta1, beta2 = group["betas"]
            if group["weight_decay"]:
                value = value * (1 - lr * group["weight_decay"])
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            exp_avg.lerp_(g, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            step_size = lr / (1 - beta1**step)
            denom = (exp_avg_sq.sqrt() / (1 - beta2**step).sqrt()).add_(group["eps"])
            out.append(value - step_size * exp_avg / denom)
        else:
            alpha = group["alpha"]
            square_avg = state["square_avg"]
            square_avg.mul_(alpha).addcmul_(g, g, value=1 - alpha)
            out.append(value - lr * g / square_avg.sqrt().add_(group["eps"]))
    return out


def _soft_pairs(updater) -> tuple[list, list, float]:
    """(targets, sources, tau) of a ``SoftUpdate``: the loss's ``target_<net>_params``
    entries and the ``<net>_params`` entries they follow."""
    loss = updater.loss_module
    targets, sources = [], []
    for name, target in loss.named_children():
        if not (name.startswith("target_") and name.endswith("_params")):
            continue
        source = getattr(loss, name[len("target_") :])
        for key, value in target.items(True, True):
            if value.is_floating_point():
                targets.append(value)
                sources.append(source.get(key))
    return targets, sources, 1.0 - updater.eps


def zero_grad(*optimizers) -> None:
    """``optimizer.zero_grad()`` (gradients set to ``None``) written so that
    ``torch.compile`` traces it (dynamo does not trace ``Optimizer.zero_grad`` itself)."""
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.grad = None


def prime_soft_update(updater) -> None:
    """Runs one ``SoftUpdate.step()`` before the first compiled update, while the targets
    still equal the online networks (a no-op on the values: ``lerp(x, x, w) == x``):
    the updater builds its cache of parameter lists on its first step, and a compiled
    step traced before that cache exists would be recompiled at the second call."""
    updater.step()


def set_lr(optimizer, lr: float) -> None:
    """Sets the learning rate of every group of ``optimizer``, in place where it is a
    tensor (compiled updates keep it a tensor: a float would be a constant of the
    compiled optimizer step, recompiled at every change)."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def compile_advantage(advantage, *, compile: bool):
    """``advantage(batch)`` (a value estimator: GAE, TD(lambda)...) run without gradients,
    compiled once with ``compile`` (one graph: the value network on the batch and the
    vectorised scan; rl-cpp's kernel is for eager calls)."""

    def run(batch):
        with torch.no_grad():
            return advantage(batch)

    return own_compiled(run, compile) if compile else run


def compile_policy(policy, *, compile: bool | dict, cudagraphs: bool = False, warmup: int = 10):
    """The policy a collector runs, compiled (``torch.compile``) and/or captured in a CUDA
    graph (``tensordict.nn.CudaGraphModule``); the policy itself is left as it is (the
    evaluation and the losses keep using it).

    Compiled, a policy with a tensor twin (``rl.core.tensor_policy``: rl.modules' actors,
    and a ``TensorDictSequential`` of an actor and an exploration module that declares
    one: ddpg.py's, td3.py's, dqn.py's) becomes a :class:`CompiledPolicy`, whose twin is
    the compiled one: the collector calls it on tensors at each step, with no TensorDict
    in the compiled code. Any other policy whose ``in_keys`` are strings (a batched env's
    epsilon-greedy policy, ...) is compiled on tensors too (:func:`_compiled_on_tensors`):
    the TensorDict it reads is built inside the compiled code."""
    check_cudagraphs(cudagraphs)
    if not (compile or cudagraphs):
        return policy
    if compile and not cudagraphs and tensor_policy(policy) is not None:
        return CompiledPolicy(policy, **_compile_kwargs(compile))
    in_keys = list(getattr(policy, "in_keys", ()))
    if compile and not cudagraphs and in_keys and all(type(key) is str for key in in_keys):
        # nested keys stay below: a group's batch size is its own (``("agents", ...)``:
        # the env's and the agents' dims), which a TensorDict built from the root's
        # batch size would not give an exploration module that draws per group element
        return _compiled_on_tensors(policy, in_keys, compile)
    if compile:
        policy = torch.compile(policy, **_compile_kwargs(compile))
    if cudagraphs:
        from tensordict.nn import CudaGraphModule

        parameters = getattr(policy, "parameters", None)
        check_on_cuda("the policy", list(parameters()) if callable(parameters) else [])
        policy = CudaGraphModule(policy, warmup=warmup)

    # a function, not the wrapper module: ``env.rollout`` takes a module that is no
    # TensorDictModule for a plain module on tensors (and wraps it), and rl's eager
    # tensor twin of the wrapped policy would bypass the compiled code. The policy sees
    # its in_keys only, contiguous: the same inputs at every call (the rollout's root
    # holds strided views of its buffers), so no guard fails and it compiles once.
    def act(tensordict):
        if not in_keys:
            return policy(tensordict)
        return tensordict.update(policy(tensordict.select(*in_keys).contiguous()))

    return act


def _compiled_on_tensors(policy, in_keys: list[str], compile: bool | dict):
    """``policy`` (a TensorDict module without a tensor twin, string in_keys) compiled on
    the tensors at its ``in_keys``: the compiled function builds the TensorDict it reads
    (the caller's batch size and device, those keys only, contiguous) and returns what
    the policy returns, which the caller's TensorDict is updated with, as
    ``policy(tensordict.select(*in_keys))``.

    Dynamo then guards tensors and the policy's attributes, not the structure of a
    TensorDict argument: a call of dqn.py's epsilon-greedy Q policy on one CartPole took
    86 us instead of 100, ddpg.py's Gaussian-noise actor on one Pendulum 54 us instead of
    69 (interleaved blocks of 500 calls, benchmarks/results/compile.md), before those
    policies had tensor twins (a compiled twin: 46 us against this path's 58 for td3's). Another batch
    size or device compiles the function once more; each policy has a dynamo cache of
    its own (:func:`own_compiled`)."""

    def run(batch_size, device, *tensors):
        tensordict = TensorDict(batch_size=batch_size, device=device)
        for key, value in zip(in_keys, tensors):
            tensordict.set(key, value)
        return policy(tensordict)

    compiled = own_compiled(run, compile)

    def act(tensordict):
        tensors = [_read(tensordict, key) for key in in_keys]
        return tensordict.update(compiled(tensordict.batch_size, tensordict.device, *tensors))

    return act


def _read(tensordict, key):
    value = tensordict.get(key, None)
    if value is None:
        raise KeyError(
            f"the compiled policy reads {key!r}, which is not in its input; keys present: "
            f"{sorted(str(k) for k in tensordict.keys(True, True))}"
        )
    return value.contiguous()


class CompiledPolicy(nn.Module):
    """``policy`` whose tensor twin (``rl.core.tensor_policy``) is compiled once.

    It declares the tensor-policy protocol (``tensor_forward``): a collector finds the
    twin and calls the compiled function on the step's tensors (``observation`` in,
    ``action`` out), with no TensorDict inside the compiled code; called on a TensorDict,
    it reads the in_keys, runs the same compiled function and writes the out_keys. The
    inputs are made contiguous (a rollout hands strided views of its buffers) and it
    runs without gradients, so dynamo's guards hold from step to step and it compiles
    once. ``policy`` is shared,
    not copied: updated weights act at the next step. ``compile_kwargs`` go to
    ``torch.compile``.

    Pickled (a distributed collector sending it to its workers) or deep-copied, it is
    rebuilt from ``policy`` and ``compile_kwargs``: each copy compiles its own function
    at its first call, in its own process.
    """

    def __init__(self, policy: nn.Module, **compile_kwargs) -> None:
        super().__init__()
        self._compile_kwargs = compile_kwargs
        twin = tensor_policy(policy)
        if twin is None:
            raise TypeError(
                f"CompiledPolicy needs a policy with a tensor twin (rl.core.tensor_policy), "
                f"got {type(policy).__name__}, which has none"
            )
        self.policy = policy
        self.in_keys, self.out_keys = list(twin.in_keys), list(twin.out_keys)
        compiled = torch.compile(twin.forward, **compile_kwargs)

        def forward(*tensors):
            # acting needs no gradient; one grad mode for every caller (the collector's
            # first probe and its rollouts), so no guard on it fails
            with torch.no_grad():
                return compiled(*[t.contiguous() for t in tensors])

        self._twin = TensorPolicy(policy, self.in_keys, self.out_keys, forward)
        self._forward = forward

    def tensor_forward(self):
        """``(in_keys, out_keys, compiled fn)``: the protocol of ``rl.core.tensor_policy``."""
        return self.in_keys, self.out_keys, self._forward

    def __reduce__(self):
        # the compiled function does not pickle: a copy compiles its own
        return functools.partial(CompiledPolicy, **self._compile_kwargs), (self.policy,)

    def forward(self, tensordict):
        return self._twin(tensordict)


@torch.no_grad()
def evaluate(env, policy, episodes: int, max_steps: int = 1000) -> list[float]:
    """Returns of ``episodes`` deterministic episodes of ``policy`` in the single env ``env``
    (a policy on another device than the CPU: a CPU copy of it, :func:`on_cpu`)."""
    policy = on_cpu(policy)
    returns = []
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        for _ in range(episodes):
            rollout = env.rollout(max_steps, policy, break_when_any_done=True)
            returns.append(rollout["next", "reward"].sum().item())
    return returns


def record_video(env, policy, logger, max_steps: int = 1000):
    """Records one deterministic episode of ``policy`` in ``env`` (built with
    ``from_pixels=True``) through a ``VideoRecorder`` that hands it to ``logger``."""
    recorder = VideoRecorder(logger, tag="eval_video")
    env.append_transform(recorder)
    policy = on_cpu(policy)
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        env.rollout(max_steps, policy, break_when_any_done=True)
    return recorder.dump()


def finish_run(
    logger,
    returns: list[float],
    frames: int,
    seconds: float,
    curve_key: str = "train/episode_return",
    unit: str = "frames",
) -> dict:
    """Logs the evaluation, draws the learning curve of ``curve_key`` (CSV logger), closes
    the CSV logger's files and prints a summary (``frames`` counted as ``unit``; the
    summary's ``"fps"`` is ``unit`` per second)."""
    mean = sum(returns) / len(returns)
    logger.log_scalar("eval/return", mean, frames)
    curve = None
    if isinstance(logger, CSVLogger):
        from rl.core.plot import plot_runs

        run_dir = Path(logger.experiment)
        curve = run_dir / "learning_curve.png"
        plot_runs([run_dir], curve, keys=[curve_key])
        logger.close()  # its scalar files (a later row opens its file again)
    summary = {
        "frames": frames,
        "seconds": seconds,
        "fps": frames / seconds,
        "eval_returns": returns,
        "eval_mean": mean,
        "curve": curve,
    }
    print(
        f"trained {frames} {unit} in {seconds:.1f} s ({frames / seconds:.0f} {unit}/s); "
        f"evaluation over {len(returns)} deterministic episodes: mean return {mean:.1f}"
    )
    if curve is not None:
        print(f"learning curve: {curve}")
    return summary


def _tracing_autograd(compiled):
    """``compiled`` called with dynamo's ``trace_autograd_ops`` on (``torch.autograd.grad``
    traced into the graph, not a graph break), whichever call (re)compiles it. The flag is
    set around each call through the config's closure patcher where this torch has one
    (2 us a call, against 29 us for ``config.patch``'s context manager); it restores the
    caller's own setting after the call. (torch 2.11's patcher leaves the config's hash
    as it was, where ``config.patch`` marks it changed: nothing there hashes dynamo's
    config.)"""
    config = torch._dynamo.config
    maker = getattr(config, "_make_closure_patcher", None)
    if maker is None:  # pragma: no cover - older torch

        def patched(*args):
            with config.patch(trace_autograd_ops=True):
                return compiled(*args)

        return patched
    change = maker(trace_autograd_ops=True)

    def run(*args):
        revert = change()
        try:
            return compiled(*args)
        finally:
            revert()

    return run


def own_compiled(fn, compile: bool | dict = True, warmup: int = 0):
    """``torch.compile(fn)`` with a dynamo cache of its own (a copy of ``fn``'s code): two
    closures of one function (an acting step per exploration mode) each compile once,
    neither a recompilation of the other. ``compile`` may be a dict of ``torch.compile``
    arguments. The first ``warmup`` calls run ``fn`` eagerly (one that builds state on its
    first call, a simulator for the batch shape it sees, is traced once that state
    exists)."""
    compiled = torch.compile(_own_code(fn), **_compile_kwargs(compile))
    if not warmup:
        return compiled
    calls = 0

    def run(*args, **kwargs):
        nonlocal calls
        if calls < warmup:
            calls += 1
            return fn(*args, **kwargs)
        return compiled(*args, **kwargs)

    return run


def whole_batches(total_frames: int, frames_per_batch: int) -> int:
    """``total_frames`` rounded up to whole batches, as TorchRL's collectors count them.

    An on-policy script trains on each batch as it comes: with whole batches, every
    batch its advantage and update see has one shape, so compiled (``--compile``) they
    compile once; a smaller last batch would compile them a second time at the end of
    the run (a minute or more on a CPU)."""
    if frames_per_batch < 1:
        raise ValueError(f"frames_per_batch must be >= 1, got {frames_per_batch}")
    return -(-total_frames // frames_per_batch) * frames_per_batch


def preset_cli(config_cls, presets: dict, default: str, description: str, args=None):
    """Parses the command line (or ``args``) into ``config_cls``; with several presets,
    one subcommand each (``script.py preset --seed 1``), the default preset when the
    flags come first (``script.py --seed 1``); with one preset, no subcommand (its name is
    still accepted: ``script.py cartpole --seed 1``)."""
    args = sys.argv[1:] if args is None else list(args)
    if len(presets) == 1:
        args = args[1:] if args and args[0] == default else args
        return tyro.cli(config_cls, default=presets[default][1], description=description, args=args)
    if args and args[0] not in presets and args[0] not in ("-h", "--help"):
        args = [default, *args]
    choices = tuple(
        Annotated[config_cls, tyro.conf.subcommand(name, default=preset, description=text)]
        for name, (text, preset) in presets.items()
    )
    return tyro.cli(
        Union[choices],  # noqa: UP007
        default=presets[default][1],
        description=description,
        args=args,
    )
