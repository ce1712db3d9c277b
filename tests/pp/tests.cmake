# A stuck peer under mpirun (label "mpi"): one rank stops itself with SIGSTOP mid-iteration
# through the test hook in runtime/train.c; the others must end through the communication timeout
# with a comm.timeout error naming the operation, the group and the peer, and mpirun must fail.
#   tests/pp/stuck_peer.sh RUN_RECIPE MPIEXEC
add_test(NAME mpi_stuck_peer
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/pp/stuck_peer.sh $<TARGET_FILE:run_recipe>
                 ${MPIEXEC_EXECUTABLE})
set(TR_STUCK_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
if(TRESTLE_SANITIZE)
  # Open MPI's allocations at exit are reported as leaks that cannot be suppressed by name.
  list(APPEND TR_STUCK_ENV "ASAN_OPTIONS=detect_leaks=0")
endif()
set_tests_properties(mpi_stuck_peer PROPERTIES LABELS "mpi" TIMEOUT 60 RUN_SERIAL TRUE
                     ENVIRONMENT "${TR_STUCK_ENV}")

# The model cut into pipeline stages equals the whole model (label "unit").
add_executable(test_pp_model_part ${CMAKE_SOURCE_DIR}/tests/pp/test_pp_model_part.c
                                  ${CMAKE_SOURCE_DIR}/tests/unit/harness.c)
target_include_directories(test_pp_model_part PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit)
target_link_libraries(test_pp_model_part PRIVATE trestle_runtime)
add_test(NAME test_pp_model_part COMMAND test_pp_model_part)
set_tests_properties(test_pp_model_part PROPERTIES LABELS "unit" TIMEOUT 60)
