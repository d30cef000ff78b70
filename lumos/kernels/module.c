/* The extension module `lumos._kernels` (kernels.h says what is in it and why). */

#include "kernels.h"

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, scan_doc_str},
    {"classify", py_classify, METH_VARARGS, classify_doc},
    {"gather", py_gather, METH_VARARGS, gather_doc},
    {"count_byte", py_count_byte, METH_VARARGS, count_byte_doc},
    {"numbers", py_numbers, METH_VARARGS, numbers_doc},
    {"interned", py_interned, METH_VARARGS, interned_doc},
    {"simulate", py_simulate, METH_VARARGS, simulate_doc},
    {"longest_path", py_longest_path, METH_VARARGS, longest_path_doc},
    {"walk", py_walk, METH_VARARGS, walk_doc},
    {"leaf_walk", py_leaf_walk, METH_VARARGS, leaf_walk_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "lumos._kernels",
    "The hot kernels in C (lumos/kernels/kernels.h says why); each the twin of a Python definition.", -1, methods,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
