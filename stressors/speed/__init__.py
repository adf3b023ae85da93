"""The speed gate and what it judges of acceptance: the gate, acceptance that collapses in company, the server's counters."""
