"""The systems under test: how each is set up, started, reached by fio and stopped.

Servers listen on Unix sockets inside the run's temporary directory only. Each runs in its
own session (so that Ctrl-C reaches the harness, which then stops them in order) and is
registered in `_LIVE` until stopped; `stop_all` (called from the harness's `finally` and at
exit) stops whatever is left.

Systems:
- `larch-arc`, `larch-l2`, `larch-log`: `larch serve` of a pool with the ARC only, with a
  cache device (L2ARC), or with a log device; the backing store is slowed by larch's own
  latency model (`--read-latency-ms`, `--write-latency-ms`).
- `nbdkit-cache`: `nbdkit file` under `--filter=cache` (cache-on-read, ARC + L2 bytes of
  cache) over `--filter=delay` with the same delays: the nearest peer. Its cache is a
  temporary file through the page cache, so on a machine with free memory it is a DRAM cache.
- `nbdkit-cache-capped`: the same in a cgroup-v1 memory cgroup limited to larch's ARC size
  plus `NBDKIT_ALLOWANCE_BYTES` for nbdkit itself; the limit counts the page cache, so the
  cache file gets the ARC's DRAM and the rest of it lives on the disk.
- `nbdkit-memory`: `nbdkit memory` holding the workload's bytes (written into it before
  the first read): the protocol path's limit for ARC hits.
- `nbdkit-tmpfs`: `nbdkit file` on a tmpfs copy of the data: the protocol path's limit.
- `nbdkit-backing`: `nbdkit file` over `--filter=delay` with larch's delays and no cache:
  the backing store alone, as the cached systems see it (what a write cache must at least
  keep up with).
- `fio-device`: fio reading a file directly (io_uring, O_DIRECT): the device's limit.
- `qemu-nbd-device`: qemu-nbd serving the same file read-only (O_DIRECT, io_uring) and fio
  reading it through NBD: the device's limit through the NBD path, with no cache at all.
"""

import atexit
import errno
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

_LIVE = set()

LABELS = {
    "larch-arc": "larch, ARC only",
    "larch-l2": "larch, ARC + L2",
    "larch-log": "larch, ARC + log device",
    "nbdkit-cache": "nbdkit cache filter",
    "nbdkit-cache-capped": "nbdkit cache filter, capped",
    "nbdkit-memory": "nbdkit memory",
    "nbdkit-tmpfs": "nbdkit file on tmpfs",
    "nbdkit-backing": "the backing store alone (nbdkit + delay)",
    "fio-device": "fio on the cache device file",
    "qemu-nbd-device": "qemu-nbd on the cache device file",
}

NBDKIT_SYSTEMS = ("nbdkit-cache", "nbdkit-cache-capped", "nbdkit-memory", "nbdkit-tmpfs", "nbdkit-backing")

# The systems that read larch's cache device file itself (its limit, directly and through NBD).
DEVICE_LIMITS = ("fio-device", "qemu-nbd-device")

# The cgroup-v1 memory hierarchy in which nbdkit-cache-capped makes its cgroup.
MEMORY_CGROUP_ROOT = "/sys/fs/cgroup/memory"

# What nbdkit-cache-capped's cgroup allows beyond the ARC's size, for nbdkit itself (its
# code, heap, thread stacks and socket buffers). nbdkit 1.32 with the cache and delay
# filters peaked at a 10 MiB RSS (libraries included) and 3.3 MiB of kernel memory under the
# l2-warmup job; the report gives what each run measured.
NBDKIT_ALLOWANCE_BYTES = 32 * 1024 * 1024


class SetupError(Exception):
    """A system could not be set up, started or stopped."""


def label(name):
    return LABELS.get(name, name)


def _run(argv, commands, **kwargs):
    """Run a setup command, remember it for the report, raise with its output on failure."""
    commands.append(list(argv))
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)
    if done.returncode != 0:
        raise SetupError("%s failed (%d): %s" % (" ".join(argv), done.returncode, done.stdout.strip()[-500:]))


def _read(path):
    with open(path, encoding="utf-8", errors="replace") as file:
        return file.read()


def _read_quietly(path):
    """The text of `path`, or "" when it cannot be read."""
    try:
        return _read(path)
    except OSError:
        return ""


def _write(path, text):
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)


def _wait_written(path, since, timeout_s):
    """Whether `path` was (re)written at or after `since` (mtime), waiting up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if os.stat(path).st_mtime >= since:
                return True
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _tail(path, limit=800):
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()[-limit:]
    except OSError:
        return ""


class Server:
    """A server process in its own session, with its output in a log file."""

    def __init__(self, argv, log_path, env=None):
        self.argv = list(argv)
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True
            )
        _LIVE.add(self)

    def wait_listening(self, socket_path, timeout_s=60):
        """Return once the server accepts connections on `socket_path`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SetupError("%s exited with %d: %s" % (self.argv[0], self.process.returncode, _tail(self.log_path)))
            if os.path.exists(socket_path):
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    probe.connect(socket_path)
                    return
                except OSError:
                    pass
                finally:
                    probe.close()
            time.sleep(0.05)
        raise SetupError("%s did not listen on %s within %d s" % (self.argv[0], socket_path, timeout_s))

    def stop(self, timeout_s=30):
        """SIGTERM, then SIGKILL if it has not exited within `timeout_s`."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        _LIVE.discard(self)
        return self.process.returncode


def stop_all():
    for server in list(_LIVE):
        server.stop(timeout_s=10)


atexit.register(stop_all)


class System:
    """A system under test for one workload, in its own directory.

    `commands` collects every command run to set it up and start it, for the report.
    """

    name = ""

    def __init__(self, ctx, directory):
        self.ctx = ctx
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.commands = []
        self.server = None

    @property
    def socket_path(self):
        return os.path.join(self.dir, "nbd.sock")

    def setup(self):
        """Create what the system needs before its first start."""

    def start(self):
        raise NotImplementedError

    def target(self):
        """fio options that reach the system."""
        raise NotImplementedError

    def stop(self):
        if self.server is not None:
            self.server.stop()
            self.server = None

    def stats(self, since=None):
        """The system's own counters, or None when it has none.

        `since` (a time.time()): counters taken no earlier than then.
        """
        return None

    def notes(self):
        """What the report should say about how the system ran, as sentences."""
        return []

    def problems(self):
        """What went wrong inside the system while it ran (faulted devices), as sentences."""
        return []

    def cleanup(self):
        """Remove what lives outside the run's directory."""


class Larch(System):
    """`larch serve` of a pool with one volume, optionally a cache device and a log device."""

    def __init__(self, ctx, directory, name, l2=False, log=False, prefill_cache=False):
        super().__init__(ctx, directory)
        self.name = name
        self.l2 = l2
        self.log = log
        self.prefill_cache = prefill_cache
        self.state_dir = os.path.join(directory, "pool")
        self.cache_path = os.path.join(directory, "cache.img") if l2 else None

    def setup(self):
        larch, scale = self.ctx.larch_bin, self.ctx.scale
        _run([larch, "pool", "create", "bench", "--state-dir", self.state_dir, "--arc-max", str(scale.arc_bytes)], self.commands)
        if self.ctx.tunables:
            _run([larch, "set", *self.ctx.tunables, "--state-dir", self.state_dir], self.commands)
        _run(
            [
                larch, "volume", "add", "vol", "--backing", self.ctx.backing, "--volblocksize", scale.volblocksize,
                "--read-latency-ms", str(scale.read_latency_ms), "--write-latency-ms", str(scale.write_latency_ms),
                "--state-dir", self.state_dir,
            ],
            self.commands,
        )
        if self.l2:
            add = [larch, "cache", "add", self.cache_path, "--size", str(scale.l2_bytes), "--state-dir", self.state_dir]
            if self.prefill_cache:
                # The device limit is measured on this very file, so every byte of it must be
                # allocated on the disk: a sparse file would read its holes without any I/O.
                fill_random(self.cache_path, scale.l2_bytes, seed=7)
                self.commands.append(["# %s filled with %d random bytes" % (self.cache_path, scale.l2_bytes)])
                add.append("--force")
            _run(add, self.commands)
        if self.log:
            log_path = os.path.join(self.dir, "log.img")
            _run([larch, "log", "add", log_path, "--size", str(scale.log_bytes), "--state-dir", self.state_dir], self.commands)

    def start(self):
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        argv = [self.ctx.larch_bin, "serve", "--state-dir", self.state_dir, "--socket", self.socket_path, "--http", "off"]
        self.commands.append(argv)
        self.server = Server(argv, os.path.join(self.dir, "serve.log"))
        self.server.wait_listening(self.socket_path)

    def restart(self):
        self.stop()
        self.start()

    def target(self):
        return {"ioengine": "nbd", "uri": "nbd+unix:///vol?socket=%s" % self.socket_path}

    def problems(self):
        """Faults the daemon reports for its cache and log devices (status.json).

        A faulted cache device leaves larch running with the ARC only, which the figures
        alone would not show.
        """
        try:
            with open(os.path.join(self.state_dir, "status.json"), encoding="utf-8") as file:
                status = json.load(file)
        except (OSError, ValueError):
            return []
        devices = [("cache device", d) for d in status.get("cache_devices") or []]
        if status.get("log_device"):
            devices.append(("log device", status["log_device"]))
        return ["%s %s faulted: %s" % (kind, os.path.basename(d.get("path", "?")), d["fault"])
                for kind, d in devices if d.get("fault")]

    def stats(self, since=None, timeout_s=3.0):
        """Counters from status.json, which the daemon rewrites every second.

        Until the running daemon has written it (its first second), status.json is missing
        or left from the previous start; the daemon's counters then are still zero.

        With `since`, wait for a status.json written at or after that time (its mtime), so
        that the counters include every request completed before it; None when none comes
        within `timeout_s`.
        """
        keys = ("hits", "misses", "l2_hits", "l2_misses", "size", "l2_size", "l2_rebuild_success")
        if self.server is None:
            return None
        path = os.path.join(self.state_dir, "status.json")
        if since is not None and not _wait_written(path, since, timeout_s):
            return None
        try:
            with open(path, encoding="utf-8") as file:
                status = json.load(file)
            if status.get("pid") != self.server.process.pid:
                raise ValueError("status.json of another daemon")
            arcstats = status["arcstats"]
        except (OSError, ValueError, KeyError):
            return {key: 0 for key in keys}
        return {key: arcstats.get(key, 0) for key in keys}


class NbdkitCache(System):
    """nbdkit file + cache filter (cache-on-read) over the delay filter: the nearest peer."""

    name = "nbdkit-cache"

    def start(self):
        scale = self.ctx.scale
        cache_dir = os.path.join(self.dir, "tmp")
        os.makedirs(cache_dir, exist_ok=True)
        # The first --filter is the outermost: cache hits never reach the delay filter.
        argv = [
            "nbdkit", "-f", "-U", self.socket_path, "--filter=cache", "--filter=delay", "file", self.ctx.backing,
            "rdelay=%dms" % scale.read_latency_ms, "wdelay=%dms" % scale.write_latency_ms,
            "cache-on-read=true", "cache-max-size=%d" % scale.cache_bytes,
        ]
        # The cache filter keeps its cache in an unlinked file in $TMPDIR: put it on the
        # disk that holds larch's cache device.
        argv, env = self._argv_env(argv, dict(os.environ, TMPDIR=cache_dir))
        self.commands.append(["env", "TMPDIR=%s" % cache_dir, *argv])
        self.server = Server(argv, os.path.join(self.dir, "nbdkit.log"), env=env)
        self.server.wait_listening(self.socket_path)

    def _argv_env(self, argv, env):
        """The command and environment that start nbdkit (a subclass may wrap them)."""
        return argv, env

    def target(self):
        return {"ioengine": "nbd", "uri": "nbd+unix:///?socket=%s" % self.socket_path}


class NbdkitCacheCapped(NbdkitCache):
    """nbdkit-cache in a cgroup-v1 memory cgroup limited to the ARC's size plus an allowance.

    memory.limit_in_bytes counts the page cache of the files the cgroup's processes touch,
    so the cache filter's temporary file keeps at most about the ARC's size in DRAM and the
    kernel writes the rest back to (and reads it again from) the disk. nbdkit joins the
    cgroup before it starts: `sh` writes its own pid into cgroup.procs and then execs
    nbdkit, and only if that write succeeded. A cgroup that cannot be made is a SetupError:
    the system is then reported as not measured.
    """

    name = "nbdkit-cache-capped"

    def __init__(self, ctx, directory, cgroup_root=MEMORY_CGROUP_ROOT):
        super().__init__(ctx, directory)
        self.cgroup_root = cgroup_root
        self.cgroup = None
        self.limit_bytes = ctx.scale.arc_bytes + NBDKIT_ALLOWANCE_BYTES

    def setup(self):
        name = "larch-bench.%d.%s" % (os.getpid(), os.path.basename(self.dir))
        path = os.path.join(self.cgroup_root, name)
        try:
            os.mkdir(path)
        except OSError as error:
            raise SetupError("not run: cannot make the memory cgroup %s (cgroup v1 and root needed): %s"
                             % (path, error)) from error
        self.cgroup = path
        try:
            _write(os.path.join(path, "memory.limit_in_bytes"), str(self.limit_bytes))
            limit = int(_read(os.path.join(path, "memory.limit_in_bytes")))
        except (OSError, ValueError) as error:
            raise SetupError("not run: cannot set memory.limit_in_bytes of %s: %s" % (path, error)) from error
        if limit > self.limit_bytes:
            raise SetupError("not run: %s took a limit of %d bytes, not %d" % (path, limit, self.limit_bytes))
        self.commands.append(["mkdir", path])
        self.commands.append(["# echo %d > %s/memory.limit_in_bytes (ARC %d + %d for nbdkit itself)"
                              % (self.limit_bytes, path, self.ctx.scale.arc_bytes, NBDKIT_ALLOWANCE_BYTES)])

    def start(self):
        super().start()
        pid = self.server.process.pid
        procs = _read(os.path.join(self.cgroup, "cgroup.procs")).split()
        if str(pid) not in procs:
            raise SetupError("not measured: nbdkit (pid %d) is not in the memory cgroup %s" % (pid, self.cgroup))

    def _argv_env(self, argv, env):
        return cgroup_command(os.path.join(self.cgroup, "cgroup.procs"), argv), env

    def notes(self):
        """nbdkit's own memory and what the limit did, measured before it stops."""
        if self.cgroup is None or self.server is None:
            return []
        status = _read_quietly("/proc/%d/status" % self.server.process.pid)
        hwm = [line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")]
        stat = parse_memory_stat(_read_quietly(os.path.join(self.cgroup, "memory.stat")))
        kmem = _read_quietly(os.path.join(self.cgroup, "memory.kmem.max_usage_in_bytes")).strip()
        failcnt = _read_quietly(os.path.join(self.cgroup, "memory.failcnt")).strip()
        return [capped_note(self.limit_bytes, self.ctx.scale.arc_bytes, NBDKIT_ALLOWANCE_BYTES,
                            int(hwm[0]) * 1024 if hwm else None, stat,
                            int(kmem) if kmem.isdigit() else None, int(failcnt) if failcnt.isdigit() else None)]

    def cleanup(self):
        """Remove the cgroup once nbdkit has exited (it is empty then)."""
        if self.cgroup is None:
            return
        for _ in range(50):
            try:
                os.rmdir(self.cgroup)
                break
            except OSError as error:
                # EBUSY while the exiting nbdkit is still a member; anything else is final.
                if error.errno != errno.EBUSY:
                    break
                time.sleep(0.1)
        self.cgroup = None


def cgroup_command(procs_path, argv):
    """`argv` run by a shell that first moves itself into a cgroup (writes its pid into
    `procs_path`) and then execs `argv`, keeping its pid; nothing runs when the write fails."""
    return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs_path, *argv]


def parse_memory_stat(text):
    """A cgroup's memory.stat ("name value" lines) as a dict of ints."""
    out = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].isdigit():
            out[fields[0]] = int(fields[1])
    return out


def _mib(n):
    return "%.1f MiB" % (n / (1024 * 1024))


def capped_note(limit, arc, allowance, hwm, stat, kmem_max, failcnt):
    """The report's sentence on nbdkit-cache-capped's memory, from what its cgroup measured."""
    text = ("its memory cgroup's limit (memory.limit_in_bytes, which counts the page cache) "
            "was %s: the ARC's %s plus %s for nbdkit itself" % (_mib(limit), _mib(arc), _mib(allowance)))
    own = []
    if hwm is not None:
        own.append("a peak RSS of %s (VmHWM, its libraries included)" % _mib(hwm))
    if stat.get("rss") is not None:
        own.append("%s of anonymous memory at the end" % _mib(stat["rss"]))
    if kmem_max is not None:
        own.append("%s of kernel memory at most" % _mib(kmem_max))
    if own:
        text += "; nbdkit had %s" % ", ".join(own)
    if stat.get("cache") is not None:
        text += ("; the cgroup's page cache (its cache file's, and backing file pages it read first) "
                 "was %s at the end" % _mib(stat["cache"]))
    if failcnt is not None:
        text += ", and its usage hit the limit %s times (memory.failcnt; each time the kernel reclaimed)" % (
            "{:,}".format(failcnt))
    return text + "."


class NbdkitMemory(System):
    """`nbdkit memory` holding the workload's bytes: the protocol path's limit for ARC hits.

    Its disk starts as zeros that are not yet memory (pages never written), so the first
    start writes the first `backing_bytes` of the backing file into it (nbdcopy from a
    pipe) and every later read is of allocated pages holding the same bytes larch serves.
    """

    name = "nbdkit-memory"

    def __init__(self, ctx, directory):
        super().__init__(ctx, directory)
        self.filled = False

    def start(self):
        # allocator=malloc: one flat array, the fastest of its allocators (the default
        # sparse one looks pages up under a lock and served fewer IOPS than a tmpfs file).
        argv = ["nbdkit", "-f", "-U", self.socket_path, "memory", "size=%d" % self.ctx.backing_bytes,
                "allocator=malloc"]
        self.commands.append(argv)
        self.server = Server(argv, os.path.join(self.dir, "nbdkit.log"))
        self.server.wait_listening(self.socket_path)
        if not self.filled and not self.ctx.fresh_backing:
            self._fill()
            self.filled = True

    def _fill(self):
        if shutil.which("nbdcopy") is None:
            raise SetupError("nbdcopy is missing (apt-get install libnbd-bin): cannot fill nbdkit memory")
        uri = self.target()["uri"]
        argv = ["nbdcopy", "-", uri]
        self.commands.append(["# head -c %d %s | nbdcopy - %s" % (self.ctx.backing_bytes, self.ctx.backing, uri)])
        with open(os.path.join(self.dir, "nbdcopy.log"), "wb") as log:
            copy = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log, stderr=log)
            try:
                with open(self.ctx.backing, "rb") as source:
                    left = self.ctx.backing_bytes
                    while left > 0:
                        block = source.read(min(4 * 1024 * 1024, left))
                        if not block:
                            break
                        copy.stdin.write(block)
                        left -= len(block)
            except BrokenPipeError:
                pass
            finally:
                copy.stdin.close()
                code = copy.wait()
        if code != 0 or left > 0:
            raise SetupError("nbdcopy into nbdkit memory failed (%d, %d bytes not copied): %s"
                             % (code, left, _tail(os.path.join(self.dir, "nbdcopy.log"))))

    def target(self):
        return {"ioengine": "nbd", "uri": "nbd+unix:///?socket=%s" % self.socket_path}


class NbdkitTmpfs(System):
    """nbdkit file on a tmpfs copy of the data: no cache and no delay, the protocol limit."""

    name = "nbdkit-tmpfs"

    def __init__(self, ctx, directory):
        super().__init__(ctx, directory)
        self.shm_dir = None
        self.path = None

    def setup(self):
        self.shm_dir = tempfile.mkdtemp(prefix="larch-bench.", dir=self.ctx.tmpfs_dir)
        path = os.path.join(self.shm_dir, "data.img")
        if self.ctx.fresh_backing:
            with open(path, "wb") as file:
                file.truncate(self.ctx.backing_bytes)
        else:
            copy_prefix(self.ctx.backing, path, self.ctx.backing_bytes)
        self.commands.append(["# %s: the first %d bytes of the backing file" % (path, self.ctx.backing_bytes)])
        self.path = path

    def start(self):
        argv = ["nbdkit", "-f", "-U", self.socket_path, "file", self.path]
        self.commands.append(argv)
        self.server = Server(argv, os.path.join(self.dir, "nbdkit.log"))
        self.server.wait_listening(self.socket_path)

    def target(self):
        return {"ioengine": "nbd", "uri": "nbd+unix:///?socket=%s" % self.socket_path}

    def cleanup(self):
        if self.shm_dir:
            shutil.rmtree(self.shm_dir, ignore_errors=True)
            self.shm_dir = None


class NbdkitBacking(System):
    """nbdkit file over the delay filter, no cache: the backing store alone."""

    name = "nbdkit-backing"

    def start(self):
        scale = self.ctx.scale
        argv = [
            "nbdkit", "-f", "-U", self.socket_path, "--filter=delay", "file", self.ctx.backing,
            "rdelay=%dms" % scale.read_latency_ms, "wdelay=%dms" % scale.write_latency_ms,
        ]
        self.commands.append(argv)
        self.server = Server(argv, os.path.join(self.dir, "nbdkit.log"))
        self.server.wait_listening(self.socket_path)

    def target(self):
        return {"ioengine": "nbd", "uri": "nbd+unix:///?socket=%s" % self.socket_path}


class Device(System):
    """fio directly on a file (io_uring, O_DIRECT): nothing to start."""

    name = "fio-device"

    def __init__(self, ctx, directory, path):
        super().__init__(ctx, directory)
        self.path = path

    def start(self):
        if not self.path or not os.path.exists(self.path):
            raise SetupError("no cache device file to read (did larch-l2 run in this workload?)")

    def target(self):
        return {"ioengine": "io_uring", "direct": 1, "filename": self.path}


class QemuNbdDevice(System):
    """qemu-nbd serving the cache device file read-only, with O_DIRECT (--cache=none) and
    io_uring: what the NBD path to the device gives with nothing in between."""

    name = "qemu-nbd-device"

    def __init__(self, ctx, directory, path):
        super().__init__(ctx, directory)
        self.path = path

    def argv(self):
        # --shared: qemu-nbd serves one client at a time by default; fio opens a
        # connection per job (up to 64 in the scaling workload).
        return ["qemu-nbd", "--read-only", "--format=raw", "--cache=none", "--aio=io_uring",
                "--shared=64", "--persistent", "--socket=%s" % self.socket_path, self.path]

    def start(self):
        if not self.path or not os.path.exists(self.path):
            raise SetupError("no cache device file to serve (did larch-l2 run in this workload?)")
        argv = self.argv()
        self.commands.append(argv)
        self.server = Server(argv, os.path.join(self.dir, "qemu-nbd.log"))
        self.server.wait_listening(self.socket_path)

    def target(self):
        return {"ioengine": "nbd", "uri": "nbd+unix:///?socket=%s" % self.socket_path}


class Context:
    """What a system needs from the run: binaries, sizes, the backing file of its workload."""

    def __init__(self, larch_bin, scale, backing, backing_bytes, fresh_backing, tmpfs_dir="/dev/shm", tunables=()):
        self.larch_bin = larch_bin
        # NAME=VALUE tunables every larch pool gets (`larch set`) before it serves.
        self.tunables = list(tunables)
        self.scale = scale
        self.backing = backing
        self.backing_bytes = backing_bytes
        self.fresh_backing = fresh_backing
        self.tmpfs_dir = tmpfs_dir if os.path.isdir(tmpfs_dir) else tempfile.gettempdir()


def make(name, ctx, directory, device_path=None, prefill_cache=False):
    """The system called `name`; raises ValueError for an unknown name."""
    if name == "larch-arc":
        return Larch(ctx, directory, name)
    if name == "larch-l2":
        return Larch(ctx, directory, name, l2=True, prefill_cache=prefill_cache)
    if name == "larch-log":
        return Larch(ctx, directory, name, log=True)
    if name == "nbdkit-cache":
        return NbdkitCache(ctx, directory)
    if name == "nbdkit-cache-capped":
        return NbdkitCacheCapped(ctx, directory)
    if name == "nbdkit-memory":
        return NbdkitMemory(ctx, directory)
    if name == "nbdkit-tmpfs":
        return NbdkitTmpfs(ctx, directory)
    if name == "nbdkit-backing":
        return NbdkitBacking(ctx, directory)
    if name == "fio-device":
        return Device(ctx, directory, device_path)
    if name == "qemu-nbd-device":
        return QemuNbdDevice(ctx, directory, device_path)
    raise ValueError("unknown system %r; known: %s" % (name, ", ".join(LABELS)))


def fill_random(path, size, seed):
    """Write `size` pseudo-random bytes (fast, reproducible; not for cryptography)."""
    generator = random.Random(seed)
    chunk = 4 * 1024 * 1024
    with open(path, "wb") as file:
        left = size
        while left > 0:
            n = min(chunk, left)
            file.write(generator.randbytes(n))
            left -= n


def copy_prefix(source, destination, size):
    with open(source, "rb") as src, open(destination, "wb") as dst:
        left = size
        while left > 0:
            block = src.read(min(4 * 1024 * 1024, left))
            if not block:
                break
            dst.write(block)
            left -= len(block)
