/* Compiled fast paths of the shim's hottest wrappers. The pure-Python code they front stays the reference:
 * every case these paths do not recognise goes to it, and it is the fallback when this module is not built.
 *
 * KeywordGate (patches/_wrappers.py): a factory such as torch.zeros is called millions of times, most often
 * without a CUDA device. The gate reads the `device=` keyword in C: absent, None, or a device that is not
 * CUDA -> the original builtin with the caller's arguments untouched (vectorcall, no repacking); a CUDA
 * string already translated once (ascend_shim.devices' table) -> the original with that one argument
 * replaced, counted at the caller's site; anything else -> the pure-Python wrapper. MethodGate does the same
 * for a method whose device may also come positionally (Tensor.to).
 *
 * Device constructor (patches/torch_devices.py): torch.device("cuda", 0) is answered from the Python hook's
 * cache of (device made, device returned) and counted at its call site; a first sight, keywords, a subclass
 * or an active torch function mode go to the Python constructor.
 *
 * Counting is patches/_wrappers.note's hit path: seen[(id(code), lasti, api, old)][0] += 1 in the thread's
 * table; a site not counted yet goes to Python, which records it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h> /* PyMemberDef, T_OBJECT, READONLY (Python 3.10, 3.11) */
#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h> /* PyFrameObject's f_lasti (Python 3.10) */
#endif

static PyObject *one;       /* the int 1 */
static PyObject *seen_name; /* "seen" */
static PyObject *type_name; /* "type" */
static PyObject *cuda_name; /* "cuda" */

/* ---- counting at the caller's site --------------------------------------------------------------------- */

/* the key of the last site counted: a loop calling at one site does not build its key again. The key is
 * still looked up each time (the report may have been reset since), by identity */
static struct {
    PyCodeObject *code; /* strong: its address is never reused while remembered */
    int lasti;
    PyObject *api;      /* strong */
    PyObject *old;      /* strong */
    PyObject *key;      /* strong: (id(code), lasti, api, old) */
} last;

static void
forget_last_site(void)
{
    Py_CLEAR(last.code);
    Py_CLEAR(last.api);
    Py_CLEAR(last.old);
    Py_CLEAR(last.key);
}

/* seen[(id(code), lasti, api, old)][0] += 1 for the calling Python frame: 0 when counted, 1 when Python must
 * record it (the first call at this site, or in this thread), -1 on error */
static int
count_at_caller(PyObject *per_thread, PyObject *api, PyObject *old)
{
    PyFrameObject *frame = PyEval_GetFrame();
    if (frame == NULL) {
        return 1;
    }
    PyObject *seen = PyObject_GetAttr(per_thread, seen_name);
    if (seen == NULL) { /* this thread's first translation */
        PyErr_Clear();
        return 1;
    }
    PyCodeObject *code = PyFrame_GetCode(frame);
#if PY_VERSION_HEX >= 0x030B0000
    int lasti = PyFrame_GetLasti(frame);
#else
    int lasti = frame->f_lasti * 2; /* in bytes, as frame.f_lasti */
#endif
    int result = 1;
    PyObject *key;
    if (code == last.code && lasti == last.lasti && api == last.api && old == last.old) {
        key = Py_NewRef(last.key);
    }
    else if ((key = Py_BuildValue("(NiOO)", PyLong_FromVoidPtr(code), lasti, api, old)) == NULL) {
        result = -1;
        goto done;
    }
    PyObject *entry = PyDict_Check(seen) ? PyDict_GetItemWithError(seen, key) : NULL; /* borrowed */
    if (entry != NULL && PyList_CheckExact(entry) && PyList_GET_SIZE(entry) > 0) {
        PyObject *count = PyNumber_Add(PyList_GET_ITEM(entry, 0), one);
        if (count == NULL) {
            result = -1;
        }
        else {
            PyList_SetItem(entry, 0, count); /* steals count */
            result = 0;
            if (key != last.key) {
                Py_XSETREF(last.code, (PyCodeObject *)Py_NewRef(code));
                Py_XSETREF(last.api, Py_NewRef(api));
                Py_XSETREF(last.old, Py_NewRef(old));
                Py_XSETREF(last.key, Py_NewRef(key));
                last.lasti = lasti;
            }
        }
    }
    else if (PyErr_Occurred()) {
        result = -1;
    }
    Py_DECREF(key);
done:
    Py_DECREF(code);
    Py_DECREF(seen);
    return result;
}

/* count one translation old -> new at the caller's site, or let first_sight(old, new) record it */
static int
record(PyObject *per_thread, PyObject *api, PyObject *first_sight, PyObject *old, PyObject *new)
{
    int counted = count_at_caller(per_thread, api, old);
    if (counted <= 0) {
        return counted;
    }
    PyObject *recorded = PyObject_CallFunctionObjArgs(first_sight, old, new, NULL);
    if (recorded == NULL) {
        return -1;
    }
    Py_DECREF(recorded);
    return 0;
}

/* ---- KeywordGate --------------------------------------------------------------------------------------- */
#define GATE_MAX_ARGS 16

typedef struct {
    PyObject_HEAD
    PyObject *original;    /* the untouched builtin */
    PyObject *name;        /* the device keyword (interned str) */
    PyObject *slow;        /* the pure-Python wrapper: translates, records, calls the original */
    PyObject *api;         /* the api part of the site key ("torch.zeros") */
    PyObject *strings;     /* dict: CUDA device string -> its translation (ascend_shim.devices) */
    PyObject *device_type; /* torch.device */
    PyObject *per_thread;  /* the report's threading.local (.seen) */
    PyObject *first_sight; /* called (old, new) for a site not counted yet */
    Py_ssize_t position;   /* where the device may also come positionally (Tensor.to: 1, after self), or -1 */
    PyObject *plain;       /* a type that, found at `position`, means no device at all (torch.dtype), or NULL */
    PyObject *dict;        /* __name__, __wrapped__, __doc__ ... */
    vectorcallfunc vectorcall;
} GateObject;

/* 0: the value needs no translation; 1: translated into *new (a new reference); 2: Python must decide */
static int
gate_classify(GateObject *self, PyObject *value, PyObject **new)
{
    if (value == Py_None) {
        return 0;
    }
    PyTypeObject *kind = Py_TYPE(value);
    if (kind == &PyUnicode_Type) {
        PyObject *known = PyDict_GetItemWithError(self->strings, value); /* borrowed */
        if (known != NULL) {
            *new = Py_NewRef(known);
            return 1;
        }
        if (PyErr_Occurred()) {
            return -1;
        }
        return PyUnicode_Tailmatch(value, cuda_name, 0, 4, -1) ? 2 : 0;
    }
    if ((PyObject *)kind == self->device_type) {
        PyObject *type = PyObject_GetAttr(value, type_name);
        if (type == NULL) {
            return -1;
        }
        int cuda = PyUnicode_Compare(type, cuda_name) == 0;
        Py_DECREF(type);
        return cuda ? 2 : 0;
    }
    return 2;
}

static PyObject *
gate_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    GateObject *self = (GateObject *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    Py_ssize_t at = -1; /* where the device value is in args */
    if (self->position >= 0 && nargs > self->position) {
        if ((PyObject *)Py_TYPE(args[self->position]) == self->plain) {
            return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
        }
        at = self->position;
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        if (key == self->name || PyUnicode_Compare(key, self->name) == 0) {
            if (at >= 0) { /* given twice: Python (and torch) say what that means */
                return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
            }
            at = nargs + i;
            break;
        }
    }
    if (at < 0) {
        return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    }
    PyObject *value = args[at], *new = NULL;
    int how = gate_classify(self, value, &new);
    if (how < 0) {
        return NULL;
    }
    if (how == 0) {
        return PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    }
    if (how == 2 || nargs + nkw > GATE_MAX_ARGS) {
        Py_XDECREF(new);
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    }
    if (record(self->per_thread, self->api, self->first_sight, value, new) < 0) {
        Py_DECREF(new);
        return NULL;
    }
    PyObject *changed[GATE_MAX_ARGS];
    memcpy(changed, args, (nargs + nkw) * sizeof(PyObject *));
    changed[at] = new;
    PyObject *result = PyObject_Vectorcall(self->original, changed, nargs, kwnames);
    Py_DECREF(new);
    return result;
}

static PyObject *
gate_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *original, *name, *slow, *api, *strings, *device_type, *per_thread, *first_sight, *plain = NULL;
    Py_ssize_t position = -1;
    static char *kwlist[] = {"original", "name", "slow", "api", "strings", "device_type", "per_thread",
                             "first_sight", "position", "plain", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OUOUO!OOO|$nO!:KeywordGate", kwlist, &original, &name, &slow,
                                     &api, &PyDict_Type, &strings, &device_type, &per_thread, &first_sight,
                                     &position, &PyType_Type, &plain)) {
        return NULL;
    }
    if (!PyCallable_Check(original) || !PyCallable_Check(slow) || !PyCallable_Check(first_sight)) {
        PyErr_SetString(PyExc_TypeError, "KeywordGate: original, slow and first_sight must be callable");
        return NULL;
    }
    GateObject *self = (GateObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(name);
    PyUnicode_InternInPlace(&name);
    self->name = name;
    self->original = Py_NewRef(original);
    self->slow = Py_NewRef(slow);
    self->api = Py_NewRef(api);
    self->strings = Py_NewRef(strings);
    self->device_type = Py_NewRef(device_type);
    self->per_thread = Py_NewRef(per_thread);
    self->first_sight = Py_NewRef(first_sight);
    self->position = position;
    self->plain = Py_XNewRef(plain);
    self->dict = NULL;
    self->vectorcall = gate_vectorcall;
    return (PyObject *)self;
}

static int
gate_traverse(GateObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->original);
    Py_VISIT(self->slow);
    Py_VISIT(self->strings);
    Py_VISIT(self->device_type);
    Py_VISIT(self->per_thread);
    Py_VISIT(self->first_sight);
    Py_VISIT(self->plain);
    Py_VISIT(self->dict);
    return 0;
}

static int
gate_clear(GateObject *self)
{
    Py_CLEAR(self->original);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->strings);
    Py_CLEAR(self->device_type);
    Py_CLEAR(self->per_thread);
    Py_CLEAR(self->first_sight);
    Py_CLEAR(self->plain);
    Py_CLEAR(self->dict);
    return 0;
}

static void
gate_dealloc(GateObject *self)
{
    PyObject_GC_UnTrack(self);
    gate_clear(self);
    Py_CLEAR(self->name);
    Py_CLEAR(self->api);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
gate_repr(GateObject *self)
{
    return PyObject_Repr(self->original);
}

/* pickled by reference, as the function it stands for: pickle finds it as <__module__>.<__name__> (torch.zeros) */
static PyObject *
gate_reduce(GateObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyObject_GetAttrString((PyObject *)self, "__name__");
}

static PyMethodDef gate_methods[] = {
    {"__reduce__", (PyCFunction)gate_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef gate_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(GateObject, vectorcall), READONLY, NULL},
    {"__dictoffset__", T_PYSSIZET, offsetof(GateObject, dict), READONLY, NULL},
    {"original", T_OBJECT, offsetof(GateObject, original), READONLY, "the builtin, called untouched"},
    {"slow", T_OBJECT, offsetof(GateObject, slow), READONLY, "the pure-Python wrapper"},
    {"keyword", T_OBJECT, offsetof(GateObject, name), READONLY, "the device keyword"},
    {NULL},
};

static PyGetSetDef gate_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject GateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ascend_shim._speedups.KeywordGate",
    .tp_doc = PyDoc_STR("KeywordGate(original, name, slow, api, strings, device_type, per_thread, first_sight): "
                        "the device keyword `name` of the builtin `original` read in C (see the module)."),
    .tp_basicsize = sizeof(GateObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = gate_new,
    .tp_dealloc = (destructor)gate_dealloc,
    .tp_traverse = (traverseproc)gate_traverse,
    .tp_clear = (inquiry)gate_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(GateObject, vectorcall),
    .tp_dictoffset = offsetof(GateObject, dict),
    .tp_repr = (reprfunc)gate_repr,
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_methods = gate_methods,
    .tp_members = gate_members,
    .tp_getset = gate_getset,
};

/* MethodGate: a KeywordGate that binds as a method when it is a class attribute (Tensor.to), as the Python
 * function it replaces did; a KeywordGate, like the builtin function it stands for, does not */
static PyObject *
method_gate_get(PyObject *self, PyObject *obj, PyObject *Py_UNUSED(type))
{
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    return PyMethod_New(self, obj);
}

static PyTypeObject MethodGateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ascend_shim._speedups.MethodGate",
    .tp_doc = PyDoc_STR("A KeywordGate that binds as a method (see the module)."),
    .tp_basicsize = sizeof(GateObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_base = &GateType,
    .tp_dealloc = (destructor)gate_dealloc,
    .tp_traverse = (traverseproc)gate_traverse,
    .tp_clear = (inquiry)gate_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(GateObject, vectorcall),
    .tp_descr_get = method_gate_get,
};

/* ---- torch.device's constructor slot ------------------------------------------------------------------- */
static struct {
    PyTypeObject *cls;     /* the hooked type (torch.device) */
    newfunc fallback;      /* the slot found at install: CPython's slot_tp_new -> the Python __new__ */
    PyObject *cache;       /* dict: constructor args -> (device made, device returned) */
    PyObject *modes;       /* torch._C._len_torch_function_stack */
    PyObject *per_thread;
    PyObject *api;         /* "torch.device" */
    PyObject *first_sight; /* called (made, new) for a site not counted yet */
} dev;

static PyObject *
device_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (type != dev.cls || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        return dev.fallback(type, args, kwds);
    }
    PyObject *known = PyDict_GetItemWithError(dev.cache, args); /* borrowed */
    if (known == NULL || !PyTuple_CheckExact(known) || PyTuple_GET_SIZE(known) != 2) {
        PyErr_Clear(); /* a miss, or unhashable arguments: the Python constructor decides */
        return dev.fallback(type, args, kwds);
    }
    PyObject *depth = PyObject_CallNoArgs(dev.modes);
    if (depth == NULL) {
        return NULL;
    }
    int moded = PyObject_IsTrue(depth);
    Py_DECREF(depth);
    if (moded != 0) { /* a torch function mode may answer torch.device itself */
        return moded < 0 ? NULL : dev.fallback(type, args, kwds);
    }
    PyObject *made = Py_NewRef(PyTuple_GET_ITEM(known, 0)), *result = Py_NewRef(PyTuple_GET_ITEM(known, 1));
    int failed = result != made && record(dev.per_thread, dev.api, dev.first_sight, made, result) < 0;
    Py_DECREF(made);
    if (failed) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

static PyObject *
hook_device_new(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *cls, *cache, *modes, *per_thread, *api, *first_sight;
    if (!PyArg_ParseTuple(args, "O!O!OOUO:hook_device_new", &PyType_Type, &cls, &PyDict_Type, &cache, &modes,
                          &per_thread, &api, &first_sight)) {
        return NULL;
    }
    if (dev.cls != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "hook_device_new: a constructor is already hooked");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    dev.fallback = type->tp_new;
    dev.cls = (PyTypeObject *)Py_NewRef(cls);
    dev.cache = Py_NewRef(cache);
    dev.modes = Py_NewRef(modes);
    dev.per_thread = Py_NewRef(per_thread);
    dev.api = Py_NewRef(api);
    dev.first_sight = Py_NewRef(first_sight);
    type->tp_new = device_new;
    PyType_Modified(type);
    Py_RETURN_NONE;
}

/* gives the slot back to what it was at install (the caller then restores the type's own constructor) */
static PyObject *
unhook_device_new(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    if (dev.cls == NULL) {
        Py_RETURN_NONE;
    }
    if (dev.cls->tp_new == device_new) {
        dev.cls->tp_new = dev.fallback;
        PyType_Modified(dev.cls);
    }
    forget_last_site();
    Py_CLEAR(dev.cls);
    Py_CLEAR(dev.cache);
    Py_CLEAR(dev.modes);
    Py_CLEAR(dev.per_thread);
    Py_CLEAR(dev.api);
    Py_CLEAR(dev.first_sight);
    dev.fallback = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef speedups_functions[] = {
    {"hook_device_new", hook_device_new, METH_VARARGS,
     "hook_device_new(cls, cache, modes, per_thread, api, first_sight): cls(*args) answered from cache in C "
     "(see the module); the slot found becomes the fallback."},
    {"unhook_device_new", unhook_device_new, METH_NOARGS, "Give the constructor slot back to the fallback."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ascend_shim._speedups",
    .m_doc = "Compiled fast paths of the shim's hottest wrappers; the pure-Python code is the reference.",
    .m_size = -1,
    .m_methods = speedups_functions,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&GateType) < 0 || PyType_Ready(&MethodGateType) < 0) {
        return NULL;
    }
    if ((one == NULL && (one = PyLong_FromLong(1)) == NULL)
        || (seen_name == NULL && (seen_name = PyUnicode_InternFromString("seen")) == NULL)
        || (type_name == NULL && (type_name = PyUnicode_InternFromString("type")) == NULL)
        || (cuda_name == NULL && (cuda_name = PyUnicode_InternFromString("cuda")) == NULL)) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "KeywordGate", (PyObject *)&GateType) < 0
        || PyModule_AddObjectRef(module, "MethodGate", (PyObject *)&MethodGateType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
