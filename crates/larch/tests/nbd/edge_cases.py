"""Edge cases of larch's NBD server, driven through libnbd with strict mode off.

Run by crates/larch/tests/nbd_clients.rs as
    /usr/bin/python3 edge_cases.py URI CASE...
Each CASE is a function below; the script exits non-zero on the first failure.
"""
import os
import random
import sys

import nbd

MiB = 1 << 20


def connect(uri, structured=True, base_allocation=True, strict=False):
    h = nbd.NBD()
    if not strict:
        h.set_strict_mode(0)
    if not structured:
        h.set_request_structured_replies(False)
    if base_allocation:
        h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(uri)
    return h


def expect_errno(name, fn, *args):
    try:
        fn(*args)
    except nbd.Error as e:
        assert e.errno == name, f"expected {name}, got {e.errno}: {e.string}"
        return
    raise AssertionError(f"expected {name}, call succeeded")


def extents_of(h, count, offset, flags=0):
    got = []

    def cb(ctx, off, entries, err):
        assert ctx == nbd.CONTEXT_BASE_ALLOCATION, ctx
        got.append((off, list(entries)))
        return 0

    h.block_status(count, offset, cb, flags)
    assert len(got) == 1, got
    return got[0][1]


def info_equals_go(uri):
    """NBD_OPT_INFO must describe the export exactly as NBD_OPT_GO does."""
    h = nbd.NBD()
    h.set_opt_mode(True)
    h.set_full_info(True)
    h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(uri)
    names = []
    h.opt_list(lambda name, desc: names.append((name, desc)) or 0)
    assert len(names) == 1, names
    h.opt_info()
    before = (h.get_size(), h.is_read_only(), h.can_flush(), h.can_fua(), h.can_trim(),
              h.can_zero(), h.can_fast_zero(), h.can_df(), h.can_multi_conn(), h.can_cache(),
              h.get_block_size(nbd.SIZE_MINIMUM), h.get_block_size(nbd.SIZE_PREFERRED),
              h.get_block_size(nbd.SIZE_MAXIMUM), h.get_export_description())
    h.opt_go()
    after = (h.get_size(), h.is_read_only(), h.can_flush(), h.can_fua(), h.can_trim(),
             h.can_zero(), h.can_fast_zero(), h.can_df(), h.can_multi_conn(), h.can_cache(),
             h.get_block_size(nbd.SIZE_MINIMUM), h.get_block_size(nbd.SIZE_PREFERRED),
             h.get_block_size(nbd.SIZE_MAXIMUM), h.get_export_description())
    assert before == after, (before, after)
    assert h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.shutdown()


def basic_io(uri):
    """Round trips at odd offsets, zero-length requests, and reads past the end."""
    h = connect(uri)
    size = h.get_size()
    data = os.urandom(12345)
    h.pwrite(data, 7777)
    assert h.pread(12345, 7777) == data
    assert h.pread(0, 0) == b""
    assert h.pread(0, size) == b""
    h.pwrite(b"", 100)
    h.trim(0, 0)
    h.zero(0, 0)
    expect_errno("EINVAL", h.pread, 1, size)
    expect_errno("EINVAL", h.pread, 4096, size - 100)
    expect_errno("ENOSPC", h.pwrite, b"x" * 200, size - 100)
    expect_errno("ENOSPC", h.zero, 200, size - 100)
    expect_errno("EINVAL", h.trim, 200, size - 100)
    # The connection survives every error above.
    assert h.pread(12345, 7777) == data
    h.shutdown()


def simple_replies(uri):
    """Without structured replies: data and errors as simple replies."""
    h = connect(uri, structured=False, base_allocation=False)
    assert not h.get_structured_replies_negotiated()
    assert not h.can_df()
    data = os.urandom(70000)
    h.pwrite(data, 3)
    assert h.pread(70000, 3) == data
    expect_errno("EINVAL", h.pread, 10, h.get_size())
    assert h.pread(0, 0) == b""
    h.shutdown()


def flags(uri):
    """FUA, DF, unknown flags, FLUSH, CACHE."""
    h = connect(uri)
    assert h.can_fua() and h.can_flush() and h.can_df() and h.can_cache()
    h.pwrite(b"f" * 4096, 0, nbd.CMD_FLAG_FUA)
    h.flush()
    h.flush(nbd.CMD_FLAG_FUA)  # FUA on FLUSH is accepted and ignored
    assert h.pread(4096, 0, nbd.CMD_FLAG_DF) == b"f" * 4096
    assert h.pread(4096, 0, nbd.CMD_FLAG_FUA) == b"f" * 4096
    h.cache(65536, 0)
    expect_errno("EINVAL", h.pread, 4096, 0, 1 << 9)
    expect_errno("EINVAL", h.pwrite, b"x", 0, nbd.CMD_FLAG_REQ_ONE)
    expect_errno("EINVAL", h.pwrite, b"x", 0, nbd.CMD_FLAG_DF)
    # DF on a read that the server holds as data and holes still arrives whole.
    h.zero(65536, 65536)
    h.pwrite(b"d" * 512, 65536 + 4096)
    got = h.pread(65536, 65536, nbd.CMD_FLAG_DF)
    assert got[4096:4608] == b"d" * 512 and got[:4096] == bytes(4096)
    h.shutdown()


def trim_zero_block_status(uri):
    """TRIM punches holes, WRITE_ZEROES ± NO_HOLE/FAST_ZERO, BLOCK_STATUS ± REQ_ONE."""
    h = connect(uri)
    assert h.can_trim() and h.can_zero() and h.can_fast_zero()
    base = 8 * MiB
    h.pwrite(b"a" * MiB, base)
    h.pwrite(b"b" * MiB, base + MiB)
    h.trim(MiB, base)
    assert h.pread(MiB, base) in (b"a" * MiB, bytes(MiB))  # TRIM is advisory
    h.zero(MiB, base + MiB)
    assert h.pread(MiB, base + MiB) == bytes(MiB)
    h.pwrite(b"c" * 4096, base + 2 * MiB)
    h.zero(4096, base + 2 * MiB, nbd.CMD_FLAG_NO_HOLE)
    assert h.pread(4096, base + 2 * MiB) == bytes(4096)
    h.pwrite(b"e" * 4096, base + 3 * MiB)
    try:
        h.zero(4096, base + 3 * MiB, nbd.CMD_FLAG_FAST_ZERO)
        assert h.pread(4096, base + 3 * MiB) == bytes(4096)
    except nbd.Error as e:
        # Allowed: the server may refuse fast zeroing, but must not have written.
        assert e.errno == "ENOTSUP", e.errno
        assert h.pread(4096, base + 3 * MiB) == b"e" * 4096
    h.zero(4096, base + 3 * MiB, nbd.CMD_FLAG_FUA)
    assert h.pread(4096, base + 3 * MiB) == bytes(4096)

    # Block status: data then hole at a region we control.
    region = 16 * MiB
    h.trim(2 * MiB, region)
    h.pwrite(b"z" * MiB, region)
    ents = extents_of(h, 2 * MiB, region)
    assert len(ents) % 2 == 0 and ents, ents
    covered = sum(ents[0::2])
    assert 0 < covered <= 2 * MiB, ents
    assert ents[0] >= MiB and ents[1] & 1 == 0, f"first MiB is data: {ents}"
    one = extents_of(h, 2 * MiB, region, nbd.CMD_FLAG_REQ_ONE)
    assert len(one) == 2 and 0 < one[0] <= 2 * MiB, one
    expect_errno("EINVAL", extents_of, h, 4096, h.get_size())
    h.shutdown()


def many_in_flight(uri):
    """Hundreds of aio requests in flight, completing in any order, cookies matched."""
    h = connect(uri)
    rnd = random.Random(42)
    base = 24 * MiB
    blocks = {}
    cookies = {}
    for i in range(256):
        data = bytes([i % 251 + 1]) * 4096 + os.urandom(rnd.randrange(0, 4096))
        off = base + i * 16384
        blocks[off] = data
        c = h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(data)), off)
        cookies[c] = off
    while h.aio_in_flight() > 0:
        h.poll(-1)
    for c in cookies:
        assert h.aio_command_completed(c)
    reads = {}
    for off, data in blocks.items():
        buf = nbd.Buffer(len(data))
        reads[h.aio_pread(buf, off)] = (buf, off)
    while h.aio_in_flight() > 0:
        h.poll(-1)
    for c, (buf, off) in reads.items():
        assert h.aio_command_completed(c)
        assert bytes(buf.to_bytearray()) == blocks[off], off
    h.shutdown()


def misaligned(uri):
    """With --min-block-size 512 advertised, misaligned requests are EINVAL."""
    h = connect(uri)
    assert h.get_block_size(nbd.SIZE_MINIMUM) == 512
    expect_errno("EINVAL", h.pread, 512, 1)
    expect_errno("EINVAL", h.pread, 100, 0)
    expect_errno("EINVAL", h.pwrite, b"x" * 100, 0)
    h.pwrite(b"y" * 1024, 512)
    assert h.pread(1024, 512) == b"y" * 1024
    h.shutdown()


def read_only(uri):
    """A read-only export: EPERM for writes, the payload consumed, the connection alive."""
    h = connect(uri)
    assert h.is_read_only()
    assert not h.can_trim() and not h.can_zero()
    before = h.pread(65536, 0)
    expect_errno("EPERM", h.pwrite, b"w" * 65536, 0)
    expect_errno("EPERM", h.pwrite, b"w" * 100, 0, nbd.CMD_FLAG_FUA)
    expect_errno("EPERM", h.trim, 4096, 0)
    expect_errno("EPERM", h.zero, 4096, 0)
    assert h.pread(65536, 0) == before
    h.flush()
    h.shutdown()


def multi_conn(uri):
    """Write on one connection, FLUSH on another, read on a third."""
    a, b, c = connect(uri), connect(uri), connect(uri)
    assert a.can_multi_conn()
    data = os.urandom(8192)
    a.pwrite(data, 40 * MiB)
    b.flush()
    assert c.pread(8192, 40 * MiB) == data
    for h in (a, b, c):
        h.shutdown()


def stdio(cmd):
    """`larch serve-file --stdio` spoken to over a pipe (nbd_connect_command)."""
    h = nbd.NBD()
    h.connect_command(cmd.split("\x1f"))
    h.pwrite(b"s" * 512, 0)
    assert h.pread(512, 0) == b"s" * 512
    h.shutdown()


def shutdown_wait(uri):
    """Connects, says so, waits for the test to signal the server, then expects
    ESHUTDOWN (or a closed connection once the grace period is over)."""
    h = connect(uri)
    h.pwrite(b"q" * 4096, 0)
    print("connected", flush=True)
    sys.stdin.readline()
    try:
        h.pread(4096, 0)
    except nbd.Error as e:
        print("error", e.errno, flush=True)
        return
    raise AssertionError("read succeeded during shutdown")


if __name__ == "__main__":
    target = sys.argv[1]
    for name in sys.argv[2:]:
        globals()[name](target)
        print("ok", name, flush=True)
