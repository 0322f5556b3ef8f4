"""A compiled update step as the trainer's ``optimization_stepper``.

``rl.core.trainers.Trainer(optimization_stepper=...)`` calls ``stepper.step(trainer,
batch)`` in the place of its ``optimizer`` hook and checkpoints the stepper's
``state_dict``. :class:`UpdateStepper` runs one ``_common.UpdateStep`` call per
optimization step and saves the optimizer's state as ``OptimizerHook`` does; a script
whose step reads tensors made from the batch (tokens padded to a width) overrides
:meth:`UpdateStepper.inputs`.
"""

from __future__ import annotations

from typing import Any

import torch


class UpdateStepper:
    """The trainer's ``optimization_stepper``: one ``update`` call per optimization step
    (the whole step compiled once); ``optimizer``'s state goes into the checkpoints.

    Args:
        update: the step, called on :meth:`inputs` of the batch; it returns the step's
            logs.
        optimizer: the optimizer ``update`` writes.
    """

    def __init__(self, update, optimizer: torch.optim.Optimizer) -> None:
        self.update, self.optimizer = update, optimizer

    def inputs(self, batch) -> tuple:
        """What ``update`` is called on: the batch itself."""
        return (batch,)

    def step(self, trainer, batch):
        return self.update(*self.inputs(batch))

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict["optimizer"])
