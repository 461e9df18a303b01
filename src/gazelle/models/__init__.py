"""Agent networks: torsos, the instruction encoder, the resetting LSTM core, the agent.

`models` knows nothing of the runtime: it maps tensors to tensors.
"""

from gazelle.models.agent import CORE_SIZE, Agent, build_agent, state_size
from gazelle.models.instruction import MAX_TOKENS, tokenize
from gazelle.models.torsos import TORSOS

__all__ = ["CORE_SIZE", "MAX_TOKENS", "TORSOS", "Agent", "build_agent", "state_size", "tokenize"]
