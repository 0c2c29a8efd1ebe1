/*
 * fi_connless: an FI_EP_RDM endpoint as fabtests' normal addressing uses
 * it (shared.c, ft_init_av_dst_addr), and the C side's checks of what
 * callers hand it.
 *
 *   fi_connless server PORT [err]   getinfo(NULL, PORT, FI_SOURCE); prints
 *                                   "name HEX" and "ready"; receives the
 *                                   client's name from a sender not in its
 *                                   AV: FI_ADDR_NOTAVAIL from
 *                                   fi_cq_readfrom, or with "err"
 *                                   (FI_SOURCE_ERR) an error entry
 *                                   FI_EADDRNOTAVAIL whose err_data is the
 *                                   name; inserts the name, answers, and
 *                                   sees the client's next message come
 *                                   from the inserted fi_addr.
 *   fi_connless client NODE PORT [err]
 *                                   getinfo(NODE, PORT): the server's
 *                                   address; sends its own name in band,
 *                                   then waits for the answer.
 *   fi_connless checks              one process: error entries into
 *                                   callers' entries with a bogus err_data
 *                                   (fabtests' fi_recv_cancel and
 *                                   fi_rdm_tagged_peek crashed here), the
 *                                   shorter 1.0 error entry of a fabric
 *                                   opened for API 1.4,
 *                                   lengths above SSIZE_MAX, fids of
 *                                   another class, a name of another
 *                                   cluster key, fi_eq_sread's wait, and
 *                                   getinfo's source address.
 *
 * Prints "fi_connless: ROLE ok"; any failure prints "FAIL ..." and exits 1.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *role = "?";
static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_cq *cq;
static struct fid_ep *ep;

#define FAIL(...)                                                        \
    do {                                                                 \
        fprintf(stderr, "FAIL fi_connless %s line %d: ", role, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                                    \
        fprintf(stderr, "\n");                                           \
        exit(1);                                                         \
    } while (0)

#define CALL(call)                                                       \
    do {                                                                 \
        ssize_t r_ = (call);                                             \
        if (r_ < 0)                                                      \
            FAIL("%s: %zd (%s)", #call, r_, fi_strerror((int)-r_));      \
    } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The first answer of clusternet for an RDM endpoint with `caps`, at API
 * `version`, for `node`/`service` with `flags`. */
static struct fi_info *getinfo(uint32_t version, const char *node, const char *service,
                               uint64_t flags, uint64_t caps)
{
    struct fi_info *hints = fi_allocinfo(), *out = NULL;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED | caps;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->av_type = FI_AV_TABLE;
    hints->fabric_attr->prov_name = strdup("clusternet");
    int r = fi_getinfo(version, node, service, flags, hints, &out);
    if (r)
        FAIL("fi_getinfo(%s, %s): %d (%s)", node ? node : "NULL", service ? service : "NULL", r,
             fi_strerror(-r));
    fi_freeinfo(hints);
    return out;
}

static void open_all(struct fi_info *i)
{
    info = i;
    CALL(fi_fabric(info->fabric_attr, &fabric, NULL));
    CALL(fi_domain(fabric, info, &domain, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .count = 4};
    CALL(fi_av_open(domain, &aa, &av, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .size = 64, .wait_obj = FI_WAIT_NONE};
    CALL(fi_cq_open(domain, &ca, &cq, NULL));
    CALL(fi_endpoint(domain, info, &ep, NULL));
    CALL(fi_ep_bind(ep, &av->fid, 0));
    CALL(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CALL(fi_enable(ep));
}

static void close_all(void)
{
    CALL(fi_close(&ep->fid));
    CALL(fi_close(&cq->fid));
    CALL(fi_close(&av->fid));
    CALL(fi_close(&domain->fid));
    CALL(fi_close(&fabric->fid));
    fi_freeinfo(info);
}

/* Reads one completion within 20 s: 0 and the entry with its source, or
 * the error entry's err with the error entry (err_data_size 0: the
 * provider's own copy). */
static int wait_one(struct fi_cq_tagged_entry *e, fi_addr_t *src, struct fi_cq_err_entry *err)
{
    double t0 = now();
    for (;;) {
        ssize_t r = fi_cq_readfrom(cq, e, 1, src);
        if (r == 1)
            return 0;
        if (r == -FI_EAVAIL) {
            memset(err, 0, sizeof *err);
            if (fi_cq_readerr(cq, err, 0) != 1)
                FAIL("fi_cq_readerr after -FI_EAVAIL");
            return err->err;
        }
        if (r != -FI_EAGAIN)
            FAIL("fi_cq_readfrom: %zd (%s)", r, fi_strerror((int)-r));
        if (now() - t0 > 20)
            FAIL("no completion within 20 s");
    }
}

static void expect_ok(void *ctx, fi_addr_t *src, struct fi_cq_tagged_entry *out)
{
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    fi_addr_t s = FI_ADDR_NOTAVAIL;
    int rc = wait_one(&e, &s, &err);
    if (rc)
        FAIL("completion error %d (%s)", rc, fi_strerror(rc));
    if (e.op_context != ctx)
        FAIL("completion of context %p, expected %p", e.op_context, ctx);
    if (src)
        *src = s;
    if (out)
        *out = e;
}

#define RETRY(call)                                                      \
    do {                                                                 \
        ssize_t r_;                                                      \
        double t0_ = now();                                              \
        while ((r_ = (call)) == -FI_EAGAIN) {                            \
            struct fi_cq_tagged_entry e_;                                \
            (void)fi_cq_read(cq, &e_, 0);                                \
            if (now() - t0_ > 20)                                        \
                FAIL("%s: still -FI_EAGAIN after 20 s", #call);          \
        }                                                                \
        if (r_ < 0)                                                      \
            FAIL("%s: %zd (%s)", #call, r_, fi_strerror((int)-r_));      \
    } while (0)

static void print_name(void)
{
    unsigned char name[64];
    size_t len = sizeof name;
    CALL(fi_getname(&ep->fid, name, &len));
    printf("name ");
    for (size_t i = 0; i < len; i++)
        printf("%02x", name[i]);
    printf("\n");
    fflush(stdout);
}

static void server(const char *port, int source_err)
{
    open_all(getinfo(FI_VERSION(1, 17), NULL, port, FI_SOURCE,
                     FI_SOURCE | (source_err ? FI_SOURCE_ERR : 0)));
    print_name();
    printf("ready\n");
    fflush(stdout);
    unsigned char name[64];
    memset(name, 0, sizeof name);
    RETRY(fi_trecv(ep, name, sizeof name, NULL, FI_ADDR_UNSPEC, 1, 0, name));
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    fi_addr_t src = 12345;
    int rc = wait_one(&e, &src, &err);
    size_t len;
    if (source_err) {
        if (rc != FI_EADDRNOTAVAIL)
            FAIL("a sender not in the AV with FI_SOURCE_ERR: error %d, want FI_EADDRNOTAVAIL", rc);
        if (err.op_context != name || !err.err_data || err.err_data_size == 0)
            FAIL("FI_EADDRNOTAVAIL entry: context %p, err_data %p size %zu", err.op_context, err.err_data,
                 err.err_data_size);
        len = err.len;
        /* The sender's address: the name's first 8 bytes (what it tells
         * besides, bytes 8..16, the receiver does not know). */
        if (err.err_data_size != len || memcmp(err.err_data, name, 8))
            FAIL("err_data (%zu bytes) is not the sender's name (%zu bytes)", err.err_data_size, len);
    } else {
        if (rc)
            FAIL("first contact: error %d (%s)", rc, fi_strerror(rc));
        if (e.op_context != name)
            FAIL("completion of context %p", e.op_context);
        if (src != FI_ADDR_NOTAVAIL)
            FAIL("a sender not in the AV: source %llu, want FI_ADDR_NOTAVAIL", (unsigned long long)src);
        len = e.len;
    }
    fi_addr_t client;
    if (fi_av_insert(av, name, 1, &client, 0, NULL) != 1)
        FAIL("fi_av_insert of the name the client sent");
    char pong[] = "pong";
    RETRY(fi_tsend(ep, pong, sizeof pong, NULL, client, 2, pong));
    expect_ok(pong, NULL, NULL);
    char again[8];
    RETRY(fi_trecv(ep, again, sizeof again, NULL, FI_ADDR_UNSPEC, 3, 0, again));
    expect_ok(again, &src, &e);
    if (src != client)
        FAIL("after fi_av_insert the client's source is %llu, want %llu", (unsigned long long)src,
             (unsigned long long)client);
    if (e.len != 6 || strcmp(again, "again"))
        FAIL("second message %zu bytes", e.len);
    fprintf(stderr, "fi_connless server: client name of %zu bytes, then fi_addr %llu\n", len,
            (unsigned long long)client);
    close_all();
}

static void client(const char *node, const char *port, int source_err)
{
    struct fi_info *i = getinfo(FI_VERSION(1, 17), node, port, 0,
                                FI_SOURCE | (source_err ? FI_SOURCE_ERR : 0));
    if (!i->dest_addr || !i->src_addr)
        FAIL("fi_getinfo(%s, %s): dest_addr %p src_addr %p", node, port, i->dest_addr, i->src_addr);
    open_all(i);
    fi_addr_t server;
    if (fi_av_insert(av, info->dest_addr, 1, &server, 0, NULL) != 1)
        FAIL("fi_av_insert of the server's address");
    unsigned char name[64];
    size_t len = sizeof name;
    CALL(fi_getname(&ep->fid, name, &len));
    char pong[8];
    RETRY(fi_trecv(ep, pong, sizeof pong, NULL, server, 2, 0, pong));
    RETRY(fi_tsend(ep, name, len, NULL, server, 1, name));
    /* The send's completion and the answer, in either order. */
    for (int k = 0; k < 2; k++) {
        struct fi_cq_tagged_entry e;
        struct fi_cq_err_entry err;
        fi_addr_t src;
        int rc = wait_one(&e, &src, &err);
        if (rc)
            FAIL("error %d (%s)", rc, fi_strerror(rc));
        if (e.op_context == pong && (src != server || strcmp(pong, "pong")))
            FAIL("answer from %llu: %s", (unsigned long long)src, pong);
    }
    char again[] = "again";
    RETRY(fi_tsend(ep, again, sizeof again, NULL, server, 3, again));
    expect_ok(again, NULL, NULL);
    close_all();
}

/* An error entry the caller did not clear: a pointer and a size that must
 * not be written through (the entry carries no err_data). */
static void bogus(struct fi_cq_err_entry *err)
{
    memset(err, 0x5a, sizeof *err);
    err->err_data = (void *)(uintptr_t)0x10;
    err->err_data_size = (size_t)1 << 40;
}

static void checks(void)
{
    open_all(getinfo(FI_VERSION(1, 17), NULL, NULL, 0, FI_SOURCE));
    if (!info->src_addr || !info->src_addrlen)
        FAIL("fi_getinfo without node or service: no source address");
    unsigned char me[64];
    size_t melen = sizeof me;
    CALL(fi_getname(&ep->fid, me, &melen));
    fi_addr_t self;
    if (fi_av_insert(av, me, 1, &self, 0, NULL) != 1)
        FAIL("fi_av_insert of our own name");

    /* Cancel, then read the error into a bogus entry. */
    char b[8];
    RETRY(fi_trecv(ep, b, sizeof b, NULL, self, 7, 0, b));
    CALL(fi_cancel(&ep->fid, b));
    struct fi_cq_tagged_entry e;
    double t0 = now();
    ssize_t r;
    while ((r = fi_cq_read(cq, &e, 1)) == -FI_EAGAIN)
        if (now() - t0 > 20)
            FAIL("no cancel completion");
    if (r != -FI_EAVAIL)
        FAIL("fi_cq_read after fi_cancel: %zd", r);
    struct fi_cq_err_entry err;
    bogus(&err);
    if (fi_cq_readerr(cq, &err, 0) != 1)
        FAIL("fi_cq_readerr");
    if (err.err != FI_ECANCELED || err.op_context != b || err.err_data_size != 0)
        FAIL("canceled: err %d context %p err_data_size %zu", err.err, err.op_context, err.err_data_size);

    /* A peek that finds nothing (FI_ENOMSG), the same way. */
    struct fi_msg_tagged m;
    memset(&m, 0, sizeof m);
    m.addr = self;
    m.tag = 99;
    m.context = &m;
    CALL(fi_trecvmsg(ep, &m, FI_PEEK));
    t0 = now();
    while ((r = fi_cq_read(cq, &e, 1)) == -FI_EAGAIN)
        if (now() - t0 > 20)
            FAIL("no peek completion");
    if (r != -FI_EAVAIL)
        FAIL("fi_cq_read after a peek of nothing: %zd", r);
    bogus(&err);
    if (fi_cq_readerr(cq, &err, 0) != 1 || err.err != FI_ENOMSG || err.err_data_size != 0)
        FAIL("peek: err %d err_data_size %zu", err.err, err.err_data_size);

    /* Lengths no buffer has, and fids that are not what the call takes. */
    if (fi_trecv(ep, b, (size_t)-1, NULL, self, 7, 0, b) != -FI_EINVAL)
        FAIL("fi_trecv of SIZE_MAX bytes accepted");
    if (fi_tsend(ep, b, ((size_t)-1) / 2 + 1, NULL, self, 7, b) != -FI_EINVAL)
        FAIL("fi_tsend above SSIZE_MAX accepted");
    if (fi_av_insert(av, me, ((size_t)-1) / 4, NULL, 0, NULL) >= 0)
        FAIL("fi_av_insert of SIZE_MAX/4 names accepted");
    fi_addr_t a = self;
    if (fi_av_remove(av, &a, ((size_t)-1) / 4, 0) != -FI_EINVAL)
        FAIL("fi_av_remove of SIZE_MAX/4 addresses accepted");
    if (fi_ep_bind(ep, &domain->fid, 0) != -FI_EINVAL)
        FAIL("binding a domain to an endpoint accepted");
    /* A fid of the right class that is not ours (another provider's, or
     * garbage): refused before it is used. */
    struct fid_ep *ep2;
    CALL(fi_endpoint(domain, info, &ep2, NULL));
    struct fid fake = {.fclass = FI_CLASS_CQ, .context = NULL, .ops = NULL};
    if (fi_ep_bind(ep2, &fake, FI_TRANSMIT | FI_RECV) != -FI_EINVAL)
        FAIL("binding a CQ that is not ours accepted");
    CALL(fi_close(&ep2->fid));

    /* A name telling another cluster key is refused, saying so. */
    unsigned char other[64];
    memcpy(other, me, melen);
    if (melen < 16)
        FAIL("a name of %zu bytes", melen);
    other[8] = me[8] | 0x01;
    other[12] ^= 0xff;
    int errs[1] = {0};
    fi_addr_t oa;
    if (fi_av_insert(av, other, 1, &oa, FI_SYNC_ERR, errs) != 0)
        FAIL("a name of another cluster key inserted");
    if (abs(errs[0]) != FI_EKEYREJECTED || oa != FI_ADDR_NOTAVAIL)
        FAIL("another key: error %d, want FI_EKEYREJECTED", errs[0]);
    /* A name that tells the other link (packet vs UDP) is refused too. */
    memcpy(other, me, melen);
    other[8] ^= 0x02;
    errs[0] = 0;
    if (fi_av_insert(av, other, 1, &oa, FI_SYNC_ERR, errs) != 0 || abs(errs[0]) != FI_EINVAL)
        FAIL("a name of the other link: error %d, want FI_EINVAL", errs[0]);

    /* fi_eq_sread waits for its timeout, and reads what fi_eq_write wrote. */
    struct fid_eq *eq;
    struct fi_eq_attr ea = {.size = 8, .flags = FI_WRITE, .wait_obj = FI_WAIT_UNSPEC};
    CALL(fi_eq_open(fabric, &ea, &eq, NULL));
    struct fi_eq_entry ev = {.fid = &eq->fid, .context = eq};
    uint32_t event;
    t0 = now();
    r = fi_eq_sread(eq, &event, &ev, sizeof ev, 300, 0);
    if (r != -FI_EAGAIN || now() - t0 < 0.25)
        FAIL("fi_eq_sread of an empty EQ: %zd after %.3f s", r, now() - t0);
    if (fi_eq_write(eq, FI_NOTIFY, &ev, sizeof ev, 0) != (ssize_t)sizeof ev)
        FAIL("fi_eq_write");
    memset(&ev, 0, sizeof ev);
    if (fi_eq_sread(eq, &event, &ev, sizeof ev, 2000, 0) != (ssize_t)sizeof ev || event != FI_NOTIFY ||
        ev.context != eq)
        FAIL("fi_eq_sread of the written event");
    CALL(fi_close(&eq->fid));
    close_all();

    /* A fabric opened for API 1.4 (fi_getinfo answers from 1.5, but
     * fi_fabric takes the attr's version): the error entry is then
     * fi_cq_err_entry_1_0, which ends at err_data; nothing may be written
     * behind it. */
    struct fi_info *old = getinfo(FI_VERSION(1, 17), NULL, NULL, 0, 0);
    old->fabric_attr->api_version = FI_VERSION(1, 4);
    open_all(old);
    RETRY(fi_trecv(ep, b, sizeof b, NULL, FI_ADDR_UNSPEC, 7, 0, b));
    CALL(fi_cancel(&ep->fid, b));
    t0 = now();
    while ((r = fi_cq_read(cq, &e, 1)) == -FI_EAGAIN)
        if (now() - t0 > 20)
            FAIL("no cancel completion at API 1.4");
    unsigned char raw[sizeof(struct fi_cq_err_entry) + 16];
    memset(raw, 0xa5, sizeof raw);
    if (fi_cq_readerr(cq, (struct fi_cq_err_entry *)raw, 0) != 1)
        FAIL("fi_cq_readerr at API 1.4");
    for (size_t k = offsetof(struct fi_cq_err_entry, err_data_size); k < sizeof raw; k++)
        if (raw[k] != 0xa5)
            FAIL("API 1.4: byte %zu behind the 1.0 error entry written", k);
    close_all();
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "server")) {
        role = "server";
        server(argv[2], argc > 3 && !strcmp(argv[3], "err"));
    } else if (argc >= 4 && !strcmp(argv[1], "client")) {
        role = "client";
        client(argv[2], argv[3], argc > 4 && !strcmp(argv[4], "err"));
    } else if (argc == 2 && !strcmp(argv[1], "checks")) {
        role = "checks";
        checks();
    } else {
        fprintf(stderr, "usage: fi_connless server PORT [err] | client NODE PORT [err] | checks\n");
        return 2;
    }
    printf("fi_connless: %s ok\n", role);
    return 0;
}
