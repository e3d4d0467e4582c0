/* Python glue shared by the native cores: datagrams in and out as flat buffers, and the
 * serving call that releases the GIL (its Python side is ina/net/native.py).
 *
 * Frames cross as five buffers: the bytes, each datagram's start and length (int64), and each
 * datagram's peer as IPv4 address and port (uint32 and uint16, host order). Include after
 * Python.h, ina_udp.h and ina_wire.h.
 */
#ifndef INA_PYNODE_H
#define INA_PYNODE_H

#include "ina_udp.h"

/* Lock a core's loop from Python without holding the GIL while waiting (the loop may be
 * sending for a while; a thread waiting for the GIL must not block it). */
static inline void ina_py_lock(ina_loop *loop) {
    if (pthread_mutex_trylock(&loop->lock) == 0) return;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&loop->lock);
    Py_END_ALLOW_THREADS
}

static inline void ina_py_unlock(ina_loop *loop) { pthread_mutex_unlock(&loop->lock); }

/* The queued datagrams as (data, start, length, ip, port) and the queue emptied; NULL on error. */
static inline PyObject *ina_py_take(ina_tx *tx) {
    size_t n = tx->count;
    PyObject *data = PyBytes_FromStringAndSize((const char *)tx->arena, (Py_ssize_t)tx->used);
    PyObject *start = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
    PyObject *length = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
    PyObject *ip = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
    PyObject *port = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 2));
    PyObject *out = NULL;
    if (data && start && length && ip && port) {
        int64_t *s = (int64_t *)PyBytes_AS_STRING(start), *l = (int64_t *)PyBytes_AS_STRING(length);
        uint32_t *a = (uint32_t *)PyBytes_AS_STRING(ip);
        uint16_t *p = (uint16_t *)PyBytes_AS_STRING(port);
        for (size_t i = 0; i < n; i++) {
            s[i] = (int64_t)tx->offset[i], l[i] = tx->length[i];
            a[i] = tx->destination[i].ip, p[i] = tx->destination[i].port;
        }
        out = PyTuple_Pack(5, data, start, length, ip, port);
    }
    Py_XDECREF(data), Py_XDECREF(start), Py_XDECREF(length), Py_XDECREF(ip), Py_XDECREF(port);
    ina_tx_clear(tx);
    return out;
}

/* Hand the frames in `args` = (data, start, length, ip, port, now) to node->receive in order, under
 * the loop's lock, then call `after(node->self, now, tx)` if given (a node that answers a whole batch
 * at once, as the worker engine sends what the batch's results let go), and return what it queued
 * (ina_py_take). Bounds are checked: a start or length outside `data` is a ValueError, not a read
 * out of bounds. */
static inline PyObject *ina_py_receive_then(ina_loop *loop, const ina_node *node, PyObject *args,
                                            void (*after)(void *self, double now, ina_tx *tx)) {
    Py_buffer data, start, length, ip, port;
    double now;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*d", &data, &start, &length, &ip, &port, &now)) return NULL;
    PyObject *out = NULL;
    size_t n = (size_t)start.len / 8;
    if ((size_t)length.len != 8 * n || (size_t)ip.len != 4 * n || (size_t)port.len != 2 * n) {
        PyErr_SetString(PyExc_ValueError, "start, length, ip and port must describe the same number of datagrams");
        goto done;
    }
    const int64_t *s = start.buf, *l = length.buf;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < 0 || l[i] < 0 || s[i] > data.len || l[i] > data.len - s[i]) {
            PyErr_SetString(PyExc_ValueError, "a datagram lies outside the buffer");
            goto done;
        }
    }
    ina_py_lock(loop);
    const uint32_t *a = ip.buf;
    const uint16_t *p = port.buf;
    for (size_t i = 0; i < n; i++) {
        ina_addr source = {a[i], p[i]};
        node->receive(node->self, (const uint8_t *)data.buf + s[i], (size_t)l[i], source, now, &loop->tx);
    }
    if (after) after(node->self, now, &loop->tx);
    out = ina_py_take(&loop->tx);
    ina_py_unlock(loop);
done:
    PyBuffer_Release(&data), PyBuffer_Release(&start), PyBuffer_Release(&length);
    PyBuffer_Release(&ip), PyBuffer_Release(&port);
    return out;
}

/* ina_py_receive_then without an `after`: each datagram on its own. */
static inline PyObject *ina_py_receive(ina_loop *loop, const ina_node *node, PyObject *args) {
    return ina_py_receive_then(loop, node, args, NULL);
}

/* node->tick(now) under the lock; returns what it queued (ina_py_take). */
static inline PyObject *ina_py_tick(ina_loop *loop, const ina_node *node, PyObject *args) {
    double now;
    if (!PyArg_ParseTuple(args, "d", &now)) return NULL;
    ina_py_lock(loop);
    node->tick(node->self, now, &loop->tx);
    PyObject *out = ina_py_take(&loop->tx);
    ina_py_unlock(loop);
    return out;
}

/* node->next_deadline() under the lock, as a float or None. */
static inline PyObject *ina_py_next_deadline(ina_loop *loop, const ina_node *node) {
    ina_py_lock(loop);
    double deadline = node->next_deadline(node->self);
    ina_py_unlock(loop);
    if (isinf(deadline)) Py_RETURN_NONE;
    return PyFloat_FromDouble(deadline);
}

/* Serve the socket `fd`, reading a RESULT group's socket beside it (args: (fd[, group])), until the loop is stopped, with the GIL released; Python
 * signal handlers run between slices, so Ctrl-C reaches a process that serves in its main thread. */
static inline PyObject *ina_py_serve(ina_loop *loop, const ina_node *node, PyObject *args) {
    int fd, group = -1;
    if (!PyArg_ParseTuple(args, "i|i", &fd, &group)) return NULL;
    ina_py_lock(loop);
    if (loop->fd >= 0) {
        ina_py_unlock(loop);
        PyErr_SetString(PyExc_RuntimeError, "this core is already serving a socket");
        return NULL;
    }
    ina_loop_attach(loop, fd, group);
    ina_py_unlock(loop);
    int status;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS status = ina_serve(loop, node, 0.05);
        Py_END_ALLOW_THREADS
        if (status != INA_SERVE_AGAIN) break;
        if (PyErr_CheckSignals() < 0) break;
    }
    ina_py_lock(loop);
    loop->fd = loop->group = -1;
    ina_py_unlock(loop);
    if (PyErr_Occurred()) return NULL;
    if (status == INA_SERVE_FAILED) {
        PyErr_SetString(PyExc_OSError, loop->error);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Python `stop()`: ask the loop to return, now or as soon as it starts (safe from any thread). */
static inline PyObject *ina_py_stop(ina_loop *loop) {
    ina_loop_stop(loop);
    Py_RETURN_NONE;
}

/* A new module holding `type` as `type_name` and, where `names` is given, the tuple of its `count`
 * counter names as COUNTERS (what the Python wrapper checks against the reference's): the whole
 * module init of a native core. NULL with the Python error set on failure. */
static inline PyObject *ina_py_module(PyModuleDef *definition, PyTypeObject *type, const char *type_name,
                                      const char *const *names, int count) {
    if (PyType_Ready(type) < 0) return NULL;
    PyObject *module = PyModule_Create(definition);
    if (!module) return NULL;
    if (PyModule_AddObjectRef(module, type_name, (PyObject *)type) < 0) goto fail;
    if (names) {
        PyObject *tuple = PyTuple_New(count);
        if (!tuple) goto fail;
        for (int i = 0; i < count; i++) {
            PyObject *name = PyUnicode_FromString(names[i]);
            if (!name) {
                Py_DECREF(tuple);
                goto fail;
            }
            PyTuple_SET_ITEM(tuple, i, name);
        }
        if (PyModule_AddObject(module, "COUNTERS", tuple) < 0) {
            Py_DECREF(tuple);
            goto fail;
        }
    }
    return module;
fail:
    Py_DECREF(module);
    return NULL;
}

/* Datagrams the kernel refused to send since the core was made (Python `refused()`). */
static inline PyObject *ina_py_refused(ina_loop *loop) {
    ina_py_lock(loop);
    uint64_t refused = loop->refused;
    ina_py_unlock(loop);
    return PyLong_FromUnsignedLongLong(refused);
}

#endif
