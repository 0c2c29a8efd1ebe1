/*
 * fi_check: the provider through libfabric's public API only, as any
 * libfabric program uses it. Two processes, roles 0 and 1, exchange their
 * endpoint names through the harness (stdout / stdin, hex), then:
 *
 *   - fi_av_insert of the peer, fi_av_lookup round trip, fi_av_straddr;
 *   - a ping-pong of every size from 0 to max_msg_size (steps, and the
 *     largest), byte-exact, each receive's source (fi_cq_readfrom) being
 *     the peer's fi_addr_t; fi_inject for sizes up to inject_size;
 *   - truncation: a message longer than the posted buffer completes with
 *     -FI_EAVAIL, fi_cq_readerr gives FI_ETRUNC with the overflow length,
 *     fi_cq_strerror a text;
 *   - fi_cancel of a posted receive: FI_ECANCELED;
 *   - refusals: an unknown fi_addr_t, a message above max_msg_size.
 *   - FI_EP_RDM only: directed receives and ignore masks, remote CQ data
 *     (FI_REMOTE_CQ_DATA), FI_PEEK (FI_ENOMSG, then the message's length
 *     and tag), FI_PEEK|FI_CLAIM then FI_CLAIM (the claimed message by its
 *     context), FI_CLAIM|FI_DISCARD, a message to the endpoint's own name.
 *
 *   fi_check ROLE [dgram|rdm]
 *
 * The endpoint type is FI_EP_DGRAM (FI_MSG: fi_send / fi_recv) or
 * FI_EP_RDM (FI_TAGGED: fi_tsend / fi_trecv), the same steps through
 * the macros SEND / RECV below. Prints "fi_check: role R ok" at the end;
 * any failure prints "FAIL ..." and exits 1. Environment as for any
 * libfabric program: FI_PROVIDER_PATH, FI_CLUSTERNET_*.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG 0x1234567890abcdefULL

static int role, rdm;
static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_cq *cq;
static struct fid_ep *ep;
static fi_addr_t peer;
static size_t max_msg, inject_max;
/* Largest message the test sends: max_msg_size, at most 8 MiB. */
static size_t top;

#define FAIL(...)                                                        \
    do {                                                                 \
        fprintf(stderr, "FAIL fi_check role %d line %d: ", role, __LINE__); \
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

/* The endpoint's operations, by endpoint type. */
#define SEND(buf, len, ctx)                                              \
    (rdm ? fi_tsend(ep, buf, len, NULL, peer, TAG, ctx)                  \
         : fi_send(ep, buf, len, NULL, peer, ctx))
#define INJECT(buf, len)                                                 \
    (rdm ? fi_tinject(ep, buf, len, peer, TAG) : fi_inject(ep, buf, len, peer))
#define RECV(buf, len, ctx)                                              \
    (rdm ? fi_trecv(ep, buf, len, NULL, FI_ADDR_UNSPEC, TAG, 0, ctx)     \
         : fi_recv(ep, buf, len, NULL, FI_ADDR_UNSPEC, ctx))

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Retries `call` while it answers -FI_EAGAIN, reading the CQ in between
 * (manual progress). */
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

/* Reads one completion (20 s at most); returns 0, or the error entry's
 * err with the entry in *err. */
static int wait_one(struct fi_cq_tagged_entry *e, fi_addr_t *src, struct fi_cq_err_entry *err)
{
    double t0 = now();
    for (;;) {
        ssize_t r = fi_cq_readfrom(cq, e, 1, src);
        if (r == 1)
            return 0;
        if (r == -FI_EAVAIL) {
            memset(err, 0, sizeof *err);
            ssize_t k = fi_cq_readerr(cq, err, 0);
            if (k != 1)
                FAIL("fi_cq_readerr: %zd", k);
            return err->err;
        }
        if (r != -FI_EAGAIN)
            FAIL("fi_cq_readfrom: %zd (%s)", r, fi_strerror((int)-r));
        if (now() - t0 > 20)
            FAIL("no completion within 20 s");
    }
}

/* Waits for the completion of context `ctx`, which must succeed. */
static struct fi_cq_tagged_entry expect(void *ctx, fi_addr_t *src)
{
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    fi_addr_t s = FI_ADDR_NOTAVAIL;
    int rc = wait_one(&e, &s, &err);
    if (rc)
        FAIL("completion error %d (%s): %s", rc, fi_strerror(rc),
             fi_cq_strerror(cq, err.prov_errno, err.err_data, NULL, 0));
    if (e.op_context != ctx)
        FAIL("completion of context %p, expected %p", e.op_context, ctx);
    if (src)
        *src = s;
    return e;
}

static unsigned char pattern(size_t i, size_t len, int from)
{
    return (unsigned char)(i * 131 + len * 7 + from * 29 + (i >> 8));
}

static void open_all(void)
{
    struct fi_info *hints = fi_allocinfo();
    hints->ep_attr->type = rdm ? FI_EP_RDM : FI_EP_DGRAM;
    hints->caps = rdm ? FI_TAGGED | FI_DIRECTED_RECV : FI_MSG;
    hints->caps |= FI_SOURCE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->av_type = FI_AV_TABLE;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->fabric_attr->prov_name = strdup("clusternet");
    int r = fi_getinfo(FI_VERSION(1, 5), NULL, NULL, 0, hints, &info);
    if (r)
        FAIL("fi_getinfo: %d (%s)", r, fi_strerror(-r));
    if (strcmp(info->fabric_attr->prov_name, "clusternet"))
        FAIL("provider %s answered", info->fabric_attr->prov_name);
    fi_freeinfo(hints);
    max_msg = info->ep_attr->max_msg_size;
    inject_max = info->tx_attr->inject_size;
    top = max_msg < (8u << 20) ? max_msg : (8u << 20);
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

static void exchange_names(void)
{
    unsigned char name[64], other[64];
    size_t len = sizeof name;
    CALL(fi_getname(&ep->fid, name, &len));
    printf("name ");
    for (size_t i = 0; i < len; i++)
        printf("%02x", name[i]);
    printf("\n");
    fflush(stdout);
    char hex[256];
    if (!fgets(hex, sizeof hex, stdin))
        FAIL("no peer name on stdin");
    size_t n = 0;
    for (char *p = hex; n < sizeof other && sscanf(p, "%2hhx", &other[n]) == 1; p += 2)
        n++;
    if (n != len)
        FAIL("peer name of %zu bytes, ours has %zu", n, len);
    int k = fi_av_insert(av, other, 1, &peer, 0, NULL);
    if (k != 1)
        FAIL("fi_av_insert: %d", k);
    if (peer != 0)
        FAIL("FI_AV_TABLE: first address %llu, want 0", (unsigned long long)peer);
    unsigned char back[64];
    size_t blen = sizeof back;
    CALL(fi_av_lookup(av, peer, back, &blen));
    if (blen != len || memcmp(back, other, len))
        FAIL("fi_av_lookup does not return the inserted name");
    char s[128];
    size_t slen = sizeof s;
    if (!fi_av_straddr(av, other, s, &slen) || strncmp(s, "fi_", 3))
        FAIL("fi_av_straddr gave %s", s);
    fprintf(stderr, "fi_check role %d: peer %s, max_msg_size %zu, inject_size %zu\n", role, s, max_msg,
            inject_max);
    /* A barrier through the harness: both peers are in both AVs before the
     * first datagram (a UDP link hears only the peers it knows). */
    printf("inserted\n");
    fflush(stdout);
    if (!fgets(hex, sizeof hex, stdin) || strncmp(hex, "go", 2))
        FAIL("no go from the harness");
}

/* One exchange of `len` bytes: role 0 sends first. */
static void pingpong(unsigned char *tx, unsigned char *rx, size_t len, int inject)
{
    for (int turn = 0; turn < 2; turn++) {
        if (turn == role) {
            for (size_t i = 0; i < len; i++)
                tx[i] = pattern(i, len, role);
            if (inject && len <= inject_max) {
                RETRY(INJECT(tx, len));
            } else {
                RETRY(SEND(tx, len, tx));
                expect(tx, NULL);
            }
        } else {
            fi_addr_t src;
            memset(rx, 0xee, len + 1);
            RETRY(RECV(rx, top, rx));
            struct fi_cq_tagged_entry e = expect(rx, &src);
            if (e.len != len)
                FAIL("%zu-byte message completed with len %zu", len, e.len);
            if (!(e.flags & FI_RECV))
                FAIL("receive completion without FI_RECV (flags %#llx)", (unsigned long long)e.flags);
            if (src != peer)
                FAIL("source fi_addr %llu, the peer is %llu", (unsigned long long)src, (unsigned long long)peer);
            if (rdm && e.tag != TAG)
                FAIL("tag %#llx", (unsigned long long)e.tag);
            for (size_t i = 0; i < len; i++)
                if (rx[i] != pattern(i, len, 1 - role))
                    FAIL("%zu-byte message wrong at byte %zu", len, i);
        }
    }
}

static void sizes(void)
{
    unsigned char *tx = malloc(top + 1), *rx = malloc(top + 1);
    size_t step = top > 64 * 1024 ? top / 64 + 3 : 97;
    int n = 0;
    for (size_t len = 0; len < top; len += len < 64 ? 1 : step, n++)
        pingpong(tx, rx, len, n % 2);
    pingpong(tx, rx, top, 0);
    free(tx);
    free(rx);
}

static void truncation(void)
{
    unsigned char *big = malloc(top), small[10];
    if (role == 1) {
        /* Post the short buffer, then tell role 0 to send. */
        RETRY(RECV(small, sizeof small, small));
        char go = 'g';
        RETRY(SEND(&go, 1, &go));
        /* Two completions, in either order: the send of "go", and the
         * truncated receive. */
        struct fi_cq_tagged_entry e;
        struct fi_cq_err_entry err;
        size_t len = max_msg < 300 ? max_msg : 300;
        int truncated = 0;
        for (int k = 0; k < 2; k++) {
            int rc = wait_one(&e, NULL, &err);
            if (rc == 0) {
                if (e.op_context != &go)
                    FAIL("completion of context %p, expected the send of go", e.op_context);
                continue;
            }
            if (rc != FI_ETRUNC)
                FAIL("a %zu-byte message into 10 bytes: error %d (%s), want FI_ETRUNC", len, rc, fi_strerror(rc));
            if (err.op_context != small || err.olen != len - sizeof small)
                FAIL("truncation entry: context %p olen %zu, want %p and %zu", err.op_context, err.olen,
                     (void *)small, len - sizeof small);
            truncated = 1;
        }
        if (!truncated)
            FAIL("no truncation reported");
        for (size_t i = 0; i < sizeof small; i++)
            if (small[i] != pattern(i, len, 0))
                FAIL("truncated bytes wrong at %zu", i);
        const char *s = fi_cq_strerror(cq, err.prov_errno, err.err_data, NULL, 0);
        if (!s || !*s)
            FAIL("fi_cq_strerror gave nothing");
        fprintf(stderr, "fi_check role 1: truncation reported as: %s\n", s);
    } else {
        char go;
        RETRY(RECV(&go, 1, &go));
        expect(&go, NULL);
        size_t len = max_msg < 300 ? max_msg : 300;
        for (size_t i = 0; i < len; i++)
            big[i] = pattern(i, len, 0);
        RETRY(SEND(big, len, big));
        expect(big, NULL);
    }
    free(big);
}

static void cancel_and_refusals(void)
{
    unsigned char b[8];
    RETRY(RECV(b, sizeof b, b));
    CALL(fi_cancel(&ep->fid, b));
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    int rc = wait_one(&e, NULL, &err);
    if (rc != FI_ECANCELED || err.op_context != b)
        FAIL("canceled receive: error %d context %p, want FI_ECANCELED and %p", rc, err.op_context, (void *)b);
    ssize_t r = rdm ? fi_tsend(ep, b, 1, NULL, peer + 7, TAG, b) : fi_send(ep, b, 1, NULL, peer + 7, b);
    if (r != -FI_EINVAL)
        FAIL("send to an fi_addr_t not in the AV: %zd, want -FI_EINVAL", r);
    if (!rdm) {
        unsigned char *big = calloc(1, max_msg + 1);
        r = fi_send(ep, big, max_msg + 1, NULL, peer, big);
        if (r != -FI_EMSGSIZE)
            FAIL("send above max_msg_size: %zd, want -FI_EMSGSIZE", r);
        free(big);
    }
}


/* Reads completions until the one of `ctx`; returns its error (0 for
 * success) with the entry in *e / *err. */
static int wait_ctx(void *ctx, struct fi_cq_tagged_entry *e, struct fi_cq_err_entry *err)
{
    for (;;) {
        int rc = wait_one(e, NULL, err);
        void *got = rc ? err->op_context : e->op_context;
        if (got == ctx)
            return rc;
        FAIL("completion of context %p (error %d) while waiting for %p", got, rc, ctx);
    }
}

/* A peek of `tag` from the peer with `flags` (FI_PEEK ...) and `ctx`;
 * returns its error: 0 or FI_ENOMSG. */
static int peek(uint64_t tag, uint64_t flags, void *ctx, struct fi_cq_tagged_entry *e)
{
    struct fi_msg_tagged m = {.addr = peer, .tag = tag, .ignore = 0, .context = ctx};
    struct fi_cq_err_entry err;
    RETRY(fi_trecvmsg(ep, &m, flags | FI_COMPLETION));
    int rc = wait_ctx(ctx, e, &err);
    if (rc && rc != FI_ENOMSG)
        FAIL("peek of tag %#llx: error %d (%s)", (unsigned long long)tag, rc, fi_strerror(rc));
    return rc;
}

/* A barrier: each side sends the other a token and waits for the other's
 * (a send completes before its message is received, so one message is not
 * enough). What one side did before it, the other sees after it. */
static void sync_peers(void)
{
    static char out, in;
    out = (char)('a' + role);
    /* Over FI_EP_RDM a tag of its own: a token must not meet a receive of
     * the steps around (they all use TAG). */
    if (rdm) {
        RETRY(fi_trecv(ep, &in, 1, NULL, peer, 0x998, 0, &in));
        RETRY(fi_tsend(ep, &out, 1, NULL, peer, 0x998, &out));
    } else {
        RETRY(RECV(&in, 1, &in));
        RETRY(SEND(&out, 1, &out));
    }
    for (int k = 0; k < 2; k++) {
        struct fi_cq_tagged_entry e;
        struct fi_cq_err_entry err;
        int rc = wait_one(&e, NULL, &err);
        if (rc)
            FAIL("sync: error %d (%s)", rc, fi_strerror(rc));
        if (e.op_context != &in && e.op_context != &out)
            FAIL("sync: completion of context %p", e.op_context);
    }
    if (in != (char)('a' + 1 - role))
        FAIL("sync: token %c from the peer", in);
}

static void rdm_extras(void)
{
    unsigned char b[256];
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    /* Directed receives and ignore masks, remote CQ data. */
    if (role == 0) {
        static unsigned char a1[8] = "first", a2[8] = "second";
        RETRY(fi_tsend(ep, a1, 6, NULL, peer, 0x100, a1));
        RETRY(fi_tsenddata(ep, a2, 7, NULL, 0xdeadbeef, peer, 0x201, a2));
        expect(a1, NULL);
        expect(a2, NULL);
    } else {
        RETRY(fi_trecv(ep, b, sizeof b, NULL, peer, 0x200, 0xff, b));
        fi_addr_t src;
        e = expect(b, &src);
        if (e.tag != 0x201 || e.len != 7 || strcmp((char *)b, "second"))
            FAIL("ignore mask 0xff on tag 0x200 took tag %#llx len %zu", (unsigned long long)e.tag, e.len);
        if (!(e.flags & FI_REMOTE_CQ_DATA) || e.data != 0xdeadbeef)
            FAIL("remote CQ data: flags %#llx data %#llx", (unsigned long long)e.flags, (unsigned long long)e.data);
        RETRY(fi_trecv(ep, b, sizeof b, NULL, FI_ADDR_UNSPEC, 0x100, 0, b));
        e = expect(b, NULL);
        if (e.tag != 0x100 || strcmp((char *)b, "first"))
            FAIL("tag 0x100: got tag %#llx", (unsigned long long)e.tag);
        if (e.flags & FI_REMOTE_CQ_DATA)
            FAIL("a message without CQ data completed with FI_REMOTE_CQ_DATA");
    }
    /* Peek, claim, discard. */
    static struct fi_context2 c1, c2, c3;
    if (role == 1) {
        if (peek(0x300, FI_PEEK, &c1, &e) != FI_ENOMSG)
            FAIL("a peek before any message found one");
    }
    sync_peers();
    if (role == 0) {
        static unsigned char m1[100], m2[50];
        for (int i = 0; i < 100; i++)
            m1[i] = (unsigned char)(i * 7);
        RETRY(fi_tsend(ep, m1, 100, NULL, peer, 0x300, m1));
        RETRY(fi_tsend(ep, m2, 50, NULL, peer, 0x301, m2));
        expect(m1, NULL);
        expect(m2, NULL);
    } else {
        while (peek(0x300, FI_PEEK, &c1, &e) == FI_ENOMSG)
            ;
        if (e.len != 100 || e.tag != 0x300)
            FAIL("peek: len %zu tag %#llx, want 100 and 0x300", e.len, (unsigned long long)e.tag);
        if (peek(0x300, FI_PEEK | FI_CLAIM, &c2, &e) != 0 || e.len != 100)
            FAIL("peek and claim of a peeked message failed");
        if (peek(0x300, FI_PEEK, &c1, &e) != FI_ENOMSG)
            FAIL("a claimed message was found by another peek");
        struct iovec iov = {.iov_base = b, .iov_len = sizeof b};
        struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .addr = peer, .tag = 0x300, .context = &c2};
        memset(b, 0, sizeof b);
        RETRY(fi_trecvmsg(ep, &m, FI_CLAIM | FI_COMPLETION));
        if (wait_ctx(&c2, &e, &err) || e.len != 100)
            FAIL("claimed receive: len %zu", e.len);
        for (int i = 0; i < 100; i++)
            if (b[i] != (unsigned char)(i * 7))
                FAIL("claimed message wrong at byte %d", i);
        while (peek(0x301, FI_PEEK | FI_CLAIM, &c3, &e) == FI_ENOMSG)
            ;
        struct fi_msg_tagged d = {.addr = peer, .tag = 0x301, .context = &c3};
        RETRY(fi_trecvmsg(ep, &d, FI_CLAIM | FI_DISCARD | FI_COMPLETION));
        if (wait_ctx(&c3, &e, &err))
            FAIL("discard of a claimed message failed");
        if (peek(0x301, FI_PEEK, &c1, &e) != FI_ENOMSG)
            FAIL("a discarded message was found again");
    }
    sync_peers();
    /* A message to our own name. */
    unsigned char me[64];
    size_t len = sizeof me;
    fi_addr_t self;
    CALL(fi_getname(&ep->fid, me, &len));
    if (fi_av_insert(av, me, 1, &self, 0, NULL) != 1)
        FAIL("fi_av_insert of our own name");
    static char hi[] = "to myself";
    RETRY(fi_tsend(ep, hi, sizeof hi, NULL, self, 0x400, hi));
    RETRY(fi_trecv(ep, b, sizeof b, NULL, self, 0x400, 0, b));
    for (int k = 0; k < 2; k++) {
        int rc = wait_one(&e, NULL, &err);
        if (rc)
            FAIL("message to self: error %d", rc);
        if (e.op_context == b && strcmp((char *)b, hi))
            FAIL("message to self: %s", b);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2)
        FAIL("usage: fi_check ROLE [dgram|rdm]");
    role = atoi(argv[1]) ? 1 : 0;
    rdm = argc > 2 && !strcmp(argv[2], "rdm");
    open_all();
    exchange_names();
    sizes();
    truncation();
    sync_peers();
    cancel_and_refusals();
    sync_peers();
    if (rdm) {
        rdm_extras();
        sync_peers();
    }
    /* A last exchange so neither side closes while the other still sends. */
    unsigned char tx[4], rx[4];
    pingpong(tx, rx, 4, 0);
    CALL(fi_close(&ep->fid));
    CALL(fi_close(&cq->fid));
    CALL(fi_close(&av->fid));
    CALL(fi_close(&domain->fid));
    CALL(fi_close(&fabric->fid));
    fi_freeinfo(info);
    printf("fi_check: role %d ok\n", role);
    return 0;
}
