"""Checks recipes/megatron_bridge_values.md against Megatron-Bridge's own recipe functions.

usage: check_megatron_bridge_recipes.py MEGATRON_BRIDGE_CHECKOUT [TABLE]

Runs each function the table names (the source column) from a Megatron-Bridge checkout, with
everything outside src/megatron/bridge/recipes/ replaced by attribute bags (no torch, no GPU,
no Hugging Face download), so what comes back is exactly what the recipe code assigns. It then
applies the few rules of Megatron-Bridge's validate() the table's "in effect" values depend on
(distributed optimizer OR-sync, bf16_mixed's gradient reduction, lr_decay_iters defaulting to
train_iters, ETP defaulting to 1 with EP > 1, TP overlap dropped below TP 2, the flex dispatcher
an H100 gets) and compares every key=value of the values column. Keys it cannot derive from
the recipe code alone are skipped and counted. Exit 1 on any mismatch.

The test that reads the same table against Trestle is tests/unit/recipes/test_recipe_values.c.
"""
import ast
import importlib.abc
import importlib.util
import os
import re
import sys
import types

MB = os.path.abspath(sys.argv[1])
TABLE = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    os.path.dirname(__file__), "..", "..", "recipes", "megatron_bridge_values.md")
RECIPES = os.path.join(MB, "src", "megatron", "bridge", "recipes")


class Bag:
    """Any config object: keyword arguments become attributes, unset ones read as None."""

    def __init__(self, *args, **kw):
        self.__dict__.update(kw)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def model_bag():
    # The fields a recipe reads before it writes them, at their Megatron-Core defaults.
    return Bag(tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
               context_parallel_size=1, expert_model_parallel_size=1, num_moe_experts=8)


class StubMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        # AutoBridge.from_hf_pretrained(...).get_model_config() and the like.
        return lambda *a, **k: Bag(get_model_config=lambda *a, **k: model_bag(),
                                   to_megatron_provider=lambda *a, **k: model_bag())


def stub_class(name):
    return StubMeta(name, (Bag,), {})


class StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "bfloat16":
            return "bf16"
        if name == "float32":
            return "fp32"
        if name == "ConfigContainer":
            cls = StubMeta(name, (Bag,), {"__init__": lambda s, **kw: Bag.__init__(
                s, **{"env_vars": {}, **kw})})
        elif name.startswith("userbuffers_"):
            return name
        elif name in ("bf16_mixed", "get_mixed_precision_config"):
            return lambda *a, **k: Bag(preset=a[0] if a else "bf16_mixed")
        elif name == "apply_flex_dispatcher_backend":
            return apply_flex_on_h100
        elif name == "LoRA":
            cls = StubMeta(name, (Bag,), {"__init__": lora_init})
        else:
            cls = stub_class(name)
        setattr(self, name, cls)
        return cls


def lora_defaults():
    """LoRA's dataclass defaults, read from peft/lora.py."""
    src = open(os.path.join(MB, "src", "megatron", "bridge", "peft", "lora.py")).read()
    cls = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "LoRA")
    out = {}
    for st in cls.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value:
            v = st.value
            if isinstance(v, ast.Call) and any(k.arg == "default_factory" for k in v.keywords):
                fac = next(k.value for k in v.keywords if k.arg == "default_factory")
                v = fac.body if isinstance(fac, ast.Lambda) else fac
            try:
                out[st.target.id] = ast.literal_eval(v)
            except ValueError:
                pass
    return out


LORA_DEFAULTS = None


def lora_init(self, **kw):
    Bag.__init__(self, **{**LORA_DEFAULTS, **kw})


def apply_flex_on_h100(model, backend=None):
    # flex_dispatcher_backend.py on an H100 (compute capability 9): DeepEP and HybridEP apply.
    if backend in ("deepep", "hybridep") and model.num_moe_experts:
        model.moe_token_dispatcher_type = "flex"
        model.moe_flex_dispatcher_backend = backend


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "megatron.bridge.recipes" or name.startswith("megatron.bridge.recipes."):
            rel = name.split(".")[3:]
            base = os.path.join(RECIPES, *rel)
            if os.path.isdir(base):
                # The packages' __init__ re-export everything; the functions are loaded directly.
                return importlib.util.spec_from_loader(name, self, is_package=True)
            return importlib.util.spec_from_file_location(name, base + ".py")
        if name.split(".")[0] in ("megatron", "torch", "transformers"):
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


def seq_length(cfg):
    """The runner copies dataset.seq_length over model.seq_length; a recipe that sets both
    differently would train at the dataset's length."""
    d, m = cfg.dataset.seq_length, cfg.model.seq_length
    if d is not None and m is not None and d != m:
        return f"model {m} vs dataset {d}"
    return d if d is not None else m


def effective(cfg, key):
    """The value of abbreviation/key in cfg after Megatron-Bridge's validate(); KeyError if the
    recipe code alone does not decide it."""
    m, o, s, t, ddp, ds = cfg.model, cfg.optimizer, cfg.scheduler, cfg.train, cfg.ddp, cfg.dataset
    co, peft = cfg.comm_overlap, cfg.peft
    tp = m.tensor_model_parallel_size or 1
    ep = m.expert_model_parallel_size or 1
    simple = {
        "tp": tp, "pp": m.pipeline_model_parallel_size or 1,
        "vpp": m.virtual_pipeline_model_parallel_size, "cp": m.context_parallel_size or 1,
        "ep": ep, "sp": bool(m.sequence_parallel), "seq": seq_length(cfg),
        "mbs": t.micro_batch_size, "gbs": t.global_batch_size, "iters": t.train_iters,
        "eval": cfg.validation.eval_interval, "eval_iters": cfg.validation.eval_iters,
        "lr": o.lr, "min_lr": o.min_lr, "warmup": s.lr_warmup_iters,
        "decay": s.lr_decay_iters if s.lr_decay_iters is not None else t.train_iters,
        "b1": o.adam_beta1, "b2": o.adam_beta2, "eps": o.adam_eps, "wd": o.weight_decay,
        "clip": o.clip_grad, "wsd": s.lr_wsd_decay_style, "oops": s.override_opt_param_scheduler,
        "distopt": bool(o.use_distributed_optimizer or ddp.use_distributed_optimizer),
        "recompute": m.recompute_granularity,
        "ce_fusion": True if m.cross_entropy_loss_fusion is None else m.cross_entropy_loss_fusion,
        "ce_impl": m.cross_entropy_fusion_impl, "save": cfg.checkpoint.save_interval,
        "seed": cfg.rng.seed,
    }
    if key in simple:
        return simple[key]
    if key == "etp":
        return m.expert_tensor_parallel_size or (1 if ep > 1 else tp)
    if key == "gradfp32":
        mp = cfg.mixed_precision
        if isinstance(mp, str) or mp is None:
            return True if mp == "bf16_mixed" else ddp.grad_reduce_in_fp32
        return True if mp.grad_reduce_in_fp32 is None else mp.grad_reduce_in_fp32
    if key in ("ogr", "opg"):
        if co is not None:
            raise KeyError(key)  # comm_overlap.setup() derives them from the data-parallel size
        return bool(ddp.overlap_grad_reduce if key == "ogr" else ddp.overlap_param_gather)
    if key == "tp_overlap":
        if co is None:
            raise KeyError(key)
        return bool(co.tp_comm_overlap) and tp > 1
    if key in ("pad", "pack"):
        specs = ds.offline_packing_specs
        return specs.pad_seq_to_mult if key == "pad" else specs.packed_sequence_size
    if key.startswith("lora_") or key == "targets":
        field = {"lora_dim": "dim", "lora_alpha": "alpha", "lora_dropout": "dropout",
                 "targets": "target_modules"}[key]
        return getattr(peft, field)
    section, _, field = key.partition(".")
    if section == "comm_overlap":
        return getattr(co, field)
    if section == "tokenizer" and field == "tokenizer_type":
        return cfg.tokenizer.tokenizer_type
    if section == "model" and field == "pipeline_dtype":
        return m.pipeline_dtype
    obj = getattr(cfg, section, None)
    if obj is None or field not in obj.__dict__:
        raise KeyError(key)
    return obj.__dict__[field]


def same(expected, got):
    if isinstance(got, bool) or expected in ("true", "false"):
        return str(bool(got)).lower() == expected if got is not None else False
    if got is None:
        return expected == "null"
    if isinstance(got, (list, tuple)):
        return "[" + ",".join(got) + "]" == expected
    if isinstance(got, float) or isinstance(got, int):
        try:
            return float(expected) == float(got)
        except ValueError:
            return False
    return str(got) == expected


def main():
    global LORA_DEFAULTS
    LORA_DEFAULTS = lora_defaults()
    sys.meta_path.insert(0, Finder())
    text = open(TABLE).read()
    body = text[text.index("| recipe | Megatron-Bridge source"):].splitlines()[2:]
    bad = checked = skipped = 0
    for line in body:
        if not line.startswith("|"):
            break
        name, source, values, _ = [c.strip().strip("`") for c in line.strip("|").split("|")]
        if ": " not in source:
            continue
        path, fn = source.split(": ")
        mod = importlib.import_module("megatron.bridge.recipes." +
                                      path[:-3].replace("/", "."))
        cfg = getattr(mod, fn)()
        for tok in values.split():
            key, _, want = tok.partition("=")
            try:
                got = effective(cfg, key)
            except KeyError:
                skipped += 1
                continue
            checked += 1
            if not same(want, got):
                print(f"MISMATCH {name}: {key}: table {want}, {fn} {got!r}")
                bad += 1
    print(f"{checked} values checked against Megatron-Bridge, {skipped} not decided by the "
          f"recipe code alone, {bad} mismatches")
    sys.exit(1 if bad else 0)


main()
