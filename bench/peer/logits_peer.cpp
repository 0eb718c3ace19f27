// logits_peer.cpp: llama.cpp's logits for a model file and a list of prompts, the
// reference deja's quantized-type goldens are made from (tests/golden/quants).
//
// For each prompt (a JSON array of strings; tokenized with BOS and special-token
// parsing, as ../shared/golden's goldens are):
//
//   batch     the whole prompt in one llama_decode with logits at every position;
//             the top-K [id, logit] at the last position; then S greedy steps
//             (argmax, lowest id on ties; no sampler chain, no stop at EOS), each
//             step's top-T [id, logit] (row 0 is the last prompt position, row s the
//             logits after feeding greedy id s-1).
//   seq       the memory cleared, the same prompt token by token (one llama_decode
//             per token, n_batch 1), logits at every position, then S greedy steps.
//   fa        the prompt in one batch again, in a second context with flash attention
//             (F32 K/V still): the attention's float order changes, nothing else.
//   spread    llama.cpp's own disagreement between batch and seq: the max |logit diff|
//             over the whole vocabulary at every prompt position (and at the last one
//             alone), and whether the two greedy runs chose the same ids; spread_fa the
//             same between batch and fa (all positions).
//
// Settings: F32 K and V cache, flash attention off (the f32kv variant of
// ../shared/golden), n_ctx = longest prompt + S, -t threads (default 1) for both
// single-token and batch work, default model params (mmap; the CPU backend's
// extra buffer types, i.e. weight repacking where it has a repacked layout).
//
// Output: one JSON document (stdout or -o; per prompt, by its index in PROMPTS.json:
// prompt_tokens, top_last, top_last_seq (the seq run's logits at top_last's ids),
// greedy, greedy_seq, step_top, spread_all_positions, spread_at (its position), spread_fa,
// spread_last, spread_steps (batch vs seq over the greedy steps while both fed the same ids);
// and the maxima over prompts), and with --dump DIR the full last-position
// logits of each prompt's batch run as DIR/p<i>.logits_last.f32 (n_vocab float32 LE).
//
// Built against a llama.cpp build outside this repository (bench/peer/README.md); the
// only other C++ in the tree is grammar_peer.cpp, and neither is part of deja.

#include "llama.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

static void usage(void) {
    fprintf(stderr,
        "usage: logits_peer -m MODEL.gguf -p PROMPTS.json [options]\n"
        "  PROMPTS.json: a JSON array of strings\n"
        "options:\n"
        "  -o OUT.json     write the JSON there (default stdout)\n"
        "  --steps S       greedy steps (default 16)\n"
        "  --top-k K       [id, logit] pairs kept at the last prompt position (default 64)\n"
        "  --top-steps T   pairs kept at each greedy step (default 4)\n"
        "  -t N            threads (default 1)\n"
        "  --dump DIR      also write DIR/p<i>.logits_last.f32 (batch run)\n"
        "  --label TEXT    free text copied into the JSON (e.g. the peer's commit)\n");
}

static void log_quiet(enum ggml_log_level level, const char * text, void * user) {
    (void) user;
    static enum ggml_log_level last = GGML_LOG_LEVEL_NONE;
    if (level == GGML_LOG_LEVEL_CONT) level = last; else last = level;
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static bool read_file(const std::string & path, std::string & out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    std::stringstream ss;
    ss << f.rdbuf();
    out = ss.str();
    return true;
}

// A JSON array of strings: enough of JSON for prompts (escapes \" \\ \/ \b \f \n \r \t \uXXXX,
// surrogate pairs).
static bool parse_string_array(const std::string & s, std::vector<std::string> & out) {
    size_t i = 0;
    auto ws = [&]() { while (i < s.size() && strchr(" \t\r\n", s[i])) i++; };
    auto put_utf8 = [](std::string & o, uint32_t c) {
        if (c < 0x80) o += (char) c;
        else if (c < 0x800) { o += (char) (0xC0 | (c >> 6)); o += (char) (0x80 | (c & 63)); }
        else if (c < 0x10000) { o += (char) (0xE0 | (c >> 12)); o += (char) (0x80 | ((c >> 6) & 63)); o += (char) (0x80 | (c & 63)); }
        else { o += (char) (0xF0 | (c >> 18)); o += (char) (0x80 | ((c >> 12) & 63)); o += (char) (0x80 | ((c >> 6) & 63)); o += (char) (0x80 | (c & 63)); }
    };
    auto hex4 = [&](uint32_t & v) {
        if (i + 4 > s.size()) return false;
        v = 0;
        for (int k = 0; k < 4; k++) {
            char c = s[i++];
            v <<= 4;
            if (c >= '0' && c <= '9') v |= (uint32_t) (c - '0');
            else if (c >= 'a' && c <= 'f') v |= (uint32_t) (c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') v |= (uint32_t) (c - 'A' + 10);
            else return false;
        }
        return true;
    };
    ws();
    if (i >= s.size() || s[i++] != '[') return false;
    ws();
    if (i < s.size() && s[i] == ']') return true;
    for (;;) {
        ws();
        if (i >= s.size() || s[i++] != '"') return false;
        std::string o;
        for (;;) {
            if (i >= s.size()) return false;
            char c = s[i++];
            if (c == '"') break;
            if (c != '\\') { o += c; continue; }
            if (i >= s.size()) return false;
            c = s[i++];
            switch (c) {
                case '"': o += '"'; break;
                case '\\': o += '\\'; break;
                case '/': o += '/'; break;
                case 'b': o += '\b'; break;
                case 'f': o += '\f'; break;
                case 'n': o += '\n'; break;
                case 'r': o += '\r'; break;
                case 't': o += '\t'; break;
                case 'u': {
                    uint32_t v, lo;
                    if (!hex4(v)) return false;
                    if (v >= 0xD800 && v < 0xDC00 && i + 1 < s.size() && s[i] == '\\' && s[i + 1] == 'u') {
                        i += 2;
                        if (!hex4(lo)) return false;
                        v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                    }
                    put_utf8(o, v);
                    break;
                }
                default: return false;
            }
        }
        out.push_back(o);
        ws();
        if (i < s.size() && s[i] == ',') { i++; continue; }
        if (i < s.size() && s[i] == ']') return true;
        return false;
    }
}

static std::string json_escape(const std::string & s) {
    std::string o;
    for (unsigned char c : s) {
        if (c == '"') o += "\\\"";
        else if (c == '\\') o += "\\\\";
        else if (c == '\n') o += "\\n";
        else if (c == '\t') o += "\\t";
        else if (c == '\r') o += "\\r";
        else if (c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); o += b; }
        else o += (char) c;
    }
    return o;
}

// Shortest decimal that reads back as the same float.
static std::string fmt_float(float v) {
    char b[32];
    for (int p = 6; p <= 9; p++) {
        snprintf(b, sizeof b, "%.*g", p, (double) v);
        if (strtof(b, nullptr) == v) break;
    }
    return b;
}

static int argmax(const float * x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

// The ids of the k largest values, by value descending, lower id first on ties.
static std::vector<int> top_ids(const float * x, int n, int k) {
    std::vector<int> idx(n);
    for (int i = 0; i < n; i++) idx[i] = i;
    k = std::min(k, n);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int a, int b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    idx.resize(k);
    return idx;
}

// [id, x[id]] for the given ids.
static std::string pairs_json(const float * x, const std::vector<int> & ids) {
    std::string o = "[";
    for (size_t i = 0; i < ids.size(); i++) {
        if (i) o += ", ";
        o += "[" + std::to_string(ids[i]) + ", " + fmt_float(x[ids[i]]) + "]";
    }
    return o + "]";
}

// The k largest [id, logit], by logit descending, lower id first on ties.
static std::string top_json(const float * x, int n, int k) { return pairs_json(x, top_ids(x, n, k)); }

static std::string ids_json(const std::vector<llama_token> & v) {
    std::string o = "[";
    for (size_t i = 0; i < v.size(); i++) o += (i ? ", " : "") + std::to_string(v[i]);
    return o + "]";
}

// Decodes toks at positions pos0.. as one batch (n_batch is large enough), logits for
// every token (all_logits) or only the last; copies every output row into rows.
static bool decode(llama_context * ctx, const std::vector<llama_token> & toks, int pos0, bool all_logits,
                   int n_vocab, std::vector<float> & rows) {
    llama_batch b = llama_batch_init((int32_t) toks.size(), 0, 1);
    b.n_tokens = (int32_t) toks.size();
    for (size_t i = 0; i < toks.size(); i++) {
        b.token[i] = toks[i];
        b.pos[i] = pos0 + (int) i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = all_logits || i + 1 == toks.size();
    }
    bool ok = llama_decode(ctx, b) == 0;
    rows.clear();
    for (size_t i = 0; ok && i < toks.size(); i++) {
        if (!b.logits[i]) continue;
        const float * l = llama_get_logits_ith(ctx, (int32_t) i);
        if (!l) { ok = false; break; }
        rows.insert(rows.end(), l, l + n_vocab);
    }
    llama_batch_free(b);
    return ok;
}

int main(int argc, char ** argv) {
    std::string model_path, prompts_path, out_path, dump_dir, label;
    int n_steps = 16, top_k = 64, top_steps = 4, n_threads = 1;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto val = [&]() -> const char * {
            if (i + 1 >= argc) { fprintf(stderr, "%s needs a value\n", a.c_str()); exit(2); }
            return argv[++i];
        };
        if (a == "-m") model_path = val();
        else if (a == "-p") prompts_path = val();
        else if (a == "-o") out_path = val();
        else if (a == "--steps") n_steps = atoi(val());
        else if (a == "--top-k") top_k = atoi(val());
        else if (a == "--top-steps") top_steps = atoi(val());
        else if (a == "-t") n_threads = atoi(val());
        else if (a == "--dump") dump_dir = val();
        else if (a == "--label") label = val();
        else { usage(); return 2; }
    }
    if (model_path.empty() || prompts_path.empty() || n_steps < 1 || top_k < 1 || top_steps < 1 || n_threads < 1) {
        usage();
        return 2;
    }
    std::string pj;
    std::vector<std::string> prompts;
    if (!read_file(prompts_path, pj) || !parse_string_array(pj, prompts) || prompts.empty()) {
        fprintf(stderr, "%s: not a non-empty JSON array of strings\n", prompts_path.c_str());
        return 1;
    }

    llama_log_set(log_quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) { fprintf(stderr, "%s: cannot load\n", model_path.c_str()); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    std::vector<std::vector<llama_token>> ptoks;
    size_t max_len = 0;
    for (const auto & p : prompts) {
        std::vector<llama_token> t(p.size() + 8);
        int n = llama_tokenize(vocab, p.data(), (int32_t) p.size(), t.data(), (int32_t) t.size(), true, true);
        if (n < 0) { t.resize(-n); n = llama_tokenize(vocab, p.data(), (int32_t) p.size(), t.data(), (int32_t) t.size(), true, true); }
        if (n <= 0) { fprintf(stderr, "tokenizing prompt failed\n"); return 1; }
        t.resize(n);
        max_len = std::max(max_len, t.size());
        ptoks.push_back(t);
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) (max_len + n_steps + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t) std::max<size_t>(max_len, 32);
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = n_threads;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    // the same with flash attention: only the attention's float order changes (F32 K/V)
    llama_context_params cp_fa = cp;
    cp_fa.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    llama_context * ctx_fa = llama_init_from_model(model, cp_fa);
    if (!ctx || !ctx_fa) { fprintf(stderr, "cannot create a context\n"); return 1; }

    char desc[256];
    llama_model_desc(model, desc, sizeof desc);
    std::string js = "{\n";
    js += "  \"model\": \"" + json_escape(model_path.substr(model_path.rfind('/') + 1)) + "\",\n";
    js += "  \"prompts\": \"" + json_escape(prompts_path.substr(prompts_path.rfind('/') + 1)) + "\",\n";
    js += "  \"desc\": \"" + json_escape(desc) + "\",\n";
    if (!label.empty()) js += "  \"label\": \"" + json_escape(label) + "\",\n";
    js += "  \"n_vocab\": " + std::to_string(n_vocab) + ",\n";
    js += "  \"settings\": {\"type_k\": \"f32\", \"type_v\": \"f32\", \"flash_attn\": false, \"n_threads\": " +
          std::to_string(n_threads) + ", \"n_ctx\": " + std::to_string(cp.n_ctx) + ", \"steps\": " +
          std::to_string(n_steps) + "},\n";
    js += "  \"results\": [\n";
    float spread_all = 0, spread_last_all = 0, spread_fa_all = 0;
    int greedy_differs = 0;
    llama_memory_t mem = llama_get_memory(ctx);
    for (size_t pi = 0; pi < ptoks.size(); pi++) {
        const auto & toks = ptoks[pi];
        const int np = (int) toks.size();
        std::vector<float> batch_rows, seq_rows, row;
        // batch: the whole prompt at once, then greedy steps
        llama_memory_clear(mem, true);
        if (!decode(ctx, toks, 0, true, n_vocab, batch_rows)) { fprintf(stderr, "decode failed\n"); return 1; }
        const float * last = batch_rows.data() + (size_t) (np - 1) * n_vocab;
        std::vector<float> last_copy(last, last + n_vocab);
        std::vector<llama_token> greedy;
        std::vector<std::string> step_tops;
        std::vector<float> cur(last, last + n_vocab);
        std::vector<float> step_rows; // every batch step's logits, for spread_steps
        for (int s = 0; s < n_steps; s++) {
            if (s > 0) {
                if (!decode(ctx, {greedy.back()}, np + s - 1, false, n_vocab, row)) return 1;
                cur = row;
            }
            step_rows.insert(step_rows.end(), cur.begin(), cur.end());
            step_tops.push_back(top_json(cur.data(), n_vocab, top_steps));
            greedy.push_back(argmax(cur.data(), n_vocab));
        }
        // seq: token by token, then greedy steps
        llama_memory_clear(mem, true);
        for (int i = 0; i < np; i++) {
            if (!decode(ctx, {toks[i]}, i, true, n_vocab, row)) return 1;
            seq_rows.insert(seq_rows.end(), row.begin(), row.end());
        }
        std::vector<llama_token> greedy_seq;
        cur.assign(seq_rows.end() - n_vocab, seq_rows.end());
        float spread_steps = 0; // batch vs seq over the greedy steps, while both fed the same ids
        for (int s = 0; s < n_steps; s++) {
            if (s > 0) {
                if (!decode(ctx, {greedy_seq.back()}, np + s - 1, false, n_vocab, row)) return 1;
                cur = row;
            }
            if (std::vector<llama_token>(greedy.begin(), greedy.begin() + s) == greedy_seq)
                for (int v = 0; v < n_vocab; v++)
                    spread_steps = std::max(spread_steps, fabsf(cur[v] - step_rows[(size_t) s * n_vocab + v]));
            greedy_seq.push_back(argmax(cur.data(), n_vocab));
        }
        float spread = 0, spread_last = 0;
        size_t spread_pos = 0;
        bool nan = false;
        for (size_t i = 0; i < batch_rows.size(); i++) {
            float d = fabsf(batch_rows[i] - seq_rows[i]);
            nan |= d != d;
            if (d > spread) spread = d, spread_pos = i / n_vocab;
            if (i >= (size_t) (np - 1) * n_vocab) spread_last = std::max(spread_last, d);
        }
        if (nan) { fprintf(stderr, "prompt %zu: a NaN logit\n", pi); return 1; }
        // fa: the prompt in one batch with flash attention
        std::vector<float> fa_rows;
        llama_memory_clear(llama_get_memory(ctx_fa), true);
        if (!decode(ctx_fa, toks, 0, true, n_vocab, fa_rows)) return 1;
        float spread_fa = 0;
        for (size_t i = 0; i < batch_rows.size(); i++) {
            float d = fabsf(batch_rows[i] - fa_rows[i]);
            if (d != d) { fprintf(stderr, "prompt %zu: a NaN logit (flash attention)\n", pi); return 1; }
            spread_fa = std::max(spread_fa, d);
        }
        spread_fa_all = std::max(spread_fa_all, spread_fa);
        spread_all = std::max(spread_all, spread);
        spread_last_all = std::max(spread_last_all, spread_last);
        greedy_differs += greedy != greedy_seq;
        if (!dump_dir.empty()) {
            std::string path = dump_dir + "/p" + std::to_string(pi) + ".logits_last.f32";
            FILE * f = fopen(path.c_str(), "wb");
            if (!f || fwrite(last_copy.data(), sizeof(float), n_vocab, f) != (size_t) n_vocab) {
                fprintf(stderr, "%s: cannot write\n", path.c_str());
                return 1;
            }
            fclose(f);
        }
        js += "    {\n";
        js += "      \"index\": " + std::to_string(pi) + ",\n";
        js += "      \"prompt_tokens\": " + ids_json(toks) + ",\n";
        js += "      \"top_last\": " + top_json(last_copy.data(), n_vocab, top_k) + ",\n";
        js += "      \"top_last_seq\": " +
              pairs_json(seq_rows.data() + (size_t) (np - 1) * n_vocab, top_ids(last_copy.data(), n_vocab, top_k)) + ",\n";
        js += "      \"greedy\": " + ids_json(greedy) + ",\n";
        js += "      \"greedy_seq\": " + ids_json(greedy_seq) + ",\n";
        js += "      \"step_top\": [";
        for (size_t s = 0; s < step_tops.size(); s++) js += (s ? ",\n        " : "\n        ") + step_tops[s];
        js += "],\n";
        js += "      \"spread_all_positions\": " + fmt_float(spread) + ",\n";
        js += "      \"spread_at\": " + std::to_string(spread_pos) + ",\n";
        js += "      \"spread_fa\": " + fmt_float(spread_fa) + ",\n";
        js += "      \"spread_last\": " + fmt_float(spread_last) + ",\n";
        js += "      \"spread_steps\": " + fmt_float(spread_steps) + "\n";
        js += pi + 1 < ptoks.size() ? "    },\n" : "    }\n";
    }
    js += "  ],\n";
    js += "  \"spread_all_positions\": " + fmt_float(spread_all) + ",\n";
    js += "  \"spread_last\": " + fmt_float(spread_last_all) + ",\n";
    js += "  \"spread_fa\": " + fmt_float(spread_fa_all) + ",\n";
    js += "  \"greedy_batch_vs_seq_differ\": " + std::to_string(greedy_differs) + "\n}\n";
    if (out_path.empty()) fputs(js.c_str(), stdout);
    else {
        FILE * f = fopen(out_path.c_str(), "w");
        if (!f || fputs(js.c_str(), f) < 0 || fclose(f) != 0) { fprintf(stderr, "%s: cannot write\n", out_path.c_str()); return 1; }
    }
    fprintf(stderr, "%s: %zu prompts, batch-vs-seq spread %s (last position %s), greedy differs in %d; "
            "flash attention vs not %s\n", model_path.c_str(), ptoks.size(), fmt_float(spread_all).c_str(),
            fmt_float(spread_last_all).c_str(), greedy_differs, fmt_float(spread_fa_all).c_str());
    llama_free(ctx_fa);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
