"""Gazelle: scalable actor-learner reinforcement learning in PyTorch."""

__version__ = "0.1.0"
