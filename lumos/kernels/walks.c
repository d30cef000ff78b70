/* Walks over a graph's arrays: the longest path (the replay benchmark's yardstick), the critical
   path back from the last op, and the call tree of one thread. */

#include "kernels.h"

/* ---- the longest path in topological order (lumos/sim/compiled.py `longest_path_bound`) ---- */

const char longest_path_doc[] =
"longest_path(n, dur, release, floor, out_ptr, out_dst, out_lag, indeg0, finish, earliest, indeg, queue)\n\n"
"compiled.py's `_longest_path`: each task's longest-path finish into `finish` (NaN on a cycle).";

PyObject *py_longest_path(PyObject *self, PyObject *args)
{
    PyObject *o[12];
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "nOOOOOOOOOOO", &n, &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9],
                          &o[10], &o[11]))
        return NULL;
    Views vs = {.n = 0};
    Py_ssize_t l[12];
    ARR(dur, const double, o[1], F64, 0, &l[1]);
    ARR(rel, const double, o[2], F64, 0, &l[2]);
    ARR(floor_, const double, o[3], F64, 0, &l[3]);
    ARR(out_ptr, const int64_t, o[4], I64, 0, &l[4]);
    ARR(out_dst, const int64_t, o[5], I64, 0, &l[5]);
    ARR(out_lag, const double, o[6], F64, 0, &l[6]);
    ARR(indeg0, const int64_t, o[7], I64, 0, &l[7]);
    ARR(finish, double, o[8], F64, 1, &l[8]);
    ARR(earliest, double, o[9], F64, 1, &l[9]);
    ARR(indeg, int32_t, o[10], I32, 1, &l[10]);
    ARR(queue, int64_t, o[11], I64, 1, &l[11]);
    if (l[1] != n || l[2] != n || l[3] != n || l[4] != n + 1 || l[6] != l[5] || l[7] != n || l[8] != n ||
        l[9] != n || l[10] != n || l[11] != n || check_index(out_dst, l[5], 0, n, "out_dst") < 0 ||
        check_index(out_ptr, n + 1, 0, l[5] + 1, "out_ptr") < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "lumos._kernels.longest_path: array shapes do not match");
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t v = 0; v < n; v++) {
        double r = rel[v];
        earliest[v] = isfinite(r) ? r : -INFINITY;
        indeg[v] = (int32_t)indeg0[v];
        finish[v] = NAN;
    }
    Py_ssize_t tail = 0, head = 0;
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

PyObject *py_walk(PyObject *self, PyObject *args)
{
    PyObject *o[17];
    Py_ssize_t v0;
    double tol;
    if (!PyArg_ParseTuple(args, "nOOOOOOOOOOOOOdO", &v0, &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8],
                          &o[9], &o[10], &o[11], &o[12], &o[13], &tol, &o[15]))
        return NULL;
    Views vs = {.n = 0};
    Py_ssize_t n, l[17];
    ARR(start, const double, o[1], F64, 0, &n);
    ARR(end, const double, o[2], F64, 0, &l[2]);
    ARR(in_ptr, const int64_t, o[3], I64, 0, &l[3]);
    ARR(in_src, const int64_t, o[4], I64, 0, &l[4]);
    ARR(in_lag, const double, o[5], F64, 0, &l[5]);
    ARR(prev_on_proc, const int64_t, o[6], I64, 0, &l[6]);
    ARR(wait_kind, const int64_t, o[7], I64, 0, &l[7]);
    ARR(wait_target, const int64_t, o[8], I64, 0, &l[8]);
    ARR(s_ptr, const int64_t, o[9], I64, 0, &l[9]);
    ARR(s_ops, const int64_t, o[10], I64, 0, &l[10]);
    ARR(s_end, const double, o[11], F64, 0, &l[11]);
    ARR(r_ptr, const int64_t, o[12], I64, 0, &l[12]);
    ARR(r_procs, const int64_t, o[13], I64, 0, &l[13]);
    ARR(path, int64_t, o[15], I64, 1, &l[15]);
    if (l[2] != n || l[3] != n + 1 || l[5] != l[4] || l[6] != n || l[7] != n || l[8] != n || l[11] != l[10] ||
        l[15] < n || v0 < 0 || v0 >= n || check_index(in_src, l[4], 0, n, "in_src") < 0 ||
        check_index(in_ptr, n + 1, 0, l[4] + 1, "in_ptr") < 0 ||
        check_index(prev_on_proc, n, -1, n, "prev_on_proc") < 0 ||
        check_index(s_ops, l[10], 0, n, "s_ops") < 0 || check_index(s_ptr, l[9], 0, l[10] + 1, "s_ptr") < 0 ||
        check_index(r_procs, l[13], 0, l[9] > 0 ? l[9] - 1 : 0, "r_procs") < 0 ||
        check_index(r_ptr, l[12], 0, l[13] + 1, "r_ptr") < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "lumos._kernels.walk: array shapes do not match");
        goto fail;
    }
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
        PyErr_SetString(PyExc_ValueError, "lumos._kernels.leaf_walk: arrays differ in length");
        goto fail;
    }
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
