# The --print-config dump is a valid --config-file that reproduces the same config: the second
# dump is identical and the fingerprints agree.
. "$(dirname "$0")/lib.sh"

for extra in "" "-tp 2 -gb 64 --lr 0.0001 --save_dir $TMP/ck"; do
    # shellcheck disable=SC2086
    rr --recipe llama32_1b_pretrain --world-size 8 --print-config $extra
    expect_rc 0 "first dump ($extra)"
    cp "$TMP/out" "$TMP/a.yaml"
    rr --recipe llama32_1b_pretrain --world-size 8 --print-config --config-file "$TMP/a.yaml"
    expect_rc 0 "dump fed back ($extra)"
    cp "$TMP/out" "$TMP/b.yaml"
    diff "$TMP/a.yaml" "$TMP/b.yaml" || fail "the dump of the dump differs ($extra)"
    # shellcheck disable=SC2086
    rr --recipe llama32_1b_pretrain --world-size 8 --dry-run $extra
    fp1=$(grep '^fingerprint' "$TMP/out")
    rr --recipe llama32_1b_pretrain --world-size 8 --dry-run --config-file "$TMP/a.yaml"
    fp2=$(grep '^fingerprint' "$TMP/out")
    [ -n "$fp1" ] && [ "$fp1" = "$fp2" ] || fail "fingerprints differ: '$fp1' vs '$fp2'"
done
# A different config has a different fingerprint.
rr --recipe llama32_1b_pretrain --world-size 8 --dry-run -gb 1024
[ "$(grep '^fingerprint' "$TMP/out")" != "$fp2" ] || fail "fingerprint ignores the batch size"
echo OK
