"""The ``forge`` command line. Each command is thin: parse -> one config -> one core call.

Only ``main`` catches ``ForgeError``: it prints ``Type: message`` on one line and exits 1.
"""

from __future__ import annotations

import errno
import sys

import click

from openforgerl import __version__
from openforgerl.errors import ForgeError
from openforgerl.log import setup_logging
from openforgerl.processes import raise_open_files_limit


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="forge")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def cli(verbose: int) -> None:
    """openforgerl: synthesize tasks, build environments, roll out real harnesses, train."""
    setup_logging(verbose)


def _register() -> None:
    from openforgerl.cli import (  # noqa: F401
        build_env,
        evaluate,
        export,
        harness,
        k8s,
        model,
        proxy,
        report,
        rollout,
        serve,
        stack,
        synth,
        tasks,
        train,
    )


def main(argv: list[str] | None = None) -> None:
    raise_open_files_limit()  # rollouts at once each hold descriptors (connections, logs, runtime sockets)
    _register()
    try:
        cli.main(args=argv, prog_name="forge", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code if exc.exit_code != 0 else 2)
    except ForgeError as exc:
        click.echo(f"{type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            click.echo("ResourceError: no space left on device; fix: free disk space (df -h) and rerun", err=True)
            sys.exit(1)
        raise
