/*
 * test_think_budget.c — the reasoning budget (src/sample/think_budget.h)
 * through the engine on codelm: after exactly B reasoning tokens the
 * end-of-thinking marker is forced, token by token, and generation goes on;
 * a block the model (here: a grammar) closes earlier is left alone; a reply
 * that opens its own block is counted from the marker; an inner grammar sees
 * every token and its language still holds.  Exactness: with schema skipping
 * on (the forced marker emitted without forward passes) the ids and every
 * computed position's logits equal those with skipping off — greedy and
 * seeded, alone and batched with other requests, and for n = 2 completions
 * (forked processors).
 */
#include <math.h>

#include "core/hash.h"
#include "engine/engine.h"
#include "sample/grammar.h"
#include "sample/schema_skip.h"
#include "sample/think_budget.h"
#include "test.h"
#include "test_engine.h"
#include "tokenizer/tokenizer.h"

enum { MAX_GEN = 96 };

struct out {
    dj_token tok[MAX_GEN];
    uint64_t hash[MAX_GEN]; /* logits that chose the token (0: forced, none computed) */
    size_t n;
    char text[4096];
    size_t n_text;
    struct dj_turn_result r;
};

static void on_token(void *ud, const struct dj_token_event *ev) {
    struct out *o = (struct out *)ud + ev->index;
    const uint64_t h = test_tap_take(ev->forced, ev->pos);
    if (o->n < MAX_GEN) {
        o->hash[o->n] = h;
        o->tok[o->n++] = ev->tok;
    }
    if (o->n_text + ev->n_text < sizeof o->text) {
        memcpy(o->text + o->n_text, ev->text, ev->n_text);
        o->n_text += ev->n_text;
        o->text[o->n_text] = 0;
    }
}
static void on_done(void *ud, const struct dj_turn_result *r) { ((struct out *)ud + r->index)->r = *r; }

struct job {
    const dj_token *prompt;
    size_t n_prompt;
    bool starts_open;
    size_t budget;
    const char *gbnf; /* inner grammar, or NULL */
    float temp;
    uint64_t seed;
    uint32_t n;
    /* state */
    struct dj_grammar *g;
    struct dj_gvocab *gv;
    struct dj_gtok *gt;
    struct dj_gproc *gp;
    struct dj_think_budget *tb;
    struct dj_logits_processor proc;
    struct out o[2];
};

static void job_submit(struct dj_engine *e, const struct dj_model *m, struct job *j) {
    struct dj_request_params rp = engine_default_request();
    rp.prompt = j->prompt;
    rp.n_prompt = j->n_prompt;
    rp.max_tokens = 40;
    rp.n = j->n ? j->n : 1;
    rp.sampling.temp = j->temp;
    rp.sampling.seed = j->seed;
    rp.on_token = on_token;
    rp.on_done = on_done;
    rp.on_logits = test_tap_logits;
    memset(j->o, 0, sizeof j->o);
    rp.ud = &j->o[0];
    struct dj_logits_processor inner;
    if (j->gbnf) {
        CHECKF(grammar_parse(j->gbnf, strlen(j->gbnf), NULL, m->vocab, &j->g) == DJ_OK, "%s", dj_last_error());
        CHECK(gvocab_create(m->vocab, &j->gv) == DJ_OK && gtok_create(j->g, j->gv, &j->gt) == DJ_OK);
        struct dj_gproc_params gpp = {j->g, j->gt, m->vocab, NULL, 0, NULL};
        CHECK(gproc_create(&gpp, &j->gp) == DJ_OK);
        inner = gproc_processor(j->gp);
    }
    struct dj_think_budget_params tp = {.vocab = m->vocab, .open = "<think>", .close = "</think>",
                                        .starts_open = j->starts_open, .budget = j->budget,
                                        .inner = j->gbnf ? &inner : NULL};
    CHECKF(think_budget_create(&tp, &j->tb) == DJ_OK, "%s", dj_last_error());
    j->proc = think_budget_processor(j->tb);
    rp.proc = &j->proc;
    CHECKF(engine_submit(e, &rp, NULL) == DJ_OK, "%s", dj_last_error());
}

static void job_release(struct job *j) {
    think_budget_free(j->tb);
    gproc_free(j->gp);
    gtok_free(j->gt);
    gvocab_free(j->gv);
    grammar_free(j->g);
    j->tb = NULL;
    j->gp = NULL;
    j->gt = NULL;
    j->gv = NULL;
    j->g = NULL;
}

static struct dj_engine *mk(const struct dj_model *m, bool skip) {
    struct dj_engine_params ep = engine_default_params();
    ep.n_ctx = 512;
    ep.opt.block_size = 16;
    ep.opt.schema_skip_enabled = skip;
    struct dj_engine *e = NULL;
    CHECKF(engine_create(m, &ep, &e) == DJ_OK, "%s", dj_last_error());
    return e;
}

/* The budget held: the text has the close marker right after the B-th reasoning token (counted
 * from the open marker, or from the start when the prompt opened the block), unless the block
 * was closed earlier by the model; the marker's tokens are exactly the forced ones. */
static void check_budget(const char *what, const struct dj_model *m, const struct job *j, const struct out *o) {
    dj_token *close = NULL;
    size_t n_close = 0;
    CHECK(vocab_tokenize(m->vocab, "</think>", 8, false, true, &close, &n_close) == DJ_OK);
    /* the first token after the block opened */
    size_t start = 0;
    if (!j->starts_open) {
        char acc[512] = "";
        size_t na = 0;
        for (start = 0; start < o->n; start++) {
            char piece[128];
            size_t np = vocab_token_to_piece(m->vocab, o->tok[start], true, piece, sizeof piece);
            if (np > sizeof piece) np = sizeof piece;
            if (na + np < sizeof acc) {
                memcpy(acc + na, piece, np);
                na += np;
                acc[na] = 0;
            }
            if (strstr(acc, "<think>")) break;
        }
        CHECKF(start < o->n, "%s: the reply never opened its think block: %s", what, o->text);
        start++;
    }
    const char *closed = strstr(o->text, "</think>");
    CHECKF(closed != NULL || o->n < start + j->budget + n_close, "%s: no </think> after %zu tokens: %s", what, o->n,
           o->text);
    /* the marker's tokens start at start + budget, and were forced (no logits computed) */
    bool forced_at_budget = start + j->budget + n_close <= o->n;
    for (size_t k = 0; forced_at_budget && k < n_close; k++)
        forced_at_budget = o->tok[start + j->budget + k] == close[k];
    /* either forced exactly at the budget, or the model closed the block itself before it */
    if (!forced_at_budget && closed) {
        dj_token *pre = NULL;
        size_t npre = 0;
        const char *body = j->starts_open ? o->text : strstr(o->text, "<think>") + 7;
        CHECK(vocab_tokenize(m->vocab, body, (size_t)(closed - body), false, true, &pre, &npre) == DJ_OK);
        CHECKF(npre < j->budget + 2, "%s: closed after ~%zu tokens with a budget of %zu: %s", what, npre, j->budget,
               o->text);
        free(pre);
    }
    CHECKF(forced_at_budget || closed, "%s: budget %zu not applied (finish %d %s, %zu tokens): %s", what, j->budget,
           o->r.finish, o->r.error, o->n, o->text);
    free(close);
}

static void compare(const char *what, const struct out *a, const struct out *b) {
    CHECKF(a->n == b->n && !memcmp(a->tok, b->tok, a->n * sizeof *a->tok), "%s: ids differ", what);
    for (size_t i = 0; i < a->n && i < b->n; i++)
        if (a->hash[i] && b->hash[i]) CHECKF(a->hash[i] == b->hash[i], "%s: logits differ at %zu", what, i);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    struct dj_model *m = NULL;
    CHECKF(model_load(test_shared_path(argv[1], "models/codelm-15m-f16.gguf"), &m) == DJ_OK, "%s", dj_last_error());
    if (!m) TEST_END();
    static const char open_prompt[] =
        "<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n<think>\n";
    static const char plain_prompt[] = "<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n";
    dj_token *po = NULL, *pp = NULL;
    size_t npo = 0, npp = 0;
    CHECK(vocab_tokenize(m->vocab, open_prompt, sizeof open_prompt - 1, true, true, &po, &npo) == DJ_OK);
    CHECK(vocab_tokenize(m->vocab, plain_prompt, sizeof plain_prompt - 1, true, true, &pp, &npp) == DJ_OK);
    /* reasoning without '<' (so the model cannot close it itself), then the close, then an answer */
    static const char *inner_open = "root ::= [^<]* \"</think>\" \" {\" [a-z]{1,5} \"}\"\n";
    /* a reply that must open its own block */
    static const char *inner_pre = "root ::= \"<think>\" [^<]* \"</think>\" [a-z ]{1,8}\n";
    /* a block the grammar closes after two characters, before a budget of 12 */
    static const char *inner_short = "root ::= [a-z]{2} \"</think>\" [a-z ]{1,8}\n";
    struct job jobs[] = {
        {.prompt = po, .n_prompt = npo, .starts_open = true, .budget = 0, .temp = 0.0f, .seed = 1},
        {.prompt = po, .n_prompt = npo, .starts_open = true, .budget = 3, .temp = 0.0f, .seed = 2},
        {.prompt = po, .n_prompt = npo, .starts_open = true, .budget = 17, .temp = 0.8f, .seed = 3},
        {.prompt = po, .n_prompt = npo, .starts_open = true, .budget = 5, .gbnf = inner_open, .temp = 0.9f, .seed = 4},
        {.prompt = pp, .n_prompt = npp, .starts_open = false, .budget = 4, .gbnf = inner_pre, .temp = 0.7f, .seed = 5},
        {.prompt = po, .n_prompt = npo, .starts_open = true, .budget = 12, .gbnf = inner_short, .temp = 0.0f, .seed = 6},
        {.prompt = po, .n_prompt = npo, .starts_open = true, .budget = 6, .temp = 1.0f, .seed = 7, .n = 2},
    };
    const size_t nj = sizeof jobs / sizeof jobs[0];
    static struct out ref[16][2];
    struct dj_engine *e_off = mk(m, false), *e_on = mk(m, true);
    if (e_off && e_on) {
        /* skipping off, each alone: the reference, and the budget checks */
        for (size_t k = 0; k < nj; k++) {
            job_submit(e_off, m, &jobs[k]);
            engine_run_all(e_off);
            job_release(&jobs[k]);
            memcpy(ref[k], jobs[k].o, sizeof jobs[k].o);
            for (uint32_t i = 0; i < (jobs[k].n ? jobs[k].n : 1); i++) {
                char what[64];
                snprintf(what, sizeof what, "job %zu.%u (budget %zu)", k, i, jobs[k].budget);
                check_budget(what, m, &jobs[k], &ref[k][i]);
                if (jobs[k].gbnf) {
                    struct dj_grammar *g = NULL;
                    CHECK(grammar_parse(jobs[k].gbnf, strlen(jobs[k].gbnf), NULL, m->vocab, &g) == DJ_OK);
                    if (g && ref[k][i].r.finish == DJ_FINISH_STOP)
                        CHECKF(grammar_match(g, ref[k][i].text, ref[k][i].n_text), "%s: output off the grammar: %s", what,
                               ref[k][i].text);
                    grammar_free(g);
                }
            }
        }
        printf("budget 3, greedy: %s\n", ref[1][0].text);
        /* skipping on, all at once (batched): the same ids and logits */
        for (size_t k = 0; k < nj; k++) job_submit(e_on, m, &jobs[k]);
        engine_run_all(e_on);
        for (size_t k = 0; k < nj; k++) {
            job_release(&jobs[k]);
            for (uint32_t i = 0; i < (jobs[k].n ? jobs[k].n : 1); i++) {
                char what[64];
                snprintf(what, sizeof what, "job %zu.%u skip+batched", k, i);
                compare(what, &ref[k][i], &jobs[k].o[i]);
            }
        }
        struct llama_opt_stats os;
        engine_get_stats(e_on, &os);
        CHECKF(os.schema_tokens_skipped > 0, "the forced marker was never emitted without a pass (skipped %llu)",
               (unsigned long long)os.schema_tokens_skipped);
    }
    /* bad parameters */
    struct dj_think_budget *tb = NULL;
    struct dj_think_budget_params bad = {.vocab = m->vocab, .open = "<think>", .close = "", .budget = 1};
    CHECK(think_budget_create(&bad, &tb) == DJ_ERR_INVALID && tb == NULL);
    bad.close = NULL;
    CHECK(think_budget_create(&bad, &tb) == DJ_ERR_INVALID && tb == NULL);
    think_budget_free(NULL);
    engine_destroy(e_off);
    engine_destroy(e_on);
    free(po);
    free(pp);
    model_free(m);
    TEST_END();
}
