# --dry-run --print-groups --world-size 8 with TP 2, PP 2, CP 2 prints every group; the
# expected groups follow from the rank order tp-cp-ep-dp-pp (TP fastest), worked out here.
# The runtime trains CP 2 over the p2p ring, so the plain dry run accepts it; an exchange it has
# not built (a2a+p2p) is refused under its rule; --config-only checks Megatron's rules alone and
# prints the layout.
. "$(dirname "$0")/lib.sh"

rr --recipe llama32_1b_pretrain --dry-run --print-groups --world-size 8 -tp 2 -pp 2 -cp 2
expect_rc 0 "CP 2 in a dry run"
rr --recipe llama32_1b_pretrain --dry-run --print-groups --world-size 8 -tp 2 -pp 2 -cp 2 \
    "model.cp_comm_type=[a2a+p2p]" "model.hierarchical_context_parallel_sizes=[2,1]"
expect_rc 2 "CP 2 over a2a+p2p in a dry run"
expect_in "$TMP/err" "error [runtime.context_parallel]" "the capability rule"
rr --recipe llama32_1b_pretrain --dry-run --config-only --print-groups --world-size 8 -tp 2 -pp 2 -cp 2
expect_rc 0 "print groups"
group_line() { grep -E "^ +$1 " "$TMP/out" | head -1; }
# rank = tp + 2*cp + 4*pp (DP is 1)
for spec in "tp:[0,1] [2,3] [4,5] [6,7]" "cp:[0,2] [1,3] [4,6] [5,7]" "pp:[0,4] [1,5] [2,6] [3,7]" \
            "dp:[0] [1] [2] [3] [4] [5] [6] [7]" "tp-cp:[0,1,2,3] [4,5,6,7]"; do
    kind=${spec%%:*}
    groups=${spec#*:}
    line=$(group_line "$kind")
    [ -n "$line" ] || { show; fail "no line for $kind groups"; }
    case "$line" in
    *"$groups"*) ;;
    *) fail "$kind groups: '$line', expected '$groups'" ;;
    esac
done
expect_in "$TMP/out" "TP 2 x CP 2 x DP 1 x PP 2" "banner"
# Without --print-groups the groups are not printed.
rr --recipe llama32_1b_pretrain --dry-run --config-only --world-size 8 -tp 2 -pp 2 -cp 2
expect_rc 0 "config-only dry run"
[ -z "$(group_line tp-cp)" ] || fail "groups printed without --print-groups"
echo OK
