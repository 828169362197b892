#!/usr/bin/env python3
"""forge-webapp: serve the task's web app on 127.0.0.1 inside a gui container (stdlib only).

    forge-webapp run [--] CMD...   start the app, then exec CMD (the image's entrypoint)
    forge-webapp                   start the app unless it already answers; print its URL

The app is ``python3 -m http.server`` over ``$WEBAPP_DIR`` (static mode) or, when the directory holds
an ``app.py`` (app mode), that program: ``python3 app.py --bind 127.0.0.1 --port P --db $WEBAPP_DB``
(default /var/lib/webapp/app.db), run as root from the directory, which like http.server prints
"... port N ..." once it listens and logs each request to stderr. Either serves on ``$WEBAPP_PORT``
(0: a free port — containers share the host's network and rollouts run side by side). Every request
is logged to /var/log/webapp/access.log, root's file, so a verifier can read what the agent submitted.
Invariant: at most one app per container — starts are serialised by a lock, and once the app
answers its URL is published in /run/forge-webapp/url and every later call just prints it.
"""

import fcntl
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

STATE = Path("/run/forge-webapp")
ACCESS_LOG = Path("/var/log/webapp/access.log")
APP_PROGRAM = "app.py"
DEFAULT_DB = "/var/lib/webapp/app.db"
SERVING = re.compile(r"port (\d+)")
START_TIMEOUT_S = 15


def answers(url):
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def server_command(directory, port):
    """The app's own program (app mode) when the directory has one, else a static file server."""
    if (Path(directory) / APP_PROGRAM).is_file():
        return [sys.executable, "-u", APP_PROGRAM, "--bind", "127.0.0.1", "--port", str(port),
                "--db", os.environ.get("WEBAPP_DB") or DEFAULT_DB]
    return [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "--directory", directory, str(port)]


def start(directory, port, detach):
    ACCESS_LOG.parent.mkdir(parents=True, exist_ok=True)
    command = server_command(directory, port)
    with open(STATE / "server.out", "wb") as out, open(ACCESS_LOG, "ab") as log:
        # No inherited pipes, so a `docker exec` that starts the app returns while it keeps serving.
        # Detached (own session) when started by a command; the entrypoint's child otherwise, so it
        # belongs to the environment and outlives the agent's processes.
        return subprocess.Popen(command, cwd=directory, stdin=subprocess.DEVNULL, stdout=out, stderr=log,
                                start_new_session=detach)


def wait_for_port(server):
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        found = SERVING.search((STATE / "server.out").read_text(errors="replace"))
        if found:
            return int(found.group(1))
        if server.poll() is not None:
            tail = ACCESS_LOG.read_text(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"the web app exited ({server.returncode}): {' | '.join(tail)}")
        time.sleep(0.05)
    raise RuntimeError(f"the web app did not start in {START_TIMEOUT_S} s")


def published():
    """The published URL when the app behind it answers (any user may ask), else None."""
    url_file = STATE / "url"
    url = url_file.read_text().strip() if url_file.exists() else ""
    return url if url and answers(url) else None


def wait_until_published():
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if url := published():
            return url
        time.sleep(0.1)
    raise RuntimeError("the app is not serving, and only root can start it (forge-webapp as root)")


def ensure_serving(detach):
    """The app's URL, starting it first unless it already answers."""
    if url := published():
        return url
    if os.geteuid() != 0:  # only root starts the app; the entrypoint may be doing so right now
        return wait_until_published()
    STATE.mkdir(parents=True, exist_ok=True)
    url_file = STATE / "url"
    with open(STATE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if url := published():  # started by whoever held the lock before us
            return url
        server = start(os.environ.get("WEBAPP_DIR", "/srv/webapp"), int(os.environ.get("WEBAPP_PORT") or 0), detach)
        url = f"http://127.0.0.1:{wait_for_port(server)}/"
        if not answers(url):
            raise RuntimeError(f"{url} does not answer")
        (STATE / ".url.tmp").write_text(url + "\n")
        (STATE / ".url.tmp").replace(url_file)
        return url


def main(argv):
    if argv[:1] == ["run"]:
        command = argv[2:] if argv[1:2] == ["--"] else argv[1:]
        try:
            ensure_serving(detach=False)
        except (OSError, RuntimeError) as exc:  # the container still starts; `forge-webapp` then says why
            print(f"forge-webapp: {exc}", file=sys.stderr, flush=True)
        if command:
            os.execvp(command[0], command)
        return 0
    try:
        print(ensure_serving(detach=True))
    except (OSError, RuntimeError) as exc:
        print(f"forge-webapp: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
