# The half-precision weight copy under parallel layouts (mpirun, oversubscribed): each test
# trains twice on the same ranks, with the copy and with per-GEMM casting, and requires bitwise
# equal losses and final parameters on every rank (docs/runtime.md, "Mixed precision").
add_executable(wcopy_check ${CMAKE_SOURCE_DIR}/tests/wcopy/wcopy_check.c)
target_link_libraries(wcopy_check PRIVATE trestle_runtime)

set(TR_WCOPY_MPIRUN ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe
                    ${MPIEXEC_NUMPROC_FLAG})
set(TR_WCOPY_ENV "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
if(TRESTLE_SANITIZE)
  list(APPEND TR_WCOPY_ENV "ASAN_OPTIONS=detect_leaks=0")
endif()
set(TR_WCOPY_COMMON model.seq_length=32 dataset.seq_length=32 train.train_iters=4
                    train.global_batch_size=4 train.micro_batch_size=1 validation.eval_iters=0
                    logger.log_interval=1000 scheduler.lr_warmup_iters=2 optimizer.lr=3e-3)
set(TR_WCOPY_BF16 mixed_precision.preset=bf16_mixed)
set(TR_WCOPY_FP16 mixed_precision.preset=fp16_mixed mixed_precision.loss_scale=1024)

function(tr_wcopy_test name np)
  add_test(NAME mpi_wcopy_${name}
           COMMAND ${TR_WCOPY_MPIRUN} ${np} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:wcopy_check>
                   ${MPIEXEC_POSTFLAGS} ${ARGN})
  set_tests_properties(mpi_wcopy_${name} PROPERTIES LABELS "mpi" TIMEOUT 120 RUN_SERIAL TRUE
                       ENVIRONMENT "${TR_WCOPY_ENV}")
endfunction()

# TP2 with sequence parallelism (GPT: biases, so the fused bias of the column layers and the
# row layers' bias after the reduce-scatter), DP2 with the distributed optimizer gathering
# parameters during the forward, and PP2 with tied embeddings (the last stage's own copy of the
# word embedding is the output layer's weight, cast from that stage's fp32 copy).
tr_wcopy_test(gpt_tp2_sp_fp16 2 gpt_tiny_pretrain ${TR_WCOPY_COMMON} ${TR_WCOPY_FP16}
              model.tensor_model_parallel_size=2 model.sequence_parallel=true)
tr_wcopy_test(llama_tp2_sp_bf16 2 llama_tiny_pretrain ${TR_WCOPY_COMMON} ${TR_WCOPY_BF16}
              model.tensor_model_parallel_size=2 model.sequence_parallel=true)
tr_wcopy_test(llama_dp2_distopt_overlap_bf16 2 llama_tiny_pretrain ${TR_WCOPY_COMMON}
              ${TR_WCOPY_BF16} ddp.use_distributed_optimizer=true
              optimizer.use_distributed_optimizer=true ddp.overlap_grad_reduce=true
              ddp.bucket_size=20000 ddp.overlap_param_gather=true
              optimizer.overlap_param_gather=true)
tr_wcopy_test(gpt_pp2_tied_bf16 2 gpt_tiny_pretrain ${TR_WCOPY_COMMON} ${TR_WCOPY_BF16}
              model.pipeline_model_parallel_size=2)
# LoRA under TP (frozen base through the copy, fp32 adapters) from the equiv tests' base.
if(DEFINED TR_LORA_BASE)
  tr_wcopy_test(llama_lora_tp2_bf16 2 llama_tiny_lora ${TR_LORA_COMMON} ${TR_WCOPY_BF16}
                model.tensor_model_parallel_size=2)
  set_tests_properties(mpi_wcopy_llama_lora_tp2_bf16 PROPERTIES FIXTURES_REQUIRED lora_base)
endif()

# Half-precision saved activations under the same layouts (wcopy_check --acts): the inputs of
# QKV, fc1, fc2 and the output layer saved in bf16/fp16 against saved in fp32
# (tr_train_opts.no_half_acts), bitwise. Under sequence parallelism the gathered norm outputs
# are the ones saved half; LoRA on QKV and proj keeps ln1 in fp32 (its adapter reads it) and
# saves ln2 and the MLP activation half.
function(tr_halfacts_test name np)
  add_test(NAME mpi_halfacts_${name}
           COMMAND ${TR_WCOPY_MPIRUN} ${np} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:wcopy_check>
                   ${MPIEXEC_POSTFLAGS} --acts ${ARGN})
  set_tests_properties(mpi_halfacts_${name} PROPERTIES LABELS "mpi" TIMEOUT 120 RUN_SERIAL TRUE
                       ENVIRONMENT "${TR_WCOPY_ENV}")
endfunction()
tr_halfacts_test(gpt_tp2_sp_fp16 2 gpt_tiny_pretrain ${TR_WCOPY_COMMON} ${TR_WCOPY_FP16}
                 model.tensor_model_parallel_size=2 model.sequence_parallel=true)
tr_halfacts_test(llama_tp2_sp_bf16 2 llama_tiny_pretrain ${TR_WCOPY_COMMON} ${TR_WCOPY_BF16}
                 model.tensor_model_parallel_size=2 model.sequence_parallel=true)
tr_halfacts_test(llama_dp2_distopt_overlap_bf16 2 llama_tiny_pretrain ${TR_WCOPY_COMMON}
                 ${TR_WCOPY_BF16} ddp.use_distributed_optimizer=true
                 optimizer.use_distributed_optimizer=true ddp.overlap_grad_reduce=true
                 ddp.bucket_size=20000 ddp.overlap_param_gather=true
                 optimizer.overlap_param_gather=true)
if(DEFINED TR_LORA_BASE)
  tr_halfacts_test(llama_lora_tp2_bf16 2 llama_tiny_lora ${TR_LORA_COMMON} ${TR_WCOPY_BF16}
                   model.tensor_model_parallel_size=2 "peft.target_modules=[linear_qkv,linear_proj]")
  set_tests_properties(mpi_halfacts_llama_lora_tp2_bf16 PROPERTIES FIXTURES_REQUIRED lora_base)
endif()
# The same on a GPU: the unit test test_model_device_halfacts (cpu-strict everywhere) with
# TR_TEST_DEVICE=cuda, skipped (77) without a usable GPU.
if(TARGET trestle_cuda AND TARGET test_model_device_halfacts)
  add_test(NAME gpu_halfacts_device COMMAND test_model_device_halfacts)
  set_tests_properties(gpu_halfacts_device PROPERTIES LABELS "gpu" TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "TR_TEST_DEVICE=cuda;${TR_GPU_ENV}")
endif()
