#!/usr/bin/python3
"""Writer and checker for the kill -9 crash test of larch's write path.

write URI DIR CONNS SEED BLOCKS BLOCK_BYTES
    One thread per connection writes versions of its own blocks (block % CONNS ==
    thread) with a mix of plain (async) writes, FUA writes, zeroings (TRIM, WRITE_ZEROES
    with and without NO_HOLE, some FUA: a version that reads as zeros) and FLUSHes, until
    the server goes away. Each thread appends "block version" to DIR/durable-THREAD for
    every write that is durable by the NBD contract: a FUA write once it is answered, a
    plain write once a later FLUSH on any connection is answered (multi-conn), and
    "Z block version" for a zeroing before it is sent. Lines are written with os.write as
    soon as they are known, so they survive the server's crash.

check URI DIR CONNS SEED BLOCKS BLOCK_BYTES
    Reads every block back. Each must hold a whole version of that block that is not
    older than its last durable version, or zeros if it was never durably written or a
    zeroing of it was sent after its last durable version. Prints one line per violation
    and exits 1 if there is any.
"""

import os
import random
import struct
import sys
import threading

import nbd

MAGIC = b"LARCHCRASHTEST01"


def contents(seed, block, version, size):
    """Version `version` of `block`: a header, then bytes derived from all three."""
    head = MAGIC + struct.pack("<QQQ", seed, block, version)
    rng = random.Random((seed << 40) ^ (block << 20) ^ version)
    body = rng.randbytes(size - len(head))
    return head + body


def decode(seed, block, data):
    """The version `data` holds, 0 for zeros, None for anything else."""
    if data == bytes(len(data)):
        return 0
    if not data.startswith(MAGIC):
        return None
    s, b, v = struct.unpack_from("<QQQ", data, len(MAGIC))
    if s != seed or b != block or data != contents(seed, block, v, len(data)):
        return None
    return v


def connect(uri):
    h = nbd.NBD()
    h.connect_uri(uri)
    return h


def writer(uri, outdir, thread, conns, seed, blocks, size, flushed, lock):
    rng = random.Random(seed * 1000 + thread)
    mine = [b for b in range(blocks) if b % conns == thread]
    version = {b: 0 for b in mine}
    unflushed = []
    fd = os.open(os.path.join(outdir, "durable-%d" % thread), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        h = connect(uri)
        while True:
            op = rng.random()
            if op < 0.1:
                # A FLUSH: every write answered before it is durable, on every connection.
                with lock:
                    before = list(flushed)
                    flushed.clear()
                h.flush()
                done = before + unflushed
                unflushed = []
                if done:
                    os.write(fd, "".join("%d %d\n" % bv for bv in done).encode())
                continue
            b = rng.choice(mine)
            version[b] += 1
            fua = op < 0.35 or op >= 0.9
            flags = nbd.CMD_FLAG_FUA if fua else 0
            if op >= 0.8:
                # A zeroing: known before it is sent, as it may land even if unanswered.
                os.write(fd, b"Z %d %d\n" % (b, version[b]))
                if op < 0.85:
                    h.trim(size, b * size, flags)
                elif op < 0.875:
                    h.zero(size, b * size, flags | nbd.CMD_FLAG_NO_HOLE)
                else:
                    h.zero(size, b * size, flags)
            else:
                h.pwrite(contents(seed, b, version[b], size), b * size, flags)
            if fua:
                os.write(fd, b"%d %d\n" % (b, version[b]))
            else:
                unflushed.append((b, version[b]))
                # Other threads' FLUSHes cover this write too (multi-conn): share it.
                with lock:
                    flushed.extend(unflushed)
                unflushed = []
    except Exception:
        pass
    finally:
        os.close(fd)


def write(uri, outdir, conns, seed, blocks, size):
    # Writes shared for other connections' FLUSHes: a FLUSH covers what was answered
    # before it was sent, so a thread moves the shared list out under the lock right
    # before sending its FLUSH.
    flushed = []
    lock = threading.Lock()
    threads = [
        threading.Thread(target=writer, args=(uri, outdir, t, conns, seed, blocks, size, flushed, lock))
        for t in range(conns)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def check(uri, outdir, conns, seed, blocks, size):
    durable = {}
    zeroed = set()
    for t in range(conns):
        path = os.path.join(outdir, "durable-%d" % t)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == "Z":
                    zeroed.add((int(parts[1]), int(parts[2])))
                    continue
                if len(parts) != 2:
                    continue  # a line cut by the writer's end
                b, v = int(parts[0]), int(parts[1])
                durable[b] = max(durable.get(b, 0), v)
    h = connect(uri)
    bad = 0
    for b in range(blocks):
        data = h.pread(size, b * size)
        v = decode(seed, b, data)
        want = durable.get(b, 0)
        if v is None:
            print("block %d: not a version of this block" % b)
            bad += 1
        elif v == 0:
            if want > 0 and not any(zb == b and zv >= want for zb, zv in zeroed):
                print("block %d: zeros read, %d was durable and no zeroing followed" % (b, want))
                bad += 1
        elif v < want:
            print("block %d: version %d read, %d was durable" % (b, v, want))
            bad += 1
    h.shutdown()
    print("checked %d blocks, %d with durable writes, %d bad" % (blocks, len(durable), bad))
    return bad


def main():
    mode, uri, outdir = sys.argv[1], sys.argv[2], sys.argv[3]
    conns, seed, blocks, size = (int(x) for x in sys.argv[4:8])
    if mode == "write":
        write(uri, outdir, conns, seed, blocks, size)
    elif mode == "check":
        sys.exit(1 if check(uri, outdir, conns, seed, blocks, size) else 0)
    else:
        sys.exit("unknown mode %r" % mode)


if __name__ == "__main__":
    main()
