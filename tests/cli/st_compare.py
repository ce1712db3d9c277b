"""Compares two safetensors files tensor by tensor (dtype, shape, bytes) with the standard
library only. Usage: st_compare.py A B [--differ NAME_PART...]: without --differ every tensor of
A must be in B, byte-identical, and B has no other; with it, a tensor whose name contains one of
the parts must differ and every other must be identical. Prints what differs; exit 1 if wrong."""
import json
import struct
import sys


def tensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8 : 8 + n])
    head.pop("__metadata__", None)
    base = 8 + n
    return {k: (v["dtype"], v["shape"], raw[base + v["data_offsets"][0] : base + v["data_offsets"][1]]) for k, v in head.items()}


def main(argv):
    a, b = tensors(argv[1]), tensors(argv[2])
    differ = argv[argv.index("--differ") + 1 :] if "--differ" in argv else []
    bad = 0
    if set(a) != set(b):
        print(f"names differ: only in A {sorted(set(a) - set(b))}, only in B {sorted(set(b) - set(a))}")
        bad += 1
    for k in sorted(set(a) & set(b)):
        same = a[k] == b[k]
        want = not any(p in k for p in differ)
        if same != want:
            print(f"{k}: {'identical' if same else 'differs'}, expected the opposite")
            bad += 1
    print(f"{len(a)} tensors compared, {bad} wrong")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
