/*
 * stats.c — struct llama_opt_stats: the spec's counters (§1.1), their names,
 * per-turn deltas and the `opt-stats {json}` line (DESIGN.md §5).
 *
 * The counters are monotonic totals owned by one context.  A turn's report is
 * the difference to the snapshot taken after the previous report, so a reader
 * can sum the lines of a session to get its totals.  The line is formatted
 * into a buffer and written with one fputs, so concurrent writers to stderr
 * (a server with several sessions) do not interleave within a line.
 */
#include "opt/opt.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

static const struct {
    const char *name;
    size_t offset;
} fields[] = {
#define S(f) {#f, offsetof(struct llama_opt_stats, f)}
    S(dedup_blocks_total),   S(dedup_blocks_hit),       S(dedup_tokens_saved),
    S(diff_tokens_total),    S(diff_tokens_unchanged),  S(diff_tokens_recomputed),
    S(diff_tokens_approx),   S(diff_tokens_blend),      S(diff_tokens_probed),
    S(schema_tokens_total),  S(schema_tokens_skipped),  S(schema_tokens_inferred),
    S(canon_entries_total),  S(canon_entries_deduped),  S(canon_bytes_saved),
    S(precompute_rope_hits), S(precompute_norm_hits),   S(precompute_mask_hits),
    S(persist_loads),        S(persist_saves),          S(persist_tokens_restored),
    S(rs_ckpt_saves),        S(rs_ckpt_hits),           S(rs_tokens_restored),
    S(rs_tokens_recomputed),
    S(memo_lookups),         S(memo_hits),              S(memo_tokens_skipped),
    S(attn_blocks_pruned),   S(attn_tokens_pruned),    S(attn_blocks_restored),
    S(attn_tokens_skipped),  S(ctx_tokens_dropped),
#undef S
};

#define N_FIELDS (sizeof fields / sizeof fields[0])

/* Every member is a uint64_t counter listed above: adding a member without a
 * name here fails to compile. */
_Static_assert(sizeof(struct llama_opt_stats) == N_FIELDS * sizeof(uint64_t), "every counter has a name");

size_t llama_opt_stats_n_fields(void) { return N_FIELDS; }

const char *llama_opt_stats_field_name(size_t i) { return i < N_FIELDS ? fields[i].name : NULL; }

uint64_t llama_opt_stats_get(const struct llama_opt_stats *s, size_t i) {
    DJ_ASSERT(i < N_FIELDS);
    uint64_t v;
    memcpy(&v, (const char *)s + fields[i].offset, sizeof v);
    return v;
}

void llama_opt_stats_reset(struct llama_opt_stats *s) { memset(s, 0, sizeof *s); }

void llama_opt_stats_delta(const struct llama_opt_stats *now, const struct llama_opt_stats *before,
                           struct llama_opt_stats *out) {
    struct llama_opt_stats d;
    for (size_t i = 0; i < N_FIELDS; i++) {
        uint64_t a = llama_opt_stats_get(now, i), b = llama_opt_stats_get(before, i);
        DJ_ASSERT(a >= b); /* counters never decrease */
        uint64_t v = a - b;
        memcpy((char *)&d + fields[i].offset, &v, sizeof v);
    }
    *out = d;
}

size_t llama_opt_stats_format(const struct llama_opt_stats *s, char *buf, size_t cap) {
    size_t len = 0;
    for (size_t i = 0; i <= N_FIELDS; i++) {
        char part[96];
        int n = i < N_FIELDS ? snprintf(part, sizeof part, "%s\"%s\":%" PRIu64, i ? "," : "{", fields[i].name,
                                        llama_opt_stats_get(s, i))
                             : snprintf(part, sizeof part, "}");
        DJ_ASSERT(n > 0 && (size_t)n < sizeof part);
        if (cap && len < cap - 1) { /* copy what fits, as snprintf does */
            size_t k = (size_t)n < cap - 1 - len ? (size_t)n : cap - 1 - len;
            memcpy(buf + len, part, k);
        }
        len += (size_t)n;
    }
    if (cap) buf[len < cap ? len : cap - 1] = '\0';
    return len;
}

int llama_opt_stats_print_turn(FILE *f, struct llama_opt_stats *last, const struct llama_opt_stats *now) {
    struct llama_opt_stats d;
    llama_opt_stats_delta(now, last, &d);
    /* 29 counters x (name <= 24 + 20 digits + 4) < 2 KiB */
    char line[2048];
    memcpy(line, "opt-stats ", 10);
    size_t n = llama_opt_stats_format(&d, line + 10, sizeof line - 11);
    DJ_ASSERT(n < sizeof line - 11);
    line[10 + n] = '\n';
    line[11 + n] = '\0';
    *last = *now;
    return fputs(line, f) < 0 ? -1 : 0;
}
