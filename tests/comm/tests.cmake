# The comm layer on real ranks (mpirun, oversubscribed): every operation against locally computed
# references, overlap, byte counters, determinism, and timeouts of a stopped peer.
add_executable(comm_check ${CMAKE_SOURCE_DIR}/tests/comm/comm_check.c)
target_link_libraries(comm_check PRIVATE trestle_runtime)

# Open MPI's plugins are unloaded at finalize, so LeakSanitizer reports their allocations as
# leaks nobody can suppress (see tests/mpi/tests.cmake); ASan/UBSan still check our code.
set(TR_COMM_TEST_ENV "")
if(TRESTLE_SANITIZE)
  set(TR_COMM_TEST_ENV "ASAN_OPTIONS=detect_leaks=0")
  # The singleton unit test initialises MPI too; its leak-free peer is test_comm_counters.
  set_tests_properties(test_comm_single PROPERTIES ENVIRONMENT "${TR_COMM_TEST_ENV}")
endif()

function(tr_comm_ops_test np tp)
  tr_mpirun_test(mpi_comm_ops_np${np}_tp${tp} ${np} comm_check ops tp=${tp})
  set_tests_properties(mpi_comm_ops_np${np}_tp${tp} PROPERTIES TIMEOUT 60
                       ENVIRONMENT "${TR_COMM_TEST_ENV}")
endfunction()

tr_comm_ops_test(2 1)
tr_comm_ops_test(4 2)
tr_comm_ops_test(8 2)

function(tr_comm_stall_test name np mode)
  add_test(NAME mpi_comm_${name}
           COMMAND sh ${CMAKE_SOURCE_DIR}/tests/comm/stall.sh ${MPIEXEC_EXECUTABLE} ${np}
                   $<TARGET_FILE:comm_check> ${mode} ${ARGN})
  set_tests_properties(mpi_comm_${name} PROPERTIES LABELS "mpi" TIMEOUT 40 RUN_SERIAL TRUE
                       ENVIRONMENT "${TR_COMM_TEST_ENV}")
endfunction()

tr_comm_stall_test(timeout_collective 4 stall-collective "all_reduce #2 on group world"
                   "did not answer: 3;" "within 2.0 s")
tr_comm_stall_test(timeout_p2p 2 stall-p2p "p2p_batch on group world"
                   "no answer for recv from world rank 1" "within 2.0 s")
# A stop signal during a wait that a stopped peer blocks: honoured within a second, not after
# the 60 s timeout, with the same diagnostic (stall.sh fails past 12 s).
tr_comm_stall_test(sigterm_during_wait 4 stall-sigterm "all_reduce #2 on group world"
                   "did not answer: 3;" "given up 1 s after a stop signal")
# ...but a healthy collective every member waits in, slower than that second, still finishes
# after the stop signal, so the run can save (before: comm.timeout after 1 s).
add_test(NAME mpi_comm_slow_collective_after_sigterm
         COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np 4
                 $<TARGET_FILE:comm_check> slow-sigterm)
set_tests_properties(mpi_comm_slow_collective_after_sigterm PROPERTIES LABELS "mpi" TIMEOUT 120
                     RUN_SERIAL TRUE ENVIRONMENT "${TR_COMM_TEST_ENV}")
