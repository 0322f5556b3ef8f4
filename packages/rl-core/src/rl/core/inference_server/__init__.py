"""An inference server: many clients, one batched forward pass of the policy.

Environment workers (threads, processes, Ray actors) send single observations through
a *transport*; the :class:`InferenceServer` batches whatever has arrived, runs the
policy once, and sends each worker its action. TorchRL 0.14.1's
``torchrl.modules.inference_server``; ``rl.modules.inference_server`` re-exports it.

| transport | clients | payload |
| --- | --- | --- |
| :class:`ThreadingTransport` | threads of the server's process | the TensorDict |
| :class:`SlotTransport` | a fixed set of threads, one slot each | the TensorDict |
| :class:`MPTransport` | other processes | pickled through queues |
| :class:`SharedMemoryTransport` | other processes | shared-memory slots |
| :class:`RayTransport` | Ray actors | Ray queues |

The server runs in a thread, in its own process (``service_backend="process"``) or in
a Ray actor (``service_backend="ray"``). TorchRL's ``MonarchTransport`` is not provided
(Monarch cannot be installed here, so it could not be tested), nor its
``"distributed"`` (torch.distributed) transport.

Examples:
    >>> import torch
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> from tensordict import TensorDict
    >>> from tensordict.nn import TensorDictModule
    >>> from rl.core.inference_server import InferenceServer, ThreadingTransport
    >>> policy = TensorDictModule(lambda x: x.sum(-1, keepdim=True), ["obs"], ["act"])
    >>> transport = ThreadingTransport()
    >>> with InferenceServer(policy, transport, max_batch_size=8):
    ...     client = transport.client()
    ...     with ThreadPoolExecutor(4) as pool:
    ...         outs = list(pool.map(lambda i: client(TensorDict(obs=torch.full((2,), float(i)))), range(4)))
    >>> [o["act"].item() for o in outs]
    [0.0, 2.0, 4.0, 6.0]
"""

from ._client import PolicyClientModule
from ._config import InferenceDeviceConfig, InferenceServerConfig
from ._mailbox import InferenceServerClosedError
from ._mp import MPTransport
from ._process import ProcessInferenceServer
from ._ray import RayTransport
from ._server import InferenceServer
from ._shared_memory import ProcessSlotTransport, SharedMemoryTransport
from ._slot import SlotTransport
from ._threading import ThreadingTransport
from ._transport import InferenceClient, InferenceTransport

__all__ = [
    "InferenceClient",
    "InferenceDeviceConfig",
    "InferenceServer",
    "InferenceServerClosedError",
    "InferenceServerConfig",
    "InferenceTransport",
    "MPTransport",
    "PolicyClientModule",
    "ProcessInferenceServer",
    "ProcessSlotTransport",
    "RayTransport",
    "SharedMemoryTransport",
    "SlotTransport",
    "ThreadingTransport",
]
