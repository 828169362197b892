"""Ctrl-C and SIGTERM for long commands: stop cleanly once, at once the second time.

Invariant: the first SIGINT/SIGTERM cancels the command's work, so what it was doing ends the way
cancellation is written to end (every rollout in flight recorded as ``cancelled``, proxy rollouts
finished, ``summary.json`` written); the process then exits 128 + the signal (130, 143). A second
signal exits at once, leaving the rest to the next run's sweep.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Coroutine
from typing import Any

import click

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_interruptibly(work: Coroutine[Any, Any, Any],
                      stopping: str = "ending the rollouts in flight and recording them") -> Any:
    """Run ``work``; on the first signal print ``stopping`` (what the command does as it stops) and cancel it."""
    received: list[int] = []

    async def runner() -> Any:
        task, loop = asyncio.current_task(), asyncio.get_running_loop()

        def on_signal(number: int) -> None:
            if received:
                os._exit(128 + number)
            received.append(number)
            click.echo(f"\n{signal.Signals(number).name}: {stopping} (again to quit at once)", err=True)
            if task is not None:
                task.cancel()
        for number in SIGNALS:
            loop.add_signal_handler(number, on_signal, number)
        return await work

    try:
        result = asyncio.run(runner())
    except asyncio.CancelledError:
        if not received:
            raise
    if received:
        sys.exit(128 + received[0])
    return result
