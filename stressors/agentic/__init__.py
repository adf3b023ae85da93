"""Agent sessions under load (check family "agentic"): the session driver and the protocol the stressor runs."""
