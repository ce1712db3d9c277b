# Parallel training throughput on this machine (not a ctest):
#   cmake --build B --target bench_parallel_cpu && mpirun -np 2 B/bench_parallel_cpu
add_executable(bench_parallel_cpu EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/bench/parallel_cpu.c)
target_link_libraries(bench_parallel_cpu PRIVATE trestle_runtime)
