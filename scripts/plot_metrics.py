#!/usr/bin/env python3
"""Plots a Trestle metrics file (metrics.jsonl, written by every training run) to a PNG:
training and validation loss, learning rate, and throughput against the iteration; for an MoE
run also the balancing losses and, per MoE layer, the min / mean / max tokens per expert over each
log interval.

    apt-get install python3-matplotlib   # scripts/setup.sh does this (or: pip install matplotlib)
    python3 scripts/plot_metrics.py outputs/llama_tiny_pretrain/metrics.jsonl [-o out.png]

Without -o the PNG goes next to the metrics file (metrics.png). Records are JSON objects, one a
line: {"type": "train", "iteration", "loss", "lr", "tokens_per_s", ...} and
{"type": "eval", "iteration", "loss", "ppl"}; null values (a NaN loss) are skipped.
"""
import argparse
import json
import os
import sys


def read(path):
    train, evals = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not a JSON record ({e.msg}); is this a Trestle metrics file?")
            (evals if rec.get("type") == "eval" else train).append(rec)
    return train, evals


def series(recs, key):
    pts = [(r["iteration"], r[key]) for r in recs if r.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("metrics", help="metrics.jsonl of a run")
    ap.add_argument("-o", "--output", help="PNG path (default: metrics.png next to the input)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        # scripts/setup.sh installs Debian's python3-matplotlib; a python3 earlier on PATH
        # (pyenv, a virtualenv) may not see it, so hand over to the system interpreter once.
        system = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(system) and os.access(system, os.X_OK) \
                and not os.environ.get("TRESTLE_PLOT_REEXEC"):
            os.environ["TRESTLE_PLOT_REEXEC"] = "1"
            os.execv(system, [system] + sys.argv)
        sys.exit("matplotlib is missing: apt-get install python3-matplotlib (or pip install matplotlib)")
    train, evals = read(args.metrics)
    if not train:
        sys.exit(f"{args.metrics}: no training records")
    out = args.output or os.path.join(os.path.dirname(os.path.abspath(args.metrics)),
                                      "metrics.png")
    moe = any("moe_tokens_per_expert" in r for r in train)
    fig, ax = plt.subplots(1, 5 if moe else 3, figsize=(25 if moe else 15, 4))
    ax[0].plot(*series(train, "loss"), label="train")
    if evals:
        ax[0].plot(*series(evals, "loss"), "o-", label="validation")
    ax[0].set(title="lm loss", xlabel="iteration", ylabel="cross entropy (nats)")
    ax[0].legend()
    ax[1].plot(*series(train, "lr"))
    ax[1].set(title="learning rate", xlabel="iteration")
    ax[1].ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    ax[2].plot(*series(train, "tokens_per_s"))
    ax[2].set(title="throughput", xlabel="iteration", ylabel="tokens/s")
    if moe:
        for key, name in (("load_balancing_loss", "load_balancing_loss"), ("z_loss", "z_loss")):
            if any(r.get(key) is not None for r in train):
                ax[3].plot(*series(train, key), label=name)
        ax[3].set(title="MoE balancing (divided by their coefficients)", xlabel="iteration")
        ax[3].legend()
        layers = sorted({e["layer"] for r in train for e in r.get("moe_tokens_per_expert", [])})
        for layer in layers:
            pts = [(r["iteration"], e) for r in train for e in r.get("moe_tokens_per_expert", [])
                   if e["layer"] == layer]
            it = [p[0] for p in pts]
            line, = ax[4].plot(it, [p[1]["mean"] for p in pts], label=f"layer {layer}")
            ax[4].fill_between(it, [p[1]["min"] for p in pts], [p[1]["max"] for p in pts],
                               color=line.get_color(), alpha=0.2)
        ax[4].set(title="tokens per expert (min / mean / max)", xlabel="iteration")
        ax[4].legend()
    for a in ax:
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
