"""Experiments: one run with its plot, many runs (compare, the papers' suites), and the backbone they may need."""

from pfedkit.experiments.runs import run_experiment

__all__ = ["run_experiment"]
