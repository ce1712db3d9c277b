# bench_plan: layouts planned per second on one core (tr_plan_make), next to the validator on the
# same configs: build-dir/bench_plan [--rounds R]. In ctest only its smoke run (no timing claim).
add_executable(bench_plan ${CMAKE_SOURCE_DIR}/bench/plan.c)
target_link_libraries(bench_plan PRIVATE trestle_runtime)
add_test(NAME bench_plan_smoke COMMAND bench_plan --smoke)
set_tests_properties(bench_plan_smoke PROPERTIES LABELS "unit" TIMEOUT 60)
