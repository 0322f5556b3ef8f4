"""rl.core.inference_server: batched answers equal the policy's per request, errors
reach the right clients, and dead peers (server or client process) hang nobody."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, TensorDictModule, set_interaction_type
from tensordict.nn.probabilistic import interaction_type

from rl.core import service_backend
from rl.core.inference_server import (
    InferenceDeviceConfig,
    InferenceServer,
    InferenceServerClosedError,
    InferenceServerConfig,
    MPTransport,
    PolicyClientModule,
    ProcessInferenceServer,
    SharedMemoryTransport,
    SlotTransport,
    ThreadingTransport,
)

FORK = mp.get_context("fork")


def make_policy() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(torch.nn.Linear(4, 2), ["obs"], ["act"])


def expected(policy: TensorDictModule, obs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return policy.module(obs)


class Recorder(torch.nn.Module):
    """``act = 3 * obs``; records the batch size of each call."""

    def __init__(self):
        super().__init__()
        self.sizes: list[int] = []

    def forward(self, td):
        self.sizes.append(td.batch_size[0])
        return td.set("act", 3 * td["obs"])


class TestInferenceServer:
    def test_batches_equal_policy_per_request(self):
        policy = make_policy()
        recorder = []
        transport = ThreadingTransport()
        server = InferenceServer(
            lambda td: recorder.append(td.batch_size[0]) or policy(td), transport, max_batch_size=8
        )
        obs = torch.randn(20, 4)
        futures = [transport.submit(TensorDict(obs=o)) for o in obs]  # queued before start
        with server:
            answers = torch.stack([f.result(timeout=10)["act"] for f in futures])
        torch.testing.assert_close(answers, expected(policy, obs))
        assert recorder == [8, 8, 4]
        stats = server.stats()
        assert (stats["requests"], stats["batches"], stats["avg_batch_size"]) == (20, 3, 20 / 3)

    def test_many_concurrent_clients(self):
        policy = make_policy()
        transport = ThreadingTransport()
        obs = torch.randn(8, 25, 4)

        def worker(i):
            client = transport.client()
            return torch.stack([client(TensorDict(obs=o))["act"] for o in obs[i]])

        with InferenceServer(policy, transport, max_batch_size=4):
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(worker, range(8)))
        torch.testing.assert_close(torch.stack(answers), expected(policy, obs))

    def test_client_input_is_not_written_and_version_is_returned(self):
        transport = ThreadingTransport()
        td = TensorDict(obs=torch.ones(4))
        with InferenceServer(Recorder(), transport, policy_version=7):
            out = transport.client()(td)
        assert list(td.keys()) == ["obs"]
        torch.testing.assert_close(out["act"], torch.full((4,), 3.0))
        assert out["policy_version"].item() == 7

    def test_update_model_bumps_version(self):
        policy = make_policy()
        transport = ThreadingTransport()
        with InferenceServer(policy, transport) as server:
            server.update_model(lambda m: m.module.weight.data.zero_().add_(1.0))
            server.update_model(lambda m: m.module.bias.data.zero_())
            out = transport.client()(TensorDict(obs=torch.arange(4.0)))
        torch.testing.assert_close(out["act"], torch.full((2,), 6.0))
        assert out["policy_version"].item() == 2 == server.policy_version
        assert server.stats()["weight_updates"] == 2

    def test_policy_error_reaches_its_clients_and_server_survives(self):
        def policy(td):
            if (td["obs"] < 0).any():
                raise ValueError("negative observation")
            return td.set("act", td["obs"] + 1)

        transport = ThreadingTransport()
        with InferenceServer(policy, transport) as server:
            client = transport.client()
            with pytest.raises(ValueError, match="negative observation"):
                client(TensorDict(obs=-torch.ones(2)))
            assert server.is_alive
            torch.testing.assert_close(
                client(TensorDict(obs=torch.ones(2)))["act"], torch.full((2,), 2.0)
            )

    def test_wrong_output_batch_size_is_an_error(self):
        transport = ThreadingTransport()
        with InferenceServer(lambda td: td[:0], transport):
            with pytest.raises(
                RuntimeError, match=r"returned a batch of size \(0,\) for 1 requests"
            ):
                transport.client()(TensorDict(obs=torch.ones(2)))

    def test_static_batch_size_pads_and_drops_padding(self):
        recorder = Recorder()
        transport = ThreadingTransport()
        futures = [transport.submit(TensorDict(obs=torch.full((2,), float(i)))) for i in range(3)]
        with InferenceServer(recorder, transport, max_batch_size=4, static_batch_size=4):
            answers = [f.result(timeout=10)["act"] for f in futures]
        assert recorder.sizes == [4]
        torch.testing.assert_close(
            torch.stack(answers), 3 * torch.tensor([[0.0] * 2, [1.0] * 2, [2.0] * 2])
        )

    def test_shutdown_rejects_queued_requests_and_restart_serves(self):
        entered, release = threading.Event(), threading.Event()

        def policy(td):
            entered.set()
            release.wait(10)
            return td.set("act", td["obs"])

        transport = ThreadingTransport()
        server = InferenceServer(policy, transport, max_batch_size=1).start()
        first = transport.submit(TensorDict(obs=torch.ones(1)))
        assert entered.wait(10)
        second = transport.submit(TensorDict(obs=torch.ones(1)))
        stopper = threading.Thread(target=server.shutdown)
        stopper.start()
        release.set()
        stopper.join(10)
        assert not server.is_alive
        assert first.result(timeout=10)["act"].item() == 1.0
        with pytest.raises(RuntimeError, match="shut down before serving"):
            second.result(timeout=10)
        pending = transport.submit(TensorDict(obs=torch.full((1,), 5.0)))
        with server:  # a stopped server starts again and serves what waited
            assert pending.result(timeout=10)["act"].item() == 5.0
        server.shutdown()  # idempotent

    def test_double_start_raises(self):
        with InferenceServer(Recorder(), ThreadingTransport()) as server:
            with pytest.raises(RuntimeError, match="already running"):
                server.start()

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"server_config": InferenceServerConfig(), "max_batch_size": 4}, "mutually exclusive"),
            ({"device_config": InferenceDeviceConfig(), "device": "cpu"}, "mutually exclusive"),
            ({"device_config": InferenceDeviceConfig(storing_device="cpu")}, "storing_device"),
            (
                {"min_batch_size": 9, "max_batch_size": 4},
                r"min_batch_size must be in \[1, max_batch_size=4\]",
            ),
            ({"static_batch_size": 2, "max_batch_size": 4}, "static_batch_size=2 is smaller"),
            ({"transport": "distributed"}, "incompatible with service_backend=.thread."),
            ({"service_backend": "ray"}, "builds the policy in a Ray actor: pass policy_factory"),
        ],
    )
    def test_bad_arguments(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            InferenceServer(Recorder(), **kwargs)

    def test_config_rejects_unknown_backend(self):
        with pytest.raises(ValueError, match="service_backend='nope' is not supported"):
            InferenceServerConfig(service_backend="nope")


class TestPolicyClientModule:
    def test_forwards_the_callers_interaction_type(self):
        def policy(td):
            kind = interaction_type()
            return td.set(
                "act",
                torch.full(
                    td.batch_size, -1 if kind is None else int(kind is InteractionType.MODE)
                ),
            )

        transport = ThreadingTransport()
        with InferenceServer(policy, transport):
            remote = PolicyClientModule(transport, out_keys=["act"])
            with set_interaction_type(InteractionType.MODE):
                assert remote(TensorDict(batch_size=[1]))["act"].item() == 1
            with set_interaction_type(InteractionType.RANDOM):
                assert remote(TensorDict(batch_size=[1]))["act"].item() == 0
            fixed = PolicyClientModule(transport, interaction_type=InteractionType.MODE)
            assert fixed(TensorDict(batch_size=[1]))["act"].item() == 1
        assert interaction_type() is None or interaction_type() is not InteractionType.MODE

    def test_max_inflight_validation_and_pickling(self):
        with pytest.raises(ValueError, match="max_inflight must be at least 1"):
            PolicyClientModule(lambda td: td, max_inflight=0)
        module = PickleableClient()
        restored = pickle.loads(pickle.dumps(PolicyClientModule(module, max_inflight=2)))
        assert restored.max_inflight == 2
        assert restored.submit(TensorDict(obs=torch.ones(1))).result()["obs"].item() == 1.0

    def test_plain_callable_errors_are_deferred_to_result(self):
        def broken(td):
            raise KeyError("obs")

        future = PolicyClientModule(broken).submit(TensorDict())
        assert future.done()
        with pytest.raises(KeyError, match="obs"):
            future.result()


class PickleableClient:
    def __call__(self, td):
        return td


class TestSlotTransport:
    def test_slots_serve_threads_and_refuse_extra_clients(self):
        policy = make_policy()
        transport = SlotTransport(3)
        clients = [transport.client() for _ in range(3)]
        obs = torch.randn(3, 10, 4)
        with InferenceServer(policy, transport):
            with ThreadPoolExecutor(3) as pool:
                answers = list(
                    pool.map(
                        lambda i: torch.stack(
                            [clients[i](TensorDict(obs=o))["act"] for o in obs[i]]
                        ),
                        range(3),
                    )
                )
        torch.testing.assert_close(torch.stack(answers), expected(policy, obs))
        with pytest.raises(
            RuntimeError, match="SlotTransport has 3 slots and client\\(\\) was called 4 times"
        ):
            transport.client()
        with pytest.raises(NotImplementedError, match="no submit"):
            transport.submit(TensorDict())

    def test_result_timeout_keeps_the_request(self):
        transport = SlotTransport(1)
        pending = transport.client().submit(TensorDict(obs=torch.ones(2)))
        with pytest.raises(TimeoutError, match="no answer in slot 0 within 0.05 s"):
            pending.result(timeout=0.05)
        with InferenceServer(Recorder(), transport):
            torch.testing.assert_close(pending.result(timeout=10)["act"], torch.full((2,), 3.0))


def _ask_then_die(client, obs):
    client.submit(TensorDict(obs=obs))
    # the request reaches the pipe (its tensor shared through this process), then this
    # process is gone before the server reads it
    client._request_queue.close()
    client._request_queue.join_thread()
    os._exit(0)


def _ask(client, obs, out):
    out.put(client(TensorDict(obs=obs))["act"].tolist())


class TestMPTransport:
    def test_processes_get_their_own_answers(self):
        policy = make_policy()
        transport = MPTransport(FORK)
        clients = [transport.client() for _ in range(3)]
        obs = torch.randn(3, 4)
        out = [FORK.Queue() for _ in range(3)]
        with InferenceServer(policy, transport, max_batch_size=3):
            procs = [
                FORK.Process(target=_ask, args=(c, o, q)) for c, o, q in zip(clients, obs, out)
            ]
            for p in procs:
                p.start()
            answers = torch.tensor([q.get(timeout=30) for q in out])
            for p in procs:
                p.join(10)
        torch.testing.assert_close(answers, expected(policy, obs))

    def test_dead_client_process_does_not_stall_the_server(self):
        policy = make_policy()
        transport = MPTransport(FORK)
        doomed, alive = transport.client(), transport.client()
        with InferenceServer(policy, transport) as server:
            proc = FORK.Process(target=_ask_then_die, args=(doomed, torch.zeros(4)))
            proc.start()
            proc.join(30)
            assert proc.exitcode == 0
            obs = torch.randn(5, 4)
            answers = torch.stack([alive(TensorDict(obs=o), timeout=10)["act"] for o in obs])
            assert server.is_alive
        torch.testing.assert_close(answers, expected(policy, obs))

    def test_result_timeout_keeps_the_request_in_flight(self):
        transport = MPTransport(FORK)
        client = transport.client()
        future = client.submit(TensorDict(obs=torch.ones(2)))
        with pytest.raises(queue.Empty, match="no reply to request 0 within 0.05 s"):
            future.result(timeout=0.05)
        with InferenceServer(Recorder(), transport):
            torch.testing.assert_close(future.result(timeout=10)["act"], torch.full((2,), 3.0))

    def test_submit_needs_a_client(self):
        with pytest.raises(RuntimeError, match=r"MPTransport.submit\(\) is not supported"):
            MPTransport(FORK).submit(TensorDict())


class TestSharedMemoryTransport:
    def test_answers_through_slots(self):
        policy = make_policy()
        request = TensorDict(obs=torch.zeros(4))
        response = TensorDict(act=torch.zeros(2), policy_version=torch.zeros((), dtype=torch.long))
        transport = SharedMemoryTransport(request, response, num_slots=2, ctx=FORK)
        client = transport.client()
        obs = torch.randn(5, 4)
        with InferenceServer(policy, transport):
            futures = [client.submit(TensorDict(obs=o, extra=torch.ones(1))) for o in obs[:2]]
            answers = [f.result(timeout=10) for f in futures]
            answers += [client(TensorDict(obs=o), timeout=10) for o in obs[2:]]
        torch.testing.assert_close(torch.stack([a["act"] for a in answers]), expected(policy, obs))
        assert sorted(answers[0].keys()) == ["act", "policy_version"]

    def test_bad_specs_and_requests(self):
        with pytest.raises(
            TypeError,
            match=r"specs hold tensor leaves only; request_spec\['name'\] is a NonTensorData",
        ):
            SharedMemoryTransport(TensorDict(name="x"), TensorDict(act=torch.zeros(1)), num_slots=1)
        with pytest.raises(ValueError, match="num_slots must be a positive int, got 0"):
            SharedMemoryTransport(
                TensorDict(obs=torch.zeros(1)), TensorDict(act=torch.zeros(1)), num_slots=0
            )
        transport = SharedMemoryTransport(
            TensorDict(obs=torch.zeros(1)), TensorDict(act=torch.zeros(1)), num_slots=1, ctx=FORK
        )
        with pytest.raises(KeyError, match=r"lacks the key\(s\) \['obs'\] of request_spec"):
            transport.client().submit(TensorDict(other=torch.zeros(1)))


def _factory_that_fails():
    raise ValueError("no checkpoint")


class TestProcessInferenceServer:
    def test_serves_updates_and_reports_a_killed_server(self):
        transport = MPTransport(FORK)
        server = InferenceServer(
            policy_factory=make_policy,
            transport=transport,
            service_backend="process",
            service_backend_options={"mp_context": FORK},
        )
        assert isinstance(server, ProcessInferenceServer)
        client = server.client()
        obs = torch.randn(4)
        with server:
            torch.testing.assert_close(
                client(TensorDict(obs=obs))["act"], expected(make_policy(), obs)
            )
            weights = TensorDict.from_module(make_policy()).detach().apply(torch.ones_like)
            assert server.update_model_weights(weights) == {"accepted": True}
            out = client(TensorDict(obs=obs))
            torch.testing.assert_close(out["act"], torch.full((2,), obs.sum().item() + 1))
            assert out["policy_version"].item() == 1 == server.policy_version
            assert server.stats()["requests"] == 2
            server._process.kill()
            with pytest.raises(InferenceServerClosedError, match="exited before replying"):
                client(TensorDict(obs=obs), timeout=30)
            health = server.health()
            assert health["process_alive"] is False
            with pytest.raises(RuntimeError, match="not running"):
                server.stats()
        assert not server.is_alive

    def test_reply_left_unread_by_a_killed_server_is_reported(self):
        # the answer's tensors are shared by the server process: once it is gone the
        # answer cannot be read, which is reported as the server's death
        server = ProcessInferenceServer(
            policy_factory=make_policy, transport=MPTransport(FORK), mp_context=FORK
        )
        client = server.client()
        with server:
            future = client.submit(TensorDict(obs=torch.zeros(4)))
            while server.stats()["requests"] < 1:
                time.sleep(0.01)
            time.sleep(0.1)  # the answer is on its way
            server._process.kill()
            server._process.join()
            with pytest.raises(
                InferenceServerClosedError, match="the inference server process exited before"
            ):
                future.result(timeout=30)

    def test_service_backend_block_and_arguments(self):
        with service_backend("process"):
            server = InferenceServer(policy_factory=make_policy, transport=MPTransport(FORK))
            with pytest.raises(ValueError, match="pass policy_factory instead of model"):
                InferenceServer(make_policy(), MPTransport(FORK))
        assert isinstance(server, ProcessInferenceServer)
        assert (server.service_backend, server.transport_kind) == ("process", "process")
        with pytest.raises(
            ValueError, match=r"unsupported process service_backend_options \['gpus'\]"
        ):
            InferenceServer(
                policy_factory=make_policy,
                transport=MPTransport(FORK),
                service_backend="process",
                service_backend_options={"gpus": 1},
            )

    def test_late_clients_of_a_plain_mp_transport_are_refused(self):
        server = ProcessInferenceServer(
            policy_factory=make_policy, transport=MPTransport(FORK), mp_context=FORK
        )
        assert len(server.clients(2)) == 2  # before start: routed
        with server:
            with pytest.raises(
                RuntimeError, match=r"create them first \(or use MPTransport\(use_manager=True\)\)"
            ):
                server.clients(1)

    def test_failed_policy_factory_is_reported(self):
        server = ProcessInferenceServer(
            policy_factory=_factory_that_fails, transport=MPTransport(FORK), mp_context=FORK
        )
        with pytest.raises(RuntimeError, match="failed to start: ValueError: no checkpoint"):
            server.start()
        assert not server.is_alive
