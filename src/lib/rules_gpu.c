/*
 * rules_gpu.c - gpu.*: the GPU idle while the input keeps up
 * (docs/DIAGNOSIS.md, "gpu.underutilized").
 */
#include <math.h>
#include <stdio.h>

#include "rules.h"

void tm_rule_gpu_underutilized(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (isnan(S->gpu_util_mean) || S->gpu_util_mean >= TM_AN_GPU_UTIL)
        return;
    if (!(S->data_wait_fraction < TM_AN_DATA_WAIT_FRACTION) && !isnan(S->data_wait_fraction))
        return; /* the input finding explains the idle GPU */
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "gpu_utilization_mean", S->gpu_util_mean);
    tm_an_ev_num(&e, "threshold", TM_AN_GPU_UTIL);
    tm_an_ev_num(&e, "gpus", (double)S->ngpus);
    tm_an_ev_num(&e, "gpus_recorded", (double)S->ngpus_recorded);
    tm_an_ev_num(&e, "data_wait_fraction", S->data_wait_fraction);
    char buf[256];
    snprintf(buf, sizeof buf, "GPU underutilized: busy %.0f%% of the time while the input keeps up",
             100 * S->gpu_util_mean);
    tm_an_add(an, TM_SEV_MEDIUM, isnan(S->data_wait_fraction) ? TM_CONF_LOW : TM_CONF_HIGH, -1, &e,
              buf,
              "The GPU waits on something other than data: increase the batch size, remove "
              "synchronisations in the loop (.item(), .cpu(), printing tensors), and look at "
              "CPU-side overhead (torch.compile, CUDA graphs, AMP).");
}
