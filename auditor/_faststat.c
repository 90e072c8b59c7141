/* The stats an incremental re-scan compares (auditor/sources/incremental.py, TreeAuditor._quick):
 * every file's (size, mtime_ns, ctime_ns, inode, device) and every directory's (mtime_ns,
 * ctime_ns, inode, device), exactly as os.stat(path) gives them (symlinks followed), for lists
 * of 20,000 paths. os.stat builds a stat_result of some twenty fields, float times among them,
 * per path: a quarter of the time of a re-scan's stat'ing, which this skips. Optional: without
 * it (no compiler) the same tuples come from os.stat, and tests compare the two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sys/stat.h>

#if defined(__APPLE__)
#define MTIME_SEC(st) ((st).st_mtimespec.tv_sec)
#define MTIME_NSEC(st) ((st).st_mtimespec.tv_nsec)
#define CTIME_SEC(st) ((st).st_ctimespec.tv_sec)
#define CTIME_NSEC(st) ((st).st_ctimespec.tv_nsec)
#else
#define MTIME_SEC(st) ((st).st_mtim.tv_sec)
#define MTIME_NSEC(st) ((st).st_mtim.tv_nsec)
#define CTIME_SEC(st) ((st).st_ctim.tv_sec)
#define CTIME_NSEC(st) ((st).st_ctim.tv_nsec)
#endif

/* A time in nanoseconds as a Python int, as os.stat's st_*_ns (sec * 10**9 + nsec, exactly, for
 * any sec: through Python's integers where a long long could overflow). */
static PyObject *ns(long long sec, long nsec) {
    if (sec > -9000000000LL && sec < 9000000000LL) {
        return PyLong_FromLongLong(sec * 1000000000LL + nsec);
    }
    PyObject *s = PyLong_FromLongLong(sec), *billion = PyLong_FromLong(1000000000L);
    PyObject *n = PyLong_FromLong(nsec), *scaled = NULL, *out = NULL;
    if (s && billion && n && (scaled = PyNumber_Multiply(s, billion)) != NULL) {
        out = PyNumber_Add(scaled, n);
    }
    Py_XDECREF(s);
    Py_XDECREF(billion);
    Py_XDECREF(n);
    Py_XDECREF(scaled);
    return out;
}

/* stats(paths, directories): a list of the tuples, or None when a path cannot be stat'ed (the
 * caller then looks at the tree the slow way). */
static PyObject *stats(PyObject *self, PyObject *args) {
    PyObject *paths;
    int directories;
    if (!PyArg_ParseTuple(args, "O!p", &PyList_Type, &paths, &directories)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(paths);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *encoded = NULL;
        /* The file system's encoding, surrogates escaped: the bytes os.stat would pass. */
        if (!PyUnicode_FSConverter(PyList_GET_ITEM(paths, i), &encoded)) {
            Py_DECREF(out);
            return NULL;
        }
        struct stat st;
        int failed;
        Py_BEGIN_ALLOW_THREADS
        failed = stat(PyBytes_AS_STRING(encoded), &st);
        Py_END_ALLOW_THREADS
        Py_DECREF(encoded);
        if (failed != 0) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        PyObject *mtime = ns((long long)MTIME_SEC(st), (long)MTIME_NSEC(st));
        PyObject *ctime = ns((long long)CTIME_SEC(st), (long)CTIME_NSEC(st));
        PyObject *ino = PyLong_FromUnsignedLongLong((unsigned long long)st.st_ino);
        PyObject *dev = PyLong_FromUnsignedLongLong((unsigned long long)st.st_dev);
        PyObject *item = NULL;
        if (mtime && ctime && ino && dev) {
            if (directories) {
                item = PyTuple_Pack(4, mtime, ctime, ino, dev);
            } else {
                PyObject *size = PyLong_FromLongLong((long long)st.st_size);
                item = size ? PyTuple_Pack(5, size, mtime, ctime, ino, dev) : NULL;
                Py_XDECREF(size);
            }
        }
        Py_XDECREF(mtime);
        Py_XDECREF(ctime);
        Py_XDECREF(ino);
        Py_XDECREF(dev);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"stats", stats, METH_VARARGS,
     "stats(paths, directories): each path's (size, mtime_ns, ctime_ns, inode, device), or its "
     "(mtime_ns, ctime_ns, inode, device) when `directories`, as os.stat gives them; None when "
     "one cannot be stat'ed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_faststat",
                                    "Stats of many paths at once (see auditor/_faststat.c).", -1, methods};

PyMODINIT_FUNC PyInit__faststat(void) { return PyModule_Create(&module); }
