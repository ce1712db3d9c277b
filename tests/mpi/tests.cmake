# Parallel-state checks on real communicators: 8 oversubscribed ranks on one machine.
add_executable(check_groups ${CMAKE_SOURCE_DIR}/tests/mpi/check_groups.c)
target_link_libraries(check_groups PRIVATE trestle_runtime)

set(TR_MPIRUN ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe ${MPIEXEC_NUMPROC_FLAG})

# Open MPI's plugins are unloaded at finalize, so LeakSanitizer reports their allocations as
# leaks from "<unknown module>" that no suppression can name. Leak checks of our own code are
# the unit tests' job; here ASan/UBSan still catch errors.
set(TR_MPI_TEST_ENV "")
if(TRESTLE_SANITIZE)
  set(TR_MPI_TEST_ENV "ASAN_OPTIONS=detect_leaks=0")
endif()

function(tr_mpi_groups_test name np)
  add_test(NAME mpi_groups_${name}
           COMMAND ${TR_MPIRUN} ${np} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:check_groups>
                   ${MPIEXEC_POSTFLAGS} ${ARGN})
  # Eight ranks on two cores: never alongside other tests. mpirun fails if any rank does.
  set_tests_properties(mpi_groups_${name} PROPERTIES LABELS "mpi" TIMEOUT 60 RUN_SERIAL TRUE
                       ENVIRONMENT "${TR_MPI_TEST_ENV}")
endfunction()

tr_mpi_groups_test(tp2_pp2_cp2 8 tp=2 pp=2 cp=2)
tr_mpi_groups_test(tp2_ep4_etp1 8 tp=2 ep=4 etp=1)
tr_mpi_groups_test(tp2_ep4_etp2 8 tp=2 ep=4 etp=2)
tr_mpi_groups_test(pp4_pp_before_dp 8 pp=4 order=tp-cp-ep-pp-dp inst=2)
tr_mpi_groups_test(dp8_local_split 8 ep=2 etp=1 inst=2 local=split)

add_test(NAME mpi_bad_world
         COMMAND sh ${CMAKE_SOURCE_DIR}/tests/mpi/bad_world.sh ${MPIEXEC_EXECUTABLE} 6
                 $<TARGET_FILE:check_groups> tp=4)
set_tests_properties(mpi_bad_world PROPERTIES LABELS "mpi" TIMEOUT 60 RUN_SERIAL TRUE
                     ENVIRONMENT "${TR_MPI_TEST_ENV}")
