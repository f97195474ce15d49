/* hub.h - the Hugging Face hub's metadata and cache layout, without the network.
 *
 * What `hearth get` needs to know that is not a transfer: reading the hub's JSON file listing
 * (GET /api/models/ORG/REPO/revision/main?blobs=true) and a model.safetensors.index.json, deciding
 * which files of a repo make the model (a safetensors set, or one GGUF chosen by quant, with all
 * parts of a split file), and the names huggingface_hub gives things in its cache:
 *
 *   CACHE/models--ORG--REPO/blobs/ETAG                 the file's bytes (ETAG: sha256 for LFS)
 *   CACHE/models--ORG--REPO/blobs/ETAG.incomplete      a download in progress
 *   CACHE/models--ORG--REPO/snapshots/COMMIT/PATH      symlink ../../blobs/ETAG (one more ../
 *                                                      per folder in PATH)
 *   CACHE/models--ORG--REPO/refs/main                  COMMIT, no newline
 *   CACHE/.locks/models--ORG--REPO/ETAG.lock           flock(2)ed while ETAG is downloaded
 *
 * Everything read from the hub is outside input: names that could leave the cache (absolute
 * paths, "..", control characters) are refused here, before any path is built from them.
 * The transfer itself (libcurl) lives in src/cli, so libhearth does not link libcurl. */
#ifndef HX_FORMAT_HUB_H
#define HX_FORMAT_HUB_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/sha256.h"

/* ---- the repo's file listing ---- */

typedef struct {
    char   *path;                  /* "model.safetensors", "Q4_K_M/m-00001-of-00002.gguf" */
    int64_t size;                  /* bytes; -1 when the listing does not say */
    char    sha256[HX_SHA256_HEX]; /* the LFS sha256 when the listing gives it, else "" */
} hx_hub_file;

typedef struct {
    char         commit[65]; /* the revision's commit ("sha"); "" when the listing has none */
    hx_hub_file *files;      /* in listing order */
    int          n_files;
    int          n_skipped; /* entries refused as unsafe or malformed */
} hx_hub_repo;

/* Parses the hub's model info JSON. Siblings whose rfilename is not a safe relative path are
 * skipped (counted in n_skipped). HX_E_FORMAT when the text is not JSON, has no "siblings" array,
 * or the "sha" is not a plain alphanumeric commit id. On failure *out is left empty. */
hx_status hx_hub_repo_parse(const char *json, size_t len, hx_hub_repo *out, hx_err *err);
void      hx_hub_repo_free(hx_hub_repo *r); /* accepts an empty or partly built repo */

/* Index of the file named exactly path, or -1. */
int hx_hub_repo_find(const hx_hub_repo *r, const char *path);

/* ---- names ---- */

/* A repo id as the hub accepts it: [ORG/]NAME, each part 1-96 of [A-Za-z0-9_.-], starting and
 * ending with a letter, digit or '_', with no "--" or "..". */
bool hx_hub_repo_id_valid(const char *id);

/* Splits "ORG/REPO[:SEL]" into repo and selector ("" when none). HX_E_INVALID with a message
 * for a malformed repo id or an empty selector. */
hx_status hx_hub_spec_parse(const char *arg, char *repo, size_t repo_len, char *sel, size_t sel_len,
                            hx_err *err);

/* A file name from the hub that is safe to place under a snapshot folder: relative, no empty,
 * "." or ".." component, no backslash or control character, at most 1024 bytes. */
bool hx_hub_path_valid(const char *path);

/* ETag header value → cache blob name: drops a weak "W/" prefix and the quotes. The result is
 * valid (hx_hub_etag_valid) or "" when the header cannot name a blob. */
void hx_hub_etag_clean(const char *raw, char *out, size_t len);
bool hx_hub_etag_valid(const char *etag); /* 1-128 of [A-Za-z0-9_.-], not starting with '.' */
/* A commit id usable as a folder name: 1-64 ASCII letters and digits. */
bool hx_hub_commit_valid(const char *commit);
/* A sha256 in hex (64 digits, either case): the ETag of an LFS file. */
bool hx_hub_is_sha256(const char *s);

/* "models--ORG--REPO" (or "models--NAME"). False when it does not fit. */
bool hx_hub_repo_folder(const char *repo_id, char *buf, size_t len);
/* The symlink target from snapshots/COMMIT/PATH to blobs/ETAG. False when it does not fit. */
bool hx_hub_blob_link(const char *path, const char *etag, char *buf, size_t len);
/* path with every byte but unreserved ones and '/' percent-encoded, for a URL. */
bool hx_hub_url_path(const char *path, char *buf, size_t len);

/* ---- choosing the files of a model ---- */

/* How well quant names the quantization in a GGUF file name (case-insensitive, matched in the
 * file's base name without ".gguf" and a split suffix, bounded by non-alphanumerics):
 * 2 exactly ("q4_k_m" in "M-Q4_K_M.gguf"), 1 as the start of a longer quant name ("Q4_K" in
 * "M-Q4_K_M.gguf", "Q4" in "M.Q4_0.gguf"), 0 not at all ("Q4_K" in "M-IQ4_K.gguf"). */
int hx_hub_quant_match(const char *path, const char *quant);

/* Recognises a split GGUF part "STEM-00002-of-00005.gguf": sets *part, *n_parts and *stem_len
 * (bytes of STEM) and returns true. */
bool hx_hub_gguf_split(const char *path, int *part, int *n_parts, size_t *stem_len);

typedef enum { HX_HUB_SAFETENSORS, HX_HUB_GGUF } hx_hub_kind;

typedef struct {
    hx_hub_kind kind;
    int        *files; /* indices into the repo's files, in download order */
    int         n_files;
    int         index; /* safetensors: the *.safetensors.index.json to read first, or -1 */
} hx_hub_plan;

/* Decides what to download. sel "" : a safetensors model when the repo has config.json and
 * top-level *.safetensors (config, generation config, tokenizer files, chat template, index and
 * weights), else one GGUF model: the only one, else Q4_K_M, else the smallest Q4 file.
 * sel an exact file name: that GGUF file (all parts if split). Otherwise sel is a quant name.
 * Files named "mmproj*" (vision projectors) are never chosen by quant or default.
 * HX_E_NOTFOUND / HX_E_AMBIGUOUS name the choices in the message; on failure *out is empty. */
hx_status hx_hub_plan_make(const hx_hub_repo *r, const char *sel, hx_hub_plan *out, hx_err *err);

/* Safetensors with an index: keeps only the weight files the index's weight_map names (repos such
 * as Mistral's also carry a consolidated copy). HX_E_FORMAT for an index that is not JSON or has
 * no weight_map; HX_E_NOTFOUND for a shard the repo does not list. */
hx_status hx_hub_plan_apply_index(hx_hub_plan *p, const hx_hub_repo *r, const char *json,
                                  size_t len, hx_err *err);
void      hx_hub_plan_free(hx_hub_plan *p);

/* The GGUF models a repo offers (one line per model, split ones once, with sizes when known),
 * written into buf for messages. */
void hx_hub_gguf_choices(const hx_hub_repo *r, char *buf, size_t len);

#endif
