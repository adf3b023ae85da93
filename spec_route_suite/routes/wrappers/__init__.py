"""RouteWrappers around any route: a planted fault, per-request timing, acceptance by kind of traffic. Every hook a
wrapper does not change is the wrapped route's (routes/base.py RouteWrapper)."""
