/* generate.c - chat with a model through libhearth: apply the chat template, stream the reply.
 *
 *   cc examples/generate.c $(pkg-config --cflags --libs hearth) -o generate
 *   ./generate smollm2 "What is the capital of France?"
 */
#include <hearth.h>
#include <stdio.h>
#include <string.h>

static bool print_piece(const char *piece, size_t len, void *user_data)
{
    (void)user_data;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true;
}

int main(int argc, char **argv)
{
    const char *model_name = argc > 1 ? argv[1] : "smollm2";
    const char *question = argc > 2 ? argv[2] : "What is the capital of France?";
    char err[512], messages[2048];
    hx_model *model;
    if (hx_model_open(model_name, NULL, &model, err, sizeof err) != HX_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    hx_session *chat;
    if (hx_session_open(model, NULL, &chat) != HX_OK) {
        fprintf(stderr, "cannot create a session\n");
        hx_model_close(model);
        return 1;
    }
    /* The question goes into a JSON string: this example assumes it holds no quotes. */
    snprintf(messages, sizeof messages, "[{\"role\": \"user\", \"content\": \"%s\"}]", question);
    char *prompt = NULL;
    if (hx_model_apply_template(model, messages, true, &prompt) != HX_OK) {
        fprintf(stderr, "cannot render the chat template\n");
        return 1;
    }
    hx_generate_params gp = hx_generate_params_default(model);
    gp.temperature = 0.0f; /* greedy: the same answer every time */
    gp.max_tokens = 32;
    hx_generate_stats stats;
    hx_status st = hx_session_generate(chat, prompt, &gp, print_piece, NULL, &stats);
    if (st != HX_OK) fprintf(stderr, "\n%s: %s\n", hx_status_str(st), hx_session_errmsg(chat));
    else printf("\n[%d prompt tokens, %d generated]\n", stats.n_prompt, stats.n_generated);
    hx_free_string(prompt);
    hx_session_close(chat);
    hx_model_close(model);
    return st == HX_OK ? 0 : 1;
}
