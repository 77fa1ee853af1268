"""Structured logs: one JSON object per line on stderr, for every tickwheel process."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                body[key] = value
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        try:
            return orjson.dumps(body, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:  # a key orjson cannot write (a tuple): the line is not lost for it
            return orjson.dumps(_str_keys(body), default=str).decode()


def _str_keys(value: Any) -> Any:
    """`value` with every mapping's keys as text, a tuple key joined by '/'."""
    if isinstance(value, dict):
        return {
            "/".join(map(str, k)) if isinstance(k, tuple) else str(k): _str_keys(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_str_keys(v) for v in value]
    return value


def setup(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
