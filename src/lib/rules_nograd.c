/*
 * rules_nograd.c - steps.no_grad: between its training steps the loop runs
 * its model without gradients for a large share of its time
 * (docs/DIAGNOSIS.md, "steps.no_grad").
 *
 * An RL loop trains on what its policy collects: CleanRL's PPO steps its
 * environments 128 times, calling the policy under torch.no_grad() at
 * each, then makes 16 optimizer steps on what came back.  The step model
 * saw the rollout's first call as the next step's forward, its data wait
 * ended there, and the rest (the environments' steps and 127 more calls)
 * was that step's compute: "input keeps up" for a loop that spent two
 * thirds of its time in rollouts, or, every 16 steps, an unexplained stall.
 * Stable-Baselines3 puts the policy in eval mode for its rollout, so the
 * step model recorded it as an eval run and left it out of every number
 * the report printed.
 *
 * trainmon sees the model run without gradients two ways: in train mode
 * the agent times it from the step's first call under no_grad to its
 * first with grad enabled, the training forward, and counts the calls the
 * loop made in it (nograd_ns, nograd_calls); under model.eval() it is an
 * eval run, recorded apart.  Both are time the loop is not training, and
 * neither is a data wait.  The finding says their share of the loop's
 * time, how often and how long a run is, and what to do for each kind:
 * a rollout (two or more calls a run) steps environments on the training
 * thread between calls; one call a step is a frozen model's forward (a
 * teacher's, a target network's), the step's own compute (low at most);
 * eval runs are evaluations or rollouts under eval mode.
 */
#include <math.h>
#include <stdio.h>

#include "rules.h"
#include "units.h"

void tm_rule_steps_no_grad(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    double share = S->nograd_share;
    if (!(share >= TM_AN_NOGRAD_SHARE) || S->infer_procs > 0) /* (runsum_stalls.c too) */
        return;
    double runs = (double)S->nograd_steps, train = S->nograd_s, eval = S->nograd_eval_s;
    bool rollout = train >= eval && runs > 0;
    double per_run = rollout ? S->nograd_calls / runs : NAN;
    bool frozen = rollout && per_run < TM_AN_NOGRAD_CALLS;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "no_grad_share", share);
    tm_an_ev_num(&e, "threshold", TM_AN_NOGRAD_SHARE);
    tm_an_ev_num(&e, "steps_judged", (double)S->nograd_judged);
    tm_an_ev_num(&e, "no_grad_steps", runs);
    tm_an_ev_num(&e, "no_grad_s", train);
    if (runs > 0) {
        tm_an_ev_num(&e, "no_grad_run_s", train / runs);
        tm_an_ev_num(&e, "calls_per_run", S->nograd_calls / runs);
    }
    tm_an_ev_num(&e, "eval_s", eval);
    tm_an_ev_num(&e, "eval_records", (double)S->eval_steps);
    char title[512], adv[2048] = "", run_s[32], ev_s[32], when[64];
    tm_unit_fmt(run_s, sizeof run_s, TM_UNIT_SECONDS, runs > 0 ? train / runs : NAN);
    tm_unit_fmt(ev_s, sizeof ev_s, TM_UNIT_SECONDS, eval);
    if (runs >= (double)S->nograd_judged)
        snprintf(when, sizeof when, "before every training step");
    else
        snprintf(when, sizeof when, "before %.0f of %zu training steps", runs, S->nograd_judged);
    if (frozen) {
        snprintf(title, sizeof title,
                 "the loop runs a model without gradients %.0f%% of its time: once %s, %s "
                 "(a frozen model's forward: a teacher, a target network)",
                 100 * share, when, run_s);
        tm_an_adv(adv, sizeof adv,
                  "Before the training forward of %.0f of %zu steps a model ran once under "
                  "torch.no_grad(), %s each: a teacher's forward in distillation, a target or "
                  "reference network's. It is part of the step's compute. To cut it, run it "
                  "under torch.inference_mode() in lower precision (bfloat16) or compiled, or "
                  "compute its outputs once ahead of training and read them with the data.",
                  runs, S->nograd_judged, run_s);
    } else if (rollout) {
        snprintf(title, sizeof title,
                 "the loop runs its model without gradients %.0f%% of its time: %s, %.0f calls "
                 "under no_grad in %s (an RL rollout or sampling)",
                 100 * share, when, per_run, run_s);
        tm_an_adv(adv, sizeof adv,
                  "Before the training forward of %.0f of %zu steps the loop called its model "
                  "%.0f times under torch.no_grad(), %s a run, and did the rest of the run "
                  "between the calls on the training thread: an RL rollout, where that is the "
                  "environments' steps, or sampling. Step the environments in parallel in "
                  "subprocesses (gymnasium.vector.AsyncVectorEnv, Stable-Baselines3's "
                  "SubprocVecEnv, envpool) and call the policy once for all of them; on a GPU, "
                  "keep the policy's outputs on the device until an environment needs them "
                  "(each .item() or .cpu() waits for the queued work). For sampling, generate "
                  "for the whole batch at once (a KV cache, torch.inference_mode()). If it is "
                  "an evaluation, put the model in eval mode for it (model.eval()) and evaluate "
                  "less often or on fewer batches.",
                  runs, S->nograd_judged, per_run, run_s);
    } else {
        snprintf(title, sizeof title,
                 "the loop runs its model without gradients %.0f%% of its time: eval runs "
                 "took %s",
                 100 * share, ev_s);
        tm_an_adv(adv, sizeof adv,
                  "Eval runs, the model in eval mode (%zu records in all: batches of an eval "
                  "DataLoader, or spans from model.eval() to model.train()), took %s of the "
                  "loop. If they "
                  "are evaluations, evaluate less often or on fewer batches (nanoGPT's "
                  "eval_interval and eval_iters, the Trainer's eval_steps, Lightning's "
                  "val_check_interval and limit_val_batches), under torch.inference_mode(). If "
                  "they are RL rollouts (Stable-Baselines3 puts the policy in eval mode for "
                  "them), step the environments in parallel in subprocesses (SubprocVecEnv, "
                  "gymnasium.vector.AsyncVectorEnv, envpool) and call the policy once for all "
                  "of them.",
                  S->eval_steps, ev_s);
    }
    if (rollout && eval > 0.05 * (train + eval))
        tm_an_adv(adv, sizeof adv, " Eval runs (model.eval()) took %s more.", ev_s);
    enum tm_severity sev = share >= TM_AN_NOGRAD_HIGH     ? TM_SEV_HIGH
                           : share >= TM_AN_NOGRAD_MEDIUM ? TM_SEV_MEDIUM
                                                          : TM_SEV_LOW;
    if (frozen)
        sev = TM_SEV_LOW;
    tm_an_add(an, sev, TM_CONF_MEDIUM, -1, &e, title, adv);
}
