#!/usr/bin/env python3
"""preprocess_data throughput next to the Hugging Face `tokenizers` package in the same run:
the bundled multilingual corpus (tests/data/tokenizer/corpus.jsonl) repeated, encoded with the
GPT-2-style byte-level BPE (vocab.json + merges.txt) and with the Llama-3-style tokenizer.json
fixture, on 1 and 2 workers / threads, every round printed. Trestle's time is the whole
preprocess_data process (JSONL parse, encode, .bin/.idx written); the peer's is JSON parsing plus
`encode_batch` in a fresh process (RAYON_NUM_THREADS set, as the package reads it at start-up),
writing nothing. The token ids of both are checked to be identical. Not a ctest.

    python3 bench/preprocess_throughput.py BUILD_DIR [--repeat 10] [--rounds 2]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOK = os.path.join(SRC, "tests", "data", "tokenizer")

PEER = r"""
import json, sys, time
from tokenizers import Tokenizer, models, pre_tokenizers
kind, corpus, out = sys.argv[1], sys.argv[2], sys.argv[3]
if kind == "gpt2":
    d = sys.argv[4]
    tok = Tokenizer(models.BPE.from_file(d + "/vocab.json", d + "/merges.txt"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
else:
    tok = Tokenizer.from_file(sys.argv[4])
t0 = time.perf_counter()
texts = [json.loads(l)["text"] for l in open(corpus, encoding="utf-8")]
enc = tok.encode_batch(texts, add_special_tokens=False)
dt = time.perf_counter() - t0
with open(out, "w") as f:
    json.dump([e.ids for e in enc], f)
print(dt)
"""

DTYPES = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}


def read_bin(prefix):
    with open(prefix + ".idx", "rb") as f:
        head = f.read(18)
    assert head[:9] == b"MMIDIDX\x00\x00", "not a Megatron .idx"
    code = head[17]
    fmt = DTYPES[code]
    data = open(prefix + ".bin", "rb").read()
    return list(struct.unpack("<%d%s" % (len(data) // struct.calcsize(fmt), fmt), data))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    import tokenizers  # noqa: F401  (fail early when the peer is missing)

    model = open("/proc/cpuinfo").read().split("model name")[1].split(":", 1)[1].split("\n")[0]
    print(f"CPU:{model}; {len(os.sched_getaffinity(0))} CPUs available; tokenizers "
          f"{tokenizers.__version__}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load average {os.getloadavg()[0]:.2f} at start")
    tmp = tempfile.mkdtemp()
    corpus = os.path.join(tmp, "c.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        src = open(os.path.join(TOK, "corpus.jsonl"), encoding="utf-8").read()
        for _ in range(a.repeat):
            f.write(src)
    mb = sum(len(json.loads(l)["text"].encode()) for l in open(corpus, encoding="utf-8")) / 1e6
    print(f"corpus: {mb:.1f} MB of text ({a.repeat} x tests/data/tokenizer/corpus.jsonl)")
    cases = [
        ("gpt2", ["--tokenizer-type", "gpt2", "--vocab-file", os.path.join(TOK, "gpt2", "vocab.json"),
                  "--merge-file", os.path.join(TOK, "gpt2", "merges.txt")], os.path.join(TOK, "gpt2")),
        ("hf", ["--tokenizer-type", "hf", "--tokenizer-model",
                os.path.join(TOK, "llama3", "tokenizer.json")],
         os.path.join(TOK, "llama3", "tokenizer.json")),
    ]
    ok = True
    for kind, args, peer_arg in cases:
        for workers in (1, 2):
            tr, hf = [], []
            for r in range(a.rounds):
                prefix = os.path.join(tmp, f"out_{kind}_{workers}")
                t0 = time.perf_counter()
                subprocess.run([os.path.join(a.build, "preprocess_data"), "--input", corpus,
                                "--output-prefix", prefix, "--json-keys", "text", "--workers",
                                str(workers), "--quiet"] + args, check=True)
                tr.append(time.perf_counter() - t0)
                ids_json = os.path.join(tmp, "peer.json")
                env = dict(os.environ, RAYON_NUM_THREADS=str(workers),
                           TOKENIZERS_PARALLELISM="true")
                out = subprocess.run([sys.executable, "-c", PEER, kind, corpus, ids_json, peer_arg],
                                     check=True, env=env, capture_output=True, text=True)
                hf.append(float(out.stdout.strip().splitlines()[-1]))
                print(f"  {kind:4s} {workers} worker(s) round {r + 1}: trestle {tr[-1]:6.2f} s "
                      f"({mb / tr[-1]:6.2f} MB/s) | tokenizers {hf[-1]:6.2f} s "
                      f"({mb / hf[-1]:6.2f} MB/s) | trestle/tokenizers throughput "
                      f"{hf[-1] / tr[-1]:.2f}x | load {os.getloadavg()[0]:.2f}", flush=True)
                if r == 0:
                    mine = read_bin(prefix + "_text_document")
                    theirs = [i for doc in json.load(open(ids_json)) for i in doc]
                    same = mine == theirs
                    ok &= same
                    print(f"  {kind:4s} {workers} worker(s): {len(mine)} token ids, "
                          f"{'identical' if same else 'DIFFERENT'} to tokenizers'")
            ratios = sorted(h / t for h, t in zip(hf, tr))
            print(f"  {kind:4s} {workers} worker(s): best trestle {mb / min(tr):.2f} MB/s, best "
                  f"tokenizers {mb / min(hf):.2f} MB/s, same-round ratio min {ratios[0]:.2f}x "
                  f"max {ratios[-1]:.2f}x")
    subprocess.run(["rm", "-rf", tmp])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
