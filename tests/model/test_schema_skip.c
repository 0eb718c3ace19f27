/*
 * test_schema_skip.c — constrained generation through the engine, and the
 * exactness of schema-aware skipping (spec §1.5): with skipping on (forced
 * tokens emitted without a forward pass, forced strings drafted and verified
 * in the batched pass) the output ids equal those with skipping off, and
 * every position whose logits both runs compute has bitwise equal logits —
 * greedy and with seeded sampling, alone and batched with other requests,
 * for n > 1 completions, on codelm (BPE 32k) and stories260K (SPM 512).
 * Every complete output matches the grammar; a truncated one is a prefix
 * the grammar accepts.  Lazy grammars (a trigger) constrain only after it.
 */
#include <math.h>

#include "core/hash.h"
#include "engine/engine.h"
#include "sample/grammar.h"
#include "sample/schema_skip.h"
#include "test.h"
#include "test_engine.h"
#include "tokenizer/tokenizer.h"

enum { MAX_GEN = 160, MAX_REQ = 12 };

struct out {
    dj_token tok[MAX_GEN];
    size_t n;
    uint64_t pos_hash[MAX_GEN]; /* logits that chose the token at pos (0: none, forced) */
    char text[8192];
    size_t n_text;
    struct dj_turn_result r;
    bool done;
};

/* ud: the job's out[] array, one per completion */
static void on_token(void *ud, const struct dj_token_event *ev) {
    struct out *o = (struct out *)ud + ev->index;
    const uint64_t h = test_tap_take(ev->forced, ev->pos);
    if (o->n < MAX_GEN) {
        o->pos_hash[o->n] = h;
        o->tok[o->n++] = ev->tok;
    }
    if (o->n_text + ev->n_text < sizeof o->text) {
        memcpy(o->text + o->n_text, ev->text, ev->n_text);
        o->n_text += ev->n_text;
    }
}
static void on_done(void *ud, const struct dj_turn_result *r) {
    struct out *o = (struct out *)ud + r->index;
    o->r = *r;
    o->done = true;
}

struct gset {
    struct dj_grammar *g;
    struct dj_gvocab *gv;
    struct dj_gtok *gt;
};

static bool gset_make(struct gset *s, const struct dj_model *m, const char *gbnf) {
    memset(s, 0, sizeof *s);
    CHECKF(grammar_parse(gbnf, strlen(gbnf), NULL, m->vocab, &s->g) == DJ_OK, "%s", dj_last_error());
    if (!s->g) return false;
    CHECKF(gvocab_create(m->vocab, &s->gv) == DJ_OK, "%s", dj_last_error());
    if (!s->gv) return false;
    CHECKF(gtok_create(s->g, s->gv, &s->gt) == DJ_OK, "%s", dj_last_error());
    return s->gt != NULL;
}
static void gset_free(struct gset *s) {
    gtok_free(s->gt);
    gvocab_free(s->gv);
    grammar_free(s->g);
}

/* Shared by every request (as a server shares one per grammar): later requests draft what
 * earlier ones wrote; NULL for the first pass of each model (private memos). */
static struct dj_gdraft_memo *g_memo;

struct job {
    const dj_token *prompt;
    size_t n_prompt;
    struct gset *gs;  /* NULL: unconstrained */
    const char *trigger;
    float temp;
    uint64_t seed;
    uint32_t n;       /* completions */
    size_t max_tokens;
    struct dj_gproc *gp;
    struct dj_logits_processor proc;
    struct out o[3];
};

static void job_submit(struct dj_engine *e, const struct dj_model *m, struct job *j) {
    struct dj_request_params rp = engine_default_request();
    rp.prompt = j->prompt;
    rp.n_prompt = j->n_prompt;
    rp.max_tokens = j->max_tokens;
    rp.n = j->n ? j->n : 1;
    rp.sampling.temp = j->temp;
    rp.sampling.seed = j->seed;
    rp.sampling.top_k = 0;
    rp.sampling.top_p = 1.0f;
    rp.sampling.min_p = 0.0f;
    rp.on_token = on_token;
    rp.on_done = on_done;
    rp.on_logits = test_tap_logits;
    memset(j->o, 0, sizeof j->o);
    rp.ud = &j->o[0];
    j->gp = NULL;
    if (j->gs) {
        struct dj_gproc_params gpp = {j->gs->g, j->gs->gt, m->vocab, j->trigger, 0, g_memo};
        CHECKF(gproc_create(&gpp, &j->gp) == DJ_OK, "%s", dj_last_error());
        j->proc = gproc_processor(j->gp);
        rp.proc = &j->proc;
    }
    CHECKF(engine_submit(e, &rp, NULL) == DJ_OK, "%s", dj_last_error());
}


static struct dj_engine *mk(const struct dj_model *m, bool skip) {
    struct dj_engine_params ep = engine_default_params();
    ep.n_ctx = 1024;
    ep.opt.block_size = 16;
    ep.opt.dedup_pool_max = 4096;
    ep.opt.schema_skip_enabled = skip;
    struct dj_engine *e = NULL;
    CHECKF(engine_create(m, &ep, &e) == DJ_OK, "%s", dj_last_error());
    return e;
}

/* Same ids; every position computed by both has the same logits hash. */
static void compare(const char *what, const struct out *off, const struct out *on) {
    CHECKF(off->n == on->n && !memcmp(off->tok, on->tok, off->n * sizeof *off->tok), "%s: ids differ (%zu vs %zu tokens)",
           what, off->n, on->n);
    CHECKF(off->r.finish == on->r.finish, "%s: finish %d vs %d", what, off->r.finish, on->r.finish);
    size_t n_cmp = 0;
    for (size_t i = 0; i < off->n && i < on->n; i++) {
        if (!on->pos_hash[i]) continue;
        CHECKF(off->pos_hash[i] == on->pos_hash[i], "%s: logits differ at output position %zu", what, i);
        n_cmp++;
    }
    CHECKF(off->n_text == on->n_text && !memcmp(off->text, on->text, off->n_text), "%s: text differs", what);
}

/* A complete output matches; a truncated one is a prefix the grammar accepts. */
static void check_grammar(const char *what, const struct gset *gs, const struct out *o, const char *trigger) {
    const char *t = o->text;
    size_t n = o->n_text;
    if (trigger) {
        const char *hit = strstr(o->text, trigger);
        if (!hit) return; /* never triggered: free text */
        t = hit + strlen(trigger);
        n = o->n_text - (size_t)(t - o->text);
    }
    if (o->r.finish == DJ_FINISH_STOP) {
        CHECKF(grammar_match(gs->g, t, n), "%s: complete output does not match the grammar: '%.*s'", what, (int)n, t);
    } else {
        struct dj_gmatch *m = NULL;
        CHECK(gmatch_create(gs->g, &m) == DJ_OK);
        if (m) CHECKF(gmatch_accept_bytes(m, t, n), "%s: truncated output is not a grammar prefix: '%.*s'", what, (int)n, t);
        gmatch_free(m);
    }
}

static const char *TOOL_GBNF =
    "root ::= \"{\\\"name\\\": \\\"\" name \"\\\", \\\"arguments\\\": {\" args \"}}\"\n"
    "name ::= \"get_weather\" | \"get_time\" | \"search_files\"\n"
    "args ::= \"\\\"city\\\": \" str \", \\\"days\\\": \" int \", \\\"units\\\": \" units\n"
    "units ::= \"\\\"celsius\\\"\" | \"\\\"fahrenheit\\\"\"\n"
    "str ::= \"\\\"\" [a-zA-Z ]{1,12} \"\\\"\"\n"
    "int ::= [1-9] [0-9]?\n";

static const char *HERMES_GBNF =
    "root ::= \"\\n{\\\"name\\\": \\\"\" (\"read_file\" | \"run_command\") \"\\\", \\\"arguments\\\": {\\\"path\\\": \\\"\" "
    "[a-z/._]{1,20} \"\\\"}}\\n</tool_call>\"\n";

static void run_pair(const struct dj_model *m, struct dj_engine *e_off, struct dj_engine *e_on, struct job *jobs,
                     size_t n_jobs, bool batched, const char *what) {
    /* reference: each alone, skipping off */
    static struct out ref[MAX_REQ][3];
    for (size_t k = 0; k < n_jobs; k++) {
        job_submit(e_off, m, &jobs[k]);
        engine_run_all(e_off);
        gproc_free(jobs[k].gp);
        memcpy(ref[k], jobs[k].o, sizeof jobs[k].o);
    }
    uint64_t f0 = engine_n_forward(e_on);
    if (batched) {
        for (size_t k = 0; k < n_jobs; k++) job_submit(e_on, m, &jobs[k]);
        engine_run_all(e_on);
    }
    for (size_t k = 0; k < n_jobs; k++) {
        if (!batched) {
            job_submit(e_on, m, &jobs[k]);
            engine_run_all(e_on);
        }
        char w[160];
        snprintf(w, sizeof w, "%s job %zu (temp %.1f seed %llu%s)", what, k, (double)jobs[k].temp,
                 (unsigned long long)jobs[k].seed, batched ? ", batched" : "");
        for (uint32_t i = 0; i < (jobs[k].n ? jobs[k].n : 1); i++) {
            const struct out *a = &ref[k][i], *b = &jobs[k].o[i];
            CHECKF(a->done && b->done, "%s: completion %u not done", w, i);
            compare(w, a, b);
            if (jobs[k].trigger && i == 0 && strstr(what, "codelm"))
                CHECKF(strstr(b->text, jobs[k].trigger) != NULL, "%s: codelm's reply never reached the trigger", w);
            if (jobs[k].trigger && i == 0)
                printf("%s: lazy grammar %s: %.*s\n", w, strstr(b->text, jobs[k].trigger) ? "triggered" : "not triggered",
                       (int)(b->n_text < 200 ? b->n_text : 200), b->text);
            if (jobs[k].gs) check_grammar(w, jobs[k].gs, b, jobs[k].trigger);
            if (jobs[k].gs == jobs[0].gs && a->n > 4) /* the tool grammar forces most of its text */
                CHECKF(b->r.n_forced + b->r.n_draft_accepted > 0, "%s: nothing skipped", w);
        }
        if (!batched) gproc_free(jobs[k].gp);
    }
    if (batched)
        for (size_t k = 0; k < n_jobs; k++) gproc_free(jobs[k].gp);
    printf("%s%s: %llu forward passes with skipping\n", what, batched ? " batched" : "",
           (unsigned long long)(engine_n_forward(e_on) - f0));
}

static void test_model(const char *shared, const char *rel, const char *prompt_text, bool full) {
    struct dj_model *m = NULL;
    CHECKF(model_load(test_shared_path(shared, rel), &m) == DJ_OK, "%s", dj_last_error());
    if (!m) return;
    dj_token *p = NULL, *p2 = NULL;
    size_t np = 0, np2 = 0;
    CHECK(vocab_tokenize(m->vocab, prompt_text, strlen(prompt_text), true, true, &p, &np) == DJ_OK);
    static const char *p2text = "<|im_start|>user\nRead the config.<|im_end|>\n<|im_start|>assistant\n";
    CHECK(vocab_tokenize(m->vocab, p2text, strlen(p2text), true, true, &p2, &np2) == DJ_OK);
    size_t jlen = 0;
    char *json_gbnf = test_read_file(test_shared_path(shared, "golden/grammars/json.gbnf"), &jlen);
    CHECK(json_gbnf != NULL);
    struct gset tool, json, hermes;
    bool ok = gset_make(&tool, m, TOOL_GBNF) && gset_make(&json, m, json_gbnf) && gset_make(&hermes, m, HERMES_GBNF);
    struct dj_engine *e_off = mk(m, false), *e_on = mk(m, true);
    if (ok && e_off && e_on) {
        static struct job jobs[MAX_REQ];
        size_t nj = 0;
        const float temps[] = {0.0f, 0.8f, 1.5f};
        for (int t = 0; t < 3; t++)
            for (uint64_t seed = 1; seed <= (full ? 3u : 2u); seed++) {
                if (nj == MAX_REQ) break;
                jobs[nj++] = (struct job){.prompt = p, .n_prompt = np, .gs = t == 2 && seed == 2 ? &json : &tool,
                                          .temp = temps[t], .seed = seed * 7919 + (uint64_t)t, .n = 1, .max_tokens = 120};
            }
        /* three completions of one request (forked processors) */
        if (nj < MAX_REQ) jobs[nj++] = (struct job){.prompt = p, .n_prompt = np, .gs = &tool, .temp = 1.0f, .seed = 99, .n = 3, .max_tokens = 100};
        /* one lazy tool call: free text until "<tool_call>" */
        if (nj < MAX_REQ) jobs[nj++] = (struct job){.prompt = p2, .n_prompt = np2, .gs = &hermes, .trigger = "<tool_call>", .temp = 0.9f,
                                      .seed = 4242, .n = 1, .max_tokens = 120};
        run_pair(m, e_off, e_on, jobs, nj, false, rel);
        g_memo = gdraft_memo_create();
        CHECK(g_memo != NULL);
        run_pair(m, e_off, e_on, jobs, nj, true, rel);
        gdraft_memo_free(g_memo);
        g_memo = NULL;
        /* schema counters moved */
        struct llama_opt_stats os;
        engine_get_stats(e_on, &os);
        CHECKF(os.schema_tokens_total > 0 && os.schema_tokens_skipped + os.schema_tokens_inferred > 0,
               "counters: total %llu skipped %llu inferred %llu", (unsigned long long)os.schema_tokens_total,
               (unsigned long long)os.schema_tokens_skipped, (unsigned long long)os.schema_tokens_inferred);
        struct llama_opt_stats os_off;
        engine_get_stats(e_off, &os_off);
        CHECK(os_off.schema_tokens_skipped == 0 && os_off.schema_tokens_inferred == 0);
        printf("%s: schema tokens %llu, skipped %llu, inferred (drafts accepted) %llu\n", rel,
               (unsigned long long)os.schema_tokens_total, (unsigned long long)os.schema_tokens_skipped,
               (unsigned long long)os.schema_tokens_inferred);
    }
    engine_destroy(e_off);
    engine_destroy(e_on);
    gset_free(&tool);
    gset_free(&json);
    gset_free(&hermes);
    free(json_gbnf);
    free(p);
    free(p2);
    model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    test_model(argv[1], "models/codelm-15m-f16.gguf",
               "<|im_start|>system\nYou call tools.<|im_end|>\n<|im_start|>user\nWeather in Paris for 3 days?<|im_end|>\n"
               "<|im_start|>assistant\n",
               true);
    test_model(argv[1], "models/stories260K.gguf", "Once upon a time", false);
    TEST_END();
}
