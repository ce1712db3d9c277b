"""The catalog smoke test: every recipe of the registry and every YAML recipe, shrunk to tiny
shapes with its feature flags kept, either trains 2 iterations on 1 rank (and the dry run accepts
it), or is refused by --dry-run and by the launch under the same capability rule ids; the same
again on 2 ranks for a recipe laid out with model parallelism (a context-parallel recipe on as
many ranks as its own CP size). A recipe added to the registry or to recipes/yaml joins by itself.

usage: catalog_smoke.py RUN_RECIPE SOURCE_DIR MPIEXEC SCRATCH
"""
import concurrent.futures
import glob
import os
import re
import subprocess
import sys

RR, SRC, MPIEXEC, TMP = sys.argv[1:5]
ERROR = re.compile(r"error \[([a-z0-9_.]+)\]")
MUST_TRAIN = ["llama_tiny_pretrain", "moe_tiny_pretrain", "mixtral_tiny_pretrain",
              "qwen3_moe_tiny_pretrain", "deepseek_tiny_pretrain", "mixtral_8x7b_pretrain",
              "mixtral_8x22b_pretrain", "qwen3_30b_a3b_pretrain", "qwen3_30b_a3b_sft",
              "qwen3_235b_a22b_pretrain", "qwen3_30b_a3b_lora", "qwen3_235b_a22b_lora",
              "deepseek_v3_pretrain", "kimi_k2_pretrain", "deepseek_v3_pretrain_32nodes"]


def run(args, np=0):
    cmd = [RR] + args
    if np:
        cmd = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", str(np)] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def resolved(source, world):
    """The recipe's finalized config as {section: {key: text}}, checked by Megatron's rules only
    (launch inputs get placeholders): the shapes and flags the shrink starts from."""
    args = source + ["--print-config", "--config-only", "--world-size", str(world),
                     "dataset.dataset_root=/placeholder",
                     "checkpoint.pretrained_checkpoint=/placeholder"]
    # Recipes that leave something to the user: the model size (Megatron's vanilla GPT), the
    # text file of a text dataset.
    for extra in ([], ["model.num_layers=2", "model.hidden_size=64", "model.num_attention_heads=4"],
                  [f"dataset.data_path={SRC}/data/english_corpus.txt"]):
        args += extra
        rc, out = run(args)
        if rc == 0:
            break
    if rc != 0:
        raise SystemExit(f"FAIL: {source}: --print-config exit {rc}\n{out}")
    cfg, section = {}, None
    for line in out.splitlines():
        m = re.match(r"^([a-z_]+):\s*$", line)
        if m:
            section = cfg.setdefault(m.group(1), {})
            continue
        m = re.match(r"^  ([a-zA-Z0-9_]+): ?(.*)$", line)
        if m and section is not None:
            section[m.group(1)] = m.group(2).strip()
    return cfg


def is_set(v):
    return v not in (None, "", "null", "false", "0", "[]")


def shrink(cfg):
    """Tiny shapes, one rank, every feature flag as the recipe sets it."""
    m, ds = cfg["model"], cfg["dataset"]
    heads, groups = int(m["num_attention_heads"]), m.get("num_query_groups", "null")
    gqa = groups not in ("null", "") and int(groups) < heads
    ov = ["model.num_layers=2", "model.hidden_size=64", "model.num_attention_heads=4",
          f"model.num_query_groups={2 if gqa else 4}", "model.kv_channels=16",
          "model.ffn_hidden_size=128", "model.seq_length=64", "dataset.seq_length=64",
          "model.vocab_size=256",
          "tokenizer.tokenizer_type=ByteLevelTokenizer", "tokenizer.tokenizer_model=null",
          "tokenizer.vocab_size=null",
          # one rank: every parallel size 1 (the layout is a launch's, not a feature)
          "model.tensor_model_parallel_size=1", "model.pipeline_model_parallel_size=1",
          "model.context_parallel_size=1", "model.expert_model_parallel_size=1",
          "model.expert_tensor_parallel_size=null",
          "model.virtual_pipeline_model_parallel_size=null", "model.sequence_parallel=false",
          "model.pipeline_model_parallel_layout=null",
          "model.num_layers_in_first_pipeline_stage=null",
          "model.num_layers_in_last_pipeline_stage=null",
          "model.account_for_embedding_in_pipeline_split=false",
          "model.account_for_loss_in_pipeline_split=false",
          "model.hierarchical_context_parallel_sizes=null",
          "comm_overlap.tp_comm_overlap=false", "model.defer_embedding_wgrad_compute=false",
          "comm_overlap.defer_embedding_wgrad_compute=false", "model.recompute_granularity=null",
          "model.recompute_method=null", "model.recompute_num_layers=null",
          "train.micro_batch_size=1", "train.global_batch_size=2", "train.train_iters=2",
          "train.rampup_batch_size=null", "validation.eval_iters=0",
          "scheduler.lr_warmup_iters=0", "scheduler.lr_warmup_samples=0",
          "scheduler.lr_decay_iters=null", "scheduler.lr_decay_samples=null",
          "scheduler.lr_wsd_decay_iters=null", "scheduler.lr_wsd_decay_samples=null",
          "train.train_samples=null", "logger.log_interval=1",
          "checkpoint.save=null", "checkpoint.load=null", "checkpoint.async_save=false"]
    if is_set(m.get("num_moe_experts")):
        ov += ["model.num_moe_experts=4", "model.moe_router_topk=2",
               "model.moe_ffn_hidden_size=64", "model.moe_layer_freq=1",
               "model.moe_router_num_groups=null", "model.moe_router_group_topk=null"]
        if is_set(m.get("moe_shared_expert_intermediate_size")):
            ov.append("model.moe_shared_expert_intermediate_size=64")
    if is_set(m.get("multi_latent_attention")):
        ov += ["model.q_lora_rank=32", "model.kv_lora_rank=32", "model.qk_head_dim=16",
               "model.qk_pos_emb_head_dim=16", "model.v_head_dim=16"]
    if is_set(m.get("mtp_num_layers")):
        ov.append("model.mtp_num_layers=1")
    if ds.get("type") == "sft":
        ov.append(f"dataset.dataset_root={SRC}/data/sft_tiny")
        if is_set(ds.get("enable_offline_packing")):
            ov.append("dataset.packed_sequence_size=64")
    elif ds.get("type") == "text" or ds.get("data_path") not in (None, "null", "[]"):
        ov += ["dataset.type=text", f"dataset.data_path={SRC}/data/english_corpus.txt"]
    return ov


def base_checkpoint(source, ov, name):
    """Fine-tuning starts from weights: train the same shrunk model, without adapters, one step."""
    out_dir = os.path.join(TMP, "base_" + name)
    rc, out = run(source + ov + ["peft.scheme=null", "checkpoint.pretrained_checkpoint=null",
                                 "checkpoint.finetune=false",
                                 "train.train_iters=1", f"checkpoint.save={out_dir}",
                                 f"logger.output_dir={out_dir}/log"])
    if rc == 0:
        return out_dir
    empty = os.path.join(TMP, "empty")
    os.makedirs(empty, exist_ok=True)
    return empty  # the fine-tuning run is refused before it reads weights


def check(label, source, world):
    cfg = resolved(source, world)
    ov = shrink(cfg)
    name = re.sub(r"[^a-z0-9_]", "_", label.lower())
    if cfg["peft"].get("scheme", "null") != "null" or is_set(
            cfg["checkpoint"].get("finetune")) or cfg["dataset"].get("type") == "sft":
        ov.append("checkpoint.pretrained_checkpoint=" + base_checkpoint(source, ov, name))
    one_rank = verdict(label, source, ov + [f"logger.output_dir={TMP}/run_{name}"], 1)
    layout, np = parallel_layout(cfg["model"])
    if not layout:
        return one_rank, "-"
    two = ov + layout + pipeline_flags(cfg, layout) + [f"logger.output_dir={TMP}/run2_{name}"]
    return one_rank, verdict(label, source, two, np) + f" ({' '.join(layout)})"


def parallel_layout(m):
    """The recipe's model-parallel dimension and the ranks it runs on: its own context-parallel
    size on as many ranks (the long-sequence recipes keep their CP), else EP, PP or TP (with its
    sequence parallelism) at size 2 on 2 ranks; none for a recipe on data parallelism alone."""
    cp = int(m.get("context_parallel_size", "1"))
    if cp > 1:
        return [f"model.context_parallel_size={cp}"], cp
    for key in ("expert_model_parallel_size", "pipeline_model_parallel_size",
                "tensor_model_parallel_size"):
        if int(m.get(key, "1")) > 1:
            extra = []
            if key == "tensor_model_parallel_size" and m.get("sequence_parallel") == "true":
                extra.append("model.sequence_parallel=true")
            return [f"model.{key}=2"] + extra, 2
    return [], 0


def pipeline_flags(cfg, layout):
    """Flags that need pipeline parallelism, off on 1 rank: on a PP layout as the recipe sets
    them (the comm_overlap section, when in use, decides the model's value)."""
    if not any(k.startswith("model.pipeline_model_parallel_size=") for k in layout):
        return []
    if cfg["model"].get("defer_embedding_wgrad_compute") != "true":
        return []
    return ["model.defer_embedding_wgrad_compute=true",
            "comm_overlap.defer_embedding_wgrad_compute=true"]


def verdict(label, source, ov, np):
    """Trains 2 iterations on np ranks with the dry run's consent, or both refuse it under the
    same capability rules."""
    drc, dout = run(source + ov + ["--dry-run", "--world-size", str(np)])
    lrc, lout = run(source + ov, np if np > 1 else 0)
    dry, launch = sorted(set(ERROR.findall(dout))), sorted(set(ERROR.findall(lout)))
    if drc == 0 and lrc == 0:
        if not re.search(r"iteration +2/", lout):
            raise SystemExit(f"FAIL: {label} on {np}: the launch did not train 2 iterations\n{lout}")
        return "trains"
    if drc == 2 and lrc == 2 and dry == launch and dry and all(
            i.startswith("runtime.") for i in dry):
        return "refused: " + ", ".join(dry)
    raise SystemExit(f"FAIL: {label} on {np}: dry run exit {drc} {dry}, launch exit {lrc} {launch}"
                     f"\noverrides: {' '.join(ov)}\n--- dry run\n{dout}\n--- launch\n{lout}")


def main():
    rc, out = run(["--list-recipes"])
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    entries = [(r[0], ["--recipe", r[0]], int(r[2])) for r in rows]
    for path in sorted(glob.glob(os.path.join(SRC, "recipes/yaml/*.yaml"))):
        entries.append((os.path.relpath(path, SRC), ["--config-file", path], 0))

    def one(entry):
        label, source, world = entry
        if world == 0:  # a YAML recipe: the smallest world its layout fits
            world = 1
            for w in (1, 2, 4, 8, 16, 32, 64):
                if run(source + ["--dry-run", "--config-only", "--world-size", str(w)])[0] == 0:
                    world = w
                    break
        return label, check(label, source, world)

    # A launch mostly waits for MPI to start: a few at once keep the test short on two cores.
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        table = list(pool.map(one, entries))
    width = max(len(label) for label, _ in table)
    print(f"{'recipe':<{width}}  {'1 rank, tiny shapes':<44}  the recipe's parallelism "
          "(2 ranks; CP: its own size)")
    for label, (one_rank, two) in table:
        print(f"{label:<{width}}  {one_rank:<44}  {two}")
    trains = sum(v[0] == "trains" for _, v in table)
    layouts = [v[1] for _, v in table if v[1] != "-"]
    print(f"catalog smoke: {len(table)} recipes, {trains} train on 1 rank, {len(table) - trains} "
          f"refused by a capability rule; {len(layouts)} parallel layouts, "
          f"{sum(v.startswith('trains') for v in layouts)} train; the dry run and the launch agree")
    if len(rows) < 40:
        raise SystemExit("FAIL: the registry listed too few recipes")
    # MoE layers (and LoRA on them) train on one rank too: these MoE recipes must train there
    # (shrunk), not merely agree on a refusal.
    verdicts = dict(table)
    for name in MUST_TRAIN:
        if verdicts.get(name, ("missing",))[0] != "trains":
            raise SystemExit(f"FAIL: {name} does not train on 1 rank: {verdicts.get(name)}")


main()
