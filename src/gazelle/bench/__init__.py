"""Micro-benchmarks (`gazelle bench ...`)."""
