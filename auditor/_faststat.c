/* The stats an incremental re-scan compares (auditor/sources/incremental.py, TreeAuditor._quick):
 * every file's (size, mtime_ns, ctime_ns, inode, device) and every directory's (mtime_ns,
 * ctime_ns, inode, device), exactly as os.stat(path) gives them (symlinks followed), for lists
 * of 20,000 paths, compared here with the recorded ones: only the paths that changed come back.
 * os.stat builds a stat_result of some twenty fields, float times among them, per path, and
 * comparing its values in Python made objects for every file: a third of the time of a
 * re-scan's stat'ing, which this skips. Optional: without it (no compiler) os.stat and Python
 * do the same, and tests compare the two.
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

/* Whether item `i` of the recorded tuple `rec` is `value` (a signed or unsigned 64-bit count). */
static int same_signed(PyObject *rec, Py_ssize_t i, long long value) {
    int overflow = 0;
    long long got = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(rec, i), &overflow);
    if (got == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return !overflow && got == value;
}

static int same_unsigned(PyObject *rec, Py_ssize_t i, unsigned long long value) {
    unsigned long long got = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(rec, i));
    if (got == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return got == value;
}

/* changes(paths, recorded, trusted, directories): {position: stat now} for each path whose stat
 * is not its recorded tuple, or whose mtime_ns is `trusted` or later (too recent to trust); None
 * when a path cannot be stat'ed. A stat is (size, mtime_ns, ctime_ns, inode, device), or
 * (mtime_ns, ctime_ns, inode, device) for `directories`: os.stat's values, symlinks followed.
 * The unchanged paths cost a stat call and no Python object. */
static PyObject *changes(PyObject *self, PyObject *args) {
    PyObject *paths, *recorded;
    long long trusted;
    int directories;
    if (!PyArg_ParseTuple(args, "O!O!Lp", &PyList_Type, &paths, &PyList_Type, &recorded, &trusted,
                          &directories)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(paths);
    if (PyList_GET_SIZE(recorded) != n) {
        PyErr_SetString(PyExc_ValueError, "changes: as many recorded stats as paths");
        return NULL;
    }
    Py_ssize_t width = directories ? 4 : 5, at = directories ? 0 : 1;
    PyObject *out = PyDict_New();
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
        int failed = stat(PyBytes_AS_STRING(encoded), &st);
        Py_DECREF(encoded);
        if (failed != 0) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        long long mtime_sec = (long long)MTIME_SEC(st), ctime_sec = (long long)CTIME_SEC(st);
        int in_range = mtime_sec > -9000000000LL && mtime_sec < 9000000000LL &&
                       ctime_sec > -9000000000LL && ctime_sec < 9000000000LL;
        long long mtime = in_range ? mtime_sec * 1000000000LL + MTIME_NSEC(st) : 0;
        long long ctime = in_range ? ctime_sec * 1000000000LL + CTIME_NSEC(st) : 0;
        PyObject *rec = PyList_GET_ITEM(recorded, i);
        if (in_range && mtime < trusted && PyTuple_Check(rec) && PyTuple_GET_SIZE(rec) == width &&
            (directories || same_signed(rec, 0, (long long)st.st_size)) &&
            same_signed(rec, at, mtime) && same_signed(rec, at + 1, ctime) &&
            same_unsigned(rec, at + 2, (unsigned long long)st.st_ino) &&
            same_unsigned(rec, at + 3, (unsigned long long)st.st_dev)) {
            continue;
        }
        PyObject *m = ns(mtime_sec, (long)MTIME_NSEC(st));
        PyObject *c = ns(ctime_sec, (long)CTIME_NSEC(st));
        PyObject *ino = PyLong_FromUnsignedLongLong((unsigned long long)st.st_ino);
        PyObject *dev = PyLong_FromUnsignedLongLong((unsigned long long)st.st_dev);
        PyObject *item = NULL, *key = NULL;
        if (m && c && ino && dev) {
            if (directories) {
                item = PyTuple_Pack(4, m, c, ino, dev);
            } else {
                PyObject *size = PyLong_FromLongLong((long long)st.st_size);
                item = size ? PyTuple_Pack(5, size, m, c, ino, dev) : NULL;
                Py_XDECREF(size);
            }
        }
        Py_XDECREF(m);
        Py_XDECREF(c);
        Py_XDECREF(ino);
        Py_XDECREF(dev);
        /* A stat past the recorded one's range is never trusted: it shows as changed. */
        if (item == NULL || (key = PyLong_FromSsize_t(i)) == NULL || PyDict_SetItem(out, key, item) < 0) {
            Py_XDECREF(item);
            Py_XDECREF(key);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
        Py_DECREF(key);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"changes", changes, METH_VARARGS,
     "changes(paths, recorded, trusted, directories): {position: stat now} for each path whose "
     "stat (size, mtime_ns, ctime_ns, inode, device; for directories the last four) is not the "
     "recorded one or has an mtime_ns at or after `trusted`; None when one cannot be stat'ed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_faststat",
                                    "Stats of many paths at once (see auditor/_faststat.c).", -1, methods};

PyMODINIT_FUNC PyInit__faststat(void) { return PyModule_Create(&module); }
