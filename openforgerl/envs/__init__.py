"""Environments: the local Docker engine, the base image, the registry, and (``forge build-env``) task images."""
