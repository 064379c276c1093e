// llama.cpp's side of a teacher-forced comparison: tokenizes a prompt (special tokens parsed,
// BOS as the model asks), runs it, then takes N greedy steps, printing for the prompt and every
// step the greedy token and the K largest logits as JSON lines:
//   {"prompt": [2, 105, ...]}
//   {"step": 0, "token": 7042, "top": [[7042, 17.74], [260, 15.23], ...]}
// A PROMPT of the form "ids:1,2,3" is taken as token ids as they are. The key/value cache is
// f16 (llama.cpp's default) unless the sixth argument is "f32".
// Built against llama.cpp's libllama by scripts/llama_topk/build.sh.
#include "llama.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

static void quiet_log(ggml_log_level, const char *, void *) {}

int main(int argc, char ** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: llama_topk MODEL.gguf PROMPT [steps=16] [top=5] [threads=2] [f16|f32]\n");
        return 2;
    }
    const char * path = argv[1];
    const std::string prompt = argv[2];
    const int steps = argc > 3 ? std::atoi(argv[3]) : 16;
    int top = argc > 4 ? std::atoi(argv[4]) : 5;
    const int threads = argc > 5 ? std::atoi(argv[5]) : 2;
    const bool kv_f32 = argc > 6 && std::strcmp(argv[6], "f32") == 0;

    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(path, llama_model_default_params());
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", path);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    top = std::max(1, std::min(top, n_vocab));

    std::vector<llama_token> ids;
    if (prompt.rfind("ids:", 0) == 0) {
        const char * p = prompt.c_str() + 4;
        while (*p) {
            char * end = nullptr;
            long id = std::strtol(p, &end, 10);
            if (end == p || id < 0 || id >= n_vocab) {
                std::fprintf(stderr, "bad token id list\n");
                return 1;
            }
            ids.push_back((llama_token) id);
            p = *end == ',' ? end + 1 : end;
        }
    } else {
        int count = -llama_tokenize(vocab, prompt.data(), (int) prompt.size(), nullptr, 0, true, true);
        ids.resize(count);
        if (llama_tokenize(vocab, prompt.data(), (int) prompt.size(), ids.data(), count, true, true) != count) {
            std::fprintf(stderr, "tokenization failed\n");
            return 1;
        }
    }
    const int n = (int) ids.size();
    if (n == 0) {
        std::fprintf(stderr, "empty prompt\n");
        return 1;
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n + steps + 8;
    cp.n_batch = std::max<int>(n, 1);
    cp.n_ubatch = cp.n_batch;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    if (kv_f32) {
        cp.type_k = GGML_TYPE_F32;
        cp.type_v = GGML_TYPE_F32;
    }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        std::fprintf(stderr, "cannot create a context\n");
        return 1;
    }

    std::printf("{\"prompt\": [");
    for (int i = 0; i < n; i++) {
        std::printf(i ? ", %d" : "%d", ids[i]);
    }
    std::printf("]}\n");

    if (llama_decode(ctx, llama_batch_get_one(ids.data(), n)) != 0) {
        std::fprintf(stderr, "decode failed\n");
        return 1;
    }
    std::vector<int> order(n_vocab);
    for (int step = 0; step < steps; step++) {
        const float * logits = llama_get_logits_ith(ctx, -1);
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int a, int b) {
            return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
        });
        llama_token next = order[0];
        std::printf("{\"step\": %d, \"token\": %d, \"top\": [", step, next);
        for (int k = 0; k < top; k++) {
            std::printf(k ? ", [%d, %.6g]" : "[%d, %.6g]", order[k], logits[order[k]]);
        }
        std::printf("]}\n");
        if (step + 1 < steps && llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) {
            std::fprintf(stderr, "decode failed\n");
            return 1;
        }
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
