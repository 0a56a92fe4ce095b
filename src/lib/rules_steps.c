/*
 * rules_steps.c - steps.unsegmented: the agent ran in the job, the job ran
 * its model, and still no step was recorded (docs/DIAGNOSIS.md,
 * "steps.unsegmented").  The step model ends steps at optimizer steps,
 * backward passes or DataLoader batches; a loop with none of them (an
 * inference loop over sliced tensors) cannot be cut into steps, and an
 * empty report must say so rather than "no steps" alone.
 */
#include <math.h>
#include <stdio.h>

#include "rules.h"

/* The job fetched DataLoader batches (counted by the fetch hook, or
 * recorded by workers) and still no __next__ was seen: the step hook is in
 * place and never fired (torch moved the DataLoader iterator's internals). */
static bool hook_silent(const tm_an_summary *S)
{
    return S->seen_batches == 0 && (S->seen_fetches > 0 || S->worker_batches > 0);
}

void tm_rule_steps_hook_silent(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (S->steps_total > 0 || !S->agent_told || !hook_silent(S))
        return;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "fetches_in_process", S->seen_fetches);
    tm_an_ev_num(&e, "worker_batches", (double)S->worker_batches);
    tm_an_ev_num(&e, "loader_batches_seen", S->seen_batches);
    if (S->torch_version[0])
        tm_an_ev_str(&e, "torch", S->torch_version);
    char title[512], tv[48] = "";
    if (S->torch_version[0])
        snprintf(tv, sizeof tv, " on torch %s", S->torch_version);
    snprintf(title, sizeof title,
             "the job fetched %.0f DataLoader batches but trainmon's step hook never fired%s: "
             "steps and data wait are unknown",
             S->seen_fetches + (double)S->worker_batches, tv);
    tm_an_add(an, TM_SEV_HIGH, TM_CONF_HIGH, -1, &e, title,
              "torch moved the DataLoader iterator's internals (the agent wraps "
              "_BaseDataLoaderIter.__next__). Report it with the torch version; until then "
              "the system metrics of this report are valid, the step numbers are not.");
}

void tm_rule_run_measure_off(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (!S->measures_off)
        return;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "measures_off", (double)S->measures_off);
    tm_an_ev_str(&e, "measure", S->measure_off);
    tm_an_ev_str(&e, "why", S->measure_off_why);
    if (S->torch_version[0])
        tm_an_ev_str(&e, "torch", S->torch_version);
    char title[512], tv[48] = "";
    if (S->torch_version[0])
        snprintf(tv, sizeof tv, " on torch %s", S->torch_version);
    snprintf(title, sizeof title, "%zu measure%s off%s: %s (%s)", S->measures_off,
             S->measures_off == 1 ? "" : "s", tv, S->measure_off, S->measure_off_why);
    tm_an_add(an, TM_SEV_LOW, TM_CONF_HIGH, -1, &e, title,
              "The agent could not install this measure on this torch and went on without it; "
              "the findings that need it are not given. The job ran unchanged.");
}

void tm_rule_steps_unsegmented(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (S->steps_total > 0 || !S->agent_told || hook_silent(S))
        return;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "agent_processes", (double)S->agent_procs);
    tm_an_ev_num(&e, "loader_batches", S->seen_batches);
    tm_an_ev_num(&e, "backward_passes", S->seen_backward);
    tm_an_ev_num(&e, "optimizer_steps", S->seen_optimizer);
    tm_an_ev_key(&e, "forward_seen");
    tm_buf_printf(&e.b, "%s", S->seen_forward ? "true" : "false");
    if (S->torch_version[0])
        tm_an_ev_str(&e, "torch", S->torch_version);
    char title[512], adv[1024], tv[48] = "";
    if (S->torch_version[0])
        snprintf(tv, sizeof tv, " (torch %s)", S->torch_version);
    snprintf(title, sizeof title,
             "no steps to judge: the agent ran in %zu process%s%s and saw %s but %.0f optimizer "
             "steps, %.0f backward passes and %.0f DataLoader batches, so trainmon cannot tell "
             "one step from the next",
             S->agent_procs, S->agent_procs == 1 ? "" : "es", tv,
             S->seen_forward ? "module forward passes" : "no module forward pass",
             S->seen_optimizer, S->seen_backward, S->seen_batches);
    if (!isnan(S->seen_optmade))
        tm_an_ev_num(&e, "optimizers_made", S->seen_optmade);
    if (S->eval_steps)
        tm_an_ev_num(&e, "eval_batches", (double)S->eval_steps);
    const char *why;
    if (S->eval_steps && S->seen_optmade > 0)
        /* a training job that evaluated (a sanity check, a baseline) and
         * stopped before its first step: no inference loop (inference.c) */
        why = "The job made an optimizer and evaluated (its batches are eval batches), but "
              "stopped before its first training step: see its output for why; system metrics "
              "above are still valid.";
    else if (S->seen_forward)
        why = "This loop runs forward passes only (inference over tensors it slices itself): "
              "iterate a DataLoader, even with num_workers=0, to have each batch a step with its "
              "data wait.";
    else
        why = "The job never ran a module: if it trains, it did not get to it (see its output); "
              "system metrics above are still valid.";
    snprintf(adv, sizeof adv,
             "A step is an optimizer step, else a backward pass, else a DataLoader batch (the "
             "step model, docs/DIAGNOSIS.md). %s",
             why);
    tm_an_add(an, TM_SEV_LOW, TM_CONF_HIGH, -1, &e, title, adv);
}
