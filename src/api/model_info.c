/* model_info.c - the public hx_model_info API: discovery + model_files + describe, behind an
 * opaque handle. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "format/describe.h"
#include "format/discover.h"
#include "format/model_files.h"
#include "hearth.h"

struct hx_model_info {
    hx_model_files *mf;
    char           *json; /* built on first request; freed with free() (jansson's allocator) */
};

HX_API hx_status hx_model_info_open(const char *model, hx_model_info **out, char *errbuf,
                                    size_t errbuf_len)
{
    hx_err err = {0};
    char *path = NULL;
    hx_model_info *info = NULL;
    hx_status st = hx_discover_resolve(model, &path, &err);
    if (st == HX_OK && !(info = hx_calloc(1, sizeof *info)))
        st = hx_err_set(&err, HX_E_NOMEM, "out of memory");
    if (st == HX_OK) st = hx_model_files_open(path, &info->mf, &err);
    hx_free(path);
    if (st != HX_OK) {
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "%s", err.msg);
        hx_free(info);
        return st;
    }
    *out = info;
    return HX_OK;
}

HX_API void hx_model_info_close(hx_model_info *info)
{
    if (!info) return;
    hx_model_files_close(info->mf);
    free(info->json);
    hx_free(info);
}

HX_API const char *hx_model_info_path(const hx_model_info *info) { return info->mf->path; }
HX_API const char *hx_model_info_format(const hx_model_info *info)
{
    return hx_file_format_name(info->mf->format);
}
HX_API const char *hx_model_info_arch(const hx_model_info *info) { return info->mf->hp.arch; }
HX_API int32_t hx_model_info_n_layer(const hx_model_info *info) { return info->mf->hp.n_layer; }
HX_API int32_t hx_model_info_d_model(const hx_model_info *info) { return info->mf->hp.d_model; }
HX_API int32_t hx_model_info_n_vocab(const hx_model_info *info) { return info->mf->hp.n_vocab; }
HX_API int64_t hx_model_info_n_params(const hx_model_info *info)
{
    return hx_model_files_n_params(info->mf);
}

HX_API const char *hx_model_info_json(hx_model_info *info)
{
    if (!info->json) {
        json_t *o = hx_model_describe(info->mf);
        if (!o) return NULL;
        info->json = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(o);
    }
    return info->json;
}
