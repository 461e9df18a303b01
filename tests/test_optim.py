"""RMSpropTF against TensorFlow 1's RMSProp update written out by hand, and the LR schedule
(fresh, and across a resume with another budget or rate)."""

import numpy as np
import pytest
import torch

from gazelle.optim import RMSpropTF, make_optimizer
from gazelle.runtime.schedule import LinearDecay


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


def test_a_fresh_schedule_is_the_seeds_linear_decay_to_zero():
    """`tf.train.polynomial_decay(lr, step, total, end=0, power=1)`: lr * (1 - step/total),
    held at 0 past the end."""
    fresh = LinearDecay.fresh(0.5, 100)
    assert fresh == LinearDecay(0.5, 0, 100, 0.5)
    for frames in (0, 25, 60, 100, 150):
        assert fresh(frames) == pytest.approx(0.5 * (1 - min(frames, 100) / 100))


def test_a_resumed_schedule_continues_without_a_step_and_learns_after_its_end():
    saved = LinearDecay.fresh(0.5, 100)
    # the same command: the same schedule, exactly
    assert saved.resumed(40, LinearDecay.fresh(0.5, 100)) is saved
    # a longer budget mid-run: from where it was (0.3 at 40) to 0 at 200, no step
    longer = saved.resumed(40, LinearDecay.fresh(0.5, 200))
    assert longer(40) == pytest.approx(saved(40)) == pytest.approx(0.3)
    assert longer(120) == pytest.approx(0.15) and longer(200) == 0.0
    # a shorter one: still no step, and 0 at the new end
    shorter = saved.resumed(40, LinearDecay.fresh(0.5, 60))
    assert shorter(40) == pytest.approx(0.3) and shorter(50) == pytest.approx(0.15)
    assert shorter(60) == 0.0
    # the run had finished (rate 0): the new budget's own line, not 0 forever
    finished = saved.resumed(100, LinearDecay.fresh(0.5, 200))
    assert finished == LinearDecay.fresh(0.5, 200) and finished(100) == pytest.approx(0.25)
    # another rate: that rate from here on, down to 0 at the end
    other = saved.resumed(40, LinearDecay.fresh(0.1, 100))
    assert other(40) == pytest.approx(0.1) and other(70) == pytest.approx(0.05)
    # a chain of budget changes keeps the rate continuous at every resume
    again = longer.resumed(120, LinearDecay.fresh(0.5, 300))
    assert again(120) == pytest.approx(longer(120)) and again(300) == 0.0
    assert again.resumed(150, LinearDecay.fresh(0.5, 300)) is again
    assert LinearDecay.from_dict(again.to_dict()) == again


def test_a_checkpoint_saved_before_schedules_were_kept_reads_its_configs():
    """Older checkpoints hold no `lr_schedule`: their config's rate and budget make it (a
    constant A3C rate makes none)."""
    from gazelle.algorithms.runstate import _saved_schedule
    from gazelle.config import Config

    impala = Config.of(env="CartPole-v1", total_frames=5000, learning_rate=0.002)
    assert _saved_schedule({}, impala) == LinearDecay.fresh(0.002, 5000)
    constant = Config.of(algo="a3c", env="CartPole-v1", total_frames=5000,
                         learning_rate=0.001, learning_rate_decay=False)  # fmt: skip
    assert _saved_schedule({}, constant) is None
    kept = LinearDecay(0.001, 300, 900, 0.002)
    assert _saved_schedule({"lr_schedule": kept.to_dict()}, impala) == kept
    assert _saved_schedule({"lr_schedule": None}, impala) is None
