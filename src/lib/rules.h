/*
 * rules.h - what the rules (rules_*.c) share: the state of one analysis,
 * the evidence builder, the finding adder and one prototype per rule.
 * analysis.c holds the one rule table that applies them in order.  A new
 * finding is one function in the rules file of its family, its prototype
 * here and one line in the table (docs/DIAGNOSIS.md, "How the rules are
 * organised").  Internal.
 */
#ifndef TM_RULES_H
#define TM_RULES_H

#include <stdbool.h>
#include <stddef.h>

#include "analysis.h"
#include "runsum.h"
#include "util.h"

#define TM_AN_MiB (1024.0 * 1024.0)
#define TM_AN_GiB (1024.0 * 1024.0 * 1024.0)

struct an;

/* One rule: the finding id it reports, the most severe it can say (the
 * table documents it; tm_an_add lowers a higher one to it) and the
 * function that applies it.  Exactly one of run (once per analysis) and
 * rank (once per training process) is set. */
struct tm_rule {
    const char *id;
    enum tm_severity max;
    void (*run)(struct an *an);
    void (*rank)(struct an *an, const tm_an_rank *R);
    /* Its findings say why the run ended (an out-of-memory error): they
     * lead the findings of their severity, so the report's verdict is the
     * crash, not a slowdown of the same severity found before it. */
    bool ends_run;
};

/* One analysis in progress.  v and a are tm_analyze's; rule is the rule
 * being applied (its id goes on each finding it adds). */
struct an {
    const tm_runview *v;
    tm_analysis *a;
    const struct tm_rule *rule;
    bool nomem; /* a finding was lost to memory: tm_analyze fails */
};

/* Evidence: a JSON object built field by field (a growable tm_buf). */
struct ev {
    tm_buf b;
    bool first;
};

void tm_an_ev_open(struct ev *e);
void tm_an_ev_key(struct ev *e, const char *k);
/* A number; null when not finite, an integer without decimals. */
void tm_an_ev_num(struct ev *e, const char *k, double v);
void tm_an_ev_str(struct ev *e, const char *k, const char *s);
/* Closes e and adds the finding of the current rule (copies title and
 * advice; frees e's buffer).  Out of memory sets an->nomem. */
void tm_an_add(struct an *an, enum tm_severity sev, enum tm_confidence conf, int32_t rank,
               struct ev *e, const char *title, const char *advice);
/* Advice built sentence by sentence: appends to the string in adv (a
 * buffer of cap bytes, NUL-terminated), cut at its end, never past it. */
void tm_an_adv(char *adv, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "1.50 GiB", "12.0 MiB", "512 KiB" or "n/a". */
void tm_an_bytes(char *buf, size_t cap, double v);

/* rules_input.c: the loop waits for data, and why (one of the four). */
void tm_rule_input_ok(struct an *an);
void tm_rule_input_disk_bound(struct an *an);
void tm_rule_input_cpu_bound(struct an *an);
void tm_rule_input_data_wait(struct an *an);
void tm_rule_input_main_prep(struct an *an);
/* The time lost, its share of the run and the speed-up if the input kept
 * up: into e, and appended to the title in buf (every waiting verdict). */
void tm_an_input_cost(struct ev *e, const tm_an_summary *S, char *buf, size_t cap);
/* The evidence every input verdict begins with: the wait fraction and its
 * threshold, the steps, the step and compute medians. */
void tm_an_ev_input_head(struct ev *e, const tm_an_summary *S);
/* The severity of a data-wait fraction: high, medium, low (analysis.h) */
enum tm_severity tm_an_wait_severity(double f);
/* rules_handoff.c: the loop waits for batches its idle workers have ready */
bool tm_an_input_is_handoff(const tm_an_summary *S);
void tm_rule_input_handoff(struct an *an);
/* rules_overlap.c: the loop waited while its GPU was busy (host ran ahead) */
bool tm_an_input_is_overlapped(const tm_an_summary *S, size_t nranks);
void tm_rule_input_overlapped(struct an *an);
/* rules_startup.c: the loop waits for a new set of workers to start */
bool tm_an_input_is_startup(const tm_an_summary *S);
void tm_rule_input_worker_startup(struct an *an);
/* input.new_iterator (rules_newiter.c): judged before the start-ups */
bool tm_an_input_is_newiter(const tm_an_summary *S);
void tm_rule_input_new_iterator(struct an *an);
/* rules_input.c: the finding id the input verdict would be without the
 * start-up waits (the steady wait fraction, no restarts); NULL: none */
const char *tm_an_input_steady_verdict(const struct an *an);
/* rules_mount.c: a -d path whose filesystem did not answer (a hung mount) */
void tm_rule_data_hung_mount(struct an *an);
/* rules_steps.c: the agent ran but no step could be cut */
void tm_rule_steps_unsegmented(struct an *an);
void tm_rule_steps_hook_silent(struct an *an);
void tm_rule_run_measure_off(struct an *an);
/* rules_amp.c: optimizer steps AMP's GradScaler skipped */
void tm_rule_amp_skipped_steps(struct an *an);
/* rules_gpu.c */
void tm_rule_gpu_underutilized(struct an *an);
/* rules_gpu_swing.c */
void tm_rule_gpu_util_swing(struct an *an);
/* rules_gpu_mem.c: per training process. */
void tm_rule_gpu_mem_near_capacity(struct an *an, const tm_an_rank *R);
void tm_rule_gpu_mem_growth(struct an *an, const tm_an_rank *R);
void tm_rule_gpu_mem_fragmentation(struct an *an, const tm_an_rank *R);
void tm_rule_gpu_mem_alloc_retries(struct an *an, const tm_an_rank *R);
void tm_rule_gpu_mem_oom(struct an *an, const tm_an_rank *R);
/* rules_anatomy.c: per training process, from its memory anatomy records. */
void tm_rule_anatomy_optimizer_state(struct an *an, const tm_an_rank *R);
void tm_rule_anatomy_activations(struct an *an, const tm_an_rank *R);
void tm_rule_anatomy_max_micro_batch(struct an *an, const tm_an_rank *R);
/* rules_host.c */
void tm_rule_host_mem_worker_growth(struct an *an);
/* rules_cpu.c */
void tm_rule_host_cpu_oversubscribed(struct an *an);
/* rules_ranks.c */
void tm_rule_ranks_imbalance(struct an *an);
void tm_rule_ranks_straggler(struct an *an);

/* rules_cache.c: the dataset in the page cache, and many small files */
void tm_rule_data_page_cache(struct an *an);
void tm_rule_data_small_files(struct an *an);
/* The dataset readings as evidence (dataset_* keys), for input.disk_bound,
 * and a sentence on what they mean for the disk verdict appended to adv
 * (nothing when there is no reading). */
void tm_an_dataset_evidence(struct ev *e, const tm_an_summary *S);
void tm_an_dataset_advice(char *adv, size_t cap, const tm_an_summary *S);
/* The gain of packing small files into shards read sequentially: at the
 * same request rate, TM_AN_SHARD_REQ_BYTES per request instead of req.
 * read_gain = shard request / req (at least 1), capped where the storage
 * ceiling is known (ceiling_bps, the probe's sequential rate of that disk;
 * NAN: unknown) at ceiling / read_bps; *read_bps_after the bytes per
 * second that would carry; *speedup the step's expected speed-up, at most
 * step/compute (the input cannot make compute faster).  NAN where an input
 * is missing. */
void tm_an_pack_gain(double req_bytes, double read_bps, double ceiling_bps, double step_s,
                     double compute_s, double *read_gain, double *read_bps_after, double *speedup);
/* rules_ckpt.c: torch.save on the training thread stopped the loop */
void tm_rule_checkpoint_blocking(struct an *an);
void tm_rule_steps_compile(struct an *an);
void tm_rule_gc_pauses(struct an *an);
void tm_rule_steps_stalls(struct an *an);
/* rules_nograd.c: the model run without gradients between the steps (RL
 * rollouts, sampling, eval runs) */
void tm_rule_steps_no_grad(struct an *an);
/* rules_run.c: the run itself (the in-process recorder did not load) */
void tm_rule_run_agent_not_loaded(struct an *an);
/* The rule table, in the order the rules are applied; NULL-free. */
size_t tm_an_rules(const struct tm_rule **list);

#endif
