"""TorchRL 0.14.1's own update steps, eager and compiled, for ``bench_compile_torchrl.py``.

Run only by the interpreter of a scratch TorchRL install (never by the project's
environment, which does not depend on TorchRL)::

    ~/torchrl-ref/bin/python benchmarks/_torchrl_updates.py ALGO ROUNDS BLOCK

The networks, losses, optimizers and update functions are built as TorchRL's
sota-implementations build them (``sac/sac.py``, ``iql/iql_offline.py``,
``cql/cql_offline.py``; REDQ with ``sac.py``'s update, as its own script has no compile
option), compiled as they compile them (``torch.compile(update, mode="reduce-overhead")``,
their default without CUDA graphs, stock inductor options), with the sizes and loss
options of ``rl``'s examples (:data:`SIZES`; CQL without the Lagrange weight, a
deterministic backup) on a batch of Pendulum-sized transitions. Prints one JSON line: updates/s eager and compiled
(medians of interleaved blocks, one thread), the compile time and dynamo's graph and
graph-break counts.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import tensordict
import torch
import torchrl
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torchrl.data import Bounded
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import CQLLoss, IQLLoss, REDQLoss, SACLoss, SoftUpdate, group_optimizers

sys.path.insert(0, str(Path(__file__).parent))
from bench_compile import interleaved_rates  # noqa: E402

#: algorithm -> (hidden width, learning rate) of rl's example (batch 256 for all)
SIZES = {"sac": (64, 1e-3), "redq": (64, 1e-3), "iql": (256, 3e-4), "cql": (128, 1e-3)}
OBS, ACT, BATCH = 3, 1, 256


def mlp(hidden: int, out: int) -> MLP:
    return MLP(num_cells=[hidden] * 2, out_features=out, activation_class=torch.nn.ReLU)


def build(algo: str):
    """TorchRL's update function for ``algo``, called as ``update(batch)``."""
    hidden, lr = SIZES[algo]
    spec = Bounded(-2.0, 2.0, shape=(ACT,))
    net = torch.nn.Sequential(
        mlp(hidden, 2 * ACT),
        NormalParamExtractor(scale_mapping="biased_softplus_1.0", scale_lb=0.1),
    )
    actor = ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": spec.space.low, "high": spec.space.high, "tanh_loc": False},
        default_interaction_type=ExplorationType.RANDOM,
    )
    qvalue = ValueOperator(mlp(hidden, 1), in_keys=["observation", "action"])
    value = ValueOperator(mlp(hidden, 1), in_keys=["observation"])
    fake = TensorDict({"observation": torch.zeros(1, OBS), "action": torch.zeros(1, ACT)}, [1])
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        for module in (actor, qvalue, value):  # the lazy first layers
            module(fake.clone())

    if algo == "iql":
        loss = IQLLoss(actor, qvalue, value_network=value, loss_function="l2")
    elif algo == "cql":
        loss = CQLLoss(actor, qvalue, loss_function="l2", num_random=10, deterministic_backup=True)
    elif algo == "redq":
        loss = REDQLoss(
            actor,
            qvalue,
            num_qvalue_nets=10,
            sub_sample_len=2,
            loss_function="l2",
            action_spec=spec,
        )
    else:
        loss = SACLoss(actor, qvalue, num_qvalue_nets=2, loss_function="l2")
    loss.make_value_estimator(gamma=0.99)
    target = SoftUpdate(loss, tau=0.005)
    groups = [loss.actor_network_params, loss.qvalue_network_params]
    if algo == "iql":
        groups.append(loss.value_network_params)
    optimizers = [torch.optim.Adam(list(g.flatten_keys().values()), lr=lr) for g in groups]
    if algo != "iql":
        optimizers.append(torch.optim.Adam([loss.log_alpha], lr=lr))
    optimizer = group_optimizers(*optimizers)
    terms = {
        "iql": ("loss_actor", "loss_qvalue", "loss_value"),
        "cql": ("loss_actor", "loss_qvalue", "loss_cql", "loss_alpha"),
    }.get(algo, ("loss_actor", "loss_qvalue", "loss_alpha"))

    iteration, policy_eval_start = torch.tensor(5_000), 1_000  # CQL: past its BC warm-up

    def update(batch):  # the sota scripts' update: loss, backward, steps, target update
        losses = loss(batch)
        if algo == "cql":  # cql_offline.py's choice of the actor loss, as rl's offline.py
            losses["loss_actor"] = torch.where(
                iteration >= policy_eval_start, losses["loss_actor"], losses["loss_actor_bc"]
            )
        sum(losses[key] for key in terms).sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        target.step()
        return losses.detach()

    return update


def batch() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "observation": torch.randn(BATCH, OBS, generator=g),
            "action": torch.rand(BATCH, ACT, generator=g) * 4 - 2,
            ("next", "observation"): torch.randn(BATCH, OBS, generator=g),
            ("next", "reward"): torch.randn(BATCH, 1, generator=g),
            ("next", "done"): torch.zeros(BATCH, 1, dtype=torch.bool),
            ("next", "terminated"): torch.zeros(BATCH, 1, dtype=torch.bool),
        },
        [BATCH],
    )


def main() -> None:
    algo, rounds, block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = batch()
    steps = {False: build(algo), True: torch.compile(build(algo), mode="reduce-overhead")}
    start = time.perf_counter()
    steps[True](data)
    compile_s = time.perf_counter() - start
    for _ in range(3):  # past the first calls of both
        steps[True](data)
        steps[False](data)
    eager, compiled = interleaved_rates(steps, data, rounds, block)
    counters = torch._dynamo.utils.counters
    print(
        json.dumps(
            {
                "eager": eager,
                "compiled": compiled,
                "compile_s": compile_s,
                "graphs": counters["stats"].get("unique_graphs", 0),
                "graph_breaks": sum(counters["graph_break"].values()),
                "versions": f"torchrl {torchrl.__version__}, tensordict "
                f"{tensordict.__version__}, torch {torch.__version__}",
            }
        )
    )


if __name__ == "__main__":
    main()
