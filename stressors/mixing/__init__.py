"""The mixing stressor (check family "mixing"): its load, the detector that names where a mismatch came from, and the verdict."""
