"""GRUCell and LSTMCell: the same function as nn.GRUCell / nn.LSTMCell on the same weights."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rl.modules import GRUCell, LSTMCell


def twins(cls, ref_cls, bias: bool):
    torch.manual_seed(0)
    ours = cls(5, 7, bias=bias)
    ref = ref_cls(5, 7, bias=bias)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


class TestGRUCell:
    @pytest.mark.parametrize("bias", [True, False])
    @pytest.mark.parametrize("batch", [(), (4,)])
    def test_matches_torch(self, bias, batch):
        ours, ref = twins(GRUCell, nn.GRUCell, bias)
        x, h = torch.randn(*batch, 5), torch.randn(*batch, 7)
        torch.testing.assert_close(ours(x, h), ref(x, h))
        torch.testing.assert_close(ours(x), ref(x))
        assert ours(x, h).shape == (*batch, 7)

    def test_gradients_match_torch(self):
        ours, ref = twins(GRUCell, nn.GRUCell, True)
        x, h = torch.randn(3, 5), torch.randn(3, 7)
        ours(x, h).square().sum().backward()
        ref(x, h).square().sum().backward()
        for (name, p), q in zip(ours.named_parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, msg=name)

    def test_hand_computation(self):
        cell = GRUCell(1, 1)
        with torch.no_grad():
            cell.weight_ih.copy_(torch.tensor([[1.0], [2.0], [3.0]]))
            cell.weight_hh.copy_(torch.tensor([[0.5], [-1.0], [1.0]]))
            cell.bias_ih.zero_()
            cell.bias_hh.zero_()
        x, h = 0.5, 0.2
        r = torch.sigmoid(torch.tensor(1.0 * x + 0.5 * h))
        z = torch.sigmoid(torch.tensor(2.0 * x - 1.0 * h))
        n = torch.tanh(3.0 * x + r * (1.0 * h))
        expected = (1 - z) * n + z * h
        torch.testing.assert_close(cell(torch.tensor([x]), torch.tensor([h])), expected.reshape(1))

    def test_vmap(self):
        ours, ref = twins(GRUCell, nn.GRUCell, True)
        x, h = torch.randn(3, 2, 5), torch.randn(3, 2, 7)
        out = torch.vmap(ours)(x, h)
        torch.testing.assert_close(out, torch.stack([ref(x[i], h[i]) for i in range(3)]))

    def test_bad_input(self):
        cell = GRUCell(5, 7)
        with pytest.raises(ValueError, match="expected input to be 1D or 2D, got 3D"):
            cell(torch.randn(2, 3, 5))
        with pytest.raises(ValueError, match="hidden to be 1D or 2D, got 3D"):
            cell(torch.randn(3, 5), torch.randn(1, 3, 7))
        with pytest.raises(ValueError, match="input has 4 features .* expected 5"):
            cell(torch.randn(3, 4))
        with pytest.raises(ValueError, match="hidden has 6 features .* expected 7"):
            cell(torch.randn(3, 5), torch.randn(3, 6))


class TestLSTMCell:
    @pytest.mark.parametrize("bias", [True, False])
    @pytest.mark.parametrize("batch", [(), (4,)])
    def test_matches_torch(self, bias, batch):
        ours, ref = twins(LSTMCell, nn.LSTMCell, bias)
        x, h, c = torch.randn(*batch, 5), torch.randn(*batch, 7), torch.randn(*batch, 7)
        for got, want in zip(ours(x, (h, c)), ref(x, (h, c)), strict=True):
            torch.testing.assert_close(got, want)
            assert got.shape == (*batch, 7)
        for got, want in zip(ours(x), ref(x), strict=True):
            torch.testing.assert_close(got, want)

    def test_gradients_match_torch(self):
        ours, ref = twins(LSTMCell, nn.LSTMCell, True)
        x, h, c = torch.randn(3, 5), torch.randn(3, 7), torch.randn(3, 7)
        sum(t.square().sum() for t in ours(x, (h, c))).backward()
        sum(t.square().sum() for t in ref(x, (h, c))).backward()
        for (name, p), q in zip(ours.named_parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, msg=name)

    def test_hand_computation(self):
        cell = LSTMCell(1, 1, bias=False)
        with torch.no_grad():
            cell.weight_ih.copy_(torch.tensor([[1.0], [2.0], [3.0], [4.0]]))
            cell.weight_hh.zero_()
        x, c = 0.5, 0.3
        i, f, g, o = (torch.tensor(w * x) for w in (1.0, 2.0, 3.0, 4.0))
        c1 = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h1 = o.sigmoid() * c1.tanh()
        h, cy = cell(torch.tensor([x]), (torch.zeros(1), torch.tensor([c])))
        torch.testing.assert_close(cy, c1.reshape(1))
        torch.testing.assert_close(h, h1.reshape(1))

    def test_vmap(self):
        ours, ref = twins(LSTMCell, nn.LSTMCell, True)
        x, h, c = torch.randn(3, 2, 5), torch.randn(3, 2, 7), torch.randn(3, 2, 7)
        hy, cy = torch.vmap(lambda x, h, c: ours(x, (h, c)))(x, h, c)
        for i in range(3):
            rh, rc = ref(x[i], (h[i], c[i]))
            torch.testing.assert_close(hy[i], rh)
            torch.testing.assert_close(cy[i], rc)

    def test_bad_input(self):
        cell = LSTMCell(5, 7)
        with pytest.raises(ValueError, match="expected input to be 1D or 2D, got 3D"):
            cell(torch.randn(2, 3, 5))
        with pytest.raises(ValueError, match=r"hx\[1\] to be 1D or 2D, got 3D"):
            cell(torch.randn(3, 5), (torch.randn(3, 7), torch.randn(1, 3, 7)))
        with pytest.raises(ValueError, match=r"hx\[0\] has 6 features"):
            cell(torch.randn(3, 5), (torch.randn(3, 6), torch.randn(3, 7)))
