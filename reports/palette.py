"""The dashboard's colours, each beside the text colour drawn on it, in one place: report.html's stylesheet is
written from here, and tests/test_report_html.py checks every pair reaches WCAG's 4.5:1 (reports/contrast.py).
Environment: none.
"""
from __future__ import annotations

PAGE = "#ffffff"
TEXT = "#1f2328"
MUTED = "#57606a"
CODE_BACKGROUND = "#f6f8fa"

# a matrix cell's status word -> (background, text)
STATUS = {"yes": ("#6fdd8b", TEXT), "partly": ("#eac54f", TEXT), "no": ("#fb8f44", TEXT),
          "not supported": ("#c297ff", TEXT), "n/a": ("#d8dee4", TEXT), "not run": ("#f6f8fa", TEXT),
          "failed": ("#cf222e", "#ffffff")}
UNKNOWN_STATUS = ("#d8dee4", TEXT)
STATUS_COLOURS = {status: background for status, (background, _) in STATUS.items()}

# coloured words on the page: the verdict in the headline, a finding cluster's severity
VERDICT = {"adopt": "#1a7f37", "pilot": "#9a6700", "wait": "#bc4c00", "avoid": "#cf222e"}
SEVERITY = {"bug": "#cf222e", "error": "#bc4c00", "near-tie": "#9a6700", "warning": "#9a6700"}


def pairs() -> dict[str, tuple[str, str]]:
    """Every (text, background) pair the page draws: name -> (text colour, background)."""
    return {**{f"status {s}": (text, background) for s, (background, text) in STATUS.items()},
            "status unknown": (UNKNOWN_STATUS[1], UNKNOWN_STATUS[0]),
            **{f"verdict {v}": (colour, PAGE) for v, colour in VERDICT.items()},
            **{f"severity {s}": (colour, PAGE) for s, colour in SEVERITY.items()},
            "text": (TEXT, PAGE), "muted text": (MUTED, PAGE), "code": (TEXT, CODE_BACKGROUND)}
