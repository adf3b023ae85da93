"""Concurrency stressors: drive the candidate under load and check that it still answers each request alone.

driver (bounded load), canary (workload with planted facts), mixing (who leaked into whom),
accuracy (task answers under load), schedules + replay (shrink a failure to a script).
"""
