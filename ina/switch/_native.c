/* The software switch's per-packet algorithm (docs/protocol.md, section 5) in C: `ina.switch._native`.
 *
 * The twin of ina/switch/core.py (`SwitchCore`), one packet at a time in arrival order, which the
 * Python core's batches equal (tests/test_switch_batch.py): the same output packets, counters and
 * slot registers. The job table stays in Python (ina/switch/state.py `Jobs`: registration checks,
 * policy, slot_base and partition choice, tokens and quotas); ina/switch/native.py pushes what the
 * data plane needs of it here with `set_jobs`, under the loop's lock. A job is served in one role (section 10):
 * its only switch, a leaf of a racked job (sums its rack, sends the sum up, passes the spine's RESULT down) or
 * its spine (sums the leaves' SPINE DATA, flags what it sends).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ina_wire.h"
#include "ina_udp.h"
#include "ina_pynode.h"

/* In the order of ina/switch/core.py COUNTERS (native.py checks the names). */
#define COUNTER_NAMES                                                                                                  \
    X(RX, "rx_packets") X(TX, "tx_packets") X(MALFORMED, "malformed") X(UNEXPECTED, "unexpected")                       \
    X(UNREGISTERED, "unregistered") X(BAD_SLOT, "bad_slot") X(BAD_FORMAT, "bad_format") X(DUPLICATE, "duplicate")     \
    X(CLAIMED, "claimed") X(AGGREGATED, "aggregated") X(COMPLETED, "completed") X(SENT_UP, "sent_up")                 \
    X(PREEMPTED, "preempted") X(COLLISION, "collision") X(REDIRECTED, "redirected")                                   \
    X(RESEND_FORWARDED, "resend_forwarded") X(STRAGGLER, "straggler") X(FLUSHED, "flushed") X(STALE, "stale")         \
    X(FLUSH_REQUESTS, "flush_requests") X(FLUSH_HITS, "flush_hits") X(RELEASES, "releases")                           \
    X(RELEASE_HITS, "release_hits") X(DESCENDED, "descended") X(SWEPT, "swept")

#define X(id, name) C_##id,
enum { COUNTER_NAMES C_COUNT };
#undef X
#define X(id, name) name,
static const char *const counter_names[] = {COUNTER_NAMES};
#undef X

/* Per job id, in the order of ina/switch/core.py JOB_COUNTERS: the chunks it completed here, the
 * slots its packets took from other jobs, the slots other jobs took from it, its packets that met
 * another job's chunk and went to the PS. */
enum { J_COMPLETED, J_PREEMPTING, J_PREEMPTED, J_COLLISIONS, J_COUNT };

enum { POLICY_ESA = 0, POLICY_FCFS = 1, POLICY_ATP = 2, POLICY_STATIC = 3 }; /* ina/switch/config.py POLICIES */
enum { ROLE_ONLY = 0, ROLE_LEAF = 1, ROLE_SPINE = 2 };                          /* ina/switch/state.py Role */

/* A chunk key as ina/switch/state.py packs it: valid | op << 48 | job << 32 | seq; 0 is "none". */
#define KEY_VALID ((uint64_t)1 << 49)
static inline uint64_t make_key(uint16_t job, uint32_t seq, int op) {
    return KEY_VALID | (uint64_t)(op != 0) << 48 | (uint64_t)job << 32 | seq;
}
static inline uint16_t key_job(uint64_t key) { return (uint16_t)(key >> 32); }
static inline uint32_t key_seq(uint64_t key) { return (uint32_t)key; }
static inline int key_op(uint64_t key) { return (int)(key >> 48 & 1); }

/* One registered job as the data plane sees it (`set_jobs` words, in this order). */
typedef struct {
    uint32_t job, fanin, slot_base, span_mask, lane_bits, priority_cap;
    ina_addr ps;
    ina_addr group; /* the job's RESULT group; port 0: none, RESULTs go to every worker */
    uint32_t role;  /* ROLE_*; a leaf's: */
    uint32_t rack, racks_full; /* its rack at the spine, and the job's full rack bitmap (a descending RESULT's) */
    ina_addr up;               /* the spine's data address */
    uint8_t data_flags, data_want; /* a DATA's flags & data_flags must be data_want: SPINE at a spine (without RESEND) only */
    ina_addr workers[INA_MAX_WORKERS];
    uint32_t full;
} job_row;
enum { JOB_WORDS = 15 + 2 * INA_MAX_WORKERS };

typedef struct {
    PyObject_HEAD ina_loop loop;
    ina_node node;
    int looped; /* loop initialized: dealloc frees it */
    uint32_t pool, words, policy;
    int copies; /* a completed chunk's RESULT is copied to its PS */
    double slot_timeout;
    /* the slot registers */
    uint64_t *key, *redirect;
    uint32_t *bitmap, *prio, *value; /* value: pool * words */
    uint32_t *chunk_words;           /* the DATA words of the chunk each slot holds (1..words) */
    double *touched;
    /* the job table */
    int32_t index[1 << 16]; /* job id -> row, or -1 */
    job_row *rows;
    size_t jobs;
    uint64_t count[C_COUNT];
    uint64_t (*job_count)[J_COUNT]; /* per job id */
} Switch;

/* ------------------------------------------------------------------ the algorithm */

/* Queue the datagram just queued again, to `to`, sharing its bytes (out of memory: dropped uncounted). */
static void send_again(Switch *sw, ina_addr to, ina_tx *tx) {
    if (ina_tx_repeat(tx, to) == 0) sw->count[C_TX]++;
}

/* Slot s's chunk (`key`) as a RESULT to every worker of its job (its group once, or each) then its PS (atp: to its
 * PS alone, flagged HOLD), as a PARTIAL (bitmap, sums, priority) to its PS, or at a leaf as a DATA of its rack (rank
 * and bit the rack, the slot's priority) to its spine. A leaf's DATA and all a spine sends carry SPINE. */
static void send_slot(Switch *sw, unsigned kind, uint32_t s, uint64_t key, ina_tx *tx) {
    int32_t r = sw->index[key_job(key)];
    if (r < 0) return; /* unreachable: deregistering a job forgets its slots (set_jobs) */
    const job_row *row = &sw->rows[r];
    int op = key_op(key), hold = kind == INA_RESULT && sw->policy == POLICY_ATP, up = kind == INA_DATA;
    int spine = up || row->role == ROLE_SPINE;
    ina_header h = {
        .kind = (uint8_t)kind,
        .flags = (uint8_t)((op ? INA_FLAG_MAX : 0) | (spine ? INA_FLAG_SPINE : 0) | (hold ? INA_FLAG_HOLD : 0)),
        .rank = up ? (uint8_t)row->rack : 0, .priority = kind == INA_RESULT ? 0 : (uint8_t)sw->prio[s], .index_bits = 0,
        .lane_bits = (uint8_t)(op ? 32 : row->lane_bits), .job = key_job(key), .slot = (uint16_t)s,
        .seq = key_seq(key), .bitmap = up ? (uint32_t)1 << row->rack : sw->bitmap[s],
    };
    /* Written straight into the send queue, once: a RESULT is queued again for the other workers and the PS. */
    size_t length = INA_HEADER_BYTES + 4 * (size_t)sw->chunk_words[s];
    int grouped = row->group.port != 0;
    uint8_t *p = ina_tx_add(tx, up ? row->up : kind != INA_RESULT || hold ? row->ps : grouped ? row->group : row->workers[0], length);
    if (!p) return; /* out of memory: dropped uncounted */
    ina_write_header(p, &h);
    ina_store_words(p + INA_HEADER_BYTES, sw->value + (size_t)s * sw->words, sw->chunk_words[s]);
    sw->count[C_TX]++;
    if (kind != INA_RESULT || hold) return;
    for (uint32_t r = 1; r < row->fanin && !grouped; r++) send_again(sw, row->workers[r], tx);
    if (sw->copies) send_again(sw, row->ps, tx);
}

/* A RESULT on to every worker of its job (its group once, or each), the flags in `clear` cleared: under atp one the PS
 * returned (HOLD cleared), at a leaf one from the spine (unchanged). */
static void send_down(Switch *sw, const job_row *row, const uint8_t *data, size_t length, uint8_t clear, ina_tx *tx) {
    int grouped = row->group.port != 0;
    uint8_t *p = ina_tx_add(tx, grouped ? row->group : row->workers[0], length);
    if (!p) return;
    memcpy(p, data, length);
    p[3] &= (uint8_t)~clear; /* the flags byte */
    sw->count[C_TX]++;
    for (uint32_t r = 1; r < row->fanin && !grouped; r++) send_again(sw, row->workers[r], tx);
}

/* The packet unchanged to its job's PS. */
static void forward(Switch *sw, const job_row *row, const uint8_t *data, size_t length, ina_tx *tx) {
    uint8_t *p = ina_tx_add(tx, row->ps, length);
    if (!p) return;
    memcpy(p, data, length);
    sw->count[C_TX]++;
}

/* Payload words (big-endian on the wire) added into host-order sums modulo 2^32, or their maxima taken: a whole
 * vector at a time where the CPU has one (INA_WORD_COPY, as ina_load_words), whatever the compiler makes of the
 * code around the call. */
INA_WORD_COPY void add_words(uint32_t *restrict sum, const uint8_t *restrict src, size_t words) {
    for (size_t i = 0; i < words; i++) {
        uint32_t v;
        memcpy(&v, src + 4 * i, 4);
        sum[i] += ina_be32(v);
    }
}

INA_WORD_COPY void max_words(uint32_t *restrict most, const uint8_t *restrict src, size_t words) {
    for (size_t i = 0; i < words; i++) {
        uint32_t v;
        memcpy(&v, src + 4 * i, 4);
        v = ina_be32(v);
        most[i] = v > most[i] ? v : most[i];
    }
}

/* Add (or take the maximum of) a payload of `words` words into slot s, or start it there (`claim`: the rest of the
 * slot's K words zeroed, as the Python core's); complete when full: the RESULT, or at a leaf the rack's sum up. */
static void merge(Switch *sw, const job_row *row, uint32_t s, uint64_t key, int claim, uint32_t bit, uint32_t prio,
                  const uint8_t *payload, uint32_t words, double now, ina_tx *tx) {
    uint32_t *value = sw->value + (size_t)s * sw->words;
    if (claim) {
        ina_load_words(value, payload, words);
        memset(value + words, 0, 4 * (size_t)(sw->words - words));
        sw->bitmap[s] = bit, sw->prio[s] = prio, sw->chunk_words[s] = words;
    } else {
        if (key_op(key)) {
            max_words(value, payload, words);
        } else {
            add_words(value, payload, words);
        }
        sw->bitmap[s] |= bit;
        if (prio > sw->prio[s]) sw->prio[s] = prio;
    }
    sw->key[s] = key, sw->touched[s] = now;
    if (sw->bitmap[s] == row->full) {
        int up = row->role == ROLE_LEAF;
        send_slot(sw, up ? INA_DATA : INA_RESULT, s, key, tx);
        if (sw->policy != POLICY_ATP) sw->key[s] = 0; /* atp holds it until the PS returns the RESULT (a leaf: the spine) */
        sw->count[C_COMPLETED]++, sw->count[C_SENT_UP] += (uint64_t)up, sw->job_count[key_job(key)][J_COMPLETED]++;
    }
}

/* A DATA packet that passed every check: the branches of section 5, "Per-packet algorithm". */
static void data_packet(Switch *sw, const job_row *row, const ina_header *h, uint64_t key, const uint8_t *data,
                        size_t length, double now, ina_tx *tx) {
    uint32_t s = h->slot, bit = (uint32_t)1 << h->rank, words = (uint32_t)(length - INA_HEADER_BYTES) / 4;
    uint32_t prio = h->priority < row->priority_cap ? h->priority : row->priority_cap;
    int resend = (h->flags & INA_FLAG_RESEND) != 0;
    const uint8_t *payload = data + INA_HEADER_BYTES;
    uint64_t held = sw->key[s];
    if (key == sw->redirect[s]) { /* 1: redirected */
        forward(sw, row, data, length, tx);
        sw->count[C_REDIRECTED]++;
    } else if (held == key) { /* 2: same chunk */
        if (words != sw->chunk_words[s]) { /* cut otherwise than the chunk in the slot */
            sw->count[C_BAD_FORMAT]++;
        } else if (!(sw->bitmap[s] & bit)) {
            merge(sw, row, s, key, 0, bit, prio, payload, words, now, tx);
            sw->count[C_AGGREGATED]++;
        } else if (resend) { /* a RESEND of a held contribution flushes the slot */
            send_slot(sw, INA_PARTIAL, s, held, tx);
            sw->key[s] = 0, sw->redirect[s] = key;
            sw->count[C_FLUSHED]++;
        } else {
            sw->count[C_DUPLICATE]++;
        }
    } else if (held == 0) { /* 3: free slot */
        if (resend) {
            forward(sw, row, data, length, tx);
            sw->count[C_RESEND_FORWARDED]++;
        } else {
            sw->count[C_CLAIMED]++;
            merge(sw, row, s, key, 1, bit, prio, payload, words, now, tx);
        }
    } else if (key_job(held) == h->job) { /* 4: another chunk of the same job */
        uint32_t age = h->seq - key_seq(held);
        if (!resend && age != 0 && age < (uint32_t)1 << 31) { /* a stale partial: to the PS, then claim */
            send_slot(sw, INA_PARTIAL, s, held, tx);
            sw->count[C_STALE]++, sw->count[C_CLAIMED]++;
            merge(sw, row, s, key, 1, bit, prio, payload, words, now, tx);
        } else {
            forward(sw, row, data, length, tx);
            sw->count[resend ? C_RESEND_FORWARDED : C_STRAGGLER]++;
        }
    } else if (resend) { /* 5: another job's chunk */
        forward(sw, row, data, length, tx);
        sw->count[C_RESEND_FORWARDED]++;
    } else if (sw->policy == POLICY_ESA && prio > sw->prio[s] && row->fanin > 1) { /* preempt */
        send_slot(sw, INA_PARTIAL, s, held, tx);
        sw->redirect[s] = held;
        sw->count[C_PREEMPTED]++, sw->count[C_CLAIMED]++;
        sw->job_count[h->job][J_PREEMPTING]++, sw->job_count[key_job(held)][J_PREEMPTED]++;
        merge(sw, row, s, key, 1, bit, prio, payload, words, now, tx);
    } else { /* collision */
        forward(sw, row, data, length, tx);
        sw->redirect[s] = key;
        sw->count[C_COLLISION]++, sw->job_count[h->job][J_COLLISIONS]++;
    }
}

/* ina_node.receive: the checks of section 5 in order, each failure dropped and counted. */
static void sw_receive(void *self, const uint8_t *data, size_t length, ina_addr source, double now, ina_tx *tx) {
    Switch *sw = self;
    sw->count[C_RX]++;
    ina_header h;
    if (!ina_parse(data, length, sw->words, &h)) {
        sw->count[C_MALFORMED]++;
        return;
    }
    int32_t r = sw->index[h.job];
    const job_row *row = r >= 0 ? &sw->rows[r] : NULL; /* a DATA's rank is below 32 (ina_parse) */
    int is_data = h.kind == INA_DATA, is_descend = 0, is_release = 0;
    if (!is_data && h.kind != INA_FLUSH) {
        is_descend = h.kind == INA_RESULT && row && row->role == ROLE_LEAF;
        is_release = h.kind == INA_RESULT && sw->policy == POLICY_ATP && !is_descend;
        if (!is_descend && !is_release) {
            sw->count[C_UNEXPECTED]++;
            return;
        }
    }
    if (!row || (is_data && h.rank >= row->fanin) ||
        !ina_addr_eq(source, is_data ? row->workers[h.rank] : is_descend ? row->up : row->ps)) {
        sw->count[C_UNREGISTERED]++;
        return;
    }
    if (h.slot != ((row->slot_base + (h.seq & row->span_mask)) & (sw->pool - 1))) {
        sw->count[C_BAD_SLOT]++;
        return;
    }
    int op = (h.flags & INA_FLAG_MAX) != 0;
    if (is_data ? (h.index_bits | ((h.flags & row->data_flags) ^ row->data_want)) != 0 || h.lane_bits != (op ? 32u : row->lane_bits)
                : (is_release && (!(h.flags & INA_FLAG_HOLD) || h.bitmap != row->full)) ||
                      (is_descend && (!(h.flags & INA_FLAG_SPINE) || h.bitmap != row->racks_full))) {
        sw->count[C_BAD_FORMAT]++;
        return;
    }
    uint64_t key = make_key(h.job, h.seq, op);
    if (is_data) {
        data_packet(sw, row, &h, key, data, length, now, tx);
        return;
    }
    if (is_release || is_descend) { /* a held result back from the PS, or the spine's RESULT at a leaf */
        sw->count[is_release ? C_RELEASES : C_DESCENDED]++;
        if (sw->policy == POLICY_ATP && sw->key[h.slot] == key && sw->bitmap[h.slot] == row->full) /* free its slot */
            sw->key[h.slot] = 0, sw->count[C_RELEASE_HITS]++;
        send_down(sw, row, data, length, is_release ? INA_FLAG_HOLD : 0, tx); /* and on to the workers */
        return;
    }
    sw->count[C_FLUSH_REQUESTS]++; /* FLUSH from the job's PS */
    if (sw->key[h.slot] == key) {
        send_slot(sw, INA_PARTIAL, h.slot, key, tx);
        sw->key[h.slot] = 0;
        sw->count[C_FLUSH_HITS]++;
    }
    sw->redirect[h.slot] = key;
}

/* ina_node.tick: the idle sweep, every partial untouched for slot_timeout to its PS, by slot. */
static void sw_tick(void *self, double now, ina_tx *tx) {
    Switch *sw = self;
    for (uint32_t s = 0; s < sw->pool; s++) {
        uint64_t key = sw->key[s];
        if (key && now - sw->touched[s] >= sw->slot_timeout) {
            send_slot(sw, INA_PARTIAL, s, key, tx);
            sw->redirect[s] = key, sw->key[s] = 0;
            sw->count[C_SWEPT]++;
        }
    }
}

static double sw_next_deadline(void *self) {
    Switch *sw = self;
    double oldest = INFINITY;
    for (uint32_t s = 0; s < sw->pool; s++)
        if (sw->key[s] && sw->touched[s] < oldest) oldest = sw->touched[s];
    return oldest + sw->slot_timeout;
}

/* ------------------------------------------------------------------ the Python type */

static int Switch_init(Switch *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"pool", "words", "policy", "slot_timeout", "messages", "copies", NULL};
    unsigned pool, words, policy, messages = 64;
    int copies = 1;
    double slot_timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "IIId|Ip", names, &pool, &words, &policy, &slot_timeout, &messages, &copies))
        return -1;
    if (self->looped) {
        PyErr_SetString(PyExc_RuntimeError, "a native switch is initialized once");
        return -1;
    }
    if (pool < 1 || pool > 1 << 16 || (pool & (pool - 1)) || words < 1 || words > (INA_MAX_PAYLOAD - INA_HEADER_BYTES) / 4 ||
        policy > POLICY_STATIC || !(slot_timeout > 0) || messages < 1) {
        PyErr_SetString(PyExc_ValueError, "pool must be a power of two <= 65536, words fit a datagram, policy 0..3, "
                                          "slot_timeout > 0, messages >= 1");
        return -1;
    }
    self->pool = pool, self->words = words, self->policy = policy, self->slot_timeout = slot_timeout, self->copies = copies;
    self->key = calloc(pool, sizeof *self->key), self->redirect = calloc(pool, sizeof *self->redirect);
    self->bitmap = calloc(pool, sizeof *self->bitmap), self->prio = calloc(pool, sizeof *self->prio);
    self->value = calloc((size_t)pool * words, sizeof *self->value), self->touched = calloc(pool, sizeof *self->touched);
    self->chunk_words = calloc(pool, sizeof *self->chunk_words);
    self->job_count = calloc(1 << 16, sizeof *self->job_count);
    if (!self->key || !self->redirect || !self->bitmap || !self->prio || !self->value || !self->touched || !self->chunk_words ||
        !self->job_count) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t j = 0; j < 1 << 16; j++) self->index[j] = -1;
    if (ina_loop_init(&self->loop, messages) < 0) {
        PyErr_SetString(PyExc_MemoryError, self->loop.error);
        ina_loop_free(&self->loop);
        return -1;
    }
    self->looped = 1;
    self->node = (ina_node){self, sw_receive, sw_tick, sw_next_deadline};
    return 0;
}

static void Switch_dealloc(Switch *self) {
    if (self->looped) ina_loop_free(&self->loop);
    free(self->key), free(self->redirect), free(self->bitmap), free(self->prio), free(self->value), free(self->touched);
    free(self->chunk_words);
    free(self->rows), free(self->job_count);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ready(Switch *self) {
    if (self->looped) return 1;
    PyErr_SetString(PyExc_RuntimeError, "the native switch is not initialized");
    return 0;
}

/* A job's JOB_WORDS words into a row, or 0 with a ValueError (native.py sends only valid jobs). */
static int read_row(const Switch *self, const uint32_t *w, job_row *row) {
    memset(row, 0, sizeof *row);
    row->job = w[0], row->fanin = w[1], row->slot_base = w[2], row->span_mask = w[3], row->lane_bits = w[4];
    row->priority_cap = w[5], row->ps = (ina_addr){w[6], (uint16_t)w[7]}, row->group = (ina_addr){w[8], (uint16_t)w[9]};
    row->role = w[10], row->rack = w[11], row->racks_full = w[12], row->up = (ina_addr){w[13], (uint16_t)w[14]};
    for (unsigned r = 0; r < INA_MAX_WORKERS; r++) row->workers[r] = (ina_addr){w[15 + 2 * r], (uint16_t)w[16 + 2 * r]};
    row->full = row->fanin >= 32 ? 0xFFFFFFFFu : ((uint32_t)1 << row->fanin) - 1;
    int spine = row->role == ROLE_SPINE; /* a packet of the spine level: a leaf's sum, which it never resends */
    row->data_flags = INA_FLAG_SPINE | (spine ? INA_FLAG_RESEND : 0), row->data_want = spine ? INA_FLAG_SPINE : 0;
    uint32_t span = row->span_mask + 1;
    if (row->job > 0xFFFF || row->fanin < 1 || row->fanin > INA_MAX_WORKERS || row->slot_base >= self->pool ||
        span == 0 || span > self->pool || (span & row->span_mask) || !ina_lane_width_ok(row->lane_bits) ||
        row->priority_cap > 255 || w[7] > 0xFFFF || w[9] > 0xFFFF || w[14] > 0xFFFF || row->role > ROLE_SPINE ||
        (row->role == ROLE_LEAF && (row->rack >= 32 || !(row->racks_full >> row->rack & 1))) || self->index[row->job] != -1) {
        PyErr_Format(PyExc_ValueError, "job row for job %u is not a valid registration (or a duplicate)", row->job);
        return 0;
    }
    return 1;
}

/* set_jobs(table, forget): replace the job table by `table` (JOB_WORDS native-order uint32 per
 * job), then, if forget >= 0, invalidate every slot and redirect holding job `forget`. */
static PyObject *Switch_set_jobs(Switch *self, PyObject *args) {
    Py_buffer table;
    int forget;
    if (!ready(self) || !PyArg_ParseTuple(args, "y*i", &table, &forget)) return NULL;
    size_t count = (size_t)table.len / (4 * JOB_WORDS);
    job_row *rows = NULL;
    if ((size_t)table.len != count * 4 * JOB_WORDS) {
        PyErr_SetString(PyExc_ValueError, "the job table is not a whole number of rows");
        goto fail;
    }
    rows = calloc(count ? count : 1, sizeof *rows);
    if (!rows) {
        PyErr_NoMemory();
        goto fail;
    }
    ina_py_lock(&self->loop);
    int32_t *old = malloc(sizeof self->index);
    if (!old) {
        ina_py_unlock(&self->loop);
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(old, self->index, sizeof self->index);
    for (size_t j = 0; j < 1 << 16; j++) self->index[j] = -1;
    for (size_t i = 0; i < count; i++) {
        if (!read_row(self, (const uint32_t *)table.buf + i * JOB_WORDS, &rows[i])) {
            memcpy(self->index, old, sizeof self->index); /* nothing changes */
            free(old);
            ina_py_unlock(&self->loop);
            goto fail;
        }
        self->index[rows[i].job] = (int32_t)i;
    }
    free(old);
    free(self->rows);
    self->rows = rows, self->jobs = count;
    if (forget >= 0) {
        for (uint32_t s = 0; s < self->pool; s++) {
            if (self->key[s] && key_job(self->key[s]) == forget) self->key[s] = 0;
            if (self->redirect[s] && key_job(self->redirect[s]) == forget) self->redirect[s] = 0;
        }
        memset(self->job_count[forget], 0, sizeof self->job_count[forget]); /* a reused id starts afresh */
    }
    ina_py_unlock(&self->loop);
    PyBuffer_Release(&table);
    Py_RETURN_NONE;
fail:
    free(rows);
    PyBuffer_Release(&table);
    return NULL;
}

static PyObject *Switch_counters(Switch *self, PyObject *unused) {
    (void)unused;
    if (!ready(self)) return NULL;
    uint64_t count[C_COUNT];
    ina_py_lock(&self->loop);
    memcpy(count, self->count, sizeof count);
    ina_py_unlock(&self->loop);
    PyObject *out = PyTuple_New(C_COUNT);
    for (int i = 0; out && i < C_COUNT; i++) {
        PyObject *n = PyLong_FromUnsignedLongLong(count[i]);
        if (!n) {
            Py_CLEAR(out);
            break;
        }
        PyTuple_SET_ITEM(out, i, n);
    }
    return out;
}

/* registers(): copies of (key, prio, bitmap, value, words, redirect, touched) as native-order bytes. */
static PyObject *Switch_registers(Switch *self, PyObject *unused) {
    (void)unused;
    if (!ready(self)) return NULL;
    size_t p = self->pool;
    ina_py_lock(&self->loop);
    PyObject *out = Py_BuildValue("(y#y#y#y#y#y#y#)", (const char *)self->key, (Py_ssize_t)(p * 8), (const char *)self->prio,
                                  (Py_ssize_t)(p * 4), (const char *)self->bitmap, (Py_ssize_t)(p * 4),
                                  (const char *)self->value, (Py_ssize_t)(p * self->words * 4),
                                  (const char *)self->chunk_words, (Py_ssize_t)(p * 4), (const char *)self->redirect,
                                  (Py_ssize_t)(p * 8), (const char *)self->touched, (Py_ssize_t)(p * 8));
    ina_py_unlock(&self->loop);
    return out;
}

/* job_counters(job): the job's counters, in the order of JOB_COUNTERS. */
static PyObject *Switch_job_counters(Switch *self, PyObject *args) {
    unsigned job;
    if (!ready(self) || !PyArg_ParseTuple(args, "I", &job)) return NULL;
    if (job > 0xFFFF) return PyErr_Format(PyExc_ValueError, "job ids are 0..65535, got %u", job);
    uint64_t count[J_COUNT];
    ina_py_lock(&self->loop);
    memcpy(count, self->job_count[job], sizeof count);
    ina_py_unlock(&self->loop);
    return Py_BuildValue("(KKKK)", count[0], count[1], count[2], count[3]);
}

/* holders(): copies of the key and bitmap registers as native-order bytes (what the watch samples). */
static PyObject *Switch_holders(Switch *self, PyObject *unused) {
    (void)unused;
    if (!ready(self)) return NULL;
    size_t p = self->pool;
    ina_py_lock(&self->loop);
    PyObject *out = Py_BuildValue("(y#y#)", (const char *)self->key, (Py_ssize_t)(p * 8), (const char *)self->bitmap,
                                  (Py_ssize_t)(p * 4));
    ina_py_unlock(&self->loop);
    return out;
}

static PyObject *Switch_receive(Switch *self, PyObject *args) {
    return ready(self) ? ina_py_receive(&self->loop, &self->node, args) : NULL;
}
static PyObject *Switch_tick(Switch *self, PyObject *args) {
    return ready(self) ? ina_py_tick(&self->loop, &self->node, args) : NULL;
}
static PyObject *Switch_next_deadline(Switch *self, PyObject *unused) {
    (void)unused;
    return ready(self) ? ina_py_next_deadline(&self->loop, &self->node) : NULL;
}
static PyObject *Switch_serve(Switch *self, PyObject *args) {
    return ready(self) ? ina_py_serve(&self->loop, &self->node, args) : NULL;
}
static PyObject *Switch_stop(Switch *self, PyObject *unused) {
    (void)unused;
    return ready(self) ? ina_py_stop(&self->loop) : NULL;
}
static PyObject *Switch_refused(Switch *self, PyObject *unused) {
    (void)unused;
    return ready(self) ? ina_py_refused(&self->loop) : NULL;
}

static PyMethodDef Switch_methods[] = {
    {"set_jobs", (PyCFunction)Switch_set_jobs, METH_VARARGS, "set_jobs(table, forget): the data plane's job table"},
    {"receive", (PyCFunction)Switch_receive, METH_VARARGS, "receive(data, start, length, ip, port, now): what to send"},
    {"tick", (PyCFunction)Switch_tick, METH_VARARGS, "tick(now): the idle sweep's PARTIALs"},
    {"next_deadline", (PyCFunction)Switch_next_deadline, METH_NOARGS, "when tick next has work, or None"},
    {"counters", (PyCFunction)Switch_counters, METH_NOARGS, "the counters, in the order of COUNTERS"},
    {"registers", (PyCFunction)Switch_registers, METH_NOARGS, "the slot registers as bytes"},
    {"holders", (PyCFunction)Switch_holders, METH_NOARGS, "the key and bitmap registers as bytes"},
    {"job_counters", (PyCFunction)Switch_job_counters, METH_VARARGS, "job_counters(job): one job's counters"},
    {"serve", (PyCFunction)Switch_serve, METH_VARARGS, "serve(fd): the packet loop, GIL released, until stop()"},
    {"stop", (PyCFunction)Switch_stop, METH_NOARGS, "ask the packet loop to return"},
    {"refused", (PyCFunction)Switch_refused, METH_NOARGS, "datagrams the kernel refused to send"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SwitchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ina.switch._native.Switch",
    .tp_doc = "Switch(pool, words, policy, slot_timeout, messages=64, copies=True): the switch's data plane (0 esa, 1 fcfs, 2 atp, 3 static)",
    .tp_basicsize = sizeof(Switch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Switch_init,
    .tp_dealloc = (destructor)Switch_dealloc,
    .tp_methods = Switch_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ina.switch._native", "The software switch's native data plane.", -1, NULL};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = ina_py_module(&module, &SwitchType, "Switch", counter_names, C_COUNT);
    if (m && PyModule_AddIntConstant(m, "JOB_WORDS", JOB_WORDS) < 0) Py_CLEAR(m);
    return m;
}
