/*
 * test_grammar_parse.c — the GBNF parser (src/sample/grammar_parse.c):
 * every grammar in ../shared/golden/grammars parses; the IR of small
 * grammars, element by element, against llama.cpp's rewrite rules (worked
 * out by hand from handle_repetitions); grammar_to_gbnf -> grammar_parse
 * gives the identical IR (and the same text again) for all of them; errors
 * come with the exact line, column and wording; hostile inputs (NUL bytes,
 * 10000 nested groups, huge counts, invalid UTF-8) fail cleanly.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "gguf/gguf.h"
#include "sample/grammar.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

/* The IR in a compact text form, one rule a line:
 *   c'a' CHAR   n'a' CHAR_NOT   +'a' CHAR_ALT   -'a' CHAR_RNG_UPPER   .  CHAR_ANY
 *   @name RULE_REF   |  ALT   ;  END   t5 TOKEN   !t5 TOKEN_NOT
 * Code points outside printable ASCII as U+XXXX. */
static void dump(const struct dj_grammar *g, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
#define OUT(...) n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, __VA_ARGS__)
    for (size_t r = 0; r < g->n_rules; r++) {
        OUT("%s%s ::=", r == g->root ? "*" : "", g->rule_names[r]);
        for (size_t i = g->rule_start[r]; i < g->n_elems; i++) {
            struct dj_gelem e = g->elems[i];
            const char *pfx = "";
            switch (e.type) {
            case DJ_GE_END: OUT(" ;"); break;
            case DJ_GE_ALT: OUT(" |"); break;
            case DJ_GE_RULE_REF: OUT(" @%s", e.value < g->n_rules ? g->rule_names[e.value] : "?"); break;
            case DJ_GE_CHAR_ANY: OUT(" ."); break;
            case DJ_GE_TOKEN: OUT(" t%u", e.value); break;
            case DJ_GE_TOKEN_NOT: OUT(" !t%u", e.value); break;
            case DJ_GE_CHAR: pfx = "c"; break;
            case DJ_GE_CHAR_NOT: pfx = "n"; break;
            case DJ_GE_CHAR_ALT: pfx = "+"; break;
            case DJ_GE_CHAR_RNG_UPPER: pfx = "-"; break;
            default: OUT(" ?%u", e.type); break;
            }
            if (pfx[0]) {
                if (e.value >= 0x20 && e.value < 0x7F) OUT(" %s'%c'", pfx, (char)e.value);
                else OUT(" %sU+%04X", pfx, e.value);
            }
            if (e.type == DJ_GE_END) break;
        }
        OUT("\n");
    }
#undef OUT
}

/* parse -> print -> parse: identical IR, and printing again gives the same text. */
static void check_round_trip(const char *what, const struct dj_grammar *g, const char *root,
                             const struct dj_vocab *vocab) {
    char *text = grammar_to_gbnf(g);
    CHECK(text != NULL);
    if (!text) return;
    struct dj_grammar *g2 = NULL;
    enum dj_status st = grammar_parse(text, strlen(text), root, vocab, &g2);
    CHECKF(st == DJ_OK, "%s: re-parse failed: %s\n%s", what, dj_last_error(), text);
    if (st == DJ_OK) {
        CHECKF(grammar_equal(g, g2), "%s: IR differs after the round trip\n%s", what, text);
        char *text2 = grammar_to_gbnf(g2);
        CHECKF(text2 && strcmp(text, text2) == 0, "%s: printing is not stable", what);
        free(text2);
    }
    grammar_free(g2);
    free(text);
}

/* Parses src (NUL-terminated) with root "root" and compares the dump. */
static void check_ir(const char *src, const char *expect) {
    struct dj_grammar *g = NULL;
    enum dj_status st = grammar_parse(src, strlen(src), NULL, NULL, &g);
    CHECKF(st == DJ_OK, "%s: %s", src, dj_last_error());
    if (st != DJ_OK) return;
    static char got[1 << 16];
    dump(g, got, sizeof got);
    CHECKF(strcmp(got, expect) == 0, "IR of\n%s\ngot\n%sexpected\n%s", src, got, expect);
    check_round_trip(src, g, NULL, NULL);
    grammar_free(g);
}

/* Parses src[0..n) and expects DJ_ERR_FORMAT with exactly msg. */
static void check_err_n(const char *src, size_t n, const char *root, const struct dj_vocab *vocab, const char *msg) {
    struct dj_grammar *g = (struct dj_grammar *)&g; /* must stay untouched on failure */
    struct dj_grammar *const sentinel = g;
    dj_clear_error();
    enum dj_status st = grammar_parse(src, n, root, vocab, &g);
    CHECKF(st == DJ_ERR_FORMAT, "%.80s: status %d (%s)", src, (int)st, dj_last_error());
    CHECKF(g == sentinel, "%.80s: out-param written on failure", src);
    CHECKF(strcmp(dj_last_error(), msg) == 0, "%.80s:\n  got      %s\n  expected %s", src, dj_last_error(), msg);
    if (st == DJ_OK && g != sentinel) grammar_free(g);
}

static void check_err(const char *src, const char *msg) { check_err_n(src, strlen(src), NULL, NULL, msg); }

static void test_shipped(const char *shared) {
    static const char *names[] = {"json", "json_arr", "c", "chess", "arithmetic", "list", "english", "japanese"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char rel[64];
        snprintf(rel, sizeof rel, "golden/grammars/%s.gbnf", names[k]);
        size_t len = 0;
        char *src = test_read_file(test_shared_path(shared, rel), &len);
        CHECKF(src != NULL, "missing %s", rel);
        if (!src) continue;
        struct dj_grammar *g = NULL;
        enum dj_status st = grammar_parse(src, len, NULL, NULL, &g);
        CHECKF(st == DJ_OK, "%s: %s", rel, dj_last_error());
        if (st == DJ_OK) {
            CHECK(g->n_rules > 0 && strcmp(g->rule_names[g->root], "root") == 0);
            CHECK(!g->has_tokens);
            /* every rule ends with END and every reference is in range */
            bool ok = true;
            for (size_t r = 0; r < g->n_rules; r++) {
                size_t end = r + 1 < g->n_rules ? g->rule_start[r + 1] : g->n_elems;
                ok = ok && end > g->rule_start[r] && g->elems[end - 1].type == DJ_GE_END;
                for (size_t i = g->rule_start[r]; i + 1 < end; i++) {
                    ok = ok && g->elems[i].type != DJ_GE_END;
                    if (g->elems[i].type == DJ_GE_RULE_REF) ok = ok && g->elems[i].value < g->n_rules;
                }
            }
            CHECKF(ok, "%s: malformed IR", rel);
            check_round_trip(rel, g, NULL, NULL);
            /* not NUL-terminated: a copy of exactly len bytes */
            char *copy = malloc(len ? len : 1);
            memcpy(copy, src, len);
            struct dj_grammar *g2 = NULL;
            CHECK(grammar_parse(copy, len, NULL, NULL, &g2) == DJ_OK && grammar_equal(g, g2));
            grammar_free(g2);
            free(copy);
        }
        grammar_free(g);
        free(src);
    }
}

static void test_ir(void) {
    check_ir("root ::= \"a\" [b-d] | x*\nx ::= \"x\"\n",
             "*root ::= c'a' c'b' -'d' | @root-1 ;\n"
             "root-1 ::= @x @root-1 | ;\n"
             "x ::= c'x' ;\n");
    /* the repetition rewrites, as llama.cpp's handle_repetitions */
    check_ir("root ::= \"a\"*", "*root ::= @root-1 ;\nroot-1 ::= c'a' @root-1 | ;\n");
    check_ir("root ::= \"a\"+", "*root ::= c'a' @root-1 ;\nroot-1 ::= c'a' @root-1 | ;\n");
    check_ir("root ::= \"a\"?", "*root ::= @root-1 ;\nroot-1 ::= c'a' | ;\n");
    check_ir("root ::= \"a\"{3}", "*root ::= c'a' c'a' c'a' ;\n");
    check_ir("root ::= \"a\"{0}", "*root ::= ;\n");
    check_ir("root ::= \"a\"{1}", "*root ::= c'a' ;\n");
    check_ir("root ::= \"a\"{2,}", "*root ::= c'a' c'a' @root-1 ;\nroot-1 ::= c'a' @root-1 | ;\n");
    check_ir("root ::= \"a\"{0,}", "*root ::= @root-1 ;\nroot-1 ::= c'a' @root-1 | ;\n");
    check_ir("root ::= \"a\"{2,4}",
             "*root ::= c'a' c'a' @root-2 ;\nroot-1 ::= c'a' | ;\nroot-2 ::= c'a' @root-1 | ;\n");
    check_ir("root ::= \"a\"{0,3}",
             "*root ::= @root-3 ;\nroot-1 ::= c'a' | ;\nroot-2 ::= c'a' @root-1 | ;\nroot-3 ::= c'a' @root-2 | ;\n");
    check_ir("root ::= \"a\"{ 1 , 2 } \"b\"", "*root ::= c'a' @root-1 c'b' ;\nroot-1 ::= c'a' | ;\n");
    /* a whole string literal, a whole class, a group are one item */
    check_ir("root ::= \"ab\"*", "*root ::= @root-1 ;\nroot-1 ::= c'a' c'b' @root-1 | ;\n");
    check_ir("root ::= [a-c_]{2}", "*root ::= c'a' -'c' +'_' c'a' -'c' +'_' ;\n");
    check_ir("root ::= (\"a\" | \"b\")+ \"c\"",
             "*root ::= @root-1 @root-2 c'c' ;\nroot-1 ::= c'a' | c'b' ;\nroot-2 ::= @root-1 @root-2 | ;\n");
    check_ir("root ::= x+*\nx ::= \"x\"",
             "*root ::= @root-2 ;\nroot-1 ::= @x @root-1 | ;\nroot-2 ::= @x @root-1 @root-2 | ;\nx ::= c'x' ;\n");
    /* nested groups are all named after the rule being defined */
    check_ir("root ::= (\"a\" (\"b\" | \"c\")?)",
             "*root ::= @root-1 ;\nroot-1 ::= c'a' @root-3 ;\nroot-2 ::= c'b' | c'c' ;\nroot-3 ::= @root-2 | ;\n");
    /* classes */
    check_ir("root ::= [^a-z0-9_] [-a] [a-] [\\]\\[\\\\] [^\"]",
             "*root ::= n'a' -'z' +'0' -'9' +'_' c'-' +'a' c'a' +'-' c']' +'[' +'\\' n'\"' ;\n");
    check_ir("root ::= [z-a]", "*root ::= c'z' -'a' ;\n"); /* empty range: kept, as llama.cpp */
    check_ir("root ::= . \".\" [.]", "*root ::= . c'.' c'.' ;\n");
    /* escapes */
    check_ir("root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\r\\\\\\\"\\[\\]\\x00\"",
             "*root ::= c'A' cU+00E9 cU+1F600 cU+0009 cU+000A cU+000D c'\\' c'\"' c'[' c']' cU+0000 ;\n");
    check_ir("root ::= \"é日😀\" [ぁ-ゟ]", "*root ::= cU+00E9 cU+65E5 cU+1F600 cU+3041 -U+309F ;\n");
    check_ir("root ::= [\\x00-\\U0010FFFF] \"\\uD800\"", "*root ::= cU+0000 -U+10FFFF cU+D800 ;\n");
    /* empty alternatives, empty rule, empty string */
    check_ir("root ::= | \"a\" |\n", "*root ::= | c'a' | ;\n");
    check_ir("root ::= \"\" x\nx ::=\n", "*root ::= @x ;\nx ::= ;\n");
    /* tokens */
    check_ir("root ::= <[5]> !<[7]> <[0]>*", "*root ::= t5 !t7 @root-1 ;\nroot-1 ::= t0 @root-1 | ;\n");
    /* comments, newlines inside groups, after '|' and '::=', CRLF */
    check_ir("# head\nroot ::= ( # c1\n  \"a\"\n  | \"b\" # c2\n) \"c\" # c3\n\n# tail",
             "*root ::= @root-1 c'c' ;\nroot-1 ::= c'a' | c'b' ;\n");
    check_ir("root ::=\n  \"a\" |\n  \"b\"\r\nx ::= \"x\"\r\n", "*root ::= c'a' | c'b' ;\nx ::= c'x' ;\n");
    /* indices follow definitions, whatever the order of mention */
    check_ir("root ::= c b a\na ::= \"a\"\nb ::= \"b\"\nc ::= \"c\"",
             "*root ::= @c @b @a ;\na ::= c'a' ;\nb ::= c'b' ;\nc ::= c'c' ;\n");
    /* a user rule named like a generated one: the generated one moves aside */
    check_ir("root ::= \"a\"* root-1\nroot-1 ::= \"b\"",
             "*root ::= @root-2 @root-1 ;\nroot-2 ::= c'a' @root-2 | ;\nroot-1 ::= c'b' ;\n");
    /* a redefinition replaces the rule (llama.cpp); the old generated rule stays */
    check_ir("root ::= \"a\"?\nroot ::= \"b\"", "*root ::= c'b' ;\nroot-1 ::= c'a' | ;\n");
    /* names: digits and '-' are word characters */
    check_ir("root ::= 1-x\n1-x ::= \"1\"", "*root ::= @1-x ;\n1-x ::= c'1' ;\n");
    /* right recursion and recursion after a non-nullable prefix are fine */
    check_ir("root ::= \"(\" root \")\" | \"\"", "*root ::= c'(' @root c')' | ;\n");

    /* a custom root, and its index */
    const char *src = "a ::= \"x\" start\nstart ::= \"y\"";
    struct dj_grammar *g = NULL;
    CHECK(grammar_parse(src, strlen(src), "start", NULL, &g) == DJ_OK);
    if (g) {
        CHECK(g->root == 1 && strcmp(g->rule_names[g->root], "start") == 0);
        check_round_trip("custom root", g, "start", NULL);
    }
    grammar_free(g);
    grammar_free(NULL);
}

/* grammar_to_gbnf escapes whatever would read back differently. */
static void test_print(void) {
    const char *src = "root ::= \"q\\\"b\\\\s\\x01\\x7F\\u0085 \\t\\n\\r\\x00\\uDFFF😀\" "
                      "[-^\\]\\[\\\\\"] [\\x5E-] [^^] .";
    struct dj_grammar *g = NULL;
    CHECK(grammar_parse(src, strlen(src), NULL, NULL, &g) == DJ_OK);
    if (!g) return;
    char *text = grammar_to_gbnf(g);
    CHECK(text != NULL);
    if (text) {
        const char *expect = "root ::= \"q\\\"b\\\\s\\x01\\x7F\\u0085 \\t\\n\\r\\x00\\uDFFF😀\" "
                             "[\\x2D\\x5E\\]\\[\\\\\"] [\\x5E\\x2D] [^\\x5E] .\n";
        CHECKF(strcmp(text, expect) == 0, "got %s", text);
    }
    check_round_trip("escapes", g, NULL, NULL);
    free(text);
    grammar_free(g);
}

static void test_errors(void) {
    check_err("root ::= \"abc",
              "grammar: line 1, column 14: expected '\"' to close the string that starts at line 1, column 10");
    check_err("root ::= \"a\"\nx ::= \"abc\ndef",
              "grammar: line 3, column 4: expected '\"' to close the string that starts at line 2, column 7");
    check_err("root = \"a\"", "grammar: line 1, column 6: expected '::=' after the rule name");
    check_err("root \"a\"", "grammar: line 1, column 6: expected '::=' after the rule name");
    check_err("root ::= \"a\"\n| \"b\"", "grammar: line 2, column 1: expected a rule name");
    check_err("root ::= \"\\q\"",
              "grammar: line 1, column 11: expected an escape: \\xHH \\uHHHH \\UHHHHHHHH \\t \\n \\r \\\\ \\\" \\[ or \\]");
    check_err("root ::= [\\-]", /* llama.cpp has no \- */
              "grammar: line 1, column 11: expected an escape: \\xHH \\uHHHH \\UHHHHHHHH \\t \\n \\r \\\\ \\\" \\[ or \\]");
    check_err("root ::= \"\\x4\"", "grammar: line 1, column 14: expected 2 hex digits after \\x");
    check_err("root ::= \"\\u12G4\"", "grammar: line 1, column 15: expected 4 hex digits after \\u");
    check_err("root ::= \"\\", "grammar: line 1, column 11: expected an escape: \\xHH \\uHHHH \\UHHHHHHHH \\t \\n \\r "
                               "\\\\ \\\" \\[ or \\]");
    check_err("root ::= \"a\" foo", "grammar: undefined rule 'foo' (used at line 1, column 14)");
    check_err("root ::= a\na ::= b c\nb ::= \"b\"",
              "grammar: undefined rule 'c' (used at line 2, column 9)");
    /* left recursion: direct, indirect, through a nullable prefix, through
     * a rule that is nullable only by way of another rule */
    check_err("root ::= root \"a\" | \"a\"", "grammar: left recursion: root -> root");
    check_err("root ::= a\na ::= b \"x\" | \"y\"\nb ::= a \"z\"", "grammar: left recursion: a -> b -> a");
    check_err("root ::= e root \"a\" | \"a\"\ne ::= | \"b\"", "grammar: left recursion: root -> root");
    check_err("root ::= n \"x\"\nn ::= m root\nm ::= \"q\"?", "grammar: left recursion: root -> n -> root");
    check_err("root ::= (\"x\" | root \"y\")", "grammar: left recursion: root -> root-1 -> root");
    check_err("root ::= \"a\"* root", "grammar: left recursion: root -> root");
    /* a repeated nullable item is left-recursive in llama.cpp too: S' ::= x* S' | */
    check_err("root ::= x**\nx ::= \"x\"", "grammar: left recursion: root-2 -> root-2");
    check_err("root ::= \"a\"\ndead ::= dead \"b\"", "grammar: left recursion: dead -> dead");
    /* repetition bounds */
    check_err("root ::= \"a\"{3,2}", "grammar: line 1, column 16: expected a maximum count >= the minimum (3)");
    check_err("root ::= \"a\"{2000}", "grammar: line 1, column 14: expected a count up to 1000");
    check_err("root ::= \"a\"{0,1001}", "grammar: line 1, column 16: expected a count up to 1000");
    check_err("root ::= \"a\"{99999999999999999999999}", "grammar: line 1, column 14: expected a count up to 1000");
    check_err("root ::= \"a\"{}", "grammar: line 1, column 14: expected a number after '{'");
    check_err("root ::= \"a\"{2", "grammar: line 1, column 15: expected ',' or '}'");
    check_err("root ::= \"a\"{2,3", "grammar: line 1, column 17: expected '}'");
    check_err("root ::= *", "grammar: line 1, column 10: expected an item before '*'");
    check_err("root ::= \"a\" | +", "grammar: line 1, column 16: expected an item before '+'");
    check_err("root ::= \"\"?", "grammar: line 1, column 12: expected an item before '?'");
    /* parentheses */
    check_err("root ::= (\"a\"",
              "grammar: line 1, column 14: expected ')' to close the group that opens at line 1, column 10");
    check_err("root ::= (\"a\" | (\"b\")\n",
              "grammar: line 2, column 1: expected ')' to close the group that opens at line 1, column 10");
    check_err("root ::= \"a\")", "grammar: line 1, column 13: expected a newline or the end of the input");
    /* classes */
    check_err("root ::= [abc", "grammar: line 1, column 14: expected ']' to close the class that starts at line 1, "
                               "column 10");
    check_err("root ::= [a-", "grammar: line 1, column 13: expected ']' to close the class that starts at line 1, "
                              "column 10");
    check_err("root ::= []", "grammar: line 1, column 11: expected a character or a range before ']'");
    check_err("root ::= [^]", "grammar: line 1, column 12: expected a character or a range before ']'");
    /* code points */
    check_err("root ::= \"\\U00110000\"", "grammar: line 1, column 11: expected a code point up to \\U0010FFFF "
                                          "(found 0x110000)");
    check_err("root ::= [a-\\UFFFFFFFF]", "grammar: line 1, column 13: expected a code point up to \\U0010FFFF "
                                          "(found 0xFFFFFFFF)");
    check_err("root ::= \"\xff\"", "grammar: line 1, column 11: expected valid UTF-8 (found the byte 0xFF)");
    check_err("root ::= \"\xc3\"", "grammar: line 1, column 11: expected valid UTF-8 (truncated sequence)");
    check_err("root ::= \"\xc0\x80\"", "grammar: line 1, column 11: expected valid UTF-8 (found the byte 0xC0)");
    check_err("root ::= \"\xed\xa0\x80\"",
              "grammar: line 1, column 11: expected valid UTF-8 (overlong, surrogate or past U+10FFFF)");
    check_err("root ::= \"\xf4\x90\x80\x80\"",
              "grammar: line 1, column 11: expected valid UTF-8 (overlong, surrogate or past U+10FFFF)");
    /* NUL bytes anywhere */
    check_err_n("root ::= \"a\0b\"", 14, NULL, NULL,
                "grammar: line 1, column 12: expected a character other than NUL (write \\x00 in a string)");
    check_err_n("root ::= \"a\" # \0\n", 17, NULL, NULL,
                "grammar: line 1, column 16: expected a character other than NUL (write \\x00 in a string)");
    check_err_n("\0", 1, NULL, NULL,
                "grammar: line 1, column 1: expected a character other than NUL (write \\x00 in a string)");
    /* empty, missing root, custom root */
    check_err("", "grammar: empty grammar");
    check_err_n(NULL, 0, NULL, NULL, "grammar: empty grammar");
    check_err("  # only a comment\n\r\n\t", "grammar: empty grammar");
    check_err("a ::= \"x\"", "grammar: no 'root' rule");
    check_err_n("root ::= \"x\"", 12, "start", NULL, "grammar: no 'start' rule");
    check_err("root ::= start\n", "grammar: undefined rule 'start' (used at line 1, column 10)");
    /* tokens */
    check_err("root ::= <think>",
              "grammar: line 1, column 10: expected a token id like <[123]> (no vocabulary to look up '<think>')");
    check_err("root ::= <[12", "grammar: line 1, column 14: expected ']' after the token id");
    check_err("root ::= <[x]>", "grammar: line 1, column 12: expected a token id");
    check_err("root ::= <[1]", "grammar: line 1, column 14: expected '>' after ']'");
    check_err("root ::= <[2147483648]>", "grammar: line 1, column 12: expected a token id up to 2147483647");
    check_err("root ::= !\"a\"", "grammar: line 1, column 11: expected '<' after '!' (a token: !<[id]>)");
    check_err("root ::= <abc", "grammar: line 1, column 14: expected '>' to close the token that starts at line 1, "
                               "column 10");
    /* line counting: LF, CRLF and lone CR */
    check_err("root ::= \"a\"\r\n\r\nx ::= y\n", "grammar: undefined rule 'y' (used at line 3, column 7)");
    check_err("root ::= \"a\"\rx ::= ?", "grammar: line 2, column 7: expected an item before '?'");
}

static void test_hostile(void) {
    /* 10000 nested groups: an error at the 257th, not a stack overflow */
    size_t depth = 10000, n = 0;
    char *src = malloc(9 + 2 * depth + 8);
    memcpy(src, "root ::= ", 9);
    n = 9;
    for (size_t i = 0; i < depth; i++) src[n++] = '(';
    src[n++] = '"', src[n++] = 'a', src[n++] = '"';
    for (size_t i = 0; i < depth; i++) src[n++] = ')';
    check_err_n(src, n, NULL, NULL, "grammar: line 1, column 266: expected at most 256 nested groups");
    /* 256 deep is fine */
    n = 9;
    for (size_t i = 0; i < 256; i++) src[n++] = '(';
    src[n++] = '"', src[n++] = 'a', src[n++] = '"';
    for (size_t i = 0; i < 256; i++) src[n++] = ')';
    struct dj_grammar *g = NULL;
    CHECKF(grammar_parse(src, n, NULL, NULL, &g) == DJ_OK, "%s", dj_last_error());
    if (g) {
        CHECK(g->n_rules == 257);
        check_round_trip("256 deep", g, NULL, NULL);
    }
    grammar_free(g);
    free(src);

    /* nested counts stay small (each group is one reference)... */
    const char *nested = "root ::= (((\"a\"{1000}){1000}){1000})";
    g = NULL;
    CHECK(grammar_parse(nested, strlen(nested), NULL, NULL, &g) == DJ_OK);
    grammar_free(g);
    /* ...but a long literal repeated and repeated again hits the size cap */
    static char big[8192];
    n = (size_t)snprintf(big, sizeof big, "root ::= \"");
    for (int i = 0; i < 4000; i++) big[n++] = 'x';
    n += (size_t)snprintf(big + n, sizeof big - n, "\"{1000,1000} \"");
    for (int i = 0; i < 2000; i++) big[n++] = 'y';
    n += (size_t)snprintf(big + n, sizeof big - n, "\"{0,1000}");
    check_err_n(big, n, NULL, NULL,
                "grammar: line 1, column 6026: expected a smaller grammar (repetitions expand to more than 4194304 "
                "elements)");

    /* a long left-recursive chain: found without deep C recursion */
    size_t n_rules = 20000;
    char *chain = malloc(n_rules * 32);
    n = 0;
    n += (size_t)sprintf(chain + n, "root ::= r0\n");
    for (size_t i = 0; i + 1 < n_rules; i++) n += (size_t)sprintf(chain + n, "r%zu ::= r%zu \"x\"\n", i, i + 1);
    n += (size_t)sprintf(chain + n, "r%zu ::= root | \"y\"\n", n_rules - 1);
    g = NULL;
    dj_clear_error();
    CHECK(grammar_parse(chain, n, NULL, NULL, &g) == DJ_ERR_FORMAT);
    CHECKF(strncmp(dj_last_error(), "grammar: left recursion: root -> r0 -> r1 -> ", 45) == 0, "%.100s",
           dj_last_error());
    /* the same chain with the recursion broken parses */
    chain[n - 11] = '"', chain[n - 10] = 'z', chain[n - 9] = '"', chain[n - 8] = ' ';
    CHECKF(grammar_parse(chain, n, NULL, NULL, &g) == DJ_OK, "%s", dj_last_error());
    if (g) CHECK(g->n_rules == n_rules + 1);
    grammar_free(g);
    free(chain);

    /* every prefix of a real grammar: an error or a grammar, never a crash
     * (ASan builds check the reads stay inside [0, n)) */
    const char *json = "root ::= object\nobject ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws "
                       "value)* )? \"}\" ws\nvalue ::= object | string | [0-9]{1,3} | <[3]>\nstring ::= \"\\\"\" "
                       "[^\"\\\\\\x7F\\x00-\\x1F]* \"\\\"\" ws\nws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
    size_t len = strlen(json);
    int n_ok = 0;
    for (size_t k = 0; k <= len; k++) {
        char *cut = malloc(k ? k : 1);
        memcpy(cut, json, k);
        g = NULL;
        enum dj_status st = grammar_parse(cut, k, NULL, NULL, &g);
        CHECK(st == DJ_OK || (st == DJ_ERR_FORMAT && strncmp(dj_last_error(), "grammar: ", 9) == 0));
        if (st == DJ_OK) {
            n_ok++;
            check_round_trip("prefix", g, NULL, NULL);
        }
        grammar_free(g);
        free(cut);
    }
    CHECK(n_ok > 0);
}

/* `<name>` tokens against a real vocabulary (llama's SPM: <unk> <s> </s>). */
static void test_vocab(const char *shared) {
    struct gguf_ctx *ctx = NULL;
    struct dj_vocab *v = NULL;
    if (gguf_open(test_shared_path(shared, "vocab/ggml-vocab-llama-spm.gguf"), &ctx) != DJ_OK) {
        CHECKF(0, "vocab: %s", dj_last_error());
        return;
    }
    CHECK(vocab_load_gguf(ctx, &v) == DJ_OK);
    gguf_close(ctx);
    if (!v) return;
    CHECK(strcmp(vocab_token_text(v, 1), "<s>") == 0 && strcmp(vocab_token_text(v, 2), "</s>") == 0);
    const char *src = "root ::= <s> \"x\" !</s> <[3]>";
    struct dj_grammar *g = NULL;
    CHECKF(grammar_parse(src, strlen(src), NULL, v, &g) == DJ_OK, "%s", dj_last_error());
    if (g) {
        static char got[256];
        dump(g, got, sizeof got);
        CHECKF(strcmp(got, "*root ::= t1 c'x' !t2 t3 ;\n") == 0, "%s", got);
        CHECK(g->has_tokens);
        check_round_trip("tokens", g, NULL, v);
    }
    grammar_free(g);
    check_err_n("root ::= <nope>", 15, NULL, v,
                "grammar: line 1, column 10: expected a token of the vocabulary (none is '<nope>')");
    char msg[160];
    snprintf(msg, sizeof msg, "grammar: line 1, column 12: expected a token id below %zu (the vocabulary's size)",
             vocab_n_tokens(v));
    check_err_n("root ::= <[99999999]>", 21, NULL, v, msg);
    dj_vocab_free(v);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    test_shipped(shared);
    test_ir();
    test_print();
    test_errors();
    test_hostile();
    test_vocab(shared);
    TEST_END();
}
