/* fastwire.c -- the fast path's wire format: a read or write request's msgpack header read
 * into a pv_fast_req (fast.c makes it a job), and the replies written as Python writes them.
 *
 * A small msgpack reader that knows only the fields of the common read or write (op, ino,
 * stripe, a plain region list, cred, fresh). It only ever accepts or declines (-1): a field
 * it does not know (hint, mtime_ns), a value it does not accept, anything malformed is
 * declined, and the frame goes to Python, which answers it as before. Bounds are the
 * schema's (schema.py, describe.py), so what it accepts Python would accept too.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"

#define FAST_MAX_REGIONS 4096         /* longer region lists go to Python */
#define FAST_MAX_OFFSET ((int64_t)1 << 62)        /* describe.py's MAX_OFFSET */
#define FAST_MAX_GROUPS 64            /* schema.MAX_GROUPS */

/* -- the msgpack reader: accepts what it knows, declines (-1) everything else ------------ */

struct mp {
    const unsigned char *p, *end;
};

static int mp_need(struct mp *m, size_t n)
{
    return (size_t)(m->end - m->p) >= n ? 0 : -1;
}

static uint64_t mp_be(const unsigned char *p, int n)
{
    uint64_t v = 0;

    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* A non-negative integer of any msgpack encoding (negative ones are declined: no field of a
 * read or write takes one). */
static int mp_uint(struct mp *m, uint64_t *v)
{
    unsigned char t;
    int n;

    if (mp_need(m, 1) < 0)
        return -1;
    t = *m->p;
    if (t <= 0x7f) {
        m->p++;
        *v = t;
        return 0;
    }
    switch (t) {
    case 0xcc: case 0xd0: n = 1; break;
    case 0xcd: case 0xd1: n = 2; break;
    case 0xce: case 0xd2: n = 4; break;
    case 0xcf: case 0xd3: n = 8; break;
    default: return -1;
    }
    if (mp_need(m, 1 + (size_t)n) < 0)
        return -1;
    *v = mp_be(m->p + 1, n);
    /* A signed encoding is accepted for its non-negative values only. */
    if (t >= 0xd0 && (*v >> (n * 8 - 1)) != 0)
        return -1;
    m->p += 1 + n;
    return 0;
}

static int mp_uint_max(struct mp *m, uint64_t max, uint64_t *v)
{
    return mp_uint(m, v) < 0 || *v > max ? -1 : 0;
}

static int mp_str(struct mp *m, const char **s, size_t *len)
{
    unsigned char t;
    size_t hdr;

    if (mp_need(m, 1) < 0)
        return -1;
    t = *m->p;
    if ((t & 0xe0) == 0xa0) {
        hdr = 1;
        *len = t & 0x1f;
    } else if (t == 0xd9 || t == 0xda) {
        hdr = t == 0xd9 ? 2 : 3;
        if (mp_need(m, hdr) < 0)
            return -1;
        *len = (size_t)mp_be(m->p + 1, (int)hdr - 1);
    } else {
        return -1;
    }
    if (mp_need(m, hdr + *len) < 0)
        return -1;
    *s = (const char *)m->p + hdr;
    m->p += hdr + *len;
    return 0;
}

static int mp_str_is(struct mp *m, const char *want)
{
    const char *s;
    size_t n;

    return mp_str(m, &s, &n) < 0 || n != strlen(want) || memcmp(s, want, n) != 0 ? -1 : 0;
}

/* An array or map header (map: base 0x80, 0xde/0xdf; array: 0x90, 0xdc/0xdd). */
static int mp_count(struct mp *m, unsigned char fix, unsigned char c16, uint32_t *n)
{
    unsigned char t;

    if (mp_need(m, 1) < 0)
        return -1;
    t = *m->p;
    if ((t & 0xf0) == fix) {
        *n = t & 0x0f;
        m->p++;
        return 0;
    }
    if (t == c16 || t == c16 + 1) {
        int w = t == c16 ? 2 : 4;
        if (mp_need(m, 1 + (size_t)w) < 0)
            return -1;
        *n = (uint32_t)mp_be(m->p + 1, w);
        m->p += 1 + w;
        return 0;
    }
    return -1;
}

static int mp_array(struct mp *m, uint32_t *n)
{
    return mp_count(m, 0x90, 0xdc, n);
}

static int mp_map(struct mp *m, uint32_t *n)
{
    return mp_count(m, 0x80, 0xde, n);
}

static int mp_bool(struct mp *m, bool *v)
{
    if (mp_need(m, 1) < 0 || (*m->p != 0xc2 && *m->p != 0xc3))
        return -1;
    *v = *m->p++ == 0xc3;
    return 0;
}

/* -- the request's fields ------------------------------------------------------------- */

enum { F_OP = 1, F_INO = 2, F_STRIPE = 4, F_DESC = 8, F_CRED = 16, F_FRESH = 32 };

static int parse_stripe(struct mp *m, struct pv_fast_req *rq)
{
    uint32_t n;
    uint64_t v[3];

    if (mp_array(m, &n) < 0 || n != 3)
        return -1;
    for (int i = 0; i < 3; i++) {
        if (mp_uint_max(m, INT64_MAX, &v[i]) < 0)
            return -1;
    }
    rq->base = (int64_t)v[0];
    rq->pcount = (int64_t)v[1];
    rq->ssize = (int64_t)v[2];
    return 0;
}

/* ["r", [off0, len0, off1, len1, ...]]; regions checked as describe.validate does. */
static int parse_desc(struct mp *m, struct pv_fast_req *rq)
{
    uint32_t n, k;

    if (mp_array(m, &n) < 0 || n != 2 || mp_str_is(m, "r") < 0)
        return -1;
    if (mp_array(m, &k) < 0 || k % 2 != 0 || k / 2 > FAST_MAX_REGIONS)
        return -1;
    rq->nregions = k / 2;
    rq->regions = malloc((k ? k : 1) * sizeof(int64_t));
    if (rq->regions == NULL)
        return -1;
    for (uint32_t i = 0; i < k; i += 2) {
        uint64_t o, len;
        if (mp_uint_max(m, (uint64_t)FAST_MAX_OFFSET, &o) < 0
            || mp_uint_max(m, (uint64_t)FAST_MAX_OFFSET, &len) < 0
            || o + len > (uint64_t)FAST_MAX_OFFSET)
            return -1;
        rq->regions[i] = (int64_t)o;
        rq->regions[i + 1] = (int64_t)len;
    }
    return 0;
}

/* [uid, gid, [groups]]: not used by the daemon, but checked as schema.cred does. */
static int parse_cred(struct mp *m)
{
    uint32_t n, g;
    uint64_t v;

    if (mp_array(m, &n) < 0 || n != 3 || mp_uint_max(m, UINT32_MAX, &v) < 0
        || mp_uint_max(m, UINT32_MAX, &v) < 0 || mp_array(m, &g) < 0 || g > FAST_MAX_GROUPS)
        return -1;
    for (uint32_t i = 0; i < g; i++) {
        if (mp_uint_max(m, UINT32_MAX, &v) < 0)
            return -1;
    }
    return 0;
}

static int parse_field(struct mp *m, struct pv_fast_req *rq, unsigned *seen)
{
    const char *k;
    size_t n;
    unsigned bit;
    bool fresh;
    uint64_t v;

    if (mp_str(m, &k, &n) < 0)
        return -1;
#define KEY(s) (n == sizeof(s) - 1 && memcmp(k, s, n) == 0)
    bit = KEY("op") ? F_OP : KEY("ino") ? F_INO : KEY("stripe") ? F_STRIPE
        : KEY("desc") ? F_DESC : KEY("cred") ? F_CRED : KEY("fresh") ? F_FRESH : 0;
#undef KEY
    if (bit == 0 || (*seen & bit))    /* unknown, or twice: Python's to judge */
        return -1;
    *seen |= bit;
    switch (bit) {
    case F_OP:
        if (mp_str(m, &k, &n) < 0)
            return -1;
        if (n == 4 && memcmp(k, "read", 4) == 0)
            rq->op = PV_OP_READ;
        else if (n == 5 && memcmp(k, "write", 5) == 0)
            rq->op = PV_OP_WRITE;
        else
            return -1;
        return 0;
    case F_INO:
        if (mp_uint_max(m, INT64_MAX, &v) < 0 || v == 0)
            return -1;
        rq->ino = v;
        return 0;
    case F_STRIPE:
        return parse_stripe(m, rq);
    case F_DESC:
        return rq->regions != NULL ? -1 : parse_desc(m, rq);
    case F_CRED:
        return parse_cred(m);
    default:
        return mp_bool(m, &fresh);    /* a no-op where writes are granted (sizewatch.py) */
    }
}

void pv_fast_req_free(struct pv_fast_req *rq)
{
    free(rq->regions);
    rq->regions = NULL;
}

int pv_fast_parse(const void *hdr, size_t len, struct pv_fast_req *rq)
{
    struct mp m = { .p = hdr, .end = (const unsigned char *)hdr + len };
    unsigned seen = 0;
    uint32_t n;

    memset(rq, 0, sizeof(*rq));
    if (mp_map(&m, &n) < 0 || n > 6)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        if (parse_field(&m, rq, &seen) < 0)
            goto declined;
    }
    /* Exactly one map, every field a read or write needs, fresh only on a write. */
    if (m.p != m.end || (seen & (F_OP | F_INO | F_STRIPE | F_DESC))
                        != (F_OP | F_INO | F_STRIPE | F_DESC)
        || ((seen & F_FRESH) && rq->op != PV_OP_WRITE))
        goto declined;
    return 0;
declined:
    pv_fast_req_free(rq);
    return -1;
}

/* -- replies: msgpack as Python's encode_header writes them ------------------------------ */

static size_t put_uint(unsigned char *p, uint64_t v)
{
    int n;

    if (v <= 0x7f) {
        p[0] = (unsigned char)v;
        return 1;
    }
    n = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffu ? 4 : 8;
    p[0] = n == 1 ? 0xcc : n == 2 ? 0xcd : n == 4 ? 0xce : 0xcf;
    for (int i = 0; i < n; i++)
        p[1 + i] = (unsigned char)(v >> (8 * (n - 1 - i)));
    return 1 + (size_t)n;
}

static size_t put_str(unsigned char *p, const char *s)
{
    size_t n = strlen(s), h;

    if (n < 32) {
        p[0] = (unsigned char)(0xa0 | n);
        h = 1;
    } else {
        p[0] = 0xd9;
        p[1] = (unsigned char)n;
        h = 2;
    }
    memcpy(p + h, s, n);
    return h + n;
}

/* The frame prefix ("PV01", header length, bulk length) in front of a header of hlen bytes. */
static void put_prefix(unsigned char *p, size_t hlen, uint64_t bulk)
{
    memcpy(p, "PV01", 4);
    for (int i = 0; i < 4; i++)
        p[4 + i] = (unsigned char)(hlen >> (8 * i));
    for (int i = 0; i < 8; i++)
        p[8 + i] = (unsigned char)(bulk >> (8 * i));
}

/* data.py's _read_ack(nbytes, sized=True): {"nbytes": n, "local_size": <uint64 slot>}. */
size_t pv_fast_read_ack(unsigned char *p, uint64_t nbytes, int64_t *size_at)
{
    size_t h = PV_PREFIX_LEN;

    p[h++] = 0x82;
    h += put_str(p + h, "nbytes");
    h += put_uint(p + h, nbytes);
    h += put_str(p + h, "local_size");
    p[h++] = 0xcf;
    memset(p + h, 0, 8);
    *size_at = (int64_t)h;
    h += 8;
    put_prefix(p, h - PV_PREFIX_LEN, nbytes);
    return h;
}

/* frame({"nbytes": n}): a write's reply. */
size_t pv_fast_write_reply(unsigned char *p, uint64_t nbytes)
{
    size_t h = PV_PREFIX_LEN;

    p[h++] = 0x81;
    h += put_str(p + h, "nbytes");
    h += put_uint(p + h, nbytes);
    put_prefix(p, h - PV_PREFIX_LEN, 0);
    return h;
}

/* frame(error_reply(err, "writing stripe file: <strerror>")), as server.on_done answers a
 * write whose storage failed; at most PV_FAST_REPLY_MAX bytes. */
size_t pv_fast_error_reply(unsigned char *p, int err)
{
    char msg[160];
    size_t h = PV_PREFIX_LEN;

    snprintf(msg, sizeof(msg), "writing stripe file: %s", strerror(err));
    p[h++] = 0x82;
    h += put_str(p + h, "err");
    h += put_uint(p + h, (uint64_t)err);
    h += put_str(p + h, "msg");
    h += put_str(p + h, msg);
    put_prefix(p, h - PV_PREFIX_LEN, 0);
    return h;
}
