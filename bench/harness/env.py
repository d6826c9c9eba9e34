"""What a run records about where it ran: the machine, its load, the commit, the tools.

The machine is shared (other engineers build and test on the same two cores), so the load
average is recorded at the start and end of the run and before every workload.
"""

import hashlib
import os
import platform
import shutil
import subprocess
import time


def _read(path):
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError:
        return ""


def _output(argv, cwd=None):
    """The stripped standard output of a command, or None when it cannot run or fails."""
    try:
        done = subprocess.run(
            argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def cpu_model():
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def mem_total_bytes():
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def loadavg():
    """The 1, 5 and 15 minute load averages."""
    fields = _read("/proc/loadavg").split()
    return [float(x) for x in fields[:3]] if len(fields) >= 3 else None


def uptime():
    """`uptime`'s line (time, up, users, load average), as the brief asks to record."""
    return _output(["uptime"])


def machine():
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "kernel": platform.release(),
        "mem_total_bytes": mem_total_bytes(),
    }


def load_snapshot():
    return {"time": time.time(), "loadavg": loadavg(), "uptime": uptime()}


def commit(repo):
    """The commit larch is measured at; `dirty` when tracked files differ from it."""
    full = _output(["git", "rev-parse", "HEAD"], cwd=repo)
    status = _output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo)
    return {
        "commit": full,
        "short": full[:7] if full else None,
        "subject": _output(["git", "log", "-1", "--format=%s"], cwd=repo),
        "dirty": bool(status),
        # Porcelain lines are "XY PATH"; X may be a space, and _output strips the first one.
        "dirty_files": [line.split(None, 1)[1] for line in (status or "").splitlines() if line.strip()],
    }


def file_identity(path):
    """Size, modification time and SHA-256 of a file: which build of larch a run used (the
    binary may be rebuilt while a run goes on). None when it cannot be read."""
    try:
        stat = os.stat(path)
        digest = hashlib.sha256()
        with open(path, "rb") as file:
            for chunk in iter(lambda: file.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return {"size": stat.st_size, "mtime": stat.st_mtime, "sha256": digest.hexdigest()}


def mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def tool_versions(larch_bin):
    return {
        "fio": _output(["fio", "--version"]),
        "nbdkit": _output(["nbdkit", "--version"]),
        "qemu-nbd": _output(["qemu-nbd", "--version"]),
        "larch": _output([larch_bin, "--version"]),
        "python": platform.python_version(),
    }


def nbdkit_missing():
    """Why the nbdkit systems cannot run (None when nbdkit and its filters load)."""
    if shutil.which("nbdkit") is None:
        return "nbdkit is not installed"
    probe = ["nbdkit", "--filter=cache", "--filter=delay", "memory", "1M", "--dump-plugin"]
    if _output(probe) is None:
        return "nbdkit cannot load its cache and delay filters (%s failed)" % " ".join(probe)
    return None


def qemu_nbd_missing():
    """Why qemu-nbd-device cannot run (None when qemu-nbd is installed)."""
    if shutil.which("qemu-nbd") is None:
        return "qemu-nbd is not installed (apt-get install qemu-utils)"
    return None


def install_missing_tools(log):
    """Install fio, nbdkit, nbdcopy and qemu-nbd with apt-get when they are missing and we may (root).

    The package names are those of scripts/test's install_tools. Returns what is still
    missing afterwards, so that the caller can record it instead of failing silently.
    """
    tools = (("fio", "fio"), ("nbdkit", "nbdkit"), ("libnbd-bin", "nbdcopy"), ("qemu-utils", "qemu-nbd"))
    missing = [p for p, tool in tools if shutil.which(tool) is None]
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        log("installing with apt-get: %s" % " ".join(missing))
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
            env=env,
            check=False,
            stdout=subprocess.DEVNULL,
        )
    return [tool for _package, tool in tools if shutil.which(tool) is None]
