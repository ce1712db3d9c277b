# Parallel-state checks on real communicators: 8 oversubscribed ranks on one machine.
add_executable(check_groups ${CMAKE_SOURCE_DIR}/tests/mpi/check_groups.c)
target_link_libraries(check_groups PRIVATE trestle_runtime)

# Eight ranks on two cores (tr_mpirun_test, tests/tests.cmake: alone, leak checks off).
function(tr_mpi_groups_test name np)
  tr_mpirun_test(mpi_groups_${name} ${np} check_groups ${ARGN})
  set_tests_properties(mpi_groups_${name} PROPERTIES TIMEOUT 60)
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
                     ENVIRONMENT "${TR_MPIRUN_ENV}")

# Tensor-parallel communication overlap: the pieces' exchanges are in flight while the GEMMs of
# the earlier pieces run, with the blocking exchanges' results and bytes (check_tp_overlap.c).
add_executable(check_tp_overlap ${CMAKE_SOURCE_DIR}/tests/mpi/check_tp_overlap.c)
target_link_libraries(check_tp_overlap PRIVATE trestle_runtime)
tr_mpirun_test(mpi_tp_overlap_tp2 2 check_tp_overlap 2 16)
tr_mpirun_test(mpi_tp_overlap_tp4_one_sequence 4 check_tp_overlap 1 32)
tr_mpirun_test(mpi_tp_overlap_tp4_odd_chunk 4 check_tp_overlap 3 12)

# Context parallelism's ring attention in isolation (check_cp_ring.c): against the attention op
# on the whole sequence, against central differences of the global loss, and the ring's bytes
# against the theory; CP 2 (one ring step after the local one) and CP 4, micro batch 2, and with
# attention dropout (odd chunk length: blocks at odd token coordinates).
add_executable(check_cp_ring ${CMAKE_SOURCE_DIR}/tests/mpi/check_cp_ring.c)
target_link_libraries(check_cp_ring PRIVATE trestle_runtime)
tr_mpirun_test(mpi_cp_ring_cp2 2 check_cp_ring 2 3)
tr_mpirun_test(mpi_cp_ring_cp4 4 check_cp_ring 2 2)
tr_mpirun_test(mpi_cp_ring_cp2_dropout 2 check_cp_ring 2 3 0.2)
tr_mpirun_test(mpi_cp_allgather_cp4 4 check_cp_ring 2 2 0 allgather)
tr_mpirun_test(mpi_cp_allgather_cp2_dropout 2 check_cp_ring 1 3 0.2 allgather)
tr_mpirun_test(mpi_cp_a2a_cp2_dropout 2 check_cp_ring 2 3 0.2 a2a)
