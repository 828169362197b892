"""Rollouts: the recording proxy, runtimes, harness adapters, trajectories and the orchestrator."""
