"""Training: veRL GRPO through an AgentLoop over harness rollouts, and SFT export."""
