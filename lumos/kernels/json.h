/* JSON tokens as lumos/trace/scan.py reads them: each function validates one token the way orjson
   would and returns its end, or -1 where the token is invalid or orjson's verdict is left to the
   plain path. Included by scan.c and decode.c (static inline: called once per byte or token). */

#ifndef LUMOS_JSON_H
#define LUMOS_JSON_H

#include "kernels.h"

enum { T_ABSENT, T_NULL, T_INT, T_NUM, T_STR, T_STR_ESC, T_TRUE, T_FALSE, T_ARR, T_OBJ };
#define MAX_DEPTH 256

typedef struct {   /* the key tables of scan.py, passed in so that they live in one place */
    const uint8_t *ev_table, *arg_table, *trace_key;
    const int64_t *ev_lens, *ev_ids, *arg_lens;
    Py_ssize_t ev_keys, ev_width, arg_keys, arg_width, trace_len;
    int64_t n_fields, n_event, k_ph, k_args;
} Keys;

static inline Py_ssize_t skip_ws(const uint8_t *b, Py_ssize_t i, Py_ssize_t n)
{
    while (i < n) {
        uint8_t c = b[i];
        if (c != 32 && c != 10 && c != 13 && c != 9)
            return i;
        i++;
    }
    return i;
}

static inline int64_t hex4(const uint8_t *b, Py_ssize_t i, Py_ssize_t n)
{
    if (i + 6 > n || b[i] != 92 || b[i + 1] != 117)
        return -1;
    int64_t v = 0;
    for (Py_ssize_t k = i + 2; k < i + 6; k++) {
        uint8_t h = b[k];
        if (48 <= h && h <= 57)
            v = v * 16 + (h - 48);
        else if (97 <= h && h <= 102)
            v = v * 16 + (h - 87);
        else if (65 <= h && h <= 70)
            v = v * 16 + (h - 55);
        else
            return -1;
    }
    return v;
}

/* b[i] is '"': the string's end, or -1 if invalid as orjson would find it; *escaped set on a '\'. */
static inline Py_ssize_t string_end(const uint8_t *b, Py_ssize_t i, Py_ssize_t n, int *escaped)
{
    i++;
    *escaped = 0;
    while (i < n) {
        uint8_t c = b[i];
        if (c == 34)
            return i + 1;
        if (c == 92) {
            *escaped = 1;
            if (i + 1 >= n)
                return -1;
            uint8_t e = b[i + 1];
            if (e == 117) {
                int64_t v = hex4(b, i, n);
                if (v < 0 || (0xDC00 <= v && v <= 0xDFFF))
                    return -1;
                if (0xD800 <= v && v <= 0xDBFF) {   /* a high surrogate needs its low half next */
                    int64_t low = hex4(b, i + 6, n);
                    if (!(0xDC00 <= low && low <= 0xDFFF))
                        return -1;
                    i += 6;
                }
                i += 6;
            } else if (e == 34 || e == 92 || e == 47 || e == 98 || e == 102 || e == 110 || e == 114 || e == 116) {
                i += 2;
            } else {
                return -1;
            }
        } else if (c < 32) {
            return -1;
        } else {
            i++;
        }
    }
    return -1;
}

/* A JSON number at i: its end (-1 if invalid, or so long or large that orjson decides), whether it is
   a plain integer of at most 18 digits, and then its value. */
static inline Py_ssize_t number_end(const uint8_t *b, Py_ssize_t i, Py_ssize_t n, int *plain_out, int64_t *value_out)
{
    *plain_out = 0;
    *value_out = 0;
    int neg = b[i] == 45;
    if (neg)
        i++;
    if (i >= n)
        return -1;
    Py_ssize_t d0 = i;
    if (b[i] == 48)
        i++;
    else if (49 <= b[i] && b[i] <= 57)
        while (i < n && 48 <= b[i] && b[i] <= 57)
            i++;
    else
        return -1;
    Py_ssize_t digits = i - d0;
    int plain = 1;
    if (i < n && b[i] == 46) {
        i++;
        Py_ssize_t f0 = i;
        while (i < n && 48 <= b[i] && b[i] <= 57)
            i++;
        if (i == f0 || i - f0 > 200)
            return -1;
        plain = 0;
    }
    if (i < n && (b[i] == 101 || b[i] == 69)) {
        i++;
        int negative_exp = i < n && b[i] == 45;
        if (i < n && (b[i] == 43 || b[i] == 45))
            i++;
        Py_ssize_t e0 = i;
        int64_t exp = 0;
        while (i < n && 48 <= b[i] && b[i] <= 57) {
            if (exp < 10000)
                exp = exp * 10 + (b[i] - 48);
            i++;
        }
        if (i == e0 || (!negative_exp && exp + digits > 250))   /* underflow is 0.0; overflow an error */
            return -1;
        plain = 0;
    }
    if (digits > 200)
        return -1;
    int64_t value = 0;
    if (plain && digits <= 18) {
        for (Py_ssize_t k = d0; k < d0 + digits; k++)
            value = value * 10 + (b[k] - 48);
        if (neg)
            value = -value;
    } else {
        plain = 0;
    }
    *plain_out = plain;
    *value_out = value;
    return i;
}

static inline Py_ssize_t literal_end(const uint8_t *b, Py_ssize_t i, Py_ssize_t n)
{
    uint8_t c = b[i];
    if (c == 116 && i + 4 <= n && b[i + 1] == 114 && b[i + 2] == 117 && b[i + 3] == 101)
        return i + 4;
    if (c == 110 && i + 4 <= n && b[i + 1] == 117 && b[i + 2] == 108 && b[i + 3] == 108)
        return i + 4;
    if (c == 102 && i + 5 <= n && b[i + 1] == 97 && b[i + 2] == 108 && b[i + 3] == 115 && b[i + 4] == 101)
        return i + 5;
    return -1;
}

static inline Py_ssize_t scalar_end(const uint8_t *b, Py_ssize_t i, Py_ssize_t n)
{
    uint8_t c = b[i];
    if (c == 34) {
        int esc;
        return string_end(b, i, n, &esc);
    }
    if (c == 45 || (48 <= c && c <= 57)) {
        int plain;
        int64_t v;
        return number_end(b, i, n, &plain, &v);
    }
    return literal_end(b, i, n);
}

/* Validate and skip any JSON value at i: its end, or -1 if invalid or nested deeper than MAX_DEPTH. */
static inline Py_ssize_t value_end(const uint8_t *b, Py_ssize_t i, Py_ssize_t n, uint8_t *stack)
{
    uint8_t c = b[i];
    if (c != 123 && c != 91)
        return scalar_end(b, i, n);
    stack[0] = c;
    int sp = 1;
    i++;
    int state = 0;   /* 0: just opened, 1: after a comma, 2: after a value */
    for (;;) {
        i = skip_ws(b, i, n);
        if (i >= n)
            return -1;
        c = b[i];
        uint8_t close = stack[sp - 1] == 123 ? 125 : 93;
        if (state == 2 || (state == 0 && c == close)) {
            if (c == 44 && state == 2) {
                i++;
                state = 1;
                continue;
            }
            if (c != close)
                return -1;
            sp--;
            i++;
            if (sp == 0)
                return i;
            state = 2;
            continue;
        }
        if (stack[sp - 1] == 123) {   /* a member: "key": value */
            if (c != 34)
                return -1;
            int esc;
            Py_ssize_t e = string_end(b, i, n, &esc);
            if (e < 0)
                return -1;
            i = skip_ws(b, e, n);
            if (i >= n || b[i] != 58)
                return -1;
            i = skip_ws(b, i + 1, n);
            if (i >= n)
                return -1;
            c = b[i];
        }
        if (c == 123 || c == 91) {
            if (sp >= MAX_DEPTH)
                return -1;
            stack[sp++] = c;
            i++;
            state = 0;
            continue;
        }
        Py_ssize_t e = scalar_end(b, i, n);
        if (e < 0)
            return -1;
        i = e;
        state = 2;
    }
}

static inline int64_t key_id(const uint8_t *b, Py_ssize_t lo, Py_ssize_t hi, const uint8_t *table, Py_ssize_t width,
                      const int64_t *lens, Py_ssize_t keys)
{
    Py_ssize_t m = hi - lo;
    for (Py_ssize_t k = 0; k < keys; k++)
        if (lens[k] == m && memcmp(b + lo, table + k * width, (size_t)m) == 0)
            return k;
    return -1;
}

/* At a member: its key's span and the value's start (-1 if invalid or the key is escaped). */
static inline Py_ssize_t member_key(const uint8_t *b, Py_ssize_t i, Py_ssize_t n, Py_ssize_t *klo, Py_ssize_t *khi)
{
    *klo = *khi = 0;
    if (b[i] != 34)
        return -1;
    int esc;
    Py_ssize_t e = string_end(b, i, n, &esc);
    if (e < 0 || esc)
        return -1;
    Py_ssize_t j = skip_ws(b, e, n);
    if (j >= n || b[j] != 58)
        return -1;
    j = skip_ws(b, j + 1, n);
    if (j >= n)
        return -1;
    *klo = i + 1;
    *khi = e - 1;
    return j;
}

/* After a member's value: the next index; *more 1 (more members), 0 (closed) or -1 (invalid). */
static inline Py_ssize_t after_member(const uint8_t *b, Py_ssize_t e, Py_ssize_t n, int *more)
{
    Py_ssize_t i = skip_ws(b, e, n);
    if (i >= n) {
        *more = -1;
        return i;
    }
    if (b[i] == 44) {
        *more = 1;
        return i + 1;
    }
    if (b[i] == 125) {
        *more = 0;
        return i + 1;
    }
    *more = -1;
    return i;
}

#endif
