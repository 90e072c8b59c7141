/* Deliberate bugs, for tests/fuzz/test_fuzz.py: proof that the sanitized build catches what the
 * fuzzers rely on it to catch (a heap overflow, signed overflow, a leak). Never built into the
 * package. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>

static PyObject *heap_overflow(PyObject *self, PyObject *arg) {
    /* A read one past the end, whose value is used (a store before free() may be removed as
     * dead by the optimiser; this cannot). */
    char *volatile p = calloc(8, 1);
    long v = p[8];
    free(p);
    return PyLong_FromLong(v);
}

static PyObject *signed_overflow(PyObject *self, PyObject *arg) {
    volatile int x = (int)PyLong_AsLong(arg);
    x = x + 2147483647;
    return PyLong_FromLong(x);
}

static PyObject *leak(PyObject *self, PyObject *arg) {
    void *volatile p = malloc(4096);
    p = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"heap_overflow", heap_overflow, METH_NOARGS, NULL},
    {"signed_overflow", signed_overflow, METH_O, NULL},
    {"leak", leak, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "selfcheck", NULL, -1, methods};

PyMODINIT_FUNC PyInit_selfcheck(void) { return PyModule_Create(&module); }
