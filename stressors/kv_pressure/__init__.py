"""KV pressure (check family "kv-pressure"): more concurrent work than the KV pool holds, and the burst that offers it."""
