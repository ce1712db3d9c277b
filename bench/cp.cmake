# bench_cp_memory: each rank's activation peak training llama_tiny_pretrain at seq 8192 with
# CP 1, 2 and 4 (cpu-strict device counts the buffers), against CP 1 in the same run:
#   mpirun -np 4 B/bench_cp_memory [--seq N]. In ctest only a small-sequence smoke run.
add_executable(bench_cp_memory ${CMAKE_SOURCE_DIR}/bench/cp_memory.c)
target_link_libraries(bench_cp_memory PRIVATE trestle_runtime)
tr_mpirun_test(bench_cp_memory_smoke 4 bench_cp_memory --seq 512)
