/*
 * test_grammar_match.c — the matcher (gmatch_*) on small GBNF grammars, and
 * the token masks (gtok_*) against brute force.
 *
 * Matcher: accept/reject, UTF-8 split across calls and invalid bytes,
 * can_end / can_continue, forced_bytes, next_ranges, stack dedupe and the
 * stack cap on an exponentially ambiguous grammar, a left-recursive IR.
 *
 * Masks (the invariant of the clever feature): for json.gbnf, a schema-like
 * object grammar, arithmetic.gbnf and a grammar with token references, on
 * the deepseek-llm (102k, byte-level BPE) and codelm (32k, SPM)
 * vocabularies, at every state along real strings tokenized by the vocab
 * (and at states inside a split code point), gtok_mask must equal the mask
 * computed token by token on a clone of the matcher — every bit — with the
 * caches cold (fresh gtok), warm (second pass), and filled in another order;
 * gtok_accept must agree with each bit, and gmatch_accept_bytes(piece) with
 * it for text tokens.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "deja.h"
#include "sample/grammar.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

static struct dj_grammar *parse(const char *src, const struct dj_vocab *v) {
    struct dj_grammar *g = NULL;
    enum dj_status st = grammar_parse(src, strlen(src), NULL, v, &g);
    CHECKF(st == DJ_OK, "grammar_parse: %s", dj_last_error());
    return g;
}

static bool feed(struct dj_gmatch *m, const char *s) { return gmatch_accept_bytes(m, s, strlen(s)); }

static void test_accept_reject(void) {
    struct dj_grammar *g = parse("root ::= \"ab\" [c-e]+ | \"x\" y?\ny ::= \"yz\" | \"y\"\n", NULL);
    if (!g) return;
    CHECK(grammar_match(g, "abc", 3));
    CHECK(grammar_match(g, "abcdeedc", 8));
    CHECK(!grammar_match(g, "ab", 2));
    CHECK(!grammar_match(g, "abf", 3));
    CHECK(grammar_match(g, "x", 1));
    CHECK(grammar_match(g, "xy", 2));
    CHECK(grammar_match(g, "xyz", 3));
    CHECK(!grammar_match(g, "xyzz", 4));
    CHECK(!grammar_match(g, "", 0));
    struct dj_gmatch *m = NULL;
    CHECK(gmatch_create(g, &m) == DJ_OK);
    CHECK(gmatch_can_continue(m) && !gmatch_can_end(m));
    CHECK(feed(m, "a"));
    CHECK(!feed(m, "x")); /* rejected: state unchanged */
    CHECK(feed(m, "b"));
    CHECK(!gmatch_can_end(m));
    CHECK(feed(m, "c"));
    CHECK(gmatch_can_end(m) && gmatch_can_continue(m));
    CHECK(gmatch_accept_bytes(m, "", 0));
    gmatch_free(m);
    CHECK(gmatch_create(g, &m) == DJ_OK);
    CHECK(feed(m, "xyz"));
    CHECK(gmatch_can_end(m) && !gmatch_can_continue(m));
    gmatch_free(m);
    grammar_free(g);
}

static void test_utf8(void) {
    struct dj_grammar *g = parse("root ::= \"\xC3\xA9\" [\xCE\xB1-\xCF\x89]+ [^a]\n", NULL); /* é [α-ω]+ [^a] */
    if (!g) return;
    struct dj_gmatch *m = NULL;
    CHECK(gmatch_create(g, &m) == DJ_OK);
    CHECK(gmatch_accept_bytes(m, "\xC3", 1));
    CHECK(!gmatch_can_end(m) && gmatch_can_continue(m));
    CHECK(!gmatch_accept_bytes(m, "\xA8", 1)); /* è is not é */
    CHECK(gmatch_accept_bytes(m, "\xA9\xCE", 2));
    CHECK(!gmatch_accept_bytes(m, "\xB0", 1)); /* U+03B0 is below α */
    CHECK(gmatch_accept_bytes(m, "\xB2", 1));  /* β */
    uint32_t r[8];
    size_t nr = gmatch_next_ranges(m, r, 4);
    CHECK(nr == 2 && r[0] == 0 && r[1] == 'a' - 1 && r[2] == 'b' && r[3] == 0x10FFFF);
    struct dj_gmatch *c = gmatch_clone(m);
    CHECK(c && gmatch_accept_bytes(c, "\xCE", 1));
    nr = gmatch_next_ranges(c, r, 4); /* inside a 2-byte sequence led by CE: U+0380..U+03BF */
    CHECK(nr == 1 && r[0] == 0x380 && r[1] == 0x3BF);
    CHECK(!gmatch_accept_bytes(c, "\xFF", 1));
    CHECK(!gmatch_accept_bytes(c, "b", 1));
    gmatch_free(c);
    CHECK(!gmatch_accept_bytes(m, "\xFF", 1));
    CHECK(!gmatch_accept_bytes(m, "\xC0\x80", 2));     /* overlong NUL */
    CHECK(!gmatch_accept_bytes(m, "\xED\xA0\x80", 3)); /* surrogate */
    CHECK(!gmatch_accept_bytes(m, "\xF4\x90\x80\x80", 4)); /* > U+10FFFF */
    CHECK(!gmatch_accept_bytes(m, "\x80", 1));          /* stray continuation */
    CHECK(gmatch_accept_bytes(m, "\xE6\x97", 2));       /* 日, split */
    CHECK(!gmatch_can_end(m));
    CHECK(gmatch_accept_bytes(m, "\xA5", 1));
    CHECK(gmatch_can_end(m));
    gmatch_free(m);
    CHECK(grammar_match(g, "\xC3\xA9\xCE\xB1z", 5));
    CHECK(!grammar_match(g, "\xC3\xA9\xCE\xB1" "a", 5));
    grammar_free(g);
}

static void test_forced(void) {
    struct dj_grammar *g =
        parse("root ::= \"{\" \"\\\"name\\\": \\\"\" [a-z]+ \"\\\", \\\"n\\\": \" (\"1\" | \"2\") \"}\"\n", NULL);
    if (!g) return;
    struct dj_gmatch *m = NULL;
    CHECK(gmatch_create(g, &m) == DJ_OK);
    char buf[64];
    size_t n = gmatch_forced_bytes(m, buf, sizeof buf);
    CHECK(n == 10 && !memcmp(buf, "{\"name\": \"", 10));
    CHECK(gmatch_forced_bytes(m, buf, 3) == 3 && !memcmp(buf, "{\"n", 3));
    CHECK(feed(m, "{"));
    n = gmatch_forced_bytes(m, buf, sizeof buf);
    CHECK(n == 9 && !memcmp(buf, "\"name\": \"", 9));
    CHECK(feed(m, "\"name\": \"ab"));
    CHECK(gmatch_forced_bytes(m, buf, sizeof buf) == 0);
    CHECK(feed(m, "\""));
    n = gmatch_forced_bytes(m, buf, sizeof buf);
    CHECK(n == 7 && !memcmp(buf, ", \"n\": ", 7));
    CHECK(feed(m, ", \"n\": 2"));
    n = gmatch_forced_bytes(m, buf, sizeof buf);
    CHECK(n == 1 && buf[0] == '}');
    CHECK(feed(m, "}"));
    CHECK(gmatch_forced_bytes(m, buf, sizeof buf) == 0); /* may end */
    gmatch_free(m);
    grammar_free(g);

    /* a forced multi-byte character, also from the middle of it */
    g = parse("root ::= \"\xE6\x97\xA5\xE6\x9C\xAC\" [0-9]\n", NULL);
    if (!g) return;
    CHECK(gmatch_create(g, &m) == DJ_OK);
    CHECK(gmatch_accept_bytes(m, "\xE6", 1));
    n = gmatch_forced_bytes(m, buf, sizeof buf);
    CHECK(n == 5 && !memcmp(buf, "\x97\xA5\xE6\x9C\xAC", 5));
    gmatch_free(m);
    grammar_free(g);
}

static void test_ranges(void) {
    struct dj_grammar *g = parse("root ::= [a-c] | [b-f] \"x\" | \"z\" | [0-9] | \"\\t\"\n", NULL);
    if (!g) return;
    struct dj_gmatch *m = NULL;
    CHECK(gmatch_create(g, &m) == DJ_OK);
    uint32_t r[16];
    size_t n = gmatch_next_ranges(m, r, 8);
    CHECK(n == 4);
    CHECK(r[0] == '\t' && r[1] == '\t' && r[2] == '0' && r[3] == '9' && r[4] == 'a' && r[5] == 'f' && r[6] == 'z' &&
          r[7] == 'z');
    CHECK(gmatch_next_ranges(m, r, 1) == 4 && r[0] == '\t');
    CHECK(feed(m, "e"));
    n = gmatch_next_ranges(m, r, 8);
    CHECK(n == 1 && r[0] == 'x' && r[1] == 'x');
    CHECK(feed(m, "x"));
    CHECK(gmatch_next_ranges(m, r, 8) == 0 && gmatch_can_end(m));
    gmatch_free(m);
    grammar_free(g);
}

static void test_dedupe_and_caps(void) {
    /* x ::= "a" | "a" derives every string two ways per character; without
     * dedupe the stacks would double with each byte */
    struct dj_grammar *g = parse("root ::= x*\nx ::= \"a\" | \"a\" | y\ny ::= \"a\"\n", NULL);
    if (!g) return;
    struct dj_gmatch *m = NULL;
    CHECK(gmatch_create(g, &m) == DJ_OK);
    for (int i = 0; i < 200; i++) CHECK(feed(m, "a"));
    CHECK(gmatch_can_end(m));
    gmatch_free(m);
    grammar_free(g);

    /* s ::= "a" s "b" | "a" s "c" | "": after n a's the stacks are every
     * sequence of n "b"/"c" return points, each under 3 tops: 3 * 2^n
     * distinct.  The cap (4096) rejects the 11th "a" cleanly, leaving the
     * state as it was. */
    g = parse("root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" |\n", NULL);
    if (!g) return;
    CHECK(gmatch_create(g, &m) == DJ_OK);
    CHECK(feed(m, "aaaaaaaaaa")); /* 10: 3072 stacks */
    CHECK(!feed(m, "a"));
    CHECK(feed(m, "bcbcbcbcbc"));
    CHECK(gmatch_can_end(m));
    gmatch_free(m);
    CHECK(!grammar_match(g, "aaaaaaaaaaaaabbbbbbbbbbbbb", 26));
    CHECK(grammar_match(g, "aaabcb", 6));
    grammar_free(g);

    /* a hand-built left-recursive IR (the parser refuses to make one):
     * a ::= a "x" | "y" */
    struct dj_gelem el[] = {
        {DJ_GE_RULE_REF, 0}, {DJ_GE_CHAR, 'x'}, {DJ_GE_ALT, 0}, {DJ_GE_CHAR, 'y'}, {DJ_GE_END, 0},
    };
    size_t starts[] = {0};
    char *names[] = {"root"};
    struct dj_grammar lr = {el, 5, starts, names, 1, 0, false};
    m = NULL;
    CHECK(gmatch_create(&lr, &m) == DJ_ERR_INVALID && m == NULL);
    /* a rule running off the end, a bad rule ref */
    struct dj_gelem bad[] = {{DJ_GE_CHAR, 'x'}, {DJ_GE_RULE_REF, 7}};
    struct dj_grammar b1 = {bad, 1, starts, names, 1, 0, false};
    CHECK(gmatch_create(&b1, &m) == DJ_ERR_INVALID);
    struct dj_grammar b2 = {bad + 1, 1, starts, names, 1, 0, false};
    CHECK(gmatch_create(&b2, &m) == DJ_ERR_INVALID);
}

/* ---- masks against brute force --------------------------------------------------- */

struct vocab_case {
    const char *name;
    struct dj_vocab *v;
    struct dj_gvocab *gv;
    dj_token t_a, t_b; /* two text tokens for the token-ref grammar */
};

static size_t brute_mask(struct dj_gtok *t, const struct vocab_case *vc, const struct dj_gmatch *m, uint64_t *mask,
                         bool has_tokens) {
    size_t nv = vocab_n_tokens(vc->v), count = 0;
    memset(mask, 0, (nv + 63) / 64 * sizeof *mask);
    char piece[1024];
    for (size_t tok = 0; tok < nv; tok++) {
        bool ok;
        if (vocab_is_eog(vc->v, (dj_token)tok)) {
            ok = gmatch_can_end(m);
        } else {
            size_t len = 0;
            if (vocab_token_type(vc->v, (dj_token)tok) != DJ_TOKEN_CONTROL)
                len = vocab_token_to_piece(vc->v, (dj_token)tok, false, piece, sizeof piece);
            struct dj_gmatch *c = gmatch_clone(m);
            if (has_tokens) {
                /* token elements take ids, not bytes: the matcher's gtok_accept decides */
                ok = gtok_accept(t, c, (dj_token)tok);
            } else {
                ok = len > 0 && len <= sizeof piece && gmatch_accept_bytes(c, piece, len);
            }
            gmatch_free(c);
        }
        if (ok) {
            mask[tok / 64] |= 1ull << (tok % 64);
            count++;
        }
    }
    return count;
}

/* The states along a string: after each of its tokens, and after its first
 * byte alone (inside a code point when the string starts with one). */
struct states {
    struct dj_gmatch **m;
    size_t n, cap;
};

static void states_push(struct states *s, struct dj_gmatch *m) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->m = realloc(s->m, s->cap * sizeof *s->m);
    }
    s->m[s->n++] = m;
}

static void collect_states(struct dj_gtok *t, const struct vocab_case *vc, const struct dj_grammar *g,
                           const char *text, struct states *out, size_t max_states, const char *gname) {
    struct dj_gmatch *m = NULL;
    if (gmatch_create(g, &m) != DJ_OK) return;
    states_push(out, gmatch_clone(m));
    dj_token *ids = NULL;
    size_t n = 0;
    CHECK(vocab_tokenize(vc->v, text, strlen(text), false, false, &ids, &n) == DJ_OK);
    for (size_t i = 0; i < n && out->n < max_states; i++) {
        if (!gtok_accept(t, m, ids[i])) {
            CHECKF(0, "%s/%s: token %zu (%d) of \"%s\" rejected", gname, vc->name, i, ids[i], text);
            break;
        }
        states_push(out, gmatch_clone(m));
    }
    free(ids);
    gmatch_free(m);
    /* inside a code point: every multi-byte character's first byte(s) */
    size_t len = strlen(text);
    size_t found = 0;
    for (size_t i = 0; i < len && found < 2 && out->n < max_states; i++) {
        unsigned char b = (unsigned char)text[i];
        if (b < 0xC0) continue;
        if (gmatch_create(g, &m) != DJ_OK) return;
        if (gmatch_accept_bytes(m, text, i + 1)) {
            states_push(out, gmatch_clone(m));
            found++;
        }
        gmatch_free(m);
    }
}

static int mask_checks;

static void check_masks(const struct vocab_case *vc, const struct dj_grammar *g, const char *gname,
                        const char *const *texts, size_t max_states) {
    size_t nv = vocab_n_tokens(vc->v), nw = (nv + 63) / 64;
    struct dj_gtok *t1 = NULL, *t2 = NULL;
    CHECK(gtok_create(g, vc->gv, &t1) == DJ_OK);
    CHECK(gtok_create(g, vc->gv, &t2) == DJ_OK);
    if (!t1 || !t2) return;
    struct states st = {0};
    for (size_t i = 0; texts[i]; i++) collect_states(t1, vc, g, texts[i], &st, max_states, gname);
    uint64_t *want = malloc(nw * 8), *got = malloc(nw * 8);
    size_t bad = 0;
    for (size_t i = 0; i < st.n; i++) {
        size_t nwant = brute_mask(t1, vc, st.m[i], want, g->has_tokens);
        /* cold (t1 builds contexts as it goes), warm (same gtok, LRU hit) */
        for (int pass = 0; pass < 2; pass++) {
            memset(got, 0xAA, nw * 8);
            size_t ngot = gtok_mask(t1, st.m[i], got);
            bool same = ngot == nwant && !memcmp(got, want, nw * 8);
            if (!same && bad++ < 5) {
                for (size_t tok = 0; tok < nv; tok++) {
                    bool a = (want[tok / 64] >> (tok % 64)) & 1, b = (got[tok / 64] >> (tok % 64)) & 1;
                    if (a != b) {
                        char p[256];
                        size_t l = vocab_token_to_piece(vc->v, (dj_token)tok, false, p, sizeof p - 1);
                        p[l < sizeof p - 1 ? l : sizeof p - 1] = 0;
                        fprintf(stderr, "  %s/%s state %zu pass %d: token %zu '%s' brute %d mask %d\n", gname, vc->name,
                                i, pass, tok, p, a, b);
                        break;
                    }
                }
            }
            CHECKF(same, "%s/%s: state %zu pass %d: mask has %zu tokens, brute force %zu", gname, vc->name, i, pass,
                   ngot, nwant);
            mask_checks++;
        }
    }
    /* gtok_accept agrees with the mask bit (all tokens of the first states,
     * every 97th token elsewhere) */
    for (size_t i = 0; i < st.n; i++) {
        gtok_mask(t1, st.m[i], got);
        for (size_t tok = 0; tok < nv; tok += i < 3 ? 1 : 97) {
            struct dj_gmatch *c = gmatch_clone(st.m[i]);
            bool bit = (got[tok / 64] >> (tok % 64)) & 1;
            bool acc = gtok_accept(t1, c, (dj_token)tok);
            if (bit != acc) CHECKF(0, "%s/%s: state %zu token %zu: mask %d, gtok_accept %d", gname, vc->name, i, tok, bit, acc);
            gmatch_free(c);
        }
    }
    /* another order: t2 sees the states last to first */
    for (size_t i = st.n; i-- > 0;) {
        size_t nwant = brute_mask(t2, vc, st.m[i], want, g->has_tokens);
        size_t ngot = gtok_mask(t2, st.m[i], got);
        CHECKF(ngot == nwant && !memcmp(got, want, nw * 8), "%s/%s: reverse order, state %zu", gname, vc->name, i);
        mask_checks++;
    }
    struct dj_gtok_stats s1;
    gtok_get_stats(t1, &s1);
    CHECK(s1.n_mask_cached >= st.n); /* every second pass */
    printf("  %-10s %-12s %3zu states, %zu masks, %zu cached, %zu context checks\n", gname, vc->name, st.n,
           (size_t)s1.n_mask, (size_t)s1.n_mask_cached, (size_t)s1.n_checked);
    for (size_t i = 0; i < st.n; i++) gmatch_free(st.m[i]);
    free(st.m);
    free(want);
    free(got);
    gtok_free(t1);
    gtok_free(t2);
}

static const char *const json_texts[] = {
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3, \"units\": [\"c\", \"f\"]}}",
    "{\"a\": [1, -2.5e+7, true, false, null, {\"b\": {}}], \"s\": \"h\\u00e9llo \\\"w\\\" \\n \xE6\x97\xA5\xE6\x9C\xAC\"}",
    "{\n  \"k\": \"caf\xC3\xA9 \xF0\x9F\x98\x80\",\n  \"n\": 0.001\n}",
    NULL,
};

static const char *const schema_gbnf =
    "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws name ws \",\" ws \"\\\"arguments\\\"\" ws \":\" ws args ws \"}\"\n"
    "name ::= \"\\\"read_file\\\"\" | \"\\\"write_file\\\"\" | \"\\\"run\\\"\"\n"
    "args ::= \"{\" ws \"\\\"path\\\"\" ws \":\" ws str ( ws \",\" ws \"\\\"mode\\\"\" ws \":\" ws mode )? ws \"}\"\n"
    "mode ::= \"\\\"r\\\"\" | \"\\\"w\\\"\" | \"\\\"rw\\\"\"\n"
    "str ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt] )* \"\\\"\"\n"
    "ws ::= [ \\t\\n]*\n";

static const char *const schema_texts[] = {
    "{\"name\": \"read_file\", \"arguments\": {\"path\": \"src/main.c\"}}",
    "{ \"name\" : \"write_file\" , \"arguments\" : { \"path\" : \"a\\\"b\\\\c\" , \"mode\" : \"rw\" } }",
    "{\"name\":\"run\",\"arguments\":{\"path\":\"\xE2\x82\xAC/x y\",\"mode\":\"r\"}}",
    NULL,
};

static const char *const arith_texts[] = {
    "1+2*(y3 -4) = x\n",
    "( a )/22 = total_1\nb=c\n",
    NULL,
};

static void test_masks(const char *shared) {
    struct vocab_case vcs[2] = {{"deepseek-llm", NULL, NULL, 0, 0}, {"codelm", NULL, NULL, 0, 0}};
    const char *paths[2] = {"vocab/ggml-vocab-deepseek-llm.gguf", "models/codelm-15m-f16.gguf"};
    char *json = test_read_file(test_shared_path(shared, "golden/grammars/json.gbnf"), NULL);
    char *arith = test_read_file(test_shared_path(shared, "golden/grammars/arithmetic.gbnf"), NULL);
    CHECK(json && arith);
    for (int k = 0; k < 2 && json && arith; k++) {
        struct vocab_case *vc = &vcs[k];
        enum dj_status st = dj_vocab_load_file(test_shared_path(shared, paths[k]), &vc->v);
        CHECKF(st == DJ_OK, "%s: %s", paths[k], dj_last_error());
        if (st != DJ_OK) continue;
        CHECK(gvocab_create(vc->v, &vc->gv) == DJ_OK);
        if (!vc->gv) continue;
        CHECK(gvocab_n_tokens(vc->gv) == vocab_n_tokens(vc->v));
#ifdef DJ_SANITIZE_BUILD
        size_t cap = 12; /* brute force is ~100k matcher clones a state */
#else
        size_t cap = k == 0 ? 30 : 50;
#endif
        struct dj_grammar *g = parse(json, NULL);
        if (g) check_masks(vc, g, "json", json_texts, cap);
        grammar_free(g);
        g = parse(schema_gbnf, NULL);
        if (g) check_masks(vc, g, "schema", schema_texts, cap);
        grammar_free(g);
        g = parse(arith, NULL);
        if (g) check_masks(vc, g, "arithmetic", arith_texts, cap);
        grammar_free(g);

        /* token references: two text tokens by id, "any token but" one of
         * them, and the end-of-generation rule around them */
        dj_token *ids = NULL;
        size_t n = 0;
        CHECK(vocab_tokenize(vc->v, "hello world", 11, false, false, &ids, &n) == DJ_OK && n >= 2);
        if (n >= 2) {
            char src[512];
            snprintf(src, sizeof src,
                     "root ::= \"<\" <[%d]> \">\" body | \"[\" !<[%d]> !<[%d]> \"]\" | <[%d]>\nbody ::= [a-z ]* <[%d]>?\n",
                     ids[0], ids[1], ids[0], ids[1], ids[1]);
            g = parse(src, vc->v);
            if (g) {
                CHECK(g->has_tokens);
                char t1[128], t2[128], text[512];
                size_t l1 = vocab_token_to_piece(vc->v, ids[0], false, t1, sizeof t1 - 1);
                size_t l2 = vocab_token_to_piece(vc->v, ids[1], false, t2, sizeof t2 - 1);
                t1[l1] = t2[l2] = 0;
                /* the texts go through vocab_tokenize: "<" + piece(ids[0]) + ">" ... only
                 * reaches the token states if tokenized the same way; the start state and
                 * the byte states are checked in any case */
                snprintf(text, sizeof text, "<%s>abc", t1);
                const char *tt[] = {text, "[ab]", NULL};
                check_masks(vc, g, "tokens", tt, cap);
                /* explicit token paths */
                struct dj_gmatch *m = NULL;
                struct dj_gtok *t = NULL;
                CHECK(gmatch_create(g, &m) == DJ_OK && gtok_create(g, vc->gv, &t) == DJ_OK);
                if (m && t) {
                    size_t nw = (vocab_n_tokens(vc->v) + 63) / 64;
                    uint64_t *mask = calloc(nw, 8);
                    gtok_mask(t, m, mask);
                    CHECK((mask[ids[1] / 64] >> (ids[1] % 64)) & 1);
                    CHECK(!((mask[ids[0] / 64] >> (ids[0] % 64)) & 1) || t1[0] == '<' || t1[0] == '[');
                    CHECK(feed(m, "<"));
                    gtok_mask(t, m, mask);
                    CHECK((mask[ids[0] / 64] >> (ids[0] % 64)) & 1);
                    CHECK(gtok_accept(t, m, ids[0]));
                    CHECK(!gmatch_can_end(m) && feed(m, ">"));
                    CHECK(gmatch_can_end(m));
                    CHECK(gtok_accept(t, m, ids[1]));
                    /* " world"-like tokens match both <[id]> (ending the grammar) and [a-z ]* */
                    CHECK(gmatch_can_end(m));
                    gtok_mask(t, m, mask);
                    dj_token eos = vocab_eos(vc->v);
                    CHECK(eos < 0 || ((mask[eos / 64] >> (eos % 64)) & 1));
                    free(mask);
                }
                gtok_free(t);
                gmatch_free(m);
            }
            grammar_free(g);
        }
        free(ids);
    }
    for (int k = 0; k < 2; k++) {
        gvocab_free(vcs[k].gv);
        dj_vocab_free(vcs[k].v);
    }
    free(json);
    free(arith);
    printf("  %d masks compared with brute force\n", mask_checks);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    test_accept_reject();
    test_utf8();
    test_forced();
    test_ranges();
    test_dedupe_and_caps();
    test_masks(shared);
    TEST_END();
}
