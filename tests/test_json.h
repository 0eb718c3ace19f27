/*
 * test_json.h — just enough JSON reading for the golden files in ../shared
 * (flat objects written by Python's json module): a string value by key and
 * an array of integers by key.  Tests only; the engine uses a real parser.
 */
#ifndef DJ_TEST_JSON_H
#define DJ_TEST_JSON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Decodes the JSON string value of "key" in doc (\n, \", \\, \t, \uXXXX BMP). */
static inline char *json_string(const char *doc, const char *key) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(doc, pat);
    if (!p) return NULL;
    p += strlen(pat);
    char *s = malloc(strlen(p) + 1), *o = s;
    while (*p && *p != '"') {
        if (*p != '\\') { *o++ = *p++; continue; }
        p++;
        switch (*p) {
        case 'n': *o++ = '\n'; p++; break;
        case 't': *o++ = '\t'; p++; break;
        case 'r': *o++ = '\r'; p++; break;
        case 'u': {
            unsigned cp = (unsigned)strtoul((char[5]){p[1], p[2], p[3], p[4], 0}, NULL, 16);
            p += 5;
            if (cp < 0x80) *o++ = (char)cp;
            else if (cp < 0x800) { *o++ = (char)(0xc0 | cp >> 6); *o++ = (char)(0x80 | (cp & 63)); }
            else { *o++ = (char)(0xe0 | cp >> 12); *o++ = (char)(0x80 | ((cp >> 6) & 63)); *o++ = (char)(0x80 | (cp & 63)); }
            break;
        }
        default: *o++ = *p++; break;
        }
    }
    *o = '\0';
    return s;
}

/* The ids of "key": [a, b, ...] as a space-separated string. */
static inline char *json_ids(const char *doc, const char *key) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": [", key);
    const char *p = strstr(doc, pat);
    if (!p) return NULL;
    p += strlen(pat);
    char *s = malloc(strlen(p) + 1), *o = s;
    while (*p && *p != ']') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) { p++; continue; }
        o += sprintf(o, o == s ? "%ld" : " %ld", v);
        p = end;
    }
    *o = '\0';
    return s;
}

/* The integers of "key": [a, b, ...]; returns the count, *out malloc'd. */
static inline size_t json_int_array(const char *doc, const char *key, int **out) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": [", key);
    const char *p = strstr(doc, pat);
    *out = NULL;
    if (!p) return 0;
    p += strlen(pat);
    size_t n = 0, cap = 64;
    int *v = malloc(cap * sizeof *v);
    while (*p && *p != ']') {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) { p++; continue; }
        if (n == cap) v = realloc(v, (cap *= 2) * sizeof *v);
        v[n++] = (int)x;
        p = end;
    }
    *out = v;
    return n;
}

#endif
