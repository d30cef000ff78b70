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

typedef struct {   /* per-task arrays allocated by numpy (compiled.py `_workspace`): the results, and work
                      arrays the core sets for every task before it reads them (whatever they held) */
    double *start, *end, *earliest, *enq;
    int64_t *indeg;   /* 64-bit: a count never truncated (it starts in [0, edges], checked) */
    uint8_t *done;    /* zeroed here */
} Work;

/* compiled.py `_core`: 0 done (*abandoned set), -1 out of memory. Not inlined, and the graph's
   arrays taken into restrict locals first: its code then does not depend on what the caller checks
   (a pointer read through `g` inside the loops, where a store through any pointer could have
   changed it, cost 5% on small graphs). */
__attribute__((noinline)) static int simulate_core(const Graph *g, Work *w, int64_t *abandoned_out)
{
    const double *const restrict dur = g->dur;
    const double *const restrict floor_ = g->floor;
    const int64_t *const restrict indeg0 = g->indeg0;
    const uint8_t *const restrict is_gpu = g->is_gpu;
    const int64_t *const restrict out_dst = g->out_dst;
    const double *const restrict out_lag = g->out_lag;
    const uint8_t *const restrict out_launch = g->out_launch;
    const int64_t *const restrict out_ptr = g->out_ptr;
    const int64_t *const restrict proc = g->proc;
    const int64_t *const restrict rank_index = g->rank_index;
    const int64_t *const restrict rank_streams = g->rank_streams;
    const int64_t *const restrict rank_streams_ptr = g->rank_streams_ptr;
    const double *const restrict release = g->release;
    const int64_t *const restrict stream_ops = g->stream_ops;
    const int64_t *const restrict stream_ptr = g->stream_ptr;
    const double *const restrict tiebreak = g->tiebreak;
    const int64_t *const restrict wait_kind = g->wait_kind;
    const int64_t *const restrict wait_target = g->wait_target;
    const int64_t n = g->n, n_procs = g->n_procs, n_ri = g->n_ri;
    const double inf = INFINITY;
    /* restrict: the outputs share no memory with any argument (check_views) */
    double *restrict start = w->start, *restrict end = w->end, *restrict earliest = w->earliest,
           *restrict enq = w->enq;
    int64_t *restrict indeg = w->indeg;
    uint8_t *restrict done = w->done;
    int rc = -1;

    /* The arrays only launches and syncs touch start zeroed, allocated here as one calloc block
       (past malloc's mmap threshold it is pages the OS zero-fills on first use, so those a replay
       never touches cost nothing; separate callocs from the heap cost 15% on 10^4 tasks): the core
       trusts their contents, so no caller provides them. Unfinished targets of a parked sync;
       1 + first / last waiter record of a target task (0: none); has a launch edge in; resolved. */
    const size_t nn = (size_t)(n > 0 ? n : 1);
    char *zeroed = calloc(nn, 3 * sizeof(int64_t) + 2);
    int64_t *restrict pending = (int64_t *)zeroed, *restrict first = zeroed ? pending + nn : NULL,
                      *restrict last = zeroed ? first + nn : NULL;
    uint8_t *restrict has_launch_in = zeroed ? (uint8_t *)(last + nn) : NULL,
                      *restrict resolved = zeroed ? has_launch_in + nn : NULL;

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
    if (!th || !ready || !off || !rn || !avail || !tok_task || !tok_key || !marked || !touched || !prefix ||
        !streams || !zeroed)
        goto out;
    memset(done, 0, (size_t)n);

    for (int64_t k = 0; k < g->n_edges; k++)
        if (out_launch[k])
            has_launch_in[out_dst[k]] = 1;
    int64_t cap = 0;   /* waiter records: a waiting task registers at most once per stream it resolves */
    int64_t n_ready = 0;
    for (int64_t v = 0; v < n; v++) {
        double r = release[v];
        earliest[v] = isfinite(r) ? r : -inf;
        indeg[v] = indeg0[v];
        enq[v] = (is_gpu[v] && !has_launch_in[v]) ? -inf : inf;   /* no launcher: queued from the start */
        off[proc[v] + 1]++;
        int64_t wk = wait_kind[v];
        if (wk == W_STREAM) {
            cap++;
        } else if (wk == W_DEVICE) {
            int64_t wt = wait_target[v];   /* a rank; -1 or one past rank_index: none */
            int64_t ri = wt >= 0 && wt < n_ri ? rank_index[wt] : -1;
            if (ri >= 0)
                cap += rank_streams_ptr[ri + 1] - rank_streams_ptr[ri];
        }
        if (indeg0[v] == 0)
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
        prefix[sp] = stream_ptr[sp];
    int64_t n_rec = 0, n_live = 0, abandoned = 0;

    for (;;) {
        if (h.size + n_ready + n_procs > h.cap && heap_grow(&h, h.size + n_ready + n_procs) < 0)
            goto out;
        /* make_ready: ripe tasks to their processor's heap, unripe ones into the pick heap */
        for (int64_t i = 0; i < n_ready; i++) {
            int64_t v = ready[i], q = proc[v];
            if (earliest[v] <= avail[q]) {
                if (rn[q] == 0)
                    th[off[q]] = v;
                else
                    ripe_push(th, off[q], rn[q], v, tiebreak);
                rn[q]++;
                if (!marked[q]) {
                    marked[q] = 1;
                    touched[n_touched++] = q;
                }
            } else {
                offer(&h, &slot, (Row){earliest[v], tiebreak[v], v, -1});
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
                    offer(&h, &slot, (Row){avail[q], tiebreak[hd], hd, q});
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
                        if (wv < 0 || tiebreak[u] < tiebreak[wv] || (tiebreak[u] == tiebreak[wv] && u < wv))
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
            p = proc[v];
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
                ripe_pop(th, off[p], rn[p], tiebreak);
            rn[p]--;
            marked[p] = 1;
            touched[n_touched++] = p;
        }
        int64_t wk = wait_kind[v];
        if (wk != W_NONE && !resolved[v]) {
            resolved[v] = 1;
            int64_t n_s = 0;
            if (wk == W_STREAM) {
                streams[0] = wait_target[v];
                n_s = 1;
            } else {
                int64_t wt = wait_target[v];
                int64_t ri = wt >= 0 && wt < n_ri ? rank_index[wt] : -1;
                if (ri >= 0)
                    for (int64_t k = rank_streams_ptr[ri]; k < rank_streams_ptr[ri + 1]; k++)
                        streams[n_s++] = rank_streams[k];
            }
            for (int64_t i = 0; i < n_s; i++) {
                int64_t sp = streams[i];
                if (sp < 0)   /* -1: no stream (the checks allow no other negative one) */
                    continue;
                int64_t lo = stream_ptr[sp], hi = stream_ptr[sp + 1];
                int64_t k = prefix[sp];
                while (k < hi && enq[stream_ops[k]] <= s)
                    k++;
                prefix[sp] = k;
                if (k <= lo)
                    continue;
                int64_t t = stream_ops[k - 1];
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
        double f = s + dur[v];
        if (floor_[v] > f)
            f = floor_[v];
        end[v] = f;
        done[v] = 1;
        avail[p] = f;
        if (rn[p] > 0 && !marked[p]) {
            marked[p] = 1;
            touched[n_touched++] = p;
        }
        for (int64_t k = out_ptr[v]; k < out_ptr[v + 1]; k++) {
            int64_t c = out_dst[k];
            double t = f + out_lag[k];
            if (t > earliest[c])
                earliest[c] = t;
            if (out_launch[k] && f < enq[c])
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
    free(zeroed);
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

/* ---- argument checks (kernels.h; walks.c uses them too) ---- */

int get_count(PyObject *o, const char *fn, const char *what, Py_ssize_t lo, Py_ssize_t *out)
{
    if (!PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "lumos._kernels.%s: %s must be an integer, not %.80s", fn, what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(o);
    if (!i)
        return -1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < lo || v > PY_SSIZE_T_MAX) {
        if (overflow)
            PyErr_Format(PyExc_ValueError, "lumos._kernels.%s: %s is outside [%zd, %zd] (beyond 64 bits)", fn, what,
                         lo, (Py_ssize_t)PY_SSIZE_T_MAX);
        else
            PyErr_Format(PyExc_ValueError, "lumos._kernels.%s: %s = %lld is outside [%zd, %zd]", fn, what, v, lo,
                         (Py_ssize_t)PY_SSIZE_T_MAX);
        return -1;
    }
    *out = (Py_ssize_t)v;
    return 0;
}

int get_real(PyObject *o, const char *fn, const char *what, double *out)
{
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "lumos._kernels.%s: %s must be a real number, not %.80s", fn, what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = v;
    return 0;
}

/* The fast passes below look at every item without a branch (SSE2 vectorises them): each ORs
   together words whose top bit is set where an item may be out of place. Unsigned arithmetic, so
   nothing overflows: x lies in [lo, hi) (lo 0 or -1, hi >= 0) exactly when neither x - lo nor
   hi - 1 - x has its top bit set. Only where the pass sees something (or may: a wait target near
   INT64_MAX) does an exact loop find the item and say what is wrong with it. */
#define TOP(x) ((x) >> 63)

static int in_range(const int64_t *a, Py_ssize_t len, int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return len == 0;
    const uint64_t ulo = (uint64_t)lo, uhi = (uint64_t)hi - 1;
    uint64_t bad = 0;
    for (Py_ssize_t k = 0; k < len; k++)
        bad |= ((uint64_t)a[k] - ulo) | (uhi - (uint64_t)a[k]);
    return !TOP(bad);
}

int check_range(const int64_t *a, Py_ssize_t len, int64_t lo, int64_t hi, const char *what)
{
    return in_range(a, len, lo, hi) ? 0 : check_index(a, len, lo, hi, what) < 0 ? -1 : 0;
}

int check_ptr(const int64_t *a, Py_ssize_t len, int64_t hi, const char *fn, const char *what)
{
    /* in [0, hi], and no step down: with every item in range a step is in [-hi, hi], negative
       exactly when its top bit is set (and an item out of range sets a top bit itself) */
    const uint64_t *u = (const uint64_t *)a, top = (uint64_t)hi;
    uint64_t bad = len ? u[0] | (top - u[0]) : 0;
    for (Py_ssize_t k = 1; k < len; k++)
        bad |= u[k] | (top - u[k]) | (u[k] - u[k - 1]);
    if (!TOP(bad))
        return 0;
    int64_t prev_ = 0;
    for (Py_ssize_t k = 0; k < len; k++) {
        int64_t x = a[k];
        if (x < prev_ || x > hi) {
            if (x > hi || x < 0)
                PyErr_Format(PyExc_ValueError, "lumos._kernels.%s: %s[%zd] = %lld outside [0, %lld]", fn, what, k,
                             (long long)x, (long long)hi);
            else
                PyErr_Format(PyExc_ValueError,
                             "lumos._kernels.%s: %s is not non-decreasing (%s[%zd] = %lld < %s[%zd] = %lld)", fn,
                             what, what, k, (long long)x, what, k - 1, (long long)prev_);
            return -1;
        }
        prev_ = x;
    }
    return 0;
}

int check_waits(const int64_t *kind, const int64_t *target, Py_ssize_t n, int64_t n_streams, const char *fn)
{
    uint64_t bad = 0;
    const uint64_t last = (uint64_t)(n_streams >= 0 ? n_streams - 1 : INT64_MAX);
    for (Py_ssize_t v = 0; v < n; v++) {
        uint64_t k = (uint64_t)kind[v], t = (uint64_t)target[v];
        uint64_t waits = 0 - ((k | (k >> 1)) & 1), stream = 0 - (k & ~(k >> 1) & 1);   /* k 1 or 2; k 1 */
        bad |= k | (2 - k) | (waits & (t + 1)) | (stream & (last - t));
    }
    if (!TOP(bad))
        return 0;
    for (Py_ssize_t v = 0; v < n; v++) {
        int64_t k = kind[v], t = target[v];
        if (k != 0 && k != 1 && k != 2) {
            PyErr_Format(PyExc_ValueError, "lumos._kernels.%s: wait_kind[%zd] = %lld is not 0, 1 or 2", fn, v,
                         (long long)k);
            return -1;
        }
        if (k != 0 && (t < -1 || (n_streams >= 0 && k == 1 && t >= n_streams))) {
            PyErr_Format(PyExc_ValueError, "lumos._kernels.%s: wait_target[%zd] = %lld is not a %s (nor -1)", fn, v,
                         (long long)t, k == 1 ? "stream processor" : "rank");
            return -1;
        }
    }
    return 0;
}

int check_views(const Views *vs, int n_read, const char *const *names, const char *fn)
{
    for (int i = 0; i < vs->n; i++)
        if (vs->v[i].ndim != 1) {
            PyErr_Format(PyExc_ValueError, "lumos._kernels.%s: %s must be one-dimensional, not %d-dimensional", fn,
                         names[i], vs->v[i].ndim);
            return -1;
        }
    for (int i = n_read; i < vs->n; i++) {
        uintptr_t a = (uintptr_t)vs->v[i].buf, la = (uintptr_t)vs->v[i].len;
        for (int j = 0; j < vs->n; j++) {
            uintptr_t b = (uintptr_t)vs->v[j].buf, lb = (uintptr_t)vs->v[j].len;
            if (j != i && la > 0 && lb > 0 && a < b + lb && b < a + la) {
                PyErr_Format(PyExc_ValueError, "lumos._kernels.%s: %s shares memory with %s (an output must be "
                             "an array of its own)", fn, names[i], names[j]);
                return -1;
            }
        }
    }
    return 0;
}

/* ---- the kernel's entry ---- */

const char simulate_doc[] =
"simulate(n, proc, dur, release, tiebreak, out_ptr, out_dst, out_lag, out_launch, indeg, wait_kind,\n"
"         wait_target, is_gpu, stream_ptr, stream_ops, rank_streams_ptr, rank_streams, rank_index, n_procs,\n"
"         floor, start, end, done, earliest, indeg_work, enq)\n"
"-> abandoned\n\n"
"compiled.py's `_core`, the arguments as `_args(a) + _workspace(n)` give them. Every argument is checked\n"
"before the core runs (a ValueError or TypeError names the one that is wrong): lengths, ids within their\n"
"tables, pointer arrays non-decreasing within their tables, in-degrees within [0, edges], wait kinds 0, 1\n"
"or 2 with a target of -1 or a stream (kind 1) or rank (kind 2), outputs writable and not sharing memory.\n"
"The outputs' contents do not matter: the core sets each item before it reads it.";

/* the arguments by position; the arrays' views are taken in this order (0 and 18 are counts) */
enum { N_SIM_ARGS = 26 };
static const char *const SIM_ARG[N_SIM_ARGS] = {
    "n", "proc", "dur", "release", "tiebreak", "out_ptr", "out_dst", "out_lag", "out_launch", "indeg",
    "wait_kind", "wait_target", "is_gpu", "stream_ptr", "stream_ops", "rank_streams_ptr", "rank_streams",
    "rank_index", "n_procs", "floor", "start", "end", "done", "earliest", "indeg_work", "enq"};

PyObject *py_simulate(PyObject *self, PyObject *args)
{
    PyObject *o[N_SIM_ARGS];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOOOOOOOOOOO:simulate", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &o[15], &o[16], &o[17], &o[18],
                          &o[19], &o[20], &o[21], &o[22], &o[23], &o[24], &o[25]))
        return NULL;
    Py_ssize_t n, n_procs;
    if (get_count(o[0], "simulate", "n", 0, &n) < 0 || get_count(o[18], "simulate", "n_procs", 0, &n_procs) < 0)
        return NULL;
    /* view kinds by argument (-1: a count); the read-only ones first, then the outputs */
    static const signed char kind[N_SIM_ARGS] = {-1,  I64, F64,  F64, F64, I64, I64, F64, BOOL, I64, I64, I64, BOOL,
                                                 I64, I64, I64,  I64, I64, -1,  F64, F64, F64, BOOL, F64, I64, F64};
    Views vs = {.n = 0};
    const char *names[N_SIM_ARGS];
    void *data[N_SIM_ARGS] = {NULL};
    Py_ssize_t l[N_SIM_ARGS] = {0};
    for (int k = 0; k < N_SIM_ARGS; k++) {
        if (kind[k] < 0)
            continue;
        names[vs.n] = SIM_ARG[k];
        if (!(data[k] = arr(&vs, o[k], kind[k], k >= 20, &l[k], SIM_ARG[k])))
            goto fail;
    }
    const int n_read = 18;   /* proc .. rank_index, floor */
    Graph g = {.n = n, .n_procs = n_procs, .n_edges = l[6], .n_ri = l[17], .n_rank_streams = l[16],
               .proc = data[1], .dur = data[2], .release = data[3], .tiebreak = data[4], .out_ptr = data[5],
               .out_dst = data[6], .out_lag = data[7], .out_launch = data[8], .indeg0 = data[9],
               .wait_kind = data[10], .wait_target = data[11], .is_gpu = data[12], .stream_ptr = data[13],
               .stream_ops = data[14], .rank_streams_ptr = data[15], .rank_streams = data[16],
               .rank_index = data[17], .floor = data[19]};
    Work w = {.start = data[20], .end = data[21], .done = data[22], .earliest = data[23], .indeg = data[24],
              .enq = data[25]};
    /* the shapes the core relies on: a malformed graph is an error here, never a wild write */
    static const int per_task[] = {1, 2, 3, 4, 9, 10, 11, 12, 19, 20, 21, 22, 23, 24, 25};
    for (size_t k = 0; k < sizeof per_task / sizeof *per_task; k++)
        if (l[per_task[k]] != n) {
            PyErr_Format(PyExc_ValueError, "lumos._kernels.simulate: %s has %zd items, not n = %zd",
                         SIM_ARG[per_task[k]], l[per_task[k]], n);
            goto fail;
        }
    /* (lengths minus one: no count + 1 can overflow) */
    if (l[5] - 1 != n) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.simulate: out_ptr has %zd items, not n + 1 = %zd", l[5], n + 1);
        goto fail;
    }
    if (l[7] != g.n_edges || l[8] != g.n_edges) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.simulate: %s has %zd items, not len(out_dst) = %zd",
                     l[7] != g.n_edges ? "out_lag" : "out_launch", l[7] != g.n_edges ? l[7] : l[8], g.n_edges);
        goto fail;
    }
    if (l[13] - 1 != n_procs) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.simulate: stream_ptr has %zd items, not n_procs + 1 "
                     "(n_procs = %zd)", l[13], n_procs);
        goto fail;
    }
    if (l[15] < 1) {
        PyErr_SetString(PyExc_ValueError, "lumos._kernels.simulate: rank_streams_ptr is empty (it needs a leading 0)");
        goto fail;
    }
    if (check_views(&vs, n_read, names, "simulate") < 0 ||
        check_range(g.proc, n, 0, n_procs, "proc") < 0 || check_range(g.out_dst, g.n_edges, 0, n, "out_dst") < 0 ||
        check_ptr(g.out_ptr, n + 1, g.n_edges, "simulate", "out_ptr") < 0 ||
        check_range(g.indeg0, n, 0, (int64_t)g.n_edges + 1, "indeg") < 0 ||
        check_waits(g.wait_kind, g.wait_target, n, n_procs, "simulate") < 0 ||
        check_range(g.stream_ops, l[14], 0, n, "stream_ops") < 0 ||
        check_ptr(g.stream_ptr, l[13], l[14], "simulate", "stream_ptr") < 0 ||
        check_ptr(g.rank_streams_ptr, l[15], l[16], "simulate", "rank_streams_ptr") < 0 ||
        check_range(g.rank_streams, l[16], -1, n_procs, "rank_streams") < 0 ||
        check_range(g.rank_index, l[17], -1, l[15] - 1, "rank_index") < 0)
        goto fail;
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
