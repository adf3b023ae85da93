"""Remove secrets (API keys, secret header values) from anything written to the run folder."""
from __future__ import annotations

from typing import Any

from spec_route_suite.routes.spec import REDACTED


class Redactor:
    def __init__(self, secrets: tuple[str, ...]):
        self.secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))

    def text(self, value: str) -> str:
        for secret in self.secrets:
            value = value.replace(secret, REDACTED)
        return value

    def data(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value
