"""Harness adapters: how each real agent CLI is installed, pointed at the proxy, and run headless."""
