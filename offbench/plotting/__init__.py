"""Figures: learning curves, in-context curves and aggregate plots (matplotlib; statistics via rliable)."""
