#!/bin/sh
# Preprocessing throughput, Trestle vs Hugging Face tokenizers, same corpus and thread count.
# usage: bench/preprocess_bench.sh BUILD_DIR [THREADS] [REPEAT]   (needs python3 with tokenizers)
# The corpus is tests/data/tokenizer/corpus.jsonl repeated REPEAT times (default 10, ~11.5 MB);
# the tokenizer is the Llama-3-style tokenizer.json fixture. Not part of ctest.
set -e
BUILD=${1:?build dir}; THREADS=${2:-2}; REPEAT=${3:-10}
SRC=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
i=0; while [ $i -lt "$REPEAT" ]; do cat "$SRC/tests/data/tokenizer/corpus.jsonl"; i=$((i+1)); done > "$TMP/c.jsonl"
MB=$(python3 -c "import json,sys; print(sum(len(json.loads(l)['text'].encode()) for l in open(sys.argv[1]))/1e6)" "$TMP/c.jsonl")
echo "corpus: $MB MB of text, $THREADS threads"
"$BUILD/preprocess_data" --input "$TMP/c.jsonl" --output-prefix "$TMP/out" --json-keys text \
  --tokenizer-type hf --tokenizer-model "$SRC/tests/data/tokenizer/llama3" --workers "$THREADS" \
  --append-eod 2>&1 | tail -1 | sed 's/^/trestle preprocess_data: /'
RAYON_NUM_THREADS=$THREADS python3 - "$TMP/c.jsonl" "$SRC/tests/data/tokenizer/llama3/tokenizer.json" <<'PY'
import json, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[2])
t0 = time.time()
texts = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
n = sum(len(t.encode()) for t in texts)
ids = tok.encode_batch(texts, add_special_tokens=False)
dt = time.time() - t0
print(f"HF tokenizers (json load + encode_batch, no file writing): {n/1e6:.1f} MB in {dt:.2f} s ({n/1e6/dt:.2f} MB/s)")
PY
