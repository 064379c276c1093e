// Tiny harness used by scripts/make_quant_fixtures.py to derive quantizer fixtures from ggml
// itself. Not part of the crate; contains no ggml code, only calls into a ggml build.
//
// usage: make_quant_fixtures TYPE_ID chunk|ref ROWS COLS IN.f32 OUT.bin
//        make_quant_fixtures TYPE_ID imat ROWS COLS IN.f32 OUT.bin IMP.f32
//        make_quant_fixtures TYPE_ID deq ROWS COLS IN.bin OUT.f32
//   chunk: lm_ggml_quantize_chunk(type, x, dst, 0, rows, cols, NULL)   (what llama-quantize uses)
//   imat:  lm_ggml_quantize_chunk(type, x, dst, 0, rows, cols, imp)    (llama-quantize --imatrix;
//          IMP.f32 holds COLS importance values)
//   ref:   type_traits->from_float_ref(x, dst, rows*cols)            (quantize_row_*_ref;
//          quantize_row_q8_K_ref for Q8_K)
//   deq:   type_traits->to_float(q, y, rows*cols)                    (dequantize_row_*)
// The destination is zero-filled first (quantize_row_q8_K_ref leaves bsums of zero blocks unset).
//
// Build against the no-FMA-contraction peer build of /work/shared/peer/build.sh:
//   CPP=/tmp/ggml-peer-nofma/src/v1.12.2/package/cpp
//   gcc -O2 -march=native -ffp-contract=off -std=gnu11 -I$CPP -c make_quant_fixtures.c -o h.o
//   g++ -pthread h.o /tmp/ggml-peer-nofma/build-1.12.2/libggml-peer.a -o make_quant_fixtures
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

// exported by ggml-quants.c (Q8_K has no from_float_ref in ggml's base type traits)
void quantize_row_q8_K_ref(const float * x, void * y, int64_t k);

int main(int argc, char ** argv) {
    int use_imat = argc == 8 && strcmp(argv[2], "imat") == 0;
    if (argc != 7 && !use_imat) {
        fprintf(stderr, "usage: %s TYPE_ID chunk|ref|imat ROWS COLS IN.f32 OUT.bin [IMP.f32]\n", argv[0]);
        return 2;
    }
    enum lm_ggml_type type = (enum lm_ggml_type) atoi(argv[1]);
    int use_ref = strcmp(argv[2], "ref") == 0;
    long rows = atol(argv[3]), cols = atol(argv[4]);
    size_t n = (size_t) rows * (size_t) cols;
    float * imp = NULL;
    if (use_imat) {
        imp = malloc((size_t) cols * sizeof(float));
        FILE * fi = fopen(argv[7], "rb");
        if (!fi || fread(imp, sizeof(float), (size_t) cols, fi) != (size_t) cols) { fprintf(stderr, "cannot read %s\n", argv[7]); return 1; }
        fclose(fi);
    }
    if (strcmp(argv[2], "deq") == 0) {
        const struct lm_ggml_type_traits * tr = lm_ggml_get_type_traits(type);
        size_t qbytes = lm_ggml_row_size(type, cols) * (size_t) rows;
        void * q = malloc(qbytes);
        float * y = calloc(n, sizeof(float));
        FILE * f = fopen(argv[5], "rb");
        if (!f || fread(q, 1, qbytes, f) != qbytes) { fprintf(stderr, "cannot read %s\n", argv[5]); return 1; }
        fclose(f);
        if (!tr->to_float) { fprintf(stderr, "no to_float for type %d\n", type); return 1; }
        tr->to_float(q, y, (int64_t) n);
        f = fopen(argv[6], "wb");
        if (!f || fwrite(y, sizeof(float), n, f) != n) { fprintf(stderr, "cannot write %s\n", argv[6]); return 1; }
        fclose(f);
        free(q);
        free(y);
        return 0;
    }
    float * x = malloc(n * sizeof(float));
    FILE * f = fopen(argv[5], "rb");
    if (!f || fread(x, sizeof(float), n, f) != n) { fprintf(stderr, "cannot read %s\n", argv[5]); return 1; }
    fclose(f);
    size_t nbytes = lm_ggml_row_size(type, cols) * (size_t) rows;
    void * dst = calloc(1, nbytes);
    size_t got;
    if (use_ref) {
        const struct lm_ggml_type_traits * tr = lm_ggml_get_type_traits(type);
        if (type == LM_GGML_TYPE_Q8_K) {
            quantize_row_q8_K_ref(x, dst, (int64_t) n);
        } else if (!tr->from_float_ref) {
            fprintf(stderr, "no from_float_ref for type %d\n", type);
            return 1;
        } else {
            tr->from_float_ref(x, dst, (int64_t) n);
        }
        got = nbytes;
    } else {
        got = lm_ggml_quantize_chunk(type, x, dst, 0, rows, cols, imp);
    }
    if (got != nbytes) { fprintf(stderr, "size mismatch %zu vs %zu\n", got, nbytes); return 1; }
    f = fopen(argv[6], "wb");
    if (!f || fwrite(dst, 1, nbytes, f) != nbytes) { fprintf(stderr, "cannot write %s\n", argv[6]); return 1; }
    fclose(f);
    free(x);
    free(dst);
    free(imp);
    return 0;
}
