// Model-level speed of llama.cpp on the CPU, measured the way llama-bench measures it, so that
// qrepack-candle's `bench` example can be put next to it without building llama-bench itself
// (built by build.sh in this directory against the lm_ggml_-prefixed llama.cpp of the npm package
// cui-llama.rn).
//
//   llama_speed MODEL.gguf [-t 2] [-p 512] [-n 128] [-r 3] [-fa 0|1] [--poll 50] [--seed 42] [-v]
//
// Method (as llama-bench's defaults): model loaded with the default llama_model_params (CPU only,
// mmap, "extra buffer types" on, i.e. the CPU_REPACK weight layouts); a context with n_ctx = p + n,
// n_batch = n_ubatch = p, f16 KV cache, flash attention off (-fa 0, llama-bench's default); a ggml
// threadpool of -t threads with poll = 50 attached for both single-token and batch work
// (n_threads = n_threads_batch = t). Three tests, each with one untimed warm-up and then -r timed
// runs, the KV cache cleared before every run:
//   pp<p>       one llama_decode of p random tokens (first one BOS if the vocab adds BOS), only
//               the last token's logits requested;
//   tg<n>       n single-token llama_decode calls from an empty cache (positions 0..n-1), the
//               token fed being random (llama-bench's tg test);
//   tg<n>@d<p>  the same n single-token decodes after the p-token prompt (positions p..p+n-1),
//               each next token the greedy argmax of the previous logits: what qrepack-candle's
//               `bench` example times as "generation".
// Prints each run to stderr, then per test the median and the best tokens/s on stdout, and with
// --json one JSON object on the last line.

#include "llama.h"
#include "ggml.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#ifndef PEER_BUILD_NUMBER
#define PEER_BUILD_NUMBER 0
#endif
#ifndef PEER_COMMIT
#define PEER_COMMIT "unknown"
#endif

namespace {

struct Args {
    std::string model;
    int threads = 2;
    int n_prompt = 512;
    int n_gen = 128;
    int reps = 3;
    int flash_attn = 0;
    int poll = 50;
    unsigned seed = 42;
    bool verbose = false;
    bool json = false;
};

bool g_verbose = false;

void log_cb(enum lm_ggml_log_level, const char * text, void *) {
    // keep the lines that show where the weights went (CPU_REPACK buffers) even when quiet
    if (g_verbose || std::strstr(text, "model buffer size") != nullptr) {
        std::fputs(text, stderr);
    }
}

double now_s() {
    using clk = std::chrono::steady_clock;
    return std::chrono::duration<double>(clk::now().time_since_epoch()).count();
}

struct Bench {
    llama_context * ctx;
    const llama_vocab * vocab;
    int n_vocab;
    std::mt19937 rng;

    llama_token random_token() { return (llama_token) (rng() % (unsigned) n_vocab); }

    void clear() { llama_memory_clear(llama_get_memory(ctx), false); }

    void decode(llama_token * toks, int n) {
        int res = llama_decode(ctx, llama_batch_get_one(toks, n));
        if (res != 0) {
            std::fprintf(stderr, "llama_decode failed (%d)\n", res);
            std::exit(1);
        }
    }

    // the whole prompt in one llama_decode (n_batch = n_ubatch = n_prompt)
    void prompt(int n_prompt) {
        std::vector<llama_token> toks(n_prompt);
        for (int i = 0; i < n_prompt; i++) {
            toks[i] = random_token();
        }
        if (llama_vocab_get_add_bos(vocab)) {
            toks[0] = llama_vocab_bos(vocab);
        }
        decode(toks.data(), n_prompt);
        llama_synchronize(ctx);
    }

    // n single-token decodes; greedy feeds back the argmax, otherwise random tokens (llama-bench)
    void gen(int n_gen, bool greedy) {
        llama_token tok = llama_vocab_get_add_bos(vocab) ? llama_vocab_bos(vocab) : random_token();
        if (greedy) {
            tok = argmax(llama_get_logits_ith(ctx, -1));
        }
        for (int i = 0; i < n_gen; i++) {
            decode(&tok, 1);
            llama_synchronize(ctx);
            tok = greedy ? argmax(llama_get_logits_ith(ctx, -1)) : random_token();
        }
    }

    llama_token argmax(const float * logits) const {
        return (llama_token) (std::max_element(logits, logits + n_vocab) - logits);
    }
};

struct Stats {
    std::vector<double> tps;
    double median() const {
        std::vector<double> v = tps;
        std::sort(v.begin(), v.end());
        size_t n = v.size();
        return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
    }
    double best() const { return tps.empty() ? 0.0 : *std::max_element(tps.begin(), tps.end()); }
};

int usage() {
    std::fprintf(stderr,
                 "usage: llama_speed MODEL.gguf [-t 2] [-p 512] [-n 128] [-r 3] [-fa 0|1] [--poll 50] "
                 "[--seed 42] [-v] [--json]\n");
    return 2;
}

}  // namespace

int main(int argc, char ** argv) {
    Args a;
    for (int i = 1; i < argc; i++) {
        std::string s = argv[i];
        auto num = [&](int & dst) {
            if (i + 1 >= argc) {
                std::exit(usage());
            }
            dst = std::atoi(argv[++i]);
        };
        if (s == "-t") {
            num(a.threads);
        } else if (s == "-p") {
            num(a.n_prompt);
        } else if (s == "-n") {
            num(a.n_gen);
        } else if (s == "-r") {
            num(a.reps);
        } else if (s == "-fa") {
            num(a.flash_attn);
        } else if (s == "--poll") {
            num(a.poll);
        } else if (s == "--seed") {
            int v = 0;
            num(v);
            a.seed = (unsigned) v;
        } else if (s == "-v") {
            a.verbose = true;
        } else if (s == "--json") {
            a.json = true;
        } else if (a.model.empty() && s[0] != '-') {
            a.model = s;
        } else {
            return usage();
        }
    }
    if (a.model.empty() || a.threads < 1 || a.n_prompt < 1 || a.n_gen < 1 || a.reps < 1) {
        return usage();
    }
    g_verbose = a.verbose;
    llama_log_set(log_cb, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = true;  // the default, spelled out: CPU_REPACK layouts for the weights
    llama_model * model = llama_model_load_from_file(a.model.c_str(), mp);
    if (model == nullptr) {
        std::fprintf(stderr, "cannot load %s\n", a.model.c_str());
        return 1;
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) (a.n_prompt + a.n_gen);
    cp.n_batch = (uint32_t) a.n_prompt;
    cp.n_ubatch = (uint32_t) a.n_prompt;
    cp.n_threads = a.threads;
    cp.n_threads_batch = a.threads;
    cp.flash_attn_type = a.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = LM_GGML_TYPE_F16;
    cp.type_v = LM_GGML_TYPE_F16;
    cp.embeddings = false;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (ctx == nullptr) {
        std::fprintf(stderr, "cannot create a context\n");
        return 1;
    }

    lm_ggml_threadpool_params tpp = lm_ggml_threadpool_params_default(a.threads);
    tpp.poll = (uint32_t) a.poll;
    lm_ggml_threadpool * tp = lm_ggml_threadpool_new(&tpp);
    if (tp == nullptr) {
        std::fprintf(stderr, "cannot create a threadpool of %d threads\n", a.threads);
        return 1;
    }
    llama_attach_threadpool(ctx, tp, nullptr);

    Bench b{ ctx, llama_model_get_vocab(model), 0, std::mt19937(a.seed) };
    b.n_vocab = llama_vocab_n_tokens(b.vocab);

    char desc[256];
    llama_model_desc(model, desc, sizeof desc);

    // warm-up, as llama-bench: one prompt run and one single-token run
    b.clear();
    b.prompt(a.n_prompt);
    b.clear();
    b.gen(1, false);

    Stats pp, tg, tgd;
    for (int r = 0; r < a.reps; r++) {
        b.clear();
        double t0 = now_s();
        b.prompt(a.n_prompt);
        double t_pp = now_s() - t0;
        pp.tps.push_back(a.n_prompt / t_pp);

        b.clear();
        t0 = now_s();
        b.gen(a.n_gen, false);
        double t_tg = now_s() - t0;
        tg.tps.push_back(a.n_gen / t_tg);

        b.clear();
        b.prompt(a.n_prompt);
        t0 = now_s();
        b.gen(a.n_gen, true);
        double t_tgd = now_s() - t0;
        tgd.tps.push_back(a.n_gen / t_tgd);

        std::fprintf(stderr, "rep %d llama.cpp: pp%d %.3f s, tg%d %.3f s, tg%d@d%d %.3f s\n", r, a.n_prompt, t_pp,
                     a.n_gen, t_tg, a.n_gen, a.n_prompt, t_tgd);
    }

    std::printf("%s (%s): %d threads, fa %d, %d reps, llama.cpp build %d (%s)\n", a.model.c_str(), desc,
                a.threads, a.flash_attn, a.reps, PEER_BUILD_NUMBER, PEER_COMMIT);
    std::printf("  pp%-4d      median %8.1f  best %8.1f tokens/s\n", a.n_prompt, pp.median(), pp.best());
    std::printf("  tg%-4d      median %8.1f  best %8.1f tokens/s\n", a.n_gen, tg.median(), tg.best());
    std::printf("  tg%d@d%-4d median %8.1f  best %8.1f tokens/s\n", a.n_gen, a.n_prompt, tgd.median(), tgd.best());
    if (a.json) {
        std::printf("{\"pp\": %.2f, \"tg\": %.2f, \"tg_depth\": %.2f, \"pp_median\": %.2f, \"tg_median\": %.2f, "
                    "\"tg_depth_median\": %.2f}\n",
                    pp.best(), tg.best(), tgd.best(), pp.median(), tg.median(), tgd.median());
    }

    llama_free(ctx);
    lm_ggml_threadpool_free(tp);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
