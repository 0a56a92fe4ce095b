/*
 * rules_anatomy.c - anatomy.*: what each device's memory is made of (the
 * memory anatomy records, anatomy.h), one function per finding
 * (docs/DIAGNOSIS.md "anatomy.*"): the optimizer's state dominating, the
 * activations dominating, and the largest micro-batch that fits.  Each is
 * judged on the latest anatomy of each device of a training process; the
 * rule table applies them rank by rank.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "anatomy.h"
#include "rules.h"

/* The latest anatomy of each device of R; how many. */
static size_t rows_of(struct an *an, const tm_an_rank *R, const tm_run_anatomy **rows)
{
    return tm_anat_latest(an->v->r, R->source, rows, TM_ANAT_MAX);
}

static double finite0(double v)
{
    return isfinite(v) && v > 0 ? v : 0;
}

/* The shared evidence: the device and its anatomy. */
static void ev_anatomy(struct ev *e, const tm_inproc_anatomy *x, const char *dev, double acc)
{
    tm_an_ev_str(e, "device", dev);
    tm_an_ev_num(e, "step", (double)x->step);
    tm_an_ev_num(e, "params_bytes", x->params);
    tm_an_ev_num(e, "grads_bytes", x->grads);
    tm_an_ev_num(e, "optim_state_bytes", x->optim_state);
    tm_an_ev_num(e, "activations_bytes", x->activations);
    tm_an_ev_num(e, "unknown_bytes", x->unknown);
    tm_an_ev_num(e, "accounted_bytes", acc);
}

/* The optimizer's state is the largest share of what the device holds:
 * Adam keeps two fp32 moments per parameter (exp_avg, exp_avg_sq:
 * torch/optim/adam.py), twice the fp32 weights.  Sharding it over N ranks
 * (ZeRO-1: torch.distributed.optim.ZeroRedundancyOptimizer, FSDP) keeps
 * 1/N of it per rank; an 8-bit optimizer stores each moment in one byte
 * instead of four. */
void tm_rule_anatomy_optimizer_state(struct an *an, const tm_an_rank *R)
{
    const tm_run_anatomy *rows[TM_ANAT_MAX];
    size_t n = rows_of(an, R, rows);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_anatomy *x = &rows[i]->a;
        double acc = tm_anat_accounted(x), st = finite0(x->optim_state);
        if (acc <= 0 || st < TM_AN_ANAT_MIN_BYTES || st / acc < TM_AN_ANAT_STATE_SHARE)
            continue;
        size_t nr = an->a->nranks;
        double ranks = nr > 1 ? (double)nr : 8; /* an example for one process */
        double shard = st * (ranks - 1) / ranks, eight = st * TM_AN_ANAT_8BIT_SAVES;
        char dev[64], h1[32], h2[32], h3[32], h4[32], buf[512], adv[1024];
        tm_anat_device(dev, sizeof dev, x);
        tm_anat_bytes(h1, sizeof h1, st);
        tm_anat_bytes(h2, sizeof h2, acc);
        tm_anat_bytes(h3, sizeof h3, shard);
        tm_anat_bytes(h4, sizeof h4, eight);
        struct ev ev;
        tm_an_ev_open(&ev);
        ev_anatomy(&ev, x, dev, acc);
        tm_an_ev_num(&ev, "optim_state_share", st / acc);
        tm_an_ev_num(&ev, "threshold", TM_AN_ANAT_STATE_SHARE);
        tm_an_ev_num(&ev, "state_per_param_byte", x->params > 0 ? st / x->params : NAN);
        tm_an_ev_num(&ev, "shard_ranks", ranks);
        tm_an_ev_num(&ev, "sharding_saves_bytes", shard);
        tm_an_ev_num(&ev, "eight_bit_saves_bytes", eight);
        snprintf(buf, sizeof buf,
                 "rank %s: the optimizer's state is %.0f%% of what %s holds: %s of %s", R->label,
                 100 * st / acc, dev, h1, h2);
        snprintf(adv, sizeof adv,
                 "Adam and AdamW keep two fp32 moments per parameter, twice the fp32 weights. "
                 "Sharding the state over %.0f ranks (ZeroRedundancyOptimizer, FSDP, DeepSpeed "
                 "ZeRO-1) keeps 1/%.0f of it per rank and saves %s here%s; an 8-bit optimizer "
                 "(bitsandbytes Adam8bit) stores each moment in 1 byte instead of 4 and saves "
                 "about 3/4 of it: %s.",
                 ranks, ranks, h3, nr > 1 ? "" : " (with 8 ranks: (N-1)/N of it with N)", h4);
        tm_an_add(an, TM_SEV_LOW, TM_CONF_HIGH, R->rank, &ev, buf, adv);
    }
}

/* The activations (what the step holds at the start of backward beyond
 * the parameters, gradients and state) are the largest share: they scale
 * with the micro-batch, and checkpointing keeps only the blocks' inputs. */
void tm_rule_anatomy_activations(struct an *an, const tm_an_rank *R)
{
    const tm_run_anatomy *rows[TM_ANAT_MAX];
    size_t n = rows_of(an, R, rows);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_anatomy *x = &rows[i]->a;
        double acc = tm_anat_accounted(x), act = finite0(x->activations);
        if (acc <= 0 || act < TM_AN_ANAT_MIN_BYTES || act / acc < TM_AN_ANAT_ACT_SHARE)
            continue;
        char dev[64], h1[32], h2[32], h3[32], buf[512], adv[1024], per[96] = "";
        tm_anat_device(dev, sizeof dev, x);
        tm_anat_bytes(h1, sizeof h1, act);
        tm_anat_bytes(h2, sizeof h2, acc);
        tm_anat_bytes(h3, sizeof h3, act / 2);
        struct ev ev;
        tm_an_ev_open(&ev);
        ev_anatomy(&ev, x, dev, acc);
        tm_an_ev_num(&ev, "activations_share", act / acc);
        tm_an_ev_num(&ev, "threshold", TM_AN_ANAT_ACT_SHARE);
        tm_an_ev_num(&ev, "half_micro_batch_saves_bytes", act / 2);
        if (x->batch_size > 0) {
            char h4[32];
            tm_anat_bytes(h4, sizeof h4, act / (double)x->batch_size);
            tm_an_ev_num(&ev, "batch_size", (double)x->batch_size);
            tm_an_ev_num(&ev, "activations_per_sample_bytes", act / (double)x->batch_size);
            snprintf(per, sizeof per, " (%s per sample of a batch of %" PRId64 ")", h4,
                     x->batch_size);
        }
        snprintf(buf, sizeof buf, "rank %s: activations are %.0f%% of what %s holds: %s of %s%s",
                 R->label, 100 * act / acc, dev, h1, h2, per);
        snprintf(adv, sizeof adv,
                 "Activation checkpointing (torch.utils.checkpoint) keeps only each checkpointed "
                 "block's inputs and recomputes the rest in backward (about one more forward "
                 "pass): it frees most of the %s. Half the micro-batch with twice the gradient "
                 "accumulation steps keeps the same effective batch and saves about %s.",
                 h1, h3);
        tm_an_add(an, TM_SEV_LOW, TM_CONF_MEDIUM, R->rank, &ev, buf, adv);
    }
}

/* The largest micro-batch that fits, from the activations per sample and
 * what the process may still use: its cached blocks (reserved) and the
 * device's free memory.  Assumes the activations grow linearly with the
 * batch and nothing else does, and that every gradient is live with every
 * activation (the peak of a backward pass, at most); TM_AN_ANAT_MARGIN of
 * that memory is kept back for fragmentation and transient buffers. */
void tm_rule_anatomy_max_micro_batch(struct an *an, const tm_an_rank *R)
{
    const tm_run_anatomy *rows[TM_ANAT_MAX];
    size_t n = rows_of(an, R, rows);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_anatomy *x = &rows[i]->a;
        double act = x->activations;
        if (x->batch_size <= 0 || !isfinite(act) || act <= 0 || !isfinite(x->free_device) ||
            !isfinite(x->reserved))
            continue;
        double B = (double)x->batch_size, per = act / B;
        double usable = (1 - TM_AN_ANAT_MARGIN) * (x->free_device + x->reserved);
        double fixed =
            finite0(x->params) + finite0(x->grads) + finite0(x->optim_state) + finite0(x->unknown);
        double room = usable - fixed;
        double fit = room > 0 ? floor(room / per) : 0;
        char dev[64], h1[32], h2[32], h3[32], buf[512], adv[1024];
        tm_anat_device(dev, sizeof dev, x);
        tm_anat_bytes(h1, sizeof h1, per);
        tm_anat_bytes(h2, sizeof h2, x->free_device + x->reserved);
        tm_anat_bytes(h3, sizeof h3, fixed);
        struct ev ev;
        tm_an_ev_open(&ev);
        ev_anatomy(&ev, x, dev, tm_anat_accounted(x));
        tm_an_ev_num(&ev, "batch_size", B);
        tm_an_ev_num(&ev, "activations_per_sample_bytes", per);
        tm_an_ev_num(&ev, "free_device_bytes", x->free_device);
        tm_an_ev_num(&ev, "reserved_bytes", x->reserved);
        tm_an_ev_num(&ev, "margin", TM_AN_ANAT_MARGIN);
        tm_an_ev_num(&ev, "fixed_bytes", fixed);
        tm_an_ev_num(&ev, "max_micro_batch", fit);
        if (fit > B)
            snprintf(buf, sizeof buf,
                     "rank %s: a micro-batch of about %.0f would fit on %s (now %.0f), at %s of "
                     "activations per sample",
                     R->label, fit, dev, B, h1);
        else
            snprintf(buf, sizeof buf,
                     "rank %s: no micro-batch larger than %.0f fits on %s with a %.0f%% margin "
                     "(estimate %.0f), at %s of activations per sample",
                     R->label, B, dev, 100 * TM_AN_ANAT_MARGIN, fit, h1);
        snprintf(adv, sizeof adv,
                 "Estimated as %.0f%% of the memory this process may use (free %s with its "
                 "cached blocks) less the parameters, gradients and optimizer state (%s), "
                 "divided by the activations per sample. It assumes the activations grow "
                 "linearly with the batch, nothing else does, and every gradient is live with "
                 "every activation; a model whose activations grow faster (attention over a "
                 "longer sequence) fits fewer.",
                 100 * (1 - TM_AN_ANAT_MARGIN), h2, h3);
        tm_an_add(an, TM_SEV_INFO, TM_CONF_MEDIUM, R->rank, &ev, buf, adv);
    }
}
