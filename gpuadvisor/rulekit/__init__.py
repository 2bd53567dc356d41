"""Helpers shared by rule files (computations a rule needs that are not window metrics)."""
