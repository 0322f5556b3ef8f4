"""A Ray collector for the example scripts (``impala.py --ray``): Ray actors on a local
instance or a cluster, which receive the examples' own modules by value."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

__all__ = ["ray_collector"]


def ray_collector(
    make_env,
    policy,
    *,
    frames_per_batch: int,
    total_frames: int,
    num_collectors: int,
    address: str | None,
    num_cpus: int | None,
    compile: bool,
    **kwargs,
):
    """A ``RayCollector`` of ``num_collectors`` actors stepping ``make_env()`` with
    ``policy`` (``kwargs``: its other arguments). ``address=None`` starts a local Ray
    instance of ``num_cpus`` CPUs (default: all of this machine's), without the
    dashboard; ``"auto"`` (or ``"HEAD_IP:6379"``) joins the cluster that `ray start`
    runs."""
    import _common
    import ray

    from rl.collectors.distributed import RayCollector

    # the actors cannot import examples/_common.py on a cluster: Ray sends it by value
    ray.cloudpickle.register_pickle_by_value(_common)
    if compile:  # (the compiled policy's inductor passes too)
        import _compile_passes

        ray.cloudpickle.register_pickle_by_value(_compile_passes)
    if address is not None:
        init = {"address": address}
    else:
        init = {"address": "local", "num_cpus": num_cpus, "include_dashboard": False}
    return RayCollector(
        make_env,
        policy,
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        num_collectors=num_collectors,
        ray_init_config=init,
        **kwargs,
    )
