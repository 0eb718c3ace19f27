// tokenize_peer.cpp: llama.cpp's tokenizer on a list of texts, the reference of deja's
// real-model token goldens (tests/golden/real).  llama.cpp d32676d7 builds no llama-tokenize
// here, so this is the few lines of it the goldens need.
//
// For each text of TEXTS.json (a JSON array of strings), with the model loaded vocab_only:
//
//   tokens       llama_tokenize(add_special = true, parse_special = true): what a prompt gets
//                (BOS where the vocabulary adds one; control tokens written in the text matched)
//   tokens_raw   llama_tokenize(add_special = false, parse_special = false): plain text, every
//                special-token spelling in it tokenized as characters
//   pieces       the concatenation of llama_token_to_piece(special = true) over tokens_raw, as
//                a JSON string (bytes >= 0x80 copied as they are: a text whose pieces do not
//                concatenate to valid UTF-8 gives a file JSON readers refuse)
//
// Output: one JSON document (stdout or -o) with the model's file name, n_vocab and a
// "results" array in the texts' order.  Built like logits_peer (bench/peer/README.md).

#include "llama.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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


static std::string ids_json(const std::vector<llama_token> & v) {
    std::string o = "[";
    for (size_t i = 0; i < v.size(); i++) o += (i ? ", " : "") + std::to_string(v[i]);
    return o + "]";
}

static bool tokenize(const llama_vocab * vocab, const std::string & s, bool add_special, bool parse_special,
                     std::vector<llama_token> & out) {
    out.assign(s.size() + 8, 0);
    int n = llama_tokenize(vocab, s.data(), (int32_t) s.size(), out.data(), (int32_t) out.size(), add_special, parse_special);
    if (n < 0) {
        out.assign((size_t) -n, 0);
        n = llama_tokenize(vocab, s.data(), (int32_t) s.size(), out.data(), (int32_t) out.size(), add_special, parse_special);
    }
    if (n < 0) return false;
    out.resize((size_t) n);
    return true;
}

int main(int argc, char ** argv) {
    std::string model_path, texts_path, out_path, label;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (i + 1 >= argc) { fprintf(stderr, "usage: tokenize_peer -m MODEL.gguf -p TEXTS.json [-o OUT.json] [--label TEXT]\n"); return 2; }
        if (a == "-m") model_path = argv[++i];
        else if (a == "-p") texts_path = argv[++i];
        else if (a == "-o") out_path = argv[++i];
        else if (a == "--label") label = argv[++i];
        else { fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
    }
    std::string tj;
    std::vector<std::string> texts;
    if (model_path.empty() || !read_file(texts_path, tj) || !parse_string_array(tj, texts) || texts.empty()) {
        fprintf(stderr, "usage: tokenize_peer -m MODEL.gguf -p TEXTS.json (a non-empty JSON array of strings)\n");
        return 2;
    }
    llama_log_set(log_quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) { fprintf(stderr, "%s: cannot load\n", model_path.c_str()); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::string js = "{\n";
    js += "  \"model\": \"" + json_escape(model_path.substr(model_path.rfind('/') + 1)) + "\",\n";
    js += "  \"texts\": \"" + json_escape(texts_path.substr(texts_path.rfind('/') + 1)) + "\",\n";
    if (!label.empty()) js += "  \"label\": \"" + json_escape(label) + "\",\n";
    js += "  \"n_vocab\": " + std::to_string(llama_vocab_n_tokens(vocab)) + ",\n";
    js += "  \"results\": [\n";
    for (size_t ti = 0; ti < texts.size(); ti++) {
        std::vector<llama_token> toks, raw;
        if (!tokenize(vocab, texts[ti], true, true, toks) || !tokenize(vocab, texts[ti], false, false, raw)) {
            fprintf(stderr, "text %zu: tokenizing failed\n", ti);
            return 1;
        }
        std::string pieces;
        for (llama_token t : raw) {
            char buf[256];
            int n = llama_token_to_piece(vocab, t, buf, (int32_t) sizeof buf, 0, true);
            if (n < 0) { fprintf(stderr, "token %d: piece longer than %zu bytes\n", t, sizeof buf); return 1; }
            pieces.append(buf, (size_t) n);
        }
        js += "    {\"index\": " + std::to_string(ti) + ", \"tokens\": " + ids_json(toks) + ", \"tokens_raw\": " +
              ids_json(raw) + ", \"pieces\": \"" + json_escape(pieces) + "\"}";
        js += ti + 1 < texts.size() ? ",\n" : "\n";
    }
    js += "  ]\n}\n";
    if (out_path.empty()) fputs(js.c_str(), stdout);
    else {
        FILE * f = fopen(out_path.c_str(), "w");
        if (!f || fputs(js.c_str(), f) < 0 || fclose(f) != 0) { fprintf(stderr, "%s: cannot write\n", out_path.c_str()); return 1; }
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
