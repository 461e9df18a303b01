"""A3C (Mnih et al., 2016, as OpenAI's universe-starter-agent runs it): asynchronous
workers, each with a local copy of the global network and a runner thread filling a queue of
partial rollouts; GAE; gradients clipped and applied to the global network by a shared Adam.
`rollouts` (the runner's queue), `loss`, `worker` (one worker process), `loop.train`."""

from gazelle.algorithms.a3c.loop import train
from gazelle.algorithms.a3c.loss import A3CLossSettings, a3c_loss

__all__ = ["A3CLossSettings", "a3c_loss", "train"]
