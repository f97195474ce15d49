/* model_info.c - the smallest program using libhearth: describe a model.
 *
 *   cc examples/model_info.c $(pkg-config --cflags --libs hearth) -o model_info
 *   ./model_info smollm2
 */
#include <hearth.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    const char *model = argc > 1 ? argv[1] : "smollm2";
    hx_model_info *info;
    char err[512];
    if (hx_model_info_open(model, &info, err, sizeof err) != HX_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("%s (%s): %d layers, hidden %d, vocab %d, %lld parameters\n",
           hx_model_info_arch(info), hx_model_info_format(info), hx_model_info_n_layer(info),
           hx_model_info_d_model(info), hx_model_info_n_vocab(info),
           (long long)hx_model_info_n_params(info));
    hx_model_info_close(info);
    return 0;
}
