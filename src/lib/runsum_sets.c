/*
 * runsum_sets.c - DataLoader worker sets and the loaders behind them, for
 * the worker counts of the run summary (docs/DIAGNOSIS.md "Workers").
 *
 * A worker is known by its (rank, worker id), and ids run 0..N-1 in every
 * loader: two loaders feeding one step (FixMatch's labeled and unlabeled
 * sets, each with workers of its own) read as N workers and N restarts.
 * Workers that record it (layout 3) carry their set: the base seed of the
 * iterator that started them, the same in every worker one iter() made.
 * A set's lifetime runs from its first fetch to its last.  Sets of one
 * rank that run side by side for most of the longer one's lifetime are
 * different loaders (lanes); a set that follows another, or runs inside a
 * much longer one (an eval loader's workers, started for each eval while
 * the training loader's persistent workers live on), takes that one's
 * lane, and its workers count as a restart of the same ids, as they did
 * before sets were recorded.  Workers without a set (older files) are in
 * lane 0.
 */
#include <stdlib.h>
#include <string.h>

#include "runsum.h"

/* Sets run side by side when they overlap for at least this share of the
 * longer one's lifetime. */
#define SIDE_BY_SIDE 0.5

struct proc {
    size_t b, e; /* its records wk[b..e) */
    int64_t first, last;
    uint64_t set;
    int32_t rank;
    const char *host;
    uint16_t lane;
};

static int by_set(const void *a, const void *b)
{
    const struct proc *x = a, *y = b;
    int h = strcmp(x->host, y->host);
    if (h)
        return h;
    if (x->rank != y->rank)
        return (x->rank > y->rank) - (x->rank < y->rank);
    if (x->set != y->set)
        return (x->set > y->set) - (x->set < y->set);
    return (x->first > y->first) - (x->first < y->first);
}

struct wset {
    size_t b, e; /* its processes p[b..e) */
    int64_t first, last;
};

static int by_start(const void *a, const void *b)
{
    const struct wset *x = a, *y = b;
    return (x->first > y->first) - (x->first < y->first);
}

static bool side_by_side(const struct wset *x, const struct wset *y)
{
    int64_t lo = x->first > y->first ? x->first : y->first;
    int64_t hi = x->last < y->last ? x->last : y->last;
    int64_t lx = x->last - x->first, ly = y->last - y->first;
    int64_t longer = lx > ly ? lx : ly;
    return hi > lo && (double)(hi - lo) >= SIDE_BY_SIDE * (double)longer;
}

#define LANES_MAX 64

/* The sets p[b..e) of one (host, rank), sorted by set: their lanes. */
static void lanes_of(struct proc *p, size_t b, size_t e)
{
    struct wset *s = malloc((e - b) * sizeof *s);
    if (!s)
        return;
    size_t n = 0;
    for (size_t i = b; i < e;) {
        size_t j = i;
        struct wset w = {i, i, p[i].first, p[i].last};
        for (; j < e && p[j].set == p[i].set; j++) {
            if (p[j].first < w.first)
                w.first = p[j].first;
            if (p[j].last > w.last)
                w.last = p[j].last;
        }
        w.e = j;
        s[n++] = w;
        i = j;
    }
    qsort(s, n, sizeof *s, by_start);
    size_t last[LANES_MAX]; /* the set each lane took last */
    size_t nl = 0;
    for (size_t k = 0; k < n; k++) {
        size_t L = 0;
        while (L < nl && side_by_side(&s[last[L]], &s[k]))
            L++;
        if (L == LANES_MAX)
            L = LANES_MAX - 1;
        else if (L == nl)
            nl++;
        last[L] = k;
        for (size_t i = s[k].b; i < s[k].e; i++)
            p[i].lane = (uint16_t)L;
    }
    free(s);
}

void tm_runsum_worker_lanes(const tm_runview *v, const tm_run_worker *wk, size_t nwk,
                            uint16_t *lane)
{
    memset(lane, 0, (nwk ? nwk : 1) * sizeof *lane);
    size_t np = 0;
    for (size_t i = 0; i < nwk;) /* the worker processes: one source each */
        for (size_t j = i;; j++)
            if (j == nwk || wk[j].source != wk[i].source) {
                np++;
                i = j;
                break;
            }
    struct proc *p = calloc(np ? np : 1, sizeof *p);
    if (!p)
        return; /* all in lane 0: as before sets */
    np = 0;
    for (size_t i = 0; i < nwk;) {
        struct proc w = {.b = i, .first = INT64_MAX, .last = INT64_MIN, .rank = wk[i].rank};
        w.host = wk[i].source < v->nsrc ? v->src[wk[i].source].header.host : "";
        size_t j = i;
        for (; j < nwk && wk[j].source == wk[i].source; j++) {
            const tm_inproc_worker *r = &wk[j].w;
            if (r->end_ns < r->start_ns)
                continue;
            if (r->start_ns < w.first)
                w.first = r->start_ns;
            if (r->end_ns > w.last)
                w.last = r->end_ns;
            if (!w.set && r->layout >= 3)
                w.set = r->set;
        }
        w.e = j;
        if (w.set && w.first <= w.last)
            p[np++] = w;
        i = j;
    }
    qsort(p, np, sizeof *p, by_set);
    for (size_t i = 0; i < np;) { /* each (host, rank) */
        size_t j = i;
        while (j < np && p[j].rank == p[i].rank && strcmp(p[j].host, p[i].host) == 0)
            j++;
        lanes_of(p, i, j);
        i = j;
    }
    for (size_t i = 0; i < np; i++)
        for (size_t r = p[i].b; r < p[i].e; r++)
            lane[r] = p[i].lane;
    free(p);
}
