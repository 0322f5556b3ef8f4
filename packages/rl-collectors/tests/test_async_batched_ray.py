"""RayTransport: Ray tasks get the answers of a thread server in the driver (one test:
a local Ray runtime and its queue actors take seconds to start)."""

from __future__ import annotations

import sys

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.core.inference_server import InferenceServer, RayTransport
from rl.core.ray_runtime import local_ray

ray = pytest.importorskip("ray")
# the task below is sent to Ray's workers by value (this file is not importable there)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

# a bound that catches a hang, not a speed check (Ray's workers import torch and rl)
pytestmark = pytest.mark.timeout(300)


def make_policy() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])


def ask(client, obs):
    return client(TensorDict(observation=obs), timeout=120)["action"]


def test_ray_task_clients_get_the_policys_answers():
    policy = make_policy()
    with local_ray(num_cpus=2):  # checks that no Ray process is left on exit
        transport = RayTransport()
        clients = [transport.client() for _ in range(2)]
        obs = torch.randn(2, 3)
        remote_ask = ray.remote(ask)
        with InferenceServer(policy, transport, max_batch_size=2):
            answers = ray.get([remote_ask.remote(c, o) for c, o in zip(clients, obs)], timeout=240)
        with torch.no_grad():
            torch.testing.assert_close(torch.stack(answers), policy.module(obs))
        transport.close()
