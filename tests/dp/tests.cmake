# Data parallelism on real ranks (mpirun, oversubscribed): DDP and the distributed optimizer
# against single-process references, byte counters, overlap and error paths.
add_executable(dp_check ${CMAKE_SOURCE_DIR}/tests/dp/dp_check.c)
target_link_libraries(dp_check PRIVATE trestle_runtime)

set(TR_DP_MPIRUN ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe ${MPIEXEC_NUMPROC_FLAG})
# Open MPI's unloaded plugins defeat LeakSanitizer (see tests/comm/tests.cmake); the layout code
# is leak-checked by test_ddp_buckets.
set(TR_DP_TEST_ENV "")
if(TRESTLE_SANITIZE)
  set(TR_DP_TEST_ENV "ASAN_OPTIONS=detect_leaks=0")
endif()

foreach(np 2 4)
  add_test(NAME mpi_dp_np${np}
           COMMAND ${TR_DP_MPIRUN} ${np} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:dp_check>
                   ${MPIEXEC_POSTFLAGS})
  set_tests_properties(mpi_dp_np${np} PROPERTIES LABELS "mpi" TIMEOUT 120 RUN_SERIAL TRUE
                       ENVIRONMENT "${TR_DP_TEST_ENV}")
endforeach()
