/*
 * rules_ckpt.c - checkpoint.blocking: the loop stopped while torch.save
 * wrote its checkpoints (docs/DIAGNOSIS.md, "checkpoint.blocking").
 *
 * A save on the training thread stops training for its whole time: the
 * state is pickled (GPU tensors copied to the host first) and written,
 * and nothing else runs.  The step model takes that time out of the steps
 * (it is neither batch preparation nor compute), and runsum_ckpt.c adds it
 * up against the loop's time.  What it costs, and what would bring it
 * under the threshold: saving less often (how much less, and Young's
 * interval for the trade against work lost at a failure), the save off
 * the training thread, and, by the share of a save spent on a CPU, whether
 * the storage or the serializing is the slow part.
 */
#include <math.h>
#include <stdio.h>

#include "rules.h"
#include "units.h"

void tm_rule_checkpoint_blocking(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    double c = S->ckpt_s, L = S->ckpt_loop_s;
    if (S->ckpt_saves < TM_AN_CKPT_MIN || !(c > 0) || !isfinite(L) || !(L > c))
        return;
    double share = c / L;
    if (share < TM_AN_CKPT_SHARE)
        return;
    double every = S->ckpt_every_steps, train = L - c, per = S->ckpt_median_s;
    /* every m x K steps: share (c/m) / (train + c/m) <= threshold */
    double m = ceil(c * (1 - TM_AN_CKPT_SHARE) / (TM_AN_CKPT_SHARE * train));
    double young = sqrt(2 * per * TM_AN_CKPT_MTBF_S);
    double step_s = S->ckpt_step_s; /* that process's mean training step */
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "checkpoints", (double)S->ckpt_saves);
    tm_an_ev_num(&e, "save_time_s", c);
    tm_an_ev_num(&e, "loop_time_s", L);
    tm_an_ev_num(&e, "save_share", share);
    tm_an_ev_num(&e, "threshold", TM_AN_CKPT_SHARE);
    tm_an_ev_num(&e, "save_median_s", per);
    tm_an_ev_num(&e, "save_bytes_median", S->ckpt_bytes);
    tm_an_ev_num(&e, "save_bytes_per_second", S->ckpt_write_bps);
    tm_an_ev_num(&e, "save_cpu_share", S->ckpt_cpu_share);
    tm_an_ev_num(&e, "steps_between_checkpoints", every);
    tm_an_ev_num(&e, "processes_saving", (double)S->ckpt_procs);
    tm_an_ev_num(&e, "save_calls", (double)S->ckpt_calls);
    tm_an_ev_num(&e, "save_calls_to_memory", (double)S->ckpt_to_memory);
    tm_an_ev_num(&e, "save_calls_async", (double)S->ckpt_async);
    tm_an_ev_num(&e, "saves_outside_loop", (double)S->ckpt_outside);
    tm_an_ev_num(&e, "background_save_calls", (double)S->ckpt_bg_saves);
    tm_an_ev_num(&e, "step_time_mean_s", step_s);
    tm_an_ev_num(&e, "young_interval_s", young);
    char title[512], adv[2048], each[32], sz[32] = "", rate[32] = "";
    tm_unit_fmt(each, sizeof each, TM_UNIT_SECONDS, per);
    if (isfinite(S->ckpt_bytes))
        tm_an_bytes(sz, sizeof sz, S->ckpt_bytes);
    if (isfinite(S->ckpt_write_bps))
        tm_unit_fmt(rate, sizeof rate, TM_UNIT_BYTES_RATE, S->ckpt_write_bps);
    snprintf(title, sizeof title,
             "checkpoints stopped training: %zu checkpoints saved on the training thread "
             "took %.0f%% of the loop's time (%s each",
             S->ckpt_saves, 100 * share, each);
    if (sz[0])
        tm_an_adv(title, sizeof title, ", %s", sz);
    if (isfinite(every))
        tm_an_adv(title, sizeof title, ", every %.0f steps", every);
    tm_an_adv(title, sizeof title, ")");
    adv[0] = '\0';
    if (isfinite(every)) {
        tm_an_adv(adv, sizeof adv, "A checkpoint every %.0f steps costs %.0f%% of the time", every,
                  100 * share);
        if (m > 1 && isfinite(m))
            tm_an_adv(adv, sizeof adv, "; every %.0f steps would cost at most %.0f%%", every * m,
                      100 * TM_AN_CKPT_SHARE);
        tm_an_adv(adv, sizeof adv, ".");
    } else {
        tm_an_adv(adv, sizeof adv, "Save less often.");
    }
    char yi[32];
    if (young < 120)
        snprintf(yi, sizeof yi, "%.0f s", young);
    else if (young < 7200)
        snprintf(yi, sizeof yi, "%.0f min", young / 60);
    else
        snprintf(yi, sizeof yi, "%.1f h", young / 3600);
    tm_an_adv(adv, sizeof adv,
              " Saving less often loses more work at a failure: Young's interval, sqrt(2 x save "
              "time x time between failures), is about %s for a failure a day",
              yi);
    if (isfinite(step_s) && step_s > 0)
        tm_an_adv(adv, sizeof adv, " (%.0f steps)", young / step_s);
    tm_an_adv(adv, sizeof adv, ".");
    bool all_async = S->ckpt_async > 0 && S->ckpt_async == S->ckpt_calls;
    if (all_async) /* staging: a copy in memory, nothing written to storage */
        ;
    else if (S->ckpt_to_memory > 0 && S->ckpt_to_memory == S->ckpt_calls)
        tm_an_adv(adv, sizeof adv,
                  " The saves serialized into a buffer in memory; writing it to storage afterwards "
                  "is not in these times.");
    else if (isfinite(S->ckpt_cpu_share) && S->ckpt_cpu_share < TM_AN_CKPT_CPU_WAITING)
        tm_an_adv(adv, sizeof adv,
                  " The saves were on a CPU only %.0f%% of their time%s%s: they waited, for the "
                  "storage (a network filesystem, writeback of dirty pages)%s; if it is the "
                  "storage, write to a local disk and copy the file off in the background.",
                  100 * S->ckpt_cpu_share, rate[0] ? ", at " : "", rate,
                  S->gpu ? " or for the GPU to finish the work queued before the copy" : "");
    else if (isfinite(S->ckpt_cpu_share))
        tm_an_adv(adv, sizeof adv,
                  " The saves were on a CPU %.0f%% of their time%s%s: serializing the state "
                  "(pickling%s), which a faster disk would not shorten.",
                  100 * S->ckpt_cpu_share, rate[0] ? ", at " : "", rate,
                  S->gpu ? ", copying GPU tensors to the host" : "");
    if (all_async)
        tm_an_adv(adv, sizeof adv,
                  " These are torch.distributed.checkpoint.async_save calls: the loop waits while "
                  "each stages the state (a copy into host memory), and the write runs in a "
                  "thread or process. Let the staging overlap training too, where async_save "
                  "takes an async_stager (DefaultStager and StagingOptions are in "
                  "torch.distributed.checkpoint.staging): async_stager=DefaultStager("
                  "StagingOptions(use_pinned_memory=%s, use_shared_memory=False, "
                  "use_async_staging=True, use_non_blocking_copy=%s))%s; async_save then "
                  "returns an AsyncSaveResponse (wait on its upload_completion, not .result()). "
                  "Or stage fewer bytes (the model's and optimizer's state only).",
                  S->gpu ? "True" : "False", S->gpu ? "True" : "False",
                  S->gpu ? "" : " (a non-blocking copy needs a GPU)");
    else
        tm_an_adv(
            adv, sizeof adv,
            " Take the save off the training thread: torch.distributed.checkpoint.async_save "
            "(torch 2.3 and later), or copy the state_dict to CPU tensors and torch.save that "
            "in a background thread; Lightning has AsyncCheckpointIO; with the Hugging "
            "Face Trainer, a larger save_steps.");
    if (S->ckpt_bg_saves > 0)
        tm_an_adv(adv, sizeof adv, " %zu other save call%s already ran in a background thread.",
                  S->ckpt_bg_saves, S->ckpt_bg_saves == 1 ? "" : "s");
    tm_an_add(an, share >= TM_AN_CKPT_SHARE_HIGH ? TM_SEV_HIGH : TM_SEV_MEDIUM, TM_CONF_HIGH, -1,
              &e, title, adv);
}
