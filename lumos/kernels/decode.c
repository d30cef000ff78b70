/* The column decoding after the scan (lumos/trace/scanned.py `_numbers`, `_interned`): JSON numbers
   straight into float64, and each distinct string of a field found once (a hash table of the raw
   bytes), so that Python decodes a few hundred names instead of one per event. */

#include "json.h"

#if defined(__GLIBC__)
#include <locale.h>
#define HAVE_STRTOD_L 1
static locale_t c_locale;   /* strtod in the "C" locale whatever the process set (made with the GIL held) */
#endif

/* Rows are read in order but far apart (a row of loc is n_fields * 16 bytes, its values lie anywhere in
   the document): fetching a row's span AHEAD rows early, and its loc twice that, hides the misses
   that made a cold pass three times slower than a warm one. */
#if defined(__GNUC__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif
#define AHEAD 16
#define PREFETCH_ROWS(k)                                                                            \
    do {                                                                                            \
        if ((k) + 2 * AHEAD < k_at)                                                                 \
            PREFETCH(&loc[(at[(k) + 2 * AHEAD] * n_fields + field) * 2]);                          \
        if ((k) + AHEAD < k_at)                                                                     \
            PREFETCH(b + loc[(at[(k) + AHEAD] * n_fields + field) * 2]);                            \
    } while (0)

/* The scan's location of `field` in row r: its span [*i, *e) in the buffer and its JSON type
   (loc: (rows, n_fields, 2) spans, typ: (rows, n_fields) types, flat). */
static inline int8_t field_span(const int64_t *loc, const int8_t *typ, int64_t r, Py_ssize_t n_fields,
                                Py_ssize_t field, int64_t *i, int64_t *e)
{
    *i = loc[(r * n_fields + field) * 2];
    *e = loc[(r * n_fields + field) * 2 + 1];
    return typ[r * n_fields + field];
}

/* Whether loc/typ of these lengths hold whole rows of n_fields fields, `field` among them. */
static inline int field_layout_ok(Py_ssize_t n_fields, Py_ssize_t field, Py_ssize_t typ_len, Py_ssize_t loc_len)
{
    return n_fields > 0 && typ_len % n_fields == 0 && loc_len >= typ_len * 2 && 0 <= field && field < n_fields;
}

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The digits from b[p] on, into the significand *w: at most 19 of them after its leading zeros
   (*nd counts them; *many is set when more follow). Returns where the digits end. */
static int64_t significand_digits(const uint8_t *b, int64_t p, int64_t e, uint64_t *w, int *nd, int *many)
{
    for (; p < e && 48 <= b[p] && b[p] <= 57; p++) {
        if (*w || b[p] != 48) {
            if (*nd < 19) {
                *w = *w * 10 + (uint64_t)(b[p] - 48);
                (*nd)++;
            } else {
                *many = 1;
            }
        }
    }
    return p;
}

/* The double of the JSON number b[i:e] (validated by the scanner, `number_end`), as orjson reads it
   (correctly rounded); NaN, which no JSON number is, where it is left to orjson. A plain integer
   (T_INT: at most 18 digits) is read as an integer first, as orjson does ("-0" is 0.0). */
static double number_value(const uint8_t *b, int64_t i, int64_t e, int plain_int)
{
    int neg = b[i] == 45;
    int64_t p = i + neg;
    if (plain_int && 0 < e - p && e - p <= 18) {   /* more digits than int64 holds go the general way */
        uint64_t v = 0;   /* unsigned: no overflow whatever the bytes of a span a caller calls T_INT */
        for (; p < e; p++)
            v = v * 10 + (uint64_t)(b[p] - 48);
        return (double)(int64_t)(neg ? 0 - v : v);   /* "-0" is 0.0 */
    }
    /* the exact fast path (Clinger): a significand of at most 2^53 times or over 10^k, k <= 22, is one
       correctly rounded operation on two exact doubles */
    uint64_t w = 0;
    int nd = 0, many = 0;
    int64_t e10 = 0;
    p = significand_digits(b, p, e, &w, &nd, &many);
    if (p == i + neg)   /* no digit */
        return NAN;
    if (p < e && b[p] == 46) {
        int64_t q = significand_digits(b, p + 1, e, &w, &nd, &many);
        e10 -= q - (p + 1);   /* each fraction digit scales the significand by 10 */
        p = q;
    }
    if (p < e && (b[p] == 101 || b[p] == 69)) {
        p++;
        int eneg = p < e && b[p] == 45;
        if (p < e && (b[p] == 43 || b[p] == 45))
            p++;
        if (p >= e)   /* an exponent without digits */
            return NAN;
        int64_t x = 0;
        for (; p < e && 48 <= b[p] && b[p] <= 57; p++)
            if (x < 100000)
                x = x * 10 + (b[p] - 48);
        e10 += eneg ? -x : x;
    }
    if (p != e)   /* not one JSON number (the scanner's spans always are) */
        return NAN;
    if (!many && w <= ((uint64_t)1 << 53)) {
        double d = (double)w;
        if (w == 0)
            return neg ? -0.0 : 0.0;
        if (0 <= e10 && e10 <= 22)
            return neg ? -(d * POW10[e10]) : d * POW10[e10];
        if (-22 <= e10 && e10 < 0)
            return neg ? -(d / POW10[-e10]) : d / POW10[-e10];
    }
#ifdef HAVE_STRTOD_L
    char tmp[512];   /* the rest: glibc's strtod, correctly rounded too, on a NUL-terminated copy */
    if (c_locale && e - i < (int64_t)sizeof tmp) {
        memcpy(tmp, b + i, (size_t)(e - i));
        tmp[e - i] = 0;
        char *end;
        double d = strtod_l(tmp, &end, c_locale);
        if (end == tmp + (e - i))
            return d;
    }
#endif
    return NAN;
}

const char numbers_doc[] =
"numbers(buf, loc, typ, n_fields, field, at, out) -> left\n\n"
"scanned.py's `_numbers`: out[k] = the JSON number of field `field` of row at[k] (loc: at least\n"
"(rows, n_fields, 2) int64 spans; typ: (rows, n_fields) int8 types), NaN where it is not T_INT or\n"
"T_NUM or is left to orjson; returns how many are NaN.";

PyObject *py_numbers(PyObject *self, PyObject *args)
{
    PyObject *buf_o, *loc_o, *typ_o, *at_o, *out_o;
    Py_ssize_t n_fields, field;
    if (!PyArg_ParseTuple(args, "OOOnnOO", &buf_o, &loc_o, &typ_o, &n_fields, &field, &at_o, &out_o))
        return NULL;
    Views vs = {.n = 0};
    Py_ssize_t n, loc_len, typ_len, k_at, out_len;
    ARR(b, const uint8_t, buf_o, U8, 0, &n);
    ARR(loc, const int64_t, loc_o, I64, 0, &loc_len);
    ARR(typ, const int8_t, typ_o, I8, 0, &typ_len);
    ARR(at, const int64_t, at_o, I64, 0, &k_at);
    ARR(out, double, out_o, F64, 1, &out_len);
    Py_ssize_t rows = n_fields > 0 ? typ_len / n_fields : 0;
    if (!field_layout_ok(n_fields, field, typ_len, loc_len) ||
        out_len != k_at) {
        PyErr_SetString(PyExc_ValueError, "lumos._kernels.numbers: array shapes do not match");
        goto fail;
    }
    if (check_index(at, k_at, 0, rows, "at") < 0)
        goto fail;
#ifdef HAVE_STRTOD_L
    if (!c_locale)
        c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
#endif
    Py_ssize_t left = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < k_at; k++) {
        PREFETCH_ROWS(k);
        int64_t r = at[k], i, e;
        int8_t t = field_span(loc, typ, r, n_fields, field, &i, &e);
        double v = NAN;
        if ((t == T_INT || t == T_NUM) && 0 <= i && i < e && e <= n)
            v = number_value(b, i, e, t == T_INT);
        left += v != v;
        out[k] = v;
    }
    Py_END_ALLOW_THREADS
    release(&vs);
    return PyLong_FromSsize_t(left);
fail:
    release(&vs);
    return NULL;
}

/* The interner's hashes. First a fast one (fixed, unkeyed, invertible: names can be built to fall in one
   slot of it, which made interning quadratic); where a lookup passes over more than
   PROBE_LIMIT taken slots, the table is built again under SipHash-1-3 (as CPython's str hash) with a
   key drawn once per process from os.urandom, under which no set of names can be built to collide,
   and the rest of the column is looked up under it: linear time whatever the names, at no cost to
   ordinary ones. Which code a string gets depends on neither hash: codes are given in order of first
   appearance. */
#define PROBE_LIMIT 64

static inline uint64_t fast_hash(const uint8_t *p, int64_t len)
{
    uint64_t h = 0x9E3779B97F4A7C15u ^ (uint64_t)len;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9u;
        h ^= h >> 31;
    }
    uint64_t w = 0;
    for (int64_t k = 0; k < len; k++)
        w |= (uint64_t)p[k] << (8 * k);
    h = (h ^ w) * 0x94D049BB133111EBu;
    return h ^ (h >> 29);
}

static uint64_t sip_k0, sip_k1;
static int sip_keyed;

#define ROTL(x, r) (((x) << (r)) | ((x) >> (64 - (r))))
#define SIPROUND                                                                                    \
    do {                                                                                            \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                                   \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                      \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                      \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                                   \
    } while (0)

static inline uint64_t keyed_hash(const uint8_t *p, int64_t len)
{
    uint64_t v0 = sip_k0 ^ 0x736f6d6570736575u, v1 = sip_k1 ^ 0x646f72616e646f6du;
    uint64_t v2 = sip_k0 ^ 0x6c7967656e657261u, v3 = sip_k1 ^ 0x7465646279746573u;
    uint64_t last = (uint64_t)len << 56;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t m;
        memcpy(&m, p, 8);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    for (int64_t k = 0; k < len; k++)
        last |= (uint64_t)p[k] << (8 * k);
    v3 ^= last;
    SIPROUND;
    v0 ^= last;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* Draw the key (with the GIL held, before the first use). */
static int key_the_hash(void)
{
    if (sip_keyed)
        return 0;
    PyObject *os = PyImport_ImportModule("os");
    PyObject *key = os ? PyObject_CallMethod(os, "urandom", "i", 16) : NULL;
    Py_XDECREF(os);
    if (!key)
        return -1;
    if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) != 16) {
        Py_DECREF(key);
        PyErr_SetString(PyExc_RuntimeError, "lumos._kernels.interned: os.urandom(16) gave no 16 bytes");
        return -1;
    }
    memcpy(&sip_k0, PyBytes_AS_STRING(key), 8);
    memcpy(&sip_k1, PyBytes_AS_STRING(key) + 8, 8);
    Py_DECREF(key);
    sip_keyed = 1;
    return 0;
}

/* The interner's table built again under keyed_hash: the distinct strings so far, each at the row
   where it first appears (`first`), their hashes into `hashes`; how many taken slots it passed. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static int64_t rehash_keyed(const uint8_t *b, const int64_t *loc, const int8_t *typ, Py_ssize_t n_fields,
                            Py_ssize_t field, const int64_t *first, int32_t distinct, uint64_t *hashes, int32_t *slot,
                            size_t size)
{
    int64_t passed = 0;
    memset(slot, 0, size * sizeof *slot);
    for (int32_t j = 0; j < distinct; j++) {
        int64_t fi, fe;
        field_span(loc, typ, first[j], n_fields, field, &fi, &fe);
        hashes[j] = keyed_hash(b + fi, fe - fi);
        size_t q = (size_t)hashes[j] & (size - 1);
        for (; slot[q]; q = (q + 1) & (size - 1))
            passed++;
        slot[q] = j + 1;
    }
    return passed;
}

typedef struct {   /* the interner's hash table */
    int32_t *slot;     /* distinct string + 1; 0: empty */
    uint64_t *hashes;  /* of each distinct string */
    size_t size;       /* slots, a power of 2 */
    int32_t distinct;
    int64_t passed;    /* taken slots passed over */
} Table;

/* Rows at[k0:k1] into the table (`keyed`: under keyed_hash, else fast_hash; a constant at each call,
   so that each is a loop of its own). Under fast_hash, a lookup that passes PROBE_LIMIT taken slots
   stops there: *tripped = its k. */
static inline void intern_rows(Table *tb, const uint8_t *b, const int64_t *loc, const int8_t *typ,
                               Py_ssize_t n_fields, Py_ssize_t field, const int64_t *at, Py_ssize_t k0,
                               Py_ssize_t k_at, int keyed, int32_t *codes, int64_t *first, Py_ssize_t *tripped)
{
    size_t mask = tb->size - 1;
    int32_t *slot = tb->slot;
    uint64_t *hashes = tb->hashes;
    int32_t distinct = tb->distinct;
    int64_t passed = tb->passed;
    *tripped = -1;
    for (Py_ssize_t k = k0; k < k_at; k++) {
        PREFETCH_ROWS(k);
        int64_t r = at[k], i, e;
        int8_t t = field_span(loc, typ, r, n_fields, field, &i, &e);
        if (t != T_STR && t != T_STR_ESC) {
            codes[k] = -1;
            continue;
        }
        uint64_t h = keyed ? keyed_hash(b + i, e - i) : fast_hash(b + i, e - i);
        int64_t run = 0;
        for (size_t s = (size_t)h & mask;; s = (s + 1) & mask) {
            int32_t j = slot[s] - 1;
            if (j < 0) {   /* new */
                slot[s] = distinct + 1;
                hashes[distinct] = h;
                first[distinct] = r;
                codes[k] = distinct++;
                break;
            }
            if (hashes[j] == h) {
                int64_t fi, fe;
                field_span(loc, typ, first[j], n_fields, field, &fi, &fe);
                if (fe - fi == e - i && memcmp(b + fi, b + i, (size_t)(e - i)) == 0) {
                    codes[k] = j;
                    break;
                }
            }
            if (++run > PROBE_LIMIT && !keyed) {
                *tripped = k;
                tb->distinct = distinct;
                tb->passed = passed + run;
                return;
            }
        }
        passed += run;
    }
    tb->distinct = distinct;
    tb->passed = passed;
}

const char interned_doc[] =
"interned(buf, loc, typ, n_fields, field, at, codes, first, probes=None) -> distinct\n\n"
"scanned.py's `_interned`: codes[k] = which distinct string (as raw bytes, in order of first\n"
"appearance) field `field` of row at[k] holds, -1 where it is no string (T_STR, T_STR_ESC);\n"
"first[j] = the row (of loc, typ) where distinct string j first appears. `probes` (int64, one item),\n"
"where given, receives how many taken slots of the hash table the lookups passed over (linear in\n"
"len(at) whatever the names: past PROBE_LIMIT in one lookup, the table is hashed again under a key).";

PyObject *py_interned(PyObject *self, PyObject *args)
{
    PyObject *buf_o, *loc_o, *typ_o, *at_o, *codes_o, *first_o, *probes_o = Py_None;
    Py_ssize_t n_fields, field;
    if (!PyArg_ParseTuple(args, "OOOnnOOO|O", &buf_o, &loc_o, &typ_o, &n_fields, &field, &at_o, &codes_o, &first_o,
                          &probes_o))
        return NULL;
    Views vs = {.n = 0};
    Py_ssize_t n, loc_len, typ_len, k_at, codes_len, first_len;
    ARR(b, const uint8_t, buf_o, U8, 0, &n);
    ARR(loc, const int64_t, loc_o, I64, 0, &loc_len);
    ARR(typ, const int8_t, typ_o, I8, 0, &typ_len);
    ARR(at, const int64_t, at_o, I64, 0, &k_at);
    ARR(codes, int32_t, codes_o, I32, 1, &codes_len);
    ARR(first, int64_t, first_o, I64, 1, &first_len);
    int64_t *probes = NULL;
    if (probes_o != Py_None) {
        Py_ssize_t probes_len;
        if (!(probes = arr(&vs, probes_o, I64, 1, &probes_len, "probes")))
            goto fail;
        if (probes_len < 1) {
            PyErr_SetString(PyExc_ValueError, "lumos._kernels.interned: probes holds no item");
            goto fail;
        }
    }
    Py_ssize_t rows = n_fields > 0 ? typ_len / n_fields : 0;
    if (!field_layout_ok(n_fields, field, typ_len, loc_len) ||
        codes_len != k_at || first_len < k_at || k_at >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "lumos._kernels.interned: array shapes do not match");
        goto fail;
    }
    if (check_index(at, k_at, 0, rows, "at") < 0)
        goto fail;
    for (Py_ssize_t k = 0; k < k_at; k++) {
        int64_t r = at[k], i, e;
        int8_t t = field_span(loc, typ, r, n_fields, field, &i, &e);
        if ((t == T_STR || t == T_STR_ESC) && !(0 <= i && i < e && e <= n)) {
            PyErr_SetString(PyExc_ValueError, "lumos._kernels.interned: a span outside the buffer");
            goto fail;
        }
    }
    if (key_the_hash() < 0)
        goto fail;
    size_t size = 16;
    while (size < 2 * (size_t)k_at)
        size *= 2;
    int32_t *slot = calloc(size, sizeof *slot);   /* distinct string + 1; 0: empty */
    uint64_t *hashes = malloc(((size_t)k_at + 1) * sizeof *hashes);
    if (!slot || !hashes) {
        free(slot);
        free(hashes);
        PyErr_NoMemory();
        goto fail;
    }
    Table tb = {.slot = slot, .hashes = hashes, .size = size};
    Py_ssize_t tripped = -1;
    Py_BEGIN_ALLOW_THREADS
    intern_rows(&tb, b, loc, typ, n_fields, field, at, 0, k_at, 0, codes, first, &tripped);
    if (tripped >= 0) {   /* names that collide under fast_hash: the table again, keyed, and on from there */
        tb.passed += rehash_keyed(b, loc, typ, n_fields, field, first, tb.distinct, hashes, slot, size);
        intern_rows(&tb, b, loc, typ, n_fields, field, at, tripped, k_at, 1, codes, first, &tripped);
    }
    Py_END_ALLOW_THREADS
    int32_t distinct = tb.distinct;
    int64_t passed = tb.passed;
    if (probes)
        probes[0] = passed;
    free(slot);
    free(hashes);
    release(&vs);
    return PyLong_FromLong(distinct);
fail:
    release(&vs);
    return NULL;
}
