# bench_ckpt: checkpoint save/load throughput against the disk's sequential write speed measured
# in the same run (not a ctest): build-dir/bench_ckpt --mb 256 --ranks 4 [--dir D]
add_executable(bench_ckpt ${CMAKE_SOURCE_DIR}/bench/ckpt_bench.c)
target_link_libraries(bench_ckpt PRIVATE trestle_runtime Threads::Threads)
