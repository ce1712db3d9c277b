# The MoE layer's alltoall and allgather dispatchers on real ranks (mpirun, oversubscribed): EP 2, EP 4 and
# EP 2 x DP 2 (world 4) against the single-rank layer, with the EP group's bytes against the
# theory from the routing.
add_executable(moe_ep_check ${CMAKE_SOURCE_DIR}/tests/moe/moe_ep_check.c)
target_link_libraries(moe_ep_check PRIVATE trestle_runtime)
foreach(np 2 4)
  tr_mpirun_test(mpi_moe_ep${np} ${np} moe_ep_check)
endforeach()
tr_mpirun_test(mpi_moe_ep2_dp2 4 moe_ep_check ep=2)
