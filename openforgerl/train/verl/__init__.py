"""The veRL backend of ``forge train``: an agent loop over harness rollouts, datasets, presets, launch.

``agent_loop`` imports veRL (the ``train`` extra); ``dataset`` and ``launch`` do not need it at import
time, so ``forge train export-verl`` and ``forge doctor`` work where veRL is not installed.
"""
