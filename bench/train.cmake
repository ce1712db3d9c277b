# Training-step benchmark vs PyTorch eager and the same run's sgemm ceiling (not a ctest):
#   cmake --build B --target bench_train_cpu && B/bench_train_cpu
add_executable(bench_train_cpu EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/bench/train_cpu.c
               ${CMAKE_SOURCE_DIR}/bench/sgemm_ceiling.c ${CMAKE_SOURCE_DIR}/bench/op_profile.c)
target_link_libraries(bench_train_cpu PRIVATE trestle_runtime)
target_compile_definitions(bench_train_cpu PRIVATE TRESTLE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
