"""The inference server, under TorchRL's ``torchrl.modules.inference_server`` path.

It lives in ``rl.core.inference_server`` (rl-core) so that ``rl-collectors``, which does
not depend on ``rl-objectives``, can run its ``AsyncBatchedCollector`` on it; this module
re-exports the same objects.
"""

from rl.core.inference_server import (
    InferenceClient,
    InferenceDeviceConfig,
    InferenceServer,
    InferenceServerClosedError,
    InferenceServerConfig,
    InferenceTransport,
    MPTransport,
    PolicyClientModule,
    ProcessInferenceServer,
    ProcessSlotTransport,
    RayTransport,
    SharedMemoryTransport,
    SlotTransport,
    ThreadingTransport,
)

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
