/* cmd_tokenize.c - `hearth tokenize` and `hearth detokenize`.
 *
 * SOURCE is a tokenizer.json file, a folder holding one, a .gguf file (a model or a vocab-only
 * file) or a model name that `hearth ls` would list. The tokenizer is loaded once; without TEXT
 * tokenize reads JSON strings, one per line, and answers each with one JSON object per line
 * (flushed per line, so a program can drive it through pipes). Output is written through
 * stdout's buffer with hand-rolled JSON escaping, which keeps bulk mode fast. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/path.h"
#include "base/utf8.h"
#include "cli/cli.h"
#include "format/discover.h"
#include "format/model_files.h"
#include "tokenizer/tokenizer.h"

static const char tokenize_usage[] =
    "usage: hearth tokenize SOURCE [TEXT] [--json] [--ids] [--no-special] [--add-special]\n"
    "\n"
    "SOURCE is a tokenizer.json, a folder holding one, a .gguf file or a model name.\n"
    "Prints one \"id<TAB>piece\" line per token (pieces as the vocabulary spells them,\n"
    "non-printable bytes escaped), or with --json {\"ids\": [...], \"pieces\": [...]}.\n"
    "Without TEXT, reads one JSON string per line on stdin and writes one JSON object\n"
    "per line.\n"
    "\n"
    "  --json         JSON output\n"
    "  --ids          ids only (text: one line of ids; JSON: {\"ids\": [...]})\n"
    "  --no-special   treat special-token text such as <|im_end|> as plain text\n"
    "                 (default: special tokens written in the text are parsed)\n"
    "  --add-special  add BOS/EOS as the tokenizer's post-processor says\n"
    "                 (default: not added, like llama.cpp's tokenize tool)\n";

static const char detokenize_usage[] =
    "usage: hearth detokenize SOURCE [--jsonl] [--skip-special]\n"
    "\n"
    "Reads token ids on stdin (separated by spaces, newlines or commas, or a JSON array)\n"
    "and prints their text. With --jsonl each input line is a JSON array of ids and each\n"
    "output line the JSON string of its text.\n"
    "\n"
    "  --skip-special  leave special tokens out of the text\n";

/* ---- loading ---- */

static hx_status open_source(const char *src, hx_tokenizer **tok, hx_err *err)
{
    if (hx_path_is_file(src)) {
        if (hx_str_ends_with(src, ".gguf")) return hx_tokenizer_open_gguf(src, tok, err);
        return hx_tokenizer_open_json(src, tok, err);
    }
    if (hx_path_is_dir(src)) {
        char *p = hx_path_join(src, "tokenizer.json");
        bool has = p && hx_path_is_file(p);
        hx_free(p);
        if (has) return hx_tokenizer_open_path(src, tok, err);
    }
    char *path = NULL;
    hx_model_files *mf = NULL;
    hx_status st = hx_discover_resolve(src, &path, err);
    if (st == HX_OK) st = hx_model_files_open(path, &mf, err);
    if (st == HX_OK) st = hx_tokenizer_open(mf, tok, err);
    hx_model_files_close(mf);
    hx_free(path);
    return st;
}

/* ---- output ---- */

/* Writes s as a JSON string; bytes that are not valid UTF-8 become U+FFFD. */
static void put_json_str(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            putchar('\\');
            putchar(c);
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            switch (c) {
            case '\n': fputs("\\n", stdout); break;
            case '\t': fputs("\\t", stdout); break;
            case '\r': fputs("\\r", stdout); break;
            default: printf("\\u%04x", c); break;
            }
            i++;
        } else if (c < 0x80) {
            putchar(c);
            i++;
        } else {
            size_t l = 1;
            int need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
            bool ok = need > 0 && i + (size_t)need <= n;
            for (int k = 1; ok && k < need; k++) ok = ((unsigned char)s[i + k] & 0xC0) == 0x80;
            if (ok) ok = hx_utf8_valid(s + i, (size_t)need);
            if (ok) {
                fwrite(s + i, 1, (size_t)need, stdout);
                l = (size_t)need;
            } else {
                fputs("\\ufffd", stdout);
            }
            i += l;
        }
    }
    putchar('"');
}

/* Writes a piece for humans: printable text as is, the rest escaped. */
static void put_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\') fputs("\\\\", stdout);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
        else putchar(c);
    }
}

static void put_result(const hx_tokenizer *tok, const hx_tok_ids *ids, bool json, bool ids_only)
{
    if (json) {
        fputs("{\"ids\": [", stdout);
        for (size_t i = 0; i < ids->n; i++) printf(i ? ", %d" : "%d", ids->ids[i]);
        if (!ids_only) {
            fputs("], \"pieces\": [", stdout);
            for (size_t i = 0; i < ids->n; i++) {
                size_t len;
                const char *p = hx_tokenizer_piece(tok, ids->ids[i], &len);
                if (i) fputs(", ", stdout);
                put_json_str(p, len);
            }
        }
        fputs("]}\n", stdout);
        return;
    }
    if (ids_only) {
        for (size_t i = 0; i < ids->n; i++) printf(i ? " %d" : "%d", ids->ids[i]);
        putchar('\n');
        return;
    }
    for (size_t i = 0; i < ids->n; i++) {
        size_t len;
        const char *p = hx_tokenizer_piece(tok, ids->ids[i], &len);
        printf("%d\t", ids->ids[i]);
        put_escaped(p, len);
        putchar('\n');
    }
}

/* ---- input ---- */

/* Reads one line (without its newline) into *line; false at the end of input. */
static bool read_line(FILE *f, hx_tok_text *line, bool *nomem)
{
    char chunk[65536];
    line->len = 0;
    *nomem = false;
    bool any = false;
    while (fgets(chunk, sizeof chunk, f)) {
        size_t n = strlen(chunk);
        any = true;
        bool end = n > 0 && chunk[n - 1] == '\n';
        if (hx_tok_text_append(line, chunk, end ? n - 1 : n) != HX_OK) {
            *nomem = true;
            return false;
        }
        if (end) return true;
    }
    return any;
}

static int bulk_tokenize(const hx_tokenizer *tok, unsigned flags, bool ids_only)
{
    hx_tok_text line = { 0 };
    hx_tok_ids ids = { 0 };
    hx_err err = { 0 };
    int rc = 0;
    bool nomem;
    for (long lineno = 1; read_line(stdin, &line, &nomem); lineno++) {
        json_error_t je;
        json_t *v = json_loadb(line.data ? line.data : "", line.len,
                               JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!json_is_string(v)) {
            fprintf(stderr, "hearth tokenize: stdin line %ld: expected a JSON string%s%s\n",
                    lineno, v ? "" : ": ", v ? "" : je.text);
            json_decref(v);
            rc = 1;
            break;
        }
        ids.n = 0;
        if (hx_tokenizer_encode(tok, json_string_value(v), json_string_length(v), flags, &ids,
                                &err) != HX_OK) {
            fprintf(stderr, "hearth: %s\n", err.msg);
            json_decref(v);
            rc = 1;
            break;
        }
        json_decref(v);
        put_result(tok, &ids, true, ids_only);
        fflush(stdout);
    }
    if (nomem) {
        fprintf(stderr, "hearth tokenize: out of memory reading stdin\n");
        rc = 1;
    }
    hx_tok_ids_free(&ids);
    hx_tok_text_free(&line);
    return rc;
}

int hx_cmd_tokenize(int argc, char **argv)
{
    const char *src = NULL, *text = NULL;
    bool json = false, ids_only = false;
    unsigned flags = HX_TOK_PARSE_SPECIAL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--ids")) ids_only = true;
        else if (!strcmp(argv[i], "--no-special")) flags &= ~(unsigned)HX_TOK_PARSE_SPECIAL;
        else if (!strcmp(argv[i], "--add-special")) flags |= HX_TOK_ADD_SPECIAL;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(tokenize_usage, stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1] && argv[i][1] == '-') {
            fprintf(stderr, "hearth tokenize: unknown option %s\n\n%s", argv[i], tokenize_usage);
            return 2;
        } else if (!src) src = argv[i];
        else if (!text) text = argv[i];
        else {
            fprintf(stderr, "hearth tokenize: one TEXT at a time (quote it)\n");
            return 2;
        }
    }
    if (!src) {
        fputs(tokenize_usage, stderr);
        return 2;
    }
    hx_err err = { 0 };
    hx_tokenizer *tok = NULL;
    if (open_source(src, &tok, &err) != HX_OK) {
        fprintf(stderr, "hearth: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    if (!text) {
        rc = bulk_tokenize(tok, flags, ids_only);
    } else {
        hx_tok_ids ids = { 0 };
        if (hx_tokenizer_encode(tok, text, strlen(text), flags, &ids, &err) != HX_OK) {
            fprintf(stderr, "hearth: %s\n", err.msg);
            rc = 1;
        } else {
            put_result(tok, &ids, json, ids_only);
        }
        hx_tok_ids_free(&ids);
    }
    hx_tokenizer_close(tok);
    return rc;
}

/* ---- detokenize ---- */

/* Parses ids from text: a JSON array, or integers separated by spaces and commas. */
static bool parse_ids(const char *s, size_t n, hx_tok_ids *ids, const char **why)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    bool bracket = i < n && s[i] == '[';
    if (bracket) i++;
    while (i < n) {
        char c = s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',') {
            i++;
            continue;
        }
        if (c == ']' && bracket) {
            bracket = false;
            i++;
            continue;
        }
        if (c < '0' || c > '9') {
            *why = "expected token ids (integers)";
            return false;
        }
        long v = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            v = v * 10 + (s[i++] - '0');
            if (v > INT32_MAX) {
                *why = "token id out of range";
                return false;
            }
        }
        if (hx_tok_ids_push(ids, (int32_t)v) != HX_OK) {
            *why = "out of memory";
            return false;
        }
    }
    if (bracket) {
        *why = "unterminated JSON array";
        return false;
    }
    return true;
}

int hx_cmd_detokenize(int argc, char **argv)
{
    const char *src = NULL;
    bool jsonl = false;
    unsigned flags = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--jsonl")) jsonl = true;
        else if (!strcmp(argv[i], "--skip-special")) flags |= HX_TOK_SKIP_SPECIAL;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(detokenize_usage, stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "hearth detokenize: unknown option %s\n\n%s", argv[i],
                    detokenize_usage);
            return 2;
        } else if (!src) src = argv[i];
        else {
            fputs(detokenize_usage, stderr);
            return 2;
        }
    }
    if (!src) {
        fputs(detokenize_usage, stderr);
        return 2;
    }
    hx_err err = { 0 };
    hx_tokenizer *tok = NULL;
    if (open_source(src, &tok, &err) != HX_OK) {
        fprintf(stderr, "hearth: %s\n", err.msg);
        return 1;
    }
    hx_tok_text in = { 0 }, out = { 0 };
    hx_tok_ids ids = { 0 };
    int rc = 0;
    bool nomem = false;
    const char *why = NULL;
    if (jsonl) {
        for (long lineno = 1; read_line(stdin, &in, &nomem); lineno++) {
            ids.n = 0;
            if (!parse_ids(in.data ? in.data : "", in.len, &ids, &why)) {
                fprintf(stderr, "hearth detokenize: stdin line %ld: %s\n", lineno, why);
                rc = 1;
                break;
            }
            if (hx_tokenizer_decode(tok, ids.ids, ids.n, flags, &out, &err) != HX_OK) {
                fprintf(stderr, "hearth: %s\n", err.msg);
                rc = 1;
                break;
            }
            put_json_str(out.data, out.len);
            putchar('\n');
            fflush(stdout);
        }
    } else {
        char chunk[65536];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
            if (hx_tok_text_append(&in, chunk, n) != HX_OK) {
                nomem = true;
                break;
            }
        if (!nomem && !parse_ids(in.data ? in.data : "", in.len, &ids, &why)) {
            fprintf(stderr, "hearth detokenize: stdin: %s\n", why);
            rc = 1;
        } else if (!nomem && hx_tokenizer_decode(tok, ids.ids, ids.n, flags, &out, &err) != HX_OK) {
            fprintf(stderr, "hearth: %s\n", err.msg);
            rc = 1;
        } else if (!nomem) {
            fwrite(out.data, 1, out.len, stdout);
        }
    }
    if (nomem) {
        fprintf(stderr, "hearth detokenize: out of memory reading stdin\n");
        rc = 1;
    }
    hx_tok_ids_free(&ids);
    hx_tok_text_free(&in);
    hx_tok_text_free(&out);
    hx_tokenizer_close(tok);
    return rc;
}
