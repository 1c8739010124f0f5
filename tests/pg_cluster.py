"""A throwaway PostgreSQL cluster on loopback, for tests and benchmarks: `initdb` in a temporary directory,
`pg_ctl start` on a free port, and everything removed at `stop()`. As root, the server runs as the `postgres`
user (initdb refuses root). `start_cluster()` returns None, with the reason in `UNAVAILABLE`, when no
PostgreSQL can be started on this machine."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

UNAVAILABLE: list[str] = []


def _binary(name: str) -> str | None:
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return shutil.which(name) or (candidates[-1] if candidates else None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cluster:
    """A running throwaway cluster; `url` names its `postgres` database."""

    def __init__(self, directory: Path, port: int, as_user: list[str]):
        self.directory, self.port, self._as_user = directory, port, as_user
        self.url = f"postgresql://apdmem@127.0.0.1:{port}/postgres"

    def psql(self, sql: str) -> str:
        return subprocess.run([*self._as_user, "psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "apdmem", "-d",
                               "postgres", "-Atc", sql], capture_output=True, text=True, check=True).stdout

    def stop(self) -> None:
        subprocess.run([*self._as_user, _binary("pg_ctl"), "-D", str(self.directory / "data"), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(self.directory, ignore_errors=True)


def start_cluster(*, durable: bool = True) -> Cluster | None:
    """Start a cluster (`durable=False` turns fsync off: faster, for tests that do not measure anything)."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if not initdb or not pg_ctl:
        UNAVAILABLE.append("PostgreSQL's initdb/pg_ctl are not installed (Debian: apt-get install postgresql)")
        return None
    directory = Path(tempfile.mkdtemp(prefix="apdmem-pg-"))
    as_user = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(directory, "postgres", "postgres")
    data = directory / "data"
    init = [*as_user, initdb, "-D", str(data), "-U", "apdmem", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"]
    if not _ran(init, directory, len(as_user)):
        return None
    for attempt in range(3):  # a free port can be taken by another process (a parallel test worker) before we bind it
        port = _free_port()
        options = f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={directory} -c max_connections=200"
        if not durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        start = [*as_user, pg_ctl, "-D", str(data), "-o", options, "-l", str(directory / "server.log"), "-w", "start"]
        if _ran(start, directory, len(as_user), last=attempt == 2):
            break
    else:
        return None
    return Cluster(directory, port, as_user)


def _ran(step: list[str], directory: Path, skip: int, *, last: bool = True) -> bool:
    """Run a step of the cluster's set-up; on failure, when it is the `last` try, note why in UNAVAILABLE and
    remove the cluster's directory."""
    result = subprocess.run(step, capture_output=True, text=True)
    if result.returncode == 0:
        return True
    if last:
        log = (directory / "server.log").read_text() if (directory / "server.log").exists() else ""
        UNAVAILABLE.append(f"{Path(step[skip]).name} failed: {(result.stderr or log).strip()[-500:]}")
        shutil.rmtree(directory, ignore_errors=True)
    return False
