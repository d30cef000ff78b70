/* The trace scanner (lumos/trace/scan.py `_scan`, `_classify`, `_gather`): bytes -> where each
   needed field of each "ph": "X" event lies, its token type, and plain integers read. */

#include "json.h"

#define LOC(row, f, k) loc[((row) * ks->n_fields + (f)) * 2 + (k)]
#if defined(__GNUC__)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define UNLIKELY(x) (x)
#endif

static Py_ssize_t args_members(const uint8_t *b, Py_ssize_t i, Py_ssize_t n, Py_ssize_t row, int64_t *loc,
                               uint8_t *stack, const Keys *ks)
{
    for (int64_t f = ks->n_event; f < ks->n_fields; f++)   /* a repeated "args" replaces the earlier one */
        LOC(row, f, 0) = -1;
    i = skip_ws(b, i + 1, n);
    if (i < n && b[i] == 125)
        return i + 1;
    for (;;) {
        i = skip_ws(b, i, n);
        if (i >= n)
            return -1;
        Py_ssize_t klo, khi;
        Py_ssize_t j = member_key(b, i, n, &klo, &khi);
        if (j < 0)
            return -1;
        Py_ssize_t e = value_end(b, j, n, stack);
        if (e < 0)
            return -1;
        int64_t k = key_id(b, klo, khi, ks->arg_table, ks->arg_width, ks->arg_lens, ks->arg_keys);
        if (k >= 0) {
            LOC(row, ks->n_event + k, 0) = j;
            LOC(row, ks->n_event + k, 1) = e;
        }
        int more;
        i = after_member(b, e, n, &more);
        if (more <= 0)
            return more == 0 ? i : -1;
    }
}

/* The wanted members of the event object at i: its end (-1 if invalid or unsure), whether it is
   "ph": "X", and whether its args are usable. */
static Py_ssize_t event_members(const uint8_t *b, Py_ssize_t i, Py_ssize_t n, Py_ssize_t row, int64_t *loc,
                                uint8_t *stack, const Keys *ks, int *ph_x, int *args_ok)
{
    for (int64_t f = 0; f < ks->n_fields; f++)
        LOC(row, f, 0) = -1;
    *ph_x = 0;
    *args_ok = 1;
    i = skip_ws(b, i + 1, n);
    if (i < n && b[i] == 125)
        return i + 1;
    for (;;) {
        i = skip_ws(b, i, n);
        if (i >= n)
            goto bad;
        Py_ssize_t klo, khi;
        Py_ssize_t j = member_key(b, i, n, &klo, &khi);
        if (j < 0)
            goto bad;
        int64_t k = key_id(b, klo, khi, ks->ev_table, ks->ev_width, ks->ev_lens, ks->ev_keys);
        int64_t kid = k >= 0 ? ks->ev_ids[k] : -1;
        Py_ssize_t e;
        if (kid == ks->k_args && b[j] == 123) {
            e = args_members(b, j, n, row, loc, stack, ks);
            *args_ok = 1;
        } else {
            e = value_end(b, j, n, stack);
            if (kid >= 0) {
                LOC(row, kid, 0) = j;
                LOC(row, kid, 1) = e;
            } else if (kid == ks->k_ph && e >= 0) {
                *ph_x = e - j == 3 && b[j] == 34 && b[j + 1] == 88;
                if (b[j] == 34 && !*ph_x)
                    for (Py_ssize_t p = j + 1; p < e - 1; p++)
                        if (b[p] == 92)   /* an escaped "ph" might read X */
                            goto bad;
            } else if (kid == ks->k_args) {   /* not an object: null is no args, anything else unusual */
                for (int64_t f = ks->n_event; f < ks->n_fields; f++)
                    LOC(row, f, 0) = -1;
                *args_ok = e - j == 4 && b[j] == 110;
            }
        }
        if (e < 0)
            goto bad;
        int more;
        i = after_member(b, e, n, &more);
        if (more < 0)
            goto bad;
        if (more == 0)
            return i;
    }
bad:
    *ph_x = 0;
    *args_ok = 0;
    return -1;
}

/* A key table of `keys` rows of *width bytes (NUL-padded), each key's length within its row. */
static int key_table_ok(const int64_t *lens, Py_ssize_t keys, Py_ssize_t table_len, Py_ssize_t *width,
                        const char *table_name, const char *lens_name)
{
    *width = keys ? table_len / keys : 0;
    if (keys && table_len % keys) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.scan: %s holds %zd bytes, not %zd rows of one width (%s)",
                     table_name, table_len, keys, lens_name);
        return -1;
    }
    for (Py_ssize_t k = 0; k < keys; k++)
        if (lens[k] < 0 || lens[k] > *width) {
            PyErr_Format(PyExc_ValueError, "lumos._kernels.scan: %s[%zd] = %lld outside 0 to the width of %s's "
                         "rows (%zd)", lens_name, k, (long long)lens[k], table_name, *width);
            return -1;
        }
    return 0;
}

static int keys_from(Views *vs, Keys *ks, PyObject *ev_table, PyObject *ev_lens, PyObject *ev_ids,
                     PyObject *arg_table, PyObject *arg_lens, PyObject *trace_key, long long n_fields,
                     long long n_event, long long k_ph, long long k_args)
{
    Py_ssize_t a, c, n_ids;
    if (!(ks->ev_table = arr(vs, ev_table, U8, 0, &a, "ev_table")) ||
        !(ks->ev_lens = arr(vs, ev_lens, I64, 0, &ks->ev_keys, "ev_lens")) ||
        !(ks->ev_ids = arr(vs, ev_ids, I64, 0, &n_ids, "ev_ids")) ||
        !(ks->arg_table = arr(vs, arg_table, U8, 0, &c, "arg_table")) ||
        !(ks->arg_lens = arr(vs, arg_lens, I64, 0, &ks->arg_keys, "arg_lens")) ||
        !(ks->trace_key = arr(vs, trace_key, U8, 0, &ks->trace_len, "trace_key")))
        return -1;
    /* every write the scan makes is LOC(row, f) with f an event field id of ev_ids (< n_event) or
       n_event + an args key (< n_fields), and every key compared lies in its table's row */
    if (n_event < 0 || n_fields < n_event) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.scan: n_event = %lld and n_fields = %lld: need "
                     "0 <= n_event <= n_fields", n_event, n_fields);
        return -1;
    }
    if (k_ph >= 0 || k_args >= 0 || k_ph == k_args) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.scan: k_ph = %lld and k_args = %lld: need two different "
                     "negative ids", k_ph, k_args);
        return -1;
    }
    if (n_ids != ks->ev_keys) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.scan: ev_ids holds %zd ids for the %zd keys of ev_lens", n_ids,
                     ks->ev_keys);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n_ids; k++) {
        int64_t id = ks->ev_ids[k];
        if (!((0 <= id && id < n_event) || id == k_ph || id == k_args)) {
            PyErr_Format(PyExc_ValueError, "lumos._kernels.scan: ev_ids[%zd] = %lld is neither an event field "
                         "(0 to n_event - 1 = %lld) nor k_ph or k_args", k, (long long)id, n_event - 1);
            return -1;
        }
    }
    if (ks->arg_keys > n_fields - n_event) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.scan: arg_lens holds %zd keys, more than the "
                     "n_fields - n_event = %lld args fields", ks->arg_keys, n_fields - n_event);
        return -1;
    }
    if (key_table_ok(ks->ev_lens, ks->ev_keys, a, &ks->ev_width, "ev_table", "ev_lens") < 0 ||
        key_table_ok(ks->arg_lens, ks->arg_keys, c, &ks->arg_width, "arg_table", "arg_lens") < 0)
        return -1;
    ks->n_fields = n_fields;
    ks->n_event = n_event;
    ks->k_ph = k_ph;
    ks->k_args = k_args;
    return 0;
}

#define FULL (-2)

/* The events of the traceEvents array from i (at an element: after its '[' or a ','): the index
   after its ']', -1 if invalid or unsure, or FULL when a "ph": "X" event finds the table's cap rows
   taken (*at: where that event starts, for the scan to go on from there with a larger table). */
static Py_ssize_t events_from(const uint8_t *b, Py_ssize_t i, Py_ssize_t n, Py_ssize_t cap, int64_t *loc,
                              uint8_t *args_ok, const Keys *ks, uint8_t *stack, Py_ssize_t *rows, Py_ssize_t *at)
{
    for (;;) {
        i = skip_ws(b, i, n);
        if (i >= n)
            return -1;
        Py_ssize_t e;
        if (b[i] == 123) {
            int ph_x, aok;
            e = event_members(b, i, n, *rows, loc, stack, ks, &ph_x, &aok);   /* row *rows <= cap: loc's spare */
            if (ph_x && e >= 0) {
                if (*rows >= cap) {
                    *at = i;
                    return FULL;
                }
                args_ok[*rows] = (uint8_t)aok;
                (*rows)++;
            }
        } else {
            e = value_end(b, i, n, stack);
        }
        if (e < 0)
            return -1;
        i = skip_ws(b, e, n);
        if (i < n && b[i] == 44)
            i++;
        else if (i < n && b[i] == 93)
            return i + 1;
        else
            return -1;
    }
}

/* The scan itself (scan.py `_scan`): 1 ok, 0 not ok, FULL (the table is full: *at says where to go on
   from); *rows, *lo, *hi as there. Where start >= 0 it goes on from there, inside the traceEvents
   array that starts at *lo, with *rows rows taken. */
static int scan_doc(const uint8_t *b, Py_ssize_t n, Py_ssize_t cap, int64_t *loc, uint8_t *args_ok, const Keys *ks,
                    Py_ssize_t start, Py_ssize_t *rows_io, Py_ssize_t *lo_io, Py_ssize_t *hi_out, Py_ssize_t *at)
{
    uint8_t stack[MAX_DEPTH];
    Py_ssize_t rows = *rows_io, lo = *lo_io, hi = -1, i, e;
    int ok = 0, more = 1;
    if (start >= 0) {   /* back in the events, with a larger table */
        e = events_from(b, start, n, cap, loc, args_ok, ks, stack, &rows, at);
        if (e == FULL) {
            ok = FULL;
            goto out;
        }
        if (e < 0)
            goto out;
        hi = e;
        i = after_member(b, e, n, &more);
        if (more < 0)
            goto out;
    } else {
        rows = 0;
        lo = -1;
        i = skip_ws(b, 0, n);
        if (i >= n || b[i] != 123)
            goto out;
        i = skip_ws(b, i + 1, n);
        if (i < n && b[i] == 125) {
            i++;
            more = 0;
        }
    }
    while (more == 1) {   /* members of the top-level object */
        i = skip_ws(b, i, n);
        if (i >= n)
            goto out;
        Py_ssize_t klo, khi;
        Py_ssize_t j = member_key(b, i, n, &klo, &khi);
        if (j < 0)
            goto out;
        int trace = khi - klo == ks->trace_len && memcmp(b + klo, ks->trace_key, (size_t)ks->trace_len) == 0;
        if (!trace) {
            e = value_end(b, j, n, stack);
        } else {
            if (lo >= 0 || b[j] != 91)   /* repeated, or not a list: the plain path says so */
                goto out;
            lo = j;
            i = skip_ws(b, j + 1, n);
            if (i < n && b[i] == 93) {
                e = i + 1;
            } else {
                e = events_from(b, i, n, cap, loc, args_ok, ks, stack, &rows, at);
                if (e == FULL) {
                    ok = FULL;
                    goto out;
                }
            }
            hi = e;
        }
        if (e < 0)
            goto out;
        i = after_member(b, e, n, &more);
        if (more < 0)
            goto out;
    }
    if (skip_ws(b, i, n) != n || lo < 0)
        goto out;
    ok = 1;
out:
    *rows_io = ok ? rows : 0;
    *lo_io = lo;
    *hi_out = hi;
    return ok;
}

const char scan_doc_str[] =
"scan(buf, cap, loc, args_ok, ev_table, ev_lens, ev_ids, arg_table, arg_lens, trace_key, n_fields, n_event,\n"
"     k_ph, k_args, start=-1, rows=0, lo=-1) -> (ok, rows, lo, hi, at)\n\n"
"scan.py's `_scan` into the caller's `loc` (cap + 1, n_fields, 2) int64 and `args_ok` (cap,) bool. Where a\n"
"\"ph\": \"X\" event finds all cap rows taken, ok is False and `at` >= 0 says where that event starts: call\n"
"again with larger tables (the rows so far copied in) and start=at, rows=rows, lo=lo to go on from\n"
"there (`at` is -1 otherwise).";

PyObject *py_scan(PyObject *self, PyObject *args)
{
    PyObject *buf_o, *loc_o, *ok_o, *evt, *evl, *evi, *agt, *agl, *trk;
    Py_ssize_t cap, start = -1, rows = 0, lo = -1;
    long long n_fields, n_event, k_ph, k_args;
    if (!PyArg_ParseTuple(args, "OnOOOOOOOOLLLL|nnn", &buf_o, &cap, &loc_o, &ok_o, &evt, &evl, &evi, &agt, &agl,
                          &trk, &n_fields, &n_event, &k_ph, &k_args, &start, &rows, &lo))
        return NULL;
    Views vs = {.n = 0};
    Keys ks;
    Py_ssize_t n, loc_len, ok_len;
    ARR(b, const uint8_t, buf_o, U8, 0, &n);
    ARR(loc, int64_t, loc_o, I64, 1, &loc_len);
    ARR(args_ok, uint8_t, ok_o, BOOL, 1, &ok_len);
    if (keys_from(&vs, &ks, evt, evl, evi, agt, agl, trk, n_fields, n_event, k_ph, k_args) < 0)
        goto fail;
    if (cap < 0) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.scan: cap = %zd is negative", cap);
        goto fail;
    }
    if (n_fields > 0 && loc_len / 2 / n_fields <= cap) {   /* (cap + 1) rows, without overflow */
        PyErr_Format(PyExc_ValueError, "lumos._kernels.scan: loc holds %zd int64, fewer than (cap + 1) * n_fields * 2 "
                     "for cap = %zd", loc_len, cap);
        goto fail;
    }
    if (ok_len < cap) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.scan: args_ok holds %zd, fewer than cap = %zd", ok_len, cap);
        goto fail;
    }
    if (start >= 0 && !(0 <= lo && lo < start && start <= n && 0 <= rows && rows <= cap)) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.scan: start = %zd, rows = %zd, lo = %zd: going on needs "
                     "0 <= lo < start <= len(buf) and 0 <= rows <= cap", start, rows, lo);
        goto fail;
    }
    Py_ssize_t hi, at = -1;
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = scan_doc(b, n, cap, loc, args_ok, &ks, start, &rows, &lo, &hi, &at);
    Py_END_ALLOW_THREADS
    release(&vs);
    return Py_BuildValue("Onnnn", ok == 1 ? Py_True : Py_False, rows, lo, hi, ok == FULL ? at : (Py_ssize_t)-1);
fail:
    release(&vs);
    return NULL;
}

const char classify_doc[] =
"classify(buf, loc, rows, typ, iv, i_first)\n\n"
"scan.py's `_classify`: token type of every recorded value into `typ` (rows, n_fields) int8, the\n"
"value of plain integers of fields i_first .. i_first + n_int - 1 into `iv` (rows, n_int) int64.";

PyObject *py_classify(PyObject *self, PyObject *args)
{
    PyObject *buf_o, *loc_o, *typ_o, *iv_o;
    Py_ssize_t rows, i_first;
    if (!PyArg_ParseTuple(args, "OOnOOn", &buf_o, &loc_o, &rows, &typ_o, &iv_o, &i_first))
        return NULL;
    Views vs = {.n = 0};
    Py_ssize_t n, loc_len, typ_len, iv_len;
    ARR(b, const uint8_t, buf_o, U8, 0, &n);
    ARR(loc, const int64_t, loc_o, I64, 0, &loc_len);
    ARR(typ, int8_t, typ_o, I8, 1, &typ_len);
    ARR(iv, int64_t, iv_o, I64, 1, &iv_len);
    if (rows < 0) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.classify: rows = %zd is negative", rows);
        goto fail;
    }
    if (rows == 0) {
        release(&vs);
        Py_RETURN_NONE;
    }
    Py_ssize_t n_fields = typ_len / rows, n_int = iv_len / rows;
    if (typ_len != rows * n_fields || iv_len != rows * n_int || loc_len < rows * n_fields * 2 || i_first < 0 ||
        i_first + n_int > n_fields) {
        PyErr_SetString(PyExc_ValueError, "lumos._kernels.classify: array shapes do not match");
        goto fail;
    }
    Py_ssize_t bad = -1;   /* the first span outside the buffer (flat index into loc / 2) */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < rows; r++) {
        for (Py_ssize_t f = 0; f < n_fields; f++) {
            int64_t i = loc[(r * n_fields + f) * 2], e = loc[(r * n_fields + f) * 2 + 1];
            if (i < 0)
                continue;
            if (UNLIKELY(i >= e || e > n)) {   /* not read; said below */
                if (bad < 0)
                    bad = r * n_fields + f;
                continue;
            }
            uint8_t c = b[i];
            int8_t t;
            if (c == 34) {
                t = T_STR;
                for (int64_t p = i + 1; p < e - 1; p++)
                    if (b[p] == 92) {
                        t = T_STR_ESC;
                        break;
                    }
            } else if (c == 45 || (48 <= c && c <= 57)) {
                int plain;
                int64_t v;
                number_end(b, i, e, &plain, &v);
                t = plain ? T_INT : T_NUM;
                if (plain && i_first <= f && f < i_first + n_int)
                    iv[r * n_int + (f - i_first)] = v;
            } else if (c == 116) {
                t = T_TRUE;
            } else if (c == 102) {
                t = T_FALSE;
            } else if (c == 110) {
                t = T_NULL;
            } else if (c == 91) {
                t = T_ARR;
            } else {
                t = T_OBJ;
            }
            typ[r * n_fields + f] = t;
        }
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.classify: loc[%zd, %zd] = (%lld, %lld) is a span outside the "
                     "buffer (%zd bytes)", bad / n_fields, bad % n_fields, (long long)loc[bad * 2],
                     (long long)loc[bad * 2 + 1], n);
        goto fail;
    }
    release(&vs);
    Py_RETURN_NONE;
fail:
    release(&vs);
    return NULL;
}

const char gather_doc[] =
"gather(buf, lo, hi, sep, bracket, out) -> length\n\n"
"scan.py's `_gather`: the spans buf[lo[k]:hi[k]] joined by `sep` (one JSON array if `bracket`)\n"
"into `out` (uint8, at least sum(hi - lo + 1) + 2 long).";

PyObject *py_gather(PyObject *self, PyObject *args)
{
    PyObject *buf_o, *lo_o, *hi_o, *out_o;
    int sep, bracket;
    if (!PyArg_ParseTuple(args, "OOOipO", &buf_o, &lo_o, &hi_o, &sep, &bracket, &out_o))
        return NULL;
    Views vs = {.n = 0};
    Py_ssize_t n, k_lo, k_hi, out_len;
    ARR(b, const uint8_t, buf_o, U8, 0, &n);
    ARR(lo, const int64_t, lo_o, I64, 0, &k_lo);
    ARR(hi, const int64_t, hi_o, I64, 0, &k_hi);
    ARR(out, uint8_t, out_o, U8, 1, &out_len);
    if (k_lo != k_hi) {
        PyErr_SetString(PyExc_ValueError, "lumos._kernels.gather: lo and hi differ in length");
        goto fail;
    }
    if (sep < 0 || sep > 255) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.gather: sep = %d is not a byte (0 to 255)", sep);
        goto fail;
    }
    Py_ssize_t total = 2;
    for (Py_ssize_t k = 0; k < k_lo; k++) {
        if (lo[k] < 0 || hi[k] < lo[k] || hi[k] > n) {
            PyErr_SetString(PyExc_ValueError, "lumos._kernels.gather: a span outside the buffer");
            goto fail;
        }
        if (hi[k] - lo[k] + 1 > PY_SSIZE_T_MAX - total) {
            PyErr_SetString(PyExc_ValueError, "lumos._kernels.gather: the spans add up past the largest size");
            goto fail;
        }
        total += hi[k] - lo[k] + 1;
    }
    if (out_len < total) {
        PyErr_SetString(PyExc_ValueError, "lumos._kernels.gather: out is too short");
        goto fail;
    }
    Py_ssize_t j = 0;
    Py_BEGIN_ALLOW_THREADS
    if (bracket)
        out[j++] = 91;
    for (Py_ssize_t k = 0; k < k_lo; k++) {
        if (k)
            out[j++] = (uint8_t)sep;
        memcpy(out + j, b + lo[k], (size_t)(hi[k] - lo[k]));
        j += hi[k] - lo[k];
    }
    if (bracket)
        out[j++] = 93;
    Py_END_ALLOW_THREADS
    release(&vs);
    return PyLong_FromSsize_t(j);
fail:
    release(&vs);
    return NULL;
}

const char count_byte_doc[] =
"count_byte(buf, byte, limit=-1) -> count\n\n"
"How many times `byte` occurs in `buf` (counting no further than `limit` where it is >= 0): an upper\n"
"bound on the events of a document when it is '{'.";

PyObject *py_count_byte(PyObject *self, PyObject *args)
{
    PyObject *buf_o;
    int byte;
    Py_ssize_t limit = -1;
    if (!PyArg_ParseTuple(args, "Oi|n", &buf_o, &byte, &limit))
        return NULL;
    Views vs = {.n = 0};
    Py_ssize_t n;
    ARR(b, const uint8_t, buf_o, U8, 0, &n);
    if (byte < 0 || byte > 255) {
        PyErr_Format(PyExc_ValueError, "lumos._kernels.count_byte: byte = %d is not a byte (0 to 255)", byte);
        goto fail;
    }
    Py_ssize_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *p = b, *end = b + n;
    /* libc's vectorised search */
    while (count != limit && p < end && (p = memchr(p, byte, (size_t)(end - p))) != NULL) {
        count++;
        p++;
    }
    Py_END_ALLOW_THREADS
    release(&vs);
    return PyLong_FromSsize_t(count);
fail:
    release(&vs);
    return NULL;
}
