/* trestle_ckpt's Hugging Face commands (docs/hf.md, "Converting"):
 *   export CKPT --hf-out DIR: the weights of a Trestle checkpoint saved under any layout, read
 *     as logical tensors into one whole model (adapters merged), written as a Hugging Face
 *     directory;
 *   import --hf DIR --out CKPT: a Hugging Face directory as a one-rank Trestle checkpoint.
 * The model comes from --recipe NAME and/or --hf-config DIR (its config.json) and KEY=VALUE
 * overrides, as run_recipe builds it. */
#ifndef TR_SCRIPTS_CKPT_HF_H
#define TR_SCRIPTS_CKPT_HF_H

#include "core/diag.h"
#include "runtime/model/model.h"

/* argv[1] is "export" or "import". Exit status: 0 ok, 1 usage error, 2 the conversion failed. */
int tr_ckpt_hf_main(int argc, char **argv);

/* A Trestle checkpoint's model loaded as export loads it (one whole CPU model; a LoRA
 * checkpoint with its adapters, its base from checkpoint.pretrained_checkpoint): for
 * trestle_generate. */
typedef struct tr_ckpt_hf_src {
    const char *ckpt, *recipe, *hf_config, *step; /* recipe or hf_config required */
    const char **overrides;
    int n_overrides;
} tr_ckpt_hf_src;
tr_status tr_ckpt_hf_load(const tr_ckpt_hf_src *src, tr_model *m, tr_diags *d);

#endif
