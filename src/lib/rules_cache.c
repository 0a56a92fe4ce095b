/*
 * rules_cache.c - data.*: the dataset itself (docs/DIAGNOSIS.md,
 * "data.page_cache, data.small_files").  Whether the page cache held it
 * (the dataset.* readings of collect_dscache.c, at the job's start and
 * end) says whether a disk verdict holds for every epoch or only the
 * first; the size of the disk's read requests says whether the dataset's
 * many small files, not the disk's bandwidth, make it slow.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rules.h"

static double ds_ram_ratio(const tm_an_summary *S)
{
    return S->ds_memory > 0 ? S->ds_bytes / S->ds_memory : NAN;
}

static bool ds_measured(const tm_an_summary *S)
{
    return S->ds_bytes > 0 && (isfinite(S->ds_cached_start) || isfinite(S->ds_cached_end));
}

void tm_an_dataset_evidence(struct ev *e, const tm_an_summary *S)
{
    if (!(S->ds_bytes >= 0))
        return;
    tm_an_ev_num(e, "dataset_bytes", S->ds_bytes);
    tm_an_ev_num(e, "dataset_files", S->ds_files);
    tm_an_ev_key(e, "dataset_walk_complete");
    tm_buf_printf(&e->b, "%s", S->ds_complete ? "true" : "false");
    tm_an_ev_num(e, "dataset_cached_fraction_start", S->ds_cached_start);
    tm_an_ev_num(e, "dataset_cached_fraction_end", S->ds_cached_end);
    tm_an_ev_num(e, "memory_total_bytes", S->ds_memory);
    tm_an_ev_num(e, "dataset_memory_ratio", ds_ram_ratio(S));
}

void tm_an_dataset_advice(char *adv, size_t cap, const tm_an_summary *S)
{
    if (!ds_measured(S))
        return;
    double q = ds_ram_ratio(S);
    if (S->ds_cached_start >= TM_AN_CACHED_FULL)
        tm_an_adv(adv, cap,
                  " The dataset was %.0f%% in the page cache when the job started: the waits "
                  "are not its reads (see data.page_cache).",
                  100 * S->ds_cached_start);
    else if (q > TM_AN_DATASET_RAM_RATIO)
        tm_an_adv(adv, cap,
                  " The dataset is %.1fx the RAM: the page cache cannot hold it, so every epoch "
                  "reads it from the disk again.",
                  q);
    else if (S->ds_cached_end >= TM_AN_CACHED_FULL)
        tm_an_adv(adv, cap,
                  " The dataset fits in RAM and was %.0f%% cached when the job ended: epoch 1 "
                  "read it from disk, later epochs will read it from memory and will not be "
                  "disk-bound.",
                  100 * S->ds_cached_end);
}

void tm_an_pack_gain(double req_bytes, double read_bps, double ceiling_bps, double step_s,
                     double compute_s, double *read_gain, double *read_bps_after, double *speedup)
{
    *read_gain = *read_bps_after = *speedup = NAN;
    if (!(req_bytes > 0))
        return;
    *read_gain = fmax(TM_AN_SHARD_REQ_BYTES / req_bytes, 1.0);
    /* the device cannot carry more than the probe got from it reading
     * sequentially (and packing never makes reads slower) */
    if (ceiling_bps > 0 && read_bps > 0 && read_bps * *read_gain > ceiling_bps)
        *read_gain = fmax(ceiling_bps / read_bps, 1.0);
    if (read_bps >= 0)
        *read_bps_after = read_bps * *read_gain;
    /* The loop waits for data (step - compute) of each step; reads
     * read_gain times faster shrink that wait read_gain times, and the
     * step is never shorter than its compute. */
    if (step_s > 0 && compute_s > 0 && step_s >= compute_s) {
        double wait = step_s - compute_s;
        *speedup = step_s / (compute_s + wait / *read_gain);
    }
}

void tm_rule_data_page_cache(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (!ds_measured(S))
        return;
    double q = ds_ram_ratio(S), s0 = S->ds_cached_start, s1 = S->ds_cached_end;
    bool waits = S->data_wait_fraction >= TM_AN_DATA_WAIT_FRACTION;
    char size[32], mem[32], title[512], adv[1024];
    tm_an_bytes(size, sizeof size, S->ds_bytes);
    tm_an_bytes(mem, sizeof mem, S->ds_memory);
    const char *at_least = S->ds_complete ? "" : "at least ";
    enum tm_severity sev = TM_SEV_INFO;
    if (s0 >= TM_AN_CACHED_FULL) {
        snprintf(title, sizeof title,
                 "dataset cached: %.0f%% of the %s%s of data was in the page cache when the "
                 "job started; it was read from memory, not from the disk",
                 100 * s0, at_least, size);
        snprintf(adv, sizeof adv,
                 "Nothing to do for the storage in this run: its speed did not matter. A cold "
                 "start (a reboot, a new node, other jobs' data evicting it) reads the "
                 "dataset from the disk again; measure that run too before deciding on "
                 "storage.");
    } else if (q > TM_AN_DATASET_RAM_RATIO) {
        sev = waits ? TM_SEV_MEDIUM : TM_SEV_LOW;
        snprintf(title, sizeof title,
                 "the dataset is %.1fx the RAM (%s%s against %s): every epoch reads it from "
                 "disk (%.0f%% cached at the end)",
                 q, at_least, size, mem, 100 * (isfinite(s1) ? s1 : s0));
        snprintf(adv, sizeof adv,
                 "The page cache cannot hold the dataset, so the disk's speed bounds every "
                 "epoch, not just the first. Make the dataset smaller (store it compressed or "
                 "at the resolution the model uses, cache decoded samples at lower precision), "
                 "put it on faster local storage, or split it across nodes so that each "
                 "node's share fits in its RAM.");
    } else if (s1 >= TM_AN_CACHED_FULL) {
        sev = waits ? TM_SEV_LOW : TM_SEV_INFO;
        char ram[48] = "";
        if (isfinite(q))
            snprintf(ram, sizeof ram, "; it is %.2fx the RAM", q);
        snprintf(title, sizeof title,
                 "epoch 1 read from disk, %.0f%% cached after: later epochs will not be "
                 "disk-bound (%.0f%% of the %s%s was cached at the start%s)",
                 100 * s1, 100 * (isfinite(s0) ? s0 : 0), at_least, size, ram);
        snprintf(adv, sizeof adv,
                 "The dataset fits in the page cache and this run put it there: a longer run "
                 "(more epochs) reads it from memory after the first, as long as the job and "
                 "other processes leave the memory to the cache. A disk verdict for this run "
                 "is the cold first epoch's.");
    } else {
        snprintf(title, sizeof title,
                 "%.0f%% of the %s%s of data was in the page cache at the end of the job "
                 "(%.0f%% at the start)",
                 100 * (isfinite(s1) ? s1 : s0), at_least, size, 100 * (isfinite(s0) ? s0 : 0));
        if (isfinite(q))
            snprintf(adv, sizeof adv,
                     "The dataset (%.2fx the RAM) could fit in the page cache; this run did not "
                     "read all of it, or memory pressure evicted it. Reading it once before "
                     "training (vmtouch -t, cat > /dev/null) makes every epoch a warm one.",
                     q);
        else
            snprintf(adv, sizeof adv, "No memory figure to compare the dataset with.");
    }
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_dataset_evidence(&e, S);
    tm_an_ev_num(&e, "cached_threshold", TM_AN_CACHED_FULL);
    tm_an_ev_num(&e, "data_wait_fraction", S->data_wait_fraction);
    tm_an_add(an, sev, S->ds_complete ? TM_CONF_HIGH : TM_CONF_MEDIUM, -1, &e, title, adv);
}

void tm_rule_data_small_files(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (!(S->data_wait_fraction >= TM_AN_DATA_WAIT_FRACTION))
        return;
    if (!(S->disk_req_bytes <= TM_AN_SMALL_REQ_BYTES) || !(S->disk_reads_s >= TM_AN_SMALL_REQ_RATE))
        return;
    if (S->worker_read_bps < TM_AN_WORKER_READ_MIN_BPS)
        return; /* the workers do not read from a disk: the requests are someone else's */
    if (isnan(S->worker_read_bps) && !S->disk_named)
        return; /* nothing says the busiest disk's reads are the job's data (no -d, no
                 * worker reads measured: a synthetic dataset beside imports) */
    if (S->worker_busy >= TM_AN_WORKER_BUSY)
        return; /* CPU-bound workers: faster reads would not feed them faster */
    if (S->ds_cached_start >= TM_AN_CACHED_FULL)
        return; /* read from memory: the requests are not the dataset's */
    double mean_file = S->ds_files > 0 ? S->ds_bytes / S->ds_files : NAN;
    if (mean_file >= TM_AN_SMALL_FILE_BYTES)
        return; /* large files read in small pieces: a read pattern, not a file count */
    double gain, after, speedup;
    /* the probe's sequential rate of this disk, when `run --probe` measured it */
    double ceiling = S->probe_disk[0] && strcmp(S->probe_disk, S->disk) == 0 && S->probe_seq_bps > 0
                         ? S->probe_seq_bps
                         : NAN;
    tm_an_pack_gain(S->disk_req_bytes, S->disk_read_bps, ceiling, S->step_median_s,
                    S->compute_median_s, &gain, &after, &speedup);
    double uncapped = fmax(TM_AN_SHARD_REQ_BYTES / S->disk_req_bytes, 1.0);
    double need =
        S->compute_median_s > 0 ? S->disk_read_bps * S->step_median_s / S->compute_median_s : NAN;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "data_wait_fraction", S->data_wait_fraction);
    if (S->disk[0])
        tm_an_ev_str(&e, "disk", S->disk);
    tm_an_ev_num(&e, "read_request_bytes", S->disk_req_bytes);
    tm_an_ev_num(&e, "reads_per_second", S->disk_reads_s);
    tm_an_ev_num(&e, "disk_read_bytes_per_second", S->disk_read_bps);
    tm_an_ev_num(&e, "small_request_threshold_bytes", TM_AN_SMALL_REQ_BYTES);
    tm_an_ev_num(&e, "mean_file_bytes", mean_file);
    tm_an_ev_num(&e, "dataset_files", S->ds_files);
    tm_an_ev_num(&e, "shard_request_bytes", TM_AN_SHARD_REQ_BYTES);
    tm_an_ev_num(&e, "expected_read_gain", gain);
    tm_an_ev_num(&e, "expected_read_bytes_per_second", after);
    tm_an_ev_num(&e, "needed_read_bytes_per_second", need);
    tm_an_ev_num(&e, "expected_speedup", speedup);
    if (isfinite(ceiling)) {
        tm_an_ev_num(&e, "probe_sequential_read_bytes_per_second", ceiling);
        tm_an_ev_key(&e, "gain_capped_by_probe");
        tm_buf_printf(&e.b, "%s", gain < uncapped ? "true" : "false");
    }
    char title[512], adv[2048], files[160] = "";
    snprintf(title, sizeof title,
             "many small files: the disk served %.0f reads/s of %.1f KiB on average while the "
             "loop waited for data %.0f%% of the time; packed into shards, up to %.0fx the "
             "bytes per read",
             S->disk_reads_s, S->disk_req_bytes / 1024.0, 100 * S->data_wait_fraction, gain);
    if (isfinite(mean_file))
        snprintf(files, sizeof files, "The dataset is %s%.0f files of %.1f KiB on average. ",
                 S->ds_complete ? "" : "at least ", S->ds_files, mean_file / 1024.0);
    snprintf(adv, sizeof adv,
             "%sEach small file costs the disk at least one request (and its inode and directory "
             "blocks), so the request rate, not the bandwidth, limits the input. Pack the files "
             "into shards of 100 MB to 1 GB read sequentially (tar files with WebDataset, LMDB, "
             "TFRecord, or one numpy memmap): the kernel then reads %.0f KiB readahead windows, "
             "%.0fx the bytes per request",
             files, TM_AN_SHARD_REQ_BYTES / 1024.0, gain);
    if (isfinite(after) && gain < uncapped)
        tm_an_adv(adv, sizeof adv,
                  ", but the disk gave the probe only %.1f MB/s reading "
                  "sequentially: up to %.1fx, %.1f MB/s",
                  ceiling / 1e6, gain, after / 1e6);
    else if (isfinite(after))
        tm_an_adv(adv, sizeof adv, ", up to %.1f MB/s at the same %.0f requests/s", after / 1e6,
                  S->disk_reads_s);
    if (isfinite(need))
        tm_an_adv(adv, sizeof adv, " against the %.1f MB/s the loop needs", need / 1e6);
    if (isfinite(speedup))
        tm_an_adv(adv, sizeof adv, ": the steps would be up to %.1fx faster", speedup);
    if (isfinite(ceiling))
        tm_an_adv(adv, sizeof adv,
                  ". The gain is capped at what the probe read sequentially from /dev/%s.",
                  S->disk);
    else
        tm_an_adv(adv, sizeof adv,
                  ". The request rate is the device's; the gain holds while its bandwidth "
                  "exceeds the larger reads (`trainmon run --probe` measures it).");
    tm_an_add(an, TM_SEV_MEDIUM, isfinite(mean_file) ? TM_CONF_HIGH : TM_CONF_MEDIUM, -1, &e, title,
              adv);
}
