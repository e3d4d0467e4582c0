/* The worker engine's chunk stream in C (docs/protocol.md, sections 3, 4, 8 and 9): the twin of
 * ina/transport/engine.py's `Engine`, which stays the readable reference.
 *
 * A reduction's uint32 words are read in place from the submitted array and cut into K-word DATA
 * chunks as the window lets them go (no packet matrix built up front); RESULT sums are written
 * straight into the output array Python allocated at submit. At most W chunks are outstanding (a
 * ring of W entries). Timers sit in a min-heap by deadline with lazy deletion, as in the
 * reference, but one entry stands for a run of chunks armed together with one deadline (a pump's
 * chunks), so the heap holds a few entries per round trip rather than one per chunk; the chunks
 * due are sorted by (deadline, seq) before anything is done with them, so resends go out in the
 * reference's order. A chunk overtaken by the RESULT of the chunk sent `early_resend` chunks after its last
 * transmission is resent at once, once a batch is in (never-resent chunks by a pointer over seqs, resent ones
 * from a queue whose marks grow in the order of the resends); a timeout resends the oldest chunks due and holds
 * back the rest to their next. The newest 2W RESULTs are kept to answer the
 * PS's FETCH. The priority policies FixedPriority, IntensityPriority and AttainedServicePriority are computed here with
 * the reference's arithmetic.
 *
 * Two ways to drive it (ina/transport/native.py): sans-IO (`receive`, `tick`, `next_deadline`,
 * what the tests and the simulator use), or `serve(fd)`, the whole packet loop in C with the GIL
 * released (ina_serve), where `wait` blocks a completion thread until a reduction is done.
 * Every method that touches the stream takes the loop's lock, so `submit` may come from any thread.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ina_wire.h"
#include "ina_udp.h"
#include "ina_heap.h"
#include "ina_pynode.h"

#define RX_MESSAGES 64 /* datagrams per recvmmsg when serving */

/* Counters, by the reference's names (Engine.counters). */
enum { C_SENT, C_RESENT, C_EARLY_RESENT, C_HELD_BACK, C_DELIVERED, C_STATUS, C_FETCH_ANSWERED, C_FOREIGN, C_MALFORMED,
       C_UNEXPECTED, C_LATE, C_FETCH_MISSING, C_FAILED, C_FAILOVERS, C_FAILBACKS, C_PADDING_BYTES, C_COUNT };
static const char *const counter_names[C_COUNT] = {"sent", "resent", "early_resent", "held_back", "delivered", "status",
                                                   "fetch_answered", "foreign", "malformed", "unexpected", "late",
                                                   "fetch_missing", "failed", "failovers", "failbacks", "padding_bytes"};

typedef struct {
    Py_buffer words; /* the submitted words, read until the reduction is handed back */
    Py_buffer out;   /* the result array, written as RESULTs arrive; out.obj is handed back */
    uint64_t handle, first_seq;
    uint32_t chunks, remaining, per_result;
    uint8_t flags, lane_bits, index_bits; /* the format its RESULTs must have (flags: MAX or 0) */
    double queued_at;
} reduction;

typedef struct {
    uint64_t seq, handle;
    uint32_t index, retries, timeouts; /* resends of every kind; those on timeout (each doubles the next timeout) */
    int short_timer;                   /* its timeouts count from short_rto: overtaken, or nothing can overtake it */
    uint64_t overtaken_by;             /* once resent: the chunk whose RESULT shows that resend lost */
    double first_sent, deadline;
    int64_t status; /* the PS's latest STATUS bitmap, -1 for none */
    int live;
} chunk;

/* A resend of chunk `seq`, lost once the RESULT of chunk `overtaken_by` (or a later one) comes. */
typedef struct {
    uint64_t overtaken_by, seq;
} resend_mark;

/* Chunks seq .. end - 1 armed with `deadline`: those still outstanding with that deadline are live. */
typedef struct {
    double deadline;
    uint64_t seq, end;
} timer;

/* A RESULT kept to answer FETCH. While its reduction is held, a whole chunk's payload is the
 * reduction's own `out` (the RESULT's words, byte-swapped): only the header is copied, into the
 * entry itself (one cache line, touched once per RESULT). */
typedef struct {
    uint64_t seq, handle;
    uint32_t index, length, room;
    uint8_t live, in_out;             /* in_out: the payload is `out` of reduction `handle` */
    uint8_t header[INA_HEADER_BYTES]; /* in_out: the RESULT's header */
    uint8_t *packet;                  /* otherwise: the whole RESULT (`room` bytes allocated) */
} kept_result;

typedef struct {
    PyObject_HEAD
    ina_loop loop;
    ina_node node;
    pthread_cond_t changed; /* a reduction finished, the engine failed, or it was stopped (for `wait`) */
    int ready;              /* loop, cond and arrays set up: dealloc frees them */
    /* the config */
    uint16_t job;
    uint8_t rank;
    uint32_t full, words, window, slot_base, span_mask, pool_mask;
    int window_pow2; /* W is a power of two (every transport's is): ring slots by mask, not division */
    int ps_only;
    int pad; /* every DATA zero-padded to K words (a switch that takes only whole chunks), else as long as its chunk */
    ina_addr destination, other, ps;
    int has_other, has_ps;
    double min_rto, max_rto, initial_rto, peer_timeout;
    uint32_t early_resend; /* EngineConfig.early_resend; 0: resends on timeout only */
    /* failover to the PS (EngineConfig.failover, .failback; 0: never), and since when DATA goes there */
    double failover, failback, via_ps_since;
    int via_ps;
    /* RttEstimator */
    int sampled;
    double srtt, rttvar, least; /* least: the least RTT sampled */
    /* the priority policy: a fixed level, or (level < 0) trunc(offset + levels_per_doubling * log2(1 + x / reference))
     * of x, the bytes a second decaying over time_constant (IntensityPriority), or with time_constant 0 the bytes
     * attained (AttainedServicePriority: offset its top, levels_per_doubling negative), or with a `total` the bytes
     * left of it (RemainingWorkPriority) */
    int level;
    double reference_rate, levels_per_doubling, time_constant, age_step, decaying_bytes, observed_at, offset, total;
    /* the chunk stream, seqs unwrapped */
    uint64_t next_seq, next_send, oldest, next_handle, head_handle, unsent_handle;
    reduction *reductions; /* a ring: reduction `head_handle + i` at (head + i) % capacity */
    size_t reductions_head, reductions_count, reductions_capacity;
    chunk *outstanding; /* `window` entries, chunk seq at seq % window */
    timer *timers;
    size_t timers_count, timers_capacity;
    timer *due;       /* scratch for tick: `window` chunks, each as a timer of its own */
    uint64_t *probes; /* scratch for tick: the seqs of the chunks due, to find the oldest */
    /* early resends: one past the newest chunk answered; chunks before `unresent` never resent are overtaken or
     * answered; the queue of resends (a ring of 2W, marks non-decreasing), at most one live entry a chunk */
    uint64_t answered, unresent;
    resend_mark *marks;
    size_t marks_head, marks_count;
    kept_result *results; /* 2 * window entries, result seq at seq % (2 * window) */
    uint64_t newest_result;
    uint64_t counters[C_COUNT];
    uint64_t bytes_sent;
    /* the failure, once peer_timeout passed */
    int failed;
    uint64_t failed_seq, failed_handle;
    uint32_t failed_retries;
    int64_t failed_status;
} Engine;

/* ------------------------------------------------------------------ RTT and priority */

static double py_max(double a, double b) { return b > a ? b : a; } /* Python's max(a, b) */

static double rto(const Engine *e) {
    double raw = e->sampled ? e->srtt + 4 * e->rttvar : e->initial_rto;
    double clamped = py_max(raw, e->min_rto);
    return clamped < e->max_rto ? clamped : e->max_rto;
}

/* RttEstimator.short_rto: max(min_rto, twice the least RTT), at most the estimate (the estimate before any sample). */
static double short_rto(const Engine *e) {
    double estimate = rto(e);
    if (!e->sampled) return estimate;
    double floor = py_max(e->min_rto, 2 * e->least);
    return floor < estimate ? floor : estimate;
}

/* RttEstimator.backoff: `short`, from short_rto. */
static double backoff(const Engine *e, uint32_t retries, int short_timer) {
    double timeout = (short_timer ? short_rto(e) : rto(e)) * (double)((uint64_t)1 << (retries < 30 ? retries : 30));
    return timeout < e->max_rto ? timeout : e->max_rto;
}

/* Engine._may_fail_over: DATA goes to a switch, and the job has a PS to fail over to. */
static int may_fail_over(const Engine *e) { return !e->via_ps && e->failover > 0 && e->has_ps && !e->ps_only; }

/* Engine._timeout_after: when a chunk first sent at `first_sent` times out next if armed `now`: its backoff, or
 * sooner its failover's moment while DATA goes to the switch, at most peer_timeout after its first sending. */
static double timeout_after(const Engine *e, double first_sent, uint32_t timeouts, int short_timer, double now) {
    double next = now + backoff(e, timeouts, short_timer), last = first_sent + e->peer_timeout;
    double deadline = next < last ? next : last, failover = first_sent + e->failover;
    return may_fail_over(e) && now < failover && failover < deadline ? failover : deadline;
}

static double next_timeout(const Engine *e, const chunk *c, double now) {
    return timeout_after(e, c->first_sent, c->timeouts, c->short_timer, now);
}

static void sample_rtt(Engine *e, double rtt) {
    if (!e->sampled) {
        e->sampled = 1, e->srtt = rtt, e->rttvar = rtt / 2, e->least = rtt;
    } else {
        if (rtt < e->least) e->least = rtt;
        e->rttvar = 0.75 * e->rttvar + 0.25 * fabs(e->srtt - rtt);
        e->srtt = 0.875 * e->srtt + 0.125 * rtt;
    }
}

static double decayed(const Engine *e, double now) {
    if (e->time_constant <= 0) return e->decaying_bytes; /* attained: never decays */
    return e->decaying_bytes * exp(-py_max(now - e->observed_at, 0.0) / e->time_constant);
}

static void observe(Engine *e, double nbytes, double now) {
    if (e->level >= 0) return;
    e->decaying_bytes = decayed(e, now) + nbytes;
    e->observed_at = py_max(now, e->observed_at);
}

/* The policy's priority for a chunk queued at `queued_at`, sent at `now`, clamped to 0..255. */
static uint8_t priority(const Engine *e, double queued_at, double now) {
    if (e->level >= 0) return (uint8_t)e->level;
    double x = e->time_constant > 0 ? decayed(e, now) / e->time_constant : decayed(e, now);
    if (e->total > 0) x = py_max(e->total - x, 0.0); /* RemainingWorkPriority: the bytes left */
    double base = py_max(trunc(e->offset + e->levels_per_doubling * log2(1 + x / e->reference_rate)), 0.0);
    double aged = trunc(py_max(now - queued_at, 0.0) / e->age_step);
    double level = base + aged;
    return level >= 255 ? 255 : level <= 0 ? 0 : (uint8_t)level;
}

/* ------------------------------------------------------------------ bookkeeping */

/* The reductions' ring has a power-of-two capacity (16, doubled as it grows). */
static size_t reduction_slot(const Engine *e, size_t i) { return (e->reductions_head + i) & (e->reductions_capacity - 1); }

static reduction *reduction_of(Engine *e, uint64_t handle) { return &e->reductions[reduction_slot(e, handle - e->head_handle)]; }

/* Chunk seq's place in a ring of `n` entries, a multiple of W (W for the outstanding chunks, 2W for the kept results). */
static uint64_t ring_slot(const Engine *e, uint64_t seq, uint64_t n) { return e->window_pow2 ? seq & (n - 1) : seq % n; }

static chunk *outstanding(Engine *e, uint64_t seq) {
    if (seq < e->oldest || seq >= e->next_send) return NULL;
    chunk *c = &e->outstanding[ring_slot(e, seq, e->window)];
    return c->live && c->seq == seq ? c : NULL;
}

static int timer_before(const timer *a, const timer *b) { return a->deadline < b->deadline; }

/* Whether chunk `seq` is outstanding with its timer at `deadline`. */
static int armed(Engine *e, uint64_t seq, double deadline) {
    chunk *c = outstanding(e, seq);
    return c && c->deadline == deadline;
}

/* Skip the chunks of `t` completed or re-armed since: whether any is left (its deadline, the heap's
 * key, does not change). */
static int timer_live(Engine *e, timer *t) {
    while (t->seq < t->end && !armed(e, t->seq, t->deadline)) t->seq++;
    return t->seq < t->end;
}

INA_HEAP(timers, timer, timer_before)

/* Arm chunks seq .. end - 1 with one timer. The heap holds every outstanding chunk's live timer (at
 * most W entries) and stale ones; when it is full the stale ones go, so it never grows. */
static void push_timer(Engine *e, double deadline, uint64_t seq, uint64_t end) {
    if (e->timers_count == e->timers_capacity) {
        size_t live = 0;
        for (size_t i = 0; i < e->timers_count; i++)
            if (timer_live(e, &e->timers[i])) e->timers[live++] = e->timers[i];
        e->timers_count = live;
        timers_build(e->timers, live);
    }
    timers_push(e->timers, &e->timers_count, (timer){deadline, seq, end});
}

/* Engine._arm: chunk c's timer for its next timeout. */
static void arm(Engine *e, chunk *c, double now) {
    c->deadline = next_timeout(e, c, now);
    push_timer(e, c->deadline, c->seq, c->seq + 1);
}

static uint32_t slot_of(const Engine *e, uint64_t seq) {
    return e->ps_only ? 0 : (uint32_t)((e->slot_base + (seq & e->span_mask)) & e->pool_mask);
}

/* The DATA words chunk `index` of `r` carries (its words; the last chunk's, only those left). */
static size_t chunk_words(const Engine *e, const reduction *r, uint32_t index) {
    size_t total = (size_t)r->words.len / 4, at = (size_t)index * e->words;
    return total - at < e->words ? total - at : e->words;
}

/* Queue the DATA packet of chunk `index` of `r`: as long as its chunk, or padded to K words. Out of memory, it
 * is not queued: the chunk's timer resends it, as if the network had lost it. */
static void send_data(Engine *e, ina_tx *tx, const reduction *r, uint32_t index, uint8_t prio, int resend) {
    size_t take = chunk_words(e, r, index), words = e->pad ? e->words : take;
    size_t length = INA_HEADER_BYTES + 4 * words;
    uint8_t *p = ina_tx_add(tx, e->via_ps ? e->ps : e->destination, length);
    if (!p) return;
    uint64_t seq = r->first_seq + index;
    ina_header h = {.kind = INA_DATA, .flags = (uint8_t)(r->flags | (resend ? INA_FLAG_RESEND : 0)), .rank = e->rank,
                    .priority = prio, .index_bits = r->index_bits, .lane_bits = r->lane_bits, .job = e->job,
                    .slot = (uint16_t)slot_of(e, seq), .seq = (uint32_t)seq, .bitmap = (uint32_t)1 << e->rank};
    ina_write_header(p, &h);
    ina_store_words(p + INA_HEADER_BYTES, (const uint32_t *)r->words.buf + (size_t)index * e->words, take);
    memset(p + INA_HEADER_BYTES + 4 * take, 0, 4 * (words - take));
    e->bytes_sent += length;
    e->counters[C_PADDING_BYTES] += 4 * (words - take);
}

static void signal_changed(Engine *e) { pthread_cond_broadcast(&e->changed); }

/* ------------------------------------------------------------------ the stream */

/* Send every queued chunk the window lets go (Engine._pump). */
static void pump(void *self, double now, ina_tx *tx) {
    Engine *e = self;
    if (e->failed) return;
    uint64_t limit = e->oldest + e->window < e->next_seq ? e->oldest + e->window : e->next_seq;
    if (e->next_send >= limit) return;
    if (e->via_ps && e->failback > 0 && now >= e->via_ps_since + e->failback) { /* try the switch again */
        e->via_ps = 0;
        e->counters[C_FAILBACKS]++;
    }
    double deadline = timeout_after(e, now, 0, 0, now);
    while (e->next_send < limit) {
        reduction *r = reduction_of(e, e->unsent_handle);
        uint64_t begin = e->next_send - r->first_seq, end = limit - r->first_seq < r->chunks ? limit - r->first_seq : r->chunks;
        uint8_t prio = priority(e, r->queued_at, now);
        for (uint64_t index = begin; index < end; index++) {
            uint64_t seq = r->first_seq + index;
            send_data(e, tx, r, (uint32_t)index, prio, 0);
            e->outstanding[ring_slot(e, seq, e->window)] = (chunk){seq, r->handle, (uint32_t)index, 0, 0, 0, 0, now, deadline, -1, 1};
        }
        push_timer(e, deadline, r->first_seq + begin, r->first_seq + end);
        e->counters[C_SENT] += end - begin;
        e->next_send = r->first_seq + end;
        if (end == r->chunks) e->unsent_handle++;
    }
}

static void fail(Engine *e, const chunk *c) {
    e->failed = 1, e->failed_seq = c->seq, e->failed_handle = c->handle;
    e->failed_retries = c->retries, e->failed_status = c->status;
    e->counters[C_FAILED]++;
    e->loop.stop = 1; /* a served engine stops, as UdpEngine stops its runner */
    signal_changed(e);
}

/* Queue a resend's mark: a full ring first drops the entries no longer live (at most one a chunk outstanding). */
static void push_mark(Engine *e, uint64_t overtaken_by, uint64_t seq) {
    size_t capacity = 2 * (size_t)e->window;
    if (e->marks_count == capacity) {
        size_t live = 0;
        for (size_t i = 0; i < e->marks_count; i++) {
            resend_mark m = e->marks[(e->marks_head + i) % capacity];
            chunk *c = outstanding(e, m.seq);
            if (c && c->overtaken_by == m.overtaken_by) e->marks[(e->marks_head + live++) % capacity] = m;
        }
        e->marks_count = live;
    }
    e->marks[(e->marks_head + e->marks_count++) % capacity] = (resend_mark){overtaken_by, seq};
}

/* Send chunk `c` again, flagged RESEND; arm its timer for the next timeout (doubled by each timeout so far) and
 * note which chunk's RESULT would show this resend lost (Engine._resend). */
static void resend(Engine *e, chunk *c, double now, ina_tx *tx) {
    const reduction *r = reduction_of(e, c->handle);
    send_data(e, tx, r, c->index, priority(e, r->queued_at, now), 1);
    e->counters[C_RESENT]++;
    c->retries++;
    arm(e, c, now);
    uint64_t overtaken_by = e->next_send + e->early_resend - 1;
    if (e->early_resend && c->overtaken_by != overtaken_by) { /* else its entry is still queued */
        c->overtaken_by = overtaken_by;
        push_mark(e, overtaken_by, c->seq);
    }
}

/* Whether a RESULT overtook a transmission that resend_overtaken has not resent yet. */
static int overtake_due(const Engine *e) {
    if (!e->early_resend) return 0;
    return (e->marks_count && e->marks[e->marks_head].overtaken_by < e->answered) || e->unresent + e->early_resend < e->answered;
}

/* Resend at once every chunk whose last transmission the RESULT of the chunk sent `early_resend` after it overtook;
 * the timeout is not doubled: it did not expire (Engine._resend_overtaken). */
static void resend_overtaken(Engine *e, double now, ina_tx *tx) {
    if (!overtake_due(e)) return;
    size_t capacity = 2 * (size_t)e->window;
    while (e->marks_count && e->marks[e->marks_head].overtaken_by < e->answered) {
        resend_mark m = e->marks[e->marks_head];
        e->marks_head = (e->marks_head + 1) % capacity, e->marks_count--;
        chunk *c = outstanding(e, m.seq);
        if (c && c->overtaken_by == m.overtaken_by) {
            e->counters[C_EARLY_RESENT]++, c->short_timer = 1;
            resend(e, c, now, tx); /* its new mark is past every chunk sent: not due in this loop */
        }
    }
    for (; e->unresent + e->early_resend < e->answered; e->unresent++) {
        chunk *c = outstanding(e, e->unresent);
        if (c && !c->retries) { /* one resent before it was overtaken waits in the queue */
            e->counters[C_EARLY_RESENT]++, c->short_timer = 1;
            resend(e, c, now, tx);
        }
    }
}

/* Whether every chunk outstanding is among the last `early_resend` sent and one of them still counts its timeouts
 * from the estimate (served, the loop then ticks to shorten it). */
static int tail_due(Engine *e) {
    if (!e->early_resend || e->failed || e->oldest == e->next_send || e->oldest + e->early_resend < e->next_send) return 0;
    for (uint64_t seq = e->oldest; seq < e->next_send; seq++) {
        chunk *c = outstanding(e, seq);
        if (c && !c->short_timer) return 1;
    }
    return 0;
}

/* Once every chunk outstanding is among the last `early_resend` sent, their timers count from short_rto
 * (Engine._shorten_tail). */
static void shorten_tail(Engine *e, double now) {
    if (!tail_due(e)) return;
    for (uint64_t seq = e->oldest; seq < e->next_send; seq++) {
        chunk *c = outstanding(e, seq);
        if (!c || c->short_timer) continue;
        c->short_timer = 1;
        if (next_timeout(e, c, now) < c->deadline) arm(e, c, now);
    }
}

/* A batch is in: resend what its RESULTs overtook, then send what the window lets go (Engine._receive). */
static void after_receive(void *self, double now, ina_tx *tx) {
    resend_overtaken(self, now, tx);
    pump(self, now, tx);
    shorten_tail(self, now);
}

static int seq_before(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Of the `due` chunks that timed out now, the newest of the `early_resend` oldest: later ones timing out for the
 * first time are held back (Engine._hold_back); UINT64_MAX when none is. */
static uint64_t newest_probe_of(Engine *e, size_t due) {
    if (!e->early_resend || due <= e->early_resend) return UINT64_MAX;
    for (size_t i = 0; i < due; i++) e->probes[i] = e->due[i].seq;
    qsort(e->probes, due, sizeof *e->probes, seq_before);
    return e->probes[e->early_resend - 1];
}

/* Resend what timed out (the oldest, and what timed out before), then send what the window lets go (Engine._tick);
 * served, a batch's overtaken chunks first. */
static void tick(void *self, double now, ina_tx *tx) {
    Engine *e = self;
    if (e->failed) return;
    resend_overtaken(e, now, tx);
    size_t due = 0;
    while (e->timers_count && e->timers[0].deadline <= now) { /* every armed chunk whose deadline passed */
        timer t = e->timers[0];
        timers_pop(e->timers, &e->timers_count);
        for (uint64_t seq = t.seq; seq < t.end; seq++)
            if (armed(e, seq, t.deadline) && due < e->window) {
                e->due[due++] = (timer){t.deadline, seq, seq + 1};
                outstanding(e, seq)->deadline = INFINITY; /* re-armed below: an older entry of that deadline is stale too */
            }
    }
    for (size_t i = 1; i < due; i++) { /* in the reference's (deadline, seq) order: nearly sorted already */
        timer moving = e->due[i];
        size_t j = i;
        for (; j > 0 && (e->due[j - 1].deadline > moving.deadline ||
                         (e->due[j - 1].deadline == moving.deadline && e->due[j - 1].seq > moving.seq)); j--)
            e->due[j] = e->due[j - 1];
        e->due[j] = moving;
    }
    for (size_t i = 0; i < due; i++) {
        chunk *c = outstanding(e, e->due[i].seq);
        if (now >= c->first_sent + e->peer_timeout) {
            fail(e, c);
            return;
        }
        if (may_fail_over(e) && now >= c->first_sent + e->failover) {
            e->via_ps = 1, e->via_ps_since = now; /* the switch is silent: the PS takes this worker's DATA */
            e->counters[C_FAILOVERS]++;
        }
        c->timeouts++;
    }
    uint64_t newest_probe = newest_probe_of(e, due);
    for (size_t i = 0; i < due; i++) {
        chunk *c = outstanding(e, e->due[i].seq);
        if (c->seq <= newest_probe || c->timeouts > 1) {
            resend(e, c, now, tx);
            continue;
        }
        arm(e, c, now); /* held back */
        e->counters[C_HELD_BACK]++;
    }
    pump(self, now, tx);
    shorten_tail(e, now);
}

static double next_deadline(void *self) {
    Engine *e = self;
    if (e->failed) return INFINITY;
    while (e->timers_count && !timer_live(e, &e->timers[0])) /* completed or re-armed since */
        timers_pop(e->timers, &e->timers_count);
    if (overtake_due(e) || tail_due(e)) return 0.0; /* served: a batch's RESULTs overtook chunks or left a tail
                                                        * (sans-IO, receive handled them) */
    double due = e->timers_count ? e->timers[0].deadline : INFINITY;
    if (e->next_send < e->next_seq && e->next_send < e->oldest + e->window) {
        double queued = reduction_of(e, e->unsent_handle)->queued_at;
        if (queued < due) due = queued;
    }
    return due;
}

/* Room for `length` bytes in k->packet: 0 when out of memory. */
static int room_for(kept_result *k, uint32_t length) {
    if (k->room >= length) return 1;
    uint8_t *grown = realloc(k->packet, length);
    if (!grown) return 0;
    k->packet = grown, k->room = length;
    return 1;
}

/* Chunk seq's entry among the kept results (2W of them). */
static kept_result *kept_of(Engine *e, uint64_t seq) { return &e->results[ring_slot(e, seq, 2 * (uint64_t)e->window)]; }

/* An in_out entry's RESULT, as received, into `packet` (its `length` bytes): the header and the
 * payload words from its reduction's `out`. */
static void write_in_out(Engine *e, const kept_result *k, uint8_t *packet) {
    const reduction *r = reduction_of(e, k->handle);
    memcpy(packet, k->header, INA_HEADER_BYTES);
    ina_store_words(packet + INA_HEADER_BYTES, (const uint32_t *)r->out.buf + (size_t)k->index * r->per_result,
                    (k->length - INA_HEADER_BYTES) / 4);
}

/* Keep chunk `c`'s RESULT (`take` of its words fill `out`). In PS-only mode the PS's ring holds
 * every result a worker may still miss (docs/protocol.md, section 8): nothing is kept. */
static void keep_result(Engine *e, const reduction *r, const chunk *c, const uint8_t *data, uint32_t length, size_t take) {
    if (e->ps_only) return;
    kept_result *k = kept_of(e, c->seq);
    int in_out = INA_HEADER_BYTES + 4 * take == length;
    if (in_out) {
        memcpy(k->header, data, INA_HEADER_BYTES);
    } else if (room_for(k, length)) {
        memcpy(k->packet, data, length);
    } else {
        k->live = 0; /* not kept: a FETCH for it is counted missing */
        return;
    }
    k->seq = c->seq, k->handle = r->handle, k->index = c->index, k->length = length, k->in_out = in_out, k->live = 1;
    if (c->seq > e->newest_result) e->newest_result = c->seq;
}

/* Reduction `r` is handed back, and its `out` with it: its kept results (at most its last 2W
 * chunks) get payloads of their own. */
static void spill_results(Engine *e, const reduction *r) {
    uint64_t kept = 2 * (uint64_t)e->window, end = r->first_seq + r->chunks;
    for (uint64_t seq = r->chunks > kept ? end - kept : r->first_seq; seq < end; seq++) {
        kept_result *k = kept_of(e, seq);
        if (!k->live || !k->in_out || k->handle != r->handle) continue;
        if (room_for(k, k->length)) write_in_out(e, k, k->packet);
        else k->live = 0; /* out of memory: no longer kept */
        k->in_out = 0;
    }
}

/* The PS lost a result another worker needs: send it ours, as received (Engine._answer_fetch). */
static void answer_fetch(Engine *e, uint32_t wire_seq, ina_addr source, ina_tx *tx) {
    if (!e->has_ps || !ina_addr_eq(source, e->ps)) {
        e->counters[C_UNEXPECTED]++;
        return;
    }
    int64_t seq = (int64_t)e->newest_result - (int64_t)((uint32_t)e->newest_result - wire_seq);
    kept_result *k = seq < 0 ? NULL : kept_of(e, (uint64_t)seq);
    if (!k || !k->live || k->seq != (uint64_t)seq) {
        e->counters[C_FETCH_MISSING]++;
        return;
    }
    uint8_t *p = ina_tx_add(tx, source, k->length);
    if (p) {
        if (k->in_out) write_in_out(e, k, p);
        else memcpy(p, k->packet, k->length);
        e->bytes_sent += k->length;
    }
    e->counters[C_FETCH_ANSWERED]++;
}

/* One received datagram, in arrival order (Engine._accept's checks, in its order). */
static void receive(void *self, const uint8_t *data, size_t length, ina_addr source, double now, ina_tx *tx) {
    Engine *e = self;
    if (e->failed) return;
    if (!ina_addr_eq(source, e->destination) && !(e->has_other && ina_addr_eq(source, e->other))) {
        e->counters[C_FOREIGN]++;
        return;
    }
    ina_header h;
    if (!ina_parse(data, length, e->words, &h)) {
        e->counters[C_MALFORMED]++;
        return;
    }
    if (h.job != e->job || (h.kind != INA_RESULT && h.kind != INA_STATUS && h.kind != INA_FETCH)) {
        e->counters[C_UNEXPECTED]++;
        return;
    }
    if (h.kind == INA_FETCH) {
        answer_fetch(e, h.seq, source, tx);
        return;
    }
    chunk *c = outstanding(e, e->oldest + (uint32_t)(h.seq - (uint32_t)e->oldest));
    if (!c) {
        e->counters[C_LATE]++;
        return;
    }
    if (h.kind == INA_STATUS) { /* the PS holds its resend and sends the RESULT once it has one: not lost */
        c->status = h.bitmap, c->overtaken_by = 0;
        e->counters[C_STATUS]++;
        return;
    }
    reduction *r = reduction_of(e, c->handle);
    size_t sent = e->pad ? e->words : chunk_words(e, r, c->index); /* the DATA words: its RESULT is as long */
    size_t words = ina_result_words((uint32_t)sent, r->index_bits, r->lane_bits);
    if ((h.flags & INA_FLAG_MAX) != r->flags || h.lane_bits != r->lane_bits || h.index_bits != r->index_bits ||
        h.bitmap != e->full || length != INA_HEADER_BYTES + 4 * words) { /* as long as the chunk sent */
        e->counters[C_UNEXPECTED]++;
        return;
    }
    c->live = 0;
    while (e->oldest < e->next_send && !e->outstanding[ring_slot(e, e->oldest, e->window)].live) e->oldest++;
    if (c->retries == 0) sample_rtt(e, now - c->first_sent);
    if (c->seq >= e->answered) e->answered = c->seq + 1;
    size_t room = (size_t)r->out.len / 4, at = (size_t)c->index * r->per_result;
    size_t row = room - at < r->per_result ? room - at : r->per_result, take = row < words ? row : words;
    ina_load_words((uint32_t *)r->out.buf + at, data + INA_HEADER_BYTES, take);
    memset((uint32_t *)r->out.buf + at + take, 0, 4 * (row - take)); /* an indices chunk's short RESULT */
    keep_result(e, r, c, data, (uint32_t)length, take);
    e->counters[C_DELIVERED]++;
    if (--r->remaining == 0) signal_changed(e);
}

/* ------------------------------------------------------------------ Python methods */

static void release(reduction *r) {
    PyBuffer_Release(&r->words);
    PyBuffer_Release(&r->out);
}

static int Engine_init(Engine *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"job", "rank", "workers", "words", "window", "destination", "other", "ps", "pool",
                            "slot_base", "span", "ps_only", "min_rto", "max_rto", "initial_rto", "peer_timeout",
                            "first_seq", "level", "reference_rate", "levels_per_doubling", "time_constant",
                            "age_step", "decaying_bytes", "observed_at", "served", "failover", "failback", "pad", "offset", "racks", "total",
                            "early_resend", NULL};
    unsigned job, rank, workers, words, window, pool, slot_base, span, racks = 0, early_resend = 0;
    unsigned long long first_seq;
    PyObject *destination, *other, *ps;
    int ps_only, level, served, pad = 0;
    if (self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "the engine is set up already");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "IIIIIOOOIIIpddddKiddddddp|ddpdIdI", names, &job, &rank, &workers, &words,
                                     &window, &destination, &other, &ps, &pool, &slot_base, &span, &ps_only,
                                     &self->min_rto, &self->max_rto, &self->initial_rto, &self->peer_timeout,
                                     &first_seq, &level, &self->reference_rate, &self->levels_per_doubling,
                                     &self->time_constant, &self->age_step, &self->decaying_bytes,
                                     &self->observed_at, &served, &self->failover, &self->failback, &pad, &self->offset, &racks, &self->total, &early_resend))
        return -1;
    if (job > 0xFFFF || workers < 1 || workers > INA_MAX_WORKERS || rank >= workers || words < 1 ||
        words > (INA_MAX_PAYLOAD - INA_HEADER_BYTES) / 4 || window < 1 || pool < 1 || (pool & (pool - 1)) ||
        span < 1 || (span & (span - 1)) || level > 255 || racks == 1 || racks > INA_MAX_WORKERS) {
        PyErr_SetString(PyExc_ValueError, "an engine config out of range (EngineConfig checks it first)");
        return -1;
    }
    unsigned ip, port;
    if (!PyArg_ParseTuple(destination, "II", &ip, &port)) return -1;
    self->destination = (ina_addr){ip, (uint16_t)port};
    self->has_other = other != Py_None, self->has_ps = ps != Py_None;
    if (self->has_other) {
        if (!PyArg_ParseTuple(other, "II", &ip, &port)) return -1;
        self->other = (ina_addr){ip, (uint16_t)port};
    }
    if (self->has_ps) {
        if (!PyArg_ParseTuple(ps, "II", &ip, &port)) return -1;
        self->ps = (ina_addr){ip, (uint16_t)port};
    }
    self->job = (uint16_t)job, self->rank = (uint8_t)rank, self->full = (uint32_t)(((uint64_t)1 << (racks ? racks : workers)) - 1);
    self->words = words, self->window = window, self->slot_base = slot_base, self->ps_only = ps_only, self->pad = pad;
    self->window_pow2 = (window & (window - 1)) == 0;
    self->span_mask = span - 1, self->pool_mask = pool - 1, self->level = level;
    self->next_seq = self->next_send = self->oldest = self->answered = self->unresent = first_seq;
    self->early_resend = early_resend;
    self->outstanding = calloc(window, sizeof *self->outstanding);
    self->results = calloc(2 * (size_t)window, sizeof *self->results);
    self->timers_capacity = 2 * (size_t)window + 16;
    self->timers = malloc(self->timers_capacity * sizeof *self->timers);
    self->due = malloc(window * sizeof *self->due);
    self->marks = malloc(2 * (size_t)window * sizeof *self->marks);
    self->probes = malloc(window * sizeof *self->probes);
    if (!self->outstanding || !self->results || !self->timers || !self->due || !self->marks || !self->probes) {
        free(self->outstanding), free(self->results), free(self->timers), free(self->due), free(self->marks), free(self->probes);
        PyErr_NoMemory();
        return -1;
    }
    if (ina_loop_init(&self->loop, served ? RX_MESSAGES : 1) < 0) {
        PyErr_SetString(PyExc_MemoryError, self->loop.error);
        ina_loop_free(&self->loop);
        free(self->outstanding), free(self->results), free(self->timers), free(self->due), free(self->marks), free(self->probes);
        return -1;
    }
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(&self->changed, &attributes);
    pthread_condattr_destroy(&attributes);
    self->node = (ina_node){self, receive, tick, next_deadline};
    self->ready = 1;
    return 0;
}

static void Engine_dealloc(Engine *self) {
    if (self->ready) {
        for (size_t i = 0; i < self->reductions_count; i++)
            release(&self->reductions[reduction_slot(self, i)]);
        for (size_t i = 0; i < 2 * (size_t)self->window; i++) free(self->results[i].packet);
        free(self->reductions), free(self->outstanding), free(self->timers), free(self->due), free(self->results), free(self->marks);
        free(self->probes);
        pthread_cond_destroy(&self->changed);
        ina_loop_free(&self->loop);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int grow_reductions(Engine *e) {
    size_t capacity = e->reductions_capacity ? 2 * e->reductions_capacity : 16;
    reduction *grown = malloc(capacity * sizeof *grown);
    if (!grown) return -1;
    for (size_t i = 0; i < e->reductions_count; i++)
        grown[i] = e->reductions[reduction_slot(e, i)];
    free(e->reductions);
    e->reductions = grown, e->reductions_capacity = capacity, e->reductions_head = 0;
    return 0;
}

/* submit(words, out, is_max, lane_bits, index_bits, now) -> handle. `words`: C-contiguous uint32,
 * read in place until the reduction is handed back; `out`: writable, exactly its result length. */
static PyObject *Engine_submit(Engine *self, PyObject *args) {
    PyObject *words_object, *out_object;
    int is_max;
    unsigned lane_bits, index_bits;
    double now;
    if (!PyArg_ParseTuple(args, "OOpIId", &words_object, &out_object, &is_max, &lane_bits, &index_bits, &now)) return NULL;
    if (!ina_lane_width_ok(lane_bits) || index_bits > INA_MAX_INDEX_BITS || (is_max && (lane_bits != 32 || index_bits))) {
        PyErr_SetString(PyExc_ValueError, "a format the protocol cannot carry (Engine.submit checks it first)");
        return NULL;
    }
    reduction r = {.flags = is_max ? INA_FLAG_MAX : 0, .lane_bits = (uint8_t)lane_bits, .index_bits = (uint8_t)index_bits,
                   .queued_at = now};
    if (PyObject_GetBuffer(words_object, &r.words, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(out_object, &r.out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&r.words);
        return NULL;
    }
    size_t count = (size_t)r.words.len / 4;
    uint64_t chunks = (count + self->words - 1) / self->words;
    r.per_result = ina_result_words(self->words, index_bits, lane_bits);
    uint64_t length = index_bits ? chunks * r.per_result : count;
    if (r.words.len % 4 || count == 0 || chunks > UINT32_MAX || (uint64_t)r.out.len != 4 * length) {
        release(&r);
        PyErr_SetString(PyExc_ValueError, "submit non-empty uint32 words and an output of the result's length");
        return NULL;
    }
    r.chunks = r.remaining = (uint32_t)chunks;
    ina_py_lock(&self->loop);
    if (self->failed || (self->reductions_count == self->reductions_capacity && grow_reductions(self) < 0)) {
        int failed = self->failed;
        ina_py_unlock(&self->loop);
        release(&r);
        if (failed) PyErr_SetString(PyExc_RuntimeError, "the engine has failed");
        else PyErr_NoMemory();
        return NULL;
    }
    if (self->reductions_count == 0) self->head_handle = self->next_handle;
    r.handle = self->next_handle++, r.first_seq = self->next_seq;
    self->reductions[reduction_slot(self, self->reductions_count++)] = r;
    self->next_seq += chunks;
    observe(self, 4.0 * (double)count, now);
    if (self->loop.fd >= 0) ina_loop_wake(&self->loop); /* served: the loop sends it */
    ina_py_unlock(&self->loop);
    return PyLong_FromUnsignedLongLong(r.handle);
}

/* completed() -> [(handle, out)]: reductions finished since the last call, in submission order. */
static PyObject *Engine_completed(Engine *self, PyObject *unused) {
    (void)unused;
    PyObject *done = PyList_New(0);
    if (!done) return NULL;
    ina_py_lock(&self->loop);
    while (self->reductions_count) {
        reduction *r = &self->reductions[self->reductions_head];
        if (r->remaining) break;
        PyObject *item = Py_BuildValue("KO", (unsigned long long)r->handle, r->out.obj);
        if (!item || PyList_Append(done, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(done);
            break;
        }
        Py_DECREF(item);
        spill_results(self, r);
        release(r);
        self->reductions_head = reduction_slot(self, 1);
        self->reductions_count--, self->head_handle++;
    }
    ina_py_unlock(&self->loop);
    return done;
}

static int head_done(Engine *e) { return e->reductions_count && e->reductions[e->reductions_head].remaining == 0; }

/* wait(timeout) -> bool: block, without the GIL, until the oldest reduction is done, the engine
 * failed or it was stopped; False when `timeout` seconds passed first. */
static PyObject *Engine_wait(Engine *self, PyObject *args) {
    double timeout;
    if (!PyArg_ParseTuple(args, "d", &timeout)) return NULL;
    int ready;
    Py_BEGIN_ALLOW_THREADS
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double whole = floor(timeout);
    until.tv_sec += (time_t)whole;
    until.tv_nsec += (long)((timeout - whole) * 1e9);
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&self->loop.lock);
    while (!(ready = head_done(self) || self->failed || self->loop.stop))
        if (pthread_cond_timedwait(&self->changed, &self->loop.lock, &until) != 0) break;
    pthread_mutex_unlock(&self->loop.lock);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(ready);
}

static PyObject *Engine_receive(Engine *self, PyObject *args) { return ina_py_receive_then(&self->loop, &self->node, args, after_receive); }

static PyObject *Engine_tick(Engine *self, PyObject *args) { return ina_py_tick(&self->loop, &self->node, args); }

static PyObject *Engine_next_deadline(Engine *self, PyObject *unused) {
    (void)unused;
    return ina_py_next_deadline(&self->loop, &self->node);
}

static PyObject *Engine_idle(Engine *self, PyObject *unused) {
    (void)unused;
    ina_py_lock(&self->loop);
    int idle = self->next_send == self->next_seq && self->oldest == self->next_send;
    ina_py_unlock(&self->loop);
    return PyBool_FromLong(idle);
}

/* counters() -> {name: count}, the counters that are not zero (as a Counter holds them). */
static PyObject *Engine_counters(Engine *self, PyObject *unused) {
    (void)unused;
    uint64_t counters[C_COUNT];
    ina_py_lock(&self->loop);
    memcpy(counters, self->counters, sizeof counters);
    ina_py_unlock(&self->loop);
    PyObject *out = PyDict_New();
    for (int i = 0; out && i < C_COUNT; i++) {
        if (!counters[i]) continue;
        PyObject *value = PyLong_FromUnsignedLongLong(counters[i]);
        if (!value || PyDict_SetItemString(out, counter_names[i], value) < 0) Py_CLEAR(out);
        Py_XDECREF(value);
    }
    return out;
}

/* failure() -> None, or (wire seq, reduction handle, resends, STATUS bitmap or None) of the chunk that timed out. */
static PyObject *Engine_failure(Engine *self, PyObject *unused) {
    (void)unused;
    ina_py_lock(&self->loop);
    int failed = self->failed;
    uint64_t seq = self->failed_seq, handle = self->failed_handle;
    uint32_t retries = self->failed_retries;
    int64_t status = self->failed_status;
    ina_py_unlock(&self->loop);
    if (!failed) Py_RETURN_NONE;
    if (status < 0) return Py_BuildValue("kKIO", (unsigned long)(uint32_t)seq, (unsigned long long)handle, retries, Py_None);
    return Py_BuildValue("kKIL", (unsigned long)(uint32_t)seq, (unsigned long long)handle, retries, (long long)status);
}

/* rtt() -> (srtt or None, rttvar, rto): the estimator's state (RttEstimator). */
static PyObject *Engine_rtt(Engine *self, PyObject *unused) {
    (void)unused;
    ina_py_lock(&self->loop);
    int sampled = self->sampled;
    double srtt = self->srtt, rttvar = self->rttvar, timeout = rto(self);
    ina_py_unlock(&self->loop);
    if (!sampled) return Py_BuildValue("Odd", Py_None, rttvar, timeout);
    return Py_BuildValue("ddd", srtt, rttvar, timeout);
}

static PyObject *Engine_bytes_sent(Engine *self, PyObject *unused) {
    (void)unused;
    ina_py_lock(&self->loop);
    uint64_t sent = self->bytes_sent;
    ina_py_unlock(&self->loop);
    return PyLong_FromUnsignedLongLong(sent);
}

static PyObject *Engine_serve(Engine *self, PyObject *args) { return ina_py_serve(&self->loop, &self->node, args); }

/* stop(): the served loop returns, and `wait` too. */
static PyObject *Engine_stop(Engine *self, PyObject *unused) {
    (void)unused;
    ina_py_lock(&self->loop);
    ina_loop_stop(&self->loop);
    signal_changed(self);
    ina_py_unlock(&self->loop);
    Py_RETURN_NONE;
}

static PyObject *Engine_refused(Engine *self, PyObject *unused) {
    (void)unused;
    return ina_py_refused(&self->loop);
}

static PyMethodDef Engine_methods[] = {
    {"submit", (PyCFunction)Engine_submit, METH_VARARGS, "Queue a reduction: (words, out, is_max, lane_bits, index_bits, now) -> handle."},
    {"completed", (PyCFunction)Engine_completed, METH_NOARGS, "[(handle, out)] finished since the last call, in order."},
    {"wait", (PyCFunction)Engine_wait, METH_VARARGS, "Block (GIL released) until a reduction is done, a failure or stop."},
    {"receive", (PyCFunction)Engine_receive, METH_VARARGS, "Take a batch of frames; returns the frames to send."},
    {"tick", (PyCFunction)Engine_tick, METH_VARARGS, "Run the timers due at now; returns the frames to send."},
    {"next_deadline", (PyCFunction)Engine_next_deadline, METH_NOARGS, "When tick next has work, or None."},
    {"idle", (PyCFunction)Engine_idle, METH_NOARGS, "Nothing queued and nothing outstanding."},
    {"counters", (PyCFunction)Engine_counters, METH_NOARGS, "The counters that are not zero."},
    {"failure", (PyCFunction)Engine_failure, METH_NOARGS, "None, or the timed-out chunk's facts."},
    {"rtt", (PyCFunction)Engine_rtt, METH_NOARGS, "(srtt or None, rttvar, rto)."},
    {"bytes_sent", (PyCFunction)Engine_bytes_sent, METH_NOARGS, "UDP payload bytes queued to send."},
    {"serve", (PyCFunction)Engine_serve, METH_VARARGS, "serve(fd[, group]): serve the socket fd (and read a RESULT group's socket) with the GIL released until stop()."},
    {"stop", (PyCFunction)Engine_stop, METH_NOARGS, "Stop serving and waiting."},
    {"refused", (PyCFunction)Engine_refused, METH_NOARGS, "Datagrams the kernel refused to send."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ina.transport._native.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The worker engine's chunk stream (see ina/transport/native.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ina.transport._native", "The native worker engine.", -1, NULL};

PyMODINIT_FUNC PyInit__native(void) { return ina_py_module(&module, &EngineType, "Engine", NULL, 0); }
