"""What the ``--compile`` tests of the example scripts share.

Loading a script as a module, :func:`watch` (the dynamo totals after each call of a
script's update step, and its first compiled step's logs against eager ones on the same
weights, batch and random draws), :func:`check` (nothing compiled after the warm-up, no
graph break, one graph per compiled function), the :class:`Case` of a script's tiny run,
and :func:`run_case`, which runs one. The fixtures (``fresh_dynamo``,
``pendulum_dataset``) are in ``conftest.py``.

    sys.path.insert(0, str(Path(__file__).parent))
    from _compile_checks import ONE_GRAPH, Case, check, load, watch
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import sys
import types
from pathlib import Path

import torch
from torch._dynamo.utils import counters

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

ONE_GRAPH = {"backend": "eager", "fullgraph": True}  # dynamo only: fast, raises on a break


def record_dynamo_counters(folder: str, batch):
    """A collector's ``post_collect_hook`` (bound with ``functools.partial``): appends
    the dynamo counters of the process it runs in (a worker process, a Ray actor, a
    collector rank) to ``folder/<pid>.jsonl`` and returns the batch. For Ray, register
    this module to be pickled by value: the actors do not have ``tests/`` on their path."""
    import torch._dynamo.utils as dynamo_utils  # the worker's own counters, at the call

    found = dynamo_utils.counters
    row = {
        "graphs": found["stats"]["unique_graphs"],
        "frames": found["frames"]["ok"],
        "breaks": sum(found["graph_break"].values()),
        # frames compiled in all, recompilations included (fullgraph ones are not counted)
        "compiled": found["frames"]["total"],
    }
    with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    return batch


def worker_counters(folder: Path) -> dict[str, list[dict]]:
    """The rows :func:`record_dynamo_counters` wrote, per worker process (not this
    process's: ``RayCollector`` runs its ``post_collect_hook`` here too)."""
    return {
        path.stem: [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted(Path(folder).glob("*.jsonl"))
        if path.stem != str(os.getpid())
    }


def load_path(name: str, path: Path):
    """Runs the file ``path`` as the module ``name``, with ``examples/`` and the file's
    folder on ``sys.path``."""
    for folder in (EXAMPLES, path.parent):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def load(name: str):
    """The script ``examples/<name>.py`` (``"ppo"``, ``"llm/sft"``), run afresh as the
    module ``name`` with ``/`` as ``_``."""
    return load_path(name.replace("/", "_"), EXAMPLES / f"{name}.py")


def _break_reasons() -> set[str]:
    return {reason.split("\n")[0] for reason in counters["graph_break"]}


def _compiled_totals() -> tuple[int, int]:
    """Frames dynamo has compiled so far and graph breaks it has met."""
    return counters["frames"]["total"], sum(counters["graph_break"].values())


def _logs(logs) -> dict:
    """An update step's logs (a tensor, a dict or a TensorDict) as a flat dict."""
    if isinstance(logs, torch.Tensor):
        return {"": logs}
    if isinstance(logs, dict):
        return dict(logs)
    return dict(logs.items(True, True))


def _copy(arg):
    return arg.clone() if hasattr(arg, "clone") else arg


def _buffers(loss_fn) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The buffers (batch-norm statistics...) of the modules ``loss_fn`` closes over, each
    with a copy of its value."""
    while isinstance(loss_fn, functools.partial):
        loss_fn = loss_fn.func
    modules = [
        cell.cell_contents
        for cell in loss_fn.__closure__ or ()
        if isinstance(cell.cell_contents, torch.nn.Module)
    ]
    state = {
        id(value): value
        for module in modules
        for value in module.state_dict(keep_vars=True).values()
        if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)
    }
    return [(value, value.detach().clone()) for value in state.values()]


def watch(module, monkeypatch) -> list[tuple[int, int]]:
    """Records the dynamo totals after every call of the script's update step(s); the
    script builds them with ``module.UpdateStep``.

    At the first call of each compiled step, its loss is also computed eagerly on the
    same weights, a copy of the same batch and the same random draws (the RNG state put
    back in between), and the compiled step's logs must equal it."""
    seen: list[tuple[int, int]] = []
    real = module.UpdateStep

    class Watched(real):
        def __call__(self, *args):
            if self.compiled and not getattr(self, "_compared", False):
                self._compared = True
                rng, state = torch.get_rng_state(), _buffers(self.loss_fn)
                _, eager = self.loss_fn(*[_copy(arg) for arg in args])
                eager = {k: v.detach() for k, v in _logs(eager).items()}
                torch.set_rng_state(rng)
                with torch.no_grad():  # the running statistics the eager call moved
                    for buffer, value in state:
                        buffer.copy_(value)
                out = super().__call__(*args)
                compiled = _logs(out)
                assert sorted(compiled) == sorted(eager)
                for key, value in eager.items():
                    torch.testing.assert_close(compiled[key], value, rtol=1e-4, atol=1e-5)
            else:
                out = super().__call__(*args)
            seen.append(_compiled_totals())
            return out

    monkeypatch.setattr(module, "UpdateStep", Watched)
    return seen


def check(seen: list[tuple[int, int]], first: int, graphs: int | None = None) -> None:
    """After the first ``first`` calls of :func:`watch`'s steps, nothing compiled and no
    graph break; ``graphs`` graphs in all (default: one per compiled function)."""
    assert len(seen) > first + 2, seen
    # after the first ``first`` updates (a branch of a loss first taken there is compiled
    # then, once): no frame compiled, no graph break met
    assert seen[first:] == [seen[first]] * len(seen[first:]), seen
    assert not _break_reasons()  # (a recompilation raises: error_on_recompile)
    if graphs is None:
        # one graph per compiled function: the update step, the policy (and the advantage)
        assert counters["stats"]["unique_graphs"] == counters["frames"]["ok"]
    else:  # (``fullgraph`` compilations are not counted in ``frames``)
        assert counters["stats"]["unique_graphs"] == graphs


@dataclasses.dataclass
class Case:
    """A script's tiny ``--compile`` run and what its counters must read."""

    script: str
    config: dict
    calls: int
    """update-step calls of the run"""
    first: int
    """calls after which nothing is compiled any more (each step has been called once)"""
    graphs: int
    """compiled functions, one graph each: the update step(s), the collector's policy (the
    advantage)"""
    dataset: bool = False
    """the script learns from a saved dataset"""
    steps_in: str | None = None
    """the module whose ``UpdateStep`` the script's steps are (default: the script's)"""


def run_case(case: Case, compile, monkeypatch, tmp_path, request) -> None:
    """Runs ``case``'s script under ``compile`` (``True`` or :data:`ONE_GRAPH`) with its
    ``Config(**case.config)`` and checks its update steps' counters (:func:`watch`,
    :func:`check`); the ``fresh_dynamo`` fixture is the caller's."""
    module = load(case.script)
    seen = watch(sys.modules[case.steps_in or case.script], monkeypatch)
    extra = {"dataset": str(request.getfixturevalue("pendulum_dataset"))} if case.dataset else {}
    cfg = module.Config(
        **case.config, **extra, eval_episodes=1, progress=False, log_dir=str(tmp_path)
    )
    cfg.compile = compile
    module.main(cfg)
    assert len(seen) == case.calls
    check(seen, first=case.first, graphs=case.graphs)


class StrictCudaGraphs:
    """Stands in for ``tensordict.nn.CudaGraphModule`` on a machine without CUDA (where
    the real one only runs its function), holding callers to its contract: a TensorDict
    first and no tensor among the other arguments, a TensorDict or None out, the input
    shapes of the capture at every replay; and, as the real one does, its warm-up calls
    run on clones of the input leaves, and after ``warmup`` calls the function runs on a
    copy of the inputs and its output is a copy."""

    made: list[StrictCudaGraphs] = []  # every instance, for a test to count its replays

    def __init__(self, module, in_keys=None, out_keys=None, warmup=2, **kwargs):
        self.module, self.warmup, self.calls, self.shapes = module, warmup, 0, None
        StrictCudaGraphs.made.append(self)

    @property
    def replays(self) -> int:
        return max(self.calls - self.warmup, 0)

    def __call__(self, tensordict, *args, **kwargs):
        from tensordict import is_tensor_collection

        if not is_tensor_collection(tensordict):
            raise TypeError(f"CudaGraphModule takes a TensorDict first, got {type(tensordict)}")
        if any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values())):
            raise ValueError("All tensors must be passed in the tensordict, not as arg or kwarg.")
        self.calls += 1
        if self.calls <= self.warmup:
            # as the real one: a warm-up call runs on clones of the input leaves (put in
            # place in the caller's TensorDict), which breaks their aliasing as a replay's
            # copy does
            tensordict.apply(torch.clone, out=tensordict)
            return self.module(tensordict, *args, **kwargs)
        shapes = {k: v.shape for k, v in tensordict.items(True, True)}
        if self.shapes is None:
            self.shapes = shapes
        if shapes != self.shapes:
            raise ValueError(f"replayed with the input shapes {shapes}, captured {self.shapes}")
        out = self.module(tensordict.clone(), *args, **kwargs)
        if out is not None and not is_tensor_collection(out):
            raise RuntimeError(f"The output must be a tensordict or None, got {type(out)}")
        return None if out is None else out.clone()


def _common_code(value) -> dict | None:
    """The globals of ``value`` (a function, or a class's ``__init__``) when its code is
    examples/_common.py's (any loaded copy of it), else None."""
    try:
        fn = value.__init__ if isinstance(value, type) else value
        code = getattr(fn, "__code__", None)
        if not isinstance(code, types.CodeType):
            return None
        if code.co_filename != str(EXAMPLES / "_common.py"):
            return None
        return fn.__globals__
    except Exception:  # noqa: BLE001  (odd module attributes: proxies, lazy loaders)
        return None


def cuda_graphs_on_cpu(monkeypatch, capturable: bool = False) -> None:
    """``--cudagraphs`` on a machine without CUDA, for a test: ``StrictCudaGraphs`` in
    place of ``CudaGraphModule``, and ``examples/_common.py``'s device checks made no-ops
    in the globals of every loaded copy of ``_common`` that a loaded module uses (a
    script loaded before another test reloaded ``_common`` keeps its first copy) and in
    the scripts that import it by name; unless ``capturable``, so is making optimizers
    capturable (torch steps those on CUDA devices only)."""
    import tensordict.nn

    monkeypatch.setattr(tensordict.nn, "CudaGraphModule", StrictCudaGraphs)
    names = ["check_cudagraphs", "check_on_cuda"] + ([] if capturable else ["_capturable"])
    spaces = {}
    for module in list(sys.modules.values()):
        attributes = getattr(module, "__dict__", None)
        if not isinstance(attributes, dict):
            continue
        for value in list(attributes.values()):
            space = _common_code(value)
            if space is not None:
                spaces[id(space)] = space
        for name in names:
            if name in attributes and _common_code(attributes[name]) is not None:
                monkeypatch.setitem(attributes, name, lambda *args: None)
    for space in spaces.values():
        for name in names:
            if name in space:
                monkeypatch.setitem(space, name, lambda *args: None)
