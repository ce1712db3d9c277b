# CUDA backend tests. Built only when CUDA is on (kernels/cuda/cuda.cmake made trestle_cuda).
#  - test_cuda_host: host-side logic (arena accounting, argument checks); runs everywhere.
#  - label "gpu": need a GPU. Each exits 77 when none is visible and ctest's SKIP_RETURN_CODE
#    turns that into "Not Run (skipped)", so a GPU-less CI never counts them as passed.
if(NOT TARGET trestle_cuda)
  return()
endif()

add_library(tr_gpu_test_support STATIC ${CMAKE_SOURCE_DIR}/tests/gpu/gpu_test.c
            ${CMAKE_SOURCE_DIR}/tests/unit/harness.c)
target_link_libraries(tr_gpu_test_support PUBLIC trestle_runtime trestle_cuda)

add_executable(test_cuda_host ${CMAKE_SOURCE_DIR}/tests/gpu/test_cuda_host.c)
target_link_libraries(test_cuda_host PRIVATE tr_gpu_test_support)
add_test(NAME test_cuda_host COMMAND test_cuda_host)
set_tests_properties(test_cuda_host PROPERTIES LABELS "unit;cuda" TIMEOUT 60)

set(TR_GPU_ENV "")
if(TRESTLE_SANITIZE)
  # The CUDA driver maps memory where ASan keeps its shadow gap; Open MPI's plugins leak at
  # finalize (tests/comm/tests.cmake).
  set(TR_GPU_ENV "ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0")
endif()

add_executable(test_cuda_ops ${CMAKE_SOURCE_DIR}/tests/gpu/test_cuda_ops.c
               ${CMAKE_SOURCE_DIR}/tests/gpu/test_cuda_ops_attention.c
               ${CMAKE_SOURCE_DIR}/tests/gpu/test_cuda_ops_large.c)
target_link_libraries(test_cuda_ops PRIVATE tr_gpu_test_support)
add_test(NAME gpu_cuda_ops COMMAND test_cuda_ops)
set_tests_properties(gpu_cuda_ops PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${TR_GPU_ENV}")

# The model and optimizer on the GPU against the host (the unit test test_model_device, which
# runs on cpu-strict everywhere).
if(TARGET test_model_device)
  add_test(NAME gpu_model_device COMMAND test_model_device)
  set_tests_properties(gpu_model_device PROPERTIES LABELS "gpu" TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "TR_TEST_DEVICE=cuda;${TR_GPU_ENV}")
endif()

# MLA with MTP on the GPU against the host (the unit test test_mla_mtp_device).
if(TARGET test_mla_mtp_device)
  add_test(NAME gpu_mla_mtp_device COMMAND test_mla_mtp_device)
  set_tests_properties(gpu_mla_mtp_device PROPERTIES LABELS "gpu" TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "TR_TEST_DEVICE=cuda;${TR_GPU_ENV}")
endif()

add_executable(comm_gpu_check ${CMAKE_SOURCE_DIR}/tests/gpu/comm_gpu_check.c)
target_link_libraries(comm_gpu_check PRIVATE tr_gpu_test_support)

# Several ranks on one GPU through the host-staged MPI path; NCCL alone (and, with more ranks
# than GPUs, its refusal with comm.nccl_shared_gpu).
function(tr_gpu_comm_test mode np tp)
  add_test(NAME gpu_comm_${mode}_np${np}_tp${tp}
           COMMAND ${TR_MPIRUN} ${np} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:comm_gpu_check>
                   ${MPIEXEC_POSTFLAGS} ${mode} tp=${tp})
  set_tests_properties(gpu_comm_${mode}_np${np}_tp${tp} PROPERTIES LABELS "gpu;mpi" TIMEOUT 120
                       RUN_SERIAL TRUE SKIP_RETURN_CODE 77 ENVIRONMENT "${TR_GPU_ENV}")
endfunction()
tr_gpu_comm_test(staged 2 2)
tr_gpu_comm_test(staged 4 2)
tr_gpu_comm_test(nccl 1 1)
tr_gpu_comm_test(nccl 2 2)

# Op timings at llama32_1b shapes for scripts/gpu_check.sh (not a test).
add_executable(bench_cuda_ops EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/tests/gpu/bench_cuda_ops.c)
target_link_libraries(bench_cuda_ops PRIVATE tr_gpu_test_support)
