# Layout equivalence on real ranks (mpirun, oversubscribed): each test trains a tiny model for 5
# iterations under one parallel layout and compares the losses and final parameters with the
# single-rank run of the same config (relative error <= 1e-5), and the bytes the comm layer
# counted on the TP, DP and PP groups with the analytic volume. See docs/parallel.md.
add_executable(equiv_check ${CMAKE_SOURCE_DIR}/tests/equiv/equiv_check.c
                           ${CMAKE_SOURCE_DIR}/tests/equiv/equiv_parts.c)
target_link_libraries(equiv_check PRIVATE trestle_runtime)

# Small and fast: sequences of 32 tokens, 8 samples per iteration, no evaluation, no logging.
set(TR_EQUIV_COMMON model.seq_length=32 dataset.seq_length=32 train.train_iters=5 train.global_batch_size=8
                    train.micro_batch_size=1 validation.eval_iters=0 logger.log_interval=1000
                    scheduler.lr_warmup_iters=2 optimizer.lr=3e-3)

# tr_equiv_test(NAME NP [--flag...] RECIPE [COMMON_KEY=VALUE...] -- [LAYOUT_KEY=VALUE...])
function(tr_equiv_test name np)
  tr_mpirun_test(mpi_equiv_${name} ${np} equiv_check --check-volume ${ARGN})
endfunction()

set(TR_DISTOPT ddp.use_distributed_optimizer=true optimizer.use_distributed_optimizer=true)
set(TR_OVERLAP ddp.overlap_grad_reduce=true ddp.bucket_size=20000)

# Data parallel: plain DDP and the distributed optimizer, with and without overlap.
tr_equiv_test(gpt_dp2 2 gpt_tiny_pretrain ${TR_EQUIV_COMMON} --)
tr_equiv_test(gpt_dp2_distopt 2 gpt_tiny_pretrain ${TR_EQUIV_COMMON} -- ${TR_DISTOPT})
tr_equiv_test(gpt_dp4_overlap 4 --expect-overlap gpt_tiny_pretrain ${TR_EQUIV_COMMON} -- ${TR_OVERLAP})
tr_equiv_test(gpt_dp4_distopt_overlap 4 --expect-overlap gpt_tiny_pretrain ${TR_EQUIV_COMMON} optimizer.clip_grad=0.05 --
              ${TR_DISTOPT} ${TR_OVERLAP} ddp.overlap_param_gather=true
              optimizer.overlap_param_gather=true)
tr_equiv_test(llama_dp2_overlap_avg 2 --expect-overlap llama_tiny_pretrain ${TR_EQUIV_COMMON} -- ${TR_OVERLAP}
              ddp.average_in_collective=true)
tr_equiv_test(llama_dp4_distopt_pertoken 4 llama_tiny_pretrain ${TR_EQUIV_COMMON}
              model.calculate_per_token_loss=true -- ${TR_DISTOPT})
tr_equiv_test(llama_untied_dp4_distopt_overlap 4 llama_tiny_pretrain ${TR_EQUIV_COMMON}
              model.share_embeddings_and_output_weights=false -- ${TR_DISTOPT} ${TR_OVERLAP}
              ddp.overlap_param_gather=true optimizer.overlap_param_gather=true)
tr_equiv_test(gpt_dp8_sgd 8 gpt_tiny_pretrain ${TR_EQUIV_COMMON} optimizer.optimizer=sgd optimizer.lr=0.1 --
              ${TR_DISTOPT} ${TR_OVERLAP})

# Tensor parallel (vocab-parallel embedding and cross entropy, QKV split by query groups, SwiGLU
# gate/up split; TP 4 pads the vocabulary from 256 to 512), alone and with data parallelism.
set(TR_TP2 model.tensor_model_parallel_size=2)
set(TR_TP4 model.tensor_model_parallel_size=4)
tr_equiv_test(gpt_tp2 2 gpt_tiny_pretrain ${TR_EQUIV_COMMON} -- ${TR_TP2})
tr_equiv_test(llama_tp2 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} -- ${TR_TP2})
tr_equiv_test(gpt_tp4_padded_vocab 4 gpt_tiny_pretrain ${TR_EQUIV_COMMON} -- ${TR_TP4})
tr_equiv_test(llama_untied_tp2_dp2_distopt_overlap 4 --expect-overlap llama_tiny_pretrain
              ${TR_EQUIV_COMMON} model.share_embeddings_and_output_weights=false -- ${TR_TP2}
              ${TR_DISTOPT} ${TR_OVERLAP} ddp.overlap_param_gather=true
              optimizer.overlap_param_gather=true)
# Clipping with SGD (the step is proportional to the clip factor, so a norm that counted a
# TP-replicated parameter twice would show).
tr_equiv_test(llama_tp2_dp2_sgd_clip 4 llama_tiny_pretrain ${TR_EQUIV_COMMON}
              optimizer.optimizer=sgd optimizer.lr=0.1 optimizer.clip_grad=0.05 -- ${TR_TP2})
tr_equiv_test(gpt_tp4_dp2_sgd_clip 8 gpt_tiny_pretrain ${TR_EQUIV_COMMON}
              optimizer.optimizer=sgd optimizer.lr=0.1 optimizer.clip_grad=0.05 -- ${TR_TP4}
              ${TR_DISTOPT})
tr_equiv_test(gpt_tp2_dp4_distopt_overlap 8 --expect-overlap gpt_tiny_pretrain ${TR_EQUIV_COMMON}
              model.calculate_per_token_loss=true -- ${TR_TP2} ${TR_DISTOPT} ${TR_OVERLAP}
              ddp.overlap_param_gather=true optimizer.overlap_param_gather=true)

# TP larger than the query groups (llama_tiny: 4 heads in 2 groups): each of the 4 TP ranks holds
# one query head and a copy of its group's key and value heads, whose gradients are summed over
# the 2 ranks sharing the group (an all-reduce --check-volume counts); the copies must stay equal
# bit for bit. Alone, with SP, with DP and the distributed optimizer (weight decay, overlap),
# and with SGD + clipping, where a norm that counted the copies twice would change the step.
tr_equiv_test(llama_tp4_kv_replicas 4 llama_tiny_pretrain ${TR_EQUIV_COMMON} -- ${TR_TP4})
tr_equiv_test(llama_tp4_sp_kv_replicas 4 llama_tiny_pretrain ${TR_EQUIV_COMMON}
              train.micro_batch_size=2 model.hidden_dropout=0.1 -- ${TR_TP4} model.sequence_parallel=true)
tr_equiv_test(llama_tp4_dp2_distopt_kv_replicas 8 --expect-overlap llama_tiny_pretrain
              ${TR_EQUIV_COMMON} -- ${TR_TP4} ${TR_DISTOPT} ${TR_OVERLAP})
tr_equiv_test(llama_tp4_sgd_clip_kv_replicas 4 llama_tiny_pretrain ${TR_EQUIV_COMMON}
              optimizer.optimizer=sgd optimizer.lr=0.1 optimizer.clip_grad=0.05 -- ${TR_TP4})
tr_equiv_test(llama_tp4_dp2_distopt_sgd_clip_kv_replicas 8 llama_tiny_pretrain ${TR_EQUIV_COMMON}
              optimizer.optimizer=sgd optimizer.lr=0.1 optimizer.clip_grad=0.05 -- ${TR_TP4}
              ${TR_DISTOPT})
# GPT with 2 query groups: the QKV bias's key-value columns are copied and summed the same way.
tr_equiv_test(gpt_groups2_tp4_kv_replicas 4 gpt_tiny_pretrain ${TR_EQUIV_COMMON}
              model.num_query_groups=2 -- ${TR_TP4})

# Sequence parallel: norms, residuals and dropout on sequence chunks, all-gather/reduce-scatter
# around the TP regions, norm and position-embedding gradients summed over TP; micro batch 2
# checks the chunk order of several sequences, dropout that each chunk draws the global mask.
set(TR_SP model.sequence_parallel=true)
tr_equiv_test(gpt_tp2_sp 2 gpt_tiny_pretrain ${TR_EQUIV_COMMON} -- ${TR_TP2} ${TR_SP})
tr_equiv_test(llama_tp2_sp 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} -- ${TR_TP2} ${TR_SP})
tr_equiv_test(gpt_tp4_sp_mbs2_dropout 4 gpt_tiny_pretrain ${TR_EQUIV_COMMON}
              train.micro_batch_size=2 model.hidden_dropout=0.1 -- ${TR_TP4} ${TR_SP})
tr_equiv_test(llama_tp2_sp_dp2_distopt_overlap 4 --expect-overlap llama_tiny_pretrain
              ${TR_EQUIV_COMMON} train.micro_batch_size=2 model.hidden_dropout=0.1 -- ${TR_TP2}
              ${TR_SP} ${TR_DISTOPT} ${TR_OVERLAP})
tr_equiv_test(gpt_tp2_sp_dp2_sgd_clip 4 gpt_tiny_pretrain ${TR_EQUIV_COMMON}
              optimizer.optimizer=sgd optimizer.lr=0.1 optimizer.clip_grad=0.05 -- ${TR_TP2}
              ${TR_SP})

# QK layernorm (Qwen3's per-head q/k RMSNorm before RoPE): the norm weights are replicated while
# the heads are split, so their gradients are summed over TP with and without SP; the LayerNorm
# form adds a bias (with SGD: the key norm's bias has a small gradient, from RoPE alone, and
# Adam's first steps would turn its rounding noise into whole steps, 1.2e-4 apart). PP below
# with the 8-layer pipeline settings.
set(TR_QKN model.qk_layernorm=true)
tr_equiv_test(llama_qknorm_tp2 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_QKN} -- ${TR_TP2})
tr_equiv_test(llama_qknorm_tp2_sp 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_QKN} -- ${TR_TP2}
              ${TR_SP})
tr_equiv_test(llama_qknorm_dp2_distopt 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_QKN} --
              ${TR_DISTOPT})
# With DP, the distributed optimizer and overlapped reduction; SGD with clipping, so a grad norm
# that counted the replicated q/k norms on both TP ranks would change the step.
tr_equiv_test(llama_qknorm_tp2_sp_dp2_distopt_overlap 4 --expect-overlap llama_tiny_pretrain
              ${TR_EQUIV_COMMON} ${TR_QKN} train.micro_batch_size=2 -- ${TR_TP2} ${TR_SP}
              ${TR_DISTOPT} ${TR_OVERLAP})
tr_equiv_test(llama_qknorm_tp2_dp2_sgd_clip 4 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_QKN}
              optimizer.optimizer=sgd optimizer.lr=0.1 optimizer.clip_grad=0.05 -- ${TR_TP2})
tr_equiv_test(llama_qknorm_layernorm_tp2_sp 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_QKN}
              model.normalization=LayerNorm optimizer.optimizer=sgd optimizer.lr=0.1 -- ${TR_TP2}
              ${TR_SP})

# The comparison can fail: a different seed in the parallel run must be reported.
tr_equiv_test(detects_difference 2 --expect-differ gpt_tiny_pretrain ${TR_EQUIV_COMMON} --
              rng.seed=4321)

# Pipeline parallel (runtime/pipeline/executor.c over the schedules of runtime/pipeline): 8 layers so
# that PP 4 x VPP 2 has a layer per virtual stage; 8 microbatches per iteration. Each rank holds
# only its stages; equiv_check also checks that (parameters and activation sets per layer), that
# the tied embedding's two copies stay bitwise equal, and the comm volume of the rank's own
# layers (a recomputed forward would run its TP collectives twice).
set(TR_PP_COMMON ${TR_EQUIV_COMMON} model.num_layers=8)
function(tr_equiv_pp_test name np)
  tr_equiv_test(${name} ${np} ${ARGN})
endfunction()
set(TR_PP2 model.pipeline_model_parallel_size=2)
set(TR_PP4 model.pipeline_model_parallel_size=4)
set(TR_VPP2 model.virtual_pipeline_model_parallel_size=2)
# Evaluation split over DP: each DP rank evaluates its share of the batch's microbatches and the
# loss sums meet over DP (the validation loss still equals the single rank's).
tr_equiv_test(gpt_dp2_eval 2 gpt_tiny_pretrain ${TR_EQUIV_COMMON} validation.eval_iters=2
              validation.eval_interval=5 --)
tr_equiv_pp_test(gpt_pp2_dp2_eval 4 gpt_tiny_pretrain ${TR_PP_COMMON} validation.eval_iters=2
                 validation.eval_interval=3 -- ${TR_PP2} ${TR_DISTOPT})
# 1F1B (tied embedding: the last stage's copy of the word embedding), interleaved, both p2p modes.
tr_equiv_pp_test(gpt_pp2 2 gpt_tiny_pretrain ${TR_PP_COMMON} -- ${TR_PP2})
tr_equiv_pp_test(llama_pp4 4 llama_tiny_pretrain ${TR_PP_COMMON} -- ${TR_PP4})
# With evaluation: the forward-only pass through the interleaved stages gives the single-rank
# validation loss.
tr_equiv_pp_test(llama_pp2_vpp2_eval 2 llama_tiny_pretrain ${TR_PP_COMMON} validation.eval_iters=2
                 validation.eval_interval=5 -- ${TR_PP2} ${TR_VPP2})
tr_equiv_pp_test(gpt_pp4_vpp2_dropout 4 gpt_tiny_pretrain ${TR_PP_COMMON} model.hidden_dropout=0.1
                 -- ${TR_PP4} ${TR_VPP2})
tr_equiv_pp_test(llama_pp4_vpp2_overlap_unbatched 4 llama_tiny_pretrain ${TR_PP_COMMON} --
                 ${TR_PP4} ${TR_VPP2} model.overlap_p2p_comm=true model.batch_p2p_comm=false)
tr_equiv_pp_test(llama_qknorm_pp2 2 llama_tiny_pretrain ${TR_PP_COMMON} ${TR_QKN} -- ${TR_PP2})
# Uneven stages.
tr_equiv_pp_test(llama_pp2_first3 2 llama_tiny_pretrain ${TR_PP_COMMON} -- ${TR_PP2}
                 model.num_layers_in_first_pipeline_stage=3)
tr_equiv_pp_test(gpt_pp4_first1_last3 4 gpt_tiny_pretrain ${TR_PP_COMMON} -- ${TR_PP4}
                 model.num_layers_in_first_pipeline_stage=1 model.num_layers_in_last_pipeline_stage=3)
# Clipping with SGD: a grad norm that counted a stage's parameters on every pipeline rank (or the
# tied embedding twice) would change the step.
tr_equiv_pp_test(gpt_pp4_sgd_clip 4 gpt_tiny_pretrain ${TR_PP_COMMON} optimizer.optimizer=sgd
                 optimizer.lr=0.1 optimizer.clip_grad=0.05 -- ${TR_PP4})
# With tensor, sequence and data parallelism and the distributed optimizer, up to 8 ranks.
tr_equiv_pp_test(llama_tp2_pp2 4 llama_tiny_pretrain ${TR_PP_COMMON} -- ${TR_TP2} ${TR_PP2})
# TP 4 over the 2 query groups under the pipeline: the key-value sums of each stage's own layers.
tr_equiv_pp_test(llama_tp4_pp2_kv_replicas 8 llama_tiny_pretrain ${TR_PP_COMMON} -- ${TR_TP4}
                 ${TR_PP2})
tr_equiv_pp_test(gpt_pp2_dp2_distopt_overlap 4 gpt_tiny_pretrain ${TR_PP_COMMON} -- ${TR_PP2}
                 ${TR_DISTOPT} ${TR_OVERLAP} ddp.overlap_param_gather=true
                 optimizer.overlap_param_gather=true)
tr_equiv_pp_test(llama_untied_pertoken_pp2_dp2_distopt 4 llama_tiny_pretrain ${TR_PP_COMMON}
                 model.calculate_per_token_loss=true model.share_embeddings_and_output_weights=false
                 -- ${TR_PP2} ${TR_DISTOPT})
tr_equiv_pp_test(llama_tp2_sp_pp2_vpp2_dp2_distopt_overlap 8 llama_tiny_pretrain ${TR_PP_COMMON}
                 train.micro_batch_size=2 model.hidden_dropout=0.1 -- ${TR_TP2} ${TR_SP} ${TR_PP2}
                 ${TR_VPP2} ${TR_DISTOPT} ${TR_OVERLAP})
tr_equiv_pp_test(gpt_tp2_pp4_first3_last1 8 gpt_tiny_pretrain ${TR_PP_COMMON} -- ${TR_TP2} ${TR_PP4}
                 model.num_layers_in_first_pipeline_stage=3 model.num_layers_in_last_pipeline_stage=1)

# Attention dropout (Megatron's GPT default, 0.1): the masks are keyed by the seed, the global
# microbatch, the global layer, the batch row, the global head and the positions
# (kernels/common/attn_dropout.h), so TP ranks (other heads), sequence parallelism (the attention
# region is whole), pipeline stages (other layers) and DP ranks (other microbatches) draw the
# single-rank run's masks. Micro batch 2 puts two rows in each mask. The last run shows that the
# dropout changes the training enough for the comparison to see it.
set(TR_ATTN_DROP model.attention_dropout=0.1)
tr_equiv_test(gpt_attn_dropout_tp2 2 gpt_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_ATTN_DROP}
              train.micro_batch_size=2 -- ${TR_TP2})
tr_equiv_test(gpt_attn_dropout_tp2_sp 2 gpt_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_ATTN_DROP}
              train.micro_batch_size=2 -- ${TR_TP2} ${TR_SP})
tr_equiv_pp_test(gpt_attn_dropout_pp2 2 gpt_tiny_pretrain ${TR_PP_COMMON} ${TR_ATTN_DROP} --
                 ${TR_PP2})
tr_equiv_test(gpt_attn_dropout_dp2 2 gpt_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_ATTN_DROP}
              train.micro_batch_size=2 --)
tr_equiv_test(gpt_attn_dropout_detected 2 --expect-differ gpt_tiny_pretrain ${TR_EQUIV_COMMON} --
              ${TR_TP2} ${TR_ATTN_DROP})

# Mixed precision (docs/runtime.md, "Mixed precision"). The losses must match the single-rank run
# of the same precision at 1e-5; the parameters at 5e-3 (--param-tol): bf16 rounding is per
# element, so equal fp32 values round equally on every layout, but the layouts' fp32 sums differ
# in the last bits (DP reduction order, TP partial sums), and a value that lands on the other side
# of a bf16 rounding boundary moves by a bf16 ulp (2^-8 relative). Measured after 5 iterations:
# ~9e-4 (TP2, DP2), against 3e-2 between bf16 and fp32 (the last test: the tolerance still tells
# them apart).
set(TR_BF16 mixed_precision.preset=bf16_mixed)
function(tr_equiv_lowp_test name np)
  tr_equiv_test(${name} ${np} --param-tol 5e-3 ${ARGN})
endfunction()
tr_equiv_lowp_test(llama_tp2_bf16 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_BF16} -- ${TR_TP2})
# With qk_layernorm (measured: losses 3.2e-6, parameters 3.3e-3, one bf16 ulp of an fc2 weight).
tr_equiv_lowp_test(llama_qknorm_tp2_bf16 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_BF16}
                   model.qk_layernorm=true -- ${TR_TP2})
tr_equiv_lowp_test(llama_dp2_distopt_bf16 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_BF16} --
                   ${TR_DISTOPT})
# Expert parallelism in bf16: both gradient buffers rounded and checked for inf/NaN, the verdict
# reduced over the world (measured: losses 2.1e-6, parameters 1.6e-4).
tr_equiv_lowp_test(moe_ep2_distopt_bf16 2 moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_BF16} --
                   model.expert_model_parallel_size=2 ${TR_DISTOPT})
# fp16 with dynamic loss scaling from 2^24 (hysteresis 1): the first three steps overflow in the
# vocab-parallel logit gradients, then five train; the inf/NaN verdict is all-reduced, so both
# TP ranks skip the same steps as the single rank and lower the scale alike. (Under DP the per-rank loss is divided
# by fewer microbatches, so overflow thresholds move with the DP size, as in Megatron; the DP test
# uses a static scale.)
tr_equiv_lowp_test(llama_tp2_fp16_dynamic 2 llama_tiny_pretrain ${TR_EQUIV_COMMON}
                   train.train_iters=8 mixed_precision.preset=fp16_mixed mixed_precision.grad_reduce_in_fp32=true
                   mixed_precision.initial_loss_scale=16777216 mixed_precision.hysteresis=1 --
                   ${TR_TP2})
tr_equiv_lowp_test(gpt_dp2_distopt_fp16_static 2 gpt_tiny_pretrain ${TR_EQUIV_COMMON}
                   mixed_precision.preset=fp16_mixed mixed_precision.grad_reduce_in_fp32=true
                   mixed_precision.loss_scale=1024 -- ${TR_DISTOPT})
tr_equiv_lowp_test(bf16_detects_fp32 2 --expect-differ llama_tiny_pretrain ${TR_EQUIV_COMMON}
                   mixed_precision.preset=fp32 -- ${TR_BF16} ${TR_TP2})

# Pipeline parallelism in mixed precision (docs/pipeline.md, "What crosses stages"): the stage
# outputs and their gradients travel in pipeline_dtype, --check-volume counting their real bytes
# (2 an element in bf16/fp16). With pipeline_dtype=fp32 nothing is rounded at a boundary and the
# bf16 tolerances above hold (measured: losses 2.3e-6, parameters 9.7e-4).
set(TR_FP32_WIRE mixed_precision.pipeline_dtype=fp32)
tr_equiv_lowp_test(llama_pp2_bf16_fp32wire 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_BF16} --
                   ${TR_PP2} ${TR_FP32_WIRE})
# fp16 (fp16 messages) with dynamic loss scaling from 2^24: the first three steps overflow and are
# skipped on both stages as on the single rank (equiv_check compares the skip counts and the final
# scale on every rank; --min-skips makes sure the case is exercised). Measured: losses 1e-6,
# parameters 1.4e-3 (fp16's 10-bit mantissa makes the boundary rounding 8x finer than bf16's).
tr_equiv_lowp_test(llama_pp2_fp16_dynamic 2 --min-skips 3 llama_tiny_pretrain ${TR_EQUIV_COMMON}
                   train.train_iters=8 mixed_precision.preset=fp16_mixed
                   mixed_precision.grad_reduce_in_fp32=true mixed_precision.initial_loss_scale=16777216
                   mixed_precision.hysteresis=1 -- ${TR_PP2})
# bf16 messages round the residual stream (forward) and its gradient (backward) once per
# microbatch and boundary, relative error < 2^-8 each, which the single-rank run never does.
# These runs use SGD: its step is proportional to the gradient, so the parameters move by the
# rounding's effect on the gradients (Adam's first steps are ~lr x sign(g) and turn the rounding
# noise of near-zero gradients into whole steps: with Adam the parameters of PP2 differ by 1.2e-2,
# of PP2 x VPP2 by 5e-2, no better than bf16 against fp32 at 3e-2). Measured after 5 iterations:
# losses <= 1.13e-5 and parameters <= 6.2e-3 (PP2 x DP2, a layernorm bias; 5.6e-4 to 1.1e-3
# otherwise); the bound, 5e-5 and 2e-2, leaves 3-4x. (An fp32 single-rank run is no negative
# case here: for this 2-layer model one boundary rounding moves the result about as far as bf16
# GEMMs do, 8.8e-6 and 6.2e-4.) The bound still bites: a 0.5% larger learning rate in the
# parallel run (losses 2.3e-4) fails it, and the bf16-message run fails the bound that the same
# run with fp32 messages meets (2e-6 and 1.5e-4), so the messages really are rounded. With fp32
# messages the stages still add the tied embedding's two gradients in another order than the
# single rank, and a last-bit difference can flip a bf16 rounding of a weight: measured 0 and
# 9e-8 on one 2-core machine, 2.7e-7 and 3.1e-5 on another (both AVX-512; OpenBLAS picks other
# kernels); with bf16 messages 6.5e-6 and 5.6e-4, and 8.2e-6 and 5.6e-4.
set(TR_PP_SGD ${TR_EQUIV_COMMON} optimizer.optimizer=sgd optimizer.lr=0.1)
function(tr_equiv_pp_bf16_test name np)
  tr_equiv_test(${name} ${np} --tol 5e-5 --param-tol 2e-2 ${ARGN})
endfunction()
tr_equiv_pp_bf16_test(llama_pp2_bf16 2 llama_tiny_pretrain ${TR_PP_SGD} ${TR_BF16} -- ${TR_PP2})
tr_equiv_pp_bf16_test(llama_pp2_bf16_detects_lr 2 --expect-differ llama_tiny_pretrain ${TR_PP_SGD}
                      ${TR_BF16} -- ${TR_PP2} optimizer.lr=0.1005)
tr_equiv_test(llama_pp2_bf16_fp32wire_sgd 2 --tol 2e-6 --param-tol 1.5e-4 llama_tiny_pretrain
              ${TR_PP_SGD} ${TR_BF16} -- ${TR_PP2} ${TR_FP32_WIRE})
tr_equiv_test(llama_pp2_bf16_rounds 2 --expect-differ --tol 2e-6 --param-tol 1.5e-4
              llama_tiny_pretrain ${TR_PP_SGD} ${TR_BF16} -- ${TR_PP2})
tr_equiv_pp_bf16_test(llama_tp2_sp_pp2_bf16 4 llama_tiny_pretrain ${TR_PP_SGD} ${TR_BF16} --
                      ${TR_TP2} ${TR_SP} ${TR_PP2})
tr_equiv_pp_bf16_test(gpt_pp2_dp2_distopt_bf16 4 gpt_tiny_pretrain ${TR_PP_SGD} ${TR_BF16} --
                      ${TR_PP2} ${TR_DISTOPT})
# Interleaved, with the forward-only evaluation (bf16 messages too; validation loss 9.5e-6), 4
# layers, one per virtual stage; unbatched overlapped transfers (one isend/irecv per message,
# waited later), where the runs above post batches.
tr_equiv_pp_bf16_test(llama_pp2_vpp2_bf16_eval 2 llama_tiny_pretrain ${TR_PP_SGD} ${TR_BF16}
                      model.num_layers=4 validation.eval_iters=2 validation.eval_interval=5 --
                      ${TR_PP2} ${TR_VPP2} model.overlap_p2p_comm=true model.batch_p2p_comm=false)

# Fine-tuning (SFT) on the shipped JSONL set, packed: document masks, per-document positions and
# loss masks under TP, DP, TP + sequence parallel + DP (learned positions gathered per rank's
# sequence chunk) and PP (each stage keeps every in-flight microbatch's layout in its slot;
# interleaved with TP, and the forward-only evaluation).
set(TR_SFT_COMMON dataset.dataset_root=${CMAKE_SOURCE_DIR}/data/sft_tiny dataset.pad_seq_to_mult=2
                  train.train_iters=5 train.global_batch_size=8 train.micro_batch_size=1
                  validation.eval_iters=0 logger.log_interval=1000 scheduler.lr_warmup_iters=2
                  optimizer.lr=3e-3)
tr_equiv_test(llama_sft_tp2 2 llama_tiny_sft ${TR_SFT_COMMON} -- ${TR_TP2})
tr_equiv_test(llama_sft_dp2 2 llama_tiny_sft ${TR_SFT_COMMON} --)
set(TR_SFT_GPT dataset.type=sft dataset.enable_offline_packing=true dataset.packed_sequence_size=64
               dataset.pad_to_max_length=true)
tr_equiv_test(gpt_sft_tp2_sp_dp2 4 gpt_tiny_pretrain ${TR_SFT_COMMON} ${TR_SFT_GPT} -- ${TR_TP2} ${TR_SP})
tr_equiv_test(llama_sft_pp2_eval 2 llama_tiny_sft ${TR_SFT_COMMON} model.num_layers=4
              validation.eval_iters=1 validation.eval_interval=5 -- ${TR_PP2})
tr_equiv_test(gpt_sft_tp2_pp2_vpp2 4 gpt_tiny_pretrain ${TR_SFT_COMMON} ${TR_SFT_GPT} model.num_layers=4
              -- ${TR_TP2} ${TR_PP2} ${TR_VPP2})

# LoRA (frozen base, adapters trained) from a pretrained checkpoint that a setup test writes:
# DP, TP x DP with the adapters split as Megatron's ParallelLinearAdapter, and TP x PP. The TP
# runs have adapter collectives the analytic volume does not count, so they skip --check-volume.
set(TR_LORA_BASE ${CMAKE_BINARY_DIR}/equiv_lora_base)
add_test(NAME mpi_equiv_lora_base
         COMMAND $<TARGET_FILE:run_recipe> --recipe llama_tiny_pretrain train.train_iters=5
                 validation.eval_iters=0 checkpoint.save=${TR_LORA_BASE} checkpoint.save_interval=5
                 logger.output_dir=${TR_LORA_BASE}/log)
set_tests_properties(mpi_equiv_lora_base PROPERTIES LABELS "mpi" FIXTURES_SETUP lora_base
                     ENVIRONMENT "${TR_MPIRUN_ENV};OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
set(TR_LORA_COMMON ${TR_SFT_COMMON} checkpoint.pretrained_checkpoint=${TR_LORA_BASE} optimizer.lr=1e-2)
tr_equiv_test(llama_lora_dp2 2 llama_tiny_lora ${TR_LORA_COMMON} --)
function(tr_equiv_lora_tp_test name)
  tr_mpirun_test(mpi_equiv_${name} 4 equiv_check llama_tiny_lora ${TR_LORA_COMMON} ${ARGN})
  set_tests_properties(mpi_equiv_${name} PROPERTIES FIXTURES_REQUIRED lora_base)
endfunction()
tr_equiv_lora_tp_test(llama_lora_tp2_dp2 -- ${TR_TP2})
tr_equiv_lora_tp_test(llama_lora_tp2_pp2 -- ${TR_TP2} ${TR_PP2})
# TP 4 over the 2 query groups: the QKV adapter's B holds key-value rows copied like its layer's.
tr_equiv_lora_tp_test(llama_lora_tp4_kv_replicas -- ${TR_TP4})
# Adapter dropout: masks keyed by the global microbatch and the logical input element.
tr_equiv_lora_tp_test(llama_lora_dropout_tp2_dp2 peft.dropout=0.1 optimizer.lr=3e-3 -- ${TR_TP2})
# Sequence parallelism: the adapters see whole sequences inside the TP region; a row layer's
# adapter output and a column layer's adapter input gradient are taken at this rank's chunk rows
# (micro batch 2, unpacked: the chunks of several sequences).
set(TR_LORA_UNPACKED train.micro_batch_size=2 dataset.enable_offline_packing=false
                     dataset.packed_sequence_size=null)
tr_equiv_lora_tp_test(llama_lora_tp2_sp_dp2 ${TR_LORA_UNPACKED} -- ${TR_TP2} ${TR_SP})
tr_equiv_lora_tp_test(llama_lora_dropout_tp2_sp_dp2 peft.dropout=0.1 optimizer.lr=3e-3
                      ${TR_LORA_UNPACKED} -- ${TR_TP2} ${TR_SP})
set_tests_properties(mpi_equiv_llama_lora_dp2 PROPERTIES FIXTURES_REQUIRED lora_base)
# The distributed optimizer (frozen ranges of a shard are never stepped) and gradient reduction
# overlapped with backward: frozen norm gradients are zeroed before their bucket may start, the
# adapters report ready (and, with the parameter all-gather overlapped, wait for it) like every
# other tensor.
function(tr_equiv_lora_dp_test name np)
  tr_mpirun_test(mpi_equiv_${name} ${np} equiv_check ${ARGN})
  set_tests_properties(mpi_equiv_${name} PROPERTIES FIXTURES_REQUIRED lora_base)
endfunction()
tr_equiv_lora_dp_test(llama_lora_dp2_distopt 2 llama_tiny_lora ${TR_LORA_COMMON} -- ${TR_DISTOPT})
tr_equiv_lora_dp_test(llama_lora_dp2_overlap_clip 2 --expect-overlap llama_tiny_lora ${TR_LORA_COMMON}
                      optimizer.clip_grad=0.05 -- ${TR_OVERLAP})
# DoRA: magnitudes split with a column layer's output and whole on a row layer, whose row norms
# are summed over TP; the pre-scale output recomputed in backward. (The smaller learning rate
# keeps Adam from magnifying the TP reductions' last-bit differences in near-zero gradients:
# at 1e-2 TP 2 x PP 2 reaches 1.2e-5 with bitwise-equal losses; a wrong gradient gives 1e-2.)
set(TR_DORA peft.scheme=dora optimizer.lr=3e-3)
tr_equiv_lora_tp_test(llama_dora_tp2_dp2 ${TR_DORA} -- ${TR_TP2})
tr_equiv_lora_tp_test(llama_dora_tp2_sp_dp2 ${TR_DORA} ${TR_LORA_UNPACKED} -- ${TR_TP2} ${TR_SP})
tr_equiv_lora_tp_test(llama_dora_tp2_pp2 ${TR_DORA} -- ${TR_TP2} ${TR_PP2})
# TP 4 over 2 query groups: the fused QKV magnitude's key-value copies are summed like the rows.
tr_equiv_lora_tp_test(llama_dora_tp4 ${TR_DORA} -- ${TR_TP4})
tr_equiv_lora_dp_test(llama_dora_dp2_distopt_overlap 2 --expect-overlap llama_tiny_lora
                      ${TR_LORA_COMMON} ${TR_DORA} -- ${TR_DISTOPT} ${TR_OVERLAP})
tr_equiv_lora_dp_test(llama_lora_tp2_sp_dp2_distopt_overlap 4 --expect-overlap llama_tiny_lora
                      ${TR_LORA_COMMON} ${TR_LORA_UNPACKED} -- ${TR_TP2} ${TR_SP} ${TR_DISTOPT}
                      ${TR_OVERLAP} ddp.overlap_param_gather=true optimizer.overlap_param_gather=true)

# Activation recomputation (runtime/model/recompute.c): each run against the same layout without
# recomputation, losses and final parameters bitwise equal (--same-layout), with fewer activation
# floats on every rank (--fewer-acts); hidden dropout on, so the recomputed forwards must replay
# the slot's masks. No --check-volume: a recomputed forward runs its TP collectives again.
# tr_equiv_recompute_test(NAME NP RECIPE [COMMON_KEY=VALUE...] -- [LAYOUT...] -- [RECOMPUTE...])
function(tr_equiv_recompute_test name np)
  tr_mpirun_test(mpi_equiv_${name} ${np} equiv_check --same-layout --fewer-acts ${ARGN})
endfunction()
set(TR_RC_COMMON ${TR_EQUIV_COMMON} model.hidden_dropout=0.1)
set(TR_RC_FULL model.recompute_granularity=full)
set(TR_RC_SEL model.recompute_granularity=selective)
# 1F1B with 8 microbatches over 2 stages (the first stage holds 2 in flight), interleaved.
tr_equiv_recompute_test(gpt_pp2_recompute_full_uniform 2 gpt_tiny_pretrain ${TR_RC_COMMON}
                        model.num_layers=8 -- ${TR_PP2} -- ${TR_RC_FULL}
                        model.recompute_method=uniform model.recompute_num_layers=3)
tr_equiv_recompute_test(gpt_pp2_recompute_full_block 2 gpt_tiny_pretrain ${TR_RC_COMMON}
                        model.num_layers=8 -- ${TR_PP2} -- ${TR_RC_FULL}
                        model.recompute_method=block model.recompute_num_layers=2)
tr_equiv_recompute_test(llama_pp2_vpp2_recompute_full 2 llama_tiny_pretrain ${TR_RC_COMMON}
                        model.num_layers=8 -- ${TR_PP2} ${TR_VPP2} -- ${TR_RC_FULL}
                        model.recompute_method=uniform model.recompute_num_layers=1)
tr_equiv_recompute_test(llama_pp2_vpp2_recompute_selective 2 llama_tiny_pretrain ${TR_RC_COMMON}
                        model.num_layers=8 -- ${TR_PP2} ${TR_VPP2} -- ${TR_RC_SEL}
                        model.recompute_modules=[core_attn,mlp,layernorm])
# Tensor parallel, with sequence parallelism, in bf16 with half-precision saved inputs.
tr_equiv_recompute_test(llama_tp2_recompute_core_attn 2 llama_tiny_pretrain ${TR_RC_COMMON}
                        model.num_layers=4 -- ${TR_TP2} -- ${TR_RC_SEL})
tr_equiv_recompute_test(llama_tp2_sp_recompute_full_uniform 2 llama_tiny_pretrain ${TR_RC_COMMON}
                        model.num_layers=4 -- ${TR_TP2} ${TR_SP} -- ${TR_RC_FULL}
                        model.recompute_method=uniform model.recompute_num_layers=1)
tr_equiv_recompute_test(llama_tp2_sp_bf16_recompute_block 2 llama_tiny_pretrain ${TR_RC_COMMON}
                        ${TR_BF16} model.num_layers=4 -- ${TR_TP2} ${TR_SP} -- ${TR_RC_FULL}
                        model.recompute_method=block model.recompute_num_layers=2)
tr_equiv_recompute_test(gpt_tp2_sp_bf16_recompute_selective 2 gpt_tiny_pretrain ${TR_RC_COMMON}
                        ${TR_BF16} model.num_layers=4 -- ${TR_TP2} ${TR_SP} -- ${TR_RC_SEL}
                        model.recompute_modules=[mlp,layernorm])
# TP x PP with packed fine-tuning sequences.
tr_equiv_recompute_test(gpt_sft_tp2_pp2_recompute_full 4 gpt_tiny_pretrain ${TR_SFT_COMMON}
                        ${TR_SFT_GPT} model.hidden_dropout=0.1 model.num_layers=4 -- ${TR_TP2}
                        ${TR_PP2} -- ${TR_RC_FULL} model.recompute_method=uniform
                        model.recompute_num_layers=1)
# LoRA with adapter dropout under TP.
tr_equiv_recompute_test(llama_lora_tp2_recompute_full 2 llama_tiny_lora ${TR_LORA_COMMON}
                        peft.dropout=0.1 model.hidden_dropout=0.1 -- ${TR_TP2} -- ${TR_RC_FULL}
                        model.recompute_method=uniform model.recompute_num_layers=1)
set_tests_properties(mpi_equiv_llama_lora_tp2_recompute_full PROPERTIES FIXTURES_REQUIRED lora_base)
# Attention dropout replayed by the recomputed attention (core_attn, and a whole layer).
tr_equiv_recompute_test(gpt_attn_dropout_tp2_recompute_core_attn 2 gpt_tiny_pretrain ${TR_RC_COMMON}
                        model.attention_dropout=0.1 model.num_layers=4 -- ${TR_TP2} -- ${TR_RC_SEL})
tr_equiv_recompute_test(gpt_attn_dropout_pp2_recompute_full 2 gpt_tiny_pretrain ${TR_RC_COMMON}
                        model.attention_dropout=0.1 model.num_layers=8 -- ${TR_PP2} -- ${TR_RC_FULL}
                        model.recompute_method=uniform model.recompute_num_layers=2)
# QK layernorm (its inputs and statistics are recomputed with q, k, v) and DoRA under TP.
tr_equiv_recompute_test(llama_qknorm_tp2_sp_recompute_full 2 llama_tiny_pretrain ${TR_RC_COMMON}
                        model.qk_layernorm=true model.num_layers=4 -- ${TR_TP2} ${TR_SP} --
                        ${TR_RC_FULL} model.recompute_method=uniform model.recompute_num_layers=1)
tr_equiv_recompute_test(llama_qknorm_pp2_recompute_selective 2 llama_tiny_pretrain ${TR_RC_COMMON}
                        model.qk_layernorm=true model.num_layers=4 -- ${TR_PP2} -- ${TR_RC_SEL}
                        model.recompute_modules=[core_attn,mlp,layernorm])
tr_equiv_recompute_test(llama_dora_tp2_recompute_full 2 llama_tiny_lora ${TR_LORA_COMMON} ${TR_DORA}
                        model.hidden_dropout=0.1 -- ${TR_TP2} -- ${TR_RC_FULL}
                        model.recompute_method=uniform model.recompute_num_layers=1)
set_tests_properties(mpi_equiv_llama_dora_tp2_recompute_full PROPERTIES FIXTURES_REQUIRED lora_base)
# PP2 x DP2 with the distributed optimizer, overlapped gradient reduction and parameter gather,
# and evaluation between the steps.
tr_equiv_recompute_test(gpt_pp2_dp2_distopt_eval_recompute_full 4 gpt_tiny_pretrain ${TR_RC_COMMON}
                        model.num_layers=8 validation.eval_iters=2 validation.eval_interval=3 --
                        ${TR_PP2} ${TR_DISTOPT} ${TR_OVERLAP} ddp.overlap_param_gather=true
                        optimizer.overlap_param_gather=true -- ${TR_RC_FULL}
                        model.recompute_method=uniform model.recompute_num_layers=2)
# On the cpu-strict device (device buffers the host never touches), bf16, PP2.
tr_equiv_recompute_test(llama_pp2_bf16_strict_recompute_selective 2 llama_tiny_pretrain
                        ${TR_RC_COMMON} ${TR_BF16} model.num_layers=4 -- ${TR_PP2} -- ${TR_RC_SEL}
                        model.recompute_modules=[core_attn,mlp,layernorm])
set_tests_properties(mpi_equiv_llama_pp2_bf16_strict_recompute_selective PROPERTIES
                     ENVIRONMENT "${TR_MPIRUN_ENV};TRESTLE_DEVICE=cpu-strict")
# The comparison can fail: another seed in the tested run is reported.
tr_mpirun_test(mpi_equiv_recompute_detects_difference 2 equiv_check --same-layout --expect-differ
               gpt_tiny_pretrain ${TR_RC_COMMON} model.num_layers=8 -- ${TR_PP2} -- ${TR_RC_FULL}
               model.recompute_method=uniform model.recompute_num_layers=1 rng.seed=4321)

# Tensor-parallel communication overlap (comm_overlap.tp_comm_overlap, runtime/model/linear.c):
# the sequence-parallel all-gathers and reduce-scatters split into pieces pipelined with the GEMMs.
# Against the single rank with the analytic volume (the pieces move the same bytes), two
# sequences per microbatch, TP2 and TP4, with LoRA once (its adapters on the overlapped layers).
set(TR_TPO ${TR_SP} comm_overlap.tp_comm_overlap=true)
tr_equiv_test(llama_tp2_sp_tp_overlap 2 llama_tiny_pretrain ${TR_EQUIV_COMMON}
              train.micro_batch_size=2 -- ${TR_TP2} ${TR_TPO})
tr_equiv_test(llama_tp4_sp_tp_overlap 4 llama_tiny_pretrain ${TR_EQUIV_COMMON}
              train.micro_batch_size=2 -- ${TR_TP4} ${TR_TPO})
tr_equiv_test(gpt_tp2_sp_tp_overlap 2 gpt_tiny_pretrain ${TR_EQUIV_COMMON}
              train.micro_batch_size=2 -- ${TR_TP2} ${TR_TPO})
tr_equiv_test(gpt_tp4_sp_tp_overlap_rs_dgrad 4 gpt_tiny_pretrain ${TR_EQUIV_COMMON}
              train.micro_batch_size=2 -- ${TR_TP4} ${TR_TPO} model.tp_comm_overlap_rs_dgrad=true)
tr_equiv_lora_tp_test(llama_lora_tp2_sp_tp_overlap ${TR_LORA_UNPACKED} --
                      ${TR_TP2} ${TR_TPO} model.tp_comm_overlap_disable_qkv=true)
# DoRA (magnitude scaling around the pipelined GEMMs), bf16 (half-precision saved inputs: qkv's
# and fc1's gathers stay whole, the other pieces' GEMMs round like the whole one; measured:
# losses 2.7e-6, parameters 3.1e-3, the bf16 class of tr_equiv_lowp_test), TP 2 x PP 2.
tr_equiv_lora_tp_test(llama_dora_tp2_sp_tp_overlap ${TR_LORA_UNPACKED} ${TR_DORA} -- ${TR_TP2}
                      ${TR_TPO})
tr_equiv_lowp_test(llama_tp2_sp_bf16_tp_overlap 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_BF16}
                   train.micro_batch_size=2 -- ${TR_TP2} ${TR_TPO})
tr_equiv_test(gpt_tp2_sp_pp2_tp_overlap 4 gpt_tiny_pretrain ${TR_EQUIV_COMMON} model.num_layers=4
              train.micro_batch_size=2 -- ${TR_TP2} ${TR_PP2} ${TR_TPO})
# Bitwise against the same layout without overlap where the CPU GEMM computes each piece's rows
# as the whole GEMM does: OpenBLAS's dy W (the data gradients) is row-independent, its x W^T (the
# forward) is not for every row count, so the forward pieces are held to the single rank above.
# The backward options alone: row layers' data gradient pipelined with the output-gradient
# all-gather, column layers' input-gradient reduce-scatter pipelined (rs_dgrad) or in flight
# during the weight-gradient GEMM (bulk_wgrad).
set(TR_TPO_BWD comm_overlap.tp_comm_overlap=true model.tp_comm_overlap_rs=false
               model.tp_comm_overlap_disable_qkv=true model.tp_comm_overlap_disable_fc1=true)
tr_mpirun_test(mpi_equiv_llama_tp2_sp_tp_overlap_bwd_bitwise 2 equiv_check --same-layout
               llama_tiny_pretrain ${TR_EQUIV_COMMON} train.micro_batch_size=2 -- ${TR_TP2} ${TR_SP}
               -- ${TR_TPO_BWD})
tr_mpirun_test(mpi_equiv_gpt_tp4_sp_tp_overlap_rs_dgrad_bitwise 4 equiv_check --same-layout
               gpt_tiny_pretrain ${TR_EQUIV_COMMON} train.micro_batch_size=2 -- ${TR_TP4} ${TR_SP}
               -- ${TR_TPO_BWD} model.tp_comm_overlap_rs_dgrad=true)
# On the cpu-strict device (device buffers the host never touches), TP 4, pipelined rs_dgrad.
tr_equiv_test(llama_tp4_sp_tp_overlap_rs_dgrad_strict 4 llama_tiny_pretrain ${TR_EQUIV_COMMON}
              train.micro_batch_size=2 -- ${TR_TP4} ${TR_TPO} model.tp_comm_overlap_rs_dgrad=true)
set_tests_properties(mpi_equiv_llama_tp4_sp_tp_overlap_rs_dgrad_strict PROPERTIES
                     ENVIRONMENT "${TR_MPIRUN_ENV};TRESTLE_DEVICE=cpu-strict")
# Deferred output-layer weight gradients (model.defer_embedding_wgrad_compute; runtime/model/
# defer_wgrad.c): the last stage keeps every microbatch's output-layer input and logits gradient
# and adds their weight gradients at the flush, in microbatch order, as the per-microbatch
# backwards would: against the same layout without deferral, every loss and parameter bitwise
# (--same-layout; the kept tensors add activations, so no --fewer-acts), and against the
# single-rank run (1e-5, the comm volume unchanged). Tied (the last stage's copy, then the
# embedding group's all-reduce) and untied embeddings; 1F1B, interleaved, TP x PP with SP;
# overlapped DP reduction (the output weight's bucket waits for the drain); bf16 (kept in half
# precision).
set(TR_DEFER model.defer_embedding_wgrad_compute=true)
function(tr_equiv_defer_test name np)
  tr_mpirun_test(mpi_equiv_${name} ${np} equiv_check --same-layout ${ARGN})
endfunction()
tr_equiv_defer_test(gpt_pp2_defer_wgrad_bitwise 2 gpt_tiny_pretrain ${TR_PP_COMMON} -- ${TR_PP2}
                    -- ${TR_DEFER})
tr_equiv_pp_test(gpt_pp2_defer_wgrad 2 gpt_tiny_pretrain ${TR_PP_COMMON} -- ${TR_PP2} ${TR_DEFER})
tr_equiv_defer_test(llama_untied_pp2_vpp2_defer_wgrad_bitwise 2 llama_tiny_pretrain
                    ${TR_PP_COMMON} model.share_embeddings_and_output_weights=false -- ${TR_PP2}
                    ${TR_VPP2} -- ${TR_DEFER})
tr_equiv_pp_test(llama_untied_pp2_vpp2_defer_wgrad 2 llama_tiny_pretrain ${TR_PP_COMMON}
                 model.share_embeddings_and_output_weights=false -- ${TR_PP2} ${TR_VPP2} ${TR_DEFER})
tr_equiv_defer_test(llama_pp2_vpp2_defer_wgrad_bitwise 2 llama_tiny_pretrain ${TR_PP_COMMON} --
                    ${TR_PP2} ${TR_VPP2} -- ${TR_DEFER})
tr_equiv_defer_test(llama_tp2_sp_pp2_defer_wgrad_bitwise 4 llama_tiny_pretrain ${TR_PP_COMMON}
                    train.micro_batch_size=2 -- ${TR_TP2} ${TR_SP} ${TR_PP2} -- ${TR_DEFER})
tr_equiv_pp_test(llama_tp2_sp_pp2_defer_wgrad 4 llama_tiny_pretrain ${TR_PP_COMMON}
                 train.micro_batch_size=2 -- ${TR_TP2} ${TR_SP} ${TR_PP2} ${TR_DEFER})
tr_equiv_defer_test(llama_untied_tp2_pp2_defer_wgrad_bitwise 4 llama_tiny_pretrain
                    ${TR_PP_COMMON} model.share_embeddings_and_output_weights=false -- ${TR_TP2}
                    ${TR_PP2} -- ${TR_DEFER})
# (Parameters at 3e-5: on megatron-core's mock samples TP 2 alone, without PP or deferral,
# moves this untied 8-layer model's parameters 1.85e-5 of a tensor's largest weight after five
# Adam steps, where SGD stays at 2e-7 and the losses are equal to the last digit: Adam's
# normalisation turns the split GEMMs' round-off in near-zero gradients into steps of their own.)
tr_equiv_pp_test(llama_untied_tp2_pp2_defer_wgrad 4 --param-tol 3e-5 llama_tiny_pretrain
                 ${TR_PP_COMMON} model.share_embeddings_and_output_weights=false -- ${TR_TP2}
                 ${TR_PP2} ${TR_DEFER})
tr_equiv_defer_test(gpt_pp2_dp2_distopt_overlap_defer_wgrad_bitwise 4 gpt_tiny_pretrain
                    ${TR_PP_COMMON} -- ${TR_PP2} ${TR_DISTOPT} ${TR_OVERLAP} -- ${TR_DEFER})
# Through its override (comm_overlap.*, taken when the comm_overlap section is in use).
tr_equiv_defer_test(llama_pp2_bf16_defer_wgrad_bitwise 2 llama_tiny_pretrain ${TR_PP_SGD} ${TR_BF16}
                    comm_overlap.tp_comm_overlap=false -- ${TR_PP2} --
                    comm_overlap.defer_embedding_wgrad_compute=true)
# Megatron's wgrad_deferral_limit: the first 3 of the 8 microbatches deferred, the others computed
# in their backward, so the output weight's gradient is summed in another order: equal to the
# single-rank run, and (the negative case) no longer bitwise the run without deferral, which the
# comparison must see.
set(TR_DEFER3 ${TR_DEFER} model.wgrad_deferral_limit=3)
tr_equiv_pp_test(gpt_pp2_dp2_distopt_overlap_defer_wgrad_limit3 4 gpt_tiny_pretrain ${TR_PP_COMMON}
                 -- ${TR_PP2} ${TR_DISTOPT} ${TR_OVERLAP} ${TR_DEFER3})
tr_equiv_defer_test(gpt_pp2_defer_wgrad_limit3_detected 2 --expect-differ gpt_tiny_pretrain
                    ${TR_PP_COMMON} -- ${TR_PP2} -- ${TR_DEFER3})
# MoE layers on one expert rank (every rank holds every expert) under data and pipeline
# parallelism: DeepSeek-like routing (dense first layer, sigmoid, group-limited, expert bias whose
# token counts are summed over DP, shared expert, seq aux loss) with the distributed optimizer and
# overlap; Mixtral-like through interleaved stages (the MoE layers' per-microbatch states).
set(TR_DS4 model.num_layers=4 model.moe_layer_freq=[0,1,1,1])
tr_equiv_test(deepseek_moe_dp2_distopt_overlap 2 --expect-overlap deepseek_tiny_pretrain
              ${TR_EQUIV_COMMON} -- ${TR_DISTOPT} ${TR_OVERLAP})
tr_equiv_pp_test(deepseek_moe_pp2_dp2_distopt 4 deepseek_tiny_pretrain ${TR_EQUIV_COMMON}
                 ${TR_DS4} -- ${TR_PP2} ${TR_DISTOPT})
tr_equiv_pp_test(mixtral_moe_pp2_vpp2 2 mixtral_tiny_pretrain ${TR_PP_COMMON} -- ${TR_PP2}
                 ${TR_VPP2})
# LoRA on MoE layers (runtime/moe/lora.c): each expert's and the shared expert's fc1 / fc2 adapted,
# the base (router included) frozen, from a pretrained checkpoint a setup test writes. Dropout
# masks keyed by the global microbatch and each row's (token, choice), so DP and PP draw the
# single-rank run's; the distributed optimizer with overlap reports the MoE layers' frozen
# tensors ready without gradients. A gated shared expert (Qwen2-MoE-like) has its adapters too.
set(TR_MOE_LORA_SHARED model.moe_shared_expert_intermediate_size=32 model.moe_shared_expert_gate=true)
set(TR_MOE_LORA_BASE ${CMAKE_BINARY_DIR}/equiv_moe_lora_base)
add_test(NAME mpi_equiv_moe_lora_base
         COMMAND $<TARGET_FILE:run_recipe> --recipe qwen3_moe_tiny_pretrain train.train_iters=3
                 ${TR_MOE_LORA_SHARED} validation.eval_iters=0 checkpoint.save=${TR_MOE_LORA_BASE}
                 checkpoint.save_interval=3 logger.output_dir=${TR_MOE_LORA_BASE}/log)
set_tests_properties(mpi_equiv_moe_lora_base PROPERTIES LABELS "mpi" FIXTURES_SETUP moe_lora_base
                     ENVIRONMENT "${TR_MPIRUN_ENV};OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
set(TR_MOE_LORA ${TR_EQUIV_COMMON} ${TR_MOE_LORA_SHARED} peft.scheme=lora peft.dim=4 peft.alpha=8
                optimizer.lr=1e-2 checkpoint.pretrained_checkpoint=${TR_MOE_LORA_BASE})
function(tr_equiv_moe_lora_test name np)
  tr_mpirun_test(mpi_equiv_${name} ${np} equiv_check ${ARGN})
  set_tests_properties(mpi_equiv_${name} PROPERTIES FIXTURES_REQUIRED moe_lora_base)
endfunction()
tr_equiv_moe_lora_test(qwen3_moe_lora_dp2 2 --check-volume qwen3_moe_tiny_pretrain ${TR_MOE_LORA} --)
tr_equiv_moe_lora_test(qwen3_moe_lora_dropout_dp2_distopt_overlap 2 --expect-overlap
                       qwen3_moe_tiny_pretrain ${TR_MOE_LORA} peft.dropout=0.1 -- ${TR_DISTOPT}
                       ${TR_OVERLAP})
tr_equiv_moe_lora_test(qwen3_moe_lora_dropout_pp2 2 qwen3_moe_tiny_pretrain ${TR_MOE_LORA}
                       peft.dropout=0.1 -- ${TR_PP2})
tr_equiv_moe_lora_test(qwen3_moe_lora_dropout_pp2_dp2_distopt 4 qwen3_moe_tiny_pretrain
                       ${TR_MOE_LORA} peft.dropout=0.1 optimizer.clip_grad=0.05 -- ${TR_PP2}
                       ${TR_DISTOPT})
# Recomputed with the adapters' dropout (runtime/moe/recompute.c): the rerun redraws the slot's
# masks; bitwise the run without, fewer activation floats.
tr_equiv_moe_lora_test(qwen3_moe_lora_dropout_recompute_full 1 --same-layout --fewer-acts
                       qwen3_moe_tiny_pretrain ${TR_MOE_LORA} peft.dropout=0.1 -- -- ${TR_RC_FULL}
                       model.recompute_method=uniform model.recompute_num_layers=1)
tr_equiv_moe_lora_test(qwen3_moe_lora_dropout_recompute_moe_act_shared 1 --same-layout --fewer-acts
                       qwen3_moe_tiny_pretrain ${TR_MOE_LORA} peft.dropout=0.1 -- --
                       ${TR_RC_SEL} model.moe_grouped_gemm=true
                       model.recompute_modules=[moe_act,shared_experts])

# Expert parallelism (runtime/moe/dispatch.c): each EP rank holds experts/EP of every MoE layer,
# tokens travel to them by the alltoall dispatcher, and their gradients live in a buffer of their
# own reduced over expert DP (world / (PP x EP x ETP)), scaled by the dense DP's 1/dp; the grad
# norm sums the dense and expert norms (clip_grad small, so clipping acts). EP 2 and EP 4 alone
# (expert DP 1; EP 4 with the per-token loss, both buffers divided by the global token count), EP 2 x DP 2 with the distributed optimizer and overlap (expert DP 2), EP 2 x PP 2
# (each stage only its layers' experts), DeepSeek-like routing (expert bias, shared expert, MTP).
# These name the alltoall dispatcher (Megatron's default, and the tiny recipes', is allgather; its
# tests follow the token-dropping ones).
set(TR_A2A model.moe_token_dispatcher_type=alltoall)
set(TR_EP2 model.expert_model_parallel_size=2 ${TR_A2A})
set(TR_EP_CLIP optimizer.clip_grad=0.05)
tr_equiv_test(moe_ep2 2 moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CLIP} -- ${TR_EP2})
tr_equiv_test(moe_ep4_pertoken 4 moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CLIP}
              model.calculate_per_token_loss=true -- model.expert_model_parallel_size=4 ${TR_A2A})
tr_equiv_test(mixtral_ep2_dp2_distopt_overlap 4 --expect-overlap mixtral_tiny_pretrain
              ${TR_EQUIV_COMMON} ${TR_EP_CLIP} -- ${TR_EP2} ${TR_DISTOPT} ${TR_OVERLAP}
              ddp.overlap_param_gather=true optimizer.overlap_param_gather=true)
tr_equiv_pp_test(moe_ep2_pp2 4 moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CLIP} -- ${TR_PP2}
                 ${TR_EP2})
tr_equiv_test(deepseek_ep2 2 deepseek_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CLIP} -- ${TR_EP2})
# Token dropping under EP: each rank drops among its own microbatch's tokens in the router, before
# the dispatch (Megatron), so EP over data-parallel ranks drops what the single rank drops; 20
# iterations, the router moving. moe_tiny (4 experts top 2, 32 tokens) at factor 0.5 (capacity 8
# of the 16 rows an even share gives: drops every pass) by probability; at 1.0 by position, padded
# to the capacity (the padded rows travel); Mixtral-like (8 experts) on EP 2 x DP 2 with the
# distributed optimizer padded at 2.5 (capacity 20: a rank sends 80 rows to each peer, more than
# its 64 dropless rows, which the exchange buffers must hold). The EP bytes: padded from the
# capacity, unpadded from the layers' kept rows (equiv_parts.c). And two runs of the same EP
# layout with drops are bitwise equal.
set(TR_EP_CAP ${TR_EP_CLIP} train.train_iters=20)
tr_equiv_test(moe_ep2_capacity_probs 2 moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CAP}
              model.moe_expert_capacity_factor=0.5 model.moe_token_drop_policy=probs -- ${TR_EP2})
tr_equiv_test(moe_ep2_capacity_position_pad 2 moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CAP}
              model.moe_expert_capacity_factor=1.0 model.moe_token_drop_policy=position
              model.moe_pad_expert_input_to_capacity=true -- ${TR_EP2})
tr_equiv_test(mixtral_ep2_dp2_distopt_capacity_pad 4 mixtral_tiny_pretrain ${TR_EQUIV_COMMON}
              ${TR_EP_CAP} model.moe_expert_capacity_factor=2.5
              model.moe_pad_expert_input_to_capacity=true -- ${TR_EP2} ${TR_DISTOPT})
tr_mpirun_test(mpi_equiv_moe_ep2_capacity_deterministic 2 equiv_check --same-layout
               moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CAP} model.moe_expert_capacity_factor=0.5
               -- ${TR_EP2} --)
# The allgather dispatcher (runtime/moe/dispatch_ag.c): every EP rank gathers the group's tokens,
# probabilities and choices, runs the rows routed to its experts and reduce-scatters their
# weighted outputs (backward: the output gradient gathered, the input and probability gradients
# reduce-scattered back to the tokens' owners); 20 iterations, the router moving. EP 2 alone;
# DeepSeek-like (expert bias, group-limited sigmoid routing, shared expert, MTP depth); EP 2 x DP
# 2 with the distributed optimizer (expert DP 2); EP 2 folded onto TP 2 with SP (each TP rank
# gathers the other's sequence chunk) x DP 2; and token dropping (factor 0.5, each rank dropping
# among its own tokens in the router). The bytes on the TP x EP group against the theory from the
# token counts (equiv_parts.c), none on the EP group's all-to-alls.
set(TR_EP2_AG model.expert_model_parallel_size=2 model.moe_token_dispatcher_type=allgather)
tr_equiv_test(moe_ep2_allgather 2 moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CAP} --
              ${TR_EP2_AG})
tr_equiv_test(deepseek_ep2_allgather 2 deepseek_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CAP} --
              ${TR_EP2_AG})
tr_equiv_test(mixtral_ep2_dp2_distopt_allgather 4 mixtral_tiny_pretrain ${TR_EQUIV_COMMON}
              ${TR_EP_CAP} -- ${TR_EP2_AG} ${TR_DISTOPT})
tr_equiv_test(mixtral_ep2_tp2_sp_allgather 4 mixtral_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CAP}
              -- ${TR_TP2} ${TR_SP} model.expert_tensor_parallel_size=1 ${TR_EP2_AG})
tr_equiv_test(moe_ep2_allgather_capacity_probs 2 moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CAP}
              model.moe_expert_capacity_factor=0.5 model.moe_token_drop_policy=probs --
              ${TR_EP2_AG})
# A first stage of dense layers only under EP: its ranks hold no expert and still join the
# experts' grad-norm and inf/NaN collectives (they hung before).
tr_equiv_pp_test(moe_ep2_pp2_dense_stage 4 moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CLIP}
                 model.num_layers=4 model.moe_layer_freq=[0,0,1,1] -- ${TR_PP2} ${TR_EP2})
# MoE under TP with sequence parallelism, whole experts (expert TP 1): each TP rank routes its
# sequence chunk, the router's, shared expert's and (EP 1) experts' gradients summed over TP like
# the norms', the aux loss's counts over TP (micro batch 2: two sequences per chunk for the
# seq aux loss). TP 2 alone on Qwen3-MoE-like (seq aux loss, QK norm) and on moe_tiny with the
# z-loss; EP 4 folded onto TP 2 x DP 2 (each rank its own 2 of Mixtral-like's 8 experts, expert
# DP 1) with the distributed optimizer.
set(TR_MOE_TP2 ${TR_TP2} ${TR_SP} model.expert_tensor_parallel_size=1)
tr_equiv_test(qwen3_moe_tp2_sp 2 qwen3_moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CLIP}
              train.micro_batch_size=2 model.moe_router_load_balancing_type=seq_aux_loss
              model.moe_aux_loss_coeff=0.01 -- ${TR_MOE_TP2})
tr_equiv_test(moe_tp2_sp_zloss 2 moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CLIP}
              model.moe_z_loss_coeff=0.001 -- ${TR_MOE_TP2})
tr_equiv_test(mixtral_ep4_tp2_dp2_sp 4 mixtral_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CLIP} --
              ${TR_MOE_TP2} model.expert_model_parallel_size=4 ${TR_A2A} ${TR_DISTOPT})
# Expert TP (runtime/moe/etp.c): every expert's fc1 columns (SwiGLU: gate and up each) and fc2
# rows split over the expert-TP group; the rows the local experts receive are all-gathered over it
# (variable counts), each rank runs its slices on all of them, fc2's partial sums are
# reduce-scattered back; the backward mirrors it. The shards' gradients are whole (no TP sum) and
# reduce over expert DP; the grad norm counts each shard once (clip_grad small). The expert-TP
# bytes against the token counts (equiv_parts.c). EP 2 x ETP 2 on TP 2 + SP (expert-TP group = TP
# group, expert DP 1) with the distributed optimizer, 20 iterations; ETP 2 alone on TP 2 + SP
# (Qwen3-MoE-like, seq aux loss); DeepSeek-like (shared expert, expert bias, MTP) on EP 2 x ETP
# 2; ETP over data-parallel ranks (TP 1: each rank routes its own microbatch) with drops.
set(TR_MOE_ETP2 ${TR_TP2} ${TR_SP} model.expert_tensor_parallel_size=2)
tr_equiv_test(mixtral_ep2_etp2_tp2_sp 4 mixtral_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CAP} --
              ${TR_MOE_ETP2} ${TR_EP2} ${TR_DISTOPT})
tr_equiv_test(qwen3_moe_etp2_tp2_sp 2 qwen3_moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CAP}
              train.micro_batch_size=2 model.moe_router_load_balancing_type=seq_aux_loss
              model.moe_aux_loss_coeff=0.01 -- ${TR_MOE_ETP2})
tr_equiv_test(deepseek_ep2_etp2_tp2_sp 4 deepseek_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CLIP} --
              ${TR_MOE_ETP2} ${TR_EP2})
tr_equiv_test(moe_etp2_dp2_capacity_probs 2 moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CAP}
              model.moe_expert_capacity_factor=0.5 model.moe_token_drop_policy=probs --
              model.expert_tensor_parallel_size=2)
# DeepSeek-like whole (MLA, sigmoid routing with expert bias, a shared expert, the MTP depth)
# under TP 2 with SP.
tr_equiv_test(deepseek_tp2_sp 2 deepseek_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CLIP} --
              ${TR_MOE_TP2})
# MoE under CP: each rank routes its two chunks of every sequence; the aux loss's counts are
# summed over TP x CP like under SP, and the balancing losses' gradients scaled by CP (the DP x CP
# reduction divides by it); alone, and with EP 2 (expert DP 2 absorbs CP), seq aux and z-loss.
tr_equiv_test(moe_cp2 2 moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CLIP} --
              model.context_parallel_size=2)
tr_equiv_test(qwen3_moe_ep2_cp2 4 qwen3_moe_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_EP_CLIP}
              train.micro_batch_size=2 model.moe_router_load_balancing_type=seq_aux_loss
              model.moe_aux_loss_coeff=0.01 model.moe_z_loss_coeff=0.001 -- ${TR_EP2}
              model.context_parallel_size=2)
# Recomputation of MoE layers (runtime/moe/recompute.c): full (uniform, block) reruns them whole,
# selective moe the layer, moe_act the experts' activation, shared_experts the shared expert;
# bitwise the run without, with fewer activation floats (the MoE states counted) on every rank.
# The rerun must count no expert-bias token, logged token or balancing loss again and redraw the
# jitter and the drops: jitter, a capacity factor and the global aux loss (its running counts have
# moved on by the backward) on moe_tiny, DeepSeek's expert bias, seq aux loss, shared expert and
# MTP depth (an MoE layer), dropout everywhere.
set(TR_MOE_RC_EXTRA model.moe_input_jitter_eps=0.01 model.moe_expert_capacity_factor=1.0
    model.moe_router_load_balancing_type=global_aux_loss)
set(TR_MOE_ACT_RC ${TR_RC_SEL} model.moe_grouped_gemm=true)
tr_equiv_recompute_test(moe_recompute_full_uniform 1 moe_tiny_pretrain ${TR_RC_COMMON}
                        ${TR_MOE_RC_EXTRA} -- -- ${TR_RC_FULL} model.recompute_method=uniform
                        model.recompute_num_layers=1)
tr_equiv_recompute_test(moe_recompute_full_block 1 moe_tiny_pretrain ${TR_RC_COMMON}
                        ${TR_MOE_RC_EXTRA} -- -- ${TR_RC_FULL} model.recompute_method=block
                        model.recompute_num_layers=2)
tr_equiv_recompute_test(moe_recompute_moe_act 1 moe_tiny_pretrain ${TR_RC_COMMON}
                        ${TR_MOE_RC_EXTRA} -- -- ${TR_MOE_ACT_RC} model.recompute_modules=[moe_act])
tr_equiv_recompute_test(qwen3_moe_recompute_moe 1 qwen3_moe_tiny_pretrain ${TR_RC_COMMON} -- --
                        ${TR_RC_SEL} model.recompute_modules=[moe])
tr_equiv_recompute_test(deepseek_recompute_full_uniform 1 deepseek_tiny_pretrain ${TR_RC_COMMON}
                        -- -- ${TR_RC_FULL} model.recompute_method=uniform model.recompute_num_layers=2)
tr_equiv_recompute_test(deepseek_recompute_shared_experts 1 deepseek_tiny_pretrain ${TR_RC_COMMON}
                        -- -- ${TR_RC_SEL} model.recompute_modules=[core_attn,shared_experts])
tr_equiv_recompute_test(deepseek_recompute_moe_act_shared 1 deepseek_tiny_pretrain ${TR_RC_COMMON}
                        -- -- ${TR_MOE_ACT_RC} model.recompute_modules=[layernorm,moe_act,shared_experts])
# Under PP 2 (1F1B: the first stage's two slots share one recompute state) and DP 2 with the
# distributed optimizer (the expert-bias counts summed over DP once per real forward).
tr_equiv_recompute_test(moe_pp2_recompute_full_uniform 2 moe_tiny_pretrain ${TR_RC_COMMON}
                        model.num_layers=4 -- ${TR_PP2} -- ${TR_RC_FULL}
                        model.recompute_method=uniform model.recompute_num_layers=1)
tr_equiv_recompute_test(qwen3_moe_pp2_recompute_moe 2 qwen3_moe_tiny_pretrain ${TR_RC_COMMON}
                        model.num_layers=4 -- ${TR_PP2} -- ${TR_RC_SEL} model.recompute_modules=[moe])
tr_equiv_recompute_test(deepseek_pp2_recompute_moe_act_shared 2 deepseek_tiny_pretrain
                        ${TR_RC_COMMON} ${TR_DS4} -- ${TR_PP2} -- ${TR_MOE_ACT_RC}
                        model.recompute_modules=[moe_act,shared_experts])
tr_equiv_recompute_test(deepseek_pp2_recompute_full_block 2 deepseek_tiny_pretrain ${TR_RC_COMMON}
                        ${TR_DS4} -- ${TR_PP2} -- ${TR_RC_FULL} model.recompute_method=block
                        model.recompute_num_layers=2)
tr_equiv_recompute_test(deepseek_dp2_distopt_recompute_full_block 2 deepseek_tiny_pretrain
                        ${TR_RC_COMMON} -- ${TR_DISTOPT} -- ${TR_RC_FULL}
                        model.recompute_method=block model.recompute_num_layers=2)
tr_equiv_recompute_test(qwen3_moe_dp2_distopt_recompute_moe_act 2 qwen3_moe_tiny_pretrain
                        ${TR_RC_COMMON} -- ${TR_DISTOPT} -- ${TR_MOE_ACT_RC}
                        model.recompute_modules=[moe_act])
tr_equiv_recompute_test(moe_dp2_recompute_moe 2 moe_tiny_pretrain ${TR_RC_COMMON} -- ${TR_DISTOPT}
                        -- ${TR_RC_SEL} model.recompute_modules=[moe])
# Under EP 2 the rerun repeats the dispatcher's all-to-alls on every EP rank alike.
tr_equiv_recompute_test(moe_ep2_recompute_full_uniform 2 moe_tiny_pretrain ${TR_RC_COMMON} --
                        ${TR_EP2} -- ${TR_RC_FULL} model.recompute_method=uniform
                        model.recompute_num_layers=1)
tr_equiv_recompute_test(deepseek_ep2_recompute_moe_act_shared 2 deepseek_tiny_pretrain
                        ${TR_RC_COMMON} -- ${TR_EP2} -- ${TR_MOE_ACT_RC}
                        model.recompute_modules=[moe_act,shared_experts])
# Under expert TP the rerun repeats the expert-TP all-gather and reduce-scatter of the rows
# (ETP 2 over data-parallel ranks with the aux loss, jitter and drops, the last two refused under TP;
# ETP 2 on TP 2 + SP; EP 2 x ETP 2 with the shared expert and expert bias).
tr_equiv_recompute_test(moe_etp2_dp2_recompute_full_uniform 2 moe_tiny_pretrain ${TR_RC_COMMON}
                        model.moe_input_jitter_eps=0.01 model.moe_expert_capacity_factor=1.0
                        model.moe_router_load_balancing_type=aux_loss model.moe_aux_loss_coeff=0.01
                        -- model.expert_tensor_parallel_size=2 -- ${TR_RC_FULL}
                        model.recompute_method=uniform model.recompute_num_layers=1)
tr_equiv_recompute_test(qwen3_moe_etp2_tp2_sp_recompute_moe_act 2 qwen3_moe_tiny_pretrain
                        ${TR_RC_COMMON} -- ${TR_MOE_ETP2} -- ${TR_MOE_ACT_RC}
                        model.recompute_modules=[moe_act])
tr_equiv_recompute_test(deepseek_ep2_etp2_tp2_sp_recompute_moe 4 deepseek_tiny_pretrain
                        ${TR_RC_COMMON} -- ${TR_MOE_ETP2} ${TR_EP2} -- ${TR_RC_SEL}
                        model.recompute_modules=[moe,shared_experts])

# Context parallelism (runtime/context_parallel/): each sequence in 2 x CP chunks, rank r keeping
# chunks r and 2CP-1-r with their global positions (RoPE; learned positions on GPT), the p2p ring
# for attention, gradients reduced over DP x CP. --check-volume counts the ring's sends and
# receives on the CP group against the theory. Alone (CP 2, CP 4), with TP + SP (micro batch 2),
# PP (also interleaved), DP and the distributed optimizer, the per-token loss with loss masks (end-of-document
# tokens: the chunks train on different token counts, and the global token mean is exact), and
# LoRA on the pretrained base.
set(TR_CP2 model.context_parallel_size=2)
tr_equiv_test(llama_cp2 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} -- ${TR_CP2})
tr_equiv_test(gpt_cp2_learned_pos 2 gpt_tiny_pretrain ${TR_EQUIV_COMMON} model.hidden_dropout=0
              model.attention_dropout=0 -- ${TR_CP2})
tr_equiv_test(llama_cp4 4 llama_tiny_pretrain ${TR_EQUIV_COMMON} -- model.context_parallel_size=4)
tr_equiv_test(llama_cp2_tp2_sp 4 llama_tiny_pretrain ${TR_EQUIV_COMMON} train.micro_batch_size=2 --
              ${TR_CP2} ${TR_TP2} ${TR_SP})
tr_equiv_test(llama_cp2_pp2 4 llama_tiny_pretrain ${TR_EQUIV_COMMON} -- ${TR_CP2} ${TR_PP2})
tr_equiv_test(llama_cp2_pp2_vpp2 4 llama_tiny_pretrain ${TR_EQUIV_COMMON} model.num_layers=4 --
              ${TR_CP2} ${TR_PP2} ${TR_VPP2})
tr_equiv_test(llama_cp2_dp2_distopt 4 llama_tiny_pretrain ${TR_EQUIV_COMMON} -- ${TR_CP2}
              ${TR_DISTOPT})
tr_equiv_test(llama_cp2_pertoken_eod_mask 2 llama_tiny_pretrain ${TR_EQUIV_COMMON}
              model.calculate_per_token_loss=true dataset.eod_mask_loss=true -- ${TR_CP2})
tr_equiv_lora_dp_test(llama_lora_cp2 2 --check-volume llama_tiny_pretrain ${TR_EQUIV_COMMON}
                      peft.scheme=lora checkpoint.pretrained_checkpoint=${TR_LORA_BASE} -- ${TR_CP2})
# Fine-tuning under CP: every document of a pack split into 2 x CP pieces (padded to that
# multiple, which finalize derives for the CP run and both runs here set alike, so they read the
# same data), the ring over each document's pieces; packed, with TP + SP on GPT (learned
# positions), unpacked at micro batch 2, and with PP and the forward-only evaluation.
set(TR_SFT_CP ${TR_SFT_COMMON} dataset.pad_seq_to_mult=4 model.calculate_per_token_loss=true)
tr_equiv_test(llama_sft_cp2_eval 2 llama_tiny_sft ${TR_SFT_CP} validation.eval_iters=1
              validation.eval_interval=5 -- ${TR_CP2})
tr_equiv_test(gpt_sft_cp2_tp2_sp 4 gpt_tiny_pretrain ${TR_SFT_CP} ${TR_SFT_GPT}
              model.hidden_dropout=0 model.attention_dropout=0 -- ${TR_CP2} ${TR_TP2} ${TR_SP})
tr_equiv_test(llama_sft_cp2_unpacked 2 llama_tiny_sft ${TR_SFT_CP} train.micro_batch_size=2
              dataset.enable_offline_packing=false dataset.packed_sequence_size=null -- ${TR_CP2})
tr_equiv_test(llama_sft_cp2_pp2_eval 4 llama_tiny_sft ${TR_SFT_CP} model.num_layers=4
              validation.eval_iters=1 validation.eval_interval=5 -- ${TR_CP2} ${TR_PP2})
# Dropout under CP draws the single-rank run's masks: attention dropout per ring block at the
# whole sequence's token coordinates, hidden dropout per run of consecutive tokens (also on
# sequence-parallel chunks); attention dropout on packed documents.
tr_equiv_test(gpt_cp2_dropout 2 gpt_tiny_pretrain ${TR_EQUIV_COMMON} model.attention_dropout=0.1
              model.hidden_dropout=0.1 -- ${TR_CP2})
tr_equiv_test(gpt_cp2_tp2_sp_dropout 4 gpt_tiny_pretrain ${TR_EQUIV_COMMON} train.micro_batch_size=2
              model.attention_dropout=0.1 model.hidden_dropout=0.1 -- ${TR_CP2} ${TR_TP2} ${TR_SP})
tr_equiv_test(llama_sft_cp2_attention_dropout 2 llama_tiny_sft ${TR_SFT_CP}
              model.attention_dropout=0.1 -- ${TR_CP2})
# The allgather exchange (whole-sequence K and V gathered, dK/dV reduce-scattered): the ring's
# blocks in the ring's order, alone at CP 4 and with TP + SP and attention dropout.
tr_equiv_test(llama_cp4_allgather 4 llama_tiny_pretrain ${TR_EQUIV_COMMON} --
              model.context_parallel_size=4 model.cp_comm_type=[allgather])
tr_equiv_test(gpt_cp2_tp2_sp_allgather_dropout 4 gpt_tiny_pretrain ${TR_EQUIV_COMMON}
              train.micro_batch_size=2 model.attention_dropout=0.1 model.hidden_dropout=0.1 --
              ${TR_CP2} ${TR_TP2} ${TR_SP} model.cp_comm_type=[allgather])
# The a2a (Ulysses) exchange: heads scattered and the sequence gathered by all-to-alls, each rank
# attending the whole sequence of its heads; GQA (2 heads per group), with attention dropout at the
# global heads, and on packed documents.
tr_equiv_test(llama_cp2_a2a_dropout 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} model.attention_dropout=0.1
              -- ${TR_CP2} model.cp_comm_type=[a2a])
tr_equiv_test(llama_sft_cp2_a2a 2 llama_tiny_sft ${TR_SFT_CP} -- ${TR_CP2} model.cp_comm_type=[a2a])


# Multi-latent attention (runtime/mla/) on llama_tiny's two layers: compressed queries with the
# latent norms and YaRN (a short original context, so the frequencies blend and mscale is not 1);
# the up projections split their heads over TP, the down projections and norms stay whole (their
# gradients equal on every rank); one layer per stage under PP; the distributed optimizer over
# DP; and queries straight from the hidden state (linear_q_proj) under TP 2 x PP 2.
set(TR_MLA model.multi_latent_attention=true model.qk_layernorm=true model.q_lora_rank=8
           model.kv_lora_rank=8 model.qk_head_dim=8 model.qk_pos_emb_head_dim=4 model.v_head_dim=6
           model.rope_type=yarn model.rotary_scaling_factor=4 model.original_max_position_embeddings=8
           model.mscale=0.7 model.mscale_all_dim=0.5)
tr_equiv_test(mla_tp2 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MLA} -- ${TR_TP2})
tr_equiv_test(mla_pp2 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MLA} --
              model.pipeline_model_parallel_size=2)
tr_equiv_test(mla_dp2_distopt 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MLA} -- ${TR_DISTOPT})
tr_equiv_test(mla_direct_q_tp2_pp2 4 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MLA}
              model.q_lora_rank=null -- ${TR_TP2} model.pipeline_model_parallel_size=2)
# Mixed precision: the projections' GEMMs round both operands as the linear layers do (the
# bf16 tolerances above).
tr_equiv_lowp_test(mla_tp2_bf16 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MLA} ${TR_BF16} --
                   ${TR_TP2})
tr_equiv_lowp_test(mla_bf16_detects_fp32 2 --expect-differ llama_tiny_pretrain ${TR_EQUIV_COMMON}
                   ${TR_MLA} mixed_precision.preset=fp32 -- ${TR_BF16} ${TR_TP2})
# Sequence parallelism: the input norm's output gathered, the input gradient's rows kept (with
# two sequences per microbatch, and queries straight from the hidden state in bf16).
tr_equiv_test(mla_tp2_sp 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MLA} train.micro_batch_size=2
              -- ${TR_TP2} ${TR_SP})
tr_equiv_lowp_test(mla_direct_q_tp2_sp_bf16 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MLA}
                   ${TR_BF16} model.q_lora_rank=null -- ${TR_TP2} ${TR_SP})
# DeepSeek's pairing: MLA attention over the DeepSeek-like MoE layers (dense first layer,
# sigmoid routing with expert bias, shared expert), with the distributed optimizer and under PP,
# first without MTP; then deepseek_tiny whole, its MTP depth an MoE layer (the last decoder
# layer's spec, as Megatron builds it) on the last stage under PP, its expert bias and balancing
# losses with the decoder's.
tr_equiv_test(mla_moe_dp2_distopt 2 deepseek_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MLA}
              model.mtp_num_layers=null -- ${TR_DISTOPT})
tr_equiv_pp_test(mla_moe_pp2 2 deepseek_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MLA} ${TR_DS4}
                 model.mtp_num_layers=null -- ${TR_PP2})
tr_equiv_test(deepseek_mtp_moe_dp2_distopt 2 deepseek_tiny_pretrain ${TR_EQUIV_COMMON} --
              ${TR_DISTOPT})
tr_equiv_pp_test(deepseek_mtp_moe_pp2 2 deepseek_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_DS4} --
                 ${TR_PP2})
# Untied, as DeepSeek-V3: the last stage holds a copy of the word embedding for the depth's lookup
# (its gradient summed with the first stage's over the embedding group) and its own output layer;
# PP 2, and PP 2 x DP 2 with the distributed optimizer (the copy's bucket of its own on both
# stages). The copy must stay bitwise the first stage's.
set(TR_UNTIED model.share_embeddings_and_output_weights=false)
tr_equiv_pp_test(deepseek_mtp_moe_untied_pp2 2 deepseek_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_DS4}
                 ${TR_UNTIED} -- ${TR_PP2})
tr_equiv_pp_test(deepseek_mtp_moe_untied_pp2_dp2_distopt 4 deepseek_tiny_pretrain
                 ${TR_EQUIV_COMMON} ${TR_DS4} ${TR_UNTIED} -- ${TR_PP2} ${TR_DISTOPT})

# Multi-token prediction (runtime/mtp/, the loss stage): two depths with their loss weighted 0.3,
# the shared (tied) embedding and output layer; eh_proj column-parallel with its output gathered
# under TP; the depths on the last stage under PP (which reads the tied embedding's copy); the
# distributed optimizer over DP; and MLA with one depth under TP 2 x PP 2.
set(TR_MTP model.mtp_num_layers=2 model.mtp_loss_scaling_factor=0.3)
tr_equiv_test(mtp_tp2 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MTP} -- ${TR_TP2})
tr_equiv_test(mtp_pp2 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MTP} --
              model.pipeline_model_parallel_size=2)
tr_equiv_test(mtp_dp2_distopt 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MTP} -- ${TR_DISTOPT})
# Untied under PP: the depths read the last stage's copy of the word embedding, the output layer
# is its own; alone, and PP 2 x DP 2 with the distributed optimizer, overlapped reduction and
# parameter gather (the copy reported with the head's tensors) and clipping (a norm that counted
# the copy would change the step).
tr_equiv_test(mtp_untied_pp2 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MTP} ${TR_UNTIED} --
              ${TR_PP2})
tr_equiv_test(mtp_untied_pp2_dp2_distopt_overlap 4 --expect-overlap llama_tiny_pretrain
              ${TR_EQUIV_COMMON} ${TR_MTP} ${TR_UNTIED} optimizer.clip_grad=0.05 -- ${TR_PP2}
              ${TR_DISTOPT} ${TR_OVERLAP} ddp.overlap_param_gather=true
              optimizer.overlap_param_gather=true)
# The copy split over the vocabulary as the first stage's: one depth under TP 2 x SP x PP 2.
tr_equiv_test(mtp_untied_tp2_sp_pp2 4 llama_tiny_pretrain ${TR_EQUIV_COMMON} model.mtp_num_layers=1
              ${TR_UNTIED} train.micro_batch_size=2 model.hidden_dropout=0.1 -- ${TR_TP2}
              ${TR_SP} ${TR_PP2})
# Mixed precision with bf16 stage messages, against the single rank (the PP bf16 tolerances).
tr_equiv_pp_bf16_test(mtp_pp2_bf16 2 llama_tiny_pretrain ${TR_PP_SGD} ${TR_MTP} ${TR_BF16} --
                      ${TR_PP2})
tr_equiv_pp_bf16_test(mtp_untied_pp2_bf16 2 llama_tiny_pretrain ${TR_PP_SGD} ${TR_MTP} ${TR_UNTIED}
                      ${TR_BF16} -- ${TR_PP2})
# Sequence parallelism: the depths' row-wise pieces on this rank's chunk (their norms' gradients
# summed over TP with the decoder's), eh_proj and the output layer on the gathered chunks; two
# sequences per microbatch; then MLA depths under TP 2 x SP x PP 2 in bf16.
tr_equiv_test(mtp_tp2_sp 2 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MTP} train.micro_batch_size=2
              model.hidden_dropout=0.1 -- ${TR_TP2} ${TR_SP})
tr_equiv_pp_bf16_test(mla_mtp_tp2_sp_pp2_bf16 4 llama_tiny_pretrain ${TR_PP_SGD} ${TR_MLA}
                      model.mtp_num_layers=1 ${TR_BF16} -- ${TR_TP2} ${TR_SP} ${TR_PP2})
tr_equiv_test(mla_mtp_tp2_pp2 4 llama_tiny_pretrain ${TR_EQUIV_COMMON} ${TR_MLA}
              model.mtp_num_layers=1 -- ${TR_TP2} model.pipeline_model_parallel_size=2)
# Per-token loss (each depth rescaled by the main token count) under PP 2 x DP 2 with the
# distributed optimizer; MLA with MTP under DP with overlapped reduction and parameter gather
# (the depths' gradients reported ready first, their tensors last in the layout).
tr_equiv_test(mtp_pp2_dp2_distopt_pertoken 4 llama_tiny_pretrain ${TR_EQUIV_COMMON}
              model.mtp_num_layers=1 model.calculate_per_token_loss=true --
              model.pipeline_model_parallel_size=2 ${TR_DISTOPT})
tr_equiv_test(mla_mtp_dp2_distopt_overlap 2 --expect-overlap llama_tiny_pretrain
              ${TR_EQUIV_COMMON} ${TR_MLA} model.mtp_num_layers=1 -- ${TR_DISTOPT} ${TR_OVERLAP}
              ddp.overlap_param_gather=true optimizer.overlap_param_gather=true)

# Recomputation of MLA and MTP (runtime/model/recompute.c), bitwise against the same layout
# keeping everything, with hidden dropout: a whole MLA layer (TP 2), the selective modules with
# mla_up_proj (q, k, v from the kept latents; PP 2, and without q_lora_rank, where the recomputed
# input norm, gathered under SP, feeds linear_q_proj), in bf16; the MTP depths, each a run of its own under full
# recomputation (their layers MLA under TP 2) and with the selective modules under PP 2 (the
# last stage's layer and two depths share one set).
set(TR_RC_MLA_MODS model.recompute_modules=[core_attn,mla_up_proj,layernorm,mlp])
tr_equiv_recompute_test(mla_tp2_recompute_full 2 llama_tiny_pretrain ${TR_RC_COMMON} ${TR_MLA} --
                        ${TR_TP2} -- ${TR_RC_FULL} model.recompute_method=uniform
                        model.recompute_num_layers=1)
tr_equiv_recompute_test(mla_pp2_recompute_selective 2 llama_tiny_pretrain ${TR_RC_COMMON} ${TR_MLA}
                        model.num_layers=4 -- ${TR_PP2} -- ${TR_RC_SEL} ${TR_RC_MLA_MODS})
tr_equiv_recompute_test(mla_direct_q_tp2_sp_bf16_recompute_selective 2 llama_tiny_pretrain
                        ${TR_RC_COMMON} ${TR_MLA} ${TR_BF16} model.q_lora_rank=null -- ${TR_TP2}
                        ${TR_SP} -- ${TR_RC_SEL} model.recompute_modules=[mla_up_proj,layernorm])
tr_equiv_recompute_test(mla_mtp_tp2_recompute_full 2 llama_tiny_pretrain ${TR_RC_COMMON} ${TR_MLA}
                        ${TR_MTP} -- ${TR_TP2} -- ${TR_RC_FULL} model.recompute_method=block
                        model.recompute_num_layers=1)
tr_equiv_recompute_test(mtp_pp2_recompute_selective 2 llama_tiny_pretrain ${TR_RC_COMMON} ${TR_MTP}
                        -- ${TR_PP2} -- ${TR_RC_SEL} model.recompute_modules=[core_attn,mlp,layernorm])
