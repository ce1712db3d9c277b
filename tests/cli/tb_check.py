"""Reads a run's TensorBoard events back with the `tensorboard` package and compares them with
its metrics.jsonl. Usage: tb_check.py EVENT_DIR METRICS_JSONL INTERVAL EXPECT_TAGS ABSENT_TAGS
(tags comma-separated). Exit 77 (skipped) when the package is missing."""
import glob
import json
import math
import os
import struct
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("SKIP: the tensorboard Python package is not installed (pip install tensorboard)")
    sys.exit(77)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def check_framing(path):
    """Every record's length and payload CRCs, computed here independently of both writers."""
    raw = open(path, "rb").read()
    at, n = 0, 0
    while at < len(raw):
        (length,) = struct.unpack_from("<Q", raw, at)
        (len_crc,) = struct.unpack_from("<I", raw, at + 8)
        assert len_crc == masked(raw[at:at + 8]), f"record {n}: length CRC"
        payload = raw[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack_from("<I", raw, at + 12 + length)
        assert data_crc == masked(payload), f"record {n}: payload CRC"
        at += 16 + length
        n += 1
    assert at == len(raw), "trailing bytes"
    return n


def close(a, b):
    return math.isclose(a, b, rel_tol=2e-7, abs_tol=1e-30)


def main():
    event_dir, metrics_path, interval = sys.argv[1], sys.argv[2], int(sys.argv[3])
    expect = [t for t in sys.argv[4].split(",") if t]
    absent = [t for t in sys.argv[5].split(",") if t] if len(sys.argv) > 5 else []
    files = glob.glob(os.path.join(event_dir, "events.out.tfevents.*"))
    assert len(files) == 1, f"expected one event file, found {files}"
    host = os.uname().nodename
    assert os.path.basename(files[0]).endswith("." + host), files[0]
    records = check_framing(files[0])
    acc = EventAccumulator(event_dir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for t in expect:
        assert t in tags, f"tag {t!r} missing; have {sorted(tags)}"
    for t in absent:
        assert t not in tags, f"tag {t!r} written although switched off"
    scalars = {t: {e.step: e.value for e in acc.Scalars(t)} for t in tags}
    train = [json.loads(l) for l in open(metrics_path) if '"type":"train"' in l]
    evals = [json.loads(l) for l in open(metrics_path) if '"type":"eval"' in l]
    compared = 0
    for r in train:
        it = r["iteration"]
        if it % interval:
            assert it not in scalars["lm loss"], f"iteration {it} is off the interval"
            continue
        for tag, key in (("lm loss", "loss"), ("learning-rate", "lr"), ("grad-norm", "grad_norm")):
            got = scalars[tag].get(it)
            assert got is not None, f"{tag} at iteration {it} missing"
            assert close(got, r[key]), f"{tag} at {it}: {got} vs metrics {r[key]}"
            compared += 1
        for tag in ("load_balancing_loss", "z_loss"):  # MoE balance, when asked for
            if tag not in expect:
                continue
            got = scalars[tag].get(it)
            assert got is not None and close(got, r[tag]), f"{tag} at {it}: {got} vs {r.get(tag)}"
            compared += 1
    for r in evals:
        got = scalars["lm loss validation"].get(r["iteration"])
        assert got is not None and close(got, r["loss"]), f"validation at {r['iteration']}"
        if "lm loss validation ppl" in expect:
            ppl = scalars["lm loss validation ppl"][r["iteration"]]
            assert close(ppl, r["ppl"]), f"validation ppl at {r['iteration']}"
        compared += 1
    steps = sorted(scalars["lm loss"])
    assert steps == [r["iteration"] for r in train if r["iteration"] % interval == 0], steps
    print(f"{records} records, {len(tags)} tags, {compared} values equal to metrics.jsonl")


main()
