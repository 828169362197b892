"""The embedded local stack: the machine-level parts every command stands on.

``part`` (the ``Part`` protocol of ``forge doctor`` / ``stack up``), ``parts`` (the table of them),
``services`` (background processes forge starts), ``apt``, and the parts themselves: the Docker
engine, the base image, the local registry, the GPU. Nothing here knows about tasks or rollouts.
"""
