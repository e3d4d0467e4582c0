/* Batched UDP I/O and the packet loop of the native paths (the C twin of ina/net/udp.py).
 *
 * - `ina_rx`: recvmmsg into fixed buffers; with UDP GRO on, a merged message is cut back into
 *   its datagrams (the kernel reports their size in a control message).
 * - `ina_tx`: datagrams queued in one arena, sent with sendmmsg; consecutive datagrams of one
 *   size to one destination leave as one UDP GSO message. Each destination's order is kept.
 * - `ina_serve`: receive a batch, hand each datagram to a node, run its timers, send; the caller
 *   releases the GIL around it. Control-plane calls from other threads take `loop->lock`, which
 *   the loop holds while a batch or a tick is processed (never while it waits).
 *
 * Header-only, Linux: each extension compiles its own copy.
 */
#ifndef INA_UDP_H
#define INA_UDP_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define INA_MAX_DATAGRAM 65536 /* larger than any UDP payload or GRO run: nothing is truncated */
#define INA_MAX_PAYLOAD 65507  /* the most one UDP message (a whole GSO run) may carry */
#define INA_MAX_SEGMENTS 128   /* UDP_MAX_SEGMENTS of newer kernels (6.18 here); GRO hands over as many */
#define INA_OLD_MAX_SEGMENTS 64 /* UDP_MAX_SEGMENTS of older kernels: tried when they refuse more */
#define INA_CONTROL_SPACE CMSG_SPACE(sizeof(int))

/* An IPv4 peer, both fields in host order. */
typedef struct {
    uint32_t ip;
    uint16_t port;
} ina_addr;

static inline int ina_addr_eq(ina_addr a, ina_addr b) { return a.ip == b.ip && a.port == b.port; }

static inline double ina_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* Python's time.monotonic() */
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ------------------------------------------------------------------ receive */

typedef struct {
    unsigned messages;
    int gro;
    uint8_t *buffers; /* messages * INA_MAX_DATAGRAM */
    struct mmsghdr *headers;
    struct iovec *iov;
    struct sockaddr_in *names;
    uint8_t *controls; /* messages * INA_CONTROL_SPACE */
    /* The datagrams of the last ina_rx_recv: valid until the next call. */
    size_t count;
    const uint8_t **data;
    uint32_t *length;
    ina_addr *source;
} ina_rx;

/* Try to turn on UDP GRO for `fd`: 1 if the kernel has it. */
static inline int ina_enable_gro(int fd) {
    int on = 1;
    return setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof on) == 0;
}

/* 0, or -1 when out of memory. `gro`: the socket has UDP GRO on (ina_enable_gro). */
static inline int ina_rx_init(ina_rx *rx, unsigned messages, int gro) {
    memset(rx, 0, sizeof *rx);
    rx->messages = messages, rx->gro = gro;
    size_t most = (size_t)messages * INA_MAX_SEGMENTS;
    rx->buffers = malloc((size_t)messages * INA_MAX_DATAGRAM);
    rx->headers = calloc(messages, sizeof *rx->headers);
    rx->iov = calloc(messages, sizeof *rx->iov);
    rx->names = calloc(messages, sizeof *rx->names);
    rx->controls = calloc(messages, INA_CONTROL_SPACE);
    rx->data = malloc(most * sizeof *rx->data);
    rx->length = malloc(most * sizeof *rx->length);
    rx->source = malloc(most * sizeof *rx->source);
    if (!rx->buffers || !rx->headers || !rx->iov || !rx->names || !rx->controls || !rx->data || !rx->length || !rx->source)
        return -1;
    for (unsigned i = 0; i < messages; i++) {
        rx->iov[i].iov_base = rx->buffers + (size_t)i * INA_MAX_DATAGRAM;
        rx->iov[i].iov_len = INA_MAX_DATAGRAM;
    }
    return 0;
}

static inline void ina_rx_free(ina_rx *rx) {
    free(rx->buffers), free(rx->headers), free(rx->iov), free(rx->names), free(rx->controls);
    free(rx->data), free(rx->length), free(rx->source);
    memset(rx, 0, sizeof *rx);
}

/* The GRO segment size of message i, or 0 when it holds one datagram. */
static inline uint32_t ina_rx_segment(const ina_rx *rx, unsigned i) {
    struct msghdr *m = &rx->headers[i].msg_hdr;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int size;
            memcpy(&size, CMSG_DATA(c), sizeof size);
            return size > 0 ? (uint32_t)size : 0;
        }
    }
    return 0;
}

/* Receive what is waiting, without blocking: the number of datagrams (also rx->count), or -errno. */
static inline long ina_rx_recv(ina_rx *rx, int fd) {
    rx->count = 0;
    for (unsigned i = 0; i < rx->messages; i++) {
        struct msghdr *m = &rx->headers[i].msg_hdr;
        m->msg_name = &rx->names[i], m->msg_namelen = sizeof rx->names[i];
        m->msg_iov = &rx->iov[i], m->msg_iovlen = 1;
        m->msg_control = rx->gro ? rx->controls + (size_t)i * INA_CONTROL_SPACE : NULL;
        m->msg_controllen = rx->gro ? INA_CONTROL_SPACE : 0;
        m->msg_flags = 0;
    }
    int got = recvmmsg(fd, rx->headers, rx->messages, MSG_DONTWAIT, NULL);
    if (got < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
    for (int i = 0; i < got; i++) {
        uint32_t length = rx->headers[i].msg_len, size = rx->gro ? ina_rx_segment(rx, (unsigned)i) : 0;
        if (size == 0 || size > length) size = length ? length : 1;
        ina_addr source = {ntohl(rx->names[i].sin_addr.s_addr), ntohs(rx->names[i].sin_port)};
        const uint8_t *base = rx->buffers + (size_t)i * INA_MAX_DATAGRAM;
        uint32_t at = 0;
        do { /* a 0-byte datagram is one too */
            uint32_t piece = length - at < size ? length - at : size;
            rx->data[rx->count] = base + at, rx->length[rx->count] = piece, rx->source[rx->count] = source;
            rx->count++, at += piece;
        } while (at < length && rx->count < (size_t)rx->messages * INA_MAX_SEGMENTS);
    }
    return (long)rx->count;
}

/* ------------------------------------------------------------------ send */

typedef struct {
    uint8_t *arena;
    size_t used, room;
    size_t count, capacity;
    size_t *offset;
    uint32_t *length;
    ina_addr *destination;
    int gso;           /* 1: group runs into GSO messages; cleared when the path cannot segment */
    unsigned segments; /* the most datagrams per GSO message, lowered when the kernel refuses as many */
    /* scratch for ina_tx_flush */
    size_t *order;
    uint32_t *group;
} ina_tx;

static inline void ina_tx_init(ina_tx *tx, int gso) {
    memset(tx, 0, sizeof *tx);
    tx->gso = gso, tx->segments = INA_MAX_SEGMENTS;
}

static inline void ina_tx_free(ina_tx *tx) {
    free(tx->arena), free(tx->offset), free(tx->length), free(tx->destination), free(tx->order), free(tx->group);
    memset(tx, 0, sizeof *tx);
}

static inline void ina_tx_clear(ina_tx *tx) { tx->used = tx->count = 0; }

/* Room in the queue's index for one more datagram: 0, or -1 when out of memory. */
static inline int ina_tx_room_for_one(ina_tx *tx) {
    if (tx->count < tx->capacity) return 0;
    size_t capacity = tx->capacity ? 2 * tx->capacity : 256;
    size_t *offset = realloc(tx->offset, capacity * sizeof *offset);
    if (offset) tx->offset = offset;
    uint32_t *lengths = realloc(tx->length, capacity * sizeof *lengths);
    if (lengths) tx->length = lengths;
    ina_addr *destination = realloc(tx->destination, capacity * sizeof *destination);
    if (destination) tx->destination = destination;
    if (!offset || !lengths || !destination) return -1;
    tx->capacity = capacity;
    return 0;
}

/* Room for one more datagram of `length` bytes to `to`: the pointer to fill, NULL when out of
 * memory. It stays valid only until the next ina_tx_add (the arena may move). */
static inline uint8_t *ina_tx_add(ina_tx *tx, ina_addr to, size_t length) {
    if (ina_tx_room_for_one(tx) < 0) return NULL;
    if (tx->used + length > tx->room) {
        size_t room = tx->room ? 2 * tx->room : 1 << 16;
        while (room < tx->used + length) room *= 2;
        uint8_t *arena = realloc(tx->arena, room);
        if (!arena) return NULL;
        tx->arena = arena, tx->room = room;
    }
    tx->offset[tx->count] = tx->used, tx->length[tx->count] = (uint32_t)length, tx->destination[tx->count] = to;
    tx->count++;
    tx->used += length;
    return tx->arena + tx->used - length;
}

/* The last datagram queued, queued again to `to`: its bytes are shared, not copied (a result to
 * each of a job's workers). 0, or -1 when out of memory or nothing is queued. */
static inline int ina_tx_repeat(ina_tx *tx, ina_addr to) {
    if (tx->count == 0 || ina_tx_room_for_one(tx) < 0) return -1;
    size_t last = tx->count - 1;
    tx->offset[tx->count] = tx->offset[last], tx->length[tx->count] = tx->length[last], tx->destination[tx->count] = to;
    tx->count++;
    return 0;
}

/* Datagram i of the queue (for bindings that hand the queue to Python). */
static inline const uint8_t *ina_tx_data(const ina_tx *tx, size_t i) { return tx->arena + tx->offset[i]; }

static inline void ina_sockaddr(struct sockaddr_in *s, ina_addr a) {
    memset(s, 0, sizeof *s);
    s->sin_family = AF_INET, s->sin_port = htons(a.port), s->sin_addr.s_addr = htonl(a.ip);
}

/* The queue in send order: stably grouped by destination (first appearance first). */
static inline int ina_tx_order(ina_tx *tx) {
    size_t n = tx->count;
    size_t *order = realloc(tx->order, n * sizeof *order);
    uint32_t *group = realloc(tx->group, n * sizeof *group);
    if (order) tx->order = order;
    if (group) tx->group = group;
    if (!order || !group) return -1;
    /* Few destinations per batch (the job's workers and its PS): a linear table of them. */
    ina_addr seen[64];
    size_t counts[65] = {0}, distinct = 0;
    for (size_t i = 0; i < n; i++) {
        size_t g = 0;
        while (g < distinct && !ina_addr_eq(seen[g], tx->destination[i])) g++;
        if (g == distinct) {
            if (distinct == 64) { /* many destinations: plain queue order, which keeps every order too */
                for (size_t j = 0; j < n; j++) order[j] = j;
                return 0;
            }
            seen[distinct++] = tx->destination[i];
        }
        group[i] = (uint32_t)g, counts[g + 1]++;
    }
    for (size_t g = 1; g <= distinct; g++) counts[g] += counts[g - 1];
    for (size_t i = 0; i < n; i++) order[counts[group[i]]++] = i;
    return 0;
}

/* Send one datagram per message from position `from` of the order on (GSO is off or failed). */
static inline size_t ina_tx_send_plain(ina_tx *tx, int fd, size_t from) {
    size_t refused = 0;
    for (size_t k = from; k < tx->count; k++) {
        size_t i = tx->order[k];
        struct sockaddr_in to;
        ina_sockaddr(&to, tx->destination[i]);
        while (sendto(fd, tx->arena + tx->offset[i], tx->length[i], 0, (struct sockaddr *)&to, sizeof to) < 0) {
            if (errno != EINTR) {
                refused++;
                break;
            }
        }
    }
    return refused;
}

/* Send every queued datagram (blocking while the socket buffer is full) and empty the queue:
 * the number the kernel refused (for example, no route), or -1 when out of memory. */
static inline long ina_tx_flush(ina_tx *tx, int fd) {
    enum { BATCH = 32 };
    if (tx->count == 0) return 0;
    if (ina_tx_order(tx) < 0) return -1;
    size_t refused = 0, k = 0;
    struct mmsghdr headers[BATCH];
    struct iovec iov[BATCH * INA_MAX_SEGMENTS];
    struct sockaddr_in names[BATCH];
    uint8_t controls[BATCH][INA_CONTROL_SPACE];
    size_t first[BATCH + 1];
    while (k < tx->count) {
        unsigned messages = 0, vectors = 0;
        while (messages < BATCH && k < tx->count) { /* one message: a run of one size to one destination */
            size_t i = tx->order[k];
            uint32_t size = tx->length[i];
            size_t cap = tx->gso && size ? INA_MAX_PAYLOAD / size : 1;
            if (cap > tx->segments) cap = tx->segments;
            if (cap < 1) cap = 1;
            struct mmsghdr *h = &headers[messages];
            memset(h, 0, sizeof *h);
            ina_sockaddr(&names[messages], tx->destination[i]);
            h->msg_hdr.msg_name = &names[messages], h->msg_hdr.msg_namelen = sizeof names[messages];
            h->msg_hdr.msg_iov = &iov[vectors];
            first[messages] = k;
            size_t run = 0, parts = 0;
            while (k < tx->count && run < cap) {
                size_t j = tx->order[k];
                if (run && (tx->length[j] != size || !ina_addr_eq(tx->destination[j], tx->destination[i]))) break;
                uint8_t *data = tx->arena + tx->offset[j];
                if (parts && (uint8_t *)iov[vectors - 1].iov_base + iov[vectors - 1].iov_len == data) {
                    iov[vectors - 1].iov_len += size; /* queued back to back: one part, fewer for the kernel to walk */
                } else {
                    iov[vectors].iov_base = data, iov[vectors].iov_len = size;
                    vectors++, parts++;
                }
                run++, k++;
            }
            h->msg_hdr.msg_iovlen = parts;
            if (run > 1) {
                h->msg_hdr.msg_control = controls[messages], h->msg_hdr.msg_controllen = INA_CONTROL_SPACE;
                struct cmsghdr *c = CMSG_FIRSTHDR(&h->msg_hdr);
                c->cmsg_level = SOL_UDP, c->cmsg_type = UDP_SEGMENT, c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
                uint16_t segment = (uint16_t)size;
                memcpy(CMSG_DATA(c), &segment, sizeof segment);
                h->msg_hdr.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
            }
            messages++;
        }
        first[messages] = k;
        unsigned sent = 0;
        while (sent < messages) {
            int done = sendmmsg(fd, headers + sent, messages - sent, 0);
            if (done < 0) {
                if (errno == EINTR) continue;
                size_t datagrams = first[sent + 1] - first[sent];
                if (datagrams > INA_OLD_MAX_SEGMENTS && errno == EINVAL &&
                    tx->segments > INA_OLD_MAX_SEGMENTS) {
                    tx->segments = INA_OLD_MAX_SEGMENTS; /* an older kernel: cut the rest into smaller runs */
                    k = first[sent];
                    break;
                }
                if (datagrams > 1 &&
                    (errno == EINVAL || errno == EIO || errno == ENOPROTOOPT || errno == EMSGSIZE)) {
                    tx->gso = 0; /* this path cannot segment: the rest one datagram at a time */
                    refused += ina_tx_send_plain(tx, fd, first[sent]);
                    ina_tx_clear(tx);
                    return (long)refused;
                }
                refused += first[sent + 1] - first[sent]; /* this message cannot go: skip it */
                done = 1;
            }
            sent += (unsigned)done;
        }
    }
    ina_tx_clear(tx);
    return (long)refused;
}

/* ------------------------------------------------------------------ the packet loop */

/* A packet program as the loop drives it (a native core implements these). */
typedef struct {
    void *self;
    /* One received datagram, in arrival order (the node validates and counts it). */
    void (*receive)(void *self, const uint8_t *data, size_t length, ina_addr source, double now, ina_tx *tx);
    /* Timers due at `now`. */
    void (*tick)(void *self, double now, ina_tx *tx);
    /* When `tick` next has work (monotonic seconds), or INFINITY. */
    double (*next_deadline)(void *self);
} ina_node;

enum { INA_SERVE_STOPPED = 0, INA_SERVE_AGAIN = 1, INA_SERVE_FAILED = -1 };

typedef struct {
    int fd;          /* the bound UDP socket being served (not owned), or -1 */
    int group;       /* a RESULT group's socket read beside it (not owned; a worker's), or -1 */
    int wake;        /* eventfd: wakes a waiting loop (stop, new work) */
    volatile int stop;
    pthread_mutex_t lock;
    ina_rx rx;
    ina_tx tx;
    uint64_t refused;
    char error[160];
} ina_loop;

/* 0, or -1 with loop->error set. The socket comes with ina_loop_attach, when serving starts. */
static inline int ina_loop_init(ina_loop *loop, unsigned messages) {
    memset(loop, 0, sizeof *loop);
    loop->fd = loop->group = -1;
    loop->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&loop->lock, NULL);
    if (loop->wake < 0 || ina_rx_init(&loop->rx, messages, 0) < 0) {
        snprintf(loop->error, sizeof loop->error, "cannot set up the packet loop: %s", strerror(errno ? errno : ENOMEM));
        return -1;
    }
    ina_tx_init(&loop->tx, 0);
    return 0;
}

/* Whether sends may be GSO runs: not under INA_UDP_GSO=0, as ina/net/udp.py's BatchSocket reads it (the testbed's
 * impaired links: their per-packet nftables rules would drop, duplicate or delay a whole run as one packet). */
static inline int ina_gso_allowed(void) {
    const char *gso = getenv("INA_UDP_GSO");
    return gso == NULL || strcmp(gso, "0") != 0;
}

/* Serve the bound UDP socket `fd` from now on, and read `group` (-1: none) beside it, with GRO and GSO where
 * the kernel has them (GSO where INA_UDP_GSO allows it). */
static inline void ina_loop_attach(ina_loop *loop, int fd, int group) {
    int gro = ina_enable_gro(fd);
    if (group >= 0) ina_enable_gro(group);
    loop->fd = fd, loop->group = group, loop->rx.gro = gro;
    loop->tx.gso = gro && ina_gso_allowed(); /* a kernel with GRO has GSO too */
}

static inline void ina_loop_free(ina_loop *loop) {
    if (loop->wake > 0) close(loop->wake);
    ina_rx_free(&loop->rx);
    ina_tx_free(&loop->tx);
    pthread_mutex_destroy(&loop->lock);
    loop->wake = -1;
}

/* Wake the loop from any thread (or a signal handler): it re-reads `stop` and the node's deadline. */
static inline void ina_loop_wake(ina_loop *loop) {
    uint64_t one = 1;
    if (write(loop->wake, &one, sizeof one) < 0) { /* full: a wake-up is pending already */ }
}

static inline void ina_loop_stop(ina_loop *loop) {
    loop->stop = 1;
    ina_loop_wake(loop);
}

/* Send what the node queued; 0 or -1 with loop->error set. Called with the lock held. */
static inline int ina_loop_flush(ina_loop *loop) {
    long refused = ina_tx_flush(&loop->tx, loop->fd);
    if (refused < 0) {
        snprintf(loop->error, sizeof loop->error, "out of memory while sending");
        return -1;
    }
    loop->refused += (uint64_t)refused;
    return 0;
}

/* Serve `node` until loop->stop (INA_SERVE_STOPPED), a failure (INA_SERVE_FAILED, loop->error),
 * or `slice` seconds (INA_SERVE_AGAIN: the caller may run signal handlers, then call again).
 * Call without the lock; the GIL may be released around it. */
/* Hand what waits on `fd` to `node`: the datagrams taken, or -1 with loop->error set. Called with the lock held. */
static inline long ina_loop_take(ina_loop *loop, const ina_node *node, int fd, double now) {
    long got = ina_rx_recv(&loop->rx, fd);
    if (got < 0) {
        snprintf(loop->error, sizeof loop->error, "receive failed: %s", strerror((int)-got));
        return -1;
    }
    for (size_t i = 0; i < loop->rx.count; i++)
        node->receive(node->self, loop->rx.data[i], loop->rx.length[i], loop->rx.source[i], now, &loop->tx);
    return got;
}

static inline int ina_serve(ina_loop *loop, const ina_node *node, double slice) {
    double until = ina_now() + slice;
    while (!loop->stop) {
        pthread_mutex_lock(&loop->lock);
        double now = ina_now();
        long got = ina_loop_take(loop, node, loop->fd, now), more = 0;
        if (got >= 0 && loop->group >= 0) more = ina_loop_take(loop, node, loop->group, now);
        if (got < 0 || more < 0) {
            pthread_mutex_unlock(&loop->lock);
            return INA_SERVE_FAILED;
        }
        got += more;
        double deadline = node->next_deadline(node->self);
        int due = deadline <= now;
        if (due) node->tick(node->self, now, &loop->tx);
        int failed = ina_loop_flush(loop);
        pthread_mutex_unlock(&loop->lock);
        if (failed) return INA_SERVE_FAILED;
        if (now >= until) return INA_SERVE_AGAIN;
        if (got || due) continue;
        double wait = (deadline < until ? deadline : until) - now;
        struct pollfd fds[3] = {{loop->fd, POLLIN, 0}, {loop->wake, POLLIN, 0}, {loop->group, POLLIN, 0}};
        int timeout = wait <= 0 ? 0 : (int)ceil(wait * 1000.0);
        if (poll(fds, loop->group >= 0 ? 3 : 2, timeout) < 0 && errno == EINTR) return INA_SERVE_AGAIN;
        if (fds[1].revents & POLLIN) {
            uint64_t count;
            if (read(loop->wake, &count, sizeof count) < 0) { /* drained by another reader */ }
        }
    }
    return INA_SERVE_STOPPED;
}

#endif
