"""Verifiers: run after the agent, in the container, and write /logs/verifier/reward.json."""
