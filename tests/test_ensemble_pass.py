"""EnsembleMLP.blocked, the hand-written pass CQL's critics take for their 31 actions per state: the values and
gradients of the plain autograd forward, whatever the block size, with buffers reused between calls."""

import pytest
import torch

from offbench.baselines.q_learning import EnsembleMLP, _BlockedEnsemblePass, frozen

ROWS, IN_DIM = 50, 5


def _net(hidden: list[int], out_dim: int) -> EnsembleMLP:
    torch.manual_seed(0)
    return EnsembleMLP(IN_DIM, out_dim, hidden, 2, orthogonal=True, output_gain=1e-2).double()


def _values_and_grads(net: EnsembleMLP, forward) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    torch.manual_seed(1)
    x = torch.randn(ROWS, IN_DIM, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(2, ROWS, net.layers[-1].weight.shape[-1], dtype=torch.float64)
    net.zero_grad(set_to_none=True)
    out = forward(x)
    (out * weights).sum().backward()
    return out.detach(), [p.grad for p in net.parameters()] + [x.grad]


@pytest.mark.parametrize("hidden, out_dim", [([16, 16], 1), ([12, 8, 6], 3), ([8], 1), ([], 1), ([], 2)])
@pytest.mark.parametrize("block_rows", [1, 7, ROWS, 1000])
def test_blocked_pass_matches_autograd(hidden, out_dim, block_rows):
    net = _net(hidden, out_dim)
    expected_out, expected_grads = _values_and_grads(net, net)
    out, grads = _values_and_grads(net, lambda x: net.blocked(x, block_rows))
    torch.testing.assert_close(out, expected_out)
    for got, expected in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, expected)


def test_blocked_pass_gradcheck():
    torch.manual_seed(0)
    net = EnsembleMLP(IN_DIM, 1, [4, 3], 2).double()  # nonzero biases: no pre-activation sits on ReLU's kink
    x = torch.randn(7, IN_DIM, dtype=torch.float64, requires_grad=True)
    params = [p.detach().clone().requires_grad_() for p in net.parameters()]
    # fresh buffers per call: gradcheck evaluates the function again before it back-propagates
    assert torch.autograd.gradcheck(lambda x, *p: _BlockedEnsemblePass.apply(x, {}, 3, *p), (x, *params))


def test_frozen_ensemble_passes_gradients_to_its_input_only():
    net = _net([16, 16], 1)
    _, expected = _values_and_grads(net, net)
    with frozen(net):
        _, grads = _values_and_grads(net, lambda x: net.blocked(x, 7))
    assert all(g is None for g in grads[:-1])
    torch.testing.assert_close(grads[-1], expected[-1])


def test_buffers_are_reused_and_a_stale_backward_is_refused():
    net = _net([16, 16], 1)
    x = torch.randn(ROWS, IN_DIM, dtype=torch.float64)
    first = net.blocked(x, 7)
    buffer = net._reused_buffers["hidden0"].data_ptr()
    second = net.blocked(x, 7)
    assert net._reused_buffers["hidden0"].data_ptr() == buffer  # no new activation memory per call
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        first.sum().backward()  # its activations were overwritten by the second call
    second.sum().backward()
    assert all(p.grad is not None for p in net.parameters())
