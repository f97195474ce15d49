/* cli.h - the verbs of the hearth command. Each takes the arguments after the verb and returns
 * the process exit status (0 ok, 1 error, 2 usage). */
#ifndef HX_CLI_H
#define HX_CLI_H
#include "sample/sampler.h"

int hx_cmd_inspect(int argc, char **argv);
int hx_cmd_run(int argc, char **argv);        /* cmd_run.c */
int hx_cmd_chat(int argc, char **argv);       /* cmd_run.c */
int hx_cmd_ls(int argc, char **argv);
int hx_cmd_get(int argc, char **argv);        /* cmd_get.c */
int hx_cmd_rm(int argc, char **argv);         /* cmd_rm.c */
int hx_cmd_tokenize(int argc, char **argv);   /* cmd_tokenize.c */
int hx_cmd_detokenize(int argc, char **argv); /* cmd_tokenize.c */
int hx_cmd_template(int argc, char **argv);   /* cmd_template.c */
int hx_cmd_serve(int argc, char **argv);      /* cmd_serve.c */
int hx_cmd_fit(int argc, char **argv);        /* cmd_fit.c */
int hx_cmd_devices(int argc, char **argv);    /* cmd_devices.c */

/* Reads a sampling flag (--temp --top-k --top-p --min-p --seed) and its value into f: 1 when flag
 * is one of them, 0 when it is not, -1 (after a message naming it) when value is not valid. */
int hx_cli_sampling_flag(const char *cmd, const char *flag, const char *value,
                         hx_sampling_flags *f);

/* Formats a count the way people read it ("134.5M", "1.24B") and bytes ("95.3 MiB"). */
void hx_cli_fmt_count(double n, char *buf, unsigned len);
void hx_cli_fmt_bytes(double n, char *buf, unsigned len);

#endif
