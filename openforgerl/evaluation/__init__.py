"""Evaluation: ``forge eval`` (rollouts of several harnesses, pass@k and pass^k), behaviour analysis of
trajectories, cost telemetry, comparisons between runs and ``forge report`` (one HTML file).

Everything but ``runner`` is a pure function of what a run directory holds, so a report can be made
again, later, from the files alone.
"""
