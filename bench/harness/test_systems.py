"""The pieces of the systems that need no server: the capped nbdkit's cgroup (against a
directory standing in for the cgroup-v1 memory hierarchy) and the command that joins it,
memory.stat and the report's sentence on it, and waiting for a fresh status.json."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import systems, workloads  # noqa: E402

MiB = 1024 * 1024


def context():
    return systems.Context("/bin/larch", workloads.QUICK, "/tmp/data.img", 8 * MiB, False)


class CgroupCommand(unittest.TestCase):
    def test_the_shell_joins_then_execs_and_runs_nothing_if_it_cannot_join(self):
        argv = systems.cgroup_command("/sys/fs/cgroup/memory/x/cgroup.procs", ["nbdkit", "-f", "memory", "1M"])
        self.assertEqual(argv[:3], ["sh", "-c", 'echo $$ > "$0" && exec "$@"'])
        self.assertEqual(argv[3:], ["/sys/fs/cgroup/memory/x/cgroup.procs", "nbdkit", "-f", "memory", "1M"])

    def test_the_shell_really_does_so(self):
        with tempfile.TemporaryDirectory() as directory:
            procs = os.path.join(directory, "cgroup.procs")
            argv = systems.cgroup_command(procs, ["sh", "-c", "echo $$"])
            out = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
            with open(procs, encoding="utf-8") as file:
                self.assertEqual(file.read().strip(), out)  # exec kept the pid it wrote
            missing = systems.cgroup_command(os.path.join(directory, "no", "cgroup.procs"), ["echo", "ran"])
            done = subprocess.run(missing, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.assertNotEqual(done.returncode, 0)
            self.assertEqual(done.stdout, "")


class CappedSetup(unittest.TestCase):
    def test_makes_the_cgroup_with_the_arc_plus_the_allowance(self):
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as directory:
            system = systems.NbdkitCacheCapped(context(), os.path.join(directory, "l2-warmup-nbdkit-cache-capped"),
                                               cgroup_root=root)
            system.setup()
            self.assertTrue(system.cgroup.startswith(root + "/larch-bench."))
            with open(os.path.join(system.cgroup, "memory.limit_in_bytes"), encoding="utf-8") as file:
                limit = int(file.read())
            self.assertEqual(limit, workloads.QUICK.arc_bytes + systems.NBDKIT_ALLOWANCE_BYTES)
            self.assertEqual(system.limit_bytes, limit)
            self.assertIn(["mkdir", system.cgroup], system.commands)
            argv, env = system._argv_env(["nbdkit", "-f"], {"TMPDIR": "/x"})
            self.assertEqual(argv[-2:], ["nbdkit", "-f"])
            self.assertEqual(argv[3], os.path.join(system.cgroup, "cgroup.procs"))
            self.assertEqual(env, {"TMPDIR": "/x"})

    def test_no_cgroup_hierarchy_is_a_setup_error_saying_it_did_not_run(self):
        with tempfile.TemporaryDirectory() as directory:
            system = systems.NbdkitCacheCapped(context(), os.path.join(directory, "w"),
                                               cgroup_root=os.path.join(directory, "no-such-hierarchy"))
            with self.assertRaises(systems.SetupError) as caught:
                system.setup()
            self.assertIn("not run", str(caught.exception))
            self.assertIsNone(system.cgroup)
            system.cleanup()  # nothing to remove

    def test_cleanup_removes_an_empty_cgroup(self):
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as directory:
            system = systems.NbdkitCacheCapped(context(), os.path.join(directory, "w"), cgroup_root=root)
            system.cgroup = os.path.join(root, "larch-bench.1.w")
            os.mkdir(system.cgroup)
            system.cleanup()
            self.assertFalse(os.path.exists(os.path.join(root, "larch-bench.1.w")))
            self.assertIsNone(system.cgroup)

    def test_made_by_name(self):
        with tempfile.TemporaryDirectory() as directory:
            self.assertIsInstance(systems.make("nbdkit-cache-capped", context(), directory), systems.NbdkitCacheCapped)
            self.assertIsInstance(systems.make("nbdkit-memory", context(), directory), systems.NbdkitMemory)
            self.assertIsInstance(systems.make("nbdkit-backing", context(), directory), systems.NbdkitBacking)
        for name in ("nbdkit-cache-capped", "nbdkit-memory", "nbdkit-backing"):
            self.assertIn(name, systems.NBDKIT_SYSTEMS)
            self.assertIn(name, systems.LABELS)


class QemuNbdDeviceSystem(unittest.TestCase):
    def test_serves_the_cache_file_read_only_without_the_page_cache(self):
        with tempfile.TemporaryDirectory() as directory:
            system = systems.make("qemu-nbd-device", context(), directory, device_path="/x/cache.img")
            self.assertIsInstance(system, systems.QemuNbdDevice)
            argv = system.argv()
            for flag in ("--read-only", "--format=raw", "--cache=none", "--aio=io_uring"):
                self.assertIn(flag, argv)
            self.assertEqual(argv[-1], "/x/cache.img")
            self.assertIn("--socket=%s" % system.socket_path, argv)
            self.assertIn("qemu-nbd-device", systems.DEVICE_LIMITS)
            self.assertIn("qemu-nbd-device", systems.LABELS)

    def test_without_a_cache_file_it_does_not_run(self):
        with tempfile.TemporaryDirectory() as directory:
            system = systems.make("qemu-nbd-device", context(), directory, device_path=None)
            with self.assertRaises(systems.SetupError):
                system.start()

    @unittest.skipIf(shutil.which("qemu-nbd") is None, "qemu-nbd is not installed")
    def test_really_serves_the_file(self):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "cache.img")
            with open(path, "wb") as file:
                file.write(os.urandom(1 << 20))
            system = systems.make("qemu-nbd-device", context(), directory, device_path=path)
            try:
                system.start()
                self.assertTrue(os.path.exists(system.socket_path))
            finally:
                system.stop()
            with open(path, "rb") as file:
                self.assertEqual(len(file.read()), 1 << 20)


class MemoryStat(unittest.TestCase):
    STAT = "cache 42835968\nrss 2879488\nrss_huge 0\nmapped_file 77824\nhierarchical_memory_limit 50331648\nbad line x\n"

    def test_parse(self):
        stat = systems.parse_memory_stat(self.STAT)
        self.assertEqual(stat["cache"], 42835968)
        self.assertEqual(stat["rss"], 2879488)
        self.assertEqual(stat["hierarchical_memory_limit"], 50331648)
        self.assertNotIn("bad", stat)

    def test_note(self):
        note = systems.capped_note(48 * MiB, 16 * MiB, 32 * MiB, 10 * MiB, systems.parse_memory_stat(self.STAT),
                                   1658880, 1070410)
        self.assertTrue(note.startswith("its memory cgroup's limit (memory.limit_in_bytes, which counts the page "
                                        "cache) was 48.0 MiB: the ARC's 16.0 MiB plus 32.0 MiB for nbdkit itself; "))
        self.assertIn("a peak RSS of 10.0 MiB (VmHWM, its libraries included)", note)
        self.assertIn("2.7 MiB of anonymous memory at the end", note)
        self.assertIn("1.6 MiB of kernel memory at most", note)
        self.assertIn("the cgroup's page cache (its cache file's, and backing file pages it read first) was "
                      "40.9 MiB at the end", note)
        self.assertTrue(note.endswith("hit the limit 1,070,410 times (memory.failcnt; each time the kernel "
                                      "reclaimed)."))

    def test_note_without_measurements(self):
        note = systems.capped_note(48 * MiB, 16 * MiB, 32 * MiB, None, {}, None, None)
        self.assertTrue(note.endswith("plus 32.0 MiB for nbdkit itself."))


class FreshStatus(unittest.TestCase):
    def test_written_after(self):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "status.json")
            self.assertFalse(systems._wait_written(path, 0.0, timeout_s=0))
            with open(path, "w", encoding="utf-8") as file:
                file.write("{}")
            self.assertTrue(systems._wait_written(path, os.stat(path).st_mtime, timeout_s=0))
            self.assertFalse(systems._wait_written(path, time.time() + 3600, timeout_s=0))


if __name__ == "__main__":
    unittest.main()
