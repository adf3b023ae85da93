"""What a route says about its own speculation: /metrics counters, per-answer drafting, acceptance profiles, the
requests an engine served together. Read by the adapters and the report, never judged here."""
