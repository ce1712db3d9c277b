# CPU op micro-benchmark (not a ctest): build with `cmake --build B --target bench_ops_cpu`.
add_executable(bench_ops_cpu EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/bench/ops_cpu.c)
target_link_libraries(bench_ops_cpu PRIVATE trestle_kernels)
