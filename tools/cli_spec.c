/*
 * cli_spec.c — the speculative-decoding options and counters shared by
 * `deja run`, `deja replay` and `deja serve` (cli.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/status.h"
#include "spec/spec.h"

static bool exit_layer_given; /* --draft-exit-layer seen (for cli_spec_check) */

bool cli_spec_opt(const char *cmd, int argc, char **argv, int *i, struct dj_spec_params *sp, bool *ok) {
    const char *a = argv[*i];
    *ok = true;
    if (!strcmp(a, "--spec")) {
        sp->sources = DJ_SPEC_BIT(DJ_SPEC_LOOKUP) | DJ_SPEC_BIT(DJ_SPEC_MEMO);
        return true;
    }
    if (!strcmp(a, "--no-spec")) {
        sp->sources = 0;
        return true;
    }
    if (!strcmp(a, "--spec-fixed")) {
        sp->adaptive = false;
        return true;
    }
    if (strcmp(a, "--spec-sources") && strcmp(a, "--draft-max") && strcmp(a, "--draft-exit-layer")) return false;
    const char *v = cli_value(cmd, argc, argv, i);
    if (!v) {
        *ok = false;
        return true;
    }
    if (!strcmp(a, "--spec-sources")) {
        if (!spec_parse_sources(v, &sp->sources)) {
            cli_error(cmd, "--spec-sources: %s", dj_last_error());
            *ok = false;
        }
        return true;
    }
    if (!strcmp(a, "--draft-exit-layer")) exit_layer_given = true;
    if (!strcmp(a, "--draft-exit-layer") && !strcmp(v, "auto")) {
        sp->exit_layer = 0;
        return true;
    }
    char *end;
    errno = 0;
    const unsigned long n = strtoul(v, &end, 10);
    const unsigned long lo = 1, hi = !strcmp(a, "--draft-max") ? 63 : 100000;
    if (errno || end == v || *end || n < lo || n > hi) {
        cli_error(cmd, "%s: '%s' is not a number in [%lu, %lu]%s", a, v, lo, hi,
                  !strcmp(a, "--draft-exit-layer") ? " or auto" : "");
        *ok = false;
        return true;
    }
    if (!strcmp(a, "--draft-max")) sp->draft_max = (uint32_t)n;
    else sp->exit_layer = (uint32_t)n;
    return true;
}

void cli_spec_check(const char *cmd, const struct dj_spec_params *sp) {
    if (exit_layer_given && !(sp->sources & DJ_SPEC_BIT(DJ_SPEC_EXIT)))
        dj_log(DJ_LOG_WARN, "%s: --draft-exit-layer has no effect without the exit source (--spec-sources ...,exit)",
               cmd);
    if (!sp->sources && (!sp->adaptive || sp->draft_max != spec_default_params().draft_max))
        dj_log(DJ_LOG_WARN, "%s: --draft-max and --spec-fixed have no effect with speculation off (--spec)", cmd);
}

static void sources_str(FILE *f, unsigned bits) {
    bool first = true;
    fputc('"', f);
    for (int s = DJ_SPEC_LOOKUP; s < DJ_SPEC_N_SRC; s++)
        if (bits & DJ_SPEC_BIT(s)) {
            fprintf(f, "%s%s", first ? "" : ",", spec_src_name((enum dj_spec_src)s));
            first = false;
        }
    fputc('"', f);
}

void cli_spec_json(FILE *f, const struct dj_spec_params *sp, const struct dj_spec_counts *c, size_t n_gen,
                   uint64_t n_passes) {
    uint64_t d = 0, a = 0;
    for (int s = 0; s < DJ_SPEC_N_SRC; s++) {
        d += c->drafted[s];
        a += c->accepted[s];
    }
    fprintf(f, "{\"sources\": ");
    sources_str(f, sp ? sp->sources : 0);
    fprintf(f, ", \"adaptive\": %s, \"draft_max\": %u, \"drafted\": %llu, \"accepted\": %llu, \"acceptance\": %.4f, "
            "\"tokens_per_pass\": %.4f, \"by_source\": {",
            sp && !sp->adaptive ? "false" : "true", sp ? sp->draft_max : 0, (unsigned long long)d,
            (unsigned long long)a, d ? (double)a / (double)d : 0.0,
            n_passes && n_gen ? (double)(n_gen - 1) / (double)n_passes : 0.0);
    for (int s = 0; s < DJ_SPEC_N_SRC; s++)
        fprintf(f, "%s\"%s\": {\"proposed\": %llu, \"rounds\": %llu, \"drafted\": %llu, \"accepted\": %llu}",
                s ? ", " : "", spec_src_name((enum dj_spec_src)s), (unsigned long long)c->proposed[s],
                (unsigned long long)c->rounds[s], (unsigned long long)c->drafted[s], (unsigned long long)c->accepted[s]);
    fprintf(f, "}, \"by_position\": [");
    int last = -1;
    for (int j = 0; j < DJ_SPEC_POS_MAX; j++)
        if (c->pos_drafted[j]) last = j;
    for (int j = 0; j <= last; j++)
        fprintf(f, "%s[%llu, %llu]", j ? ", " : "", (unsigned long long)c->pos_drafted[j],
                (unsigned long long)c->pos_accepted[j]);
    fprintf(f, "]}");
}

void cli_spec_line(FILE *f, const struct dj_spec_counts *c, size_t n_gen, uint64_t n_passes) {
    uint64_t d = 0, a = 0;
    for (int s = 0; s < DJ_SPEC_N_SRC; s++) {
        d += c->drafted[s];
        a += c->accepted[s];
    }
    fprintf(f, "spec: drafted %llu, accepted %llu (%.1f %%)", (unsigned long long)d, (unsigned long long)a,
            d ? 100.0 * (double)a / (double)d : 0.0);
    for (int s = 0; s < DJ_SPEC_N_SRC; s++)
        if (c->drafted[s] || c->proposed[s])
            fprintf(f, "; %s %llu/%llu in %llu rounds", spec_src_name((enum dj_spec_src)s),
                    (unsigned long long)c->accepted[s], (unsigned long long)c->drafted[s],
                    (unsigned long long)c->rounds[s]);
    fprintf(f, "; %.2f tokens per pass (%zu tokens, %llu passes)\n",
            n_passes && n_gen ? (double)(n_gen - 1) / (double)n_passes : 0.0, n_gen, (unsigned long long)n_passes);
}
