"""One driver per sweep: a lease file in the sweep's storage folder, and the checks that
storage can hold the sweep, both before Ray starts. Files are written to storage whole
(`trials.store.kept.write_atomic`: a temporary file, then `os.replace`, so a reader never
sees half a file).

`<storage>/<sweep>/driver.lease` holds the driver's host, pid, process start time and
command. It is written whole to a temporary file and hard-linked to its name (`os.link`
fails where the name exists: atomic on a local disk and on NFS v3+), so of two drivers that
start together one wins, and nobody ever reads a lease half-written; the other is refused
with one line naming the holder and its command. The holder touches the file every
`HEARTBEAT_S` seconds. A lease whose holder is dead (same host: its pid is gone or belongs to
a newer process; another host: no heartbeat for `STALE_S` seconds) is taken over, under a
takeover lock so that two drivers cannot both take it. A lease that is no driver's record
(garbage, a pid that is not a number) was never written by a driver: it is taken over at
once, with a warning naming it; a folder in its place is refused in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

from trials.store.keys import (DRIVER_HOST_TAG, DRIVER_PID_TAG, DRIVER_STARTED_TAG, KILLED_REASON_TAG,
                               SWEEP_PARENT_TAG, sweep_trials)

HEARTBEAT_S = 15.0
STALE_S = 90.0  # a lease from another host with no heartbeat for this long is dead
LEASE_FILE = "driver.lease"


GRACE_S = 2.0  # a lease that is no record yet, younger than this, may be a pre-atomic writer's mid-write


class LeaseHeld(ValueError):
    """Another live driver holds the sweep."""


def holder_problem(holder) -> str | None:
    """Why a lease's content is no driver's record (None when it is one): a JSON object with
    the driver's host and a positive integer pid (and, where given, a finite start time and
    a command)."""
    if not isinstance(holder, dict):
        return "not a JSON object"
    if not isinstance(holder.get("host"), str) or not holder["host"]:
        return f"host: a host name, got {str(holder.get('host'))[:40]!r}"
    pid = holder.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return f"pid: a positive integer, got {str(pid)[:40]!r}"
    started = holder.get("started", 0.0)
    if isinstance(started, bool) or not isinstance(started, (int, float)) or not abs(started) < float("inf"):
        return f"started: a process start time, got {str(started)[:40]!r}"
    if not isinstance(holder.get("command", ""), str):
        return "command: text"
    return None


def _me(command: str) -> dict:
    import psutil

    p = psutil.Process()
    return {"host": socket.gethostname(), "pid": p.pid, "started": round(p.create_time(), 3),
            "command": command, "since": time.strftime("%Y-%m-%d %H:%M:%S")}


def holder_alive(holder: dict, mtime: float) -> bool:
    """Whether the driver a lease names still runs (checked by pid on this host, by the
    lease's heartbeat elsewhere)."""
    import psutil

    if holder.get("host") != socket.gethostname():
        return time.time() - mtime < STALE_S
    try:
        proc = psutil.Process(int(holder["pid"]))
        return proc.is_running() and abs(proc.create_time() - float(holder.get("started", 0))) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError, ValueError, TypeError, OverflowError):
        return False


def holder_of(exp_dir: Path) -> tuple[dict, float] | None:
    """(the driver's record, the lease's mtime) where a lease that a driver wrote is held on
    the sweep; None where there is none (or it is no driver's record)."""
    path = Path(exp_dir) / LEASE_FILE
    try:
        holder, mtime = json.loads(path.read_text(errors="replace")), path.stat().st_mtime
    except (OSError, ValueError, RecursionError):
        return None
    return (holder, mtime) if holder_problem(holder) is None else None


class Lease:
    def __init__(self, exp_dir: Path, name: str, command: str):
        self.path = Path(exp_dir) / LEASE_FILE
        self.name = name
        self.me = _me(command)
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._nested = False

    def _read(self) -> tuple[object, float] | None:
        """(the lease's content, parsed where it is JSON, else its text; its mtime), or None
        where there is none. A folder in its place is refused in one line."""
        try:
            text = self.path.read_text(errors="replace")
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise LeaseHeld(f"sweep {self.name!r}: its lease {self.path} is a folder, not a lease file; "
                            "remove it (no driver makes one)") from None
        except OSError as e:
            raise LeaseHeld(f"sweep {self.name!r}: cannot read its lease {self.path} ({e.strerror})") from None
        try:
            return json.loads(text), mtime
        except (ValueError, RecursionError):
            return text[:40], mtime

    def _create(self) -> bool:
        """Make the lease, whole, where there is none: False where one exists."""
        data = json.dumps(self.me).encode()
        tmp = self.path.with_name(f".{self.path.name}.new-{os.getpid()}-{threading.get_ident()}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, self.path)  # exclusive, and the lease appears whole
            except FileExistsError:
                return False
            except OSError:  # a file system without hard links: exclusive creation, then the write
                return self._create_in_place(data)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def _create_in_place(self, data: bytes) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return True

    def acquire(self) -> "Lease":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            if self._create():
                self._start_heartbeat()
                return self
            found = self._read()
            if found is None:
                continue  # released between the two calls: try again
            holder, mtime = found
            problem = holder_problem(holder)
            if problem and time.time() - mtime < GRACE_S:
                time.sleep(max(0.0, mtime + GRACE_S - time.time()) + 0.05)  # a writer without hard links: mid-write?
                continue
            if problem:  # no driver wrote this whole: it holds nothing
                print(f"trials: warning: sweep {self.name!r}: its lease {self.path} is no driver's record "
                      f"({problem}); taken over as stale", file=sys.stderr)
            elif holder["pid"] == self.me["pid"] and holder["host"] == self.me["host"] and \
                    holder.get("started") == self.me["started"]:
                self._nested = True  # this process holds it already (augment's looks run sweeps)
                return self
            elif holder_alive(holder, mtime):
                raise LeaseHeld(f"sweep {self.name!r} is driven by pid {holder['pid']} on {holder['host']} "
                                f"(`{holder.get('command') or '?'}`, since {holder.get('since', '?')}); wait for "
                                "it to end, or stop it first")
            self._take_over(mtime)
        raise LeaseHeld(f"sweep {self.name!r}: could not take its lease {self.path} (another driver keeps "
                        "taking it)")

    def _take_over(self, seen_mtime: float) -> None:
        """Remove a dead holder's lease, under a lock, only if it is still the one judged."""
        lock = self.path.with_suffix(".takeover")
        try:
            lock.mkdir()
        except FileExistsError:
            if time.time() - lock.stat().st_mtime > STALE_S:  # a takeover that crashed midway
                shutil.rmtree(lock, ignore_errors=True)
            time.sleep(0.2)
            return
        try:
            if self.path.exists() and self.path.stat().st_mtime == seen_mtime:
                self.path.unlink()
        finally:
            lock.rmdir()

    def _start_heartbeat(self) -> None:
        def beat():
            while not self._stop.wait(HEARTBEAT_S):
                try:
                    os.utime(self.path)
                except OSError:
                    pass

        self._beat = threading.Thread(target=beat, daemon=True, name="lease-heartbeat")
        self._beat.start()

    def release(self) -> None:
        if self._nested:
            return
        self._stop.set()
        try:
            found = self._read()
        except LeaseHeld:
            return
        if found and isinstance(found[0], dict) and found[0].get("pid") == self.me["pid"] and \
                found[0].get("host") == self.me["host"]:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> "Lease":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def check_storage(root: Path, need_bytes: int) -> None:
    """Before Ray starts: the storage folder exists or can be created, is a folder, can be
    written, and has room for at least one checkpoint. One line otherwise."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ValueError(f"storage: {root} is not a folder")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"storage: cannot create {root} ({e.strerror})") from None
    probe = root / f".write-check-{os.getpid()}"
    try:
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as e:
        raise ValueError(f"storage: cannot write in {root} ({e.strerror})") from None
    free = shutil.disk_usage(root).free
    if free < need_bytes:
        raise ValueError(f"storage: {root} has {free / 1e6:.1f} MB free; a checkpoint of this sweep needs about "
                         f"{need_bytes / 1e6:.1f} MB")


def driver_alive(tags: dict[str, str]) -> bool | None:
    """Whether the driver recorded in a parent run's tags still runs: None when it ran on
    another host (it cannot be checked from here)."""
    import socket

    import psutil

    if tags.get(DRIVER_HOST_TAG) != socket.gethostname() or DRIVER_PID_TAG not in tags:
        return None
    try:
        proc = psutil.Process(int(tags[DRIVER_PID_TAG]))
        return abs(proc.create_time() - float(tags.get(DRIVER_STARTED_TAG, 0))) < 1.0 and proc.is_running()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def reap_dead_driver(client, experiment_id: str) -> int:
    """A sweep whose driver died without closing its runs (kill -9): its RUNNING runs,
    parent and children, end KILLED. Returns how many runs were closed."""
    closed = 0
    for parent in client.search_runs([experiment_id], f"tags.{SWEEP_PARENT_TAG} = 'true'", max_results=10):
        if parent.info.status != "RUNNING" or driver_alive(parent.data.tags) is not False:
            continue
        kids = sweep_trials(client, experiment_id)
        for run in [*kids, parent]:
            if run.info.status == "RUNNING":
                client.set_terminated(run.info.run_id, status="KILLED")
                client.set_tag(run.info.run_id, KILLED_REASON_TAG, "its sweep's driver died")
                closed += 1
    return closed
