# bench_recompute_memory: the activation arena per rank of llama32_1b-shaped layers at seq 4096
# without recomputation, selective and full, against the bytes expected from the tensors each mode
# keeps (docs/runtime.md, "Recomputation"): build-dir/bench_recompute_memory [--rounds R].
# In ctest only its tiny-shape smoke run (no timing; it fails when measured != expected).
add_executable(bench_recompute_memory ${CMAKE_SOURCE_DIR}/bench/recompute_memory.c)
target_link_libraries(bench_recompute_memory PRIVATE trestle_runtime)
add_test(NAME bench_recompute_memory_smoke COMMAND bench_recompute_memory --smoke)
set_tests_properties(bench_recompute_memory_smoke PROPERTIES LABELS "unit" TIMEOUT 60)
