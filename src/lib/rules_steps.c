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

void tm_rule_steps_unsegmented(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (S->steps_total > 0 || !S->agent_told)
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
    snprintf(adv, sizeof adv,
             "A step is an optimizer step, else a backward pass, else a DataLoader batch (the "
             "step model, docs/DIAGNOSIS.md). %s",
             S->seen_forward ? "This loop runs forward passes only (inference over tensors it "
                               "slices itself): iterate a DataLoader, even with num_workers=0, "
                               "to have each batch a step with its data wait."
                             : "The job never ran a module: if it trains, it did not get to it "
                               "(see its output); system metrics above are still valid.");
    tm_an_add(an, TM_SEV_LOW, TM_CONF_HIGH, -1, &e, title, adv);
}
