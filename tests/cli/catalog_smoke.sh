# The catalog smoke test (tests/cli/catalog_smoke.py): every recipe, shrunk to tiny shapes with
# its feature flags kept, trains 2 iterations on 1 rank and on 2 ranks with its own kind of
# model parallelism (a context-parallel recipe on its own CP size), or --dry-run and the launch refuse it under the same capability rules.
# Prints the table of what trains and what is refused by which rule.
. "$(dirname "$0")/lib.sh"

python3 "$SRC/tests/cli/catalog_smoke.py" "$RR" "$SRC" "$MPIEXEC" "$TMP" || fail "catalog smoke"
echo OK
