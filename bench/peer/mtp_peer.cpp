// mtp_peer.cpp: llama.cpp's logits of a model's NextN / MTP block (the draft head of
// Qwen3.5 / 3.6: llama.cpp's qwen35 graph_mtp) for a list of prompts, the reference
// deja's MTP golden (tests/golden/quants/arch/*.mtp.json) is made from.
//
// For each prompt (a JSON array of strings; tokenized with BOS and special-token parsing):
//   the target context decodes the prompt in one batch with its final-normed hidden rows
//   (llama_set_embeddings_nextn, unmasked: one row per position), then an MTP context
//   (LLAMA_CONTEXT_TYPE_MTP, the same model loaded with load_mtp) decodes the same tokens
//   at the same positions with row i's hidden input the target's row i - 1 (row 0: zeros),
//   as common/speculative.cpp's draft-mtp process() feeds it: MTP position i predicts the
//   token at i + 2.  Logits at every position:
//     top      the top-K [id, logit] at every position (batch MTP decode)
//     seq      the MTP decode again token by token (memory cleared; the same hidden rows):
//              spread = max |logit diff| between the two over the whole vocabulary and all
//              positions, llama.cpp's own disagreement on this file
//     h_out    max |x| of the MTP block's own hidden rows (a sanity value)
//     next     the target's greedy token after the prompt (position n)
//     draft    greedy drafting as draft() does it after the prompt: (next, the target's hidden
//              row of n - 1) at position n gives d1; then (d_j, the block's own hidden row of
//              the step before) at the next position gives d_{j+1}; D drafts
//
// Settings: F32 K and V cache, flash attention off, -t threads (default 1).
// MTP_PEER_TRACE=1 prints the sum and first values of every tensor of the MTP graph (the
// first row), to find where an implementation departs from it.
// Built against a llama.cpp build outside this repository (bench/peer/README.md), with
// its src/ on the include path for llama-ext.h (the nextn accessors).

#include "llama.h"
#include "llama-ext.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

// MTP_PEER_TRACE=1: the sum and the first values of every named tensor of the MTP graph's first row
static bool trace_cb(struct ggml_tensor *t, bool ask, void *) {
    if (ask) return true;
    if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) return true;
    const float *d = (const float *)t->data;
    const int64_t n = t->ne[0];
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += d[i];
    fprintf(stderr, "TRACE %-24s ne0 %5lld row0 sum %.9g [%.7g %.7g %.7g]\n", t->name, (long long)n, sum, d[0], n > 1 ? d[1] : 0.0f, n > 2 ? d[2] : 0.0f);
    return true;
}

static std::vector<std::string> read_prompts(const char *path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string s = ss.str();
    std::vector<std::string> out;
    size_t i = 0;
    while ((i = s.find('"', i)) != std::string::npos) {
        std::string cur;
        for (i++; i < s.size() && s[i] != '"'; i++) {
            if (s[i] != '\\') {
                cur += s[i];
                continue;
            }
            i++;
            switch (s[i]) {
            case 'n': cur += '\n'; break;
            case 't': cur += '\t'; break;
            case 'u': {
                const unsigned cp = (unsigned)strtoul(s.substr(i + 1, 4).c_str(), nullptr, 16);
                i += 4;
                if (cp < 0x80) cur += (char)cp;
                else if (cp < 0x800) {
                    cur += (char)(0xC0 | (cp >> 6));
                    cur += (char)(0x80 | (cp & 0x3F));
                } else {
                    cur += (char)(0xE0 | (cp >> 12));
                    cur += (char)(0x80 | ((cp >> 6) & 0x3F));
                    cur += (char)(0x80 | (cp & 0x3F));
                }
                break;
            }
            default: cur += s[i];
            }
        }
        out.push_back(cur);
        i++;
    }
    return out;
}

static std::vector<std::pair<int, float>> top_k(const float *lg, int n_vocab, int k) {
    std::vector<std::pair<int, float>> v(n_vocab);
    for (int i = 0; i < n_vocab; i++) v[i] = {i, lg[i]};
    std::partial_sort(v.begin(), v.begin() + k, v.end(), [](const auto &a, const auto &b) {
        return a.second > b.second || (a.second == b.second && a.first < b.first);
    });
    v.resize(k);
    return v;
}

// One MTP decode of n tokens at positions pos0 .. pos0 + n - 1, token k with hidden row h + k E.
static bool mtp_decode(llama_context *ctx, const llama_token *tok, const float *h, int E, int pos0, int n) {
    llama_batch b = llama_batch_init(n, E, 1);
    b.token = (llama_token *)malloc(sizeof(llama_token) * n); // llama_batch_init gives embd only; MTP needs both
    for (int k = 0; k < n; k++) {
        b.token[k] = tok[k];
        b.pos[k] = pos0 + k;
        b.n_seq_id[k] = 1;
        b.seq_id[k][0] = 0;
        b.logits[k] = true;
        memcpy(b.embd + (size_t)k * E, h + (size_t)k * E, sizeof(float) * E);
    }
    b.n_tokens = n;
    const int rc = llama_decode(ctx, b);
    free(b.token);
    b.token = nullptr;
    llama_batch_free(b);
    return rc == 0;
}

int main(int argc, char **argv) {
    const char *model_path = nullptr, *prompts_path = nullptr, *out_path = nullptr, *label = "";
    int K = 16, D = 8, threads = 1;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-m" && i + 1 < argc) model_path = argv[++i];
        else if (a == "-p" && i + 1 < argc) prompts_path = argv[++i];
        else if (a == "-o" && i + 1 < argc) out_path = argv[++i];
        else if (a == "--top-k" && i + 1 < argc) K = atoi(argv[++i]);
        else if (a == "--draft" && i + 1 < argc) D = atoi(argv[++i]);
        else if (a == "-t" && i + 1 < argc) threads = atoi(argv[++i]);
        else if (a == "--label" && i + 1 < argc) label = argv[++i];
        else {
            fprintf(stderr, "usage: mtp_peer -m MODEL.gguf -p PROMPTS.json [-o OUT.json] [--top-k K] [--draft D] "
                            "[-t N] [--label TEXT]\n");
            return 2;
        }
    }
    if (!model_path || !prompts_path) return 2;
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.load_mtp = true;
    llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) return 1;
    const llama_vocab *vocab = llama_model_get_vocab(model);
    const int V = llama_vocab_n_tokens(vocab), E = llama_model_n_embd(model);
    const std::vector<std::string> prompts = read_prompts(prompts_path);
    size_t n_max = 0;
    std::vector<std::vector<llama_token>> toks;
    for (const auto &p : prompts) {
        std::vector<llama_token> t(p.size() + 8);
        const int n = llama_tokenize(vocab, p.c_str(), (int)p.size(), t.data(), (int)t.size(), true, true);
        if (n < 0) return 1;
        t.resize(n);
        n_max = std::max(n_max, t.size());
        toks.push_back(t);
    }
    auto make_ctx = [&](bool mtp) {
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = (uint32_t)(n_max + D + 8);
        cp.n_batch = cp.n_ubatch = (uint32_t)(n_max + D + 8);
        cp.n_threads = cp.n_threads_batch = threads;
        cp.type_k = cp.type_v = GGML_TYPE_F32;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        if (mtp) {
            cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
            cp.n_rs_seq = 0;
            if (getenv("MTP_PEER_TRACE")) {
                cp.cb_eval = trace_cb;
                cp.cb_eval_user_data = nullptr;
            }
        }
        return llama_init_from_model(model, cp);
    };
    llama_context *tgt = make_ctx(false), *dft = make_ctx(true);
    if (!tgt || !dft) return 1;
    llama_set_embeddings_nextn(tgt, true, false);
    llama_set_embeddings_nextn(dft, true, false);

    FILE *out = out_path ? fopen(out_path, "w") : stdout;
    fprintf(out, "{\n  \"label\": \"%s\", \"model\": \"%s\", \"top_k\": %d,\n  \"prompts\": [\n", label,
            strrchr(model_path, '/') ? strrchr(model_path, '/') + 1 : model_path, K);
    double spread_max = 0.0;
    for (size_t pi = 0; pi < toks.size(); pi++) {
        const std::vector<llama_token> &t = toks[pi];
        const int n = (int)t.size();
        llama_memory_clear(llama_get_memory(tgt), true);
        llama_memory_clear(llama_get_memory(dft), true);
        llama_batch b = llama_batch_init(n, 0, 1);
        for (int k = 0; k < n; k++) {
            b.token[k] = t[k];
            b.pos[k] = k;
            b.n_seq_id[k] = 1;
            b.seq_id[k][0] = 0;
            b.logits[k] = true;
        }
        b.n_tokens = n;
        if (llama_decode(tgt, b) != 0) return 1;
        llama_batch_free(b);
        std::vector<float> h((size_t)n * E, 0.0f); // row i: the target's hidden row of i - 1
        for (int k = 1; k < n; k++) memcpy(h.data() + (size_t)k * E, llama_get_embeddings_nextn_ith(tgt, k - 1), sizeof(float) * E);
        if (!mtp_decode(dft, t.data(), h.data(), E, 0, n)) return 1;
        std::vector<float> lg((size_t)n * V), hmtp((size_t)n * E);
        for (int k = 0; k < n; k++) {
            memcpy(lg.data() + (size_t)k * V, llama_get_logits_ith(dft, k), sizeof(float) * V);
            memcpy(hmtp.data() + (size_t)k * E, llama_get_embeddings_nextn_ith(dft, k), sizeof(float) * E);
        }
        // greedy drafting after the prompt: the target's greedy token x at position n pairs with
        // the target's hidden row of n - 1; each draft then pairs with the block's own row
        const float *tl = llama_get_logits_ith(tgt, n - 1);
        llama_token x = (llama_token)(std::max_element(tl, tl + V) - tl);
        const llama_token next = x;
        std::vector<float> hin(llama_get_embeddings_nextn_ith(tgt, n - 1), llama_get_embeddings_nextn_ith(tgt, n - 1) + E);
        std::vector<int> draft;
        for (int j = 0; j < D; j++) {
            if (!mtp_decode(dft, &x, hin.data(), E, n + j, 1)) return 1;
            const float *l = llama_get_logits_ith(dft, 0);
            x = (llama_token)(std::max_element(l, l + V) - l);
            const float *ho = llama_get_embeddings_nextn_ith(dft, 0);
            hin.assign(ho, ho + E);
            draft.push_back(x);
        }
        // the same MTP rows token by token
        llama_memory_clear(llama_get_memory(dft), true);
        double spread = 0.0;
        for (int k = 0; k < n; k++) {
            if (!mtp_decode(dft, t.data() + k, h.data() + (size_t)k * E, E, k, 1)) return 1;
            const float *l = llama_get_logits_ith(dft, 0);
            for (int v = 0; v < V; v++) spread = std::max(spread, (double)std::fabs(l[v] - lg[(size_t)k * V + v]));
        }
        spread_max = std::max(spread_max, spread);
        float hmax = 0.0f;
        for (float x : hmtp) hmax = std::max(hmax, std::fabs(x));
        fprintf(out, "    {\"index\": %zu, \"prompt_tokens\": [", pi);
        for (int k = 0; k < n; k++) fprintf(out, "%s%d", k ? ", " : "", t[k]);
        fprintf(out, "],\n     \"spread\": %.9g, \"h_out_absmax\": %.9g, \"next\": %d,\n     \"draft\": [", spread, hmax,
                next);
        for (size_t k = 0; k < draft.size(); k++) fprintf(out, "%s%d", k ? ", " : "", draft[k]);
        fprintf(out, "],\n     \"top\": [\n");
        for (int k = 0; k < n; k++) {
            const auto tk = top_k(lg.data() + (size_t)k * V, V, K);
            fprintf(out, "       [");
            for (int j = 0; j < K; j++) fprintf(out, "%s[%d, %.9g]", j ? ", " : "", tk[j].first, tk[j].second);
            fprintf(out, "]%s\n", k + 1 < n ? "," : "");
        }
        fprintf(out, "     ]}%s\n", pi + 1 < toks.size() ? "," : "");
    }
    fprintf(out, "  ],\n  \"spread_max\": %.9g\n}\n", spread_max);
    if (out != stdout) fclose(out);
    llama_free(dft);
    llama_free(tgt);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
