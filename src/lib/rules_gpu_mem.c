/*
 * rules_gpu_mem.c - gpu_mem.*: GPU memory of each training process, one
 * function per finding (docs/DIAGNOSIS.md, "gpu_mem.*"): near capacity,
 * steady growth of the per-step floor, fragmentation at peak reserved,
 * allocation retries and each out-of-memory error with its likely cause.
 * The rule table applies them rank by rank.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "anatomy.h"
#include "rules.h"

/* Captures of source s: [*b, *e).  The run's arrays are grouped by source
 * in increasing order, so the first is found by bisection. */
static void captures_of(const tm_run_capture *cp, size_t n, uint32_t s, size_t *b, size_t *e)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp[mid].source < s)
            lo = mid + 1;
        else
            hi = mid;
    }
    *b = lo;
    while (lo < n && cp[lo].source == s)
        lo++;
    *e = lo;
}

/* The per-step floor of allocated (the minimum over each step's captures),
 * as x = step, y = bytes.  Returns the number of points. */
static size_t step_floor(const tm_run_capture *cp, size_t b, size_t e, double *x, double *y)
{
    size_t k = 0;
    for (size_t i = b; i < e; i++) {
        double v = cp[i].c.allocated;
        if (isnan(v))
            continue;
        double st = (double)cp[i].c.step;
        if (k && x[k - 1] == st) {
            if (v < y[k - 1])
                y[k - 1] = v;
        } else {
            x[k] = st;
            y[k] = v;
            k++;
        }
    }
    return k;
}

/* The per-step floor of R's captures: x, y malloc'ed (the caller frees
 * them), *k points; false (an->nomem set) when out of memory. */
static bool rank_floor(struct an *an, const tm_an_rank *R, double **x, double **y, size_t *k)
{
    const tm_run_capture *cp;
    size_t ncp = tm_run_captures(an->v->r, &cp), b, e;
    captures_of(cp, ncp, R->source, &b, &e);
    *x = malloc((e > b ? e - b : 1) * sizeof **x);
    *y = malloc((e > b ? e - b : 1) * sizeof **y);
    if (!*x || !*y) {
        free(*x);
        free(*y);
        *x = *y = NULL;
        an->nomem = true;
        return false;
    }
    *k = step_floor(cp, b, e, *x, *y);
    return true;
}

void tm_rule_gpu_mem_near_capacity(struct an *an, const tm_an_rank *R)
{
    struct ev ev;
    char buf[1024], h1[32], h2[32];
    double peak = fmax(R->peak_reserved, R->peak_allocated);
    if (R->total_device > 0 && peak / R->total_device > TM_AN_MEM_NEAR) {
        tm_an_ev_open(&ev);
        tm_an_ev_num(&ev, "peak_reserved_bytes", R->peak_reserved);
        tm_an_ev_num(&ev, "peak_allocated_bytes", R->peak_allocated);
        tm_an_ev_num(&ev, "device_total_bytes", R->total_device);
        tm_an_ev_num(&ev, "peak_ratio", peak / R->total_device);
        tm_an_ev_num(&ev, "threshold", TM_AN_MEM_NEAR);
        tm_an_bytes(h1, sizeof h1, peak);
        tm_an_bytes(h2, sizeof h2, R->total_device);
        snprintf(buf, sizeof buf, "rank %s: GPU memory near capacity: peak %s of %s (%.0f%%)",
                 R->label, h1, h2, 100 * peak / R->total_device);
        tm_an_add(an, TM_SEV_MEDIUM, TM_CONF_HIGH, R->rank, &ev, buf,
                  "One larger batch or sequence away from an OOM: use activation "
                  "(gradient) checkpointing, mixed precision (AMP, bf16), or a smaller "
                  "batch with gradient accumulation.");
    }
}

/* The per-step floor of allocated keeps rising: a leak. */
void tm_rule_gpu_mem_growth(struct an *an, const tm_an_rank *R)
{
    double *x, *y;
    size_t k;
    if (!rank_floor(an, R, &x, &y, &k))
        return;
    struct ev ev;
    char buf[1024], adv[2048], h1[32], h2[32];
    if (k >= TM_AN_GROWTH_MIN_STEPS) {
        size_t skip = (size_t)((double)k * TM_AN_GROWTH_WARMUP);
        if (skip < 1)
            skip = 1;
        double slope, r2;
        tm_runsum_fit(x + skip, y + skip, k - skip, &slope, &r2);
        double rise = slope * (x[k - 1] - x[skip]);
        if (slope > 0 && r2 >= TM_AN_GROWTH_R2 && rise >= TM_AN_GROWTH_MIN_BYTES) {
            tm_an_ev_open(&ev);
            tm_an_ev_num(&ev, "bytes_per_step", slope);
            tm_an_ev_num(&ev, "r2", r2);
            tm_an_ev_num(&ev, "rise_bytes", rise);
            tm_an_ev_num(&ev, "from_step", x[skip]);
            tm_an_ev_num(&ev, "to_step", x[k - 1]);
            tm_an_ev_num(&ev, "allocated_first_bytes", y[skip]);
            tm_an_ev_num(&ev, "allocated_last_bytes", y[k - 1]);
            double left = R->total_device - fmax(y[k - 1], R->peak_reserved);
            double steps_left = R->total_device > 0 && left > 0 ? floor(left / slope) : NAN;
            tm_an_ev_num(&ev, "device_total_bytes", R->total_device);
            tm_an_ev_num(&ev, "steps_until_full", steps_left);
            tm_an_bytes(h1, sizeof h1, slope);
            tm_an_bytes(h2, sizeof h2, rise);
            snprintf(buf, sizeof buf,
                     "rank %s: GPU memory grows steadily: +%s per step (+%s over steps "
                     "%.0f-%.0f): a leak",
                     R->label, h1, h2, x[skip], x[k - 1]);
            if (isfinite(steps_left))
                snprintf(adv, sizeof adv,
                         "At this rate the device is full in about %.0f more steps. Look for "
                         "tensors kept across steps: a loss accumulated without .item() or "
                         ".detach(), lists of outputs, hooks holding activations.",
                         steps_left);
            else
                snprintf(adv, sizeof adv,
                         "Look for tensors kept across steps: a loss accumulated without "
                         ".item() or .detach(), lists of outputs, hooks holding activations.");
            tm_an_add(an,
                      R->total_device > 0 && rise >= 0.1 * R->total_device ? TM_SEV_HIGH
                                                                           : TM_SEV_MEDIUM,
                      r2 >= 0.95 ? TM_CONF_HIGH : TM_CONF_MEDIUM, R->rank, &ev, buf, adv);
        }
    }
    free(x);
    free(y);
}

/* Inactive split blocks at the capture of peak reserved. */
void tm_rule_gpu_mem_fragmentation(struct an *an, const tm_an_rank *R)
{
    const tm_run_capture *cp;
    size_t ncp = tm_run_captures(an->v->r, &cp), b, e;
    captures_of(cp, ncp, R->source, &b, &e);
    struct ev ev;
    char buf[1024], h1[32], h2[32];
    size_t at = e;
    for (size_t i = b; i < e; i++)
        if (!isnan(cp[i].c.reserved) && !isnan(cp[i].c.inactive_split) &&
            (at == e || cp[i].c.reserved > cp[at].c.reserved))
            at = i;
    if (at < e) {
        const tm_inproc_capture *c = &cp[at].c;
        double ratio = c->reserved > 0 ? c->inactive_split / c->reserved : 0;
        if (ratio >= TM_AN_FRAG_RATIO && c->inactive_split >= TM_AN_FRAG_MIN_BYTES) {
            tm_an_ev_open(&ev);
            tm_an_ev_num(&ev, "inactive_split_bytes", c->inactive_split);
            tm_an_ev_num(&ev, "reserved_bytes", c->reserved);
            tm_an_ev_num(&ev, "allocated_bytes", c->allocated);
            tm_an_ev_num(&ev, "ratio", ratio);
            tm_an_ev_num(&ev, "threshold", TM_AN_FRAG_RATIO);
            tm_an_ev_num(&ev, "step", (double)c->step);
            tm_an_bytes(h1, sizeof h1, c->inactive_split);
            tm_an_bytes(h2, sizeof h2, c->reserved);
            snprintf(buf, sizeof buf,
                     "rank %s: GPU memory fragmented: %s of %s reserved are unusable split "
                     "blocks (%.0f%%)",
                     R->label, h1, h2, 100 * ratio);
            bool near = R->total_device > 0 && c->reserved / R->total_device > TM_AN_MEM_NEAR;
            tm_an_add(an, near || R->ooms ? TM_SEV_HIGH : TM_SEV_MEDIUM, TM_CONF_HIGH, R->rank, &ev,
                      buf,
                      "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (torch >= 2.1) "
                      "or max_split_size_mb:128; keep tensor shapes stable between steps "
                      "(pad variable-length batches to a few sizes).");
        }
    }
}

void tm_rule_gpu_mem_alloc_retries(struct an *an, const tm_an_rank *R)
{
    const tm_run_capture *cp;
    size_t ncp = tm_run_captures(an->v->r, &cp), b, e;
    captures_of(cp, ncp, R->source, &b, &e);
    struct ev ev;
    char buf[1024];
    if (R->alloc_retries > 0) {
        double first_step = NAN, r0 = NAN;
        for (size_t i = b; i < e; i++) {
            double v = cp[i].c.num_alloc_retries;
            if (isnan(v))
                continue;
            if (isnan(r0))
                r0 = v;
            else if (v > r0) {
                first_step = (double)cp[i].c.step;
                break;
            }
        }
        double per = R->steps ? R->alloc_retries / (double)R->steps : NAN;
        tm_an_ev_open(&ev);
        tm_an_ev_num(&ev, "alloc_retries", R->alloc_retries);
        tm_an_ev_num(&ev, "steps", (double)R->steps);
        tm_an_ev_num(&ev, "retries_per_step", per);
        tm_an_ev_num(&ev, "first_seen_step", first_step);
        snprintf(buf, sizeof buf,
                 "rank %s: %.0f allocation retries: the allocator freed its cache and "
                 "retried (a synchronising cudaFree each time)",
                 R->label, R->alloc_retries);
        tm_an_add(an, per >= TM_AN_RETRIES_PER_STEP_HIGH ? TM_SEV_HIGH : TM_SEV_MEDIUM,
                  TM_CONF_HIGH, R->rank, &ev, buf,
                  "Memory is at its limit and each retry stalls the GPU: lower the peak "
                  "(smaller batch, checkpointing, AMP) or reduce fragmentation "
                  "(expandable_segments:True).");
    }
}

/* What the OOM summary (the snapshot read at the OOM) says, for one OOM:
 * the cause in the order the finding tells them (fragmentation, growth,
 * then the live data by category), with the numbers. */
enum oom_cause { C_FRAG, C_GROWTH, C_ACT, C_STATE, C_PARAMS, C_PEAK };
static const char *const cause_names[] = {"fragmentation",   "growth",     "activations",
                                          "optimizer_state", "parameters", "peak"};

static bool sum_usable(const tm_inproc_oomsum *S)
{
    return S && S->status != TM_OOMSUM_NO_SNAPSHOT && isfinite(S->requested) &&
           isfinite(S->free_device) && isfinite(S->largest_free) && isfinite(S->free_cached);
}

/* Fragmentation from the summary: no free piece of the request's pool and
 * not the device's free memory fit the request, but the two together do. */
static bool sum_frag(const tm_inproc_oomsum *S)
{
    return sum_usable(S) && S->largest_free < S->requested && S->free_device < S->requested &&
           S->free_device + S->free_cached >= S->requested;
}

/* The live data's cause, when the live bytes are split by category. */
static enum oom_cause sum_live_cause(const tm_inproc_oomsum *S)
{
    if (!S || S->status == TM_OOMSUM_NO_SNAPSHOT || !isfinite(S->live) || S->live <= 0 ||
        !isfinite(S->live_other))
        return C_PEAK;
    if (S->live_other / S->live >= TM_AN_OOM_ACT_SHARE)
        return C_ACT;
    if (S->live_optim_state / S->live >= TM_AN_OOM_STATE_SHARE)
        return C_STATE;
    if ((S->live_params + S->live_grads) / S->live >= TM_AN_OOM_PARAMS_SHARE)
        return C_PARAMS;
    return C_PEAK;
}

static void ev_summary(struct ev *ev, const tm_inproc_oomsum *S)
{
    static const char *const st[] = {"unknown", "ok", "cut", "no_snapshot"};
    static const char *const pools[] = {"unknown", "small", "large"};
    tm_an_ev_str(ev, "snapshot_status", S->status < 4 ? st[S->status] : "unknown");
    if (S->why[0])
        tm_an_ev_str(ev, "snapshot_why", S->why);
    tm_an_ev_str(ev, "request_pool", S->pool < 3 ? pools[S->pool] : "unknown");
    tm_an_ev_num(ev, "largest_free_bytes", S->largest_free);
    tm_an_ev_num(ev, "free_cached_bytes", S->free_cached);
    tm_an_ev_num(ev, "free_pieces", S->fragments);
    tm_an_ev_num(ev, "expandable_usable_bytes", S->expandable);
    tm_an_ev_num(ev, "snapshot_reserved_bytes", S->reserved);
    tm_an_ev_num(ev, "live_bytes", S->live);
    tm_an_ev_num(ev, "live_params_bytes", S->live_params);
    tm_an_ev_num(ev, "live_grads_bytes", S->live_grads);
    tm_an_ev_num(ev, "live_optim_state_bytes", S->live_optim_state);
    tm_an_ev_num(ev, "live_other_bytes", S->live_other);
    tm_an_ev_num(ev, "live_unknown_bytes", S->live_unknown);
    tm_an_ev_num(ev, "blocks_walked", S->blocks);
    const char *site[TM_OOMSUM_SITES] = {S->site1, S->site2, S->site3, S->site4, S->site5};
    double sb[TM_OOMSUM_SITES] = {S->site1_bytes, S->site2_bytes, S->site3_bytes, S->site4_bytes,
                                  S->site5_bytes};
    for (int k = 0; k < TM_OOMSUM_SITES; k++) {
        if (!site[k] || !site[k][0])
            break;
        char key[32];
        snprintf(key, sizeof key, "site%d", k + 1);
        tm_an_ev_str(ev, key, site[k]);
        snprintf(key, sizeof key, "site%d_bytes", k + 1);
        tm_an_ev_num(ev, key, sb[k]);
    }
}

/* The latest anatomy of R with activations per sample (the remedy's
 * bytes per sample), or NULL. */
static const tm_inproc_anatomy *anat_per_sample(struct an *an, const tm_an_rank *R)
{
    const tm_run_anatomy *rows[TM_ANAT_MAX];
    size_t n = tm_anat_latest(an->v->r, R->source, rows, TM_ANAT_MAX);
    for (size_t i = 0; i < n; i++)
        if (rows[i]->a.batch_size > 0 && isfinite(rows[i]->a.activations) &&
            rows[i]->a.activations > 0)
            return &rows[i]->a;
    return NULL;
}

/* One finding per distinct OOM (the observer may fire several times),
 * leading with its cause and remedy: fragmentation (from the snapshot's
 * summary, or free + cached against the request without one), growth
 * before it, the live data by category, or the step's peak. */
void tm_rule_gpu_mem_oom(struct an *an, const tm_an_rank *R)
{
    const tm_run_oom *om;
    size_t nom = tm_run_ooms(an->v->r, &om);
    double *x = NULL, *y = NULL;
    size_t k = 0;
    struct ev ev;
    char buf[1024], adv[2048], h1[32], h2[32], h3[32], h4[32], h5[32], snapnote[160];
    for (size_t i = 0; i < nom; i++) {
        if (om[i].source != R->source ||
            (i > 0 && om[i - 1].source == om[i].source && om[i - 1].o.seq == om[i].o.seq))
            continue;
        const tm_inproc_oom *o = &om[i].o;
        const tm_inproc_oomsum *S = tm_run_oomsum_of(an->v->r, om[i].source, o->seq);
        if (!x && !rank_floor(an, R, &x, &y, &k))
            return;
        /* trend: the allocated floor over the 50 steps before it */
        size_t kk = 0;
        for (size_t q = 0; q < k; q++)
            if (x[q] <= (double)o->step && x[q] + 50 >= (double)o->step)
                kk++;
        double slope = NAN, r2 = NAN;
        size_t q0 = 0;
        while (q0 < k && !(x[q0] <= (double)o->step && x[q0] + 50 >= (double)o->step))
            q0++;
        if (kk >= 3)
            tm_runsum_fit(x + q0, y + q0, kk, &slope, &r2);
        double cached = o->reserved - o->allocated;
        bool frag = sum_usable(S) ? sum_frag(S)
                                  : isfinite(o->free_device) && isfinite(cached) &&
                                        o->free_device + cached >= o->requested &&
                                        o->free_device < o->requested;
        bool leak = kk >= 3 && slope > 0 && r2 >= TM_AN_GROWTH_R2 &&
                    slope * (double)kk >= TM_AN_GROWTH_MIN_BYTES;
        enum oom_cause cause = frag ? C_FRAG : leak ? C_GROWTH : sum_live_cause(S);
        const tm_run_source *src = &an->v->src[R->source];
        tm_an_ev_open(&ev);
        tm_an_ev_num(&ev, "step", (double)o->step);
        tm_an_ev_str(&ev, "phase", o->phase);
        tm_an_ev_num(&ev, "device", o->device);
        tm_an_ev_num(&ev, "requested_bytes", o->requested);
        tm_an_ev_num(&ev, "free_device_bytes", o->free_device);
        tm_an_ev_num(&ev, "device_total_bytes", o->total_device);
        tm_an_ev_num(&ev, "allocated_bytes", o->allocated);
        tm_an_ev_num(&ev, "reserved_bytes", o->reserved);
        tm_an_ev_num(&ev, "trend_bytes_per_step", slope);
        tm_an_ev_num(&ev, "trend_steps", (double)kk);
        tm_an_ev_str(&ev, "source", o->source == TM_OOM_OBSERVER ? "observer" : "exception");
        tm_an_ev_str(&ev, "cause", cause_names[cause]);
        if (S)
            ev_summary(&ev, S);
        if (o->snapshot[0]) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", src->dir, o->snapshot);
            tm_an_ev_str(&ev, "snapshot", path);
        }
        snprintf(snapnote, sizeof snapnote, "%s",
                 o->snapshot[0] ? " The allocator snapshot opens at pytorch.org/memory_viz." : "");
        tm_an_bytes(h1, sizeof h1, o->requested);
        tm_an_bytes(h2, sizeof h2, o->free_device);
        tm_an_bytes(h3, sizeof h3, o->total_device);
        int n = snprintf(buf, sizeof buf,
                         "rank %s: CUDA out of memory at step %" PRIu64 "%s%s: ", R->label, o->step,
                         o->phase[0] ? " in " : "", o->phase);
        size_t L = n > 0 && (size_t)n < sizeof buf ? (size_t)n : 0;
        double live = S ? S->live : NAN;
        tm_an_bytes(h5, sizeof h5, live);
        switch (cause) {
        case C_FRAG:
            if (sum_usable(S)) {
                /* asked for 1.00 GiB; 1.03 GiB free but the largest piece is
                 * 200 MiB (4 pieces): fragmentation */
                tm_an_bytes(h2, sizeof h2, S->free_device + S->free_cached);
                tm_an_bytes(h3, sizeof h3, S->largest_free);
                tm_an_bytes(h4, sizeof h4, S->expandable);
                snprintf(buf + L, sizeof buf - L,
                         "asked for %s; %s free but the largest piece is %s (%.0f pieces): "
                         "fragmentation",
                         h1, h2, h3, S->fragments);
                if (isfinite(S->expandable) && S->expandable >= S->requested)
                    snprintf(adv, sizeof adv,
                             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True would have fit "
                             "it (%s usable: the device's free memory and the whole 20 MiB "
                             "pages inside the free pieces).%s",
                             h4, snapnote);
                else
                    snprintf(adv, sizeof adv,
                             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces the "
                             "scattering but would not have fit it alone (%s usable): lower "
                             "the peak as well (smaller micro-batch, checkpointing).%s",
                             h4, snapnote);
            } else {
                snprintf(buf + L, sizeof buf - L, "asked for %s with %s free of %s: fragmentation",
                         h1, h2, h3);
                snprintf(adv, sizeof adv,
                         "Enough memory was free in total (%s free plus cached blocks) but not "
                         "in one piece: fragmentation. Set "
                         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.%s",
                         h2, snapnote);
            }
            break;
        case C_GROWTH:
            snprintf(buf + L, sizeof buf - L,
                     "asked for %s with %s free of %s after growing %.1f MiB per step", h1, h2, h3,
                     slope / TM_AN_MiB);
            snprintf(adv, sizeof adv,
                     "Memory grew by %.1f MiB per step before it: a leak (tensors kept "
                     "across steps), not a single large step.%s",
                     slope / TM_AN_MiB,
                     o->snapshot[0] ? " The snapshot (pytorch.org/memory_viz) shows who "
                                      "holds the memory."
                                    : "");
            break;
        case C_ACT: {
            double act = S->live_other;
            tm_an_bytes(h4, sizeof h4, act);
            snprintf(buf + L, sizeof buf - L,
                     "asked for %s with %s free; activations and temporaries hold %s of the %s "
                     "live (%.0f%%)",
                     h1, h2, h4, h5, 100 * act / S->live);
            char h6[32], per[256] = "";
            tm_an_bytes(h6, sizeof h6, act / 2);
            tm_an_ev_num(&ev, "half_micro_batch_saves_bytes", act / 2);
            const tm_inproc_anatomy *A = anat_per_sample(an, R);
            if (A) {
                double ps = A->activations / (double)A->batch_size;
                char h7[32];
                tm_an_bytes(h7, sizeof h7, ps);
                tm_an_ev_num(&ev, "anatomy_batch_size", (double)A->batch_size);
                tm_an_ev_num(&ev, "anatomy_activations_per_sample_bytes", ps);
                snprintf(per, sizeof per,
                         " The memory anatomy measured %s of activations per sample at a batch "
                         "of %" PRId64 ": each sample less saves about that.",
                         h7, A->batch_size);
            }
            snprintf(adv, sizeof adv,
                     "Activation checkpointing (torch.utils.checkpoint) keeps only each "
                     "checkpointed block's inputs and frees most of the %s; half the "
                     "micro-batch with twice the gradient accumulation steps keeps the "
                     "effective batch and saves about %s.%s%s",
                     h4, h6, per, snapnote);
            break;
        }
        case C_STATE: {
            double st = S->live_optim_state;
            size_t nr = an->a->nranks;
            double ranks = nr > 1 ? (double)nr : 8; /* an example for one process */
            double shard = st * (ranks - 1) / ranks, eight = st * TM_AN_ANAT_8BIT_SAVES;
            char h6[32], h7[32];
            tm_an_bytes(h4, sizeof h4, st);
            tm_an_bytes(h6, sizeof h6, shard);
            tm_an_bytes(h7, sizeof h7, eight);
            tm_an_ev_num(&ev, "shard_ranks", ranks);
            tm_an_ev_num(&ev, "sharding_saves_bytes", shard);
            tm_an_ev_num(&ev, "eight_bit_saves_bytes", eight);
            snprintf(buf + L, sizeof buf - L,
                     "asked for %s with %s free; the optimizer's state holds %s of the %s live "
                     "(%.0f%%)",
                     h1, h2, h4, h5, 100 * st / S->live);
            snprintf(adv, sizeof adv,
                     "Shard the optimizer's state over %.0f ranks (ZeroRedundancyOptimizer, "
                     "FSDP, DeepSpeed ZeRO-1): each rank keeps 1/%.0f of it, saving %s%s; an "
                     "8-bit optimizer (bitsandbytes Adam8bit) stores each moment in 1 byte "
                     "instead of 4 and saves about 3/4 of it: %s.%s",
                     ranks, ranks, h6, nr > 1 ? "" : " (with 8 ranks; (N-1)/N of it with N)", h7,
                     snapnote);
            break;
        }
        case C_PARAMS: {
            double pg = S->live_params + S->live_grads;
            size_t nr = an->a->nranks;
            double ranks = nr > 1 ? (double)nr : 8;
            char h6[32];
            tm_an_bytes(h4, sizeof h4, pg);
            tm_an_bytes(h6, sizeof h6, pg * (ranks - 1) / ranks);
            tm_an_ev_num(&ev, "shard_ranks", ranks);
            tm_an_ev_num(&ev, "sharding_saves_bytes", pg * (ranks - 1) / ranks);
            snprintf(buf + L, sizeof buf - L,
                     "asked for %s with %s free; the parameters and their gradients hold %s of "
                     "the %s live (%.0f%%)",
                     h1, h2, h4, h5, 100 * pg / S->live);
            snprintf(adv, sizeof adv,
                     "Shard the parameters and gradients over %.0f ranks (FSDP, DeepSpeed "
                     "ZeRO-3): each rank keeps 1/%.0f of them, saving %s%s; bf16 weights take "
                     "half of fp32's, and frozen weights (a LoRA base model, a teacher) load in "
                     "8 or 4 bits (bitsandbytes, QLoRA).%s",
                     ranks, ranks, h6, nr > 1 ? "" : " (with 8 ranks; (N-1)/N of it with N)",
                     snapnote);
            break;
        }
        case C_PEAK:
            snprintf(buf + L, sizeof buf - L, "asked for %s with %s free of %s", h1, h2, h3);
            snprintf(adv, sizeof adv,
                     "The step's peak does not fit: smaller batch (with gradient "
                     "accumulation), activation checkpointing or AMP.%s",
                     o->snapshot[0] ? " The snapshot (pytorch.org/memory_viz) shows the "
                                      "largest allocations."
                                    : "");
            break;
        }
        tm_an_add(an, TM_SEV_HIGH, TM_CONF_HIGH, R->rank, &ev, buf, adv);
    }
    free(x);
    free(y);
}
