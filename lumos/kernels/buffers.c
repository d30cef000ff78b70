/* Arrays through the buffer protocol: each checked for its item format (kernels.h). */

#include "kernels.h"

static const char *const KIND_NAME[] = {"float64", "int64", "int32", "int8", "uint8", "bool"};

static int kind_ok(const Py_buffer *b, int kind)
{
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@' || *f == '|')
        f++;
    switch (kind) {
    case F64: return b->itemsize == 8 && f[0] == 'd' && !f[1];
    case I64: return b->itemsize == 8 && (f[0] == 'q' || f[0] == 'l') && !f[1];
    case I32: return b->itemsize == 4 && (f[0] == 'i' || f[0] == 'l') && !f[1];
    case I8: return b->itemsize == 1 && f[0] == 'b' && !f[1];
    case U8: return b->itemsize == 1 && (f[0] == 'B' || f[0] == 'c') && !f[1];
    case BOOL: return b->itemsize == 1 && f[0] == '?' && !f[1];
    }
    return 0;
}

/* A C-contiguous view of `o` with items of `kind`; its data, or NULL with an exception set. */
void *arr(Views *vs, PyObject *o, int kind, int writable, Py_ssize_t *len, const char *what)
{
    if (vs->n >= (int)(sizeof vs->v / sizeof *vs->v)) {
        PyErr_SetString(PyExc_RuntimeError, "lumos._kernels: too many arrays for one call");
        return NULL;
    }
    Py_buffer *b = &vs->v[vs->n];
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, b, flags) < 0) {   /* say which argument, and what it must be */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyErr_Format(PyExc_TypeError, "lumos._kernels: %s must be a contiguous%s %s array (%S)", what,
                     writable ? " writable" : "", KIND_NAME[kind], value ? value : Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return NULL;
    }
    if (!kind_ok(b, kind)) {
        PyErr_Format(PyExc_TypeError, "lumos._kernels: %s must be a contiguous %s array (format %s)", what,
                     KIND_NAME[kind], b->format ? b->format : "B");
        PyBuffer_Release(b);
        return NULL;
    }
    vs->n++;
    if (len)
        *len = b->len / b->itemsize;
    return b->buf;
}

void release(Views *vs)
{
    for (int i = 0; i < vs->n; i++)
        PyBuffer_Release(&vs->v[i]);
    vs->n = 0;
}

int check_index(const int64_t *a, Py_ssize_t len, int64_t lo, int64_t hi, const char *what)
{
    for (Py_ssize_t k = 0; k < len; k++)
        if (a[k] < lo || a[k] >= hi) {
            PyErr_Format(PyExc_ValueError, "lumos._kernels: %s[%zd] = %lld outside [%lld, %lld)", what, k,
                         (long long)a[k], (long long)lo, (long long)hi);
            return -1;
        }
    return 0;
}
