/*
 * analysis.c - findings from a run (docs/DIAGNOSIS.md, docs/DIAGNOSIS.md
 * "How the rules are organised"): the run summary is computed once
 * (runsum.c), then the rules of the table below judge it, one function per
 * finding, grouped by family in rules_input.c, rules_gpu.c,
 * rules_gpu_mem.c, rules_host.c and rules_ranks.c.  Thresholds are the
 * named constants of analysis.h, and docs/DIAGNOSIS.md says why each one
 * is what it is.  Every finding carries, as a JSON object, the numbers it
 * was decided on, and advice with numbers where the data gives them.
 *
 * Rules degrade with the data: with only in-process records (no system
 * series), the input rules still tell "keeps up" from "waits", and the
 * per-batch CPU time of the workers (their own records) still finds
 * CPU-bound workers; a storage verdict needs the system series (workers in
 * D state, the disk behind the data), since a worker off CPU may as well
 * be starved of CPU or asleep.  The workers' per-process series are those
 * of the pids in the worker records.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "rules.h"
#include "runsum.h"
#include "util.h"

/* --- the rules, in the order they are applied
 *
 * A new finding is one function (in the rules file of its family, with its
 * prototype in rules.h) and one line here.  Per-rank rules next to each
 * other are applied rank by rank, so that the findings of one rank stay
 * together in the report. */
static const struct tm_rule rules[] = {
    {.id = "run.agent_not_loaded", .max = TM_SEV_HIGH, .run = tm_rule_run_agent_not_loaded},
    {.id = "data.hung_mount", .max = TM_SEV_HIGH, .run = tm_rule_data_hung_mount},
    {.id = "steps.unsegmented", .max = TM_SEV_LOW, .run = tm_rule_steps_unsegmented},
    {.id = "steps.hook_silent", .max = TM_SEV_HIGH, .run = tm_rule_steps_hook_silent},
    {.id = "run.measure_off", .max = TM_SEV_LOW, .run = tm_rule_run_measure_off},
    {.id = "amp.skipped_steps", .max = TM_SEV_HIGH, .run = tm_rule_amp_skipped_steps},
    {.id = "input.ok", .max = TM_SEV_INFO, .run = tm_rule_input_ok},
    {.id = "input.disk_bound", .max = TM_SEV_HIGH, .run = tm_rule_input_disk_bound},
    {.id = "input.cpu_bound", .max = TM_SEV_HIGH, .run = tm_rule_input_cpu_bound},
    {.id = "input.data_wait", .max = TM_SEV_HIGH, .run = tm_rule_input_data_wait},
    {.id = "input.main_prep", .max = TM_SEV_HIGH, .run = tm_rule_input_main_prep},
    {.id = "input.handoff", .max = TM_SEV_HIGH, .run = tm_rule_input_handoff},
    {.id = "input.worker_startup", .max = TM_SEV_HIGH, .run = tm_rule_input_worker_startup},
    {.id = "input.new_iterator", .max = TM_SEV_HIGH, .run = tm_rule_input_new_iterator},
    {.id = "input.overlapped", .max = TM_SEV_LOW, .run = tm_rule_input_overlapped},
    {.id = "checkpoint.blocking", .max = TM_SEV_HIGH, .run = tm_rule_checkpoint_blocking},
    {.id = "gc.pauses", .max = TM_SEV_HIGH, .run = tm_rule_gc_pauses},
    {.id = "steps.stalls", .max = TM_SEV_HIGH, .run = tm_rule_steps_stalls},
    {.id = "steps.no_grad", .max = TM_SEV_HIGH, .run = tm_rule_steps_no_grad},
    {.id = "steps.compile", .max = TM_SEV_HIGH, .run = tm_rule_steps_compile},
    {.id = "data.page_cache", .max = TM_SEV_MEDIUM, .run = tm_rule_data_page_cache},
    {.id = "data.small_files", .max = TM_SEV_MEDIUM, .run = tm_rule_data_small_files},
    {.id = "gpu.underutilized", .max = TM_SEV_MEDIUM, .run = tm_rule_gpu_underutilized},
    {.id = "gpu.util_swing", .max = TM_SEV_MEDIUM, .run = tm_rule_gpu_util_swing},
    {.id = "gpu_mem.near_capacity", .max = TM_SEV_MEDIUM, .rank = tm_rule_gpu_mem_near_capacity},
    {.id = "gpu_mem.growth", .max = TM_SEV_HIGH, .rank = tm_rule_gpu_mem_growth},
    {.id = "gpu_mem.fragmentation", .max = TM_SEV_HIGH, .rank = tm_rule_gpu_mem_fragmentation},
    {.id = "gpu_mem.alloc_retries", .max = TM_SEV_HIGH, .rank = tm_rule_gpu_mem_alloc_retries},
    {.id = "gpu_mem.oom", .max = TM_SEV_HIGH, .rank = tm_rule_gpu_mem_oom, .ends_run = true},
    {.id = "anatomy.optimizer_state", .max = TM_SEV_LOW, .rank = tm_rule_anatomy_optimizer_state},
    {.id = "anatomy.activations", .max = TM_SEV_LOW, .rank = tm_rule_anatomy_activations},
    {.id = "anatomy.max_micro_batch", .max = TM_SEV_INFO, .rank = tm_rule_anatomy_max_micro_batch},
    {.id = "host_mem.worker_growth", .max = TM_SEV_MEDIUM, .run = tm_rule_host_mem_worker_growth},
    {.id = "host.cpu_oversubscribed", .max = TM_SEV_HIGH, .run = tm_rule_host_cpu_oversubscribed},
    {.id = "ranks.straggler", .max = TM_SEV_HIGH, .run = tm_rule_ranks_straggler},
    {.id = "ranks.imbalance", .max = TM_SEV_MEDIUM, .run = tm_rule_ranks_imbalance},
};

size_t tm_an_rules(const struct tm_rule **list)
{
    *list = rules;
    return TM_ARRAY_LEN(rules);
}

/* The sort key of a finding: its severity, then whether its rule says
 * why the run ended. */
static int finding_order(const tm_finding *f)
{
    int ends = 0;
    for (size_t i = 0; i < TM_ARRAY_LEN(rules); i++)
        if (rules[i].ends_run && strcmp(rules[i].id, f->id) == 0)
            ends = 1;
    return 2 * (int)f->severity + ends;
}

static void apply_rules(struct an *an)
{
    size_t n = TM_ARRAY_LEN(rules);
    for (size_t i = 0; i < n;) {
        if (rules[i].run) {
            an->rule = &rules[i];
            rules[i].run(an);
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && rules[j].rank)
            j++;
        for (size_t r = 0; r < an->a->nranks; r++)
            for (size_t k = i; k < j; k++) {
                an->rule = &rules[k];
                rules[k].rank(an, &an->a->ranks[r]);
            }
        i = j;
    }
}

/* --- names */

const char *tm_severity_name(enum tm_severity s)
{
    switch (s) {
    case TM_SEV_INFO:
        return "info";
    case TM_SEV_LOW:
        return "low";
    case TM_SEV_MEDIUM:
        return "medium";
    case TM_SEV_HIGH:
        return "high";
    }
    return "?";
}

const char *tm_confidence_name(enum tm_confidence c)
{
    switch (c) {
    case TM_CONF_LOW:
        return "low";
    case TM_CONF_MEDIUM:
        return "medium";
    case TM_CONF_HIGH:
        return "high";
    }
    return "?";
}

/* --- evidence and findings */

void tm_an_ev_open(struct ev *e)
{
    tm_buf_init(&e->b, 1u << 20);
    tm_buf_add(&e->b, "{", 1);
    e->first = true;
}

void tm_an_ev_key(struct ev *e, const char *k)
{
    tm_buf_printf(&e->b, "%s\"%s\":", e->first ? "" : ",", k);
    e->first = false;
}

void tm_an_ev_num(struct ev *e, const char *k, double v)
{
    tm_an_ev_key(e, k);
    if (!isfinite(v))
        tm_buf_add(&e->b, "null", 4);
    else if (v == floor(v) && fabs(v) < 9e18)
        tm_buf_printf(&e->b, "%.0f", v);
    else
        tm_buf_printf(&e->b, "%.6g", v);
}

void tm_an_ev_str(struct ev *e, const char *k, const char *s)
{
    tm_an_ev_key(e, k);
    tm_buf_add(&e->b, "\"", 1);
    tm_buf_json_str(&e->b, s, strlen(s));
    tm_buf_add(&e->b, "\"", 1);
}

void tm_an_adv(char *adv, size_t cap, const char *fmt, ...)
{
    size_t n = strnlen(adv, cap);
    if (n + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(adv + n, cap - n, fmt, ap);
    va_end(ap);
}

void tm_an_add(struct an *an, enum tm_severity sev, enum tm_confidence conf, int32_t rank,
               struct ev *e, const char *title, const char *advice)
{
    tm_analysis *a = an->a;
    tm_buf_add(&e->b, "}", 1);
    char *ev = e->b.data ? strndup(e->b.data, e->b.len) : NULL;
    tm_buf_free(&e->b);
    char *t = strdup(title), *adv = strdup(advice);
    if (a->nf == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 16;
        tm_finding *f = realloc(a->f, nc * sizeof *f);
        if (!f)
            goto nomem;
        a->f = f;
        a->cap = nc;
    }
    if (!ev || !t || !adv)
        goto nomem;
    /* A rule says at most its table's severity: a rule that says more is
     * a bug in this file's table or in the rule, and the table wins. */
    if (sev > an->rule->max)
        sev = an->rule->max;
    a->f[a->nf++] = (tm_finding){.id = an->rule->id,
                                 .severity = sev,
                                 .confidence = conf,
                                 .rank = rank,
                                 .title = t,
                                 .evidence = ev,
                                 .advice = adv};
    return;
nomem:
    free(ev);
    free(t);
    free(adv);
    an->nomem = true;
}

void tm_an_gpus_of(char *buf, size_t cap, const tm_an_summary *S)
{
    if (S->ngpus < S->ngpus_recorded)
        snprintf(buf, cap, "mean of the job's %zu GPU(s) of %zu recorded", S->ngpus,
                 S->ngpus_recorded);
    else
        snprintf(buf, cap, "mean of %zu GPU(s)", S->ngpus);
}

void tm_an_bytes(char *buf, size_t cap, double v)
{
    if (!isfinite(v))
        snprintf(buf, cap, "n/a");
    else if (fabs(v) >= TM_AN_GiB)
        snprintf(buf, cap, "%.2f GiB", v / TM_AN_GiB);
    else if (fabs(v) >= TM_AN_MiB)
        snprintf(buf, cap, "%.1f MiB", v / TM_AN_MiB);
    else
        snprintf(buf, cap, "%.0f KiB", v / 1024.0);
}

int tm_analyze(const tm_run *r, tm_analysis **out)
{
    *out = NULL;
    tm_analysis *a = calloc(1, sizeof *a);
    if (!a)
        return tm_seterr(-ENOMEM, "analysis: out of memory");
    tm_runview v;
    if (tm_runsum_view_open(&v, r) < 0 || tm_runsum_build(&v, &a->sum, &a->ranks, &a->nranks) < 0) {
        tm_runsum_view_close(&v);
        tm_analysis_free(&a);
        return tm_seterr(-ENOMEM, "analysis: out of memory");
    }
    struct an an = {.v = &v, .a = a};
    apply_rules(&an);
    tm_runsum_view_close(&v);
    if (an.nomem) {
        tm_analysis_free(&a);
        return tm_seterr(-ENOMEM, "analysis: out of memory");
    }
    /* Most severe first, within a severity what ended the run first, else
     * stable (insertion sort: a handful of findings). */
    for (size_t i = 1; i < a->nf; i++) {
        tm_finding f = a->f[i];
        size_t j = i;
        while (j > 0 && finding_order(&a->f[j - 1]) < finding_order(&f)) {
            a->f[j] = a->f[j - 1];
            j--;
        }
        a->f[j] = f;
    }
    *out = a;
    return 0;
}

size_t tm_analysis_findings(const tm_analysis *a, const tm_finding **list)
{
    *list = a->f;
    return a->nf;
}

const tm_finding *tm_analysis_find(const tm_analysis *a, const char *id)
{
    for (size_t i = 0; i < a->nf; i++)
        if (strcmp(a->f[i].id, id) == 0)
            return &a->f[i];
    return NULL;
}

void tm_analysis_free(tm_analysis **pa)
{
    tm_analysis *a = pa ? *pa : NULL;
    if (!a)
        return;
    for (size_t i = 0; i < a->nf; i++) {
        free((char *)a->f[i].title);
        free((char *)a->f[i].evidence);
        free((char *)a->f[i].advice);
    }
    free(a->f);
    free(a->ranks);
    free(a);
    *pa = NULL;
}
