# MoE training-step benchmark against the dense model of the same active parameters (not a ctest):
#   cmake --build B --target bench_moe_cpu && B/bench_moe_cpu [--rounds R] [--steps N]
add_executable(bench_moe_cpu EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/bench/moe_cpu.c)
target_link_libraries(bench_moe_cpu PRIVATE trestle_runtime)
