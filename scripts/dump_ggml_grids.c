// Writes the lookup tables of ggml's grid and FP4 types, as ggml compiles them, to one file:
// ksigns_iq2xs, kvalues_fp4, iq2xxs_grid, iq2xs_grid, iq2s_grid, iq3xxs_grid, iq3s_grid,
// iq1s_grid, back to back in host (little-endian) byte order. Used for
// crates/qrepack/tests/fixtures/grids/tables.bin; contains no ggml code, only includes its header.
//
//   CPP=/tmp/ggml-peer/src/v1.12.2/package/cpp
//   gcc -std=gnu11 -I$CPP scripts/dump_ggml_grids.c -o dump_ggml_grids && ./dump_ggml_grids OUT
#include <stdint.h>
#include <stdio.h>

#define LM_GGML_COMMON_DECL_C
#define LM_GGML_COMMON_IMPL_C
#include "ggml-common.h"

#define PUT(t) fwrite(t, 1, sizeof(t), f)

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT\n", argv[0]);
        return 2;
    }
    FILE * f = fopen(argv[1], "wb");
    if (!f) {
        return 1;
    }
    PUT(ksigns_iq2xs);
    PUT(kvalues_fp4);
    PUT(iq2xxs_grid);
    PUT(iq2xs_grid);
    PUT(iq2s_grid);
    PUT(iq3xxs_grid);
    PUT(iq3s_grid);
    PUT(iq1s_grid);
    return fclose(f) != 0;
}
