/* Walks over a graph's arrays: the longest path (the replay benchmark's yardstick), the critical
   path back from the last op, and the call tree of one thread. */

#include "kernels.h"

/* ---- the longest path in topological order (lumos/sim/compiled.py `longest_path_bound`) ---- */

const char longest_path_doc[] =
"longest_path(n, dur, release, floor, out_ptr, out_dst, out_lag, indeg, finish, earliest, indeg_work, queue)\n\n"
"compiled.py's `_longest_path`: each task's longest-path finish into `finish` (NaN on a cycle).";

PyObject *py_longest_path(PyObject *self, PyObject *args)
{
    static const char *const name[12] = {"n", "dur", "release", "floor", "out_ptr", "out_dst", "out_lag", "indeg",
                                         "finish", "earliest", "indeg_work", "queue"};
    static const signed char kind[12] = {-1, F64, F64, F64, I64, I64, F64, I64, F64, F64, I64, I64};
    PyObject *o[12];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOO:longest_path", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &o[10], &o[11]))
        return NULL;
    Py_ssize_t n;
    if (get_count(o[0], "longest_path", "n", 0, &n) < 0)
        return NULL;
    Views vs = {.n = 0};
    const char *names[12];
    void *data[12] = {NULL};
    Py_ssize_t l[12] = {0};
    for (int k = 1; k < 12; k++) {
        names[vs.n] = name[k];
        if (!(data[k] = arr(&vs, o[k], kind[k], k >= 8, &l[k], name[k])))
            goto fail;
    }
    /* restrict: the outputs share no memory with any argument (check_views) */
    const double *restrict dur = data[1], *restrict rel = data[2], *restrict floor_ = data[3],
                 *restrict out_lag = data[6];
    const int64_t *restrict out_ptr = data[4], *restrict out_dst = data[5], *restrict indeg0 = data[7];
    double *restrict finish = data[8], *restrict earliest = data[9];
    int64_t *restrict indeg = data[10], *restrict queue = data[11];   /* 64-bit in-degrees: never truncated */
    static const int per_task[] = {1, 2, 3, 7, 8, 9, 10, 11};
    for (size_t k = 0; k < sizeof per_task / sizeof *per_task; k++)
        if (l[per_task[k]] != n) {
            PyErr_Format(PyExc_ValueError, "lumos._kernels.longest_path: %s has %zd items, not n = %zd",
                         name[per_task[k]], l[per_task[k]], n);
            goto fail;
        }
    if (l[4] - 1 != n || l[6] != l[5]) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.longest_path: %s has %zd items, not %s = %zd",
                     l[4] - 1 != n ? "out_ptr" : "out_lag", l[4] - 1 != n ? l[4] : l[6],
                     l[4] - 1 != n ? "n + 1" : "len(out_dst)", l[4] - 1 != n ? n + 1 : l[5]);
        goto fail;
    }
    if (check_views(&vs, 7, names, "longest_path") < 0 || check_range(out_dst, l[5], 0, n, "out_dst") < 0 ||
        check_ptr(out_ptr, n + 1, l[5], "longest_path", "out_ptr") < 0)
        goto fail;
    /* the work arrays, and the in-degrees checked in the same pass: in [0, edges] (check_range's test) */
    uint64_t bad = 0;
    for (Py_ssize_t v = 0; v < n; v++) {
        double r = rel[v];
        earliest[v] = isfinite(r) ? r : -INFINITY;
        indeg[v] = indeg0[v];
        bad |= (uint64_t)indeg0[v] | ((uint64_t)l[5] - (uint64_t)indeg0[v]);
        finish[v] = NAN;
    }
    if ((bad >> 63) && check_range(indeg0, n, 0, (int64_t)l[5] + 1, "indeg") < 0)
        goto fail;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t tail = 0, head = 0;   /* a task is queued once: its in-degree reaches 0 once */
    for (Py_ssize_t v = 0; v < n; v++)
        if (indeg[v] == 0)
            queue[tail++] = v;
    while (head < tail) {
        int64_t v = queue[head++];
        double f = pymax(earliest[v] + dur[v], floor_[v]);
        finish[v] = f;
        for (int64_t k = out_ptr[v]; k < out_ptr[v + 1]; k++) {
            int64_t c = out_dst[k];
            double t = f + out_lag[k];
            if (t > earliest[c])
                earliest[c] = t;
            if (--indeg[c] == 0)
                queue[tail++] = c;
        }
    }
    Py_END_ALLOW_THREADS
    release(&vs);
    Py_RETURN_NONE;
fail:
    release(&vs);
    return NULL;
}

/* ---- the critical-path walk (lumos/analysis/critical_walk.py) ---- */

static inline int binds_later(double ready, double end_u, int64_t u, double s, double tol, double best_ready,
                              double best_end, int64_t best)
{
    return fabs(ready - s) <= tol &&
           (ready > best_ready || (ready == best_ready && (end_u > best_end || (end_u == best_end && u > best))));
}

/* numpy's searchsorted(a, key, side="right"): the first index whose value sorts after key (NaN last) */
static Py_ssize_t search_right(const double *a, Py_ssize_t len, double key)
{
    Py_ssize_t lo = 0, hi = len;
    while (lo < hi) {
        Py_ssize_t mid = lo + ((hi - lo) >> 1);
        double m = a[mid];
        int key_lt_mid = key < m || (m != m && key == key);
        if (!key_lt_mid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const char walk_doc[] =
"walk(v, start, end, in_ptr, in_src, in_lag, prev_on_proc, wait_kind, wait_target, s_ptr, s_ops, s_end,\n"
"     r_ptr, r_procs, tol, path) -> length\n\n"
"critical_walk.py's `walk`: the path from v back (latest first) into `path` (n int64).";

/* -1 with a ValueError unless the ends of each stream's ops, s_end[s_ptr[p] : s_ptr[p + 1]], are sorted
   as numpy sorts them (NaN last): the walk's binary search relies on it */
static int check_sorted_ends(const double *s_end, const int64_t *s_ptr, Py_ssize_t n_ptr)
{
    for (Py_ssize_t p = 0; p + 1 < n_ptr; p++)
        for (int64_t k = s_ptr[p]; k + 1 < s_ptr[p + 1]; k++) {
            double a = s_end[k], b = s_end[k + 1];
            if (b < a || (a != a && b == b)) {
                PyErr_Format(PyExc_ValueError, "lumos._kernels.walk: s_end is not sorted (NaN last) within "
                             "stream %zd: s_end[%lld] comes after s_end[%lld]", p, (long long)k, (long long)k + 1);
                return -1;
            }
        }
    return 0;
}

PyObject *py_walk(PyObject *self, PyObject *args)
{
    static const char *const name[16] = {"v", "start", "end", "in_ptr", "in_src", "in_lag", "prev_on_proc",
                                         "wait_kind", "wait_target", "s_ptr", "s_ops", "s_end", "r_ptr",
                                         "r_procs", "tol", "path"};
    static const signed char kind[16] = {-1, F64, F64, I64, I64, F64, I64, I64, I64, I64, I64, F64, I64, I64, -1, I64};
    PyObject *o[16];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOO:walk", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &o[15]))
        return NULL;
    Py_ssize_t v0;
    double tol;
    if (get_count(o[0], "walk", "v", 0, &v0) < 0 || get_real(o[14], "walk", "tol", &tol) < 0)
        return NULL;
    Views vs = {.n = 0};
    const char *names[16];
    void *data[16] = {NULL};
    Py_ssize_t l[16] = {0};
    for (int k = 1; k < 16; k++) {
        if (kind[k] < 0)
            continue;
        names[vs.n] = name[k];
        if (!(data[k] = arr(&vs, o[k], kind[k], k == 15, &l[k], name[k])))
            goto fail;
    }
    const double *start = data[1], *end = data[2], *in_lag = data[5], *s_end = data[11];
    const int64_t *in_ptr = data[3], *in_src = data[4], *prev_on_proc = data[6], *wait_kind = data[7],
                  *wait_target = data[8], *s_ptr = data[9], *s_ops = data[10], *r_ptr = data[12], *r_procs = data[13];
    int64_t *path = data[15];
    const Py_ssize_t n = l[1];
    static const int per_task[] = {2, 6, 7, 8};
    for (size_t k = 0; k < sizeof per_task / sizeof *per_task; k++)
        if (l[per_task[k]] != n) {
            PyErr_Format(PyExc_ValueError, "lumos._kernels.walk: %s has %zd items, not len(start) = %zd",
                         name[per_task[k]], l[per_task[k]], n);
            goto fail;
        }
    if (l[3] - 1 != n || l[5] != l[4] || l[11] != l[10] || l[15] < n) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.walk: %s",
                     l[3] - 1 != n      ? "in_ptr needs len(start) + 1 items"
                     : l[5] != l[4]     ? "in_lag and in_src differ in length"
                     : l[11] != l[10]   ? "s_end and s_ops differ in length"
                                        : "path is shorter than start");
        goto fail;
    }
    if (v0 >= n) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.walk: v = %zd is not a task (there are %zd)", v0, n);
        goto fail;
    }
    if (check_views(&vs, 13, names, "walk") < 0 || check_range(in_src, l[4], 0, n, "in_src") < 0 ||
        check_ptr(in_ptr, n + 1, l[4], "walk", "in_ptr") < 0 ||
        check_range(prev_on_proc, n, -1, n, "prev_on_proc") < 0 ||
        check_waits(wait_kind, wait_target, n, -1, "walk") < 0 ||
        check_range(s_ops, l[10], 0, n, "s_ops") < 0 || check_ptr(s_ptr, l[9], l[10], "walk", "s_ptr") < 0 ||
        check_sorted_ends(s_end, s_ptr, l[9]) < 0 ||
        check_range(r_procs, l[13], 0, l[9] > 0 ? l[9] - 1 : 0, "r_procs") < 0 ||
        check_ptr(r_ptr, l[12], l[13], "walk", "r_ptr") < 0)
        goto fail;
    uint8_t *seen = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!seen) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_ssize_t m = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t v = v0;
    for (;;) {
        path[m++] = v;
        seen[v] = 1;
        double s = start[v];
        int64_t best = -1;
        double best_ready = -INFINITY, best_end = -INFINITY;
        for (int64_t k = in_ptr[v]; k < in_ptr[v + 1]; k++) {
            int64_t u = in_src[k];
            double ready = end[u] + in_lag[k];
            if (binds_later(ready, end[u], u, s, tol, best_ready, best_end, best)) {
                best = u;
                best_ready = ready;
                best_end = end[u];
            }
        }
        int64_t u = prev_on_proc[v];
        if (u >= 0) {
            double ready = end[u];
            if (binds_later(ready, end[u], u, s, tol, best_ready, best_end, best)) {
                best = u;
                best_ready = ready;
                best_end = end[u];
            }
        }
        int64_t wk = wait_kind[v], w = wait_target[v];
        if (wk != 0 && l[10] && w >= 0) {
            int64_t lo_p, hi_p;
            if (wk == 1) {
                lo_p = 0;
                hi_p = w < l[9] - 1 ? 1 : 0;
            } else if (w + 1 < l[12]) {
                lo_p = r_ptr[w];
                hi_p = r_ptr[w + 1];
            } else {
                bad = 1;   /* numba would read past r_ptr here; the reference raises */
                break;
            }
            for (int64_t j = lo_p; j < hi_p; j++) {
                int64_t p = wk == 1 ? w : r_procs[j];
                int64_t a = s_ptr[p], b = s_ptr[p + 1];
                if (a == b)
                    continue;
                Py_ssize_t k = search_right(s_end + a, b - a, s + tol) - 1;
                if (k >= 0) {
                    int64_t uu = s_ops[a + k];
                    double ready = end[uu];
                    if (binds_later(ready, end[uu], uu, s, tol, best_ready, best_end, best)) {
                        best = uu;
                        best_ready = ready;
                        best_end = end[uu];
                    }
                }
            }
        }
        if (best < 0 || seen[best])
            break;
        v = best;
    }
    Py_END_ALLOW_THREADS
    free(seen);
    release(&vs);
    if (bad) {
        PyErr_SetString(PyExc_IndexError, "lumos._kernels.walk: a device wait names a rank with no streams");
        return NULL;
    }
    return PyLong_FromSsize_t(m);
fail:
    release(&vs);
    return NULL;
}

/* ---- the call-tree walk of one thread (lumos/graph/tasks.py `_leaf_walk`) ---- */

const char leaf_walk_doc[] =
"leaf_walk(ts, end, is_runtime, eps, keep)\n\n"
"tasks.py's `_leaf_walk` into `keep` (n bool): a task is a runtime call, or an op that no later event\n"
"starts inside; an event inside a runtime call is folded into it.";

PyObject *py_leaf_walk(PyObject *self, PyObject *args)
{
    PyObject *ts_o, *end_o, *rt_o, *keep_o;
    double eps;
    if (!PyArg_ParseTuple(args, "OOOdO", &ts_o, &end_o, &rt_o, &eps, &keep_o))
        return NULL;
    Views vs = {.n = 0};
    Py_ssize_t n, l2, l3, l4;
    ARR(ts, const double, ts_o, F64, 0, &n);
    ARR(end, const double, end_o, F64, 0, &l2);
    ARR(is_runtime, const uint8_t, rt_o, BOOL, 0, &l3);
    ARR(keep, uint8_t, keep_o, BOOL, 1, &l4);
    if (l2 != n || l3 != n || l4 != n) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.leaf_walk: arrays differ in length: %s has %zd items, not "
                     "len(ts) = %zd",
                     l2 != n ? "end" : l3 != n ? "is_runtime" : "keep", l2 != n ? l2 : l3 != n ? l3 : l4, n);
        goto fail;
    }
    static const char *const names[4] = {"ts", "end", "is_runtime", "keep"};
    if (check_views(&vs, 3, names, "leaf_walk") < 0)
        goto fail;
    double *stack_end = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    Py_ssize_t *stack_idx = malloc((size_t)(n > 0 ? n : 1) * sizeof(Py_ssize_t));
    if (!stack_end || !stack_idx) {
        free(stack_end);
        free(stack_idx);
        PyErr_NoMemory();
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    memset(keep, 0, (size_t)n);
    Py_ssize_t top = 0;
    double inside_runtime = 0.0;   /* end of the runtime call we are inside, if any */
    for (Py_ssize_t k = 0; k < n; k++) {
        while (top > 0 && ts[k] >= stack_end[top - 1] - eps)
            top--;
        if (ts[k] < inside_runtime - eps)
            continue;   /* a driver call inside a runtime call: folded into it */
        if (top > 0) {
            Py_ssize_t parent = stack_idx[top - 1];
            if (!is_runtime[parent])
                keep[parent] = 0;   /* it has a child: not a leaf */
        }
        keep[k] = 1;
        if (is_runtime[k])
            inside_runtime = end[k];
        stack_end[top] = end[k];
        stack_idx[top] = k;
        top++;
    }
    Py_END_ALLOW_THREADS
    free(stack_end);
    free(stack_idx);
    release(&vs);
    Py_RETURN_NONE;
fail:
    release(&vs);
    return NULL;
}
