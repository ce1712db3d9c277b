/* validate(): runs every rule of the table below over a finalized config and reports all
 * violations in one pass. The table is the single list of rules: their stable ids, severities
 * and one-line summaries also generate docs/validation-rules.md. Rows without a check are
 * reported by finalize() (they describe a value it changed) and are listed for the docs. */
#include <stdlib.h>

#include "core/rules/rule.h"

#define E TR_SEV_ERROR
#define W TR_SEV_WARNING
#define N TR_SEV_NOTE

/* X(check, id, severity, launch_input, summary) */
#define TR_RULE_LIST(X)                                                                            \
    /* parallel layout */                                                                          \
    X(tr_check_world_divisible_by_model_size, "parallel.world_divisible_by_model_size", E, false,  \
      "The world size is divisible by TP * PP * CP.")                                              \
    X(tr_check_world_divisible_by_expert_size, "parallel.world_divisible_by_expert_size", E,       \
      false, "The world size is divisible by ETP * EP * PP.")                                      \
    X(tr_check_eval_world_divisible, "parallel.eval_world_divisible", E, false,                    \
      "With dist.eval_context_parallel_size, the world size is divisible by TP * PP * eval CP.")   \
    X(tr_check_heads_divisible_by_tp, "parallel.heads_divisible_by_tp", E, false,                  \
      "num_attention_heads is divisible by TP.")                                                   \
    X(tr_check_query_groups_compatible_with_tp, "parallel.query_groups_compatible_with_tp", E,     \
      false, "num_query_groups is a multiple or a divisor of TP.")                                 \
    X(tr_check_sequence_parallel_needs_tp, "parallel.sequence_parallel_needs_tp", E, false,        \
      "sequence_parallel is only used with TP > 1.")                                               \
    X(tr_check_tp_comm_overlap_needs_tp, "parallel.tp_comm_overlap_needs_tp", E, false,            \
      "Tensor-parallel communication overlap needs TP >= 2.")                                      \
    X(tr_check_comm_overlap_section, "parallel.comm_overlap_section", E, false,                    \
      "A comm_overlap override is set only with comm_overlap.tp_comm_overlap set.")                \
    X(tr_check_tp_comm_overlap_needs_sp, "parallel.tp_comm_overlap_needs_sp", E, false,            \
      "Tensor-parallel communication overlap needs sequence_parallel.")                            \
    X(tr_check_seq_length_divisible_by_2cp, "parallel.seq_length_divisible_by_2cp", E, false,      \
      "With CP > 1, model.seq_length is divisible by 2 * CP.")                                     \
    X(tr_check_hierarchical_cp_product, "parallel.hierarchical_cp_product", E, false,              \
      "hierarchical_context_parallel_sizes multiply to CP.")                                       \
    X(tr_check_cp_comm_type, "parallel.cp_comm_type", E, false,                                    \
      "cp_comm_type holds known exchanges, one or one per layer; a2a+p2p has hierarchical sizes.") \
    X(tr_check_vpp_needs_pp, "parallel.vpp_needs_pp", E, false,                                    \
      "virtual_pipeline_model_parallel_size is only set with PP > 1.")                             \
    X(tr_check_vpp_microbatches, "parallel.vpp_microbatches", E, false,                            \
      "With interleaving, the microbatches per step fill whole groups of at least PP.")            \
    X(tr_check_expert_dp_matches_without_pp_last, "parallel.expert_dp_matches_without_pp_last", E, \
      false, "With the tp-cp-ep-pp-dp order and PP > 1, DP equals the expert DP.")                 \
    X(tr_check_distopt_instances_divide_dp_cp, "parallel.distopt_instances_divide_dp_cp", E,       \
      false, "num_distributed_optimizer_instances divides DP * CP.")                               \
    X(tr_check_weight_shards, "parallel.weight_shards_multiple_of_tp", E, false,                   \
      "Generalized TP weight shards are multiples of TP (ETP for experts).")                       \
    X(tr_check_defer_embedding_wgrad, "parallel.defer_embedding_wgrad", E, false,                  \
      "Deferring embedding wgrad needs PP > 1 and gradient_accumulation_fusion.")                  \
    X(tr_check_p2p_warmup_flush, "parallel.p2p_warmup_flush", E, false,                            \
      "overlap_p2p_comm_warmup_flush needs overlap_p2p_comm without batch_p2p_comm.")              \
    X(tr_check_sharp_group_needs_sharp, "parallel.sharp_group_needs_sharp", E, false,              \
      "dist.sharp_enabled_group is only set with dist.use_sharp.")                                 \
    X(tr_warn_tp_exceeds_node, "parallel.tp_exceeds_node", W, false, "TP fits inside one node.")   \
    X(tr_warn_pp_without_vpp, "parallel.pp_without_vpp", W, false,                                 \
      "Pipeline parallelism uses the interleaved schedule (VPP) to shrink the bubble.")            \
    X(tr_warn_ep_tp_without_sp, "parallel.ep_tp_without_sp", W, false,                             \
      "Expert parallelism combined with TP uses sequence parallelism.")                            \
    /* pipeline split */                                                                           \
    X(tr_check_layers_divisible_by_pp, "pipeline.layers_divisible_by_pp", E, false,                \
      "An even pipeline split has num_layers divisible by PP.")                                    \
    X(tr_check_stage_layers_divisible_by_vpp, "pipeline.stage_layers_divisible_by_vpp", E, false,  \
      "An even interleaved split has layers per stage divisible by VPP.")                          \
    X(tr_check_uneven_not_with_account_for, "pipeline.uneven_not_with_account_for", E, false,      \
      "Explicit first/last stage sizes are not combined with account_for_* switches.")             \
    X(tr_check_uneven_split, "pipeline.uneven_split", E, false,                                    \
      "An uneven split leaves a whole number of layers (a multiple of VPP) per middle stage.")     \
    X(tr_check_account_for_split, "pipeline.account_for_split", E, false,                          \
      "Layers plus accounted embedding/loss divide evenly over PP (and VPP).")                     \
    X(tr_check_layout_conflicts, "pipeline.layout_conflicts", E, false,                            \
      "An explicit pipeline layout is not combined with other pipeline-split fields.")             \
    X(tr_check_layout_valid, "pipeline.layout_valid", E, false,                                    \
      "The pipeline layout parses and matches PP, VPP, num_layers and mtp_num_layers.")            \
    /* batch sizes */                                                                              \
    X(tr_check_batch_sizes_set, "batch.sizes_set", E, false,                                       \
      "train.micro_batch_size and train.global_batch_size are set.")                               \
    X(tr_check_batch_counts_fit_runtime, "batch.counts_fit_runtime", E, false,                     \
      "Microbatches per step fit 32 bits and the run's samples fit 64 bits.")                      \
    X(tr_check_global_batch_divisible, "batch.global_divisible_by_micro_dp", E, false,             \
      "global_batch_size is divisible by micro_batch_size * DP.")                                  \
    X(tr_check_eval_batch_divisible, "batch.eval_global_divisible_by_micro_dp", E, false,          \
      "eval_global_batch_size is divisible by eval_micro_batch_size * eval DP.")                   \
    X(tr_check_rampup_format, "batch.rampup_format", E, false,                                     \
      "rampup_batch_size has 3 values and is used only with train_iters.")                         \
    /* training length and scheduler */                                                            \
    X(tr_check_train_length_exactly_one, "train.length_exactly_one", E, false,                     \
      "Exactly one of train_iters, train_samples and num_epochs is set.")                          \
    X(tr_check_num_epochs, "train.num_epochs", E, false,                                           \
      "num_epochs is positive and used with an sft dataset and the batch dataloader.")             \
    X(tr_warn_deprecated_eval_fields, "train.deprecated_eval_fields", W, false,                    \
      "The deprecated train.eval_iters/eval_interval/skip_train are not used.")                    \
    X(tr_check_scheduler_sample_mode_fields, "scheduler.sample_mode_fields", E, false,             \
      "Sample-based training uses only the *_samples scheduler fields.")                           \
    X(tr_check_scheduler_iteration_mode_fields, "scheduler.iteration_mode_fields", E, false,       \
      "Iteration-based training uses only the *_iters scheduler fields.")                          \
    X(tr_check_warmup_fraction_exclusive, "scheduler.warmup_fraction_exclusive", E, false,         \
      "lr_warmup_fraction is not combined with lr_warmup_iters or lr_warmup_samples.")             \
    X(tr_check_max_steps_covers_train_iters, "scheduler.max_steps_covers_train_iters", E, false,   \
      "scheduler.max_steps is at least train.train_iters.")                                        \
    X(tr_check_weight_decay_range, "scheduler.weight_decay_range", E, false,                       \
      "end_weight_decay is at least start_weight_decay.")                                          \
    X(tr_check_scheduler_checkpoint_source, "scheduler.checkpoint_source", E, false,               \
      "override_opt_param_scheduler and use_checkpoint_opt_param_scheduler are not both on.")      \
    /* optimizer and ddp */                                                                        \
    X(tr_check_lr_set, "optimizer.lr_set", E, false, "optimizer.lr is set.")                       \
    X(tr_check_min_lr_le_lr, "optimizer.min_lr_le_lr", E, false,                                   \
      "min_lr is at most lr (decoupled_min_lr at most the decoupled peak).")                       \
    X(tr_check_overlap_param_gather_needs_distopt, "optimizer.overlap_param_gather_needs_distopt", \
      E, false, "overlap_param_gather is only used with the distributed optimizer.")               \
    X(tr_check_overlap_param_gather_needs_grad_reduce,                                             \
      "optimizer.overlap_param_gather_needs_grad_reduce", E, false,                                \
      "overlap_param_gather is only used with overlap_grad_reduce.")                               \
    X(tr_check_precision_aware_optimizer, "optimizer.precision_aware", E, false,                   \
      "The precision-aware optimizer is adam with the distributed optimizer; otherwise state "     \
      "dtypes are fp32.")                                                                          \
    X(tr_check_buckets, "ddp.buckets", E, false,                                                   \
      "num_buckets excludes bucket_size; fp32 local accumulation excludes grad_reduce_in_fp32.")   \
    /* precision */                                                                                \
    X(tr_check_model_fp16_bf16_exclusive, "precision.model_fp16_bf16_exclusive", E, false,         \
      "model.fp16 and model.bf16 are not both true.")                                              \
    X(tr_check_optimizer_fp16_bf16_exclusive, "precision.optimizer_fp16_bf16_exclusive", E, false, \
      "optimizer.fp16 and optimizer.bf16 are not both true.")                                      \
    X(tr_check_mixed_precision_flags_exclusive, "precision.mixed_precision_flags_exclusive", E,    \
      false, "At most one of mixed_precision.fp32/fp16/bf16 is true.")                             \
    X(tr_check_precision_aware_matches_model, "precision.precision_aware_matches_model", E, false, \
      "With the precision-aware optimizer, optimizer bf16/fp16 match the model's.")                \
    /* model */                                                                                    \
    X(tr_check_architecture_set, "model.architecture_set", E, false,                               \
      "num_layers, hidden_size and num_attention_heads are set.")                                  \
    X(tr_check_sizes_fit_runtime, "model.sizes_fit_runtime", E, false,                             \
      "Model sizes fit the runtime's 32-bit indices; parameters and per-rank memory are finite.")  \
    X(tr_check_hidden_divisible_by_heads, "model.hidden_divisible_by_heads", E, false,             \
      "Without kv_channels, hidden_size is divisible by num_attention_heads.")                     \
    X(tr_check_recompute, "model.recompute", E, false,                                             \
      "Recompute method/num_layers match the granularity; no distributed saved activations with "  \
      "SP.")                                                                                       \
    X(tr_check_recompute_modules, "model.recompute_modules", E, false,                             \
      "recompute_modules names known modules whose features are on.")                              \
    X(tr_check_bias_activation_fusion, "model.bias_activation_fusion", E, false,                   \
      "bias_activation_fusion is used with a gelu or silu activation.")                            \
    X(tr_check_deterministic_no_ce_fusion, "model.deterministic_no_ce_fusion", E, false,           \
      "deterministic_mode is not combined with cross_entropy_loss_fusion.")                        \
    X(tr_check_window_size, "model.window_size", E, false, "window_size is [left, right].")        \
    /* mixture of experts */                                                                       \
    X(tr_check_ep_needs_experts, "moe.ep_needs_experts", E, false,                                 \
      "EP > 1 needs num_moe_experts.")                                                             \
    X(tr_check_experts_divisible_by_ep, "moe.experts_divisible_by_ep", E, false,                   \
      "num_moe_experts is divisible by EP.")                                                       \
    X(tr_check_topk_le_experts, "moe.topk_le_experts", E, false,                                   \
      "moe_router_topk is at most num_moe_experts.")                                               \
    X(tr_check_group_limited_routing, "moe.group_limited_routing", E, false,                       \
      "Group-limited routing has num_groups dividing the experts and group_topk <= num_groups.")   \
    X(tr_check_topk1_pre_softmax, "moe.topk1_pre_softmax", E, false,                               \
      "Top-1 softmax routing uses moe_router_pre_softmax.")                                        \
    X(tr_check_expert_bias_score, "moe.expert_bias_score_function", E, false,                      \
      "Expert-bias balancing uses a sigmoid or sqrtsoftplus score.")                               \
    X(tr_check_capacity, "moe.capacity", E, false,                                                 \
      "Capacity factors avoid sinkhorn; padding to capacity needs a capacity factor.")             \
    X(tr_check_shared_expert_overlap, "moe.shared_expert_overlap_dispatcher", E, false,            \
      "Shared-expert overlap uses the alltoall or flex dispatcher.")                               \
    X(tr_check_moe_bias_needs_etp1, "moe.bias_needs_etp1", E, false,                               \
      "MoE layers with biases use ETP 1.")                                                         \
    X(tr_check_moe_tp_needs_sp, "moe.tp_needs_sp", E, false,                                       \
      "MoE layers with TP > 1 use sequence parallelism (Megatron's MoELayer raises otherwise).")   \
    X(tr_check_moe_fields_without_experts, "moe.fields_without_experts", E, false,                 \
      "moe_ffn_hidden_size is only set on MoE models.")                                            \
    X(tr_check_moe_layer_freq, "moe.layer_freq", E, false,                                         \
      "moe_layer_freq is one interval or one 0/1 flag per layer.")                                 \
    X(tr_check_ep_overlap, "moe.ep_overlap", E, false,                                             \
      "Expert-parallel comm overlap has EP > 1, bf16/fp16, alltoall/flex, VPP with PP > 1 and no " \
      "full recompute.")                                                                           \
    X(tr_check_delay_wgrad_needs_ep_overlap, "moe.delay_wgrad_needs_ep_overlap", E, false,         \
      "delay_wgrad_compute needs overlap_moe_expert_parallel_comm.")                               \
    X(tr_check_variable_seq_dispatcher, "moe.variable_seq_dispatcher", E, false,                   \
      "variable_seq_lengths is not used with the allgather dispatcher.")                           \
    /* dataset */                                                                                  \
    X(tr_check_seq_length, "data.seq_length_matches_model", E, false,                              \
      "dataset.seq_length is set and equals model.seq_length.")                                    \
    X(tr_check_blend_syntax, "data.blend_syntax", E, false,                                        \
      "A weighted blend is [w1, p1, w2, p2, ...] with positive weights.")                          \
    X(tr_check_split_syntax, "data.split_syntax", E, false,                                        \
      "dataset.split is up to 3 non-negative numbers with a positive sum.")                        \
    X(tr_check_blend_sources, "data.blend_sources", E, false,                                      \
      "Per-split blends exclude data_path/split; data_path needs split.")                          \
    X(tr_check_gpt_flags_defined, "data.gpt_flags_defined", E, false,                              \
      "gpt datasets set reset_position_ids, reset_attention_mask and eod_mask_loss.")              \
    X(tr_note_mock_split, "data.mock_split", N, false,                                             \
      "dataset.split is 1,1,1 or null on mock data (megatron-core forces 1,1,1).")                 \
    X(tr_check_sft_needs_root, "data.sft_needs_dataset_root", E, true,                             \
      "sft datasets name dataset.dataset_root.")                                                   \
    X(tr_check_text_needs_path, "data.text_needs_data_path", E, true,                              \
      "text datasets name exactly one file in dataset.data_path.")                                 \
    X(tr_check_offline_packing, "data.offline_packing", E, false,                                  \
      "Offline packing has specs, sft data, micro_batch_size 1 and CP/SP-aligned padding.")        \
    X(tr_check_cp_sft, "data.cp_sft_loss", E, false,                                               \
      "SFT with CP > 1 uses per-token loss and no averaging in the collective.")                   \
    /* tokenizer and vocabulary */                                                                 \
    X(tr_check_tokenizer_type_set, "tokenizer.type_set", E, false,                                 \
      "tokenizer.tokenizer_type is set.")                                                          \
    X(tr_check_null_tokenizer_vocab, "tokenizer.null_tokenizer_vocab", E, false,                   \
      "The NullTokenizer has vocab_size (and its eod id lies inside it).")                         \
    X(tr_check_gpt2_files, "tokenizer.gpt2_files", E, true,                                        \
      "The GPT2BPETokenizer names vocab_file and merge_file.")                                     \
    X(tr_check_tokenizer_model_file, "tokenizer.model_file", E, true,                              \
      "File-based tokenizers name tokenizer_model.")                                               \
    X(tr_check_chat_template_exclusive, "tokenizer.chat_template_exclusive", E, false,             \
      "chat_template and chat_template_path are not both set.")                                    \
    X(tr_check_model_vocab_covers_tokenizer, "tokenizer.model_vocab_covers_tokenizer", E, false,   \
      "model.vocab_size is at least the tokenizer's vocabulary.")                                  \
    X(tr_warn_vocab_padding, "tokenizer.vocab_padded", W, false,                                   \
      "Vocabulary padding leaves the vocabulary size unchanged.")                                  \
    /* checkpoint */                                                                               \
    X(tr_note_save_interval_without_save, "checkpoint.save_interval_without_save", N, false,       \
      "save_interval comes with a save directory.")                                                \
    X(tr_check_most_recent_k, "checkpoint.most_recent_k", E, false,                                \
      "most_recent_k is -1 or at least 1.")                                                        \
    X(tr_check_async_save, "checkpoint.async_save", E, false,                                      \
      "async_save uses torch_dist, a save directory and the persistent worker.")                   \
    X(tr_check_load_main_params, "checkpoint.load_main_params_needs_no_optim", E, false,           \
      "load_main_params_from_ckpt is used with load_optim false.")                                 \
    X(tr_check_ckpt_step_needs_load, "checkpoint.ckpt_step_needs_load", E, false,                  \
      "ckpt_step comes with checkpoint.load.")                                                     \
    X(tr_check_reshardable_exclusive, "checkpoint.reshardable_exclusive", E, false,                \
      "The two fully-reshardable optimizer modes are not both on.")                                \
    X(tr_check_verify_integrity_format, "checkpoint.verify_integrity_format", E, false,            \
      "verify_integrity is used with torch_dist.")                                                 \
    X(tr_check_distopt_without_gloo_format, "checkpoint.distopt_without_gloo_format", E, false,    \
      "The distributed optimizer without gloo groups saves torch_dist.")                           \
    X(tr_check_peft_needs_pretrained, "checkpoint.peft_needs_pretrained", E, true,                 \
      "PEFT names checkpoint.pretrained_checkpoint.")                                              \
    X(tr_check_finetune_needs_checkpoint, "checkpoint.finetune_needs_checkpoint", E, true,         \
      "checkpoint.finetune has a checkpoint to start from.")                                       \
    /* what the training runtime can run (core/rules/runtime.c) */                                 \
    X(tr_check_runtime_context_parallel, "runtime.context_parallel", E, false,                     \
      "CP exchanges by p2p, allgather or a2a (CP dividing heads, groups), one for every layer.")   \
    X(tr_check_runtime_cp_dropout, "runtime.cp_dropout", E, false,                                 \
      "With CP: no adapter dropout, no hidden dropout on fine-tuning documents.")                  \
    X(tr_check_runtime_cp_packed, "runtime.cp_packed", E, false,                                   \
      "Context parallelism pads each unpacked fine-tuning document to a multiple of 2 x CP.")      \
    X(tr_check_runtime_moe_layers, "runtime.moe_layers", E, false,                                 \
      "An MoE model has at most 1024 experts and 256 layers.")                                     \
    X(tr_check_runtime_moe_tp, "runtime.moe_tp", E, false,                                         \
      "MoE layers: expert TP divides the experts' ffn; under TP or CP no input jitter, dropless.") \
    X(tr_check_runtime_moe_allgather, "runtime.moe_allgather", E, false,                           \
      "The allgather MoE dispatcher under EP: expert TP 1, no padding to the capacity.")           \
    X(tr_check_runtime_moe_peft, "runtime.moe_peft", E, false,                                     \
      "LoRA on MoE models runs without DoRA, expert parallelism and expert TP (not built yet).")   \
    X(tr_check_runtime_moe_bias, "runtime.moe_bias", E, false,                                     \
      "MoE models have no linear-layer biases (not built yet).")                                   \
    X(tr_check_runtime_moe_router, "runtime.moe_router", E, false,                                 \
      "The router balances without sinkhorn and computes in fp32 or the model's dtype.")           \
    X(tr_check_runtime_moe_global_aux_dp, "runtime.moe_global_aux_dp", E, false,                   \
      "global_aux_loss runs without data parallelism (its forward reduction is not built yet).")   \
    X(tr_check_runtime_dropout_below_one, "runtime.dropout_below_one", E, false,                   \
      "Every dropout probability is below 1.")                                                     \
    X(tr_check_runtime_rotary_interleaved, "runtime.rotary_interleaved", E, false,                 \
      "rotary_interleaved is off: the runtime rotates halves, not pairs.")                         \
    X(tr_check_runtime_yarn, "runtime.yarn", E, false,                                             \
      "The position embedding is not YaRN: the runtime has no YaRN scaling yet.")                  \
    X(tr_check_runtime_sliding_window, "runtime.sliding_window", E, false,                         \
      "window_size is null: the runtime has no sliding-window attention yet.")                     \
    X(tr_check_runtime_mla_context_parallel, "runtime.mla_context_parallel", E, false,             \
      "Multi-latent attention runs without context parallelism.")                                  \
    X(tr_check_runtime_mla_peft, "runtime.mla_peft", E, false,                                     \
      "Multi-latent attention runs without LoRA/DoRA adapters.")                                   \
    X(tr_check_runtime_mla_layernorm, "runtime.mla_layernorm", E, false,                           \
      "Multi-latent attention runs with RMSNorm.")                                                 \
    X(tr_check_runtime_mla_rope_dim, "runtime.mla_rope_dim", E, false,                             \
      "qk_pos_emb_head_dim is even under multi-latent attention.")                                 \
    X(tr_check_runtime_fsdp, "runtime.fsdp", E, false,                                             \
      "FSDP (dist.use_megatron_fsdp, dist.use_torch_fsdp2, ddp.use_megatron_fsdp) is off.")        \
    X(tr_check_runtime_mtp_context_parallel, "runtime.mtp_context_parallel", E, false,             \
      "Multi-token prediction runs without context parallelism.")                                  \
    X(tr_check_runtime_mtp_peft, "runtime.mtp_peft", E, false,                                     \
      "Multi-token prediction runs without LoRA/DoRA adapters.")                                   \
    X(tr_check_runtime_mtp_defer_wgrad, "runtime.mtp_defer_wgrad", E, false,                       \
      "Multi-token prediction runs without the deferred output-layer weight gradient.")            \
    X(tr_check_runtime_mtp_positions, "runtime.mtp_positions", E, false,                           \
      "Multi-token prediction runs with rotary (not learned) positions.")                          \
    X(tr_check_runtime_mtp_packing, "runtime.mtp_packing", E, false,                               \
      "Multi-token prediction trains on unpacked sequences.")                                      \
    X(tr_check_runtime_mtp_layout, "runtime.mtp_layout", E, false,                                 \
      "Multi-token prediction's depths sit in the loss stage of the pipeline layout.")             \
    X(tr_check_runtime_params_dtype, "runtime.params_dtype", E, false,                             \
      "params_dtype is fp32 or the mixed-precision dtype (fp32 main parameters).")                 \
    X(tr_check_runtime_fp16_cross_entropy, "runtime.fp16_cross_entropy", E, false,                 \
      "fp16_lm_cross_entropy is off: the cross entropy is computed in fp32.")                      \
    X(tr_check_runtime_activation, "runtime.activation", E, false,                                 \
      "The MLP is SwiGLU (gated silu) or an ungated gelu / fast_gelu.")                            \
    X(tr_check_runtime_tp_split, "runtime.tp_split", E, false,                                     \
      "TP divides the heads, the MLP width, the padded vocabulary and (SP) the sequence.")         \
    X(tr_check_runtime_vocab, "runtime.vocab", E, false,                                           \
      "The model has a vocabulary: 256 ids on byte-level text, 2 on mock data.")                   \
    X(tr_check_runtime_train_iters, "runtime.train_iters", E, false,                               \
      "train_iters and the batch sizes are set (the runtime counts iterations).")                  \
    X(tr_check_runtime_batch_rampup, "runtime.batch_rampup", E, false,                             \
      "rampup_batch_size is null: the runtime has no batch-size ramp-up yet.")                     \
    X(tr_check_runtime_document_resets, "runtime.document_resets", E, false,                       \
      "reset_position_ids and reset_attention_mask are off.")                                      \
    X(tr_check_runtime_not_logged, "runtime.not_logged", W, false,                                 \
      "log_num_zeros_in_grad and log_memory are off (the runtime does not log them yet).")         \
    X(tr_check_runtime_indexed_masks, "runtime.indexed_masks", E, false,                           \
      "Indexed data keeps eod_mask_loss off; GPT data the extra-token and drop-last defaults.")    \
    X(tr_check_runtime_optimizer, "runtime.optimizer", E, false,                                   \
      "Adam decouples its weight decay (AdamW); no separate embedding learning rate.")             \
    X(tr_check_runtime_optimizer_precision, "runtime.optimizer_precision", E, false,               \
      "The optimizer's bf16/fp16 match the model's (its state dtypes are honoured).")              \
    X(tr_check_runtime_loss_scale, "runtime.loss_scale", E, false,                                 \
      "A static loss scale is positive; fp16 dynamic scaling has a valid initial, minimum and "    \
      "window.")                                                                                   \
    X(tr_check_runtime_autocast, "runtime.autocast", E, false,                                     \
      "mixed_precision.autocast_enabled is off: the runtime has no autocast regions.")             \
    X(tr_check_runtime_distopt_instances, "runtime.distopt_instances", E, false,                   \
      "num_distributed_optimizer_instances is 1.")                                                 \
    X(tr_check_runtime_lora, "runtime.lora", E, false,                                             \
      "LoRA's dropout comes before the projection; DoRA runs without dropout.")                    \
    X(tr_check_runtime_lora_modules, "runtime.lora_modules", E, false,                             \
      "LoRA names modules among linear_qkv/proj/fc1/fc2 and adapts at least one.")                 \
    X(tr_check_runtime_ckpt_format, "runtime.ckpt_format", E, false,                               \
      "Checkpoints are saved and loaded as trestle (or its alias torch_dist).")                    \
    /* small sections and files */                                                                 \
    X(tr_check_pytorch_profiler, "profiling.pytorch_profiler_unavailable", E, false,               \
      "profiling.use_pytorch_profiler stays false.")                                               \
    X(tr_check_profile_steps, "profiling.step_range", E, false,                                    \
      "profile_step_end is at least profile_step_start.")                                          \
    X(tr_check_peft_exclude_modules, "peft.exclude_needs_empty_targets", E, false,                 \
      "exclude_modules is used with an empty target_modules.")                                     \
    X(tr_check_launch_files_exist, "files.launch_inputs_exist", E, true,                           \
      "Files and directories a launch reads exist (when files are checked).")                      \
    /* keys whose effect this runtime lacks: capability rules too (core/rules/effects.c) */        \
    X(tr_check_effect_p2p_warmup_flush, "runtime.p2p_warmup_flush", E, false,                      \
      "model.overlap_p2p_comm_warmup_flush is false (the executor has no such schedule).")         \
    X(tr_check_effect_dataloader, "runtime.dataloader_type", E, false,                             \
      "dataset.dataloader_type is single or batch (cyclic and external are not built).")           \
    X(tr_check_effect_drop_last, "runtime.drop_last", E, false,                                    \
      "dataset.drop_last is true (a short final batch is never trained).")                         \
    X(tr_check_effect_num_epochs, "runtime.num_epochs", E, false,                                  \
      "train.num_epochs is null (the loop counts iterations).")                                    \
    X(tr_check_effect_grad_norm_mp, "runtime.grad_norm_across_mp", E, false,                       \
      "train.skip_sync_grad_norm_across_mp is false (the norm is always global).")                 \
    X(tr_check_effect_grad_checks, "runtime.gradient_checks", E, false,                            \
      "ddp.check_for_large_grads and train.check_weight_hash_across_dp_replicas_interval are "     \
      "off.")                                                                                      \
    X(tr_check_effect_rerun, "runtime.rerun_state_machine", E, false,                              \
      "rerun_state_machine.rerun_mode is disabled and check_for_spiky_loss is false.")             \
    X(tr_check_effect_validation_sets, "runtime.validation_sets", E, false,                        \
      "validation.multiple_validation_sets is false and validation_set_names is null.")            \
    X(tr_check_effect_ckpt_scheduler, "runtime.checkpoint_scheduler", E, false,                    \
      "scheduler.use_checkpoint_opt_param_scheduler is false (the schedule comes from the "        \
      "config).")                                                                                  \
    X(tr_check_effect_non_persistent, "runtime.non_persistent_checkpoints", E, false,              \
      "checkpoint.non_persistent_save_interval and non_persistent_ckpt_type are null.")            \
    X(tr_check_effect_tokenizer, "runtime.tokenizer_options", E, false,                            \
      "tokenizer vocab_extra_ids, special_tokens, metadata_path, "                                 \
      "tokenizer_hf_no_include_special_tokens, chat_template(_path) keep their defaults.")         \
    X(tr_check_effect_init_and_dtype, "runtime.init_and_adapter_dtype", E, false,                  \
      "rng.data_parallel_random_init is false; peft.lora_dtype is null or fp32.")                  \
    X(tr_note_no_effect, "config.no_effect", N, false,                                             \
      "Keys marked no-effect or unbuilt in the field table keep their defaults (a note).")

/* Rules reported by finalize(): listed for the docs, checked there. */
#define TR_FINALIZE_RULE_LIST(Y)                                                                   \
    Y("scheduler.warmup_capped", W, false,                                                         \
      "The warmup is shorter than the decay (finalize() caps it to decay - 1).")                   \
    Y("finalize.distributed_optimizer_synced", N, false,                                           \
      "ddp/optimizer.use_distributed_optimizer agree (finalize() turns both on).")                 \
    Y("finalize.overlap_param_gather_synced", N, false,                                            \
      "ddp/optimizer.overlap_param_gather agree (finalize() turns both on).")                      \
    Y("finalize.user_value_replaced", W, false,                                                    \
      "finalize() keeps the values you set, except where another setting decides them; then it "   \
      "names the change (see --explain KEY).")                                                     \
    Y("finalize.batch_size_decreased", N, false,                                                   \
      "With decrease_batch_size_if_needed, the global batch is a multiple of MBS * DP "            \
      "(finalize() lowers it).")

#define TR_DECLARE(fn, id, sev, launch, summary) TR_RULE_FN(fn);
TR_RULE_LIST(TR_DECLARE)

#define TR_ROW(fn, id, sev, launch, summary) {id, sev, launch, summary, fn},
#define TR_FROW(id, sev, launch, summary)    {id, sev, launch, summary, NULL},
const tr_rule tr_rules[] = {TR_RULE_LIST(TR_ROW) TR_FINALIZE_RULE_LIST(TR_FROW)};
const int tr_rule_count = (int)(sizeof tr_rules / sizeof tr_rules[0]);

tr_status tr_config_validate(const tr_config *c, const tr_validate_opts *opts, tr_diags *d) {
    static const tr_validate_opts defaults = {0};
    if (!opts) opts = &defaults;
    int errors = d->n_errors;
    for (int i = 0; i < tr_rule_count; i++) {
        const tr_rule *r = &tr_rules[i];
        if (!r->check || (opts->skip_capability && tr_rule_is_capability(r))) continue;
        if (opts->errors_only && r->severity != TR_SEV_ERROR) continue;
        r->check(c, opts, r, d);
    }
    return d->n_errors > errors ? TR_ERR_CONFIG : TR_OK;
}

tr_status tr_runtime_check(const tr_config *c, tr_diags *d) {
    static const tr_validate_opts launch = {0};
    int errors = d->n_errors;
    bool heard = false;
    /* A launch that validated into the same diagnostics has heard each rule once already; an
     * error heard then still refuses. */
    for (int i = 0; i < tr_rule_count; i++) {
        const tr_rule *r = &tr_rules[i];
        if (!r->check || !tr_rule_is_capability(r)) continue;
        const tr_diag *g = tr_diags_find(d, r->id);
        if (g)
            heard |= g->severity == TR_SEV_ERROR;
        else
            r->check(c, &launch, r, d);
    }
    return heard || d->n_errors > errors ? TR_ERR_CONFIG : TR_OK;
}
