/* Counts the interpreter's memory allocations (PyMem and PyObject domains: every object,
   every buffer), for bench/rr_path.py's work units. Built on the fly by that script:
   cc -shared -fPIC -O2 $(python3-config --includes) alloc_count.c -o _alloc_count.so */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyMemAllocatorEx orig_mem, orig_obj;
static unsigned long long count = 0;
static int installed = 0;

static void *c_malloc(void *ctx, size_t n) {
    count++;
    return ((PyMemAllocatorEx *)ctx)->malloc(((PyMemAllocatorEx *)ctx)->ctx, n);
}
static void *c_calloc(void *ctx, size_t k, size_t n) {
    count++;
    return ((PyMemAllocatorEx *)ctx)->calloc(((PyMemAllocatorEx *)ctx)->ctx, k, n);
}
static void *c_realloc(void *ctx, void *p, size_t n) {
    if (p == NULL) count++;
    return ((PyMemAllocatorEx *)ctx)->realloc(((PyMemAllocatorEx *)ctx)->ctx, p, n);
}
static void c_free(void *ctx, void *p) {
    ((PyMemAllocatorEx *)ctx)->free(((PyMemAllocatorEx *)ctx)->ctx, p);
}

static PyObject *install(PyObject *self, PyObject *unused) {
    if (!installed) {
        PyMemAllocatorEx a;
        PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &orig_mem);
        PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &orig_obj);
        a.malloc = c_malloc; a.calloc = c_calloc; a.realloc = c_realloc; a.free = c_free;
        a.ctx = &orig_mem;
        PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &a);
        a.ctx = &orig_obj;
        PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &a);
        installed = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *get(PyObject *self, PyObject *unused) {
    unsigned long long c = count;  /* read before the result object is made */
    return PyLong_FromUnsignedLongLong(c);
}

static PyMethodDef methods[] = {
    {"install", install, METH_NOARGS, "start counting allocations"},
    {"count", get, METH_NOARGS, "allocations counted so far"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_alloc_count", NULL, -1, methods};

PyMODINIT_FUNC PyInit__alloc_count(void) { return PyModule_Create(&module); }
