// grammar_peer.cpp: the llama.cpp side of the grammar benchmark (bench/grammar.sh).
//
// deja's bench/bench_grammar times its GBNF engine's token masks; this harness times
// the same work in llama.cpp's grammar sampler so the two can be set side by side:
// same GBNF file, same vocabulary (a GGUF loaded with vocab_only), same token-id
// sequences (an ids file: one sequence per line, token ids separated by spaces).
//
//   compile   llama_sampler_init_grammar(vocab, gbnf, "root"): parse + build the
//             initial stacks; wall time, median of --compile-reps runs.
//   apply     llama_sampler_apply over a llama_token_data_array holding the FULL
//             vocabulary (logits all 0; the sampler's cost does not depend on them).
//             The array is copied from a prepared one before each call, outside the
//             timed region, because apply writes -inf into it.
//   accept    llama_sampler_accept(tok), the grammar's state advance, timed alone.
//
// Before accepting, the harness checks that apply left tok's logit finite; if the
// grammar masked it, the sequence is reported (sequence index, position, token,
// piece) and dropped from there on: llama.cpp aborts when asked to accept a token
// its grammar rejects. Samples of the rejected position are not kept. After the last
// token of a sequence one more apply (untimed) checks that EOS is allowed, i.e. that
// the grammar considers the sequence complete; sequences where it is not are counted.
//
// Percentiles are nearest-rank over all timed tokens of all sequences (p99 = the
// sample at rank ceil(0.99 n)). Output: one human line and one JSON line on stdout;
// diagnostics on stderr.
//
// It can also make an ids file (--make-ids): the bodies of <tool_call>…</tool_call>
// in the `response` fields of agent traces (JSON Lines, see ../shared/traces/README.md),
// whitespace-trimmed, tokenized with llama_tokenize (no BOS/EOS, no special-token
// parsing). This is for running the peer before deja's bench dumps its own ids.
//
// Built by bench/grammar.sh against a llama.cpp build in a scratch directory; it is
// the only C++ in the tree and is not part of deja.

#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <glob.h>
#include <sstream>
#include <string>
#include <vector>

static void usage(void) {
    fprintf(stderr,
        "usage:\n"
        "  grammar_peer -m VOCAB.gguf -g GRAMMAR.gbnf -i IDS [options]\n"
        "  grammar_peer -m VOCAB.gguf --make-ids 'TRACES_GLOB' OUT [--max-seq N]\n"
        "options:\n"
        "  --root NAME          start rule (default root)\n"
        "  --max-seq N          use at most N sequences, evenly spaced over the input\n"
        "  --compile-reps N     compile timings to take the median of (default 5)\n"
        "  --label TEXT         free text copied into the JSON line (e.g. the peer's commit)\n"
        "  -v                   print every rejection and incomplete sequence\n");
}

// ---------------------------------------------------------------------------------
// Logging: llama.cpp prints the whole vocabulary load at INFO; keep warnings/errors.

static void log_quiet(enum ggml_log_level level, const char * text, void * user) {
    (void) user;
    static enum ggml_log_level last = GGML_LOG_LEVEL_NONE;
    if (level == GGML_LOG_LEVEL_CONT) level = last; else last = level;
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static double now_us(void) {
    return std::chrono::duration<double, std::micro>(
        std::chrono::steady_clock::now().time_since_epoch()).count();
}

static bool read_file(const std::string & path, std::string & out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    std::ostringstream ss;
    ss << f.rdbuf();
    out = ss.str();
    return true;
}

// ---------------------------------------------------------------------------------
// Trace reading for --make-ids: a minimal scanner for one JSON object per line, enough
// to pull out the top-level "response" string (other values are skipped, not parsed).

static void put_utf8(std::string & out, uint32_t cp) {
    if (cp < 0x80) {
        out += (char) cp;
    } else if (cp < 0x800) {
        out += (char) (0xC0 | (cp >> 6));
        out += (char) (0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += (char) (0xE0 | (cp >> 12));
        out += (char) (0x80 | ((cp >> 6) & 0x3F));
        out += (char) (0x80 | (cp & 0x3F));
    } else {
        out += (char) (0xF0 | (cp >> 18));
        out += (char) (0x80 | ((cp >> 12) & 0x3F));
        out += (char) (0x80 | ((cp >> 6) & 0x3F));
        out += (char) (0x80 | (cp & 0x3F));
    }
}

static bool hex4(const std::string & s, size_t i, uint32_t & v) {
    if (i + 4 > s.size()) return false;
    v = 0;
    for (size_t k = i; k < i + 4; k++) {
        char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t) (c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t) (c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t) (c - 'A' + 10);
        else return false;
    }
    return true;
}

// Parses the JSON string starting at s[i] == '"'; on success sets out (decoded UTF-8)
// and i (just past the closing quote).
static bool json_string(const std::string & s, size_t & i, std::string & out) {
    if (i >= s.size() || s[i] != '"') return false;
    out.clear();
    size_t k = i + 1;
    while (k < s.size()) {
        char c = s[k];
        if (c == '"') { i = k + 1; return true; }
        if (c != '\\') { out += c; k++; continue; }
        if (k + 1 >= s.size()) return false;
        char e = s[k + 1];
        k += 2;
        switch (e) {
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case '/': out += '/'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
                uint32_t cp;
                if (!hex4(s, k, cp)) return false;
                k += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && k + 6 <= s.size() && s[k] == '\\' && s[k + 1] == 'u') {
                    uint32_t lo;
                    if (hex4(s, k + 2, lo) && lo >= 0xDC00 && lo < 0xE000) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        k += 6;
                    }
                }
                put_utf8(out, cp);
                break;
            }
            default: return false;
        }
    }
    return false;
}

static void skip_ws(const std::string & s, size_t & i) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
}

// Skips one JSON value of any kind (nesting and strings respected).
static bool json_skip(const std::string & s, size_t & i) {
    std::string tmp;
    int depth = 0;
    do {
        skip_ws(s, i);
        if (i >= s.size()) return false;
        char c = s[i];
        if (c == '"') { if (!json_string(s, i, tmp)) return false; }
        else if (c == '{' || c == '[') { depth++; i++; }
        else if (c == '}' || c == ']') { depth--; i++; }
        else if (c == ',' || c == ':') { if (depth == 0) return false; i++; }
        else { while (i < s.size() && !strchr(",:]} \t\r\n", s[i])) i++; }
    } while (depth > 0);
    return true;
}

// Sets out to the top-level "response" string of one JSON Lines record; returns false
// when the record has none, it is not a string (null), or the line does not scan.
static bool trace_response(const std::string & line, std::string & out) {
    size_t i = 0;
    skip_ws(line, i);
    if (i >= line.size() || line[i] != '{') return false;
    i++;
    std::string key;
    for (;;) {
        skip_ws(line, i);
        if (i < line.size() && line[i] == '}') return false;
        if (!json_string(line, i, key)) return false;
        skip_ws(line, i);
        if (i >= line.size() || line[i] != ':') return false;
        i++;
        skip_ws(line, i);
        if (key == "response") {
            return i < line.size() && line[i] == '"' && json_string(line, i, out);
        }
        if (!json_skip(line, i)) return false;
        skip_ws(line, i);
        if (i < line.size() && line[i] == ',') { i++; continue; }
        return false;
    }
}

static std::string trim(const std::string & s) {
    size_t a = 0, b = s.size();
    while (a < b && strchr(" \t\r\n", s[a])) a++;
    while (b > a && strchr(" \t\r\n", s[b - 1])) b--;
    return s.substr(a, b - a);
}

// Evenly spaced pick of at most max_n of n items (all when max_n <= 0 or n <= max_n).
static std::vector<size_t> spread(size_t n, long max_n) {
    std::vector<size_t> idx;
    if (max_n <= 0 || n <= (size_t) max_n) {
        for (size_t k = 0; k < n; k++) idx.push_back(k);
    } else {
        for (size_t k = 0; k < (size_t) max_n; k++) idx.push_back(k * n / (size_t) max_n);
    }
    return idx;
}

static int make_ids(const llama_vocab * vocab, const char * pattern, const char * out_path, long max_seq) {
    glob_t g;
    if (glob(pattern, 0, nullptr, &g) != 0 || g.gl_pathc == 0) {
        fprintf(stderr, "--make-ids: no file matches '%s'\n", pattern);
        return 1;
    }
    std::vector<std::string> bodies;
    size_t n_files = 0;
    for (size_t f = 0; f < g.gl_pathc; f++) {
        std::ifstream in(g.gl_pathv[f]);
        if (!in) { fprintf(stderr, "%s: cannot open\n", g.gl_pathv[f]); globfree(&g); return 1; }
        std::string line, resp;
        size_t n_before = bodies.size();
        while (std::getline(in, line)) {
            if (!trace_response(line, resp)) continue;
            size_t pos = 0;
            for (;;) {
                size_t a = resp.find("<tool_call>", pos);
                if (a == std::string::npos) break;
                a += strlen("<tool_call>");
                size_t b = resp.find("</tool_call>", a);
                if (b == std::string::npos) break;
                std::string body = trim(resp.substr(a, b - a));
                if (!body.empty()) bodies.push_back(body);
                pos = b;
            }
        }
        if (bodies.size() > n_before) n_files++;
    }
    globfree(&g);
    if (bodies.empty()) {
        fprintf(stderr, "--make-ids: no <tool_call> bodies in the responses of '%s'\n", pattern);
        return 1;
    }

    FILE * out = fopen(out_path, "w");
    if (!out) { fprintf(stderr, "%s: cannot create\n", out_path); return 1; }
    std::vector<llama_token> toks;
    size_t n_tok = 0;
    std::vector<size_t> pick = spread(bodies.size(), max_seq);
    for (size_t k : pick) {
        const std::string & body = bodies[k];
        toks.resize(body.size() + 16);
        int32_t n = llama_tokenize(vocab, body.data(), (int32_t) body.size(), toks.data(), (int32_t) toks.size(), false, false);
        if (n < 0) {
            toks.resize((size_t) -n);
            n = llama_tokenize(vocab, body.data(), (int32_t) body.size(), toks.data(), (int32_t) toks.size(), false, false);
        }
        if (n < 0) { fprintf(stderr, "--make-ids: tokenization failed for body %zu\n", k); fclose(out); return 1; }
        for (int32_t t = 0; t < n; t++) fprintf(out, t ? " %d" : "%d", toks[t]);
        fputc('\n', out);
        n_tok += (size_t) n;
    }
    if (fclose(out) != 0) { fprintf(stderr, "%s: write failed\n", out_path); return 1; }
    fprintf(stderr, "--make-ids: %zu of %zu tool-call bodies from %zu files, %zu tokens -> %s\n",
            pick.size(), bodies.size(), n_files, n_tok, out_path);
    return 0;
}

// ---------------------------------------------------------------------------------
// Timing.

struct stats {
    size_t n = 0;
    double median = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};

static double rank(const std::vector<double> & sorted, double p) {
    size_t r = (size_t) std::ceil(p * (double) sorted.size());
    if (r < 1) r = 1;
    return sorted[r - 1];
}

static stats summarize(std::vector<double> v) {
    stats s;
    s.n = v.size();
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    s.median = rank(v, 0.5);
    s.p90 = rank(v, 0.9);
    s.p99 = rank(v, 0.99);
    s.max = v.back();
    s.mean = sum / (double) v.size();
    return s;
}

static void json_stats(const char * name, const stats & s) {
    printf("\"%s\":{\"median\":%.2f,\"p90\":%.2f,\"p99\":%.2f,\"max\":%.2f,\"mean\":%.2f}",
           name, s.median, s.p90, s.p99, s.max, s.mean);
}

static const char * base_name(const char * p) {
    const char * s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static std::string piece_of(const llama_vocab * vocab, llama_token tok) {
    char buf[256];
    int32_t n = llama_token_to_piece(vocab, tok, buf, sizeof buf, 0, true);
    return n > 0 ? std::string(buf, (size_t) n) : std::string();
}

// Reads the ids file; a malformed line or an id out of range is an error naming the line.
static bool read_ids(const char * path, int32_t n_vocab, std::vector<std::vector<llama_token>> & seqs) {
    std::ifstream in(path);
    if (!in) { fprintf(stderr, "%s: cannot open\n", path); return false; }
    std::string line;
    size_t ln = 0;
    while (std::getline(in, line)) {
        ln++;
        std::vector<llama_token> seq;
        const char * p = line.c_str();
        for (;;) {
            while (*p == ' ' || *p == '\t' || *p == '\r') p++;
            if (!*p) break;
            char * end;
            long v = strtol(p, &end, 10);
            if (end == p) { fprintf(stderr, "%s:%zu: not a token id at column %zu\n", path, ln, (size_t) (p - line.c_str()) + 1); return false; }
            if (v < 0 || v >= n_vocab) { fprintf(stderr, "%s:%zu: token id %ld outside the vocabulary (%d tokens)\n", path, ln, v, n_vocab); return false; }
            seq.push_back((llama_token) v);
            p = end;
        }
        if (!seq.empty()) seqs.push_back(std::move(seq));
    }
    return true;
}

int main(int argc, char ** argv) {
    const char * model_path = nullptr, * gbnf_path = nullptr, * ids_path = nullptr;
    const char * make_glob = nullptr, * make_out = nullptr, * root = "root", * label = "";
    long max_seq = 0, compile_reps = 5;
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        bool more = i + 1 < argc;
        if ((a == "-m" || a == "--model") && more) model_path = argv[++i];
        else if ((a == "-g" || a == "--grammar") && more) gbnf_path = argv[++i];
        else if ((a == "-i" || a == "--ids") && more) ids_path = argv[++i];
        else if (a == "--make-ids" && i + 2 < argc) { make_glob = argv[++i]; make_out = argv[++i]; }
        else if (a == "--root" && more) root = argv[++i];
        else if (a == "--max-seq" && more) max_seq = atol(argv[++i]);
        else if (a == "--compile-reps" && more) compile_reps = std::max(1L, atol(argv[++i]));
        else if (a == "--label" && more) label = argv[++i];
        else if (a == "-v") verbose = true;
        else { fprintf(stderr, "grammar_peer: unknown or incomplete option '%s'\n", argv[i]); usage(); return 2; }
    }
    if (!model_path || (!make_glob && (!gbnf_path || !ids_path))) { usage(); return 2; }

    llama_log_set(log_quiet, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(model_path, mp);
    if (!model) { fprintf(stderr, "%s: llama.cpp could not load the vocabulary\n", model_path); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);

    if (make_glob) {
        int rc = make_ids(vocab, make_glob, make_out, max_seq);
        llama_model_free(model);
        return rc;
    }

    std::string gbnf;
    if (!read_file(gbnf_path, gbnf)) { fprintf(stderr, "%s: cannot read\n", gbnf_path); return 1; }
    std::vector<std::vector<llama_token>> all;
    if (!read_ids(ids_path, n_vocab, all)) return 1;
    std::vector<std::vector<llama_token>> seqs;
    for (size_t k : spread(all.size(), max_seq)) seqs.push_back(all[k]);
    if (seqs.empty()) { fprintf(stderr, "%s: no sequences\n", ids_path); return 1; }

    // (a) compile
    std::vector<double> compile_ms;
    llama_sampler * smpl = nullptr;
    for (long r = 0; r < compile_reps; r++) {
        double t0 = now_us();
        llama_sampler * s = llama_sampler_init_grammar(vocab, gbnf.c_str(), root);
        double t1 = now_us();
        if (!s) { fprintf(stderr, "%s: llama.cpp rejected the grammar (root '%s')\n", gbnf_path, root); return 1; }
        compile_ms.push_back((t1 - t0) / 1000.0);
        if (smpl) llama_sampler_free(smpl);
        smpl = s;
    }
    stats cs = summarize(compile_ms);

    // (b) per token
    std::vector<llama_token_data> proto((size_t) n_vocab), work((size_t) n_vocab);
    for (int32_t t = 0; t < n_vocab; t++) proto[(size_t) t] = { t, 0.0f, 0.0f };
    const llama_token eos = llama_vocab_eos(vocab);

    std::vector<double> t_apply, t_accept, t_both;
    size_t n_rejected = 0, n_incomplete = 0, n_tok_in = 0;
    for (size_t s = 0; s < seqs.size(); s++) {
        const std::vector<llama_token> & seq = seqs[s];
        n_tok_in += seq.size();
        if (s > 0) llama_sampler_reset(smpl); // fresh grammar state; untimed
        bool ok = true;
        for (size_t pos = 0; pos < seq.size(); pos++) {
            const llama_token tok = seq[pos];
            memcpy(work.data(), proto.data(), proto.size() * sizeof proto[0]);
            llama_token_data_array arr = { work.data(), work.size(), -1, false };

            double t0 = now_us();
            llama_sampler_apply(smpl, &arr);
            double t1 = now_us();

            // The grammar sampler masks in place without reordering; look the token up
            // by id anyway in case a future version does.
            float logit = -INFINITY;
            if (arr.data[tok].id == tok) logit = arr.data[tok].logit;
            else for (size_t k = 0; k < arr.size; k++) if (arr.data[k].id == tok) { logit = arr.data[k].logit; break; }
            if (std::isinf(logit) && logit < 0) {
                n_rejected++;
                if (verbose || n_rejected <= 5) {
                    fprintf(stderr, "sequence %zu (line %zu) position %zu: token %d '%s' masked by the grammar; rest of the sequence dropped\n",
                            s, s + 1, pos, tok, piece_of(vocab, tok).c_str());
                }
                ok = false;
                break;
            }

            double t2 = now_us();
            llama_sampler_accept(smpl, tok);
            double t3 = now_us();
            t_apply.push_back(t1 - t0);
            t_accept.push_back(t3 - t2);
            t_both.push_back((t1 - t0) + (t3 - t2));
        }
        if (ok && eos >= 0) {
            memcpy(work.data(), proto.data(), proto.size() * sizeof proto[0]);
            llama_token_data_array arr = { work.data(), work.size(), -1, false };
            llama_sampler_apply(smpl, &arr);
            if (std::isinf(arr.data[eos].logit)) {
                n_incomplete++;
                if (verbose) fprintf(stderr, "sequence %zu: EOS masked after the last token (grammar not complete)\n", s);
            }
        }
    }
    llama_sampler_free(smpl);

    stats sa = summarize(t_apply), sc = summarize(t_accept), sb = summarize(t_both);
    const char * vname = base_name(model_path), * gname = base_name(gbnf_path);
    printf("peer llama.cpp  vocab %s (%d)  grammar %s  seqs %zu (rejected %zu, incomplete %zu)  tokens %zu/%zu  "
           "compile %.2f ms  apply median %.1f p90 %.1f p99 %.1f max %.1f mean %.1f us  "
           "accept median %.1f p99 %.1f mean %.1f us\n",
           vname, n_vocab, gname, seqs.size(), n_rejected, n_incomplete, sa.n, n_tok_in,
           cs.median, sa.median, sa.p90, sa.p99, sa.max, sa.mean, sc.median, sc.p99, sc.mean);
    printf("{\"impl\":\"llama.cpp\",\"label\":\"%s\",\"vocab\":\"%s\",\"n_vocab\":%d,\"grammar\":\"%s\","
           "\"n_seq\":%zu,\"n_rejected\":%zu,\"n_incomplete\":%zu,\"n_tok\":%zu,\"n_tok_in\":%zu,"
           "\"compile_ms\":{\"median\":%.3f,\"min\":%.3f,\"reps\":%zu},",
           label, vname, n_vocab, gname, seqs.size(), n_rejected, n_incomplete, sa.n, n_tok_in,
           cs.median, *std::min_element(compile_ms.begin(), compile_ms.end()), compile_ms.size());
    json_stats("apply_us", sa); putchar(',');
    json_stats("accept_us", sc); putchar(',');
    json_stats("apply_accept_us", sb);
    printf("}\n");

    llama_model_free(model);
    llama_backend_free();
    return 0;
}
