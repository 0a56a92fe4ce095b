/*
 * rules_compile.c - steps.compile: torch.compile compiled inside the loop
 * (docs/DIAGNOSIS.md, "steps.compile").
 *
 * Compilation runs in the step that hits it, on the training thread: the
 * first step's forward traces and compiles the model (and its backward
 * pass compiles the backward graph), and a guard that fails later (a new
 * input shape such as an epoch's short last batch, a new dtype, a Python
 * number that changed) compiles again in the middle of training.  The step
 * model counts that time as compute; runsum_compile.c adds it up.  Said
 * when it took TM_AN_COMPILE_SHARE of the loop's time, or when one frame
 * kept recompiling (TM_AN_COMPILE_FRAME_MANY); the advice follows what the
 * time was: recompilations (what makes them, how to see why, and the
 * recompile limit), or the first compilation of a short run.
 */
#include <math.h>
#include <stdio.h>

#include "rules.h"
#include "units.h"

void tm_rule_steps_compile(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    double c = S->compile_s, L = S->compile_loop_s;
    if (S->compile_n == 0 || !(c > 0) || !(L > 0))
        return;
    double share = c / L;
    if (share > 1)
        share = 1;
    bool many = S->compile_max_per_frame >= TM_AN_COMPILE_FRAME_MANY;
    if (share < TM_AN_COMPILE_SHARE && !many)
        return;
    bool limit = S->compile_max_per_frame >= TM_AN_COMPILE_LIMIT;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "compilations", (double)S->compile_n);
    tm_an_ev_num(&e, "compile_time_s", c);
    tm_an_ev_num(&e, "loop_time_s", L);
    tm_an_ev_num(&e, "compile_share", share);
    tm_an_ev_num(&e, "threshold", TM_AN_COMPILE_SHARE);
    tm_an_ev_num(&e, "compile_longest_s", S->compile_longest_s);
    tm_an_ev_num(&e, "recompilations", (double)S->compile_recompiles);
    tm_an_ev_num(&e, "frames", (double)S->compile_frames);
    tm_an_ev_num(&e, "most_compilations_of_a_frame", (double)S->compile_max_per_frame);
    tm_an_ev_num(&e, "compilations_after_warmup", (double)S->compile_late_n);
    tm_an_ev_num(&e, "compile_time_after_warmup_s", S->compile_late_s);
    tm_an_ev_num(&e, "first_step_after_warmup", S->compile_first_late_step);
    tm_an_ev_num(&e, "other_thread_compilations", (double)S->compile_bg_n);

    char title[512], adv[2048], tot[32], late[32];
    tm_unit_fmt(tot, sizeof tot, TM_UNIT_SECONDS, c);
    tm_unit_fmt(late, sizeof late, TM_UNIT_SECONDS, S->compile_late_s);
    snprintf(title, sizeof title,
             "compiling with torch.compile took %s inside the loop, %.0f%% of its time: %zu "
             "compilation%s",
             tot, 100 * share, S->compile_n, S->compile_n == 1 ? "" : "s");
    if (S->compile_recompiles)
        tm_an_adv(title, sizeof title, "; %zu recompilation%s", S->compile_recompiles,
                  S->compile_recompiles == 1 ? "" : "s");
    if (S->compile_late_n && isfinite(S->compile_first_late_step))
        tm_an_adv(title, sizeof title, ", %s of it after warm-up (from step %.0f)", late,
                  S->compile_first_late_step);
    adv[0] = '\0';
    if (S->compile_recompiles)
        tm_an_adv(adv, sizeof adv,
                  "Run once with TORCH_LOGS=recompiles to see which guard of the compiled code "
                  "failed each time, and keep what it guards from changing: an input's shape (an "
                  "epoch's short last batch: DataLoader(drop_last=True), or pad it; varying "
                  "sequence lengths: torch._dynamo.mark_dynamic(x, dim) or "
                  "torch.compile(dynamic=True)), its dtype or device, a Python number passed in "
                  "(pass it as a tensor), an attribute the forward reads that the model changes "
                  "(a counter of its calls), the model's train() or eval() mode.");
    if (limit)
        tm_an_adv(adv, sizeof adv,
                  "%sOne function was compiled %zu times: at torch._dynamo.config.recompile_limit "
                  "(%d by default) dynamo stops compiling it, and it runs uncompiled from then "
                  "on, slower than it did.",
                  adv[0] ? " " : "", S->compile_max_per_frame, TM_AN_COMPILE_LIMIT);
    if (!S->compile_recompiles)
        tm_an_adv(adv, sizeof adv,
                  "Keep the compiled graphs for the next run: the FX graph cache "
                  "(TORCHINDUCTOR_FX_GRAPH_CACHE, on by default) reuses them across runs on one "
                  "machine, torch.compiler.save_cache_artifacts() and load_cache_artifacts() "
                  "carry them to others; and leave mode=\"max-autotune\", which compiles longer "
                  "still, to long runs. The first step compiled the model and its backward pass: "
                  "a cost a long run pays once, large against this loop, and again in every new "
                  "process.");
    if (S->compile_bg_n)
        tm_an_adv(adv, sizeof adv, " %zu other compilation%s ran outside the training thread.",
                  S->compile_bg_n, S->compile_bg_n == 1 ? "" : "s");
    /* what a longer run keeps paying: the compilations after warm-up */
    double late_share = S->compile_late_s / L;
    enum tm_severity sev = late_share >= TM_AN_COMPILE_SHARE_HIGH      ? TM_SEV_HIGH
                           : many || late_share >= TM_AN_COMPILE_SHARE ? TM_SEV_MEDIUM
                                                                       : TM_SEV_LOW;
    tm_an_add(an, sev, TM_CONF_HIGH, -1, &e, title, adv);
}
