/*
 * cmd_run.c — `deja run`: tokenize a prompt, prefill it, generate N tokens.
 *
 * It runs as one request on the serving engine (src/engine): sampling, stop
 * strings and end-of-generation go through the same code as the server's.
 * Output: the generated text on stdout (streamed), a prefill/decode speed line
 * on stderr (with the prompt positions reused from the persistent KV store when
 * --kv-dir or LLAMA_OPT_PERSIST_* turn it on: a fresh engine has nothing else to
 * reuse); with --json one object (DESIGN.md §5) with prompt_ids, ids, text,
 * n_prompt, n_reused, n_reused_disk, n_computed, n_gen, t_prefill_ms, t_decode_ms, finish_reason,
 * n_forward_passes (batched passes while generating) and logits_hash — FNV-1a 64 over
 * the raw float32 bits of every logits vector the run produced, in order
 * (row 0 = logits at the last prompt position, row s = after feeding generated
 * token s-1).  --dump-logits writes those rows as float32 little-endian.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/hash.h"
#include "core/status.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "model/context.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"
#include "sample/sampler.h"
#include "sample/schema_skip.h"
#include "sample/toolcall.h"
#include "spec/spec.h"

static void run_usage(FILE *f) {
    fprintf(f,
            "usage: deja run -m MODEL (-p TEXT | -f FILE) [options]\n"
            "  -n N              tokens to generate (default 64)\n"
            "  -c N              context size (default: the model's training context)\n"
            "  -t N              threads (default 1)\n"
            "  --ubatch N        tokens per forward step during prefill (default 512)\n"
            "  --temp T          temperature; 0 = greedy (default 0)\n"
            "  --top-k K         (default 40)   --top-p P (default 0.95)   --min-p P (default 0.05)\n"
            "  --repeat-penalty R  --freq-penalty F  --presence-penalty P  --penalty-last-n N\n"
            "  --seed S          sampler seed (default 0)\n"
            "  --typical-p P     locally typical sampling (default 1 = off)\n"
            "  --stop STR        stop before the first occurrence of STR (repeatable; not printed)\n"
            "  --ignore-eos      keep generating after an end-of-generation token\n"
            CLI_KV_TYPE_HELP
            CLI_DEVICE_HELP
            CLI_KV_DIR_USAGE
            CLI_SPEC_HELP
            "  LLAMA_OPT_* variables configure the engine (docs/CONFIG.md).\n"
            "  --json            print one JSON object instead of the text\n"
            "  --dump-logits F   write every logits vector as float32 LE rows to F\n"
            "  --grammar F       constrain the output to the GBNF grammar in file F (root rule: root)\n"
            "  --json-schema F   constrain the output to JSON valid under the JSON Schema in file F\n"
            "  --grammar-trigger T  lazy grammar: free text until the output contains T; the grammar\n"
            "                    then constrains what follows T\n"
            "  --tools F         OpenAI-style tools (a JSON array) in file F: the output calls them as\n"
            "                    <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> (Hermes/Qwen format)\n"
            "  --tool-choice C   auto (free text, then optional calls; default) | required | NAME\n"
            "  --tool-format F   hermes (default) | json: a bare {\"name\": ..., \"arguments\": ...} object\n"
            "  An empty prompt (-p \"\") means BOS only.  Special tokens in the prompt are parsed.\n");
}

static void json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch == '\r') fputs("\\r", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static bool parse_num(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_error(cmd, "%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

struct run_state {
    bool json;
    FILE *df;
    uint64_t lhash;
    size_t n_vocab;
    dj_token *ids;
    size_t n_ids, cap;
    char *text;
    size_t text_len, text_cap;
    bool err;
    char err_msg[128];
    struct dj_turn_result r;
    struct dj_engine *e;
    uint64_t fwd_first; /* forward passes when the first token came (the prompt's) */
};

/* Every logits vector: hashed, and dumped with --dump-logits (x86-64: float bits are little-endian). */
static void run_on_logits(void *ud, const float *logits, size_t n) {
    struct run_state *rs = ud;
    if (rs->n_ids >= rs->cap) return; /* -n 0: no logits row (the generation has no step) */
    rs->lhash = dj_fnv1a(rs->lhash, logits, n * sizeof(float));
    if (rs->df && fwrite(logits, sizeof(float), n, rs->df) != n && !rs->err) {
        rs->err = true;
        snprintf(rs->err_msg, sizeof rs->err_msg, "writing the logits failed: %s", strerror(errno));
    }
}

static void run_on_token(void *ud, const struct dj_token_event *ev) {
    struct run_state *rs = ud;
    if (rs->cap == 0) return;
    if (ev->pos == 0) rs->fwd_first = engine_n_forward(rs->e);
    if (rs->n_ids < rs->cap) rs->ids[rs->n_ids++] = ev->tok;
    if (rs->text_len + ev->n_text + 1 > rs->text_cap) {
        size_t cap = (rs->text_len + ev->n_text + 1) * 2;
        char *nt = realloc(rs->text, cap);
        if (!nt) {
            rs->err = true;
            snprintf(rs->err_msg, sizeof rs->err_msg, "out of memory");
            return;
        }
        rs->text = nt;
        rs->text_cap = cap;
    }
    memcpy(rs->text + rs->text_len, ev->text, ev->n_text);
    rs->text_len += ev->n_text;
    if (!rs->json) {
        fwrite(ev->text, 1, ev->n_text, stdout);
        fflush(stdout);
    }
}

static void run_on_done(void *ud, const struct dj_turn_result *r) {
    struct run_state *rs = ud;
    rs->r = *r;
}

int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *file = NULL, *dump = NULL;
    double n_gen = 64, n_ctx = 0, n_threads = 1, ubatch = 512, seed = 0, kv_dir_gib = 0;
    const char *kv_dir = NULL;
    bool json = false, ignore_eos = false;
    const char *grammar_file = NULL, *schema_file = NULL, *trigger = NULL, *tools_file = NULL, *tool_choice = NULL,
               *tool_format = NULL;
    char **stops = NULL;
    size_t n_stops = 0;
    struct dj_sampler_params sp = sampler_default_params();
    sp.temp = 0.0f;
    uint32_t ctk = kv_type_default(), ctv = kv_type_default(), gpu = 0;
    struct dj_spec_params spec = spec_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v;
        bool ok;
        if (cli_kv_type_opt("run", argc, argv, &i, &ctk, &ctv, &ok) || cli_spec_opt("run", argc, argv, &i, &spec, &ok) ||
            cli_device_opt("run", argc, argv, &i, &gpu, &ok)) {
            if (!ok) return 1;
            continue;
        }
#define NUM(name, lo, hi, dst)                                                            \
    else if (!strcmp(a, name)) {                                                          \
        const char *s = cli_value("run", argc, argv, &i);                                 \
        if (!s || !parse_num("run", name, s, lo, hi, &v)) return 1;                       \
        dst = v;                                                                          \
    }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            run_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model_path = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(prompt = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--dump-logits")) {
            if (!(dump = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--grammar")) {
            if (!(grammar_file = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--json-schema")) {
            if (!(schema_file = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--tools")) {
            if (!(tools_file = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--tool-format")) {
            if (!(tool_format = cli_value("run", argc, argv, &i))) return 1;
            if (strcmp(tool_format, "hermes") && strcmp(tool_format, "json"))
                return cli_error("run", "--tool-format: '%s' is not hermes or json", tool_format);
        } else if (!strcmp(a, "--tool-choice")) {
            if (!(tool_choice = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--grammar-trigger")) {
            if (!(trigger = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--kv-dir")) {
            if (!(kv_dir = cli_value("run", argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = true;
        } else if (!strcmp(a, "--stop")) {
            const char *v2 = cli_value("run", argc, argv, &i);
            char **ns = v2 ? realloc(stops, (n_stops + 1) * sizeof *ns) : NULL;
            if (!ns) {
                free(stops);
                return v2 ? cli_error("run", "out of memory") : 1;
            }
            stops = ns;
            stops[n_stops++] = (char *)v2;
        }
        NUM("-n", 0, 1e7, n_gen)
        NUM("-c", 1, 1e7, n_ctx)
        NUM("-t", 1, 1024, n_threads)
        NUM("--ubatch", 1, 1e6, ubatch)
        NUM("--temp", 0, 100, sp.temp)
        NUM("--top-k", 0, 1e9, sp.top_k)
        NUM("--top-p", 0, 1, sp.top_p)
        NUM("--min-p", 0, 1, sp.min_p)
        NUM("--typical-p", 0, 1, sp.typical_p)
        NUM("--repeat-penalty", 0, 100, sp.repeat_penalty)
        NUM("--freq-penalty", -100, 100, sp.freq_penalty)
        NUM("--presence-penalty", -100, 100, sp.presence_penalty)
        NUM("--penalty-last-n", 0, 1e6, sp.penalty_last_n)
        NUM("--seed", 0, 1.8e19, seed)
        NUM("--kv-dir-max-gib", 0, 1 << 20, kv_dir_gib)
        else {
            run_usage(stderr);
            return cli_error("run", "unknown argument '%s'", a);
        }
#undef NUM
    }
    sp.seed = (uint64_t)seed;
    if (!model_path) {
        run_usage(stderr);
        return cli_error("run", "no model given (-m MODEL)");
    }
    if (!!prompt == !!file) {
        run_usage(stderr);
        return cli_error("run", "give exactly one of -p TEXT or -f FILE");
    }
    if (!!grammar_file + !!schema_file + !!tools_file > 1) {
        run_usage(stderr);
        return cli_error("run", "give at most one of --grammar, --json-schema and --tools");
    }
    if (trigger && !grammar_file && !schema_file) return cli_error("run", "--grammar-trigger needs --grammar or --json-schema");
    if ((tool_choice || tool_format) && !tools_file) return cli_error("run", "--tool-choice and --tool-format need --tools");
    size_t plen = 0;
    char *owned = NULL;
    if (file) {
        if (!(owned = cli_read_file("run", file, &plen))) return 1;
        prompt = owned;
    } else {
        plen = strlen(prompt);
    }

    int rc = 1;
    struct dj_model *m = NULL;
    struct dj_engine *e = NULL;
    dj_token *pids = NULL;
    struct run_state rs = {0};
    size_t np = 0;
    char *gbnf = NULL;
    struct dj_grammar *g = NULL;
    struct dj_gvocab *gv = NULL;
    struct dj_gtok *gt = NULL;
    struct dj_gproc *gp = NULL;
    struct dj_logits_processor proc;
    struct dj_toolcall_grammar tcg = {0};
    struct dj_engine_params ep = engine_default_params();
    ep.kv_type_k = ctk;
    ep.gpu = gpu;
    ep.kv_type_v = ctv;
    ep.spec = spec;
    cli_spec_check("run", &spec);
    if (llama_opt_config_from_env(&ep.opt) != DJ_OK) {
        cli_error("run", "%s", dj_last_error());
        goto done;
    }
    if (cli_kv_dir("run", kv_dir, &ep.opt)) goto done; /* --kv-dir wins over the environment */
    ep.persist_max_bytes = (uint64_t)(kv_dir_gib * 1073741824.0);
    if (model_load(model_path, &m) != DJ_OK) {
        cli_error("run", "%s", dj_last_error());
        goto done;
    }
    if (vocab_tokenize(m->vocab, prompt, plen, true, true, &pids, &np) != DJ_OK) {
        cli_error("run", "%s", dj_last_error());
        goto done;
    }
    if (np == 0) {
        cli_error("run", "the prompt is empty and the model adds no BOS token");
        goto done;
    }
    ep.n_ctx = (uint32_t)n_ctx;
    ep.n_threads = (int)n_threads;
    ep.n_ubatch = (uint32_t)ubatch;
    ep.kv_budget_auto = getenv("LLAMA_OPT_DEDUP_POOL_MAX") == NULL;
    if (ep.n_ctx > m->hp.n_ctx_train)
        dj_log(DJ_LOG_WARN, "context size %u exceeds the model's training context %u", ep.n_ctx, m->hp.n_ctx_train);
    if (ep.n_ctx == 0) ep.n_ctx = m->hp.n_ctx_train;
    if (np + (size_t)n_gen > ep.n_ctx) {
        cli_error("run", "prompt (%zu tokens) + %zu generated tokens exceed the context size %u (use -c)", np,
                  (size_t)n_gen, ep.n_ctx);
        goto done;
    }
    const char *gfile = grammar_file ? grammar_file : schema_file ? schema_file : tools_file;
    if (gfile) {
        size_t n_src = 0;
        char *src = cli_read_file("run", gfile, &n_src);
        if (!src) goto done;
        enum dj_status gs = DJ_OK;
        if (tools_file) {
            struct dj_toolcall_opts to = toolcall_default_opts();
            if (tool_format && !strcmp(tool_format, "json")) to.format = DJ_TOOL_FORMAT_JSON;
            if (!tool_choice || !strcmp(tool_choice, "auto")) {
                to.choice = DJ_TOOL_AUTO;
            } else if (!strcmp(tool_choice, "required")) {
                to.choice = DJ_TOOL_REQUIRED;
            } else {
                to.choice = DJ_TOOL_NAMED;
                to.name = tool_choice;
            }
            gs = toolcall_grammar_build(src, n_src, &to, &tcg);
            free(src);
            if (gs) {
                cli_error("run", "%s: %s", tools_file, dj_last_error());
                goto done;
            }
            /* auto: free text until the trigger, then the rest of the calls */
            gbnf = strdup(to.choice == DJ_TOOL_AUTO ? tcg.lazy_gbnf : tcg.gbnf);
            if (to.choice == DJ_TOOL_AUTO) trigger = tcg.trigger;
            if (!gbnf) {
                cli_error("run", "out of memory");
                goto done;
            }
            n_src = strlen(gbnf);
        } else if (schema_file) {
            gs = json_schema_to_gbnf(src, n_src, NULL, &gbnf);
            free(src);
            if (gs) {
                cli_error("run", "%s: %s", schema_file, dj_last_error());
                goto done;
            }
            n_src = strlen(gbnf);
        } else {
            gbnf = src;
        }
        struct dj_gproc_params gpp = {0};
        if ((gs = grammar_parse(gbnf, n_src, NULL, m->vocab, &g)) || (gs = gvocab_create(m->vocab, &gv)) ||
            (gs = gtok_create(g, gv, &gt))) {
            cli_error("run", "%s: %s", gfile, dj_last_error());
            goto done;
        }
        gpp.g = g;
        gpp.gtok = gt;
        gpp.vocab = m->vocab;
        gpp.trigger = trigger;
        if (gproc_create(&gpp, &gp)) {
            cli_error("run", "%s", dj_last_error());
            goto done;
        }
        proc = gproc_processor(gp);
    }
    if (engine_create(m, &ep, &e) != DJ_OK) {
        cli_error("run", "%s", dj_last_error());
        goto done;
    }
    if (dump && !(rs.df = fopen(dump, "wb"))) {
        cli_error("run", "%s: cannot open for writing: %s", dump, strerror(errno));
        goto done;
    }
    rs.json = json;
    rs.e = e;
    rs.lhash = DJ_FNV_OFFSET;
    rs.n_vocab = m->hp.n_vocab;
    if (!(rs.ids = malloc(((size_t)n_gen + 1) * sizeof *rs.ids))) {
        cli_error("run", "out of memory");
        goto done;
    }
    rs.cap = (size_t)n_gen;
    struct dj_request_params rp = engine_default_request();
    rp.prompt = pids;
    rp.n_prompt = np;
    rp.max_tokens = (size_t)n_gen;
    rp.sampling = sp;
    rp.stop = (const char *const *)stops;
    rp.n_stop = n_stops;
    rp.ignore_eos = ignore_eos;
    rp.on_token = run_on_token;
    rp.on_done = run_on_done;
    rp.on_logits = run_on_logits;
    rp.ud = &rs;
    if (gp) rp.proc = &proc;
    if (n_gen == 0) rp.max_tokens = 1; /* -n 0: the prompt only; cap 0 makes the callbacks record nothing */
    if (engine_submit(e, &rp, NULL) != DJ_OK) {
        cli_error("run", "%s", dj_last_error());
        goto done;
    }
    engine_run_all(e);
    if (rs.err) {
        cli_error("run", "%s", rs.err_msg);
        goto done;
    }
    if (rs.r.finish == DJ_FINISH_ERROR) {
        cli_error("run", "%s", rs.r.error);
        goto done;
    }
    const double ms_p = rs.r.t_queue_ms + rs.r.t_prefill_ms, ms_d = rs.r.t_decode_ms;
    const size_t n_ids = rs.n_ids;
    /* t/s over the prompt as a whole: positions restored from --kv-dir make it look faster, and
     * the reuse figures say by how much */
    const size_t n_reused = rs.r.n_reused_own + rs.r.n_reused_pool + rs.r.n_reused_approx;
    fprintf(stderr, "\ndeja run: prefill %zu tokens in %.1f ms (%.1f t/s; %zu reused, %zu of them from --kv-dir, %zu "
            "computed), decode %zu tokens in %.1f ms (%.1f t/s), %d threads\n",
            np, ms_p, ms_p > 0 ? (double)np * 1000.0 / ms_p : 0.0, n_reused, rs.r.n_reused_disk, rs.r.n_computed,
            n_ids, ms_d, ms_d > 0 && n_ids > 1 ? (double)(n_ids - 1) * 1000.0 / ms_d : 0.0, ep.n_threads);
    const uint64_t n_passes = engine_n_forward(e) - rs.fwd_first;
    if (spec.sources || rs.r.n_drafted) {
        cli_spec_line(stderr, &rs.r.spec, n_ids, n_passes);
        fprintf(stderr, "spec: one more row costs %.3f of a one-row pass (measured)\n", engine_spec_beta(e, 1));
    }
    if (json) {
        struct llama_opt_stats os;
        engine_get_stats(e, &os);
        printf("{\"prompt_ids\": [");
        for (size_t i = 0; i < np; i++) printf(i ? ", %d" : "%d", pids[i]);
        printf("], \"ids\": [");
        for (size_t i = 0; i < n_ids; i++) printf(i ? ", %d" : "%d", rs.ids[i]);
        printf("], \"text\": ");
        json_str(stdout, rs.text ? rs.text : "", rs.text_len);
        printf(", \"n_prompt\": %zu, \"n_reused\": %zu, \"n_reused_disk\": %zu, \"n_computed\": %zu, "
               "\"n_gen\": %zu, \"t_prefill_ms\": %.3f, \"t_decode_ms\": %.3f, "
               "\"finish_reason\": \"%s\", \"n_forward_passes\": %llu, \"schema_tokens_total\": %llu, "
               "\"schema_tokens_skipped\": %llu, \"schema_tokens_inferred\": %llu, \"n_drafted\": %zu, "
               "\"grammar_complete\": %s, \"logits_hash\": \"%016" PRIx64 "\", \"spec\": ",
               np, n_reused, rs.r.n_reused_disk, rs.r.n_computed, n_ids, ms_p, ms_d, n_gen > 0 ? engine_finish_name(rs.r.finish) : "length",
               (unsigned long long)n_passes, (unsigned long long)os.schema_tokens_total,
               (unsigned long long)os.schema_tokens_skipped, (unsigned long long)os.schema_tokens_inferred,
               rs.r.n_drafted, gp ? (gproc_complete(gp) ? "true" : "false") : "null", rs.lhash);
        cli_spec_json(stdout, &spec, &rs.r.spec, n_ids, n_passes);
        printf("}\n");
    } else {
        putchar('\n');
    }
    rc = 0;
done:
    if (rs.df && fclose(rs.df) != 0 && rc == 0) rc = cli_error("run", "%s: write failed: %s", dump, strerror(errno));
    free(rs.text);
    free(rs.ids);
    free(pids);
    free(stops);
    engine_destroy(e);
    gproc_free(gp);
    gtok_free(gt);
    gvocab_free(gv);
    grammar_free(g);
    free(gbnf);
    toolcall_grammar_free(&tcg);
    model_free(m);
    free(owned);
    return rc;
}
