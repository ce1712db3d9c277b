# The half-precision weight copy and half-precision saved activations under parallel layouts
# (mpirun, oversubscribed): each test trains twice on the same ranks, with and without the
# feature, and requires bitwise equal losses and final parameters on every rank (docs/runtime.md,
# "Mixed precision" and "Saved activations").
add_executable(wcopy_check ${CMAKE_SOURCE_DIR}/tests/wcopy/wcopy_check.c)
target_link_libraries(wcopy_check PRIVATE trestle_runtime)

set(TR_WCOPY_COMMON model.seq_length=32 dataset.seq_length=32 train.train_iters=4
                    train.global_batch_size=4 train.micro_batch_size=1 validation.eval_iters=0
                    logger.log_interval=1000 scheduler.lr_warmup_iters=2 optimizer.lr=3e-3)
set(TR_WCOPY_BF16 mixed_precision.preset=bf16_mixed)
set(TR_WCOPY_FP16 mixed_precision.preset=fp16_mixed mixed_precision.loss_scale=1024)

# tr_wcopy_test(MODE NAME NP RECIPE ARGS...): MODE wcopy compares training with the weight copy
# and with per-GEMM casting; MODE halfacts (wcopy_check --acts) saved activations in half and in
# fp32. The ctest name is mpi_MODE_NAME.
function(tr_wcopy_test mode name np)
  set(mode_flags "")
  if(mode STREQUAL "halfacts")
    set(mode_flags --acts)
  elseif(NOT mode STREQUAL "wcopy")
    message(FATAL_ERROR "tr_wcopy_test: unknown mode ${mode}")
  endif()
  tr_mpirun_test(mpi_${mode}_${name} ${np} wcopy_check ${mode_flags} ${ARGN})
endfunction()

# Both modes under the same layouts: TP2 with sequence parallelism (GPT: biases, so the fused
# bias of the column layers and the row layers' bias after the reduce-scatter; for halfacts the
# gathered norm outputs are the ones saved half), DP2 with the distributed optimizer gathering
# parameters during the forward.
foreach(mode wcopy halfacts)
  tr_wcopy_test(${mode} gpt_tp2_sp_fp16 2 gpt_tiny_pretrain ${TR_WCOPY_COMMON} ${TR_WCOPY_FP16}
                model.tensor_model_parallel_size=2 model.sequence_parallel=true)
  tr_wcopy_test(${mode} llama_tp2_sp_bf16 2 llama_tiny_pretrain ${TR_WCOPY_COMMON}
                ${TR_WCOPY_BF16} model.tensor_model_parallel_size=2 model.sequence_parallel=true)
  tr_wcopy_test(${mode} llama_dp2_distopt_overlap_bf16 2 llama_tiny_pretrain ${TR_WCOPY_COMMON}
                ${TR_WCOPY_BF16} ddp.use_distributed_optimizer=true
                optimizer.use_distributed_optimizer=true ddp.overlap_grad_reduce=true
                ddp.bucket_size=20000 ddp.overlap_param_gather=true
                optimizer.overlap_param_gather=true)
endforeach()
# The copy under PP2 with tied embeddings (the last stage's own copy of the word embedding is the
# output layer's weight, cast from that stage's fp32 copy).
tr_wcopy_test(wcopy gpt_pp2_tied_bf16 2 gpt_tiny_pretrain ${TR_WCOPY_COMMON} ${TR_WCOPY_BF16}
              model.pipeline_model_parallel_size=2)
# LoRA under TP from the equiv tests' base: the copy (frozen base through the copy, fp32
# adapters), and saved activations with LoRA on QKV and proj, which keeps ln1 in fp32 (its
# adapter reads it) and saves ln2 and the MLP activation half.
if(DEFINED TR_LORA_BASE)
  tr_wcopy_test(wcopy llama_lora_tp2_bf16 2 llama_tiny_lora ${TR_LORA_COMMON} ${TR_WCOPY_BF16}
                model.tensor_model_parallel_size=2)
  tr_wcopy_test(halfacts llama_lora_tp2_bf16 2 llama_tiny_lora ${TR_LORA_COMMON}
                ${TR_WCOPY_BF16} model.tensor_model_parallel_size=2
                "peft.target_modules=[linear_qkv,linear_proj]")
  set_tests_properties(mpi_wcopy_llama_lora_tp2_bf16 mpi_halfacts_llama_lora_tp2_bf16
                       PROPERTIES FIXTURES_REQUIRED lora_base)
endif()
# The same on a GPU: the unit test test_model_device_halfacts (cpu-strict everywhere) with
# TR_TEST_DEVICE=cuda, skipped (77) without a usable GPU.
if(TARGET trestle_cuda AND TARGET test_model_device_halfacts)
  add_test(NAME gpu_halfacts_device COMMAND test_model_device_halfacts)
  set_tests_properties(gpu_halfacts_device PROPERTIES LABELS "gpu" TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "TR_TEST_DEVICE=cuda;${TR_GPU_ENV}")
endif()
