/* discover.h - finding models: by path, by Hugging Face repo id, or by a piece of their name.
 *
 * Places searched:
 *   $HEARTH_HOME/models (HEARTH_HOME defaults to ~/.cache/hearth): every *.gguf file and every
 *     folder holding config.json (or .gguf files) at the top level;
 *   the Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub):
 *     models--ORG--NAME/snapshots/REV, REV from refs/main when present, else the newest.
 *     A snapshot with config.json is the model "ORG/NAME"; each .gguf file in it, or in a
 *     folder of it, is "ORG/NAME:FILE.gguf" ("ORG/NAME:Q4_K_M/FILE.gguf"). A split GGUF
 *     (FILE-00001-of-00003.gguf, ...) is one model, listed by its first part.
 * Resolution order (all case-insensitive): an existing path; an exact name; a repo id whose
 * repo holds one model; "ORG/NAME:QUANT" (the quant as `hearth get` matches it) or
 * "ORG/NAME:FILE"; a unique substring. Several matches are an error that lists them. */
#ifndef HX_FORMAT_DISCOVER_H
#define HX_FORMAT_DISCOVER_H
#include <stdbool.h>

#include "base/err.h"

typedef struct {
    char *name;  /* what users type: "SmolLM2-135M-Instruct.Q4_1", "Qwen/Qwen3-0.6B" */
    char *path;  /* file or folder to open */
    char *where; /* "hearth" or "hf-cache" */
    char *root;  /* what removing the model deletes: the file or folder in $HEARTH_HOME/models,
                  * or the whole models--ORG--NAME folder of the HF cache */
} hx_local_model;

typedef struct {
    hx_local_model *items;
    int             n;
} hx_local_models;

/* Lists the models in both places, sorted by name. Missing places are simply empty. */
hx_status hx_discover_list(hx_local_models *out, hx_err *err);
void      hx_discover_free(hx_local_models *list);

/* Resolves a model argument to a path (hx_alloc'd into *path). HX_E_NOTFOUND says where it
 * looked; HX_E_AMBIGUOUS lists the candidates. */
hx_status hx_discover_resolve(const char *arg, char **path, hx_err *err);

/* Finds arg among the names of list (the rules above, without the path step): *idx is the
 * match. HX_E_NOTFOUND and HX_E_AMBIGUOUS (listing the candidates) as for resolve. */
hx_status hx_discover_find(const hx_local_models *list, const char *arg, int *idx, hx_err *err);

/* The repo id of a Hugging Face cache entry's name ("ORG/NAME" of "ORG/NAME:FILE.gguf") into
 * buf; false for a $HEARTH_HOME model. */
bool hx_discover_repo_id(const hx_local_model *m, char *buf, unsigned len);

/* $HEARTH_HOME (or ~/.cache/hearth) and the HF hub cache folder, written into buf. */
void hx_discover_hearth_home(char *buf, unsigned len);
void hx_discover_hf_cache(char *buf, unsigned len);

#endif
