/* Every validation rule, failing and passing: each case breaks a small valid config so that
 * exactly the rule under test must fire (naming its keys and values), then applies a fix on top
 * and checks that the rule is silent. */
#include "core/config.h"
#include "tests/unit/harness.h"
#include "tests/unit/config/rules_fixture.h"

typedef struct rule_case {
    const char *id;
    int moe;    /* base config: 0 dense, 1 MoE */
    int world;  /* world size */
    int gpn;    /* gpus per node; 0 = world */
    bool files; /* opts.check_files */
    const char *bad;
    const char *fix;    /* applied on top of bad */
    const char *keys;   /* ','-separated keys the diagnostic must name */
    const char *values; /* ';'-separated substrings of the message */
    const char *hint;   /* substring of the hint, or NULL */
} rule_case;

static const rule_case cases[] = {
    {"parallel.world_divisible_by_model_size", 0, 3, 0, 0, "model.tensor_model_parallel_size=2",
     "model.tensor_model_parallel_size=1", "derived.world_size,model.tensor_model_parallel_size",
     "world size (3);(2)", "multiple of 2 GPUs"},
    {"parallel.world_divisible_by_expert_size", 1, 2, 0, 0, "model.expert_model_parallel_size=4",
     "model.expert_model_parallel_size=2",
     "model.expert_model_parallel_size,model.expert_tensor_parallel_size", "(4);world size (2)",
     "multiple of 4 GPUs"},
    {"parallel.eval_world_divisible", 0, 2, 0, 0, "dist.eval_context_parallel_size=4",
     "dist.eval_context_parallel_size=2", "dist.eval_context_parallel_size", "(4)", NULL},
    {"parallel.heads_divisible_by_tp", 0, 4, 0, 0,
     "model.num_attention_heads=6;model.hidden_size=96;model.tensor_model_parallel_size=4",
     "model.tensor_model_parallel_size=2",
     "model.num_attention_heads,model.tensor_model_parallel_size", "(6);(4)", "e.g. 2, 3"},
    {"parallel.query_groups_compatible_with_tp", 0, 4, 0, 0,
     "model.tensor_model_parallel_size=4;model.num_query_groups=3", "model.num_query_groups=2",
     "model.num_query_groups,model.tensor_model_parallel_size", "(3);(4)", NULL},
    {"parallel.sequence_parallel_needs_tp", 0, 1, 0, 0, "model.sequence_parallel=true",
     "model.sequence_parallel=false", "model.sequence_parallel,model.tensor_model_parallel_size",
     "(it is 1)", NULL},
    {"parallel.tp_comm_overlap_needs_tp", 0, 1, 0, 0, "comm_overlap.tp_comm_overlap=true",
     "comm_overlap.tp_comm_overlap=false", "model.tp_comm_overlap,model.tensor_model_parallel_size",
     "(it is 1)", NULL},
    {"parallel.comm_overlap_section", 0, 1, 0, 0, "comm_overlap.overlap_grad_reduce=true",
     "comm_overlap.tp_comm_overlap=false",
     "comm_overlap.overlap_grad_reduce,comm_overlap.tp_comm_overlap", "is null", NULL},
    {"parallel.tp_comm_overlap_needs_sp", 0, 2, 0, 0,
     "model.tensor_model_parallel_size=2;comm_overlap.tp_comm_overlap=true",
     "model.sequence_parallel=true", "model.tp_comm_overlap,model.sequence_parallel", "", NULL},
    {"parallel.seq_length_divisible_by_2cp", 0, 3, 0, 0, "model.context_parallel_size=3",
     "model.seq_length=132;dataset.seq_length=132", "model.seq_length,model.context_parallel_size",
     "(128);= 6", "multiple of 6"},
    {"parallel.hierarchical_cp_product", 0, 4, 0, 0,
     "model.context_parallel_size=4;model.hierarchical_context_parallel_sizes=[2,3]",
     "model.hierarchical_context_parallel_sizes=[2,2]",
     "model.hierarchical_context_parallel_sizes,model.context_parallel_size", "(6);(4)", NULL},
    {"parallel.cp_comm_type", 0, 1, 0, 0, "model.cp_comm_type=[ring]", "model.cp_comm_type=[p2p]",
     "model.cp_comm_type", "'ring'", NULL},
    {"parallel.vpp_needs_pp", 0, 1, 0, 0, "model.virtual_pipeline_model_parallel_size=2",
     "model.virtual_pipeline_model_parallel_size=null",
     "model.virtual_pipeline_model_parallel_size,model.pipeline_model_parallel_size", "(2)", NULL},
    {"parallel.vpp_microbatches", 0, 2, 0, 0,
     "model.pipeline_model_parallel_size=2;model.virtual_pipeline_model_parallel_size=2;"
     "train.global_batch_size=3",
     "train.global_batch_size=4", "derived.num_microbatches,model.pipeline_model_parallel_size",
     "(3)", "multiple of PP (2)"},
    {"parallel.expert_dp_matches_without_pp_last", 1, 4, 0, 0,
     "model.pipeline_model_parallel_size=2;dist.use_tp_pp_dp_mapping=true",
     "dist.use_tp_pp_dp_mapping=false",
     "dist.use_tp_pp_dp_mapping,derived.data_parallel_size,derived.expert_data_parallel_size",
     "(2);(1)", NULL},
    {"parallel.distopt_instances_divide_dp_cp", 0, 2, 0, 0,
     "ddp.num_distributed_optimizer_instances=3", "ddp.num_distributed_optimizer_instances=2",
     "ddp.num_distributed_optimizer_instances", "(3);(2)", NULL},
    {"parallel.weight_shards_multiple_of_tp", 0, 2, 0, 0,
     "model.tensor_model_parallel_size=2;model.tensor_parallel_num_weight_shards=3",
     "model.tensor_parallel_num_weight_shards=4",
     "model.tensor_parallel_num_weight_shards,model.tensor_model_parallel_size", "(3);(2)", NULL},
    {"parallel.defer_embedding_wgrad", 0, 1, 0, 0, "model.defer_embedding_wgrad_compute=true",
     "model.defer_embedding_wgrad_compute=false",
     "model.defer_embedding_wgrad_compute,model.pipeline_model_parallel_size", "", NULL},
    {"parallel.p2p_warmup_flush", 0, 1, 0, 0, "model.overlap_p2p_comm_warmup_flush=true",
     "model.overlap_p2p_comm=true;model.batch_p2p_comm=false",
     "model.overlap_p2p_comm_warmup_flush,model.overlap_p2p_comm,model.batch_p2p_comm",
     "(false);(true)", NULL},
    {"parallel.sharp_group_needs_sharp", 0, 1, 0, 0, "dist.sharp_enabled_group=dp",
     "dist.use_sharp=true", "dist.sharp_enabled_group,dist.use_sharp", "(dp)", NULL},
    {"parallel.tp_exceeds_node", 0, 2, 1, 0, "model.tensor_model_parallel_size=2",
     "model.tensor_model_parallel_size=1", "model.tensor_model_parallel_size,derived.gpus_per_node",
     "(2);(1)", NULL},
    {"parallel.pp_without_vpp", 0, 2, 0, 0, "model.pipeline_model_parallel_size=2",
     "model.virtual_pipeline_model_parallel_size=2",
     "model.pipeline_model_parallel_size,model.virtual_pipeline_model_parallel_size", "is 2", NULL},
    {"parallel.ep_tp_without_sp", 1, 4, 0, 0, "model.tensor_model_parallel_size=2",
     "model.sequence_parallel=true",
     "model.sequence_parallel,model.expert_model_parallel_size,model.tensor_model_parallel_size",
     "(2)", NULL},
    {"pipeline.layers_divisible_by_pp", 0, 3, 0, 0, "model.pipeline_model_parallel_size=3",
     "model.num_layers=6", "model.num_layers,model.pipeline_model_parallel_size", "(4);(3)", NULL},
    {"pipeline.stage_layers_divisible_by_vpp", 0, 2, 0, 0,
     "model.pipeline_model_parallel_size=2;model.virtual_pipeline_model_parallel_size=3",
     "model.num_layers=12", "model.num_layers,model.virtual_pipeline_model_parallel_size",
     "= 2);(3)", NULL},
    {"pipeline.uneven_not_with_account_for", 0, 2, 0, 0,
     "model.pipeline_model_parallel_size=2;model.num_layers_in_first_pipeline_stage=1;"
     "model.account_for_loss_in_pipeline_split=true",
     "model.account_for_loss_in_pipeline_split=false",
     "model.num_layers_in_first_pipeline_stage,model.account_for_loss_in_pipeline_split", "", NULL},
    {"pipeline.uneven_split", 0, 3, 0, 0,
     "model.pipeline_model_parallel_size=3;model.num_layers_in_first_pipeline_stage=1",
     "model.num_layers_in_last_pipeline_stage=1",
     "model.num_layers,model.num_layers_in_first_pipeline_stage", "3 middle layers;2 middle", NULL},
    {"pipeline.account_for_split", 0, 2, 0, 0,
     "model.pipeline_model_parallel_size=2;model.account_for_loss_in_pipeline_split=true",
     "model.account_for_embedding_in_pipeline_split=true",
     "model.num_layers,model.account_for_loss_in_pipeline_split", "(5);(2)", NULL},
    {"pipeline.layout_conflicts", 0, 2, 0, 0,
     "model.pipeline_model_parallel_size=2;model.pipeline_model_parallel_layout=Ett|ttL;"
     "model.account_for_loss_in_pipeline_split=true",
     "model.account_for_loss_in_pipeline_split=false",
     "model.pipeline_model_parallel_layout,model.account_for_loss_in_pipeline_split", "", NULL},
    {"pipeline.layout_valid", 0, 2, 0, 0,
     "model.pipeline_model_parallel_size=2;model.pipeline_model_parallel_layout=Et|ttL",
     "model.pipeline_model_parallel_layout=Et*2|t*2L",
     "model.pipeline_model_parallel_layout,model.num_layers", "places 3;is 4", NULL},
    {"batch.sizes_set", 0, 1, 0, 0, "train.micro_batch_size=null", "train.micro_batch_size=1",
     "train.micro_batch_size", "micro_batch_size", NULL},
    {"batch.counts_fit_runtime", 0, 1, 0, 0, "train.global_batch_size=9223372036854775807",
     "train.global_batch_size=8", "train.global_batch_size,train.micro_batch_size",
     "(9223372036854775807);32-bit", "reduce train.global_batch_size"},
    {"batch.counts_fit_runtime", 0, 1, 0, 0,
     "train.global_batch_size=2147483648;train.micro_batch_size=2;train.train_iters="
     "9223372036854775807",
     "train.train_iters=100", "train.train_iters,train.global_batch_size", "overflow 64 bits",
     NULL},
    {"batch.global_divisible_by_micro_dp", 0, 2, 0, 0, "train.global_batch_size=7",
     "train.global_batch_size=8",
     "train.global_batch_size,train.micro_batch_size,derived.data_parallel_size", "(7);(1);(2)",
     "multiple of 2"},
    {"batch.eval_global_divisible_by_micro_dp", 0, 1, 0, 0,
     "validation.eval_global_batch_size=5;validation.eval_micro_batch_size=2",
     "validation.eval_global_batch_size=6",
     "validation.eval_global_batch_size,validation.eval_micro_batch_size", "(5);(2)", NULL},
    {"batch.rampup_format", 0, 1, 0, 0, "train.rampup_batch_size=[1,2]",
     "train.rampup_batch_size=[1,2,64]", "train.rampup_batch_size", "2 values", NULL},
    {"train.length_exactly_one", 0, 1, 0, 0, "train.train_samples=800", "train.train_iters=null",
     "train.train_iters,train.train_samples,train.num_epochs", "several", NULL},
    {"train.num_epochs", 0, 1, 0, 0, "train.train_iters=null;train.num_epochs=2",
     "dataset.type=sft;dataset.dataset_root=/tmp", "train.num_epochs,dataset.type", "gpt", NULL},
    {"train.deprecated_eval_fields", 0, 1, 0, 0, "train.eval_iters=5", "train.eval_iters=null",
     "train.eval_iters,validation.eval_iters", "deprecated", NULL},
    {"scheduler.sample_mode_fields", 0, 1, 0, 0,
     "train.train_iters=null;train.train_samples=800;scheduler.lr_warmup_iters=10",
     "scheduler.lr_warmup_iters=0;scheduler.lr_warmup_samples=80",
     "scheduler.lr_warmup_iters,train.train_samples", "(10)", NULL},
    {"scheduler.iteration_mode_fields", 0, 1, 0, 0, "scheduler.lr_decay_samples=100",
     "scheduler.lr_decay_samples=null;scheduler.lr_decay_iters=100", "scheduler.lr_decay_samples",
     "(100)", NULL},
    {"scheduler.warmup_fraction_exclusive", 0, 1, 0, 0,
     "scheduler.lr_warmup_fraction=0.1;scheduler.lr_warmup_iters=10", "scheduler.lr_warmup_iters=0",
     "scheduler.lr_warmup_fraction,scheduler.lr_warmup_iters", "(0.1);(10)", NULL},
    {"scheduler.max_steps_covers_train_iters", 0, 1, 0, 0, "scheduler.max_steps=50",
     "scheduler.max_steps=200", "scheduler.max_steps,train.train_iters", "(50);(100)", NULL},
    {"scheduler.weight_decay_range", 0, 1, 0, 0,
     "scheduler.start_weight_decay=0.1;scheduler.end_weight_decay=0.01",
     "scheduler.end_weight_decay=0.2", "scheduler.end_weight_decay,scheduler.start_weight_decay",
     "(0.01);(0.1)", NULL},
    {"scheduler.checkpoint_source", 0, 1, 0, 0,
     "scheduler.override_opt_param_scheduler=true;scheduler.use_checkpoint_opt_param_scheduler="
     "true",
     "scheduler.use_checkpoint_opt_param_scheduler=false",
     "scheduler.override_opt_param_scheduler,scheduler.use_checkpoint_opt_param_scheduler", "",
     NULL},
    {"scheduler.warmup_capped", 0, 1, 0, 0, "scheduler.lr_warmup_iters=100",
     "scheduler.lr_warmup_iters=10", "scheduler.lr_warmup_iters", "(800 samples);capped to 799",
     NULL},
    {"optimizer.lr_set", 0, 1, 0, 0, "optimizer.lr=null", "optimizer.lr=1e-3", "optimizer.lr",
     "not set", NULL},
    {"optimizer.min_lr_le_lr", 0, 1, 0, 0, "optimizer.min_lr=0.01", "optimizer.min_lr=0.0001",
     "optimizer.min_lr,optimizer.lr", "(0.01);(0.001)", NULL},
    {"optimizer.overlap_param_gather_needs_distopt", 0, 1, 0, 0,
     "ddp.overlap_param_gather=true;ddp.overlap_grad_reduce=true",
     "ddp.use_distributed_optimizer=true", "ddp.overlap_param_gather,ddp.use_distributed_optimizer",
     "", NULL},
    {"optimizer.overlap_param_gather_needs_grad_reduce", 0, 1, 0, 0,
     "ddp.use_distributed_optimizer=true;ddp.overlap_param_gather=true",
     "ddp.overlap_grad_reduce=true", "ddp.overlap_param_gather,ddp.overlap_grad_reduce", "", NULL},
    {"optimizer.precision_aware", 0, 1, 0, 0, "optimizer.use_precision_aware_optimizer=true",
     "optimizer.use_distributed_optimizer=true",
     "optimizer.use_precision_aware_optimizer,optimizer.use_distributed_optimizer", "", NULL},
    {"ddp.buckets", 0, 1, 0, 0, "ddp.num_buckets=4;ddp.bucket_size=1000", "ddp.bucket_size=null",
     "ddp.num_buckets,ddp.bucket_size", "(4);(1000)", NULL},
    {"finalize.distributed_optimizer_synced", 0, 1, 0, 0, "ddp.use_distributed_optimizer=true",
     "optimizer.use_distributed_optimizer=true",
     "ddp.use_distributed_optimizer,optimizer.use_distributed_optimizer", "(true);(false)", NULL},
    {"finalize.overlap_param_gather_synced", 0, 1, 0, 0,
     "ddp.use_distributed_optimizer=true;optimizer.use_distributed_optimizer=true;"
     "ddp.overlap_grad_reduce=true;optimizer.overlap_param_gather=true",
     "ddp.overlap_param_gather=true", "ddp.overlap_param_gather,optimizer.overlap_param_gather",
     "(false);(true)", NULL},
    {"precision.model_fp16_bf16_exclusive", 0, 1, 0, 0, "model.fp16=true;model.bf16=true",
     "model.fp16=false", "model.fp16,model.bf16", "", NULL},
    {"precision.optimizer_fp16_bf16_exclusive", 0, 1, 0, 0,
     "optimizer.fp16=true;optimizer.bf16=true", "optimizer.fp16=false",
     "optimizer.fp16,optimizer.bf16", "", NULL},
    {"precision.mixed_precision_flags_exclusive", 0, 1, 0, 0,
     "mixed_precision.fp16=true;mixed_precision.bf16=true", "mixed_precision.fp16=false",
     "mixed_precision.fp16,mixed_precision.bf16", "fp16 (true);bf16 (true)", NULL},
    {"precision.precision_aware_matches_model", 0, 1, 0, 0,
     "optimizer.use_precision_aware_optimizer=true;optimizer.use_distributed_optimizer=true;"
     "model.bf16=true",
     "optimizer.bf16=true", "optimizer.bf16,model.bf16", "", NULL},
    {"model.architecture_set", 0, 1, 0, 0, "model.num_layers=0", "model.num_layers=4",
     "model.num_layers", "(0)", NULL},
    {"model.sizes_fit_runtime", 0, 1, 0, 0, "model.num_layers=9223372036854775807",
     "model.num_layers=4", "model.num_layers", "(9223372036854775807);32-bit", "below 2^31"},
    {"model.sizes_fit_runtime", 0, 1, 0, 0,
     "model.seq_length=2147483648;dataset.seq_length=2147483648",
     "model.seq_length=128;dataset.seq_length=128", "model.seq_length", "(2147483648)", NULL},
    {"model.sizes_fit_runtime", 0, 1, 0, 0, "model.hidden_size=4611686018427387904",
     "model.hidden_size=64", "model.hidden_size", "(4611686018427387904)", NULL},
    {"model.sizes_fit_runtime", 0, 1, 0, 0, "model.num_layers=2147483647", "model.num_layers=4",
     "model.num_layers,model.tensor_model_parallel_size", "TiB;per rank", "raise TP x PP"},
    {"model.hidden_divisible_by_heads", 0, 1, 0, 0, "model.hidden_size=66", "model.kv_channels=16",
     "model.hidden_size,model.num_attention_heads,model.kv_channels", "(66);(4)", NULL},
    {"model.recompute", 0, 1, 0, 0, "model.recompute_granularity=full",
     "model.recompute_method=uniform;model.recompute_num_layers=1",
     "model.recompute_method,model.recompute_granularity", "", NULL},
    {"model.recompute_modules", 0, 1, 0, 0, "model.recompute_modules=[attention]",
     "model.recompute_modules=[mlp]", "model.recompute_modules", "'attention'", NULL},
    {"model.bias_activation_fusion", 0, 1, 0, 0,
     "model.bias_activation_fusion=true;model.activation_func=relu", "model.activation_func=gelu",
     "model.bias_activation_fusion,model.activation_func", "relu", NULL},
    {"model.deterministic_no_ce_fusion", 0, 1, 0, 0, "model.deterministic_mode=true",
     "model.cross_entropy_loss_fusion=false",
     "model.deterministic_mode,model.cross_entropy_loss_fusion", "", NULL},
    {"model.window_size", 0, 1, 0, 0, "model.window_size=[128]", "model.window_size=[128,0]",
     "model.window_size", "it has 1", NULL},
    {"moe.ep_needs_experts", 0, 2, 0, 0, "model.expert_model_parallel_size=2",
     "model.num_moe_experts=4", "model.expert_model_parallel_size,model.num_moe_experts", "(2)",
     NULL},
    {"moe.experts_divisible_by_ep", 1, 2, 0, 0, "model.num_moe_experts=3",
     "model.num_moe_experts=6", "model.num_moe_experts,model.expert_model_parallel_size", "(3);(2)",
     "divisor of 3"},
    {"moe.topk_le_experts", 1, 2, 0, 0, "model.moe_router_topk=8", "model.moe_router_topk=4",
     "model.moe_router_topk,model.num_moe_experts", "(8);(4)", NULL},
    {"moe.group_limited_routing", 1, 2, 0, 0, "model.moe_router_group_topk=2",
     "model.moe_router_num_groups=2", "model.moe_router_group_topk,model.moe_router_num_groups",
     "(2)", NULL},
    {"moe.topk1_pre_softmax", 1, 2, 0, 0, "model.moe_router_topk=1",
     "model.moe_router_pre_softmax=true", "model.moe_router_pre_softmax,model.moe_router_topk", "",
     NULL},
    {"moe.expert_bias_score_function", 1, 2, 0, 0, "model.moe_router_enable_expert_bias=true",
     "model.moe_router_score_function=sigmoid",
     "model.moe_router_enable_expert_bias,model.moe_router_score_function", "softmax", NULL},
    {"moe.capacity", 1, 2, 0, 0, "model.moe_pad_expert_input_to_capacity=true",
     "model.moe_expert_capacity_factor=1.0",
     "model.moe_pad_expert_input_to_capacity,model.moe_expert_capacity_factor", "", NULL},
    {"moe.shared_expert_overlap_dispatcher", 1, 2, 0, 0,
     "model.moe_shared_expert_overlap=true;model.moe_token_dispatcher_type=allgather",
     "model.moe_token_dispatcher_type=alltoall",
     "model.moe_shared_expert_overlap,model.moe_token_dispatcher_type", "allgather", NULL},
    {"moe.bias_needs_etp1", 1, 4, 0, 0,
     "model.tensor_model_parallel_size=2;model.sequence_parallel=true;"
     "model.expert_tensor_parallel_size=2",
     "model.add_bias_linear=false", "model.add_bias_linear,model.expert_tensor_parallel_size",
     "(it is 2)", NULL},
    {"moe.tp_needs_sp", 1, 2, 0, 0,
     "model.tensor_model_parallel_size=2;model.sequence_parallel=false",
     "model.sequence_parallel=true", "model.sequence_parallel,model.tensor_model_parallel_size",
     "size 2", NULL},
    {"moe.fields_without_experts", 0, 1, 0, 0, "model.moe_ffn_hidden_size=128",
     "model.num_moe_experts=4;model.moe_router_topk=2",
     "model.moe_ffn_hidden_size,model.num_moe_experts", "(128)", NULL},
    {"moe.layer_freq", 1, 2, 0, 0, "model.moe_layer_freq=[1,0,1]", "model.moe_layer_freq=[1,0,1,0]",
     "model.moe_layer_freq,model.num_layers", "3 values for 4", NULL},
    {"moe.ep_overlap", 1, 2, 0, 0, "model.overlap_moe_expert_parallel_comm=true", "model.bf16=true",
     "model.overlap_moe_expert_parallel_comm,model.bf16", "bf16 or fp16", NULL},
    {"moe.delay_wgrad_needs_ep_overlap", 1, 2, 0, 0, "model.delay_wgrad_compute=true",
     "model.overlap_moe_expert_parallel_comm=true;model.bf16=true",
     "model.delay_wgrad_compute,model.overlap_moe_expert_parallel_comm", "", NULL},
    {"moe.variable_seq_dispatcher", 1, 2, 0, 0,
     "model.variable_seq_lengths=true;model.moe_token_dispatcher_type=allgather",
     "model.moe_token_dispatcher_type=alltoall",
     "model.variable_seq_lengths,model.moe_token_dispatcher_type", "allgather", NULL},
    {"data.seq_length_matches_model", 0, 1, 0, 0, "dataset.seq_length=256", "model.seq_length=256",
     "dataset.seq_length,model.seq_length", "(256);(128)", NULL},
    {"data.blend_syntax", 0, 1, 0, 0, "dataset.data_path=[0.5,a,0.5];dataset.split=99,1,0",
     "dataset.data_path=[0.5,a,0.5,b]", "dataset.data_path", "odd number of entries (3)", NULL},
    {"data.split_syntax", 0, 1, 0, 0, "dataset.split=1,2,3,4", "dataset.split=1,2,3",
     "dataset.split", "\"1,2,3,4\"", NULL},
    {"data.blend_sources", 0, 1, 0, 0, "dataset.data_path=[a]", "dataset.split=99,1,0",
     "dataset.split,dataset.data_path", "", NULL},
    {"data.gpt_flags_defined", 0, 1, 0, 0, "dataset.eod_mask_loss=null",
     "dataset.eod_mask_loss=false", "dataset.eod_mask_loss", "", NULL},
    {"data.sft_needs_dataset_root", 0, 1, 0, 0, "dataset.type=sft", "dataset.dataset_root=/tmp",
     "dataset.dataset_root,dataset.type", "", NULL},
    {"data.text_needs_data_path", 0, 1, 0, 0, "dataset.type=text", "dataset.data_path=[/tmp/x.txt]",
     "dataset.data_path,dataset.type", "", NULL},
    {"data.offline_packing", 0, 1, 0, 0,
     "dataset.type=sft;dataset.dataset_root=/tmp;dataset.enable_offline_packing=true",
     "dataset.packed_sequence_size=128",
     "dataset.enable_offline_packing,dataset.packed_sequence_size", "", NULL},
    {"data.cp_sft_loss", 0, 2, 0, 0,
     "dataset.type=sft;dataset.dataset_root=/tmp;model.context_parallel_size=2",
     "model.calculate_per_token_loss=true",
     "model.calculate_per_token_loss,model.context_parallel_size", "(2)", NULL},
    {"tokenizer.type_set", 0, 1, 0, 0, "tokenizer.tokenizer_type=null",
     "tokenizer.tokenizer_type=NullTokenizer", "tokenizer.tokenizer_type", "", NULL},
    {"tokenizer.null_tokenizer_vocab", 0, 1, 0, 0, "tokenizer.vocab_size=null",
     "tokenizer.vocab_size=1024", "tokenizer.vocab_size,tokenizer.tokenizer_type", "", NULL},
    {"tokenizer.gpt2_files", 0, 1, 0, 0,
     "tokenizer.tokenizer_type=GPT2BPETokenizer;tokenizer.vocab_file=v.json",
     "tokenizer.merge_file=m.txt", "tokenizer.vocab_file,tokenizer.merge_file",
     "vocab_file (set);merge_file (missing)", NULL},
    {"tokenizer.model_file", 0, 1, 0, 0, "tokenizer.tokenizer_type=HuggingFaceTokenizer",
     "tokenizer.tokenizer_model=meta-llama/x", "tokenizer.tokenizer_model,tokenizer.tokenizer_type",
     "HuggingFaceTokenizer", NULL},
    {"tokenizer.chat_template_exclusive", 0, 1, 0, 0,
     "tokenizer.chat_template=x;tokenizer.chat_template_path=y",
     "tokenizer.chat_template_path=null", "tokenizer.chat_template,tokenizer.chat_template_path",
     "", NULL},
    {"tokenizer.model_vocab_covers_tokenizer", 0, 1, 0, 0, "model.vocab_size=1000",
     "model.vocab_size=2048", "model.vocab_size,tokenizer.vocab_size", "(1000);(1024)", NULL},
    {"tokenizer.vocab_padded", 0, 1, 0, 0, "tokenizer.vocab_size=1000", "tokenizer.vocab_size=1024",
     "derived.padded_vocab_size,model.vocab_size", "from 1000 to 1024", NULL},
    {"data.mock_split", 0, 1, 0, 0, "dataset.split=\"9999,8,2\"", "dataset.split=null",
     "dataset.split,dataset.data_path", "9999,8,2;1,1,1", NULL},
    {"checkpoint.save_interval_without_save", 0, 1, 0, 0, "checkpoint.save_interval=10",
     "checkpoint.save=/tmp/ck", "checkpoint.save_interval,checkpoint.save", "(10)", NULL},
    {"checkpoint.most_recent_k", 0, 1, 0, 0, "checkpoint.most_recent_k=0",
     "checkpoint.most_recent_k=2", "checkpoint.most_recent_k", "(0)", NULL},
    {"checkpoint.async_save", 0, 1, 0, 0, "checkpoint.async_save=true", "checkpoint.save=/tmp/ck",
     "checkpoint.async_save,checkpoint.save", "", NULL},
    {"checkpoint.load_main_params_needs_no_optim", 0, 1, 0, 0,
     "checkpoint.load_main_params_from_ckpt=true", "checkpoint.load_optim=false",
     "checkpoint.load_main_params_from_ckpt,checkpoint.load_optim", "", NULL},
    {"checkpoint.ckpt_step_needs_load", 0, 1, 0, 0, "checkpoint.ckpt_step=5",
     "checkpoint.load=/tmp/ck", "checkpoint.ckpt_step,checkpoint.load", "(5)", NULL},
    {"checkpoint.reshardable_exclusive", 0, 1, 0, 0,
     "checkpoint.dist_ckpt_optim_fully_reshardable=true;"
     "checkpoint.distrib_optim_fully_reshardable_mem_efficient=true",
     "checkpoint.distrib_optim_fully_reshardable_mem_efficient=false",
     "checkpoint.dist_ckpt_optim_fully_reshardable", "", NULL},
    {"checkpoint.verify_integrity_format", 0, 1, 0, 0,
     "checkpoint.verify_integrity=true;checkpoint.ckpt_format=torch",
     "checkpoint.ckpt_format=torch_dist", "checkpoint.verify_integrity,checkpoint.ckpt_format",
     "(it is torch)", NULL},
    {"checkpoint.distopt_without_gloo_format", 0, 1, 0, 0,
     "dist.use_gloo_process_groups=false;optimizer.use_distributed_optimizer=true;"
     "checkpoint.ckpt_format=torch",
     "checkpoint.ckpt_format=torch_dist", "checkpoint.ckpt_format,dist.use_gloo_process_groups",
     "(it is torch)", NULL},
    {"checkpoint.peft_needs_pretrained", 0, 1, 0, 0, "peft.scheme=lora",
     "checkpoint.pretrained_checkpoint=/tmp/base", "checkpoint.pretrained_checkpoint,peft.scheme",
     "lora", NULL},
    {"checkpoint.finetune_needs_checkpoint", 0, 1, 0, 0, "checkpoint.finetune=true",
     "checkpoint.pretrained_checkpoint=/tmp/base", "checkpoint.finetune", "", NULL},
    {"profiling.pytorch_profiler_unavailable", 0, 1, 0, 0, "profiling.use_pytorch_profiler=true",
     "profiling.use_pytorch_profiler=false", "profiling.use_pytorch_profiler", "", NULL},
    {"profiling.step_range", 0, 1, 0, 0, "profiling.profile_step_end=5",
     "profiling.profile_step_end=12", "profiling.profile_step_end,profiling.profile_step_start",
     "(5);(10)", NULL},
    {"peft.exclude_needs_empty_targets", 0, 1, 0, 0, "peft.exclude_modules=[linear_qkv]",
     "peft.target_modules=[]", "peft.exclude_modules,peft.target_modules", "", NULL},
    {"files.launch_inputs_exist", 0, 1, 0, 1, "tokenizer.tokenizer_model=/nonexistent/tok.model",
     "tokenizer.tokenizer_model=" TRESTLE_SOURCE_DIR "/CMakeLists.txt", "tokenizer.tokenizer_model",
     "/nonexistent/tok.model", NULL},
};

static void expect_values(const char *message, const char *values) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", values);
    for (char *save = NULL, *v = strtok_r(buf, ";", &save); v; v = strtok_r(NULL, ";", &save))
        CHECK_CONTAINS(message, v);
}

static void expect_keys(const char *keys, const char *expected) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", expected);
    for (char *save = NULL, *k = strtok_r(buf, ",", &save); k; k = strtok_r(NULL, ",", &save))
        CHECK_CONTAINS(keys, k);
}

static void run_case(const rule_case *rc, bool fixed) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    CHECK_INT_EQ(rc->moe ? fixture_moe(&c, &d) : fixture_dense(&c, &d), TR_OK);
    CHECK_INT_EQ(fixture_apply(&c, rc->bad, &d), TR_OK);
    if (fixed) CHECK_INT_EQ(fixture_apply(&c, rc->fix, &d), TR_OK);
    tr_validate_opts opts = {.check_files = rc->files, .skip_capability = true};
    fixture_resolve(&c, rc->world, rc->gpn, &opts, &d);
    const tr_diag *g = tr_diags_find(&d, rc->id);
    if (fixed) {
        if (g) fprintf(stderr, "  [%s] still fires after the fix: %s\n", rc->id, g->message);
        CHECK(g == NULL);
    } else if (!g) {
        fprintf(stderr, "  [%s] did not fire; got:\n", rc->id);
        for (int i = 0; i < d.n; i++)
            fprintf(stderr, "    %s: %s\n", d.items[i].id, d.items[i].message);
        CHECK(g != NULL);
    } else {
        expect_keys(g->keys, rc->keys);
        expect_values(g->message, rc->values);
        if (rc->hint) CHECK_CONTAINS(g->hint, rc->hint);
        CHECK(g->hint && g->hint[0]);
    }
    tr_config_free(&c);
    tr_diags_free(&d);
}

static void test_every_case_fails_then_passes(void) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int before = tr_test_failures;
        run_case(&cases[i], false);
        run_case(&cases[i], true);
        if (tr_test_failures != before) fprintf(stderr, "  ^ case %s\n", cases[i].id);
    }
}

/* The base fixtures themselves must be clean: no error and no warning at all. */
static void test_fixtures_are_valid(void) {
    for (int moe = 0; moe <= 1; moe++) {
        tr_diags d;
        tr_diags_init(&d);
        tr_config c;
        CHECK_INT_EQ(moe ? fixture_moe(&c, &d) : fixture_dense(&c, &d), TR_OK);
        CHECK_INT_EQ(fixture_resolve(&c, moe ? 2 : 1, 0, NULL, &d), TR_OK);
        /* (The MoE fixture's dispatcher key has its effect: no config.no_effect note either.) */
        int notes = 0;
        for (int i = 0; i < d.n; i++) {
            if (strcmp(d.items[i].id, "config.no_effect") == 0) {
                notes++;
                continue;
            }
            fprintf(stderr, "  unexpected %s: %s\n", d.items[i].id, d.items[i].message);
        }
        CHECK_INT_EQ(d.n - notes, 0);
        CHECK_INT_EQ(notes, 0);
        tr_config_free(&c);
        tr_diags_free(&d);
    }
}

TR_TEST_MAIN(TR_TEST(test_fixtures_are_valid), TR_TEST(test_every_case_fails_then_passes))
