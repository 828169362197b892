"""Logging setup shared by every command: rich on a terminal, plain lines otherwise."""

from __future__ import annotations

import logging
import sys

_CONFIGURED = False


def setup_logging(verbose: int = 0) -> None:
    global _CONFIGURED
    level = logging.DEBUG if verbose > 1 else logging.INFO if verbose == 1 else logging.WARNING
    if _CONFIGURED:
        logging.getLogger("openforgerl").setLevel(level)
        return
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(show_path=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("openforgerl")
    root.addHandler(handler)
    root.setLevel(level)
    _CONFIGURED = True


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(name if name.startswith("openforgerl") else f"openforgerl.{name}")
