/*
 * test_grammar_cases.c — strings that each shipped grammar
 * (../shared/golden/grammars, llama.cpp's examples) must and must not match,
 * through grammar_parse + grammar_match.  The cases follow each grammar's
 * own quirks, read off the .gbnf files:
 *   - json: root is an object only; ws is "", one space, or a newline and up
 *     to 20 spaces/tabs; an exponent is [0-9] then [1-9]{0,15} (so 1e10 is
 *     out, 1e15 is in); no raw control characters in strings; no \/ escape.
 *   - json_arr: "[\n" ... "]" with ",\n" between items and nothing after the
 *     last "]"; its exponent is [1-9] [0-9]{0,15} (1e10 in, 1e0 out).
 *   - c: ws is one or more blanks and required where the grammar has it
 *     (after a type, before "=" and before a call statement's "("); none is
 *     allowed between ")" and "{".
 *   - chess: "1. " first, at least two move lines, each ending in "\n".
 *   - arithmetic: no blank may follow an operator.
 * Every case is also checked after a grammar_to_gbnf round trip.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "sample/grammar.h"
#include "test.h"

struct gcase {
    const char *grammar;
    const char *const *yes;
    const char *const *no;
};

static const char *const json_yes[] = {
    "{}",
    "{} ",
    "{\"a\": 1}",
    "{ \"a\" : 1 }",
    "{\"a\": {\"b\": [1, 2.5, -3e5, true, false, null]}}",
    "{\"s\": \"q\\\"uote \\\\ \\n \\u00e9 \\t \\b\\f\\r\"}",
    "{\n  \"a\": [\n    1\n  ]\n}",
    "{\"k\": \"日本語 é\"}",
    "{\"n\": 1.5E+9, \"m\": -0.001, \"z\": 0, \"e\": 1e15, \"f\": 2e-5}",
    "{\"a\": {}, \"b\": [], \"c\": [[], {}]}",
    NULL,
};
static const char *const json_no[] = {
    "",
    "{\"a\": 1,}",
    "{'a': 1}",
    "{\"a\": 1",
    "[1, 2]",
    "{\"a\": 01}",
    "{\"n\": 1e10}",
    "{\"a\": \"x\\qy\"}",
    "{\"a\":  1}",
    "{\"a\": \"line\nbreak\"}",
    "{\"a\": tru}",
    "{\"a\": 1.}",
    "{\"a\": \"\\u12G4\"}",
    "{} {}",
    "{\"s\": \"\\/\"}", /* JSON allows \/; json.gbnf's escapes are only "\\bfnrt and u */
    NULL,
};

static const char *const json_arr_yes[] = {
    "[\n]",
    "[\n1]",
    "[\n{\"a\": 1},\n{\"b\": [true, null]}]",
    "[\n \"x\",\n 2.5e10]",
    "[\n\"s\\u0041\"]",
    "[\n-1,\n2]",
    "[\n[1, 2],\n{}]",
    NULL,
};
static const char *const json_arr_no[] = {
    "[1]",
    "[\n1]\n",
    "[\n1,]",
    "[\n1e0]",
    "[\n-1, 2]",
    "{\"a\": 1}",
    "[\n'a']",
    "[\n  1]",
    NULL,
};

static const char *const c_yes[] = {
    "",
    "int main(){}",
    "int main(){return 0;}",
    "int f(int x){x = x+1;return x;}",
    "float g(){while(a<b){a = a*2;}}",
    "char c(){// hi\n}",
    "int m(){/* a * b */}",
    "int a(){if(x==1){y = 2;}else{y = 3;}}",
    "int b(){for(int i = 0; i<10; i = i+1){}}",
    "int a(){}int b(){}",
    "int f(){g (1, h(2));}",
    "int f(){int y = -( x+1 )/2;}",
    NULL,
};
static const char *const c_no[] = {
    "int main() {}",
    "intmain(){}",
    "int main(){return 0}",
    "void main(){}",
    "int main(){x=1;}",
    "int main(){/* unterminated}",
    "int 1abc(){}",
    "int main(){f(1);}",
    "int main(){}x",
    NULL,
};

static const char *const chess_yes[] = {
    "1. e4 e5\n2. Nf3 Nc6\n",
    "1. d4 d5\n2. c4 dxc4\n3. e3 b5\n",
    "1. e4 e5\n2. Qh5 Nc6\n3. Bc4 Nf6\n4. Qxf7# Ke7\n",
    "1. e4 e5\n2. O-O O-O-O\n",
    "1. e8=Q+ exd1=N#\n2. Nbd7 R1a3\n",
    "1. e4 e5\n10. a3 h6\n",
    "1. Nxe5+ Kd8\n99. Ra1xa8 Qh1h8\n",
    NULL,
};
static const char *const chess_no[] = {
    "1. e4 e5\n",
    "2. e4 e5\n3. d4 d5\n",
    "1. e9 e5\n2. a3 a6\n",
    "1. e4 e5\n0. a3 a6\n",
    "1. e4 e5\n2. Pe4 a6\n",
    "1. e4 e5\n2. a3 a6",
    "1. e4  e5\n2. a3 a6\n",
    "1. e4 e5\n100. a3 a6\n",
    "1. e4 e5\n2. a3\n",
    NULL,
};

static const char *const arithmetic_yes[] = {
    "1+2=3\n",
    "x = 5\n",
    "(a+b)*c = d\n",
    "1=1\n2=2\n",
    "foo_1*(2/x)=y\n",
    "x=\n 7\n",
    "( a-b ) = c\n",
    NULL,
};
static const char *const arithmetic_no[] = {
    "",
    "1+2=3",
    "1 + 2=3\n",
    "A=1\n",
    "1+=3\n",
    "(1+2=3\n",
    "1=2=3\n",
    "_x=1\n",
    NULL,
};

static const char *const list_yes[] = {
    "- a\n",
    "- one\n- two\n",
    "- tab\there\n",
    "- 日本\n",
    "- - nested\n",
    "-  x\n",
    "- \xf0\x9f\x98\x80 emoji \\ \"quoted\"\n",
    NULL,
};
static const char *const list_no[] = {
    "",
    "- a",
    "-a\n",
    "- \n",
    "- a\r\n",
    "* a\n",
    "- a\xe2\x80\xa8" "b\n", /* U+2028 */
    "- \xc2\x85\n",           /* U+0085 */
    "- a\x0b\n",
    "- a\n\n",
    NULL,
};

static const char *const english_yes[] = {
    "hello",
    "Hello world",
    "It's 5 o'clock!",
    "a\tb\nc",
    "x+y=z",
    "[brackets]\\ok",
    "~`^_{|}-",
    NULL,
};
static const char *const english_no[] = {
    "",
    " leading",
    "trailing ",
    "two  spaces",
    "caf\xc3\xa9",
    "a\r\nb",
    "\n",
    NULL,
};

static const char *const japanese_yes[] = {
    "こんにちは",
    "カタカナ",
    "日本語",
    "こんにちは、世界。",
    "東京 大阪",
    "ひらがな\nカタカナ",
    "ー・ヿ〾ゟ鿿",
    NULL,
};
static const char *const japanese_no[] = {
    "",
    "hello",
    "日本語 ",
    "日本  語",
    "\xef\xbd\xb1", /* U+FF71, halfwidth katakana */
    "漢字!",
    "\xe3\x90\x80", /* U+3400, CJK extension A */
    "\xe3\x80\x80", /* U+3000, ideographic space: below 、 */
    NULL,
};

static const struct gcase cases[] = {
    {"json", json_yes, json_no},
    {"json_arr", json_arr_yes, json_arr_no},
    {"c", c_yes, c_no},
    {"chess", chess_yes, chess_no},
    {"arithmetic", arithmetic_yes, arithmetic_no},
    {"list", list_yes, list_no},
    {"english", english_yes, english_no},
    {"japanese", japanese_yes, japanese_no},
};

static void run_cases(const char *name, const struct dj_grammar *g, const struct gcase *c) {
    size_t n_yes = 0, n_no = 0;
    for (const char *const *s = c->yes; *s; s++, n_yes++)
        CHECKF(grammar_match(g, *s, strlen(*s)), "%s must match: \"%s\"", name, *s);
    for (const char *const *s = c->no; *s; s++, n_no++)
        CHECKF(!grammar_match(g, *s, strlen(*s)), "%s must not match: \"%s\"", name, *s);
    CHECK(n_yes >= 6 && n_no >= 6);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const struct gcase *c = &cases[k];
        char rel[64];
        snprintf(rel, sizeof rel, "golden/grammars/%s.gbnf", c->grammar);
        size_t len = 0;
        char *src = test_read_file(test_shared_path(shared, rel), &len);
        CHECKF(src != NULL, "missing %s", rel);
        if (!src) continue;
        struct dj_grammar *g = NULL;
        CHECKF(grammar_parse(src, len, NULL, NULL, &g) == DJ_OK, "%s: %s", rel, dj_last_error());
        if (g) {
            run_cases(c->grammar, g, c);
            char *text = grammar_to_gbnf(g);
            struct dj_grammar *g2 = NULL;
            CHECK(text && grammar_parse(text, strlen(text), NULL, NULL, &g2) == DJ_OK);
            if (g2) run_cases(c->grammar, g2, c);
            grammar_free(g2);
            free(text);
        }
        grammar_free(g);
        free(src);
    }
    TEST_END();
}
