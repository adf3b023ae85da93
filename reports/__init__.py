"""Findings, run collection across xdist workers, and the run folder's renderers."""
