/* Algorithm 1 (lumos/sim/compiled.py `_core`; its docstring says how the picks are made, and
   lumos/sim/reference.py defines them). */

#include "kernels.h"

enum { W_NONE, W_STREAM, W_DEVICE };

/* a processor's ripe tasks: a heap by (measured start, task) in th[base : base + size] */
static inline int ripe_before(int64_t a, int64_t b, const double *tb)
{
    if (tb[a] != tb[b])
        return tb[a] < tb[b];
    return a < b;
}

static void ripe_push(int64_t *th, int64_t base, int64_t size, int64_t v, const double *tb)
{
    int64_t pos = size;
    while (pos > 0) {
        int64_t parent = (pos - 1) >> 1;
        if (!ripe_before(v, th[base + parent], tb))
            break;
        th[base + pos] = th[base + parent];
        pos = parent;
    }
    th[base + pos] = v;
}

static void ripe_pop(int64_t *th, int64_t base, int64_t size, const double *tb)
{
    size--;
    int64_t v = th[base + size];
    int64_t pos = 0;
    for (;;) {
        int64_t child = 2 * pos + 1;
        if (child >= size)
            break;
        if (child + 1 < size && ripe_before(th[base + child + 1], th[base + child], tb))
            child++;
        if (!ripe_before(th[base + child], v, tb))
            break;
        th[base + pos] = th[base + child];
        pos = child;
    }
    th[base + pos] = v;
}

/* the pick heap: rows (key, measured start, task, processor or -1), smallest (key, start, task) first */
typedef struct {
    double *k, *t;
    int64_t *v, *p;
    int64_t size, cap;
} Heap;

typedef struct {
    double k, t;
    int64_t v, p;   /* v -1: no row held */
} Row;

static inline int row_before(double k, double t, int64_t v, double k2, double t2, int64_t v2)
{
    return k < k2 || (k == k2 && (t < t2 || (t == t2 && v < v2)));
}

static inline void heap_set(Heap *h, int64_t pos, Row r)
{
    h->k[pos] = r.k;
    h->t[pos] = r.t;
    h->v[pos] = r.v;
    h->p[pos] = r.p;
}

static inline Row heap_row(const Heap *h, int64_t pos) { return (Row){h->k[pos], h->t[pos], h->v[pos], h->p[pos]}; }

static void heap_push(Heap *h, Row r)
{
    int64_t pos = h->size;
    while (pos > 0) {
        int64_t parent = (pos - 1) >> 1;
        if (!row_before(r.k, r.t, r.v, h->k[parent], h->t[parent], h->v[parent]))
            break;
        heap_set(h, pos, heap_row(h, parent));
        pos = parent;
    }
    heap_set(h, pos, r);
    h->size++;
}

static void heap_pop(Heap *h)
{
    int64_t size = --h->size;
    Row last = heap_row(h, size);
    int64_t pos = 0;
    for (;;) {
        int64_t child = 2 * pos + 1;
        if (child >= size)
            break;
        if (child + 1 < size &&
            row_before(h->k[child + 1], h->t[child + 1], h->v[child + 1], h->k[child], h->t[child], h->v[child]))
            child++;
        if (!row_before(h->k[child], h->t[child], h->v[child], last.k, last.t, last.v))
            break;
        heap_set(h, pos, heap_row(h, child));
        pos = child;
    }
    heap_set(h, pos, last);
}

/* Add a row, keeping the smaller of it and the held row out of the heap (the row just made ready is
   often the next pick, and then it never enters the heap). */
static void offer(Heap *h, Row *slot, Row r)
{
    if (slot->v < 0) {
        *slot = r;
        return;
    }
    if (row_before(r.k, r.t, r.v, slot->k, slot->t, slot->v)) {
        heap_push(h, *slot);
        *slot = r;
        return;
    }
    heap_push(h, r);
}

static int heap_grow(Heap *h, int64_t need)
{
    int64_t cap = h->cap;
    while (cap < need)
        cap *= 2;
    if (cap == h->cap)
        return 0;
    double *k = realloc(h->k, (size_t)cap * sizeof(double));
    if (k)
        h->k = k;
    double *t = realloc(h->t, (size_t)cap * sizeof(double));
    if (t)
        h->t = t;
    int64_t *v = realloc(h->v, (size_t)cap * sizeof(int64_t));
    if (v)
        h->v = v;
    int64_t *p = realloc(h->p, (size_t)cap * sizeof(int64_t));
    if (p)
        h->p = p;
    if (!k || !t || !v || !p)
        return -1;
    h->cap = cap;
    return 0;
}

typedef struct {   /* the graph's arrays (lumos.sim.arrays.SimArrays) */
    int64_t n, n_procs, n_edges, n_ri, n_rank_streams;
    const int64_t *proc, *out_ptr, *out_dst, *indeg0, *wait_kind, *wait_target, *stream_ptr, *stream_ops,
        *rank_streams_ptr, *rank_streams, *rank_index;
    const double *dur, *release, *tiebreak, *out_lag, *floor;
    const uint8_t *out_launch, *is_gpu;
} Graph;

typedef struct {   /* per-task work arrays, allocated by numpy (compiled.py `_workspace`) */
    double *start, *end, *earliest, *enq;
    int32_t *indeg;
    uint8_t *done, *has_launch_in, *resolved;
    int64_t *pending, *first, *last;
} Work;

/* compiled.py `_core`: 0 done (*abandoned set), -1 out of memory. */
static int simulate_core(const Graph *g, Work *w, int64_t *abandoned_out)
{
    const int64_t n = g->n, n_procs = g->n_procs, n_ri = g->n_ri;
    const double inf = INFINITY;
    double *start = w->start, *end = w->end, *earliest = w->earliest, *enq = w->enq;
    int32_t *indeg = w->indeg;
    uint8_t *done = w->done, *has_launch_in = w->has_launch_in, *resolved = w->resolved;
    int64_t *pending = w->pending, *first = w->first, *last = w->last;
    int rc = -1;

    int64_t *th = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));        /* the ripe heaps */
    int64_t *ready = malloc((size_t)(n + 1) * sizeof(int64_t));              /* tasks made ready, to queue */
    int64_t *off = calloc((size_t)(n_procs + 1), sizeof(int64_t));
    int64_t *rn = calloc((size_t)(n_procs > 0 ? n_procs : 1), sizeof(int64_t));
    double *avail = malloc((size_t)(n_procs > 0 ? n_procs : 1) * sizeof(double));
    int64_t *tok_task = malloc((size_t)(n_procs > 0 ? n_procs : 1) * sizeof(int64_t));
    double *tok_key = malloc((size_t)(n_procs > 0 ? n_procs : 1) * sizeof(double));
    uint8_t *marked = calloc((size_t)(n_procs > 0 ? n_procs : 1), 1);
    int64_t *touched = malloc((size_t)(n_procs > 0 ? n_procs : 1) * sizeof(int64_t));
    int64_t *prefix = malloc((size_t)(g->n_procs > 0 ? g->n_procs : 1) * sizeof(int64_t));
    int64_t *streams = malloc((size_t)(g->n_rank_streams > 0 ? g->n_rank_streams : 1) * sizeof(int64_t));
    int64_t *rec_next = NULL, *rec_task = NULL;
    uint8_t *rec_live = NULL;
    Heap h = {NULL, NULL, NULL, NULL, 0, 0};
    if (!th || !ready || !off || !rn || !avail || !tok_task || !tok_key || !marked || !touched || !prefix || !streams)
        goto out;

    for (int64_t k = 0; k < g->n_edges; k++)
        if (g->out_launch[k])
            has_launch_in[g->out_dst[k]] = 1;
    int64_t cap = 0;   /* waiter records: a waiting task registers at most once per stream it resolves */
    int64_t n_ready = 0;
    for (int64_t v = 0; v < n; v++) {
        double r = g->release[v];
        earliest[v] = isfinite(r) ? r : -inf;
        indeg[v] = (int32_t)g->indeg0[v];
        enq[v] = (g->is_gpu[v] && !has_launch_in[v]) ? -inf : inf;   /* no launcher: queued from the start */
        off[g->proc[v] + 1]++;
        int64_t wk = g->wait_kind[v];
        if (wk == W_STREAM) {
            cap++;
        } else if (wk == W_DEVICE) {
            int64_t wt = g->wait_target[v];
            if (wt < n_ri) {
                int64_t idx = wt < 0 ? wt + n_ri : wt;
                int64_t ri = idx >= 0 ? g->rank_index[idx] : -1;
                if (ri >= 0)
                    cap += g->rank_streams_ptr[ri + 1] - g->rank_streams_ptr[ri];
            }
        }
        if (g->indeg0[v] == 0)
            ready[n_ready++] = v;
    }
    for (int64_t p = 0; p < n_procs; p++)   /* processor p's ripe heap: th[off[p] : off[p + 1]] */
        off[p + 1] += off[p];
    for (int64_t p = 0; p < n_procs; p++) {
        avail[p] = -inf;
        tok_task[p] = -1;
        tok_key[p] = NAN;
    }
    int64_t n_touched = 0;
    h.cap = 64 > n_procs + n / 8 ? 64 : n_procs + n / 8;
    h.k = malloc((size_t)h.cap * sizeof(double));
    h.t = malloc((size_t)h.cap * sizeof(double));
    h.v = malloc((size_t)h.cap * sizeof(int64_t));
    h.p = malloc((size_t)h.cap * sizeof(int64_t));
    rec_next = malloc((size_t)(cap > 0 ? cap : 1) * sizeof(int64_t));
    rec_task = malloc((size_t)(cap > 0 ? cap : 1) * sizeof(int64_t));
    rec_live = calloc((size_t)(cap > 0 ? cap : 1), 1);
    if (!h.k || !h.t || !h.v || !h.p || !rec_next || !rec_task || !rec_live)
        goto out;
    Row slot = {0.0, 0.0, -1, -1};
    for (int64_t sp = 0; sp < g->n_procs; sp++)   /* per stream: first op not yet seen enqueued */
        prefix[sp] = g->stream_ptr[sp];
    int64_t n_rec = 0, n_live = 0, abandoned = 0;

    for (;;) {
        if (h.size + n_ready + n_procs > h.cap && heap_grow(&h, h.size + n_ready + n_procs) < 0)
            goto out;
        /* make_ready: ripe tasks to their processor's heap, unripe ones into the pick heap */
        for (int64_t i = 0; i < n_ready; i++) {
            int64_t v = ready[i], q = g->proc[v];
            if (earliest[v] <= avail[q]) {
                if (rn[q] == 0)
                    th[off[q]] = v;
                else
                    ripe_push(th, off[q], rn[q], v, g->tiebreak);
                rn[q]++;
                if (!marked[q]) {
                    marked[q] = 1;
                    touched[n_touched++] = q;
                }
            } else {
                offer(&h, &slot, (Row){earliest[v], g->tiebreak[v], v, -1});
            }
        }
        n_ready = 0;
        /* tokens: a processor whose best ripe task or available time changed gets a current one */
        for (int64_t i = 0; i < n_touched; i++) {
            int64_t q = touched[i];
            marked[q] = 0;
            if (rn[q] > 0) {
                int64_t hd = th[off[q]];
                if (tok_task[q] != hd || tok_key[q] != avail[q]) {
                    tok_task[q] = hd;
                    tok_key[q] = avail[q];
                    offer(&h, &slot, (Row){avail[q], g->tiebreak[hd], hd, q});
                }
            }
        }
        n_touched = 0;

        if (h.size == 0 && slot.v < 0) {
            /* everything left waits on a parked sync: let the earliest-issued one go */
            int64_t wv = -1;
            if (n_live > 0)
                for (int64_t k = 0; k < n_rec; k++)
                    if (rec_live[k] && pending[rec_task[k]] > 0) {
                        int64_t u = rec_task[k];
                        if (wv < 0 || g->tiebreak[u] < g->tiebreak[wv] || (g->tiebreak[u] == g->tiebreak[wv] && u < wv))
                            wv = u;
                    }
            if (wv < 0)
                break;
            for (int64_t k = 0; k < n_rec; k++)
                if (rec_live[k] && rec_task[k] == wv) {
                    rec_live[k] = 0;
                    n_live--;
                }
            pending[wv] = 0;
            abandoned++;
            ready[0] = wv;
            n_ready = 1;
            continue;
        }

        double s;
        int64_t v, tp;
        if (slot.v >= 0 && (h.size == 0 || row_before(slot.k, slot.t, slot.v, h.k[0], h.t[0], h.v[0]))) {
            s = slot.k;
            v = slot.v;
            tp = slot.p;
            slot = (Row){0.0, 0.0, -1, -1};
        } else {
            s = h.k[0];
            v = h.v[0];
            tp = h.p[0];
            heap_pop(&h);
        }
        int64_t p;
        if (tp < 0) {   /* a task's own row */
            p = g->proc[v];
            if (earliest[v] < avail[p]) {   /* its processor came free after its earliest start: ripe now */
                ready[0] = v;
                n_ready = 1;
                continue;
            }
        } else {   /* a processor's token */
            p = tp;
            if (rn[p] == 0 || th[off[p]] != v || avail[p] != s)
                continue;   /* out of date; a current token is in the heap */
            tok_task[p] = -1;
            if (rn[p] > 1)
                ripe_pop(th, off[p], rn[p], g->tiebreak);
            rn[p]--;
            marked[p] = 1;
            touched[n_touched++] = p;
        }
        int64_t wk = g->wait_kind[v];
        if (wk != W_NONE && !resolved[v]) {
            resolved[v] = 1;
            int64_t n_s = 0;
            if (wk == W_STREAM) {
                streams[0] = g->wait_target[v];
                n_s = 1;
            } else {
                int64_t wt = g->wait_target[v];
                int64_t ri = -1;
                if (wt < n_ri) {
                    int64_t idx = wt < 0 ? wt + n_ri : wt;
                    ri = idx >= 0 ? g->rank_index[idx] : -1;
                }
                if (ri >= 0)
                    for (int64_t k = g->rank_streams_ptr[ri]; k < g->rank_streams_ptr[ri + 1]; k++)
                        streams[n_s++] = g->rank_streams[k];
            }
            for (int64_t i = 0; i < n_s; i++) {
                int64_t sp = streams[i];
                if (sp < 0)   /* the reference's index -1 finds nothing and moves nothing */
                    continue;
                int64_t lo = g->stream_ptr[sp], hi = g->stream_ptr[sp + 1];
                int64_t k = prefix[sp];
                while (k < hi && enq[g->stream_ops[k]] <= s)
                    k++;
                prefix[sp] = k;
                if (k <= lo)
                    continue;
                int64_t t = g->stream_ops[k - 1];
                if (done[t]) {
                    earliest[v] = pymax(earliest[v], end[t]);
                } else {
                    pending[v]++;
                    rec_task[n_rec] = v;
                    rec_next[n_rec] = -1;
                    rec_live[n_rec] = 1;
                    if (last[t] > 0)
                        rec_next[last[t] - 1] = n_rec;
                    else
                        first[t] = n_rec + 1;
                    last[t] = n_rec + 1;
                    n_rec++;
                    n_live++;
                }
            }
            if (pending[v] > 0 || earliest[v] > s) {
                if (pending[v] == 0)
                    ready[n_ready++] = v;
                continue;
            }
        }
        start[v] = s;
        double f = s + g->dur[v];
        if (g->floor[v] > f)
            f = g->floor[v];
        end[v] = f;
        done[v] = 1;
        avail[p] = f;
        if (rn[p] > 0 && !marked[p]) {
            marked[p] = 1;
            touched[n_touched++] = p;
        }
        for (int64_t k = g->out_ptr[v]; k < g->out_ptr[v + 1]; k++) {
            int64_t c = g->out_dst[k];
            double t = f + g->out_lag[k];
            if (t > earliest[c])
                earliest[c] = t;
            if (g->out_launch[k] && f < enq[c])
                enq[c] = f;
            if (--indeg[c] == 0)
                ready[n_ready++] = c;
        }
        if (n_live > 0) {
            int64_t rec = first[v] - 1;
            first[v] = 0;
            while (rec >= 0) {
                if (rec_live[rec]) {
                    rec_live[rec] = 0;
                    n_live--;
                    int64_t wt = rec_task[rec];
                    if (f > earliest[wt])
                        earliest[wt] = f;
                    if (--pending[wt] == 0)
                        ready[n_ready++] = wt;
                }
                rec = rec_next[rec];
            }
        }
    }
    for (int64_t v = 0; v < n; v++)
        if (!done[v]) {
            start[v] = NAN;
            end[v] = NAN;
        }
    *abandoned_out = abandoned;
    rc = 0;
out:
    free(th);
    free(ready);
    free(off);
    free(rn);
    free(avail);
    free(tok_task);
    free(tok_key);
    free(marked);
    free(touched);
    free(prefix);
    free(streams);
    free(rec_next);
    free(rec_task);
    free(rec_live);
    free(h.k);
    free(h.t);
    free(h.v);
    free(h.p);
    return rc;
}

const char simulate_doc[] =
"simulate(n, proc, dur, release, tiebreak, out_ptr, out_dst, out_lag, out_launch, indeg0, wait_kind,\n"
"         wait_target, is_gpu, stream_ptr, stream_ops, rank_streams_ptr, rank_streams, rank_index, n_procs,\n"
"         floor, start, end, done, earliest, indeg, enq, has_launch_in, resolved, pending, first, last)\n"
"-> abandoned\n\n"
"compiled.py's `_core`, the arguments as `_args(a) + _workspace(n)` give them.";

PyObject *py_simulate(PyObject *self, PyObject *args)
{
    PyObject *o[31];
    Py_ssize_t n, n_procs;
    if (!PyArg_ParseTuple(args, "nOOOOOOOOOOOOOOOOOnOOOOOOOOOOOO", &n, &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &o[15], &o[16], &o[17],
                          &n_procs, &o[19], &o[20], &o[21], &o[22], &o[23], &o[24], &o[25], &o[26], &o[27], &o[28],
                          &o[29], &o[30]))
        return NULL;
    Views vs = {.n = 0};
    Graph g;
    Work w;
    Py_ssize_t l[31];
    g.n = n;
    g.n_procs = n_procs;
    if (!(g.proc = arr(&vs, o[1], I64, 0, &l[1], "proc")) || !(g.dur = arr(&vs, o[2], F64, 0, &l[2], "dur")) ||
        !(g.release = arr(&vs, o[3], F64, 0, &l[3], "release")) ||
        !(g.tiebreak = arr(&vs, o[4], F64, 0, &l[4], "tiebreak")) ||
        !(g.out_ptr = arr(&vs, o[5], I64, 0, &l[5], "out_ptr")) ||
        !(g.out_dst = arr(&vs, o[6], I64, 0, &l[6], "out_dst")) ||
        !(g.out_lag = arr(&vs, o[7], F64, 0, &l[7], "out_lag")) ||
        !(g.out_launch = arr(&vs, o[8], BOOL, 0, &l[8], "out_launch")) ||
        !(g.indeg0 = arr(&vs, o[9], I64, 0, &l[9], "indeg")) ||
        !(g.wait_kind = arr(&vs, o[10], I64, 0, &l[10], "wait_kind")) ||
        !(g.wait_target = arr(&vs, o[11], I64, 0, &l[11], "wait_target")) ||
        !(g.is_gpu = arr(&vs, o[12], BOOL, 0, &l[12], "is_gpu")) ||
        !(g.stream_ptr = arr(&vs, o[13], I64, 0, &l[13], "stream_ptr")) ||
        !(g.stream_ops = arr(&vs, o[14], I64, 0, &l[14], "stream_ops")) ||
        !(g.rank_streams_ptr = arr(&vs, o[15], I64, 0, &l[15], "rank_streams_ptr")) ||
        !(g.rank_streams = arr(&vs, o[16], I64, 0, &l[16], "rank_streams")) ||
        !(g.rank_index = arr(&vs, o[17], I64, 0, &l[17], "rank_index")) ||
        !(g.floor = arr(&vs, o[19], F64, 0, &l[19], "floor")) ||
        !(w.start = arr(&vs, o[20], F64, 1, &l[20], "start")) || !(w.end = arr(&vs, o[21], F64, 1, &l[21], "end")) ||
        !(w.done = arr(&vs, o[22], BOOL, 1, &l[22], "done")) ||
        !(w.earliest = arr(&vs, o[23], F64, 1, &l[23], "earliest")) ||
        !(w.indeg = arr(&vs, o[24], I32, 1, &l[24], "indeg (work)")) ||
        !(w.enq = arr(&vs, o[25], F64, 1, &l[25], "enq")) ||
        !(w.has_launch_in = arr(&vs, o[26], BOOL, 1, &l[26], "has_launch_in")) ||
        !(w.resolved = arr(&vs, o[27], BOOL, 1, &l[27], "resolved")) ||
        !(w.pending = arr(&vs, o[28], I64, 1, &l[28], "pending")) ||
        !(w.first = arr(&vs, o[29], I64, 1, &l[29], "first")) || !(w.last = arr(&vs, o[30], I64, 1, &l[30], "last")))
        goto fail;
    /* the shapes the core relies on: a malformed graph is an error here, never a wild write */
    const int per_task[] = {1, 2, 3, 4, 9, 10, 11, 12, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30};
    for (size_t k = 0; k < sizeof per_task / sizeof *per_task; k++)
        if (l[per_task[k]] != n) {
            PyErr_Format(PyExc_ValueError, "lumos._kernels.simulate: argument %d has %zd items, not n = %zd",
                         per_task[k], l[per_task[k]], n);
            goto fail;
        }
    g.n_edges = l[6];
    g.n_ri = l[17];
    g.n_rank_streams = l[16];
    if (l[5] != n + 1 || l[7] != g.n_edges || l[8] != g.n_edges || l[13] != n_procs + 1 || l[15] < 1 ||
        n_procs < 0) {
        PyErr_SetString(PyExc_ValueError, "lumos._kernels.simulate: edge or stream arrays do not match");
        goto fail;
    }
    if (check_index(g.proc, n, 0, n_procs, "proc") < 0 || check_index(g.out_dst, g.n_edges, 0, n, "out_dst") < 0 ||
        check_index(g.out_ptr, n + 1, 0, g.n_edges + 1, "out_ptr") < 0 ||
        check_index(g.stream_ops, l[14], 0, n, "stream_ops") < 0 ||
        check_index(g.stream_ptr, l[13], 0, l[14] + 1, "stream_ptr") < 0 ||
        check_index(g.rank_streams_ptr, l[15], 0, l[16] + 1, "rank_streams_ptr") < 0 ||
        check_index(g.rank_streams, l[16], -1, l[13] - 1, "rank_streams") < 0 ||
        check_index(g.rank_index, l[17], -1, l[15] - 1, "rank_index") < 0)
        goto fail;
    for (Py_ssize_t v = 0; v < n; v++)
        if (g.wait_kind[v] == W_STREAM && g.wait_target[v] >= n_procs) {   /* a negative one finds nothing */
            PyErr_Format(PyExc_ValueError, "lumos._kernels.simulate: task %zd waits on stream %lld, which is not one",
                         v, (long long)g.wait_target[v]);
            goto fail;
        }
    int64_t abandoned = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = simulate_core(&g, &w, &abandoned);
    Py_END_ALLOW_THREADS
    release(&vs);
    if (rc < 0)
        return PyErr_NoMemory();
    return PyLong_FromLongLong(abandoned);
fail:
    release(&vs);
    return NULL;
}
