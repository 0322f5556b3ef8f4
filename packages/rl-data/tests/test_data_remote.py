import socket

import pytest
import torch
import torch.distributed.rpc as rpc
from tensordict import TensorDict

from rl.data import LazyTensorStorage, RemoteTensorDictReplayBuffer, TensorDictReplayBuffer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TestRemoteTensorDictReplayBuffer:
    def test_is_a_tensordict_buffer_locally(self):
        rb = RemoteTensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
        assert isinstance(rb, TensorDictReplayBuffer)
        index = rb.extend(TensorDict({"obs": torch.arange(4)}, batch_size=[4]))
        assert index.tolist() == [0, 1, 2, 3]
        batch = rb.sample()
        assert batch.batch_size == (2,) and (batch["obs"] == batch["index"]).all()

    @pytest.mark.skipif(not rpc.is_available(), reason="torch without distributed support")
    def test_methods_run_on_the_owner_through_an_rref(self):
        port = _free_port()
        options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}")
        rpc.init_rpc("owner", rank=0, world_size=1, rpc_backend_options=options)
        try:
            rb = RemoteTensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
            rref = rpc.RRef(rb)
            data = TensorDict({"obs": torch.arange(4) * 10}, batch_size=[4])
            index = rpc.rpc_sync("owner", RemoteTensorDictReplayBuffer.extend, args=(rref, data))
            assert index.tolist() == [0, 1, 2, 3] and len(rb) == 4
            batch = rpc.rpc_sync("owner", RemoteTensorDictReplayBuffer.sample, args=(rref, 3))
            torch.testing.assert_close(batch["obs"], batch["index"] * 10)
        finally:
            rpc.shutdown()
