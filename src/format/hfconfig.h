/* hfconfig.h - Hugging Face config.json → hyper-parameters.
 *
 * Reads the names transformers uses (num_hidden_layers, hidden_size, num_key_value_heads,
 * rope_scaling, ...) into hx_hparams, with the families' defaults where a field is optional
 * (Gemma 3's text_config leaves most fields to Gemma3TextConfig's defaults), and keeps MLX's
 * "quantization" block for per-tensor lookups. A missing required field or an unknown
 * model_type is an error naming config.json and the field. */
#ifndef HX_FORMAT_HFCONFIG_H
#define HX_FORMAT_HFCONFIG_H
#include <stdbool.h>

#include "base/err.h"
#include "format/model_files.h"

typedef struct hx_hfconfig {
    hx_hparams hp;
    bool       has_quant;    /* config carries MLX "quantization" */
    int32_t    quant_bits;   /* its defaults */
    int32_t    quant_group;
    void      *quant;        /* the "quantization" json_t (owned reference), for overrides */
    /* longrope (Phi-3): rope_scaling's long_factor and short_factor, n_rope_factors each
     * (n_rot / 2), owned; NULL otherwise. */
    float     *rope_long, *rope_short;
    int32_t    n_rope_factors;
} hx_hfconfig;

/* Parses the config.json at path. On failure returns HX_E_FORMAT/HX_E_IO/HX_E_UNSUPPORTED with
 * err naming the file and field, and leaves *cfg zeroed. Free with hx_hfconfig_free. */
hx_status hx_hfconfig_load(const char *path, hx_hfconfig *cfg, hx_err *err);
void      hx_hfconfig_free(hx_hfconfig *cfg);

/* The MLX quantization of the module whose Hugging Face name is `module` (a tensor name without
 * ".weight"): per-module overrides first, then the defaults. Returns false when the module is
 * explicitly left unquantized. */
bool hx_hfconfig_quant_for(const hx_hfconfig *cfg, const char *module, int32_t *bits,
                           int32_t *group);

#endif
