"""Jinja2 templates: Dockerfiles, chat templates, and the prompts of the proposer and repairer."""
