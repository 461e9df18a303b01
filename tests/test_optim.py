"""RMSpropTF against TensorFlow 1's RMSProp update written out by hand, and the LR schedule."""

import numpy as np
import pytest
import torch

from gazelle.optim import RMSpropTF, make_optimizer, polynomial_decay


def tf_rmsprop_reference(p0, grads, lr, decay, momentum, eps):
    """TF1 RMSPropOptimizer: ms starts at 1; mom = m*mom + lr*g/sqrt(ms+eps); p -= mom."""
    p, ms, mom = np.array(p0, dtype=np.float64), np.ones_like(p0), np.zeros_like(p0)
    for g in grads:
        ms = decay * ms + (1 - decay) * g * g
        mom = momentum * mom + lr * g / np.sqrt(ms + eps)
        p = p - mom
    return p


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_rmsprop_tf_matches_reference(momentum):
    rng = np.random.default_rng(0)
    p0 = rng.normal(size=5)
    grads = [rng.normal(size=5) * 3 for _ in range(7)]
    param = torch.nn.Parameter(torch.tensor(p0, dtype=torch.float64))
    opt = RMSpropTF([param], lr=0.01, decay=0.99, momentum=momentum, eps=0.1)
    for g in grads:
        param.grad = torch.tensor(g)
        opt.step()
    expected = tf_rmsprop_reference(p0, grads, 0.01, 0.99, momentum, 0.1)
    np.testing.assert_allclose(param.detach().numpy(), expected, rtol=1e-12)


def test_rmsprop_tf_differs_from_torch_rmsprop():
    """The seed's optimiser is not torch's: eps inside the sqrt and ms starting at 1."""
    a = torch.nn.Parameter(torch.ones(3))
    b = torch.nn.Parameter(torch.ones(3))
    oa = make_optimizer("rmsprop_tf", [a], lr=0.1, decay=0.99, momentum=0.0, eps=0.1)
    ob = make_optimizer("rmsprop", [b], lr=0.1, decay=0.99, momentum=0.0, eps=0.1)
    for p, o in ((a, oa), (b, ob)):
        p.grad = torch.full((3,), 0.5)
        o.step()
    # TF: 1 - 0.1*0.5/sqrt(0.99+0.0025+0.1); torch: 1 - 0.1*0.5/(sqrt(0.0025)+0.1)
    assert a[0].item() == pytest.approx(1 - 0.05 / np.sqrt(0.99 + 0.01 * 0.25 + 0.1))
    assert b[0].item() == pytest.approx(1 - 0.05 / (np.sqrt(0.01 * 0.25) + 0.1), rel=1e-5)


def test_unknown_optimizer_is_a_clear_error():
    with pytest.raises(ValueError, match="rmsprop_tf"):
        make_optimizer("adamw", [torch.nn.Parameter(torch.ones(1))], 0.1, 0.9, 0.0, 0.1)


def test_polynomial_decay_is_linear_to_zero():
    assert polynomial_decay(0.5, 0, 100) == 0.5
    assert polynomial_decay(0.5, 25, 100) == pytest.approx(0.375)
    assert polynomial_decay(0.5, 100, 100) == 0.0
    assert polynomial_decay(0.5, 150, 100) == 0.0
