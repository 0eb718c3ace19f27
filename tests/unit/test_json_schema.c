/*
 * test_json_schema.c — JSON Schema to GBNF (src/sample/json_schema.h) and
 * tool-call grammars (src/sample/toolcall.h), checked against things that
 * do not share their code:
 *
 *   (a) every tool schema in ../shared/traces (the <tools> block of each
 *       trace's first prompt) converts, in the three whitespace modes; the
 *       tools arrays convert to tool-call grammars in every mode and format;
 *       every recorded reply with a <tool_call> matches the AUTO hermes
 *       grammar, as written or (the only allowed difference, the converter's
 *       documented property order) after its argument keys are put in the
 *       schema's order.
 *   (b) sentences generated at random from the parsed grammar's IR (not
 *       from the converter) parse as JSON (jansson) and are valid under the
 *       schema according to the small validator below, written from the JSON
 *       Schema specification; each is also accepted by grammar_match (the
 *       generator and the matcher agree).
 *   (c) hand-written valid instances match, and invalid ones (missing
 *       required, extra property, wrong enum / type, out of range, too few
 *       items, pattern mismatch, bad date, ...) do not; among them strings
 *       under several constraints at once (pattern with minLength/maxLength,
 *       allOf patterns, pattern with format: the automaton path), the
 *       formats uri, uri-reference, hostname and ipv6 against validators
 *       written here from the RFCs (not from the converter's regexes), and
 *       schemas of the shapes today's coding agents send (Claude Code,
 *       Codex, qwen-code, opencode tools, written by hand).
 *   (d) unsupported keywords and bad input give the exact message with the
 *       JSON pointer.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <ctype.h>
#include <math.h>
#include <pcre2.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <time.h>

#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "sample/toolcall.h"
#include "test.h"
#include "tokenizer/unicode.h"

/* ---- an independent validator (the supported subset, JSON Schema 2020-12
 * meaning, draft-4 boolean exclusive bounds and items arrays too) ---- */

static size_t n_cp(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static bool digits(const char *s, int n) {
    for (int i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}
static int num(const char *s, int n) {
    int v = 0;
    for (int i = 0; i < n; i++) v = v * 10 + (s[i] - '0');
    return v;
}

static bool is_date(const char *s, size_t n) {
    if (n != 10 || !digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) || s[7] != '-' || !digits(s + 8, 2)) return false;
    int y = num(s, 4), m = num(s + 5, 2), d = num(s + 8, 2);
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m < 1 || m > 12 || d < 1) return false;
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= mdays[m - 1] + (m == 2 && leap);
}

static bool is_time(const char *s, size_t n) {
    if (n < 9 || !digits(s, 2) || s[2] != ':' || !digits(s + 3, 2) || s[5] != ':' || !digits(s + 6, 2)) return false;
    if (num(s, 2) > 23 || num(s + 3, 2) > 59 || num(s + 6, 2) > 60) return false;
    size_t i = 8;
    if (i < n && s[i] == '.') {
        size_t j = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == j) return false;
    }
    if (i < n && (s[i] == 'Z' || s[i] == 'z')) return i + 1 == n;
    if (i + 6 != n || (s[i] != '+' && s[i] != '-') || !digits(s + i + 1, 2) || s[i + 3] != ':' || !digits(s + i + 4, 2))
        return false;
    return num(s + i + 1, 2) <= 23 && num(s + i + 4, 2) <= 59;
}

static bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static bool is_uuid(const char *s, size_t n) {
    if (n != 36) return false;
    for (size_t i = 0; i < n; i++)
        if ((i == 8 || i == 13 || i == 18 || i == 23) ? s[i] != '-' : !is_hex(s[i])) return false;
    return true;
}

static bool is_ipv4(const char *s, size_t n) {
    size_t i = 0;
    for (int part = 0; part < 4; part++) {
        if (part) {
            if (i >= n || s[i] != '.') return false;
            i++;
        }
        size_t j = i;
        while (i < n && s[i] >= '0' && s[i] <= '9' && i - j < 4) i++;
        if (i == j || i - j > 3 || (i - j > 1 && s[j] == '0') || num(s + j, (int)(i - j)) > 255) return false;
    }
    return i == n;
}

static bool is_email(const char *s, size_t n) {
    const char *at = memchr(s, '@', n);
    if (!at) return false;
    size_t nl = (size_t)(at - s);
    if (!nl || s[0] == '.' || s[nl - 1] == '.') return false;
    for (size_t i = 0; i < nl; i++) {
        char c = s[i];
        if (c == '.' ? s[i + 1] == '.' : !(isalnum((unsigned char)c) || strchr("!#$%&'*+/=?^_`{|}~-", c))) return false;
    }
    const char *d = at + 1;
    size_t nd = n - nl - 1, label = 0;
    if (!nd) return false;
    for (size_t i = 0; i <= nd; i++) {
        if (i == nd || d[i] == '.') {
            if (!label || d[i - 1] == '-' || d[i - label] == '-') return false;
            label = 0;
        } else if (isalnum((unsigned char)d[i]) || d[i] == '-') {
            label++;
        } else {
            return false;
        }
    }
    return true;
}

/* RFC 1123 host name: letter-digit-hyphen labels of 1-63, not starting or
 * ending with a hyphen, 253 characters at most.  (The converter does not
 * check the 253: a documented gap; random sentences never get near it.) */
static bool is_hostname(const char *s, size_t n) {
    if (!n || n > 253) return false;
    size_t label = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '.') {
            if (!label || label > 63 || s[i - 1] == '-' || s[i - label] == '-') return false;
            label = 0;
        } else if (isalnum((unsigned char)s[i]) || s[i] == '-') {
            label++;
        } else {
            return false;
        }
    }
    return true;
}

/* RFC 4291 text form as the C library reads it (no zone, no brackets). */
static bool is_ipv6(const char *s, size_t n) {
    char buf[64];
    struct in6_addr a;
    if (n >= sizeof buf || memchr(s, 0, n)) return false;
    memcpy(buf, s, n), buf[n] = 0;
    return inet_pton(AF_INET6, buf, &a) == 1;
}

/* ---- RFC 3986, section 3 / appendix A, by hand ---- */

static bool uri_unreserved(char c) { return isalnum((unsigned char)c) || (c && strchr("-._~", c)); }
static bool uri_subdelim(char c) { return c && strchr("!$&'()*+,;=", c); }

/* One pct-encoded or unreserved / sub-delims / extra character at s[*i]. */
static bool uri_char(const char *s, size_t n, size_t *i, const char *extra) {
    char c = s[*i];
    if (c == '%') {
        if (*i + 2 >= n || !is_hex(s[*i + 1]) || !is_hex(s[*i + 2])) return false;
        *i += 3;
        return true;
    }
    if (!uri_unreserved(c) && !uri_subdelim(c) && !(c && strchr(extra, c))) return false;
    (*i)++;
    return true;
}

/* authority = [ userinfo "@" ] host [ ":" port ] */
static bool uri_authority(const char *s, size_t n) {
    size_t i = 0;
    const char *at = memchr(s, '@', n);
    if (at) {
        size_t end = (size_t)(at - s);
        while (i < end)
            if (!uri_char(s, end, &i, ":")) return false;
        i = end + 1;
    }
    if (i < n && s[i] == '[') { /* IP-literal */
        const char *rb = memchr(s + i, ']', n - i);
        if (!rb) return false;
        size_t a = i + 1, b = (size_t)(rb - s);
        if (a < b && (s[a] == 'v' || s[a] == 'V')) { /* IPvFuture */
            size_t j = a + 1, h = j;
            while (j < b && is_hex(s[j])) j++;
            if (j == h || j >= b || s[j] != '.' || j + 1 >= b) return false;
            for (j++; j < b; j++)
                if (!uri_unreserved(s[j]) && !uri_subdelim(s[j]) && s[j] != ':') return false;
        } else if (!is_ipv6(s + a, b - a)) {
            return false;
        }
        i = b + 1;
    } else { /* reg-name (IPv4address is one) */
        while (i < n && s[i] != ':')
            if (!uri_char(s, n, &i, "")) return false;
    }
    if (i < n && s[i] == ':')
        for (i++; i < n; i++)
            if (s[i] < '0' || s[i] > '9') return false;
    return i == n;
}

/* URI (scheme required) or relative-ref (scheme absent). */
static bool uri_parse(const char *s, size_t n, bool with_scheme) {
    size_t i = 0;
    if (with_scheme) {
        if (!n || !isalpha((unsigned char)s[0])) return false;
        for (i = 1; i < n && (isalnum((unsigned char)s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.'); i++) {
        }
        if (i >= n || s[i] != ':') return false;
        i++;
    }
    if (i + 1 < n && s[i] == '/' && s[i + 1] == '/') { /* "//" authority path-abempty */
        size_t a = i + 2;
        for (i = a; i < n && s[i] != '/' && s[i] != '?' && s[i] != '#'; i++) {
        }
        if (!uri_authority(s + a, i - a)) return false;
    } else if (!with_scheme) { /* path-noscheme: no ':' before the first '/' */
        for (size_t j = i; j < n && s[j] != '/' && s[j] != '?' && s[j] != '#'; j++)
            if (s[j] == ':') return false;
    }
    while (i < n && s[i] != '?' && s[i] != '#') /* the path: segments of pchar */
        if (s[i] == '/') i++;
        else if (!uri_char(s, n, &i, ":@")) return false;
    if (i < n && s[i] == '?')
        for (i++; i < n && s[i] != '#';)
            if (!uri_char(s, n, &i, ":@/?")) return false;
    if (i < n && s[i] == '#')
        for (i++; i < n;)
            if (!uri_char(s, n, &i, ":@/?")) return false;
    return i == n;
}

static bool is_uri(const char *s, size_t n) { return uri_parse(s, n, true); }
static bool is_uri_reference(const char *s, size_t n) { return uri_parse(s, n, true) || uri_parse(s, n, false); }

/* ECMA-262 search with PCRE2: $ only at the very end, `.` and \s / \S
 * spelled as ECMA's sets (\s has Unicode spaces PCRE's lacks, `.` also
 * excludes \r and the line separators). */
static pcre2_code *regex_compile(const char *pat) {
    static const char ws[] = "\\t\\n\\v\\f\\r \\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}"
                             "\\x{3000}\\x{feff}";
    /* ECMA's \S as ranges, for inside a class (the complement of the list above) */
    static const char nws[] = "\\x{0}-\\x{8}\\x{e}-\\x{1f}\\x{21}-\\x{9f}\\x{a1}-\\x{167f}\\x{1681}-\\x{1fff}\\x{200b}-\\x{2027}"
                              "\\x{202a}-\\x{202e}\\x{2030}-\\x{205e}\\x{2060}-\\x{2fff}\\x{3001}-\\x{d7ff}\\x{e000}-\\x{fefe}"
                              "\\x{ff00}-\\x{10ffff}";
    char *p = malloc(strlen(pat) * sizeof nws + 1), *q = p;
    bool in_class = false;
    for (const char *c = pat; *c; c++) {
        if (c[0] == '\\' && (c[1] == 's' || c[1] == 'S')) {
            if (in_class) q += sprintf(q, "%s", c[1] == 'S' ? nws : ws);
            else q += sprintf(q, "[%s%s]", c[1] == 'S' ? "^" : "", ws);
            c++;
        } else if (c[0] == '.' && !in_class) {
            q += sprintf(q, "[^\\n\\r\\x{2028}\\x{2029}]");
        } else {
            if (c[0] == '[') in_class = true; /* (the tests' patterns have no [] or [^]) */
            if (c[0] == ']') in_class = false;
            if (c[0] == '\\' && c[1]) *q++ = *c++;
            *q++ = *c;
        }
    }
    *q = 0;
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)p, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &err, &off, NULL);
    free(p);
    return re;
}

static bool regex_match(const pcre2_code *re, const char *s, size_t n) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

static bool regex_search(const char *pat, const char *s, size_t n) {
    pcre2_code *re = regex_compile(pat);
    bool r = re && regex_match(re, s, n);
    pcre2_code_free(re);
    return r;
}

static json_t *pointer(json_t *doc, const char *ref) {
    if (ref[0] != '#') return NULL;
    json_t *t = doc;
    const char *p = ref + 1;
    char tok[256];
    while (*p == '/' && t) {
        p++;
        size_t k = 0;
        while (*p && *p != '/' && k < sizeof tok - 1) {
            if (p[0] == '~' && p[1] == '1') tok[k++] = '/', p += 2;
            else if (p[0] == '~' && p[1] == '0') tok[k++] = '~', p += 2;
            else tok[k++] = *p++;
        }
        tok[k] = 0;
        t = json_is_array(t) ? json_array_get(t, strtoul(tok, NULL, 10)) : json_object_get(t, tok);
    }
    return t;
}

static bool has_type(json_t *v, const char *t) {
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    return false;
}

static bool valid(json_t *doc, json_t *s, json_t *v, int depth);

static bool valid_bounds(json_t *s, json_t *v) {
    double x = json_number_value(v);
    json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    json_t *emn = json_object_get(s, "exclusiveMinimum"), *emx = json_object_get(s, "exclusiveMaximum");
    if (json_is_integer(v) && json_is_integer(mn) && json_integer_value(v) < json_integer_value(mn)) return false;
    if (json_is_integer(v) && json_is_integer(mx) && json_integer_value(v) > json_integer_value(mx)) return false;
    if (mn && !(json_is_integer(v) && json_is_integer(mn)) && x < json_number_value(mn)) return false;
    if (mx && !(json_is_integer(v) && json_is_integer(mx)) && x > json_number_value(mx)) return false;
    if (json_is_true(emn) && mn && x <= json_number_value(mn)) return false;
    if (json_is_true(emx) && mx && x >= json_number_value(mx)) return false;
    if (json_is_number(emn) && x <= json_number_value(emn)) return false;
    if (json_is_number(emx) && x >= json_number_value(emx)) return false;
    return true;
}

static bool valid(json_t *doc, json_t *s, json_t *v, int depth) {
    if (depth > 200) return false;
    if (json_is_true(s)) return true;
    if (json_is_false(s) || !json_is_object(s)) return false;
    json_t *x;
    if ((x = json_object_get(s, "$ref")) && !valid(doc, pointer(doc, json_string_value(x)), v, depth + 1)) return false;
    if ((x = json_object_get(s, "type"))) {
        bool ok = false;
        if (json_is_string(x)) ok = has_type(v, json_string_value(x));
        for (size_t i = 0; json_is_array(x) && i < json_array_size(x); i++)
            ok |= has_type(v, json_string_value(json_array_get(x, i)));
        if (!ok) return false;
    }
    if ((x = json_object_get(s, "enum"))) {
        bool ok = false;
        for (size_t i = 0; i < json_array_size(x); i++) ok |= json_equal(v, json_array_get(x, i));
        if (!ok) return false;
    }
    if ((x = json_object_get(s, "const")) && !json_equal(v, x)) return false;
    if ((x = json_object_get(s, "allOf")))
        for (size_t i = 0; i < json_array_size(x); i++)
            if (!valid(doc, json_array_get(x, i), v, depth + 1)) return false;
    if ((x = json_object_get(s, "anyOf"))) {
        bool ok = false;
        for (size_t i = 0; i < json_array_size(x) && !ok; i++) ok = valid(doc, json_array_get(x, i), v, depth + 1);
        if (!ok) return false;
    }
    if ((x = json_object_get(s, "oneOf"))) {
        size_t n = 0;
        for (size_t i = 0; i < json_array_size(x); i++) n += valid(doc, json_array_get(x, i), v, depth + 1);
        if (n != 1) return false;
    }
    if (json_is_string(v)) {
        const char *str = json_string_value(v);
        size_t n = json_string_length(v), len = n_cp(str, n);
        if ((x = json_object_get(s, "minLength")) && len < (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(s, "maxLength")) && len > (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(s, "pattern")) && !regex_search(json_string_value(x), str, n)) return false;
        if ((x = json_object_get(s, "format"))) {
            const char *f = json_string_value(x);
            if (!strcmp(f, "date") && !is_date(str, n)) return false;
            if (!strcmp(f, "time") && !is_time(str, n)) return false;
            if (!strcmp(f, "date-time") && !(n > 11 && is_date(str, 10) && (str[10] == 'T' || str[10] == 't') &&
                                              is_time(str + 11, n - 11)))
                return false;
            if (!strcmp(f, "uuid") && !is_uuid(str, n)) return false;
            if (!strcmp(f, "ipv4") && !is_ipv4(str, n)) return false;
            if (!strcmp(f, "email") && !is_email(str, n)) return false;
            if (!strcmp(f, "hostname") && !is_hostname(str, n)) return false;
            if (!strcmp(f, "ipv6") && !is_ipv6(str, n)) return false;
            if (!strcmp(f, "uri") && !is_uri(str, n)) return false;
            if (!strcmp(f, "uri-reference") && !is_uri_reference(str, n)) return false;
        }
    }
    if (json_is_number(v) && !valid_bounds(s, v)) return false;
    if (json_is_object(v)) {
        json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
        const char *k;
        json_t *e;
        json_object_foreach(v, k, e) {
            json_t *ps = json_object_get(props, k);
            if (ps ? !valid(doc, ps, e, depth + 1) : addl && !valid(doc, addl, e, depth + 1)) return false;
        }
        if ((x = json_object_get(s, "propertyNames")))
            json_object_foreach(v, k, e) {
                json_t *key = json_string(k);
                bool ok = valid(doc, x, key, depth + 1);
                json_decref(key);
                if (!ok) return false;
            }
        x = json_object_get(s, "required");
        for (size_t i = 0; i < json_array_size(x); i++)
            if (!json_object_get(v, json_string_value(json_array_get(x, i)))) return false;
        if ((x = json_object_get(s, "minProperties")) && json_object_size(v) < (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(s, "maxProperties")) && json_object_size(v) > (size_t)json_integer_value(x)) return false;
    }
    if (json_is_array(v)) {
        json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems"), *rest = items;
        if (json_is_array(items)) prefix = items, rest = json_object_get(s, "additionalItems");
        size_t n = json_array_size(v);
        for (size_t i = 0; i < n; i++) {
            json_t *is = i < json_array_size(prefix) ? json_array_get(prefix, i) : rest;
            if (is && !valid(doc, is, json_array_get(v, i), depth + 1)) return false;
        }
        if ((x = json_object_get(s, "minItems")) && n < (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(s, "maxItems")) && n > (size_t)json_integer_value(x)) return false;
        if (json_is_true(json_object_get(s, "uniqueItems")))
            for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < i; j++)
                    if (json_equal(json_array_get(v, i), json_array_get(v, j))) return false;
    }
    return true;
}

/* ---- a random sentence generator over the grammar IR ---- */

struct gen {
    const struct dj_grammar *g;
    uint64_t *cost; /* per rule: least (characters + expansions) of a derivation */
    uint64_t rng;
    char *out;
    size_t n, cap;
    bool too_long;
};

static uint64_t rnd(struct gen *g) { /* splitmix64 */
    uint64_t z = (g->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static bool is_set_tail(uint32_t t) { return t == DJ_GE_CHAR_ALT || t == DJ_GE_CHAR_RNG_UPPER; }

/* cost of the alternative starting at e; *next: the element after it */
static uint64_t alt_cost(const struct dj_grammar *g, const uint64_t *cost, const struct dj_gelem *e,
                         const struct dj_gelem **next) {
    uint64_t c = 1;
    while (e->type != DJ_GE_END && e->type != DJ_GE_ALT) {
        if (e->type == DJ_GE_RULE_REF) c = cost[e->value] == UINT64_MAX || c == UINT64_MAX ? UINT64_MAX : c + cost[e->value];
        else if (c != UINT64_MAX) c++;
        e++;
        while (is_set_tail(e->type)) e++;
    }
    *next = e;
    return c;
}

static void gen_costs(struct gen *g) {
    for (size_t r = 0; r < g->g->n_rules; r++) g->cost[r] = UINT64_MAX;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < g->g->n_rules; r++) {
            const struct dj_gelem *e = g->g->elems + g->g->rule_start[r];
            for (;;) {
                const struct dj_gelem *next;
                uint64_t c = alt_cost(g->g, g->cost, e, &next);
                if (c < g->cost[r]) g->cost[r] = c, changed = true;
                if (next->type == DJ_GE_END) break;
                e = next + 1;
            }
        }
    }
}

static void put_cp(struct gen *g, uint32_t c) {
    char t[4];
    const size_t n = utf8_encode(c, t);
    if (g->n + n > g->cap) {
        g->too_long = true;
        return;
    }
    memcpy(g->out + g->n, t, n);
    g->n += n;
}

static const uint32_t pool[] = {' ', '!', '"', '#', '-', '.', '/', '0', '5', '9', ':', 'A', 'Z', '\\', '_', 'a', 'm',
                                'z', '{', '}', '~', 0x7F, 0xE9, 0xDF, 0x416, 0x4E2D, 0x1F600, '\t', '\n', 0x01, 0x2028};

/* One code point of the set starting at e. */
static void gen_char(struct gen *g, const struct dj_gelem *e) {
    uint32_t r[128];
    size_t n = 0;
    bool neg = e->type == DJ_GE_CHAR_NOT, any = e->type == DJ_GE_CHAR_ANY;
    if (!any) {
        r[n++] = e->value, r[n++] = e->value;
        for (e++; is_set_tail(e->type) && n + 2 <= 128; e++) {
            if (e->type == DJ_GE_CHAR_RNG_UPPER) r[n - 1] = e->value;
            else r[n++] = e->value, r[n++] = e->value;
        }
    }
    if (!neg && !any) {
        size_t k = (size_t)(rnd(g) % (n / 2));
        uint32_t lo = r[2 * k], hi = r[2 * k + 1];
        /* mostly the range's ends and ASCII: more interesting than uniform */
        uint32_t c = rnd(g) % 4 == 0 ? lo : lo + (uint32_t)(rnd(g) % ((uint64_t)hi - lo + 1));
        if (c >= 0xD800 && c <= 0xDFFF) c = lo;
        put_cp(g, c);
        return;
    }
    for (int tries = 0; tries < 200; tries++) {
        uint32_t c = pool[rnd(g) % (sizeof pool / sizeof pool[0])];
        bool in = false;
        for (size_t i = 0; i < n; i += 2) in |= c >= r[i] && c <= r[i + 1];
        if (!in) {
            put_cp(g, c);
            return;
        }
    }
    g->too_long = true; /* no candidate: give up this sentence */
}

static void gen_rule(struct gen *g, size_t rule, int depth) {
    if (g->too_long || depth > 4000) {
        g->too_long = true;
        return;
    }
    const struct dj_gelem *alts[256];
    uint64_t costs[256];
    size_t n = 0;
    const struct dj_gelem *e = g->g->elems + g->g->rule_start[rule];
    for (;;) {
        const struct dj_gelem *next;
        uint64_t c = alt_cost(g->g, g->cost, e, &next);
        if (n < 256 && c != UINT64_MAX) alts[n] = e, costs[n++] = c;
        if (next->type == DJ_GE_END) break;
        e = next + 1;
    }
    size_t pick = 0;
    if (depth > 24) { /* deep: the cheapest way out (terminates: costs strictly fall) */
        for (size_t i = 1; i < n; i++)
            if (costs[i] < costs[pick]) pick = i;
    } else {
        pick = (size_t)(rnd(g) % n);
    }
    for (e = alts[pick]; e->type != DJ_GE_END && e->type != DJ_GE_ALT && !g->too_long;) {
        if (e->type == DJ_GE_RULE_REF) gen_rule(g, e->value, depth + 1);
        else if (e->type == DJ_GE_CHAR || e->type == DJ_GE_CHAR_NOT || e->type == DJ_GE_CHAR_ANY) gen_char(g, e);
        e++;
        while (is_set_tail(e->type)) e++;
    }
}

/* ---- helpers ---- */

static struct dj_grammar *parse_gbnf(const char *gbnf) {
    struct dj_grammar *g = NULL;
    if (grammar_parse(gbnf, strlen(gbnf), NULL, NULL, &g) != DJ_OK) {
        fprintf(stderr, "grammar_parse: %s\n", dj_last_error());
        return NULL;
    }
    return g;
}

static struct dj_grammar *schema_grammar(json_t *schema, enum dj_json_ws ws) {
    struct dj_json_schema_opts o = json_schema_default_opts();
    o.whitespace = ws;
    char *gbnf = NULL;
    if (json_schema_to_gbnf_value(schema, &o, &gbnf) != DJ_OK) {
        fprintf(stderr, "json_schema_to_gbnf: %s\n", dj_last_error());
        return NULL;
    }
    struct dj_grammar *g = parse_gbnf(gbnf);
    if (!g) fprintf(stderr, "%s\n", gbnf);
    free(gbnf);
    return g;
}

/* Whole-string match from a matcher made once per grammar (grammar_match
 * compiles the grammar on every call). */
static bool gm_match(const struct dj_gmatch *m0, const char *s, size_t n) {
    struct dj_gmatch *m = m0 ? gmatch_clone(m0) : NULL;
    bool r = m && gmatch_accept_bytes(m, s, n) && gmatch_can_end(m);
    gmatch_free(m);
    return r;
}

static struct {
    size_t generated, valid, skipped_dup, skipped_num, skipped_long;
} stats;

/* n sentences of the schema's grammar: each matches, parses, validates. */
static void generate_and_validate(json_t *schema, const char *label, int n, uint64_t seed) {
    for (int ws = 0; ws < 3; ws++) {
        struct dj_grammar *g = schema_grammar(schema, (enum dj_json_ws)ws);
        CHECKF(g != NULL, "%s: ws %d", label, ws);
        if (!g) continue;
        struct gen gen = {.g = g, .rng = seed * 7919 + (uint64_t)ws, .cap = 1 << 16};
        gen.cost = malloc(g->n_rules * sizeof *gen.cost);
        gen.out = malloc(gen.cap);
        gen_costs(&gen);
        struct dj_gmatch *m0 = NULL;
        CHECK(gmatch_create(g, &m0) == DJ_OK);
        for (int i = 0; i < n; i++) {
            gen.n = 0, gen.too_long = false;
            gen_rule(&gen, g->root, 0);
            if (gen.too_long) {
                stats.skipped_long++;
                continue;
            }
            stats.generated++;
            bool m = gm_match(m0, gen.out, gen.n);
            CHECKF(m, "%s: generated text not matched: %.*s", label, (int)gen.n, gen.out);
            json_error_t err;
            json_t *v = json_loadb(gen.out, gen.n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
            if (!v && strstr(err.text, "duplicate")) { /* additional keys may repeat: a documented gap */
                stats.skipped_dup++;
                continue;
            }
            if (!v && (strstr(err.text, "too big") || strstr(err.text, "overflow") || strstr(err.text, "NUL byte in object key"))) {
                /* jansson's limits: integers past int64, doubles past 1e308, "\u0000" in a key */
                stats.skipped_num++;
                continue;
            }
            CHECKF(v != NULL, "%s (ws %d): not JSON (%s): %.*s", label, ws, err.text, (int)gen.n, gen.out);
            if (!v) continue;
            bool ok = valid(schema, schema, v, 0);
            CHECKF(ok, "%s (ws %d): not valid: %.*s", label, ws, (int)gen.n, gen.out);
            stats.valid += ok;
            json_decref(v);
        }
        free(gen.cost), free(gen.out);
        gmatch_free(m0);
        grammar_free(g);
    }
}

/* ---- (a) the traces ---- */

/* Appends the distinct tools of every trace's <tools> block to all_tools;
 * per trace, its tools array to per_trace[] (and the trace path). */
static size_t load_trace_tools(const char *shared, json_t *all_tools, json_t *per_trace, json_t *paths) {
    static const char *names[] = {
        "mini_swe_agent__deepseek_chat_test_1-100__astropy__astropy-12907.jsonl",
        "mini_swe_agent__deepseek_chat_test_1-100__django__django-11039.jsonl",
        "mini_swe_agent__deepseek_chat_test_1-100__django__django-13265.jsonl",
        "mini_swe_agent__deepseek_lite_dev_noparallel__marshmallow-code__marshmallow-1343.jsonl",
        "mini_swe_agent__deepseek_lite_dev_noparallel__pvlib__pvlib-python-1854.jsonl",
        "mini_swe_agent__deepseek_reasoner_dev__pvlib__pvlib-python-1606.jsonl",
        "mini_swe_agent__deepseek_reasoner_dev__pvlib__pvlib-python-1707.jsonl",
        "openhands_eval__openhands_repo__multi_swe_bench_example__llama4maverick_0.jsonl",
        "openhands_eval__openhands_repo__multi_swe_bench_example__llama4maverick_1.jsonl",
        "openhands_eval__openhands_repo__multi_swe_bench_example__llama4maverick_2.jsonl",
        "tau_airline__0.jsonl", "tau_airline__1.jsonl", "tau_airline__5.jsonl", "tau_airline__6.jsonl",
        "tau_airline__7.jsonl", "claude_code__cctrace_f33cdb42.jsonl", "swe_agent__gpt4__pydicom__pydicom-1458.jsonl",
    };
    size_t n_files = 0;
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        char path[256];
        snprintf(path, sizeof path, "traces/%.200s", names[f]);
        FILE *fp = fopen(test_shared_path(shared, path), "rb");
        if (!fp) continue;
        json_error_t err;
        json_t *line = json_loadf(fp, JSON_DISABLE_EOF_CHECK, &err);
        fclose(fp);
        const char *text = json_string_value(json_object_get(line, "text"));
        const char *b = text ? strstr(text, "<tools>\n") : NULL;
        const char *e = b ? strstr(b, "</tools>") : NULL;
        if (!e) { /* no tool block in this trace (Claude Code, SWE-agent): nothing to take */
            json_decref(line);
            continue;
        }
        json_t *tools = json_array();
        for (const char *p = b + 8; p < e;) {
            const char *nl = memchr(p, '\n', (size_t)(e - p));
            if (!nl) nl = e;
            if (nl > p) {
                json_t *t = json_loadb(p, (size_t)(nl - p), 0, &err);
                CHECKF(t != NULL, "%s: a <tools> line is not JSON: %s", names[f], err.text);
                if (t) {
                    json_array_append(tools, t);
                    bool seen = false;
                    for (size_t i = 0; i < json_array_size(all_tools); i++) seen |= json_equal(t, json_array_get(all_tools, i));
                    if (!seen) json_array_append(all_tools, t);
                    json_decref(t);
                }
            }
            p = nl + 1;
        }
        json_array_append_new(per_trace, tools);
        json_array_append_new(paths, json_string(path));
        json_decref(line);
        n_files++;
    }
    return n_files;
}

/* Puts the keys of obj in the order of schema's properties (others after). */
static json_t *reorder(json_t *obj, json_t *schema) {
    json_t *out = json_object(), *props = json_object_get(schema, "properties");
    const char *k;
    json_t *v;
    json_object_foreach(props, k, v) if (json_object_get(obj, k)) json_object_set(out, k, json_object_get(obj, k));
    json_object_foreach(obj, k, v) if (!json_object_get(out, k)) json_object_set(out, k, v);
    return out;
}

static void test_traces(const char *shared) {
    json_t *all = json_array(), *per = json_array(), *paths = json_array();
    size_t n_files = load_trace_tools(shared, all, per, paths);
    CHECKF(n_files >= 10, "%zu trace files with a <tools> block", n_files);
    CHECK(json_array_size(all) >= 15);
    /* every distinct tool's parameters: convert (3 modes) and generate */
    for (size_t i = 0; i < json_array_size(all); i++) {
        json_t *f = json_object_get(json_array_get(all, i), "function");
        json_t *params = json_object_get(f, "parameters");
        generate_and_validate(params, json_string_value(json_object_get(f, "name")), 40, 1000 + i);
    }
    printf("traces: %zu files, %zu distinct tools, every parameters schema converted in 3 whitespace modes\n", n_files,
           json_array_size(all));
    /* whole tools arrays: every mode and format; recorded replies */
    size_t n_grammars = 0, n_replies = 0, n_as_written = 0, n_reordered = 0;
    for (size_t t = 0; t < json_array_size(per); t++) {
        json_t *tools = json_array_get(per, t);
        const char *first = json_string_value(json_object_get(json_object_get(json_array_get(tools, 0), "function"), "name"));
        for (int fmt = 0; fmt < 2; fmt++)
            for (int choice = 0; choice < 4; choice++)
                for (int par = 0; par < 2; par++) {
                    struct dj_toolcall_opts o = toolcall_default_opts();
                    o.format = (enum dj_tool_format)fmt, o.choice = (enum dj_tool_choice)choice, o.parallel = par;
                    o.name = first;
                    struct dj_toolcall_grammar tg = {0};
                    enum dj_status st = toolcall_grammar_build_value(tools, &o, &tg);
                    CHECKF(st == DJ_OK, "%s: toolcall fmt %d choice %d: %s", json_string_value(json_array_get(paths, t)),
                           fmt, choice, dj_last_error());
                    if (choice == DJ_TOOL_NONE) CHECK(!tg.gbnf && !tg.lazy_gbnf && !tg.trigger);
                    for (int lazy = 0; lazy < 2 && tg.gbnf; lazy++) {
                        struct dj_grammar *g = parse_gbnf(lazy ? tg.lazy_gbnf : tg.gbnf);
                        CHECK(g != NULL);
                        n_grammars += g != NULL;
                        grammar_free(g);
                    }
                    toolcall_grammar_free(&tg);
                }
        /* the recorded replies against AUTO / hermes (full and lazy) */
        struct dj_toolcall_opts o = toolcall_default_opts();
        struct dj_toolcall_grammar tg = {0};
        CHECK(toolcall_grammar_build_value(tools, &o, &tg) == DJ_OK);
        struct dj_grammar *full = parse_gbnf(tg.gbnf), *lazy = parse_gbnf(tg.lazy_gbnf);
        CHECK(full && lazy && !strcmp(tg.trigger, "<tool_call>"));
        FILE *fp = fopen(test_shared_path(shared, json_string_value(json_array_get(paths, t))), "rb");
        char *buf = malloc(1 << 22);
        while (fp && full && lazy && fgets(buf, 1 << 22, fp)) {
            json_t *line = json_loads(buf, 0, NULL);
            const char *r = json_string_value(json_object_get(line, "response"));
            if (!r || !strstr(r, "<tool_call>")) {
                json_decref(line);
                continue;
            }
            size_t n = strlen(r);
            if (n >= 11 && !strcmp(r + n - 11, "<|im_end|>\n")) n -= 11;
            n_replies++;
            const char *after = strstr(r, "<tool_call>") + 11;
            if (grammar_match(full, r, n)) {
                n_as_written++;
                CHECK(grammar_match(lazy, after, n - (size_t)(after - r)));
            } else {
                /* the one allowed difference: argument keys in another order than `properties` */
                const char *jb = strstr(r, "<tool_call>\n") + 12, *je = strstr(jb, "\n</tool_call>");
                json_t *call = je ? json_loadb(jb, (size_t)(je - jb), 0, NULL) : NULL;
                const char *name = json_string_value(json_object_get(call, "name"));
                json_t *schema = NULL;
                for (size_t i = 0; name && i < json_array_size(tools); i++) {
                    json_t *f = json_object_get(json_array_get(tools, i), "function");
                    if (!strcmp(json_string_value(json_object_get(f, "name")), name)) schema = json_object_get(f, "parameters");
                }
                bool ok = false;
                if (schema) {
                    json_t *args = reorder(json_object_get(call, "arguments"), schema);
                    CHECK(valid(schema, schema, args, 0));
                    json_t *c2 = json_pack("{s:s, s:o}", "name", name, "arguments", args);
                    char *txt = json_dumps(c2, JSON_ENSURE_ASCII);
                    size_t pre = (size_t)(jb - r), nt = strlen(txt), tail = n - (size_t)(je - r);
                    char *fixed = malloc(pre + nt + tail);
                    memcpy(fixed, r, pre), memcpy(fixed + pre, txt, nt), memcpy(fixed + pre + nt, je, tail);
                    ok = grammar_match(full, fixed, pre + nt + tail);
                    free(fixed), free(txt);
                    json_decref(c2);
                }
                CHECKF(ok, "%s: reply not matched even with keys reordered: %.300s",
                       json_string_value(json_array_get(paths, t)), r);
                n_reordered += ok;
                json_decref(call);
            }
            json_decref(line);
        }
        free(buf);
        if (fp) fclose(fp);
        grammar_free(full), grammar_free(lazy);
        toolcall_grammar_free(&tg);
    }
    CHECK(n_replies > 500);
    printf("traces: %zu tool-call grammars parsed; %zu recorded replies match AUTO/hermes: %zu as written, %zu after "
           "putting argument keys in schema order\n",
           n_grammars, n_replies, n_as_written, n_reordered);
    json_decref(all), json_decref(per), json_decref(paths);
}

/* ---- (b), (c) hand-written schemas ---- */

struct hcase {
    const char *schema;
    const char *valid[12];   /* compact texts that must match */
    const char *invalid[14]; /* compact texts that must not */
};

static const struct hcase cases[] = {
    {"{\"type\":\"string\"}", {"\"\"", "\"a\\n\\u00e9\\ud83d\\ude00\"", "\"\x7f\""}, {"\"\\ud800\"", "1", "\"\n\"", "'a'"}},
    {"{\"type\":\"integer\",\"minimum\":-17,\"maximum\":2049}",
     {"-17", "0", "9", "10", "2049", "1999"},
     {"-18", "2050", "1.5", "\"3\"", "01", "99999"}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":5,\"exclusiveMaximum\":100000}", {"6", "99999", "10000"}, {"5", "100000", "4", "-6"}},
    {"{\"type\":\"integer\",\"minimum\":100}", {"100", "101", "999", "12345678901"}, {"99", "-1", "0", "-100"}},
    {"{\"type\":\"integer\",\"maximum\":-3}", {"-3", "-1000", "-4"}, {"-2", "0", "3"}},
    {"{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true,\"maximum\":10.5}", {"1", "10"}, {"0", "11"}},
    {"{\"type\":\"number\"}", {"1.5e-3", "-0", "12", "0.25E+10"}, {"\"1\"", "01", "1.", ".5", "+1"}},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":100}", {"0", "0.0", "99.999", "100", "100.000", "5"},
     {"-1", "-0.5", "100.01", "101", "1e3"}},
    {"{\"type\":\"number\",\"exclusiveMinimum\":-2,\"exclusiveMaximum\":3}", {"-1.999", "-1", "0", "2.9", "-0.5"},
     {"-2", "-2.0", "3", "3.0", "-2.5", "4"}},
    {"{\"type\":\"number\",\"maximum\":-1.0}", {"-1", "-1.00", "-1.5", "-1000.25"}, {"-0.5", "0", "1", "-0.999"}},
    {"{\"type\":\"number\",\"exclusiveMinimum\":0}", {"0.001", "1", "123.5"}, {"0", "0.0", "-1"}},
    {"{\"type\":[\"boolean\",\"null\"]}", {"true", "false", "null"}, {"0", "\"true\""}},
    {"{\"enum\":[\"red\",\"green\",3,null,{\"a\":[1,2]}]}", {"\"red\"", "3", "null", "{\"a\":[1,2]}"}, {"\"blue\"", "4", "{\"a\":[1]}"}},
    {"{\"type\":\"string\",\"enum\":[\"x\",1,\"y\"]}", {"\"x\"", "\"y\""}, {"1"}},
    {"{\"const\":\"fixed\"}", {"\"fixed\""}, {"\"Fixed\"", "\"fixed \""}},
    {"{\"const\":{\"a\":[1,{\"b\":null}]}}", {"{\"a\":[1,{\"b\":null}]}"}, {"{\"a\":[1,{\"b\":0}]}"}},
    {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\",\"minimum\":0},"
     "\"email\":{\"type\":\"string\",\"format\":\"email\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
     {"{\"name\":\"Al\",\"age\":3}", "{\"name\":\"\",\"age\":0,\"email\":\"a.b@c-d.org\"}"},
     {"{\"age\":3}", "{\"name\":\"Al\"}", "{\"name\":\"Al\",\"age\":3,\"x\":1}", "{\"name\":1,\"age\":3}",
      "{\"name\":\"Al\",\"age\":-1}", "{\"name\":\"Al\",\"age\":3,\"email\":\"no-at-sign\"}", "[]"}},
    {"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"string\"}}",
     {"{}", "{\"id\":1}", "{\"id\":1,\"x\":\"y\",\"z\":\"\"}", "{\"x\":\"y\"}"},
     {"{\"id\":1,\"x\":2}", "{\"id\":\"1\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"},\"abc\":{\"type\":\"string\"}}}",
     {"{\"a\":1}", "{\"abcd\":null}", "{\"ab\":1}", "{\"ab\":1,\"abc\":\"s\",\"b\":[]}", "{\"\":0}"},
     {"{\"ab\":\"x\"}", "{\"abc\":1}", "{\"a\\u0062\":\"x\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"},"
     "\"d\":{\"type\":\"integer\"}},\"required\":[\"c\"],\"additionalProperties\":false}",
     {"{\"c\":1}", "{\"a\":1,\"c\":2,\"d\":3}", "{\"b\":1,\"c\":1}", "{\"a\":1,\"b\":2,\"c\":3,\"d\":4}"},
     {"{\"a\":1}", "{}", "{\"c\":1,\"e\":1}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"additionalProperties\":false}",
     {"{}", "{\"a\":1}", "{\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\"}"}, {"{\"c\":1}", "{\"a\":\"x\"}"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":4}",
     {"[1,2]", "[1,2,3,4]"}, {"[1]", "[]", "[1,2,3,4,5]", "[1,\"a\"]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}",
     {"[]", "[\"a\"]", "[\"a\",1]"}, {"[1]", "[\"a\",1,2]", "[\"a\",\"b\"]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"const\":\"x\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":2,\"uniqueItems\":false}",
     {"[\"x\",true]", "[\"x\",true,false,true]"}, {"[\"x\"]", "[\"y\",true]", "[\"x\",1]"}},
    {"{\"type\":\"array\",\"items\":[{\"type\":\"null\"}],\"additionalItems\":{\"type\":\"string\"}}",
     {"[]", "[null]", "[null,\"a\",\"b\"]"}, {"[\"a\"]", "[null,1]"}},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":5}",
     {"\"ab\"", "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80x\"", "\"abcde\"", "\"\\n\\t\""}, {"\"a\"", "\"abcdef\"", "\"\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2,3}-\\\\d{3}$\"}", {"\"AB-123\"", "\"ABC-000\""},
     {"\"A-123\"", "\"ABCD-123\"", "\"ab-123\"", "\"AB-12\"", "\"xAB-123\""}},
    {"{\"type\":\"string\",\"pattern\":\"foo|ba+r\"}", {"\"xxfooyy\"", "\"baaar\"", "\"foo\"", "\"a\\\"bar\""}, {"\"fo\"", "\"br\"", "\"\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[^a-c\\\\n]+\\\\.(txt|md)$\"}", {"\"x y.md\"", "\"\\\"q\\\\.txt\""}, {"\"abc.md\"", "\"x.doc\"", "\".md\"", "\"x\\n.md\""}},
    {"{\"type\":\"string\",\"pattern\":\"^(?:\\\\w+\\\\s?){1,3}[.!?]?$\"}", {"\"hi there you!\"", "\"a_1\""}, {"\"a b c d\"", "\"\"", "\"!!\""}},
    {"{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"},\"t\":{\"type\":\"string\",\"format\":\"time\"},"
     "\"dt\":{\"type\":\"string\",\"format\":\"date-time\"},\"u\":{\"type\":\"string\",\"format\":\"uuid\"},"
     "\"ip\":{\"type\":\"string\",\"format\":\"ipv4\"}},\"additionalProperties\":false}",
     {"{\"d\":\"2024-02-29\",\"t\":\"23:59:59.5+01:00\",\"dt\":\"2000-02-29T00:00:00Z\",\"u\":\"123e4567-e89b-12d3-a456-426614174000\","
      "\"ip\":\"192.168.0.255\"}",
      "{\"d\":\"1999-12-31\"}"},
     {"{\"d\":\"2023-02-29\"}", "{\"d\":\"1900-02-29\"}", "{\"d\":\"2023-13-01\"}", "{\"d\":\"2023-04-31\"}",
      "{\"t\":\"24:00:00Z\"}", "{\"dt\":\"2023-01-01 10:00:00Z\"}", "{\"u\":\"123e4567-e89b-12d3-a456-42661417400g\"}",
      "{\"ip\":\"256.1.1.1\"}"}},
    {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":3},{\"type\":\"integer\",\"minimum\":10}]}",
     {"\"abc\"", "10", "1000"}, {"\"abcd\"", "9", "null"}},
    {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"x\"],"
     "\"additionalProperties\":false},{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},\"y\":{\"type\":\"string\"}},"
     "\"required\":[\"kind\",\"y\"],\"additionalProperties\":false}]}",
     {"{\"kind\":\"a\",\"x\":1}", "{\"kind\":\"b\",\"y\":\"s\"}"}, {"{\"kind\":\"a\",\"y\":\"s\"}", "{\"kind\":\"c\",\"x\":1}"}},
    {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
     "{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]},{\"properties\":{\"a\":{\"minimum\":0}}}]}",
     {"{\"a\":1,\"b\":\"x\"}", "{\"a\":0,\"b\":\"\",\"c\":null}"}, {"{\"a\":-1,\"b\":\"x\"}", "{\"a\":1}", "{\"b\":\"x\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"additionalProperties\":false,"
     "\"anyOf\":[{\"required\":[\"n\"]},{\"properties\":{\"n\":{\"maximum\":-1}}}]}",
     {"{\"n\":5}", "{}", "{\"n\":-3}"}, {"{\"m\":1}", "{\"n\":\"x\"}"}},
    {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},\"children\":{\"type\":\"array\","
     "\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"value\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
     {"{\"value\":1}", "{\"value\":1,\"children\":[{\"value\":2,\"children\":[]}]}"},
     {"{\"value\":1,\"children\":[{\"v\":2}]}", "{\"children\":[]}"}},
    {"{\"definitions\":{\"opt\":{\"type\":[\"string\",\"null\"],\"maxLength\":2}},\"type\":\"object\",\"properties\":"
     "{\"x\":{\"$ref\":\"#/definitions/opt\"},\"y\":{\"$ref\":\"#/properties/x\"}},\"required\":[\"x\"],\"additionalProperties\":false}",
     {"{\"x\":null}", "{\"x\":\"ab\",\"y\":null}"}, {"{\"x\":\"abc\"}", "{}", "{\"x\":1}"}},
    {"{\"minLength\":2,\"minimum\":5,\"description\":\"untyped: every type, each with its keywords\"}",
     {"\"ab\"", "5", "5.5", "true", "[1]", "{}", "null"}, {"\"a\"", "4", "4.5"}},
    {"{\"type\":\"string\",\"minLength\":1001,\"maxLength\":1500}", {NULL}, {"\"\""}},
    {"{}", {"1", "\"x\"", "{\"a\":[null,true]}", "[]"}, {"nul", "{a:1}"}},
    {"true", {"1", "[{}]"}, {"tru"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":false,\"b\":{\"type\":\"integer\"}},\"required\":[\"b\",\"z\"]}",
     {"{\"b\":1,\"z\":null}", "{\"b\":1,\"z\":2,\"q\":3}"}, {"{\"b\":1}", "{\"a\":1,\"b\":1,\"z\":1}", "{\"b\":1,\"z\":1,\"a\":1}"}},
    {"{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2}},"
     "\"required\":[\"tags\"],\"additionalProperties\":false,\"minProperties\":1,\"maxProperties\":1,\"title\":\"t\",\"$comment\":\"c\"}",
     {"{\"tags\":[]}", "{\"tags\":[\"a\",\"a\"]}"}, {"{\"tags\":[\"c\"]}", "{\"tags\":[\"a\",\"b\",\"a\"]}"}},
    {"{\"type\":\"object\",\"propertyNames\":{\"type\":\"string\"},\"additionalProperties\":{\"type\":\"integer\"}}",
     {"{}", "{\"a\":1,\"\":2}"}, {"{\"a\":\"x\"}", "[]"}},
    /* strings under several constraints at once, the formats, the agents' shapes */
    {"{\"type\":\"string\",\"pattern\":\"\\\"\",\"minLength\":2,\"maxLength\":3}",
     {"\"\\\"a\"", "\"a\\\"b\"", "\"\\\\\\\"\""},
     {"\"\\\"\"", "\"ab\"", "\"\\\"abc\""}},
    {"{\"type\":\"string\",\"pattern\":\"\\\\n|\\\\\\\\\",\"maxLength\":2}",
     {"\"\\n\"", "\"a\\n\"", "\"\\\\\"", "\"\\\\\\\\\""},
     {"\"\"", "\"ab\"", "\"a\\nb\"", "\"\\\\n\\\\\""}},
    {"{\"type\":\"string\",\"pattern\":\"^a.\",\"maxLength\":2}",
     {"\"a\360\237\230\200\"", "\"ab\"", "\"a\303\251\""},
     {"\"a\360\237\230\200\360\237\230\200\"", "\"a\"", "\"a\\n\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"minLength\":2,\"maxLength\":4}",
     {"\"ab\"", "\"abcd\"", "\"xyz\""},
     {"\"a\"", "\"abcde\"", "\"aB\"", "\"\"", "\"ab1\""}},
    {"{\"type\":\"string\",\"pattern\":\"ab\",\"minLength\":3,\"maxLength\":5}",
     {"\"abx\"", "\"xab\"", "\"xxabx\"", "\"aab\"", "\"a\\\"ab\"", "\"\303\251ab\""},
     {"\"ab\"", "\"xxxxab\"", "\"xxxx\"", "\"xxxxx\"", "\"\"", "\"ba\\n\""}},
    {"{\"type\":\"string\",\"pattern\":\"^x\",\"minLength\":3}",
     {"\"xyz\"", "\"x\303\251\344\270\255\360\237\230\200\""},
     {"\"xy\"", "\"x\"", "\"yxz\"", "\"\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[0-9]{3}$\",\"maxLength\":10,\"minLength\":1}",
     {"\"123\"", "\"000\""},
     {"\"12\"", "\"1234\"", "\"\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[a-z]{2,6}$\",\"minLength\":3,\"maxLength\":4}",
     {"\"abc\"", "\"abcd\""},
     {"\"ab\"", "\"abcde\"", "\"ab1\""}},
    {"{\"type\":\"string\",\"pattern\":\"^(ab|c)*$\",\"maxLength\":3}",
     {"\"\"", "\"ab\"", "\"c\"", "\"abc\"", "\"cab\"", "\"ccc\""},
     {"\"abab\"", "\"a\"", "\"cccc\"", "\"b\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[a-z]+(-[a-z]+)*$\",\"minLength\":3,\"maxLength\":7}",
     {"\"abc\"", "\"a-b\"", "\"ab-cd-e\""},
     {"\"ab\"", "\"a--b\"", "\"-ab\"", "\"abcdefgh\"", "\"ab-cd-ef\""}},
    {"{\"type\":\"string\",\"allOf\":[{\"pattern\":\"^[^\\\\n\\\\r]*$\"},{\"pattern\":\"^[\\\\s\\\\S]{0,8}$\"}]}",
     {"\"\"", "\"team-ld\"", "\"12345678\"", "\"a \\t\\\"b\""},
     {"\"a\\nb\"", "\"123456789\"", "\"\\r\""}},
    {"{\"allOf\":[{\"type\":\"string\",\"pattern\":\"^a\"},{\"pattern\":\"b$\"},{\"pattern\":\"c\"}]}",
     {"\"acb\"", "\"abcb\"", "\"a c b\"", "\"acccb\""},
     {"\"ab\"", "\"cb\"", "\"acbx\"", "\"ac\"", "\"\""}},
    {"{\"type\":\"string\",\"allOf\":[{\"pattern\":\"^[a-z0-9_]+$\"},{\"pattern\":\"[0-9]\"},{\"minLength\":2}],\"maxLength\":5}",
     {"\"a1\"", "\"12345\"", "\"_9_\""},
     {"\"1\"", "\"abc\"", "\"a1b2c3\"", "\"a-1\""}},
    {"{\"type\":\"string\",\"format\":\"uri\",\"pattern\":\"^https://\"}",
     {"\"https://example.com/x\"", "\"https://[::1]:8080/?q#f\""},
     {"\"http://example.com\"", "\"https://exa mple\"", "\"ftp://https://\""}},
    {"{\"type\":\"string\",\"format\":\"date-time\",\"maxLength\":22}",
     {"\"2024-01-01T00:00:00Z\"", "\"2024-02-29T23:59:59.5Z\""},
     {"\"2024-01-01T00:00:00.55Z\"", "\"2023-02-29T00:00:00Z\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\",\"maxLength\":40}",
     {"\"123e4567-e89b-12d3-a456-426614174000\""},
     {"\"123e4567e89b12d3a456426614174000\""}},
    {"{\"type\":\"string\",\"allOf\":[{\"format\":\"hostname\"},{\"format\":\"ipv4\"}]}",
     {"\"1.2.3.4\"", "\"255.0.0.1\""},
     {"\"a.b\"", "\"1.2.3.256\"", "\"1.2.3\""}},
    {"{\"type\":\"string\",\"format\":\"email\",\"maxLength\":8}",
     {"\"a@b.c\"", "\"ab@cd.ef\""},
     {"\"abc@de.fg\"", "\"a@-b\"", "\"\""}},
    {"{\"type\":\"string\",\"format\":\"uri\"}",
     {"\"https://example.com\"", "\"mailto:a@b.c\"", "\"urn:isbn:0451450523\"", "\"http://[::1]:8080/p?q=1#f\"", "\"file:///tmp/x\"", "\"a:\"", "\"http://u:p@h/%20?/#?\"", "\"x://[v1.fe:x]\""},
     {"\"example.com\"", "\"http://exa mple.com\"", "\"http://[::g]/\"", "\"1http://x\"", "\"http://x/%zz\"", "\"\"", "\"http://a@b@c\"", "\"http://h:8a/\"", "\"\303\251:x\""}},
    {"{\"type\":\"string\",\"format\":\"uri-reference\"}",
     {"\"/relative/path\"", "\"../x\"", "\"?q\"", "\"#frag\"", "\"\"", "\"//host:80/p\"", "\"a:b\"", "\"x/y:z\""},
     {"\"a b\"", "\":x\"", "\"%zz\"", "\"//[::1/\"", "\"x:y z\""}},
    {"{\"type\":\"string\",\"format\":\"hostname\"}",
     {"\"example.com\"", "\"a-b.c\"", "\"xn--bcher-kva.example\"", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"", "\"a1.b2\""},
     {"\"-a.com\"", "\"a-.com\"", "\"a..b\"", "\"\"", "\"a_b.com\"", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"", "\"a.\"", "\".a\""}},
    {"{\"type\":\"string\",\"format\":\"ipv6\"}",
     {"\"::\"", "\"::1\"", "\"1:2:3:4:5:6:7:8\"", "\"1::8\"", "\"::ffff:192.168.0.1\"", "\"fe80::1:2\"", "\"1:2:3:4:5:6:7::\"", "\"ABCD:ef01::\""},
     {"\"1:2:3:4:5:6:7:8:9\"", "\":::\"", "\"1::2::3\"", "\"::ffff:256.1.1.1\"", "\"12345::\"", "\"g::\"", "\"1:2:3:4:5:6:7\"", "\"::1.2.3.04\"", "\"\""}},
    {"{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\",\"properties\":{\"url\":{\"type\":\"string\",\"format\":\"uri\",\"description\":\"The URL\"},\"prompt\":{\"type\":\"string\"},\"offset\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9007199254740991}},\"required\":[\"url\",\"prompt\"],\"additionalProperties\":false}",
     {"{\"url\":\"https://a.b/c\",\"prompt\":\"p\"}", "{\"url\":\"s:x\",\"prompt\":\"\",\"offset\":9007199254740991}"},
     {"{\"url\":\"a.b\",\"prompt\":\"p\"}", "{\"url\":\"https://a.b\",\"prompt\":\"p\",\"offset\":9007199254740992}", "{\"url\":\"https://a.b\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"script\":{\"type\":\"string\",\"maxLength\":524288},\"args\":{},\"resumeFromRunId\":{\"type\":\"string\",\"pattern\":\"^wf_[a-z0-9-]{6,}$\"},\"runId\":{\"type\":\"string\",\"pattern\":\"^wf_[a-z0-9-]{6,}$\",\"maxLength\":524288}},\"additionalProperties\":false}",
     {"{\"script\":\"x\",\"resumeFromRunId\":\"wf_abc-12\"}", "{\"args\":[1,{\"a\":null}],\"runId\":\"wf_abcdef\"}", "{}"},
     {"{\"resumeFromRunId\":\"wf_abc\"}", "{\"runId\":\"xwf_abcdef\"}", "{\"runId\":\"wf_ABCDEF\"}", "{\"other\":1}"}},
    {"{\"type\":\"object\",\"properties\":{\"fork_turns\":{\"oneOf\":[{\"type\":\"string\",\"enum\":[\"all\"]},{\"type\":\"string\",\"pattern\":\"^[1-9][0-9]*$\"}]},\"fork_profile\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":50},\"run_in_background\":{\"type\":\"boolean\",\"default\":true}},\"required\":[\"fork_turns\"]}",
     {"{\"fork_turns\":\"all\"}", "{\"fork_turns\":\"12\",\"fork_profile\":\"ab\"}"},
     {"{\"fork_turns\":\"0\"}", "{\"fork_turns\":\"al\"}", "{\"fork_turns\":\"1\",\"fork_profile\":\"a\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"timeout_ms\":{\"default\":300000,\"type\":\"number\",\"minimum\":1000,\"maximum\":3600000},\"ws\":{\"type\":\"object\",\"properties\":{\"url\":{\"type\":\"string\"},\"protocols\":{\"type\":\"array\",\"maxItems\":4,\"items\":{\"type\":\"string\",\"pattern\":\"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$\"}}},\"required\":[\"url\"],\"additionalProperties\":false}},\"required\":[\"timeout_ms\"],\"additionalProperties\":false}",
     {"{\"timeout_ms\":1000}", "{\"timeout_ms\":3600000,\"ws\":{\"url\":\"u\",\"protocols\":[\"chat\",\"v1.json\"]}}"},
     {"{\"timeout_ms\":999}", "{\"timeout_ms\":1000,\"ws\":{\"url\":\"u\",\"protocols\":[\"a b\"]}}", "{\"timeout_ms\":1000,\"ws\":{\"protocols\":[]}}"}},
};

static void test_cases(void) {
    size_t n_valid = 0, n_invalid = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct hcase *c = &cases[i];
        json_error_t err;
        json_t *s = json_loads(c->schema, JSON_DECODE_ANY, &err);
        CHECKF(s != NULL, "case %zu: schema not JSON: %s", i, err.text);
        if (!s) continue;
        struct dj_grammar *g = schema_grammar(s, DJ_JSON_WS_COMPACT);
        CHECKF(g != NULL, "case %zu", i);
        for (size_t k = 0; g && k < sizeof c->valid / sizeof c->valid[0] && c->valid[k]; k++) {
            json_t *v = json_loads(c->valid[k], JSON_DECODE_ANY, NULL);
            CHECKF(v && valid(s, s, v, 0), "case %zu: the test's valid[%zu] is not valid: %s", i, k, c->valid[k]);
            json_decref(v);
            CHECKF(grammar_match(g, c->valid[k], strlen(c->valid[k])), "case %zu: valid %s rejected", i, c->valid[k]);
            n_valid++;
        }
        for (size_t k = 0; g && k < sizeof c->invalid / sizeof c->invalid[0] && c->invalid[k]; k++) {
            json_t *v = json_loads(c->invalid[k], JSON_DECODE_ANY, NULL);
            CHECKF(!v || !valid(s, s, v, 0), "case %zu: the test's invalid[%zu] is valid: %s", i, k, c->invalid[k]);
            json_decref(v);
            CHECKF(!grammar_match(g, c->invalid[k], strlen(c->invalid[k])), "case %zu: invalid %s accepted", i,
                   c->invalid[k]);
            n_invalid++;
        }
        grammar_free(g);
        generate_and_validate(s, c->schema, 60, i + 1);
        json_decref(s);
    }
    printf("hand-written: %zu schemas, %zu valid instances accepted, %zu invalid rejected\n",
           sizeof cases / sizeof cases[0], n_valid, n_invalid);
}

/* ---- strings under several constraints: long texts, and every format two ways ---- */

static struct dj_grammar *grammar_of(const char *schema) {
    json_t *s = json_loads(schema, 0, NULL);
    struct dj_grammar *g = s ? schema_grammar(s, DJ_JSON_WS_COMPACT) : NULL;
    json_decref(s);
    return g;
}

/* "<prefix><n times c><suffix>" as a JSON string text (malloc'd) */
static char *long_text(const char *prefix, size_t n, char c, const char *suffix) {
    size_t np = strlen(prefix), ns = strlen(suffix);
    char *t = malloc(np + n + ns + 3);
    t[0] = '"';
    memcpy(t + 1, prefix, np);
    memset(t + 1 + np, c, n);
    memcpy(t + 1 + np + n, suffix, ns);
    t[1 + np + n + ns] = '"', t[2 + np + n + ns] = 0;
    return t;
}

static void test_long_strings(void) {
    static const struct {
        const char *schema, *prefix, *suffix;
        char fill;
        size_t ok, too_long; /* fill counts: matches, does not */
    } longs[] = {
        /* Claude Code's SendMessage `to`: no line break, at most 300 characters */
        {"{\"type\":\"string\",\"allOf\":[{\"pattern\":\"^[^\\\\n\\\\r]*$\"},{\"pattern\":\"^[\\\\s\\\\S]{0,300}$\"}]}", "", "", 'x',
         300, 301},
        /* a prefix, then a loop counted up to a huge maxLength (one counted repetition, not 524288 rules) */
        {"{\"type\":\"string\",\"pattern\":\"^wf_[a-z0-9-]{6,}$\",\"maxLength\":524288}", "wf_", "", 'k', 5000, 524286},
        {"{\"type\":\"string\",\"pattern\":\"^wf_[a-z0-9-]{6,}$\",\"maxLength\":1503}", "wf_", "", 'k', 1500, 1501},
        /* a cycle of two states counted one by one */
        {"{\"type\":\"string\",\"pattern\":\"^[a-z]+(-[a-z]+)*$\",\"maxLength\":1200}", "", "-z", 'k', 1198, 1199},
        /* search semantics with a length window */
        {"{\"type\":\"string\",\"pattern\":\"needle\",\"minLength\":900,\"maxLength\":1000}", "", "needle", ' ', 994, 995},
        {"{\"type\":\"string\",\"pattern\":\"needle\",\"minLength\":900,\"maxLength\":1000}", "", "needle", ' ', 894, 893},
    };
    for (size_t i = 0; i < sizeof longs / sizeof longs[0]; i++) {
        struct dj_grammar *g = grammar_of(longs[i].schema);
        CHECKF(g != NULL, "long case %zu", i);
        if (!g) continue;
        char *ok = long_text(longs[i].prefix, longs[i].ok, longs[i].fill, longs[i].suffix);
        char *bad = long_text(longs[i].prefix, longs[i].too_long, longs[i].fill, longs[i].suffix);
        CHECKF(grammar_match(g, ok, strlen(ok)), "long case %zu: %zu fill characters rejected", i, longs[i].ok);
        CHECKF(!grammar_match(g, bad, strlen(bad)), "long case %zu: %zu fill characters accepted", i, longs[i].too_long);
        free(ok), free(bad);
        grammar_free(g);
    }
    /* the allOf shape's grammar is one counted repetition, not a rule per length */
    char *gbnf = NULL;
    const char *send = "{\"type\":\"string\",\"allOf\":[{\"pattern\":\"^[^\\\\n\\\\r]*$\"},{\"pattern\":\"^[\\\\s\\\\S]{0,300}$\"}]}";
    CHECK(json_schema_to_gbnf(send, strlen(send), NULL, &gbnf) == DJ_OK && gbnf && strstr(gbnf, "{0,300}") &&
          !strstr(gbnf, "-s1 ::="));
    free(gbnf);
}

/* ---- random patterns, exhaustively over a small alphabet ---- */

/* A random regex over {a, b, c} in the supported subset (it may still be
 * refused: an unbounded repeat of something nullable). */
static void rand_regex(struct gen *g, char *out, size_t *n, size_t cap, int depth) {
#define PUT(s) do { const char *s_ = (s); size_t l_ = strlen(s_); if (*n + l_ < cap) memcpy(out + *n, s_, l_), *n += l_; } while (0)
    static const char *atoms[] = {"a", "b", "c", "[ab]", "[^a]", ".", "[b-c]", "\\w"};
    static const char *quants[] = {"", "", "", "*", "+", "?", "{2}", "{1,2}", "{0,3}", "{2,}"};
    int items = 1 + (int)(rnd(g) % 3);
    for (int i = 0; i < items; i++) {
        uint64_t k = rnd(g) % 10;
        if (k < 2 && depth < 3) {
            PUT(k ? "(?:" : "(");
            rand_regex(g, out, n, cap, depth + 1);
            if (rnd(g) % 3 == 0) {
                PUT("|");
                rand_regex(g, out, n, cap, depth + 1);
            }
            PUT(")");
        } else {
            PUT(atoms[rnd(g) % (sizeof atoms / sizeof atoms[0])]);
        }
        PUT(quants[rnd(g) % (sizeof quants / sizeof quants[0])]);
    }
#undef PUT
}

static void rand_pattern(struct gen *g, char *out, size_t cap) {
    size_t n = 0;
    int branches = 1 + (rnd(g) % 4 == 0);
    for (int b = 0; b < branches; b++) {
        if (b && n + 1 < cap) out[n++] = '|';
        if (rnd(g) % 2 && n + 1 < cap) out[n++] = '^';
        rand_regex(g, out, &n, cap - 2, 0);
        if (rnd(g) % 2 && n + 1 < cap) out[n++] = '$';
    }
    out[n] = 0;
}

/* Strings of a, b, c up to length 6 against schemas with one or two random
 * patterns and random length bounds (the automaton path): the grammar admits
 * exactly the strings PCRE2 finds every pattern in, within the bounds. */
static void test_random_intersections(void) {
    struct gen g = {.rng = 20240611};
    size_t n_schemas = 0, n_refused = 0, n_strings = 0;
    for (int t = 0; t < 160; t++) {
        char p1[256], p2[256];
        do rand_pattern(&g, p1, sizeof p1);
        while (strlen(p1) > 40);
        do rand_pattern(&g, p2, sizeof p2);
        while (strlen(p2) > 40);
        bool two = rnd(&g) % 2;
        long lo = rnd(&g) % 3 ? -1 : (long)(rnd(&g) % 4), hi = rnd(&g) % 3 ? -1 : (long)(rnd(&g) % 6);
        if (lo >= 0 && hi >= 0 && hi < lo) hi = lo + 1;
        if (!two && lo < 0 && hi < 0) hi = 5; /* one pattern alone is not the automaton path */
        json_t *s = json_pack("{s:s}", "type", "string");
        if (two) json_object_set_new(s, "allOf", json_pack("[{s:s},{s:s}]", "pattern", p1, "pattern", p2));
        else json_object_set_new(s, "pattern", json_string(p1));
        if (lo >= 0) json_object_set_new(s, "minLength", json_integer(lo));
        if (hi >= 0) json_object_set_new(s, "maxLength", json_integer(hi));
        char *gbnf = NULL;
        if (json_schema_to_gbnf_value(s, NULL, &gbnf) != DJ_OK) {
            /* allowed refusals: a nullable unbounded repeat, or no string at all (checked below) */
            const char *e = dj_last_error();
            bool nullable = strstr(e, "can be empty") != NULL, empty = strstr(e, "no string satisfies") != NULL;
            CHECKF(nullable || empty || strstr(e, "more than 4096 states"), "random %d: %s", t, e);
            n_refused++;
            if (!empty) {
                json_decref(s);
                continue;
            }
        }
        struct dj_grammar *gr = gbnf ? parse_gbnf(gbnf) : NULL;
        CHECKF(!gbnf || gr, "random %d: grammar does not parse", t);
        if (!gr && gbnf) {
            free(gbnf);
            json_decref(s);
            continue;
        }
        free(gbnf);
        pcre2_code *r1 = regex_compile(p1), *r2 = regex_compile(p2);
        CHECK(r1 && r2);
        struct dj_gmatch *m0 = NULL;
        CHECK(!gr || gmatch_create(gr, &m0) == DJ_OK);
        n_schemas += gr != NULL;
        /* every string over {a,b,c} of length 0..6 */
        for (int len = 0; len <= 6; len++) {
            size_t total = 1;
            for (int i = 0; i < len; i++) total *= 3;
            for (size_t code = 0; code < total; code++) {
                char str[16], text[20];
                size_t c = code;
                for (int i = 0; i < len; i++) str[i] = (char)('a' + c % 3), c /= 3;
                str[len] = 0;
                bool want = (lo < 0 || len >= lo) && (hi < 0 || len <= hi) && r1 && regex_match(r1, str, (size_t)len) &&
                            (!two || (r2 && regex_match(r2, str, (size_t)len)));
                snprintf(text, sizeof text, "\"%s\"", str);
                bool got = gm_match(m0, text, strlen(text));
                CHECKF(got == want, "random %d: /%s/%s%s min %ld max %ld: \"%s\" %s", t, p1, two ? " and /" : "", two ? p2 : "",
                       lo, hi, str, want ? "rejected" : "accepted");
                n_strings++;
                if (got != want) len = 7, code = total; /* one report per schema */
            }
        }
        gmatch_free(m0);
        grammar_free(gr);
        pcre2_code_free(r1), pcre2_code_free(r2);
        json_decref(s);
    }
    printf("random patterns: %zu schemas checked on every string of a, b, c up to length 6 (%zu strings), %zu refused\n",
           n_schemas, n_strings, n_refused);
}

/* Each format as its own rule (the regex written as GBNF) and through the
 * automata (with a maxLength that is not redundant): the same strings up to
 * that length.  Sentences of each grammar are matched by the other. */
static void test_formats_two_ways(void) {
    static const char *formats[] = {"date", "time", "date-time", "uuid", "ipv4", "ipv6", "email", "hostname", "uri",
                                    "uri-reference"};
    size_t n_cross = 0;
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        char sa[128], sb[160];
        /* the uri and address formats' grammars grow with maxLength (a rule per state and length): kept short */
        size_t max = f >= 5 ? 24 : 40;
        snprintf(sa, sizeof sa, "{\"type\":\"string\",\"format\":\"%s\"}", formats[f]);
        snprintf(sb, sizeof sb, "{\"type\":\"string\",\"format\":\"%s\",\"minLength\":2,\"maxLength\":%zu}", formats[f], max);
        struct dj_grammar *ga = grammar_of(sa), *gb = grammar_of(sb);
        CHECKF(ga && gb, "format %s: %s", formats[f], dj_last_error());
        struct dj_gmatch *ma = NULL, *mb = NULL;
        CHECK(!ga || gmatch_create(ga, &ma) == DJ_OK);
        CHECK(!gb || gmatch_create(gb, &mb) == DJ_OK);
        for (int which = 0; ga && gb && which < 2; which++) {
            struct dj_grammar *from = which ? gb : ga;
            const struct dj_gmatch *to = which ? ma : mb;
            struct gen gen = {.g = from, .rng = 77 + f * 2 + (uint64_t)which, .cap = 1 << 12};
            gen.cost = malloc(from->n_rules * sizeof *gen.cost);
            gen.out = malloc(gen.cap);
            gen_costs(&gen);
            for (int i = 0; i < 200; i++) {
                gen.n = 0, gen.too_long = false;
                gen_rule(&gen, from->root, 0);
                if (gen.too_long) continue;
                json_t *v = json_loadb(gen.out, gen.n, JSON_DECODE_ANY, NULL);
                size_t len = v ? n_cp(json_string_value(v), json_string_length(v)) : 0;
                json_decref(v);
                bool in = len >= 2 && len <= max;
                if (!which && !in) continue; /* longer than the second grammar allows */
                CHECKF(which ? in : true, "format %s with maxLength: sentence of %zu characters", formats[f], len);
                CHECKF(gm_match(to, gen.out, gen.n), "format %s: %s sentence not in the %s grammar: %.*s", formats[f],
                       which ? "automaton" : "direct", which ? "direct" : "automaton", (int)gen.n, gen.out);
                n_cross++;
            }
            free(gen.cost), free(gen.out);
        }
        gmatch_free(ma), gmatch_free(mb);
        grammar_free(ga), grammar_free(gb);
    }
    printf("formats: %zu sentences matched by both the direct and the automaton grammar\n", n_cross);
}

/* Tool-call grammars for tools of the agents' shapes, every mode and format. */
static void test_agent_tools(void) {
    const char *tools =
        "[{\"type\":\"function\",\"function\":{\"name\":\"SendMessage\",\"parameters\":{\"$schema\":\"https://json-schema.org/"
        "draft/2020-12/schema\",\"type\":\"object\",\"properties\":{\"to\":{\"type\":\"string\",\"allOf\":[{\"pattern\":\"^[^\\\\n"
        "\\\\r]*$\"},{\"pattern\":\"^[\\\\s\\\\S]{0,300}$\"}]},\"summary\":{\"type\":\"string\",\"maxLength\":200},\"message\":{"
        "\"default\":\"\",\"type\":\"string\"}},\"required\":[\"to\",\"message\"],\"additionalProperties\":false}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"WebFetch\",\"parameters\":{\"type\":\"object\",\"properties\":{\"url\":{"
        "\"type\":\"string\",\"format\":\"uri\"},\"offset\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9007199254740991}},"
        "\"required\":[\"url\"],\"additionalProperties\":false}}},"
        "{\"type\":\"function\",\"name\":\"Workflow\",\"parameters\":{\"type\":\"object\",\"properties\":{\"script\":{\"type\":"
        "\"string\",\"maxLength\":524288},\"resumeFromRunId\":{\"type\":\"string\",\"pattern\":\"^wf_[a-z0-9-]{6,}$\"}},"
        "\"additionalProperties\":false}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"agent\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"fork_turns\":{\"oneOf\":[{\"type\":\"string\",\"enum\":[\"all\"]},{\"type\":\"string\",\"pattern\":\"^[1-9][0-9]*$\"}]}"
        ",\"fork_profile\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":50}},\"required\":[\"fork_turns\"]}}}]";
    size_t n = 0;
    for (int ws = 0; ws < 3; ws++)
        for (int fmt = 0; fmt < 2; fmt++)
            for (int choice = 0; choice < 4; choice++) {
                struct dj_toolcall_opts o = toolcall_default_opts();
                o.schema.whitespace = (enum dj_json_ws)ws, o.format = (enum dj_tool_format)fmt;
                o.choice = (enum dj_tool_choice)choice, o.name = "WebFetch";
                struct dj_toolcall_grammar tg = {0};
                CHECKF(toolcall_grammar_build(tools, strlen(tools), &o, &tg) == DJ_OK, "agent tools ws %d fmt %d: %s", ws, fmt,
                       dj_last_error());
                for (int lazy = 0; lazy < 2 && tg.gbnf; lazy++) {
                    struct dj_grammar *g = parse_gbnf(lazy ? tg.lazy_gbnf : tg.gbnf);
                    CHECK(g != NULL);
                    n += g != NULL;
                    grammar_free(g);
                }
                toolcall_grammar_free(&tg);
            }
    struct dj_toolcall_opts o = toolcall_default_opts();
    struct dj_toolcall_grammar tg = {0};
    CHECK(toolcall_grammar_build(tools, strlen(tools), &o, &tg) == DJ_OK);
    struct dj_grammar *g = tg.gbnf ? parse_gbnf(tg.gbnf) : NULL;
    const char *ok = "<tool_call>\n{\"name\": \"SendMessage\", \"arguments\": {\"to\": \"team-lead\", \"message\": \"hi\"}}\n"
                     "</tool_call>\n<tool_call>\n{\"name\": \"WebFetch\", \"arguments\": {\"url\": \"https://example.com/a?b#c\"}}\n"
                     "</tool_call>";
    const char *bad1 = "<tool_call>\n{\"name\": \"SendMessage\", \"arguments\": {\"to\": \"a\\nb\", \"message\": \"hi\"}}\n</tool_call>";
    const char *bad2 = "<tool_call>\n{\"name\": \"WebFetch\", \"arguments\": {\"url\": \"example.com\"}}\n</tool_call>";
    CHECK(g && grammar_match(g, ok, strlen(ok)));
    CHECK(g && !grammar_match(g, bad1, strlen(bad1)) && !grammar_match(g, bad2, strlen(bad2)));
    grammar_free(g);
    toolcall_grammar_free(&tg);
    printf("agent-shaped tools: %zu tool-call grammars parsed\n", n);
}

/* a few texts in the other whitespace modes */
static void test_whitespace(void) {
    json_t *s = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}},"
                           "\"b\":{\"type\":\"object\"}},\"required\":[\"a\"],\"additionalProperties\":false}",
                           0, NULL);
    struct dj_grammar *sp = schema_grammar(s, DJ_JSON_WS_SPACED), *fl = schema_grammar(s, DJ_JSON_WS_FLEXIBLE);
    const char *t1 = "{\"a\": [1, 2], \"b\": {\"x\": []}}", *t2 = "{ \"a\" :\n\t[ 1 ,2 ] ,\"b\":{ } }";
    CHECK(sp && grammar_match(sp, t1, strlen(t1)));
    CHECK(sp && !grammar_match(sp, t2, strlen(t2)));
    CHECK(fl && grammar_match(fl, t1, strlen(t1)) && grammar_match(fl, t2, strlen(t2)));
    const char *t3 = "{\"a\":[1                     ]}"; /* 21 spaces: over the bound of 20 */
    CHECK(fl && !grammar_match(fl, t3, strlen(t3)));
    grammar_free(sp), grammar_free(fl);
    json_decref(s);
}

/* tool-call grammars on small hand-made tools */
static void test_toolcall(void) {
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"C\",\"F\"]}},\"required\":[\"city\"]}}},"
                        "{\"type\":\"function\",\"function\":{\"name\":\"noargs\"}}]";
    struct dj_toolcall_opts o = toolcall_default_opts();
    struct dj_toolcall_grammar tg = {0};
    CHECK(toolcall_grammar_build(tools, strlen(tools), &o, &tg) == DJ_OK);
    struct dj_grammar *full = tg.gbnf ? parse_gbnf(tg.gbnf) : NULL, *lazy = tg.lazy_gbnf ? parse_gbnf(tg.lazy_gbnf) : NULL;
    const char *ok[] = {
        "",
        "Just text, no call. <tool_ca",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"C\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"noargs\", \"arguments\": {}}\n</tool_call>",
    };
    const char *bad[] = {
        "text <tool_call> more text",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"noargs\", \"arguments\": {\"x\": 1}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"noargs\", \"arguments\": {}}\n</tool_call> trailing",
    };
    for (size_t i = 0; full && i < sizeof ok / sizeof ok[0]; i++) CHECKF(grammar_match(full, ok[i], strlen(ok[i])), "%s", ok[i]);
    for (size_t i = 0; full && i < sizeof bad / sizeof bad[0]; i++) CHECKF(!grammar_match(full, bad[i], strlen(bad[i])), "%s", bad[i]);
    const char *l = "\n{\"name\": \"noargs\", \"arguments\": {}}\n</tool_call>";
    CHECK(lazy && grammar_match(lazy, l, strlen(l)));
    grammar_free(full), grammar_free(lazy);
    toolcall_grammar_free(&tg);
    /* named, one call, json format */
    o.choice = DJ_TOOL_NAMED, o.name = "get_weather", o.parallel = false, o.format = DJ_TOOL_FORMAT_JSON;
    o.schema.whitespace = DJ_JSON_WS_COMPACT;
    CHECK(toolcall_grammar_build(tools, strlen(tools), &o, &tg) == DJ_OK);
    full = parse_gbnf(tg.gbnf), lazy = parse_gbnf(tg.lazy_gbnf);
    const char *j1 = "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\"}}", *j2 = "{\"name\":\"noargs\",\"arguments\":{}}";
    CHECK(full && grammar_match(full, j1, strlen(j1)) && !grammar_match(full, j2, strlen(j2)));
    CHECK(lazy && !strcmp(tg.trigger, "{") && grammar_match(lazy, j1 + 1, strlen(j1) - 1));
    grammar_free(full), grammar_free(lazy);
    toolcall_grammar_free(&tg);
    /* parallel json: an array */
    o.choice = DJ_TOOL_REQUIRED, o.parallel = true;
    CHECK(toolcall_grammar_build(tools, strlen(tools), &o, &tg) == DJ_OK);
    full = parse_gbnf(tg.gbnf);
    char arr[256];
    snprintf(arr, sizeof arr, "[%s,%s]", j1, j2);
    CHECK(full && grammar_match(full, arr, strlen(arr)) && !grammar_match(full, j1, strlen(j1)));
    grammar_free(full);
    toolcall_grammar_free(&tg);
    /* errors */
    o.choice = DJ_TOOL_NAMED, o.name = "missing";
    CHECK(toolcall_grammar_build(tools, strlen(tools), &o, &tg) == DJ_ERR_INVALID);
    CHECK(!strcmp(dj_last_error(), "tools: tool_choice names 'missing', which is not among the tools"));
    const char *dup = "[{\"function\":{\"name\":\"a\"}},{\"name\":\"a\"}]";
    o = toolcall_default_opts();
    CHECK(toolcall_grammar_build(dup, strlen(dup), &o, &tg) == DJ_ERR_INVALID);
    CHECK(!strcmp(dj_last_error(), "tools: two tools are named 'a'"));
    const char *badp = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
                       "{\"q\":{\"not\":{}}}}}}]";
    CHECK(toolcall_grammar_build(badp, strlen(badp), &o, &tg) == DJ_ERR_INVALID);
    CHECKF(!strcmp(dj_last_error(), "tools: f: json schema: unsupported keyword 'not' at /properties/q"), "%s",
           dj_last_error());
}

/* Refused schemas keep their message through the wrappers the server puts around it
 * (server_chat.c: `dj_fail(st, "%s", dj_last_error())` for tools, "response_format: %s"):
 * these 400s once said nothing, as dj_fail formatted the shared buffer into itself. */
static void test_wrapped_messages(void) {
    static const struct {
        const char *params, *msg;
    } tools[] = {
        {"{\"$ref\":\"#/x\"}", "tools: f: json schema: $ref '#/x' does not resolve at /"},
        {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"string\",\"pattern\":\"((((\"}}}",
         "tools: f: json schema: pattern: missing ')' (at character 4) at /properties/p/pattern"},
    };
    for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
        char t[512];
        snprintf(t, sizeof t, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":%s}}]", tools[i].params);
        struct dj_toolcall_opts o = toolcall_default_opts();
        o.choice = DJ_TOOL_REQUIRED;
        struct dj_toolcall_grammar tg = {0};
        dj_clear_error();
        enum dj_status st = toolcall_grammar_build(t, strlen(t), &o, &tg);
        CHECK(st == DJ_ERR_INVALID);
        CHECKF(!strcmp(dj_last_error(), tools[i].msg), "%s: %s", tools[i].params, dj_last_error());
        CHECK(dj_fail(st, "%s", dj_last_error()) == DJ_ERR_INVALID);
        CHECKF(!strcmp(dj_last_error(), tools[i].msg), "wrapped: %s", dj_last_error());
    }
    static const struct {
        const char *schema, *msg;
    } formats[] = {
        {"{\"$ref\":\"#/x\"}", "response_format: json schema: $ref '#/x' does not resolve at /"},
        {"{\"type\":\"string\",\"pattern\":\"((((\"}",
         "response_format: json schema: pattern: missing ')' (at character 4) at /pattern"},
    };
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        char *g = NULL;
        dj_clear_error();
        enum dj_status st = json_schema_to_gbnf(formats[i].schema, strlen(formats[i].schema), NULL, &g);
        CHECK(st == DJ_ERR_INVALID && !g);
        CHECK(dj_fail(st, "response_format: %s", dj_last_error()) == DJ_ERR_INVALID);
        CHECKF(!strcmp(dj_last_error(), formats[i].msg), "%s: %s", formats[i].schema, dj_last_error());
    }
}

/* ---- (e) limits: conversion is bounded in time and memory ---- */

/* CPU seconds of this process (the conversions are single-threaded). */
static double cpu_s(void) { return (double)clock() / CLOCKS_PER_SEC; }

#ifdef DJ_SANITIZE_BUILD
#define LIMIT_S 5.0 /* ASan/UBSan at -O0: several times slower */
#else
#define LIMIT_S 1.0
#endif

/* {"type":"object","properties":{"p0": one, "p1": one, ...}} with n copies of schema one. */
static json_t *props_of(size_t n, json_t *one) {
    json_t *props = json_object();
    for (size_t i = 0; i < n; i++) {
        char k[32];
        snprintf(k, sizeof k, "p%zu", i);
        json_object_set(props, k, one);
    }
    json_decref(one);
    return json_pack("{s:s, s:o}", "type", "object", "properties", props);
}

/* An enum of n strings "v0".."v<n-1>" (a new array). */
static json_t *enum_of(size_t n) {
    json_t *e = json_array();
    for (size_t i = 0; i < n; i++) {
        char v[32];
        snprintf(v, sizeof v, "v%zu", i);
        json_array_append_new(e, json_string(v));
    }
    return e;
}

/* Converts s (stolen): the status, *sec the CPU seconds it took, *gbnf_out (may be NULL) the grammar. */
static enum dj_status convert_timed(json_t *s, double *sec, char **gbnf_out) {
    char *g = NULL;
    double t0 = cpu_s();
    enum dj_status st = json_schema_to_gbnf_value(s, NULL, &g);
    *sec = cpu_s() - t0;
    json_decref(s);
    if (gbnf_out) *gbnf_out = g;
    else free(g);
    return st;
}

static void test_limits(void) {
    double sec;
    /* a 50,000-value enum: refused at once (it took 10 s of pairwise comparisons, then its
     * 50,000 alternatives overflowed the grammar matcher's 4096 stacks) */
    json_t *big = json_pack("{s:s, s:{s:{s:s, s:o}}}", "type", "object", "properties", "mode", "type", "string", "enum",
                            enum_of(50000));
    CHECK(convert_timed(json_incref(big), &sec, NULL) == DJ_ERR_INVALID);
    CHECKF(!strcmp(dj_last_error(), "json schema: 'enum' has 50000 values, over the limit of 1024 at /properties/mode"),
           "%s", dj_last_error());
    CHECKF(sec < LIMIT_S, "a 50,000-value enum: %.2f s to refuse", sec);
    /* the same as a tool's parameters: the tool's name and the pointer */
    json_t *tools = json_pack("[{s:s, s:{s:s, s:O}}]", "type", "function", "function", "name", "pick", "parameters", big);
    struct dj_toolcall_opts to = toolcall_default_opts();
    to.choice = DJ_TOOL_REQUIRED;
    struct dj_toolcall_grammar tg = {0};
    CHECK(toolcall_grammar_build_value(tools, &to, &tg) == DJ_ERR_INVALID);
    CHECKF(!strcmp(dj_last_error(),
                   "tools: pick: json schema: 'enum' has 50000 values, over the limit of 1024 at /properties/mode"),
           "%s", dj_last_error());
    json_decref(tools), json_decref(big);

    /* at the limit: 1024 values convert fast, and the grammar matcher takes them (in flexible
     * whitespace, where the value follows optional blanks) */
    json_t *at = json_pack("{s:s, s:{s:{s:o}}, s:[s]}", "type", "object", "properties", "mode", "enum", enum_of(1024),
                           "required", "mode");
    struct dj_grammar *g = schema_grammar(at, DJ_JSON_WS_FLEXIBLE);
    CHECK(g != NULL);
    const char *t1 = "{ \"mode\": \"v1023\" }", *t2 = "{\"mode\":\"v1024\"}";
    CHECK(g && grammar_match(g, t1, strlen(t1)) && !grammar_match(g, t2, strlen(t2)));
    grammar_free(g);
    /* repeats are dropped with json_equal's meaning: member order, 0.0 and -0.0 alike; 1 and 1.0 differ */
    char *gbnf = NULL;
    const char *rep = "{\"enum\":[\"a\",\"b\",\"a\",{\"x\":1,\"y\":[2]},{\"y\":[2],\"x\":1},0.0,-0.0,1,1.0,null,null]}";
    CHECK(json_schema_to_gbnf(rep, strlen(rep), NULL, &gbnf) == DJ_OK);
    size_t n_alt = 0;
    for (const char *p = gbnf ? strstr(gbnf, "root ::=") : NULL; p && *p && *p != '\n'; p++) n_alt += *p == '|';
    CHECKF(n_alt + 1 == 7, "%zu alternatives: %s", n_alt + 1, gbnf ? gbnf : "");
    free(gbnf);
    json_decref(at);

    /* 9000 optional properties (under MAX_SCHEMAS): each object tail rule asks for the same
     * name, and trying name1, name2, ... each time made this quadratic (7 s) */
    CHECK(convert_timed(props_of(9000, json_pack("{s:s}", "type", "string")), &sec, NULL) == DJ_OK);
    CHECKF(sec < LIMIT_S, "9000 optional properties: %.2f s", sec);
    /* ... and as many required ones */
    json_t *req = json_array(), *s = props_of(9000, json_pack("{s:s}", "type", "integer"));
    for (size_t i = 0; i < 9000; i++) {
        char k[32];
        snprintf(k, sizeof k, "p%zu", i);
        json_array_append_new(req, json_string(k));
    }
    json_object_set_new(s, "required", req);
    CHECK(convert_timed(s, &sec, NULL) == DJ_OK);
    CHECKF(sec < LIMIT_S, "9000 required properties: %.2f s", sec);

    /* a small schema that multiplies: 100 properties merged into each of 1000 anyOf branches
     * (23 KB of JSON made a 22 MB grammar and 340 MB of memory) */
    json_t *props = json_object(), *alts = json_array();
    for (size_t i = 0; i < 100; i++) {
        char k[32];
        snprintf(k, sizeof k, "p%zu", i);
        json_object_set_new(props, k, json_pack("{s:s}", "type", "string"));
    }
    for (size_t i = 0; i < 1000; i++) {
        char k[32];
        snprintf(k, sizeof k, "p%zu", i % 100);
        json_array_append_new(alts, json_pack("{s:[s]}", "required", k));
    }
    CHECK(convert_timed(json_pack("{s:o, s:o}", "properties", props, "anyOf", alts), &sec, NULL) == DJ_ERR_INVALID);
    CHECKF(!strcmp(dj_last_error(), "json schema: over the limit of 10000 schemas converted into one grammar (each "
                                    "property, item, anyOf branch and $ref target counts, and each copy that merging "
                                    "allOf or anyOf siblings makes) at /anyOf/99"),
           "%s", dj_last_error());
    CHECKF(sec < LIMIT_S, "anyOf x 100 siblings: %.2f s to refuse", sec);

    /* strings whose automata are large but whose rules are small (each about 5 ms and 1 KB):
     * 500 of them took 2.3 s */
    CHECK(convert_timed(props_of(500, json_pack("{s:s, s:[{s:s}, {s:s}]}", "type", "string", "allOf", "pattern",
                                                "^(x|[ab]*a[ab]{10}c)$", "pattern", "^[x-z]*$")),
                        &sec, NULL) == DJ_ERR_INVALID);
    CHECKF(!strcmp(dj_last_error(), "json schema: pattern '^(x|[ab]*a[ab]{10}c)$', pattern '^[x-z]*$': the string "
                                    "automata of this grammar would be over the limit of 131072 states and rules in "
                                    "all at /properties/p63"),
           "%s", dj_last_error());
    CHECKF(sec < LIMIT_S, "500 costly strings: %.2f s to refuse", sec);

    /* the grammar's text: format "uri" with maxLength 55 is 8192 rules, 490 KB of rule bodies each */
    CHECK(convert_timed(props_of(20, json_pack("{s:s, s:s, s:i}", "type", "string", "format", "uri", "maxLength", 55)),
                        &sec, NULL) == DJ_ERR_INVALID);
    CHECKF(!strcmp(dj_last_error(), "json schema: the grammar would be over the limit of 4 MB at /properties/p8"), "%s",
           dj_last_error());
    CHECKF(sec < LIMIT_S, "20 uri strings: %.2f s to refuse", sec);
}

/* ---- (d) errors ---- */

static void test_errors(void) {
    static const struct {
        const char *schema, *msg;
    } errs[] = {
        {"{\"type\":\"object\",\"properties\":{\"foo\":{\"patternProperties\":{}}}}",
         "json schema: unsupported keyword 'patternProperties' at /properties/foo"},
        {"{\"not\":{}}", "json schema: unsupported keyword 'not' at /"},
        {"{\"type\":\"object\",\"properties\":{\"m\":{\"propertyNames\":{\"maxLength\":3}}}}",
         "json schema: unsupported keyword 'propertyNames' (only one that every key satisfies) at /properties/m"},
        {"{\"items\":{\"multipleOf\":2}}", "json schema: unsupported keyword 'multipleOf' at /items"},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"uniqueItems\":true}]}", "json schema: unsupported keyword 'uniqueItems' (true) at /anyOf/1"},
        {"{\"prefixItems\":[{},{\"contains\":{}}]}", "json schema: unsupported keyword 'contains' at /prefixItems/1"},
        {"{\"$defs\":{\"a\":{\"if\":{}}},\"properties\":{\"x\":{\"$ref\":\"#/$defs/a\"}}}", "json schema: unsupported keyword 'if' at /$defs/a"},
        {"{\"type\":\"number\",\"minimum\":0.5}",
         "json schema: 'minimum' 0.5 on type 'number': only integral bounds are supported at /"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":3,\"maximum\":3}", "json schema: no number lies between the bounds at /"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "json schema: pattern: backreferences are not supported (at character 4) at /pattern"},
        {"{\"type\":\"string\",\"pattern\":\"a(?=b)\"}",
         "json schema: pattern: lookaround or '(?' group is not supported (at character 2) at /pattern"},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}",
         "json schema: pattern: '^' only at the start of the pattern or of a top-level alternative (at character 1) at /pattern"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\bword\"}", "json schema: pattern: word boundary \\b is not supported (at character 1) at /pattern"},
        {"{\"type\":\"string\",\"pattern\":\"(a*)*\"}",
         "json schema: pattern: an unbounded repetition of something that can be empty (at character 5) at /pattern"},
        {"{\"type\":\"string\",\"format\":\"iri\"}", "json schema: unsupported format 'iri' at /"},
        {"{\"type\":\"string\",\"format\":\"idn-hostname\",\"maxLength\":3}", "json schema: unsupported format 'idn-hostname' at /"},
        {"{\"type\":\"string\",\"pattern\":\"^abc$\",\"minLength\":4}",
         "json schema: no string satisfies pattern '^abc$', minLength 4 at /"},
        {"{\"type\":\"string\",\"allOf\":[{\"pattern\":\"^[a-z]*$\"},{\"pattern\":\"[0-9]\"}]}",
         "json schema: no string satisfies pattern '^[a-z]*$', pattern '[0-9]' at /"},
        {"{\"type\":\"string\",\"pattern\":\"^[0-9]{2,3}$\",\"minLength\":4}",
         "json schema: no string satisfies pattern '^[0-9]{2,3}$', minLength 4 at /"},
        {"{\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"^[a-z]+(-[a-z]+)*$\",\"maxLength\":524288}}}",
         "json schema: pattern '^[a-z]+(-[a-z]+)*$', maxLength 524288: the exact grammar would need more than 8192 rules (an "
         "automaton of 2 states, lengths counted one by one) at /properties/s"},
        {"{\"type\":\"string\",\"pattern\":\"^[ab]*a[ab]{20}$\",\"maxLength\":100}",
         "json schema: pattern '^[ab]*a[ab]{20}$', maxLength 100: the automaton would need more than 4096 states at /"},
        {"{\"type\":\"string\",\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"(b\"}]}",
         "json schema: pattern '(b': missing ')' (at character 2) at /"},
        {"{\"type\":\"string\",\"pattern\":\"(b\",\"maxLength\":3}", "json schema: pattern: missing ')' (at character 2) at /pattern"},
        {"{\"enum\":[\"a\"],\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}]}",
         "json schema: 'enum' together with 'pattern' is not supported at /"},
        {"{\"$ref\":\"https://example.com/s.json\"}", "json schema: only local $ref (\"#...\") are supported, not 'https://example.com/s.json' at /"},
        {"{\"$ref\":\"#/$defs/missing\"}", "json schema: $ref '#/$defs/missing' does not resolve at /"},
        {"{\"$ref\":\"#\"}", "json schema: $ref '#' refers to itself before any text (left recursion) at /"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "json schema: no integer lies between the minimum 5 and the maximum 4 at /"},
        {"{\"type\":\"integer\",\"minimum\":1e300}", "json schema: 'minimum' 1e+300 is out of the supported integer range at /"},
        {"{\"type\":\"strin\"}", "json schema: 'type' must be a type name or an array of them at /"},
        {"{\"required\":[1]}", "json schema: 'required' must be an array of strings at /"},
        {"{\"properties\":{\"a\":5}}", "json schema: a schema must be an object or a boolean at /properties/a"},
        {"{\"enum\":[1,2],\"type\":\"string\"}", "json schema: no value of 'enum' is allowed by the rest of the schema at /"},
        {"{\"enum\":[\"a\"],\"minLength\":3}", "json schema: 'enum' together with 'minLength' is not supported at /"},
        {"{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "json schema: allOf: the components' types have nothing in common at /"},
        {"{\"allOf\":[{\"minimum\":1},{\"const\":2}]}", "json schema: 'enum' together with 'minimum' is not supported at /"},
        {"{\"allOf\":[{\"prefixItems\":[{}]},{\"prefixItems\":[{},{}]}]}",
         "json schema: allOf: components with different 'prefixItems' cannot be merged at /"},
        {"{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"],\"additionalProperties\":false}",
         "json schema: required property 'x' is not in properties and additionalProperties is false at /"},
        {"{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", "json schema: minItems 2 exceeds the items possible at /"},
        {"false", "json schema: the schema false matches nothing at /"},
        {"{\"type\":", "json schema: line 1, column 8: unexpected token near end of file"},
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        char *g = NULL;
        enum dj_status st = json_schema_to_gbnf(errs[i].schema, strlen(errs[i].schema), NULL, &g);
        CHECKF(st != DJ_OK && !g, "%s converted", errs[i].schema);
        CHECKF(!strcmp(dj_last_error(), errs[i].msg), "%s:\n  got  %s\n  want %s", errs[i].schema, dj_last_error(), errs[i].msg);
        free(g);
    }
    /* deep nesting is an error, never a crash */
    size_t depth = 5000;
    char *deep = malloc(depth * 12 + 8), *p = deep;
    for (size_t i = 0; i < depth; i++) p += sprintf(p, "{\"items\":");
    p += sprintf(p, "{}");
    for (size_t i = 0; i < depth; i++) *p++ = '}';
    *p = 0;
    char *g = NULL;
    CHECK(json_schema_to_gbnf(deep, strlen(deep), NULL, &g) != DJ_OK && !g);
    free(deep);
    printf("errors: %zu messages exact\n", sizeof errs / sizeof errs[0]);
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    test_errors();
    test_wrapped_messages();
    test_limits();
    test_whitespace();
    test_toolcall();
    test_cases();
    test_long_strings();
    test_random_intersections();
    test_formats_two_ways();
    test_agent_tools();
    test_traces(shared);
    printf("generated %zu sentences, %zu valid JSON instances (skipped: %zu with a repeated additional key, %zu "
           "beyond jansson's limits, %zu over 64 KB)\n",
           stats.generated, stats.valid, stats.skipped_dup, stats.skipped_num, stats.skipped_long);
    TEST_END();
}
