"""Serving a policy model with an inference engine (vLLM) for rollouts: ``forge serve``."""
