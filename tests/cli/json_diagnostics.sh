# --diagnostics-format json: stdout is one JSON document with ids, keys, hints and origins,
# for a failing config, a usage error and a clean one.
. "$(dirname "$0")/lib.sh"

check_json() { # EXPECTED_ERRORS(>0 or 0) WHAT [keys: errors must name keys]
    python3 - "$1" "$TMP/out" "${3:-}" <<'PY' || { show; fail "$2"; }
import json, sys
want_errors = int(sys.argv[1])
doc = json.load(open(sys.argv[2]))
errs = [g for g in doc["diagnostics"] if g["severity"] == "error"]
assert doc["errors"] == len(errs), doc
if want_errors:
    assert errs, "no error diagnostics"
    for g in errs:
        assert g["id"] and "." in g["id"], g
        assert isinstance(g["keys"], list) and g["message"], g
    if sys.argv[3] == "keys":
        assert any(g["keys"] for g in errs), "no error names its keys"
else:
    assert doc["errors"] == 0, doc
PY
}

rr --recipe llama32_1b_pretrain --dry-run --world-size 3 -tp 2 --diagnostics-format json
expect_rc 2 "invalid layout"
check_json 1 "layout error as JSON" keys
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert any("model.tensor_model_parallel_size" in g["keys"] for g in d["diagnostics"]), d' "$TMP/out" ||
    fail "no diagnostic names model.tensor_model_parallel_size"

rr --recipe llama32_1b_pretrain --dry-run model.num_layerz=4 --diagnostics-format json
expect_rc 2 "unknown key"
check_json 1 "unknown key as JSON" keys
grep -q '"origin": "argv\[4\]' "$TMP/out" || { show; fail "unknown key's origin is not argv[4]"; }

rr --recipe llama32_1b_pretrain --dry-run --bogus-flag --diagnostics-format json
expect_rc 2 "unknown flag"
check_json 1 "usage error as JSON"

rr --recipe llama32_1b_pretrain --dry-run --world-size 8 --diagnostics-format json
expect_rc 0 "valid config"
check_json 0 "clean config as JSON"
expect_in "$TMP/err" "derived values" "the report moves to stderr"
echo OK
