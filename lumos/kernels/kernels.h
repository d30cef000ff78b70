/* The hot kernels of a `lumos replay` or `lumos predict`, in C, built with the package as the
   extension module `lumos._kernels` (pyproject.toml: [[tool.setuptools.ext-modules]]).

   Why C and not numba: numba cost every process 0.4-0.6 s before its first compiled call
   returned (importing it, then building its compiled-code target and loading the cached machine
   code), more than the work itself on a trace of a few hundred thousand events
   (docs/notes/2026-12-03-startup-against-hta.md, docs/performance.md). A C extension loads in
   microseconds. Each kernel here is the line-by-line twin of a definition in Python that the tests
   hold it to, bit for bit:

     scan, classify, gather  scan.c      lumos/trace/scan.py (the plain path: orjson + parse_document)
     count_byte              scan.c      bytes.count
     numbers, interned       decode.c    lumos/trace/scanned.py (_numbers_twin, _interned_twin)
     simulate                simulate.c  lumos/sim/compiled.py (lumos/sim/reference.py)
     longest_path            walks.c     lumos/sim/compiled.py (the benchmark's yardstick)
     walk                    walks.c     lumos/analysis/critical_walk.py (critical_path_reference)
     leaf_walk               walks.c     lumos/graph/tasks.py (_leaf_walk, the same body in Python)

   Arrays come in through the buffer protocol (numpy allocates every output; no numpy headers are
   needed to build these files), each checked for its item format and its length before a kernel
   reads it. No kernel touches a Python object while it runs, so each releases the GIL. */

#ifndef LUMOS_KERNELS_H
#define LUMOS_KERNELS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- arrays through the buffer protocol (buffers.c) ---- */

enum { F64, I64, I32, I8, U8, BOOL };

typedef struct {
    Py_buffer v[40];
    int n;
} Views;

/* A C-contiguous view of `o` with items of `kind` held in `vs`; its data, or NULL with an exception set. */
void *arr(Views *vs, PyObject *o, int kind, int writable, Py_ssize_t *len, const char *what);
void release(Views *vs);
/* -1 with a ValueError naming `what` unless every a[k] lies in [lo, hi) */
int check_index(const int64_t *a, Py_ssize_t len, int64_t lo, int64_t hi, const char *what);

/* ---- argument checks of the graph kernels (simulate.c; walks.c uses them too): each -1 with a
   TypeError or ValueError naming `fn`'s argument `what`, else 0 ---- */
/* an integer (Python int or index) in [lo, PY_SSIZE_T_MAX] into *out */
int get_count(PyObject *o, const char *fn, const char *what, Py_ssize_t lo, Py_ssize_t *out);
/* a real number into *out */
int get_real(PyObject *o, const char *fn, const char *what, double *out);
/* check_index's check and message, after a branch-free pass over the items (check_index runs only
   where that pass saw something); lo 0 or -1, hi >= 0 */
int check_range(const int64_t *a, Py_ssize_t len, int64_t lo, int64_t hi, const char *what);
/* a CSR pointer array: non-decreasing, every value in [0, hi] */
int check_ptr(const int64_t *a, Py_ssize_t len, int64_t hi, const char *fn, const char *what);
/* wait kinds 0, 1 (stream) or 2 (device); a waiting task's target -1 or a stream in [0, n_streams)
   (kind 1; n_streams < 0: not checked) or a rank >= 0 (kind 2) */
int check_waits(const int64_t *kind, const int64_t *target, Py_ssize_t n, int64_t n_streams, const char *fn);
/* every view one-dimensional, and none from vs->v[n_read] on (the outputs) overlapping any other;
   names[i] names view i */
int check_views(const Views *vs, int n_read, const char *const *names, const char *fn);

#define ARR(var, type, obj, kind, writable, lenp)                                                   \
    type *var = (type *)arr(&vs, obj, kind, writable, lenp, #var);                                 \
    if (!var)                                                                                       \
        goto fail;

static inline double pymax(double a, double b) { return b > a ? b : a; }   /* Python's max(a, b) */

/* ---- the module's functions ---- */

PyObject *py_scan(PyObject *self, PyObject *args);
PyObject *py_classify(PyObject *self, PyObject *args);
PyObject *py_gather(PyObject *self, PyObject *args);
PyObject *py_count_byte(PyObject *self, PyObject *args);
PyObject *py_numbers(PyObject *self, PyObject *args);
PyObject *py_interned(PyObject *self, PyObject *args);
PyObject *py_simulate(PyObject *self, PyObject *args);
PyObject *py_longest_path(PyObject *self, PyObject *args);
PyObject *py_walk(PyObject *self, PyObject *args);
PyObject *py_leaf_walk(PyObject *self, PyObject *args);
extern const char scan_doc_str[], classify_doc[], gather_doc[], count_byte_doc[], simulate_doc[], longest_path_doc[], walk_doc[],
    leaf_walk_doc[], numbers_doc[], interned_doc[];

#endif
