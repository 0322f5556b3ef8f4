"""The Ray inference server: the policy built and served in a Ray actor through a
RayTransport, asked from the driver (one test: a local Ray runtime and its actors take
seconds to start)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.core.inference_server import InferenceServer
from rl.core.ray_runtime import local_ray

ray = pytest.importorskip("ray")

# a bound that catches a hang, not a speed check (Ray's workers import torch and rl)
pytestmark = pytest.mark.timeout(300)


def make_policy() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])


def test_ray_owned_server_serves_updates_and_shuts_down():
    obs = torch.randn(2, 3)
    with torch.no_grad():
        expected = make_policy().module(obs)
    with local_ray(num_cpus=2):  # checks that no Ray process is left on exit
        server = InferenceServer(
            policy_factory=make_policy,
            service_backend="ray",
            service_backend_options={"remote_config": {"num_cpus": 0}},
        )
        assert (server.service_backend, server.transport_kind) == ("ray", "ray")
        with server:
            first, second = server.clients(2)
            torch.testing.assert_close(
                first(TensorDict(observation=obs[0]), timeout=120)["action"], expected[0]
            )
            torch.testing.assert_close(
                second(TensorDict(observation=obs[1]), timeout=120)["action"], expected[1]
            )
            zeros = TensorDict.from_module(make_policy()).detach().apply(torch.zeros_like)
            assert server.update_model_weights(zeros) == {"accepted": True}
            out = first(TensorDict(observation=obs[1]), timeout=120)
            assert out["action"].tolist() == [0.0] and out["policy_version"].item() == 1
            assert server.stats()["requests"] == 3
        assert not server.is_alive
        with pytest.raises(RuntimeError, match="the Ray InferenceServer was shut down"):
            server.client()
