"""Hierarchical timing wheel (issue 3)."""
