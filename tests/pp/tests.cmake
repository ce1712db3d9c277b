# A stuck or dead peer under mpirun (label "mpi"): one rank stops itself with SIGSTOP (or dies
# with SIGKILL) mid-iteration through the test hook in runtime/train/step.c, under PP2 and under
# TP2 x DP2; every other rank must end (through the 10 s communication timeout, or through the
# SIGTERM mpirun sends after a death) with a comm.timeout error naming the operation, the group
# and the peer, within 15 s of the fault, and mpirun must fail.
#   tests/pp/stuck_peer.sh RUN_RECIPE MPIEXEC
add_test(NAME mpi_stuck_peer
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/pp/stuck_peer.sh $<TARGET_FILE:run_recipe>
                 ${MPIEXEC_EXECUTABLE})
set(TR_STUCK_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
if(TRESTLE_SANITIZE)
  # Open MPI's allocations at exit are reported as leaks that cannot be suppressed by name.
  list(APPEND TR_STUCK_ENV "ASAN_OPTIONS=detect_leaks=0")
endif()
set_tests_properties(mpi_stuck_peer PROPERTIES LABELS "mpi" TIMEOUT 240 RUN_SERIAL TRUE
                     ENVIRONMENT "${TR_STUCK_ENV}")

# The model cut into pipeline stages equals the whole model (label "unit").
tr_harness_test(test_pp_model_part test_pp_model_part unit 60
                ${CMAKE_SOURCE_DIR}/tests/pp/test_pp_model_part.c)

# Pipeline parallelism in bf16 from the command line (labels "mpi" and "cli": also under ASan).
add_test(NAME mpi_pp_lowp_cli
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/pp/pp_lowp_cli.sh $<TARGET_FILE:run_recipe>
                 ${MPIEXEC_EXECUTABLE})
set_tests_properties(mpi_pp_lowp_cli PROPERTIES LABELS "mpi;cli" TIMEOUT 150 RUN_SERIAL TRUE
                     ENVIRONMENT "${TR_STUCK_ENV}")

# widen_lowp, the receiving side of half-precision pipeline messages: the CPU table (label
# "unit") and the CUDA table against it (label "gpu": exits 77, skipped, without a GPU).
tr_harness_test(test_pp_widen test_pp_widen unit 60 ${CMAKE_SOURCE_DIR}/tests/pp/test_pp_widen.c)
if(TARGET trestle_cuda)
  add_executable(test_cuda_widen ${CMAKE_SOURCE_DIR}/tests/gpu/test_cuda_widen.c)
  target_link_libraries(test_cuda_widen PRIVATE tr_gpu_test_support)
  set(TR_WIDEN_GPU_ENV "")
  if(TRESTLE_SANITIZE)
    set(TR_WIDEN_GPU_ENV "ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0")
  endif()
  add_test(NAME gpu_cuda_widen COMMAND test_cuda_widen)
  set_tests_properties(gpu_cuda_widen PROPERTIES LABELS "gpu" TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${TR_WIDEN_GPU_ENV}")
endif()
