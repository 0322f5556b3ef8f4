"""Parameter schedulers (``torchrl.data.replay_buffers.scheduler`` in TorchRL)."""

from rl.data.replay_buffers._scheduler import (
    LambdaScheduler,
    LinearScheduler,
    ParameterScheduler,
    SchedulerList,
    StepScheduler,
)

__all__ = [
    "LambdaScheduler",
    "LinearScheduler",
    "ParameterScheduler",
    "SchedulerList",
    "StepScheduler",
]
