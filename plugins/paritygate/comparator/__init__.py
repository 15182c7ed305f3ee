"""Comparison of a candidate's outputs with the reference's: tolerance policy, statistics, task metrics."""
