"""WCAG 2 colour contrast: text on a coloured cell must reach 4.5:1 (the AA level for normal text).

Why: the dashboard's matrix once printed white words on cells as light as 2.2:1, unreadable to many people;
every colour pair the report uses is now checked by tests/test_report_html.py with this formula.
Environment: none.
"""
from __future__ import annotations

AA_NORMAL_TEXT = 4.5


def _channel(value: int) -> float:
    """One sRGB channel (0-255) linearised, as WCAG's relative luminance defines it."""
    c = value / 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def relative_luminance(colour: str) -> float:
    """'#rrggbb' -> 0 (black) .. 1 (white)."""
    red, green, blue = (int(colour.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4))
    return 0.2126 * _channel(red) + 0.7152 * _channel(green) + 0.0722 * _channel(blue)


def contrast_ratio(foreground: str, background: str) -> float:
    """(L_lighter + 0.05) / (L_darker + 0.05): 1 (same colour) .. 21 (black on white)."""
    light, dark = sorted((relative_luminance(foreground), relative_luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def readable_text(background: str, *, dark: str = "#1f2328", light: str = "#ffffff") -> str:
    """The text colour (dark or light) with the higher contrast on this background."""
    return max((dark, light), key=lambda text: contrast_ratio(text, background))
