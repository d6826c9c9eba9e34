#!/usr/bin/python3
"""Random reads and writes of every size against an in-memory model of the volume.

run URI IMAGE SEED OPS
    IMAGE holds the volume's bytes before the run. Three connections (threads) each own a
    third of the volume (the thirds do not end on block boundaries, so the connections
    share the blocks where they meet) and issue OPS requests each: writes of 1 byte to
    80 KiB at any offset (a fifth of them FUA), write-zeroes, reads checked against the
    model, and FLUSHes. No FLUSH ends the run: the writes acknowledged last are durable
    only if the server's shutdown makes them so. Writes the model to IMAGE.new.

check URI IMAGE
    Reads the whole volume and compares it with IMAGE.

Prints what differs and exits 1 on any difference.
"""

import random
import sys
import threading

import nbd

SIZES = [1, 7, 512, 600, 4096, 4096, 4096, 5000, 8192, 16384, 20000, 65536, 81920]


def connect(uri):
    h = nbd.NBD()
    h.connect_uri(uri)
    return h


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def worker(uri, model, lo, hi, seed, ops, errors):
    try:
        requests(uri, model, lo, hi, seed, ops, errors)
    except Exception as e:  # noqa: BLE001 - any failure of a request is a failure of the run
        errors.append("connection for %d..%d: %r" % (lo, hi, e))


def requests(uri, model, lo, hi, seed, ops, errors):
    rng = random.Random(seed)
    h = connect(uri)
    try:
        for _ in range(ops):
            op = rng.random()
            size = min(rng.choice(SIZES), hi - lo)
            offset = rng.randrange(lo, hi - size + 1)
            if op < 0.5:
                data = rng.randbytes(size)
                flags = nbd.CMD_FLAG_FUA if rng.random() < 0.2 else 0
                h.pwrite(data, offset, flags)
                model[offset:offset + size] = data
            elif op < 0.55:
                h.zero(size, offset)
                model[offset:offset + size] = bytes(size)
            elif op < 0.9:
                got = h.pread(size, offset)
                want = bytes(model[offset:offset + size])
                if got != want:
                    at = first_difference(got, want)
                    errors.append("read %d+%d differs from the model at byte %d" % (offset, size, offset + at))
                    return
            else:
                h.flush()
    finally:
        h.shutdown()


def run(uri, image, seed, ops):
    with open(image, "rb") as f:
        model = bytearray(f.read())
    size = len(model)
    thirds = [0, size // 3 + 1234, 2 * size // 3 + 777, size]
    errors = []
    threads = [
        threading.Thread(target=worker, args=(uri, model, thirds[i], thirds[i + 1], seed * 10 + i, ops, errors))
        for i in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(image + ".new", "wb") as f:
        f.write(model)
    for e in errors:
        print(e)
    return not errors


def check(uri, image):
    with open(image, "rb") as f:
        want = f.read()
    h = connect(uri)
    got = bytearray()
    chunk = 1 << 20
    for offset in range(0, len(want), chunk):
        got += h.pread(min(chunk, len(want) - offset), offset)
    h.shutdown()
    if got != want:
        at = first_difference(got, want)
        print("the volume differs from the model at byte %d (block of 16K: %d)" % (at, at // 16384))
        return False
    print("checked %d bytes" % len(want))
    return True


def main():
    if sys.argv[1] == "run":
        ok = run(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        ok = check(sys.argv[2], sys.argv[3])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
