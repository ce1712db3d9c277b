# Inputs that are not regular files (a device, a directory, a FIFO nobody writes to) are bad
# input: exit 2 with the path named, before any read could block. The launches initialise MPI,
# hence a test of its own with the MPI environment.
. "$(dirname "$0")/lib.sh"

# Data files that are not regular files are bad input (exit 2, the path named), and a FIFO must
# not block the launch (timeout 60 turns a hang into exit 124).
rr_bounded() { timeout 60 "$RR" "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?; }
mkdir "$TMP/adir"
mkfifo "$TMP/fifo"
for p in /dev/zero "$TMP/adir" "$TMP/fifo"; do
    rr_bounded --recipe llama_tiny_pretrain train.train_iters=1 dataset.type=text \
        "dataset.data_path=$p" validation.eval_iters=0 "logger.output_dir=$TMP/out_dir"
    expect_rc 2 "text data at $p"
    expect_in "$TMP/err" "cannot open $p" "text data at $p names the path"
done
rr_bounded --recipe llama_tiny_pretrain --config-file "$TMP/fifo" --dry-run
expect_rc 2 "--config-file naming a FIFO"
expect_in "$TMP/err" "not a regular file" "--config-file naming a FIFO"
echo OK
