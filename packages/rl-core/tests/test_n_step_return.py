"""n_step_return: a plain Python loop, literal values, its input checks and its example."""

import doctest

import pytest
import torch

import rl.core._n_step_return
from rl.core import n_step_return

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    ),
]


def _loop(reward, done, gamma, n):
    """Plain Python loops over the batch and the steps: reward ``[*B, T, *F]``, done ``[*B, T, 1]``."""
    batch = done.shape[:-1]
    T = batch[-1]
    feat = reward.shape[len(batch) :]
    r = reward.reshape(-1, T, *feat).double().cpu()
    d = done.reshape(-1, T).bool().cpu()
    ret = torch.zeros(r.shape, dtype=torch.float64)
    steps = torch.zeros(d.shape, dtype=torch.int64)
    for b in range(d.shape[0]):
        for t in range(T):
            k = 0
            while k < n and t + k < T:
                ret[b, t] += gamma**k * r[b, t + k]
                k += 1
                if d[b, t + k - 1]:
                    break
            steps[b, t] = k
    return ret.reshape(*batch, *feat), steps.reshape(*batch, 1)


class TestNStepReturn:
    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    @pytest.mark.parametrize("batch", [(), (3,), (2, 4)])
    @pytest.mark.parametrize("feat", [(1,), (), (2, 3)])
    @pytest.mark.parametrize(("T", "n"), [(1, 1), (1, 4), (7, 1), (7, 3), (7, 10), (50, 5)])
    def test_matches_a_python_loop(self, dtype, batch, feat, T, n):
        self._check(batch, T, feat, n, dtype, "cpu")

    @pytest.mark.parametrize("device", DEVICES)
    def test_on_device(self, device):
        self._check((2, 4), 50, (1,), 5, torch.float32, device)

    def test_compiles_without_graph_breaks(self):
        reward, done = torch.randn(4, 50, 1), torch.rand(4, 50, 1) < 0.1
        G, k = torch.compile(n_step_return, fullgraph=True)(reward, done, 0.9, 5)
        expected_G, expected_k = _loop(reward, done, 0.9, 5)
        torch.testing.assert_close(G, expected_G.float())
        torch.testing.assert_close(k, expected_k)

    @staticmethod
    def _check(batch, T, feat, n, dtype, device):
        g = torch.Generator().manual_seed(T * 100 + n)
        reward = torch.randn(*batch, T, *feat, generator=g, dtype=dtype)
        terminated = torch.rand(*batch, T, 1, generator=g) < 0.15
        truncated = torch.rand(*batch, T, 1, generator=g) < 0.1
        done = terminated | truncated
        G, k = n_step_return(reward.to(device), done.to(device), gamma=0.9, n_steps=n)
        expected_G, expected_k = _loop(reward, done, 0.9, n)
        assert G.dtype == dtype and G.device.type == device
        torch.testing.assert_close(G.cpu(), expected_G.to(dtype))
        assert k.dtype == torch.int64
        torch.testing.assert_close(k.cpu(), expected_k)

    def test_done_and_truncation_in_the_middle(self):
        # two envs: the first terminates at t=2, the second is truncated at t=1 and t=4
        reward = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
        terminated = torch.tensor([[0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=torch.bool)
        truncated = torch.tensor([[0, 0, 0, 0, 0, 0], [0, 1, 0, 0, 1, 0]], dtype=torch.bool)
        G, k = n_step_return(
            reward.unsqueeze(-1), (terminated | truncated).unsqueeze(-1), gamma=0.5, n_steps=3
        )
        torch.testing.assert_close(
            G.squeeze(-1),
            torch.tensor(
                [[2.75, 3.5, 3.0, 4 + 2.5 + 1.5, 5.0 + 3.0, 6.0], [1.5, 1.0, 1.75, 1.5, 1.0, 1.0]]
            ),
        )
        assert k.squeeze(-1).tolist() == [[3, 2, 1, 3, 2, 1], [2, 1, 3, 2, 1, 1]]

    def test_integer_rewards_give_floats(self):
        G, k = n_step_return(
            torch.tensor([[1], [2], [3]]), torch.zeros(3, 1, dtype=torch.bool), 0.5, 2
        )
        assert G.dtype == torch.get_default_dtype()
        assert G.squeeze(-1).tolist() == [2.0, 3.5, 3.0] and k.squeeze(-1).tolist() == [2, 2, 1]

    def test_empty_time(self):
        G, k = n_step_return(torch.zeros(2, 0, 1), torch.zeros(2, 0, 1, dtype=torch.bool), 0.9, 3)
        assert G.shape == (2, 0, 1) and k.shape == (2, 0, 1)

    @pytest.mark.parametrize("n_steps", [0, -1, True, 1.5])
    def test_n_steps_must_be_a_positive_int(self, n_steps):
        with pytest.raises(ValueError, match=r"n_steps must be an int >= 1, got"):
            n_step_return(torch.zeros(3, 1), torch.zeros(3, 1), 0.9, n_steps)

    def test_done_must_end_with_a_singleton_dim(self):
        with pytest.raises(ValueError, match=r"done must be \[\*B, T, 1\], got shape \(4, 3\)"):
            n_step_return(torch.zeros(4, 3, 1), torch.zeros(4, 3), 0.9, 2)

    def test_reward_must_share_the_batch_and_time_dims(self):
        with pytest.raises(
            ValueError, match=r"\[\*B, T\] = \(4, 3\) from done, got shape \(4, 2, 1\)"
        ):
            n_step_return(torch.zeros(4, 2, 1), torch.zeros(4, 3, 1), 0.9, 2)

    def test_docstring_example(self):
        result = doctest.testmod(rl.core._n_step_return, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0
