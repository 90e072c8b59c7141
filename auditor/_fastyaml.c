/* The loader's common case in C: one YAML document built straight from libyaml's events into
 * YamlMap / YamlSeq objects with their lines, without the Python event and mark objects PyYAML's
 * CParser makes for every event (those were most of a large scan's loading time).
 *
 * This is auditor.yamlio._from_events, event for event, and nothing more: untagged mappings and
 * sequences, plain or quoted scalars, string keys, no anchors or aliases, no duplicate keys,
 * within the depth and node limits. Anything else -- and any parse error -- returns None and the
 * caller loads the document through the one full Python path, which reports every error and
 * handles every unusual input. Scalar tags are resolved and non-string scalars constructed by the
 * callables the caller passes (the same resolver and constructor as that path), so values cannot
 * differ; tests compare the two on every document they have.
 *
 * build(text, line_offset, max_depth, max_nodes, plain_tags, resolve, construct, str_tag,
 *       map_type, seq_type) -> (root, root_line) | False (no document) | None (use the full path)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <yaml.h>

typedef struct {
    PyObject *container; /* NULL for the frame below the root */
    PyObject *lines;     /* key_lines (dict) or item_lines (list) of the container */
    int is_map;
    PyObject *key; /* a mapping's key waiting for its value, or NULL */
    long key_line;
} Frame;

static PyObject *s_key_lines, *s_item_lines, *s_line, *s_empty_tuple;

enum { OK = 0, FULL = 1, FAIL = -1 };

static int plain_tag(const yaml_char_t *tag) {
    /* No tag, or the non-specific "!": the Python path's `tag is None or tag == "!"`. */
    return tag == NULL || (tag[0] == '!' && tag[1] == '\0');
}

static PyObject *new_container(PyTypeObject *type, PyObject *base_new_args, int is_map, long line,
                               PyObject **lines_out) {
    PyTypeObject *base = is_map ? &PyDict_Type : &PyList_Type;
    PyObject *obj = base->tp_new(type, base_new_args, NULL);
    if (obj == NULL) return NULL;
    PyObject *lines = is_map ? PyDict_New() : PyList_New(0);
    PyObject *line_obj = PyLong_FromLong(line);
    if (lines == NULL || line_obj == NULL ||
        PyObject_SetAttr(obj, is_map ? s_key_lines : s_item_lines, lines) < 0 ||
        PyObject_SetAttr(obj, s_line, line_obj) < 0) {
        Py_XDECREF(lines);
        Py_XDECREF(line_obj);
        Py_DECREF(obj);
        return NULL;
    }
    Py_DECREF(line_obj);
    *lines_out = lines; /* borrowed: the container holds it */
    Py_DECREF(lines);
    return obj;
}

static PyObject *build(PyObject *self, PyObject *args) {
    PyObject *text, *plain_tags, *resolve, *construct, *str_tag;
    PyTypeObject *map_type, *seq_type;
    long offset;
    Py_ssize_t max_depth, max_nodes;
    if (!PyArg_ParseTuple(args, "UlnnO!OOUO!O!", &text, &offset, &max_depth, &max_nodes,
                          &PyDict_Type, &plain_tags, &resolve, &construct, &str_tag,
                          &PyType_Type, &map_type, &PyType_Type, &seq_type))
        return NULL;
    if (!PyType_IsSubtype(map_type, &PyDict_Type) || !PyType_IsSubtype(seq_type, &PyList_Type)) {
        PyErr_SetString(PyExc_TypeError, "map_type must subclass dict and seq_type list");
        return NULL;
    }
    Py_ssize_t size;
    const char *bytes = PyUnicode_AsUTF8AndSize(text, &size);
    if (bytes == NULL) { /* a lone surrogate in the text: the full path reports the character */
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    offset += 1; /* libyaml's lines are 0-based */

    yaml_parser_t parser;
    yaml_event_t event;
    if (!yaml_parser_initialize(&parser)) return PyErr_NoMemory();
    yaml_parser_set_input_string(&parser, (const unsigned char *)bytes, (size_t)size);
    yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING);

    Py_ssize_t capacity = 16, sp = 0;
    Frame *stack = PyMem_Malloc(sizeof(Frame) * capacity);
    if (stack == NULL) {
        yaml_parser_delete(&parser);
        return PyErr_NoMemory();
    }
    PyObject *container = NULL, *lines = NULL, *key = NULL, *root = NULL, *result = NULL;
    int is_map = 0, status = OK, have_event = 0;
    long key_line = 0, root_line = 0;
    Py_ssize_t nodes = 0;

#define NEXT()                                           \
    do {                                                 \
        if (have_event) yaml_event_delete(&event);       \
        have_event = 0;                                  \
        if (!yaml_parser_parse(&parser, &event)) {       \
            status = FULL; /* the full path reports it */ \
            goto done;                                   \
        }                                                \
        have_event = 1;                                  \
    } while (0)
#define BAIL(code)      \
    do {                \
        status = (code); \
        goto done;      \
    } while (0)

    NEXT(); /* STREAM-START */
    NEXT();
    if (event.type != YAML_DOCUMENT_START_EVENT) {
        status = OK;
        result = Py_False;
        Py_INCREF(result);
        goto done;
    }
    for (;;) {
        NEXT();
        PyObject *value = NULL, *new_lines = NULL;
        int is_new = 0, new_is_map = 0;
        long line;
        switch (event.type) {
        case YAML_SCALAR_EVENT: {
            if (event.data.scalar.anchor != NULL || !plain_tag(event.data.scalar.tag)) BAIL(FULL);
            value = PyUnicode_DecodeUTF8((const char *)event.data.scalar.value,
                                         (Py_ssize_t)event.data.scalar.length, "strict");
            if (value == NULL) { /* e.g. an escaped lone surrogate: the full path reports it */
                if (PyErr_ExceptionMatches(PyExc_MemoryError)) BAIL(FAIL);
                PyErr_Clear();
                BAIL(FULL);
            }
            PyObject *tag;
            if (event.data.scalar.plain_implicit) {
                tag = PyDict_GetItemWithError(plain_tags, value);
                if (tag != NULL) {
                    Py_INCREF(tag);
                } else {
                    if (PyErr_Occurred()) {
                        Py_DECREF(value);
                        BAIL(FAIL);
                    }
                    tag = PyObject_CallOneArg(resolve, value);
                    if (tag == NULL) {
                        Py_DECREF(value);
                        BAIL(FAIL);
                    }
                }
            } else {
                tag = str_tag;
                Py_INCREF(tag);
            }
            int is_str = tag == str_tag;
            if (!is_str) {
                is_str = PyUnicode_Check(tag) && PyUnicode_Compare(tag, str_tag) == 0;
                if (PyErr_Occurred()) {
                    Py_DECREF(tag);
                    Py_DECREF(value);
                    BAIL(FAIL);
                }
            }
            if (!is_str) {
                if (is_map && key == NULL) { /* a key JSON must convert (1, true, ~) or a merge */
                    Py_DECREF(tag);
                    Py_DECREF(value);
                    BAIL(FULL);
                }
                PyObject *built = PyObject_CallFunctionObjArgs(construct, tag, value, NULL);
                Py_DECREF(value);
                if (built == NULL) {
                    Py_DECREF(tag);
                    if (PyErr_ExceptionMatches(PyExc_MemoryError)) BAIL(FAIL);
                    PyErr_Clear(); /* the full path reports it, at its line */
                    BAIL(FULL);
                }
                value = built;
            } else if (is_map && key == NULL) {
                PyUnicode_InternInPlace(&value); /* keys repeat across every document */
            }
            Py_DECREF(tag);
            /* A mapping's value (a key is waiting): its line is never read. */
            line = key != NULL ? 0 : (long)event.start_mark.line + offset;
            break;
        }
        case YAML_MAPPING_START_EVENT:
        case YAML_SEQUENCE_START_EVENT: {
            new_is_map = event.type == YAML_MAPPING_START_EVENT;
            const yaml_char_t *anchor =
                new_is_map ? event.data.mapping_start.anchor : event.data.sequence_start.anchor;
            const yaml_char_t *tag =
                new_is_map ? event.data.mapping_start.tag : event.data.sequence_start.tag;
            if (anchor != NULL || !plain_tag(tag)) BAIL(FULL);
            if (is_map && key == NULL) BAIL(FULL); /* a mapping or sequence used as a key */
            if (sp + 1 > max_depth) BAIL(FULL);    /* the full path reports it, at its line */
            line = (long)event.start_mark.line + offset;
            value = new_container(new_is_map ? map_type : seq_type, s_empty_tuple, new_is_map, line,
                                  &new_lines);
            if (value == NULL) BAIL(FAIL);
            is_new = 1;
            break;
        }
        case YAML_MAPPING_END_EVENT:
        case YAML_SEQUENCE_END_EVENT: {
            sp -= 1;
            Py_XDECREF(container);
            Py_XDECREF(key);
            container = stack[sp].container;
            lines = stack[sp].lines;
            is_map = stack[sp].is_map;
            key = stack[sp].key;
            key_line = stack[sp].key_line;
            if (container == NULL) goto document_end;
            continue;
        }
        default: /* an alias, or anything unforeseen */
            BAIL(FULL);
        }

        if (is_map && key == NULL) {
            int dup = PyDict_Contains(container, value);
            if (dup != 0) {
                Py_DECREF(value);
                BAIL(dup < 0 ? FAIL : FULL); /* a duplicate key: reported by the full path */
            }
            key = value;
            key_line = line;
            continue;
        }
        /* Counted as the composed path counts (one node per mapping entry or sequence item). */
        if (++nodes > max_nodes) {
            Py_DECREF(value);
            BAIL(FULL);
        }
        if (container == NULL) {
            root = value;
            Py_INCREF(root);
            root_line = line;
        } else if (is_map) {
            PyObject *line_obj = PyLong_FromLong(key_line);
            if (line_obj == NULL || PyDict_SetItem(container, key, value) < 0 ||
                PyDict_SetItem(lines, key, line_obj) < 0) {
                Py_XDECREF(line_obj);
                Py_DECREF(value);
                BAIL(FAIL);
            }
            Py_DECREF(line_obj);
            Py_CLEAR(key);
        } else {
            PyObject *line_obj = PyLong_FromLong(line);
            if (line_obj == NULL || PyList_Append(container, value) < 0 ||
                PyList_Append(lines, line_obj) < 0) {
                Py_XDECREF(line_obj);
                Py_DECREF(value);
                BAIL(FAIL);
            }
            Py_DECREF(line_obj);
        }
        if (is_new) {
            if (sp == capacity) {
                Frame *grown = PyMem_Realloc(stack, sizeof(Frame) * capacity * 2);
                if (grown == NULL) {
                    Py_DECREF(value);
                    PyErr_NoMemory();
                    BAIL(FAIL);
                }
                stack = grown;
                capacity *= 2;
            }
            stack[sp].container = container; /* the frame takes over these references */
            stack[sp].lines = lines;
            stack[sp].is_map = is_map;
            stack[sp].key = key;
            stack[sp].key_line = key_line;
            sp += 1;
            container = value; /* our reference */
            lines = new_lines;
            is_map = new_is_map;
            key = NULL;
        } else {
            Py_DECREF(value);
            if (container == NULL) goto document_end; /* a scalar document */
        }
    }
document_end:
    NEXT();
    if (event.type != YAML_DOCUMENT_END_EVENT) BAIL(FULL);
    NEXT();
    if (event.type != YAML_STREAM_END_EVENT) BAIL(FULL); /* more than one document */
    result = Py_BuildValue("(Ol)", root == NULL ? Py_None : root, root_line);
    status = result == NULL ? FAIL : OK;

done:
    if (have_event) yaml_event_delete(&event);
    yaml_parser_delete(&parser);
    Py_XDECREF(container);
    Py_XDECREF(key);
    while (sp > 0) {
        sp -= 1;
        Py_XDECREF(stack[sp].container);
        Py_XDECREF(stack[sp].key);
    }
    PyMem_Free(stack);
    Py_XDECREF(root);
    if (status == FAIL) {
        Py_XDECREF(result);
        return NULL;
    }
    if (status == FULL) {
        Py_XDECREF(result);
        Py_RETURN_NONE;
    }
    return result;
#undef NEXT
#undef BAIL
}

static PyObject *libyaml_version(PyObject *self, PyObject *unused) {
    return PyUnicode_FromString(yaml_get_version_string());
}

static PyMethodDef methods[] = {
    {"build", build, METH_VARARGS,
     "build(text, line_offset, max_depth, max_nodes, plain_tags, resolve, construct, str_tag, "
     "map_type, seq_type) -> (root, root_line) | False | None"},
    {"libyaml_version", libyaml_version, METH_NOARGS, "The version of the libyaml linked in."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastyaml",
                                    "libyaml events straight into located containers.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__fastyaml(void) {
    s_key_lines = PyUnicode_InternFromString("key_lines");
    s_item_lines = PyUnicode_InternFromString("item_lines");
    s_line = PyUnicode_InternFromString("line");
    s_empty_tuple = PyTuple_New(0);
    if (!s_key_lines || !s_item_lines || !s_line || !s_empty_tuple) return NULL;
    return PyModule_Create(&module);
}
