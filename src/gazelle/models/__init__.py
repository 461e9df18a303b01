"""Agent networks: torsos, the instruction encoder, the resetting LSTM core, the agent.

`models` knows nothing of the runtime: it maps tensors to tensors.
"""

from gazelle.models.agent import Agent
from gazelle.models.instruction import tokenize
from gazelle.models.torsos import TORSOS

__all__ = ["TORSOS", "Agent", "tokenize"]
