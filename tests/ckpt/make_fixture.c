/* Writes the synthetic test model's checkpoint: make_fixture ROOT TP PP VPP DP DIST_OPT ITER */
#include "tests/ckpt/ckpt_util.h"

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s ROOT TP PP VPP DP DIST_OPT ITER\n", argv[0]);
        return 1;
    }
    ck_layout l = {atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6])};
    tr_diags d;
    tr_diags_init(&d);
    tr_status s = ck_save_layout(argv[1], &l, atoll(argv[7]), &d);
    tr_diags_print_text(&d, stderr, false);
    tr_diags_free(&d);
    return s == TR_OK ? 0 : 1;
}
