# Checkpoint tests beyond the unit tests (label "ckpt"): the SIGKILL crash-safety driver and the
# trestle_ckpt tool's command-line behaviour.
add_executable(ckpt_kill ${CMAKE_SOURCE_DIR}/tests/ckpt/ckpt_kill.c)
target_link_libraries(ckpt_kill PRIVATE trestle_runtime)
add_test(NAME ckpt_kill COMMAND ckpt_kill 60 20261129 1 30)
set_tests_properties(ckpt_kill PROPERTIES LABELS "ckpt" TIMEOUT 120)
# The same with the ranks split over two processes killed together (rank 0's commits).
add_test(NAME ckpt_kill_2proc COMMAND ckpt_kill 30 20261201 2 30)
set_tests_properties(ckpt_kill_2proc PROPERTIES LABELS "ckpt" TIMEOUT 120)

add_test(NAME ckpt_tool
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/ckpt/tool.sh $<TARGET_FILE:trestle_ckpt>
                 $<TARGET_FILE:ckpt_make_fixture>)
set_tests_properties(ckpt_tool PROPERTIES LABELS "ckpt" TIMEOUT 60)
add_executable(ckpt_make_fixture ${CMAKE_SOURCE_DIR}/tests/ckpt/make_fixture.c)
target_link_libraries(ckpt_make_fixture PRIVATE trestle_runtime)

# Resume and reshard through real training runs (tests/ckpt/ckpt_resume.c): a run interrupted by
# train.exit_interval saves, another layout loads and finishes, and the losses and final
# parameters are compared with the uninterrupted run (bitwise for the same layout, relative
# 1e-5 against the single-rank run otherwise). 8 iterations of the tiny recipes, 4 per half.
add_executable(ckpt_resume ${CMAKE_SOURCE_DIR}/tests/ckpt/ckpt_resume.c)
target_link_libraries(ckpt_resume PRIVATE trestle_runtime)
set(TR_CKPT_COMMON model.seq_length=32 dataset.seq_length=32 train.train_iters=8
                   train.global_batch_size=8 train.micro_batch_size=1 validation.eval_iters=0
                   logger.log_interval=1000 scheduler.lr_warmup_iters=2 optimizer.lr=3e-3)
set(TR_CKPT_8L ${TR_CKPT_COMMON} model.num_layers=8)
set(TR_CKPT_DISTOPT ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true)

# tr_ckpt_resume_test(NAME NP [--exact] --np-save A --np-load B RECIPE COMMON... -- SAVE... -- LOAD...)
function(tr_ckpt_resume_test name np)
  tr_mpirun_test(mpi_ckpt_${name} ${np} ckpt_resume --stop 4 ${ARGN})
endfunction()
set(TR_CKPT_TP2 model.tensor_model_parallel_size=2)
set(TR_CKPT_PP2 model.pipeline_model_parallel_size=2)
set(TR_CKPT_PP4 model.pipeline_model_parallel_size=4)
set(TR_CKPT_UNTIED model.share_embeddings_and_output_weights=false)

# (a) Exact resume under the same layout: bitwise losses and parameters.
tr_ckpt_resume_test(exact_single 1 --exact --np-save 1 --np-load 1 gpt_tiny_pretrain
                    ${TR_CKPT_COMMON} -- --)
# (fully_parallel_save is on by default; one run writes each slice from DP rank 0 only, one
# writes from a background thread.)
tr_ckpt_resume_test(exact_dp2_distopt 2 --exact --np-save 2 --np-load 2 llama_tiny_pretrain
                    ${TR_CKPT_COMMON} -- ${TR_CKPT_DISTOPT} checkpoint.fully_parallel_save=false
                    -- ${TR_CKPT_DISTOPT})
tr_ckpt_resume_test(exact_tp2_async 2 --exact --np-save 2 --np-load 2 llama_tiny_pretrain
                    ${TR_CKPT_COMMON} -- ${TR_CKPT_TP2} checkpoint.async_save=true -- ${TR_CKPT_TP2})
tr_ckpt_resume_test(exact_pp2 2 --exact --np-save 2 --np-load 2 gpt_tiny_pretrain
                    ${TR_CKPT_COMMON} model.num_layers=4 -- ${TR_CKPT_PP2} -- ${TR_CKPT_PP2})
# fp16: the dynamic loss scaler's scale and counters continue (with a 3-step growth window the
# save falls between two growths: a fresh scaler would grow at other iterations and skip other
# steps).
tr_ckpt_resume_test(exact_single_fp16 1 --exact --np-save 1 --np-load 1 llama_tiny_pretrain
                    ${TR_CKPT_COMMON} mixed_precision.preset=fp16_mixed
                    mixed_precision.initial_loss_scale=1048576 mixed_precision.loss_scale_window=3
                    -- --)
# Dropout: the masks continue from the saved RNG state.
tr_ckpt_resume_test(exact_dp2_dropout 2 --exact --expect-spread --np-save 2 --np-load 2 gpt_tiny_pretrain
                    ${TR_CKPT_COMMON} model.hidden_dropout=0.1 -- ${TR_CKPT_DISTOPT} --
                    ${TR_CKPT_DISTOPT})
# The comparison can fail: resuming without the optimizer state must differ.
tr_ckpt_resume_test(detects_missing_optimizer 1 --exact --np-save 1 --np-load 1 gpt_tiny_pretrain
                    ${TR_CKPT_COMMON} -- -- checkpoint.load_optim=false)
set_tests_properties(mpi_ckpt_detects_missing_optimizer PROPERTIES WILL_FAIL TRUE)

# (b) Save under one layout, load under another, continue: relative 1e-5 against the
# uninterrupted single-rank run (which tests/equiv shows equal to the run under either layout).
tr_ckpt_resume_test(reshard_tp2pp2_to_pp4 4 --np-save 4 --np-load 4 llama_tiny_pretrain
                    ${TR_CKPT_COMMON} model.num_layers=4 ${TR_CKPT_UNTIED} -- ${TR_CKPT_TP2}
                    ${TR_CKPT_PP2} -- ${TR_CKPT_PP4})
tr_ckpt_resume_test(reshard_tp4_to_dp4_distopt 4 --np-save 4 --np-load 4 gpt_tiny_pretrain
                    ${TR_CKPT_COMMON} -- model.tensor_model_parallel_size=4 -- ${TR_CKPT_DISTOPT})
tr_ckpt_resume_test(reshard_pp2vpp2_to_pp4 4 --np-save 2 --np-load 4 llama_tiny_pretrain
                    ${TR_CKPT_COMMON} model.num_layers=4 -- ${TR_CKPT_PP2}
                    model.virtual_pipeline_model_parallel_size=2 -- ${TR_CKPT_PP4})
tr_ckpt_resume_test(reshard_dp2_distopt_to_dp1 2 --np-save 2 --np-load 1 gpt_tiny_pretrain
                    ${TR_CKPT_COMMON} -- ${TR_CKPT_DISTOPT} --)
tr_ckpt_resume_test(reshard_tp1_to_tp2_sp 2 --np-save 1 --np-load 2 llama_tiny_pretrain
                    ${TR_CKPT_COMMON} ${TR_CKPT_UNTIED} -- -- ${TR_CKPT_TP2}
                    model.sequence_parallel=true)
# GPT: learned positions, tied embedding (on the last pipeline stage too), biases.
tr_ckpt_resume_test(reshard_gpt_pp2_to_tp2 2 --np-save 2 --np-load 2
                    gpt_tiny_pretrain ${TR_CKPT_COMMON} model.num_layers=4 -- ${TR_CKPT_PP2}
                    -- ${TR_CKPT_TP2})
# Llama: SwiGLU (gate/up), GQA, untied; the distributed optimizer's state across TP and PP.
tr_ckpt_resume_test(reshard_llama_tp2dp2_distopt_to_pp2dp2_distopt 4 --np-save 4 --np-load 4
                    llama_tiny_pretrain ${TR_CKPT_COMMON} ${TR_CKPT_UNTIED} -- ${TR_CKPT_TP2}
                    ${TR_CKPT_DISTOPT} -- ${TR_CKPT_PP2} ${TR_CKPT_DISTOPT})
# Qwen3-style q/k norms (replicated under TP, gradients summed over TP): saved from TP 2 + SP,
# resumed on PP 2, and back.
tr_ckpt_resume_test(reshard_qknorm_tp2_sp_to_pp2 2 --np-save 2 --np-load 2 llama_tiny_pretrain
                    ${TR_CKPT_COMMON} model.num_layers=4 model.qk_layernorm=true --
                    ${TR_CKPT_TP2} model.sequence_parallel=true -- ${TR_CKPT_PP2})
tr_ckpt_resume_test(reshard_qknorm_pp2_to_tp2 2 --np-save 2 --np-load 2 llama_tiny_pretrain
                    ${TR_CKPT_COMMON} model.num_layers=4 model.qk_layernorm=true -- ${TR_CKPT_PP2}
                    -- ${TR_CKPT_TP2})
tr_ckpt_resume_test(reshard_pp4_to_pp2vpp2_sgd 4 --np-save 4 --np-load 2 gpt_tiny_pretrain
                    ${TR_CKPT_COMMON} model.num_layers=4 optimizer.optimizer=sgd optimizer.lr=0.1
                    -- ${TR_CKPT_PP4} -- ${TR_CKPT_PP2} model.virtual_pipeline_model_parallel_size=2)

# TP larger than the query groups (llama_tiny: 2): at TP 4 each pair of TP ranks holds copies of
# one group's key and value heads, stored once (written by one holder; the manifest must cover
# every element exactly once); any TP reads them back: exact at TP 4, resharded to TP 1 and to
# TP 2 x DP 2 with the distributed optimizer's state, and from TP 2 to TP 4.
set(TR_CKPT_TP4 model.tensor_model_parallel_size=4)
tr_ckpt_resume_test(exact_llama_tp4_kv_replicas 4 --exact --np-save 4 --np-load 4
                    llama_tiny_pretrain ${TR_CKPT_COMMON} -- ${TR_CKPT_TP4} -- ${TR_CKPT_TP4})
tr_ckpt_resume_test(reshard_llama_tp4_to_tp1 4 --np-save 4 --np-load 1 llama_tiny_pretrain
                    ${TR_CKPT_COMMON} -- ${TR_CKPT_TP4} --)
tr_ckpt_resume_test(reshard_llama_tp4_to_tp2dp2_distopt 4 --np-save 4 --np-load 4
                    llama_tiny_pretrain ${TR_CKPT_COMMON} ${TR_CKPT_UNTIED} -- ${TR_CKPT_TP4}
                    ${TR_CKPT_DISTOPT} -- ${TR_CKPT_TP2} ${TR_CKPT_DISTOPT})
tr_ckpt_resume_test(reshard_llama_tp2_to_tp4 4 --np-save 2 --np-load 4 llama_tiny_pretrain
                    ${TR_CKPT_COMMON} -- ${TR_CKPT_TP2} -- ${TR_CKPT_TP4})
# GPT with 2 query groups: the QKV bias's query and key-value columns, two slices as well.
tr_ckpt_resume_test(reshard_gpt_groups2_tp4_to_tp1 4 --np-save 4 --np-load 1 gpt_tiny_pretrain
                    ${TR_CKPT_COMMON} model.num_query_groups=2 -- ${TR_CKPT_TP4} --)

# (c) Another DP size reads the same global samples: saved at DP1, resumed at DP2 and DP4 (the
# losses could not match the DP1 run otherwise); DP2 -> DP4 reshards dist-opt state over DP.
tr_ckpt_resume_test(dp1_to_dp2 2 --np-save 1 --np-load 2 gpt_tiny_pretrain ${TR_CKPT_COMMON} --
                    --)
tr_ckpt_resume_test(dp1_to_dp4_distopt 4 --np-save 1 --np-load 4 gpt_tiny_pretrain
                    ${TR_CKPT_COMMON} -- -- ${TR_CKPT_DISTOPT})
tr_ckpt_resume_test(dp2_distopt_to_dp4_distopt 4 --np-save 2 --np-load 4 llama_tiny_pretrain
                    ${TR_CKPT_COMMON} -- ${TR_CKPT_DISTOPT} -- ${TR_CKPT_DISTOPT})

# (d)-(f) through run_recipe on one rank: SIGTERM saves and resumes to the same final loss;
# damaged checkpoints are refused before training; most_recent_k; missing checkpoints; finetune
# and pretrained_checkpoint; unsupported formats.
add_test(NAME ckpt_resume_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/ckpt/resume_cli.sh
                                      $<TARGET_FILE:run_recipe>)
# run_recipe is an MPI program: Open MPI's finalize leaks cannot be suppressed (see
# tests/cli/tests.cmake), so leak checking is off there; ASan and UBSan still check the rest.
set_tests_properties(ckpt_resume_cli PROPERTIES LABELS "ckpt" TIMEOUT 180
                     ENVIRONMENT "${TR_MPIRUN_ENV}")
# The same SIGTERM check as DP2 under mpirun, the signal delivered to one rank only.
add_test(NAME mpi_ckpt_sigterm_dp2
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/ckpt/resume_cli.sh $<TARGET_FILE:run_recipe> --mpi
                 ${TR_MPIRUN} 2)
set_tests_properties(mpi_ckpt_sigterm_dp2 PROPERTIES LABELS "mpi" TIMEOUT 120 RUN_SERIAL TRUE
                     ENVIRONMENT "${TR_MPIRUN_ENV}")

# The registration rules in-process, every TP/DP rank simulated (label ckpt: also under ASan).
tr_harness_test(test_ckpt_register ckpt_register ckpt 60
                ${CMAKE_SOURCE_DIR}/tests/ckpt/test_ckpt_register.c)
