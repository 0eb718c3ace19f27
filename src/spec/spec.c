/*
 * spec.c — names, parameters and counters shared by the draft sources
 * (spec.h).
 */
#include <string.h>

#include "core/status.h"
#include "spec/spec.h"

static const char *const src_names[DJ_SPEC_N_SRC] = {"grammar", "lookup", "memo", "exit", "mtp"};

const char *spec_src_name(enum dj_spec_src src) { return src < DJ_SPEC_N_SRC ? src_names[src] : "?"; }

bool spec_parse_sources(const char *s, unsigned *bits) {
    unsigned b = 0;
    if (!s) return false;
    if (!strcmp(s, "none") || !*s) {
        *bits = 0;
        return true;
    }
    if (!strcmp(s, "all")) {
        *bits = DJ_SPEC_BIT(DJ_SPEC_LOOKUP) | DJ_SPEC_BIT(DJ_SPEC_MEMO) | DJ_SPEC_BIT(DJ_SPEC_EXIT);
        return true;
    }
    while (*s) {
        const char *e = strchr(s, ',');
        const size_t n = e ? (size_t)(e - s) : strlen(s);
        bool found = false;
        for (int i = DJ_SPEC_LOOKUP; i < DJ_SPEC_N_SRC; i++)
            if (strlen(src_names[i]) == n && !strncmp(s, src_names[i], n)) {
                b |= DJ_SPEC_BIT(i);
                found = true;
            }
        if (!found) {
            dj_fail(DJ_ERR_INVALID, "unknown draft source '%.*s' (lookup, memo, exit, mtp, all, none)", (int)n, s);
            return false;
        }
        s += n;
        if (*s == ',') s++;
    }
    *bits = b;
    return true;
}

struct dj_spec_params spec_default_params(void) {
    struct dj_spec_params p = {0, 16, 0, true};
    return p;
}

void spec_counts_add(struct dj_spec_counts *to, const struct dj_spec_counts *from) {
    for (int i = 0; i < DJ_SPEC_N_SRC; i++) {
        to->drafted[i] += from->drafted[i];
        to->accepted[i] += from->accepted[i];
        to->rounds[i] += from->rounds[i];
        to->proposed[i] += from->proposed[i];
    }
    for (int j = 0; j < DJ_SPEC_POS_MAX; j++) {
        to->pos_drafted[j] += from->pos_drafted[j];
        to->pos_accepted[j] += from->pos_accepted[j];
    }
}
