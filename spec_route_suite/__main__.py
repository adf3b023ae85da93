"""`python -m spec_route_suite ...` is `spec-route-suite ...` (for environments whose scripts folder is not on PATH)."""
import sys

from spec_route_suite.cli import main

sys.exit(main())
