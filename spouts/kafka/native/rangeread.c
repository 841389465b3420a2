/* A range reader for one Kafka partition: librdkafka's messages straight into Arrow-shaped buffers.
 *
 * The Python reader hands out one Python object per message (confluent-kafka's Message), which costs
 * more CPU than librdkafka's fetch itself. This reader consumes with librdkafka's batch call and copies
 * offsets, timestamps, keys and values into column buffers; Python wraps a chunk of them as one Arrow
 * record batch (spouts/kafka/native/__init__.py). It keeps the Python reader's rules (spouts/kafka/
 * reader.py): it stops on position, never on a count; an end-of-partition event moves the position; an
 * error message stops the chunk and is handed back with the messages after it kept for the next call.
 *
 * Loaded with ctypes; links against the librdkafka confluent-kafka ships, so one librdkafka serves both
 * readers. Thread use: one reader at a time per thread (the Python pool leases them exclusively); the
 * error and log callbacks may come from librdkafka's threads and take the reader's lock.
 */
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TEXT 512
#define LOG_LINES 32
/* Value and key buffers keep at most this many bytes between reads: a read that needed much less than a larger
 * buffer holds (a quarter) gives the rest back, and so does an unassign, so one large record does not stay
 * resident in every idle reader of the pool. */
#ifndef KEEP_BYTES
#define KEEP_BYTES (1024 * 1024)
#endif

typedef struct {
    int64_t count;            /* records in this chunk */
    int64_t pos;              /* the position after it: the next offset to read */
    int64_t *offsets;         /* count */
    int64_t *timestamps_us;   /* count; undefined where missing */
    uint8_t *timestamp_valid; /* bitmap */
    int64_t timestamps_missing;
    int32_t *value_offsets;   /* count + 1 */
    char *values;
    uint8_t *value_valid;     /* bitmap */
    int64_t values_null;
    int32_t *key_offsets;     /* count + 1 */
    char *keys;
    uint8_t *key_valid;       /* bitmap */
    int64_t keys_null;
    int32_t err;              /* the error message that stopped the chunk (0: none) */
    int32_t fatal;
    int64_t err_offset;
    char err_str[TEXT];
} rr_chunk;

typedef struct {
    int level;
    char fac[32];
    char text[TEXT];
} rr_log_line;

typedef struct {
    rd_kafka_t *rk;
    rd_kafka_queue_t *queue;
    char topic[256];
    int32_t partition;
    rd_kafka_message_t **held; /* consumed, not yet looked at (after an error, or a full chunk) */
    size_t held_at, held_n, held_cap;
    size_t records_cap, values_cap, keys_cap;
    rr_chunk chunk;
    pthread_mutex_t lock;      /* the fields below: written by librdkafka's callbacks */
    int32_t told_err;          /* the last error told to the error callback */
    char told_str[TEXT];
    rr_log_line logs[LOG_LINES];
    int logs_n, logs_dropped;
} rr_reader;

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    (void)rk;
    rr_reader *r = opaque;
    pthread_mutex_lock(&r->lock);
    r->told_err = err;
    strncpy(r->told_str, reason ? reason : "", TEXT - 1);
    r->told_str[TEXT - 1] = 0;
    pthread_mutex_unlock(&r->lock);
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    rr_reader *r = rd_kafka_opaque(rk);
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    if (r->logs_n < LOG_LINES) {
        rr_log_line *l = &r->logs[r->logs_n++];
        l->level = level;
        strncpy(l->fac, fac ? fac : "", sizeof l->fac - 1);
        l->fac[sizeof l->fac - 1] = 0;
        strncpy(l->text, buf ? buf : "", TEXT - 1);
        l->text[TEXT - 1] = 0;
    } else {
        r->logs_dropped++;
    }
    pthread_mutex_unlock(&r->lock);
}

static void drop_held(rr_reader *r) {
    for (size_t i = r->held_at; i < r->held_n; i++)
        rd_kafka_message_destroy(r->held[i]);
    r->held_at = r->held_n = 0;
}

void rr_close(rr_reader *r) {
    if (!r)
        return;
    drop_held(r);
    if (r->queue)
        rd_kafka_queue_destroy(r->queue);
    if (r->rk) {
        rd_kafka_consumer_close(r->rk);
        rd_kafka_destroy(r->rk);
    }
    rr_chunk *c = &r->chunk;
    free(c->offsets); free(c->timestamps_us); free(c->timestamp_valid);
    free(c->value_offsets); free(c->values); free(c->value_valid);
    free(c->key_offsets); free(c->keys); free(c->key_valid);
    free(r->held);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* A consumer with the n settings names[i]=values[i]; NULL with the reason in errstr. */
rr_reader *rr_open(int n, const char **names, const char **values, char *errstr, size_t errlen) {
    rr_reader *r = calloc(1, sizeof *r);
    if (!r) {
        strncpy(errstr, "out of memory", errlen);
        return NULL;
    }
    pthread_mutex_init(&r->lock, NULL);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (int i = 0; i < n; i++) {
        if (rd_kafka_conf_set(conf, names[i], values[i], errstr, errlen) != RD_KAFKA_CONF_OK) {
            rd_kafka_conf_destroy(conf);
            pthread_mutex_destroy(&r->lock);
            free(r);
            return NULL;
        }
    }
    rd_kafka_conf_set_opaque(conf, r);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_log_cb(conf, on_log);
    r->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, errlen); /* owns conf on success */
    if (!r->rk) {
        rd_kafka_conf_destroy(conf);
        pthread_mutex_destroy(&r->lock);
        free(r);
        return NULL;
    }
    rd_kafka_poll_set_consumer(r->rk); /* errors and logs come with the messages */
    r->queue = rd_kafka_queue_get_consumer(r->rk);
    return r;
}

/* Read topic's partition from offset on (an unassign first, dropping what an earlier read left). */
int rr_assign(rr_reader *r, const char *topic, int32_t partition, int64_t offset) {
    drop_held(r);
    strncpy(r->topic, topic, sizeof r->topic - 1);
    r->topic[sizeof r->topic - 1] = 0;
    r->partition = partition;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset = offset;
    rd_kafka_resp_err_t err = rd_kafka_assign(r->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    return err;
}

/* Gives back what a byte buffer holds past max(used, KEEP_BYTES) when it needed less than a quarter of it; the
 * first used bytes stay (realloc keeps them; the buffer may move, and the chunk's pointer with it). */
static void shrink(char **p, size_t *cap, size_t used) {
    if (*cap <= KEEP_BYTES || used >= *cap / 4)
        return;
    size_t n = used > KEEP_BYTES ? used : KEEP_BYTES;
    char *q = realloc(*p, n);
    if (q) { /* a failed shrink keeps the larger buffer: nothing is lost */
        *p = q;
        *cap = n;
    }
}

/* The bytes the reader's buffers hold now (column buffers and the held-message list; not librdkafka's queues). */
size_t rr_held_bytes(rr_reader *r) {
    size_t per_record = 8 + 8 + 4 + 4 + 3; /* offsets, timestamps, value and key offsets, bitmaps (rounded up) */
    return r->values_cap + r->keys_cap + r->records_cap * per_record + r->held_cap * sizeof *r->held;
}

/* Stops reading the partition; the chunk is no longer looked at, so its byte buffers shrink back. */
int rr_unassign(rr_reader *r) {
    drop_held(r);
    shrink(&r->chunk.values, &r->values_cap, 0);
    shrink(&r->chunk.keys, &r->keys_cap, 0);
    return rd_kafka_assign(r->rk, NULL);
}

int rr_watermarks(rr_reader *r, const char *topic, int32_t partition, int64_t *low, int64_t *high, int timeout_ms) {
    return rd_kafka_query_watermark_offsets(r->rk, topic, partition, low, high, timeout_ms);
}

/* The last error told to the error callback since the last call (0: none), its reason in buf. */
int rr_told(rr_reader *r, char *buf, size_t len) {
    pthread_mutex_lock(&r->lock);
    int err = r->told_err;
    strncpy(buf, r->told_str, len - 1);
    buf[len - 1] = 0;
    r->told_err = 0;
    r->told_str[0] = 0;
    pthread_mutex_unlock(&r->lock);
    return err;
}

/* Moves the log lines kept since the last call into out (at most LOG_LINES); returns how many, and in
 * *dropped how many did not fit. */
int rr_logs(rr_reader *r, rr_log_line *out, int *dropped) {
    pthread_mutex_lock(&r->lock);
    int n = r->logs_n;
    memcpy(out, r->logs, sizeof(rr_log_line) * (size_t)n);
    *dropped = r->logs_dropped;
    r->logs_n = r->logs_dropped = 0;
    pthread_mutex_unlock(&r->lock);
    return n;
}

int rr_log_capacity(void) { return LOG_LINES; }
size_t rr_log_line_size(void) { return sizeof(rr_log_line); }
size_t rr_chunk_size(void) { return sizeof(rr_chunk); }

/* At least need units at *p, never a null buffer (copying 0 bytes to a null pointer is undefined behaviour). */
static int grow(void **p, size_t *cap, size_t need, size_t unit) {
    if (need <= *cap && *p)
        return 0;
    size_t n = *cap ? *cap : 1024;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * unit);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int reserve_records(rr_reader *r, size_t records) {
    if (records <= r->records_cap)
        return 0;
    rr_chunk *c = &r->chunk;
    size_t bitmap = (records + 7) / 8;
    void *a = realloc(c->offsets, records * 8), *b = NULL, *d = NULL, *e = NULL, *f = NULL, *g = NULL, *h = NULL;
    if (a) c->offsets = a;
    if (a) b = realloc(c->timestamps_us, records * 8);
    if (b) c->timestamps_us = b;
    if (b) d = realloc(c->timestamp_valid, bitmap);
    if (d) c->timestamp_valid = d;
    if (d) e = realloc(c->value_offsets, (records + 1) * 4);
    if (e) c->value_offsets = e;
    if (e) f = realloc(c->value_valid, bitmap);
    if (f) c->value_valid = f;
    if (f) g = realloc(c->key_offsets, (records + 1) * 4);
    if (g) c->key_offsets = g;
    if (g) h = realloc(c->key_valid, bitmap);
    if (h) c->key_valid = h;
    if (!h)
        return -1;
    r->records_cap = records;
    return 0;
}

static void set_bit(uint8_t *bitmap, int64_t i, int on) {
    if (on)
        bitmap[i >> 3] |= (uint8_t)(1u << (i & 7));
    else
        bitmap[i >> 3] &= (uint8_t)~(1u << (i & 7));
}

static int same_partition(rr_reader *r, const rd_kafka_message_t *m) {
    return m->rkt && m->partition == r->partition && strcmp(rd_kafka_topic_name(m->rkt), r->topic) == 0;
}

/* What one message does to the chunk: 1 taken or skipped, 0 the chunk is full (message kept), -1 the
 * chunk ends here (range end reached, or an error message: message consumed). */
static int take(rr_reader *r, rd_kafka_message_t *m, int64_t end, int64_t max_records, int64_t max_bytes,
                int want_keys) {
    rr_chunk *c = &r->chunk;
    if (!same_partition(r, m) || m->offset < 0) /* an earlier assignment's, or an event without a position */
        return 1;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        if (m->offset > c->pos)
            c->pos = m->offset; /* everything before the end was delivered or was a gap */
        return c->pos >= end ? -1 : 1;
    }
    if (m->err) {
        c->err = m->err;
        c->fatal = m->err == RD_KAFKA_RESP_ERR__FATAL;
        if (c->fatal)
            c->err = rd_kafka_fatal_error(r->rk, c->err_str, sizeof c->err_str);
        else
            strncpy(c->err_str, rd_kafka_message_errstr(m), TEXT - 1);
        c->err_str[TEXT - 1] = 0;
        c->err_offset = m->offset;
        return -1;
    }
    if (m->offset >= end) {
        c->pos = end;
        return -1;
    }
    if (m->offset < c->pos)
        return 1;
    int64_t i = c->count;
    if (m->len > INT32_MAX || m->key_len > INT32_MAX)
        return -2; /* more than Arrow's int32 offsets can hold */
    if (i >= max_records || (i > 0 && (c->value_offsets[i] + (int64_t)m->len > max_bytes
                                       || (want_keys && c->key_offsets[i] + (int64_t)m->key_len > max_bytes))))
        return 0; /* a chunk holds at least one record */
    if (grow((void **)&c->values, &r->values_cap, (size_t)c->value_offsets[i] + m->len, 1) < 0)
        return -3;
    c->offsets[i] = m->offset;
    rd_kafka_timestamp_type_t tstype;
    int64_t ms = rd_kafka_message_timestamp(m, &tstype);
    int has_ts = tstype != RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    c->timestamps_us[i] = has_ts ? ms * 1000 : 0;
    set_bit(c->timestamp_valid, i, has_ts);
    c->timestamps_missing += !has_ts;
    if (m->payload)
        memcpy(c->values + c->value_offsets[i], m->payload, m->len);
    c->value_offsets[i + 1] = c->value_offsets[i] + (int32_t)(m->payload ? m->len : 0);
    set_bit(c->value_valid, i, m->payload != NULL);
    c->values_null += m->payload == NULL;
    if (want_keys) {
        if (grow((void **)&c->keys, &r->keys_cap, (size_t)c->key_offsets[i] + m->key_len, 1) < 0)
            return -3;
        if (m->key)
            memcpy(c->keys + c->key_offsets[i], m->key, m->key_len);
        c->key_offsets[i + 1] = c->key_offsets[i] + (int32_t)(m->key ? m->key_len : 0);
        set_bit(c->key_valid, i, m->key != NULL);
        c->keys_null += m->key == NULL;
    }
    c->count = i + 1;
    c->pos = m->offset + 1;
    return 1;
}

/* Fills the reader's chunk with the records of the assigned partition at offsets [pos, end), at most
 * max_records and (past its first record) max_bytes of values and of keys, waiting up to timeout_ms for each batch librdkafka hands over. Stops at the end of the
 * range, a full chunk, an error message, or a wait that brought nothing. Returns 0, or -2 when one
 * record is larger than 2 GiB, -3 when memory ran out. */
static int fill(rr_reader *r, int64_t pos, int64_t end, int64_t max_records, int64_t max_bytes, int timeout_ms,
                int want_keys, rr_chunk **out) {
    rr_chunk *c = &r->chunk;
    *out = c;
    c->count = 0;
    c->pos = pos;
    c->timestamps_missing = c->values_null = c->keys_null = 0;
    c->err = c->fatal = 0;
    c->err_offset = -1;
    c->err_str[0] = 0;
    if (max_records < 1)
        max_records = 1;
    if (max_bytes < 1 || max_bytes > INT32_MAX)
        max_bytes = INT32_MAX;
    if (reserve_records(r, (size_t)max_records) < 0 || grow((void **)&r->held, &r->held_cap, (size_t)max_records, sizeof *r->held) < 0)
        return -3;
    memset(c->timestamp_valid, 0, (size_t)(max_records + 7) / 8);
    memset(c->value_valid, 0, (size_t)(max_records + 7) / 8);
    memset(c->key_valid, 0, (size_t)(max_records + 7) / 8);
    c->value_offsets[0] = c->key_offsets[0] = 0;
    for (;;) {
        if (c->pos >= end) {
            drop_held(r); /* past the range: never looked at */
            return 0;
        }
        if (r->held_at == r->held_n) {
            r->held_at = r->held_n = 0;
            /* librdkafka's batch call waits until it has them all or the time is up: never ask for more than
             * the range can still hold (fewer arrive when the range has gaps: markers, aborted records) */
            int64_t room = max_records - c->count;
            if (end - c->pos < room)
                room = end - c->pos;
            ssize_t got = rd_kafka_consume_batch_queue(r->queue, timeout_ms, r->held, (size_t)room);
            if (got <= 0)
                return 0; /* nothing came within the wait: the caller checks its deadline */
            r->held_n = (size_t)got;
        }
        while (r->held_at < r->held_n) {
            rd_kafka_message_t *m = r->held[r->held_at];
            int taken = take(r, m, end, max_records, max_bytes, want_keys);
            if (taken == 0)
                return 0; /* the chunk is full: m and the rest wait for the next call */
            if (taken < -1)
                return taken;
            r->held_at++;
            rd_kafka_message_destroy(m);
            if (c->pos >= end)
                break;
            if (taken < 0 && c->pos < end)
                return 0; /* an error message: the caller judges it */
        }
        if (c->count >= max_records)
            return 0;
    }
}

/* Fills the chunk (fill, above), then gives back what its byte buffers hold well past this read's need. */
int rr_read(rr_reader *r, int64_t pos, int64_t end, int64_t max_records, int64_t max_bytes, int timeout_ms,
            int want_keys, rr_chunk **out) {
    int rc = fill(r, pos, end, max_records, max_bytes, timeout_ms, want_keys, out);
    rr_chunk *c = &r->chunk;
    int64_t n = rc == 0 ? c->count : 0;
    shrink(&c->values, &r->values_cap, rc == 0 && c->value_offsets ? (size_t)c->value_offsets[n] : 0);
    shrink(&c->keys, &r->keys_cap, rc == 0 && want_keys && c->key_offsets ? (size_t)c->key_offsets[n] : 0);
    return rc;
}
