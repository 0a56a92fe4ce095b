/*
 * rules_cpu.c - host.cpu_oversubscribed: more threads want a CPU than the
 * job may use, and the training loop's compute pays for it
 * (docs/DIAGNOSIS.md, "host.cpu_oversubscribed").  The thread arithmetic:
 * each rank's torch intra-op threads (torch_threads events of the agent)
 * times the ranks on the host, plus the DataLoader workers (one thread
 * each: torch sets 1 in a worker), against the usable CPUs (affinity and
 * cgroup quota, meta.json of `trainmon run`).  An excess alone is not a
 * finding (workers that mostly sleep on a full prefetch queue take no
 * core); tasks waiting for a CPU (PSI cpu some) or compute per step well
 * above its own fastest tenth must show that it costs.  A loop that waits
 * for data is not computing while it waits: there the workers are what it
 * needs, the input findings say why it waits, and this one speaks only
 * when torch's own threads can be cut (never advising fewer workers).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "machine.h"
#include "rules.h"

void tm_rule_host_cpu_oversubscribed(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    double usable = S->usable_cpus, runnable = S->runnable_threads;
    if (!(usable > 0) || !(runnable > usable * TM_AN_CPU_OVERSUB_RATIO) || S->host_ranks == 0)
        return;
    double slow = S->compute_fast_s > 0 ? S->compute_median_s / S->compute_fast_s : NAN;
    double slow_early = S->compute_early_s > 0 ? S->compute_median_s / S->compute_early_s : NAN;
    bool v_psi = S->psi_cpu_some >= TM_AN_PSI_CPU_SOME;
    bool v_slow = slow >= TM_AN_CPU_SLOWDOWN;
    bool v_sat = S->job_cpu_cores >= TM_AN_CPU_SATURATED * usable;
    if (!v_psi && !v_slow && !v_sat)
        return;
    bool input_bound = S->data_wait_fraction >= TM_AN_DATA_WAIT_FRACTION;
    if (input_bound && !(S->torch_threads > 1))
        return;
    double nr = (double)S->host_ranks, nw = (double)S->host_workers;
    /* The fix: N intra-op threads per rank so that N x ranks + workers <=
     * usable; when even one thread each leaves no room for the workers,
     * fewer workers too (tm_machine_workers_fit: one core per rank kept). */
    double n = floor((usable - nw) / nr + 1e-9);
    double w_fit = NAN;
    if (n < 1) {
        n = 1;
        if (!input_bound)
            w_fit = tm_machine_workers_fit(usable, S->host_ranks, true);
    }
    double after = n * nr + (isnan(w_fit) ? nw : w_fit * nr);

    struct ev e;
    tm_an_ev_open(&e);
    if (S->cpu_host[0])
        tm_an_ev_str(&e, "host", S->cpu_host);
    tm_an_ev_num(&e, "usable_cpus", usable);
    tm_an_ev_num(&e, "online_cpus", S->online_cpus);
    tm_an_ev_num(&e, "torch_threads_per_rank", S->torch_threads);
    tm_an_ev_num(&e, "interop_threads_per_rank", S->interop_threads);
    tm_an_ev_num(&e, "ranks_on_host", nr);
    tm_an_ev_num(&e, "workers_on_host", nw);
    tm_an_ev_num(&e, "runnable_threads", runnable);
    tm_an_ev_num(&e, "threads_per_cpu", runnable / usable);
    tm_an_ev_num(&e, "psi_cpu_some", S->psi_cpu_some);
    tm_an_ev_num(&e, "psi_threshold", TM_AN_PSI_CPU_SOME);
    tm_an_ev_num(&e, "compute_time_median_s", S->compute_median_s);
    tm_an_ev_num(&e, "compute_time_fastest_tenth_s", S->compute_fast_s);
    tm_an_ev_num(&e, "compute_time_early_median_s", S->compute_early_s);
    tm_an_ev_num(&e, "job_cpu_cores", S->job_cpu_cores);
    tm_an_ev_num(&e, "compute_slowdown", slow);
    tm_an_ev_num(&e, "compute_slowdown_vs_early", slow_early);
    tm_an_ev_num(&e, "slowdown_threshold", TM_AN_CPU_SLOWDOWN);
    tm_an_ev_num(&e, "data_wait_fraction", S->data_wait_fraction);
    tm_an_ev_num(&e, "advised_threads_per_rank", n);
    if (!isnan(w_fit))
        tm_an_ev_num(&e, "advised_workers_per_rank", w_fit);
    tm_an_ev_num(&e, "runnable_threads_after", after);

    char title[512], adv[1536], cost[256] = "";
    if (v_psi)
        tm_an_adv(cost, sizeof cost, "; tasks waited for a CPU %.0f%% of the time",
                  100 * S->psi_cpu_some);
    if (isfinite(slow))
        tm_an_adv(cost, sizeof cost, "; compute per step %.3f s, %.1fx its fastest tenth (%.3f s)",
                  S->compute_median_s, slow, S->compute_fast_s);
    snprintf(title, sizeof title,
             "CPU oversubscribed: %.0f runnable threads (%.0f torch thread(s) x %.0f rank(s) + "
             "%.0f DataLoader worker(s)) on %.3g usable CPU(s)%s",
             runnable, S->torch_threads, nr, nw, usable, cost);
    snprintf(
        adv, sizeof adv,
        "The threads take turns on %.3g CPU(s), and each torch op waits for its slowest thread. "
        "Call torch.set_num_threads(%.0f) at the start of each rank (or set OMP_NUM_THREADS=%.0f "
        "in its environment)",
        usable, n, n);
    if (!isnan(w_fit))
        tm_an_adv(adv, sizeof adv,
                  " and, if the input still keeps up, fewer DataLoader workers: "
                  "num_workers=%.0f per rank (now %.0f)",
                  w_fit, nw / nr);
    const char *rest = "";
    if (after > usable && nr > usable)
        rest = "; more ranks than CPUs: run fewer ranks on this host";
    else if (after > usable)
        rest = "; the workers the loop waits for still take the rest (the input finding says "
               "how to make each batch cheaper)";
    tm_an_adv(adv, sizeof adv,
              ": %.0f thread(s) x %.0f rank(s) + %.0f worker(s) = %.0f runnable threads for "
              "%.3g CPU(s)%s.",
              n, nr, isnan(w_fit) ? nw : w_fit * nr, after, usable, rest);
    enum tm_severity sev =
        S->psi_cpu_some >= TM_AN_PSI_CPU_SOME_HIGH || slow >= TM_AN_CPU_SLOWDOWN_HIGH
            ? TM_SEV_HIGH
            : TM_SEV_MEDIUM;
    tm_an_add(an, sev, v_psi && v_slow ? TM_CONF_HIGH : TM_CONF_MEDIUM, -1, &e, title, adv);
}
