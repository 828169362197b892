"""forge tasks commands."""

from __future__ import annotations

import click

from openforgerl.cli import cli
