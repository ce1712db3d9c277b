# What a Megatron-Bridge user types works verbatim: its runner's flags (--model/--mode, --dataset
# presets, --deterministic, --dump-env, -sl), its README command, override lines copied from its
# docs, the keys of its override files (dataset.blend, dataset.sequence_length, the FSDP switches,
# _target_), and inspection without launch inputs (--print-config, --explain, --describe-recipe;
# --dry-run --check-inputs asks for them).
. "$(dirname "$0")/lib.sh"

# Megatron-Bridge's README command, verbatim.
rr --recipe llama32_1b_pretrain_config --mode pretrain --dataset mock --dry-run
expect_rc 0 "README command"
expect_in "$TMP/out" "dry run: configuration valid" "README command validates"

# --dataset mock replaces the recipe's dataset section with Megatron-Bridge's mock preset.
rr --recipe llama32_1b_pretrain_config --mode pretrain --dataset mock --print-config
expect_rc 0 "mock preset"
[ "$(yaml_get "$TMP/out" dataset split)" = '"9999,8,2"' ] || { show; fail "mock split"; }
[ "$(yaml_get "$TMP/out" dataset seq_length)" = 8192 ] || { show; fail "mock seq_length from the model"; }
[ "$(yaml_get "$TMP/out" dataset data_path)" = null ] || { show; fail "mock has no data"; }

# Override lines from Megatron-Bridge's docs (docs/megatron-lm-to-megatron-bridge.md,
# docs/training/data-preparation.md, docs/models/gemma/gemma3.md), verbatim but for the recipe
# and model.max_position_embeddings=4096, a key its GPTModelProvider lacks too.
rr --recipe llama3_8b_pretrain_2gpu_h100_bf16_config --mode pretrain --dataset mock \
    train.micro_batch_size=2 train.global_batch_size=128 \
    model.num_layers=32 model.hidden_size=4096 model.num_attention_heads=32 \
    dataset.seq_length=4096 \
    checkpoint.save=/workspace/ckpts checkpoint.save_interval=1000 \
    logger.wandb_project=my_proj logger.wandb_exp_name=exp1 --dry-run --config-only
expect_rc 0 "megatron-lm-to-megatron-bridge.md override lines"
rr --recipe llama3_8b_pretrain_2gpu_h100_bf16_config --mode pretrain --dataset mock \
    dataset.seq_length=4096 --print-config --config-only
[ "$(yaml_get "$TMP/out" model seq_length)" = 4096 ] || { show; fail "model follows dataset.seq_length"; }
rr --recipe llama32_1b_pretrain_1gpu_h100_bf16_config \
    --mode pretrain --dataset megatron-indexed \
    dataset.data_path=/data/dclm/preprocessed_text_document \
    dataset.seq_length=8192 --dry-run
expect_rc 0 "data-preparation.md pretraining lines"
rr --recipe llama32_1b_sft_1gpu_h100_bf16_config \
    --mode sft --dataset local-jsonl \
    dataset.dataset_root=/data/sft_jsonl \
    dataset.seq_length=4096 \
    checkpoint.pretrained_checkpoint=/checkpoints/base_model --dry-run
expect_rc 0 "data-preparation.md SFT lines"
rr --recipe llama32_1b_peft_1gpu_h100_bf16_config --mode lora \
    checkpoint.pretrained_checkpoint=/models/gemma-3-1b-it \
    train.global_batch_size=128 \
    checkpoint.save=/tmp/gemma3_1b_lora --dry-run
expect_rc 0 "gemma3.md LoRA lines"
rr --recipe llama32_1b_pretrain --dry-run 'dataset.blend=[["work/data/rp2/head_01"],null]'
expect_rc 0 "verification-card blend line"
rr --recipe llama32_1b_pretrain --print-config 'dataset.blend=[["a_text","b_text"],[0.3,0.7]]'
[ "$(yaml_get "$TMP/out" dataset data_path)" = '["0.3", a_text, "0.7", b_text]' ] ||
    { show; fail "weighted blend into data_path"; }
rr --recipe llama32_1b_pretrain --print-config dataset.split=null \
    'dataset.blend_per_split=[[["tr"],null],[["va"],null],null]'
expect_rc 0 "blend_per_split"
[ "$(yaml_get "$TMP/out" dataset valid_data_path)" = '[va]' ] || { show; fail "blend_per_split valid"; }
[ "$(yaml_get "$TMP/out" dataset test_data_path)" = null ] || { show; fail "blend_per_split test"; }
rr --recipe llama32_1b_pretrain --dry-run 'dataset.blend=[["a"],[1,2]]'
expect_rc 2 "blend with weights that do not pair up"
expect_in "$TMP/err" "expected Megatron's blend" "blend shape error"

# --model STEM with --mode composes the recipe; --mode dora on a LoRA recipe sets the scheme.
rr --model llama32_1b --mode dora --dataset local-jsonl --print-config
expect_rc 0 "--model/--mode dora"
[ "$(yaml_get "$TMP/out" peft scheme)" = dora ] || { show; fail "--mode dora scheme"; }
[ "$(yaml_get "$TMP/out" dataset type)" = sft ] || { show; fail "local-jsonl type"; }
[ "$(yaml_get "$TMP/out" dataset seed)" = 5678 ] || { show; fail "local-jsonl seed"; }
rr --model llama32_1b --dry-run
expect_rc 2 "--model without --mode"
rr --recipe llama32_1b_pretrain_config --mode sft --dry-run
expect_rc 2 "mode contradicting the recipe name"
expect_in "$TMP/err" "cli.mode_conflict" "mode conflict id"
rr --recipe llama_tiny_sft --mode pretrain --dry-run
expect_rc 2 "mode contradicting the recipe's mode"
rr --recipe llama32_1b_pretrain --mode pretrain --dataset local-jsonl --dry-run
expect_rc 2 "pretraining on an SFT preset"
rr --recipe llama32_1b_peft_1gpu_h100_bf16_config --mode lora --dataset gsm8k --dry-run
expect_rc 2 "hub preset"
expect_in "$TMP/err" "Hugging Face hub" "hub preset says why"
rr --recipe llama32_1b_pretrain --dataset megatron-indexed --dry-run --check-inputs
expect_rc 2 "megatron-indexed without a blend at --check-inputs"
expect_in "$TMP/err" "cli.dataset_needs_blend" "needs a blend"

# --deterministic, -sl, --dump-env.
rr --recipe llama32_1b_pretrain --deterministic --print-config
[ "$(yaml_get "$TMP/out" model deterministic_mode)" = true ] || { show; fail "deterministic"; }
[ "$(yaml_get "$TMP/out" model cross_entropy_loss_fusion)" = false ] || { show; fail "no fused CE"; }
rr --recipe llama32_1b_pretrain -sl 2048 dataset.seq_length=1024 --print-config
[ "$(yaml_get "$TMP/out" model seq_length)" = 1024 ] || { show; fail "-sl then dataset.seq_length"; }
MY_API_TOKEN=hunter2 rr --recipe llama32_1b_pretrain --dump-env --dry-run
expect_rc 0 "--dump-env"
expect_in "$TMP/err" "MY_API_TOKEN=[REDACTED]" "secrets redacted"
grep -q hunter2 "$TMP/err" && fail "a secret was printed"

# A Megatron-Bridge override YAML: _target_ lines, sequence_length, FSDP switches, logger keys.
cat >"$TMP/mb.yaml" <<'YAML'
_target_: megatron.bridge.training.config.ConfigContainer
dataset:
  _target_: megatron.bridge.training.config.GPTDatasetConfig
  sequence_length: 4096
dist:
  use_megatron_fsdp: false
  use_torch_fsdp2: false
YAML
rr --recipe llama32_1b_pretrain --config-file "$TMP/mb.yaml" model.seq_length=4096 --dry-run
expect_rc 0 "Megatron-Bridge YAML"
expect_in "$TMP/err" "override.yaml_target" "_target_ noted"
rr --recipe llama32_1b_pretrain dist.use_megatron_fsdp=true --dry-run
expect_rc 2 "FSDP on"
expect_in "$TMP/err" "FSDP is not supported" "FSDP refusal"
expect_in "$TMP/err" "ddp.use_distributed_optimizer=true" "FSDP refusal names the distributed optimizer"

# Inspection needs no launch inputs; a launch (and --check-inputs) does.
for r in llama3_8b_sft llama3_70b_lora qwen3_8b_lora llama31_405b_sft; do
    rr --recipe $r --print-config
    expect_rc 0 "--print-config $r without dataset_root"
    rr --recipe $r --explain model.sequence_parallel
    expect_rc 0 "--explain $r without dataset_root"
done
rr --describe-recipe llama3_8b_sft
expect_rc 0 "--describe-recipe"
rr --recipe llama_tiny_sft --dry-run
expect_rc 0 "dry run without launch inputs"
expect_in "$TMP/err" "launch.data.sft_needs_dataset_root" "launch input noted"
rr --recipe llama_tiny_sft --dry-run --check-inputs
expect_rc 2 "--check-inputs"
expect_in "$TMP/err" "error [data.sft_needs_dataset_root]" "launch input required"
echo OK
