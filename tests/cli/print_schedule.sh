# --dry-run --print-schedule: every pipeline rank's action list for one iteration, the static
# pairing/deadlock check and the bubble; the check also runs in every plain dry run.
. "$(dirname "$0")/lib.sh"
args=(--recipe llama_tiny_pretrain --dry-run --world-size 2 -pp 2 -vp 2 -gb 8 -mb 2
      model.num_layers=4)

rr "${args[@]}" --print-schedule
expect_rc 0 "print the schedule"
expect_in "$TMP/out" "pipeline schedule: interleaved 1F1B, PP=2 VPP=2 microbatches=4" "schedule kind"
expect_in "$TMP/out" "static check: passed" "the static check"
# (p-1)/(v*m) = 1/(2*4)
expect_in "$TMP/out" "expected (p-1)/(v*m) = 0.1250" "the bubble"
[ "$(grep -c '^pp rank [01]: ' "$TMP/out")" -eq 2 ] || { show; fail "one list per pp rank"; }
# Each rank runs one forward and one backward per (microbatch, chunk): 4 x 2 of each.
for r in 0 1; do
    n_fwd=$(awk -v r="$r" '/^pp rank /{cur=$3} cur==r":" && $2=="FWD"' "$TMP/out" | wc -l)
    n_bwd=$(awk -v r="$r" '/^pp rank /{cur=$3} cur==r":" && $2=="BWD"' "$TMP/out" | wc -l)
    [ "$n_fwd" -eq 8 ] && [ "$n_bwd" -eq 8 ] || { show; fail "rank $r: $n_fwd FWD, $n_bwd BWD"; }
done

rr --recipe llama_tiny_pretrain --print-schedule
expect_rc 2 "--print-schedule needs --dry-run"
expect_in "$TMP/err" "cli.needs_dry_run" "the error id"
echo OK
