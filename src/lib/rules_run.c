/*
 * rules_run.c - run.*: what the report cannot see.  run.agent_not_loaded:
 * a Python process of the job could not load trainmon's in-process
 * recorder (no package for its interpreter, or one of another version), so
 * its steps, data wait and memory are not in the run; its note
 * (DIR/agent-<pid>.json, agentnote.h) says why and what fixes it
 * (docs/DIAGNOSIS.md, "run.agent_not_loaded").
 */
#include <stdio.h>

#include "rules.h"

void tm_rule_run_agent_not_loaded(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    const tm_agent_notes *g = &S->agent_notes;
    if (g->not_loaded == 0)
        return;
    const tm_agent_note *n = &g->first;
    bool none = S->steps_total == 0;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "processes", (double)g->not_loaded);
    tm_an_ev_num(&e, "pid", (double)n->pid);
    tm_an_ev_str(&e, "python", n->python);
    tm_an_ev_str(&e, "python_version", n->version);
    tm_an_ev_str(&e, "reason", n->reason);
    tm_an_ev_str(&e, "fix", n->fix);
    tm_an_ev_num(&e, "steps", (double)S->steps_total);
    char pid[24] = "?", title[512], advice[2048];
    if (n->pid >= 0)
        snprintf(pid, sizeof pid, "%lld", (long long)n->pid);
    snprintf(title, sizeof title,
             "the in-process recorder did not load in process %s (%s, Python %s)%s: %s", pid,
             n->python[0] ? n->python : "?", n->version[0] ? n->version : "?",
             g->not_loaded > 1 ? " and others" : "",
             none ? "steps and data wait are unknown" : "its steps are not in this report");
    snprintf(advice, sizeof advice,
             "Why: %s.  Fix: %s, then run the job again under trainmon run.  (%zu Python "
             "process%s of the job could not load trainmon; the system series are recorded.)",
             n->reason[0] ? n->reason : "not said", n->fix[0] ? n->fix : "install trainmon for it",
             g->not_loaded, g->not_loaded > 1 ? "es" : "");
    tm_an_add(an, none ? TM_SEV_HIGH : TM_SEV_MEDIUM, TM_CONF_HIGH, -1, &e, title, advice);
}
