"""A float ``is_init`` (as in TorchRL's BurnInTransform example) acts like the bool one."""

import pytest
import torch
from tensordict import TensorDict

from rl.modules import GRUModule, LSTMModule


@pytest.mark.parametrize("cls", [GRUModule, LSTMModule])
@pytest.mark.parametrize("recurrent", [False, True])
def test_float_is_init_matches_bool(cls, recurrent):
    torch.manual_seed(0)
    module = cls(3, 4, in_key="x", out_key="y", default_recurrent_mode=recurrent)
    n, steps = 2, 5
    is_init = torch.zeros(n, steps, 1, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[0, 3] = True  # a reset inside the sequence
    batch = [n, steps] if recurrent else [n * steps]
    x = torch.randn(*batch, 3)
    states = {key: torch.randn(*batch, 1, 4) for key in module.in_keys[1:-1]}
    outs = []
    for flag in (is_init, is_init.float()):
        td = TensorDict({"x": x, "is_init": flag.reshape(*batch, 1), **states}, batch_size=batch)
        with torch.no_grad():
            outs.append(module(td))
    assert outs[1]["is_init"].dtype == torch.float32
    torch.testing.assert_close(outs[0]["y"], outs[1]["y"])
    for key in module.out_keys[1:]:
        torch.testing.assert_close(outs[0][key], outs[1][key])
