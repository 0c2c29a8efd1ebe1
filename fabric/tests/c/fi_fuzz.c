/*
 * A fuzzer of the provider `clusternet` through libfabric's API (issue 38,
 * item 5): a byte stream chooses a sequence of fi_* calls, in legal and
 * illegal orders and with legal and illegal arguments, on the objects of
 * the provider that libfabric loads from FI_PROVIDER_PATH (fi_getinfo with
 * prov_name "clusternet", then the provider's own function tables).
 *
 * What it calls: fi_getinfo (RDM / DGRAM hints, node/service variants),
 * fi_fabric, fi_domain, fi_eq_open, fi_cq_open (every format, wait object,
 * size), fi_av_open (every type, named and not), fi_endpoint (the answer,
 * or a copy with other caps / type), fi_ep_bind (CQs with every flag, AV,
 * EQ, wrong objects), fi_enable, fi_getname / fi_setname, fi_av_insert
 * (names of live endpoints, random bytes, with and without an EQ),
 * fi_av_remove / lookup / straddr, fi_send / sendv / sendmsg / senddata /
 * inject / injectdata and their tagged forms, fi_recv / recvv / recvmsg,
 * fi_trecv / trecvmsg (FI_PEEK, FI_CLAIM, FI_DISCARD), fi_cancel,
 * fi_cq_read / readfrom / readerr / sread / strerror, fi_eq_read / readerr
 * / sread, fi_getopt / fi_setopt, fi_control, fi_close of any object at
 * any time. Half the sequences start with the legal set-up of two
 * endpoints that know each other, so that messages flow.
 *
 * What the harness itself keeps legal (so that a crash is the provider's):
 * it never uses an object after it closed it, every buffer is as long as
 * the length it passes, posted buffers and contexts live for the whole
 * process, and a function pointer of the provider's tables is checked
 * before it is called (a NULL entry is counted and reported: a provider
 * fills unsupported entries with stubs returning -FI_ENOSYS).
 *
 * Build and run (scripts/fi-fuzz.sh does both; over the UDP link):
 *   cc -O1 -g -Wall -o fi_fuzz fi_fuzz.c -lfabric
 *   FI_PROVIDER_PATH=DIR FI_CLUSTERNET_LINK=udp FI_CLUSTERNET_IFACE=lo \
 *     ./fi_fuzz [--seed S] [--runs N] [--time SECONDS] [--max-len L] [FILE...]
 * replays N random sequences (or as many as fit in SECONDS), or the given
 * input files; before each sequence its input is written to
 * fi_fuzz-current.bin (FI_FUZZ_SAVE), the reproducer of a crash or hang
 * (a sequence still running after 20 s ends the process with status 2).
 * With -DFI_FUZZ_LIBFUZZER and clang -fsanitize=fuzzer,address it is a
 * libFuzzer target instead (LLVMFuzzerTestOneInput).
 */
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NEP 2
#define NAV 2
#define NCQ 2
#define NBUF 16
#define BUFSZ 65536
#define NCTX 64
#define NAME 64

/* ---- the input ---------------------------------------------------------- */

struct input {
    const uint8_t *p;
    size_t n, i;
};

static int more(struct input *in) { return in->i < in->n; }

static uint8_t u8(struct input *in) { return more(in) ? in->p[in->i++] : 0; }

static uint16_t u16(struct input *in) { return (uint16_t)(u8(in) | (u8(in) << 8)); }

static uint64_t u64(struct input *in)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v |= (uint64_t)u8(in) << (8 * k);
    return v;
}

static uint64_t pick(struct input *in, const uint64_t *v, size_t n) { return v[u8(in) % n]; }
#define PICK(in, ...) pick(in, (const uint64_t[]){__VA_ARGS__}, sizeof((const uint64_t[]){__VA_ARGS__}) / 8)

/* ---- what lives for the whole process --------------------------------------- */

static uint8_t bufs[NEP][NBUF][BUFSZ];
static struct fi_context2 ctxs[NCTX];
static uint8_t cqbuf[16 * sizeof(struct fi_cq_err_entry)];
static uint8_t errbuf[512];
static uint8_t scratch[4096];

/* ---- statistics --------------------------------------------------------------- */

enum { OK, ERR, NULLOP, SKIP };
#define NOPS 48
static const char *op_names[NOPS];
static unsigned long op_count[NOPS][4];
static unsigned long null_ops;
static unsigned long sequences, calls;

static long note(int op, const char *name, long ret)
{
    op_names[op] = name;
    op_count[op][ret >= 0 ? OK : ERR]++;
    calls++;
    return ret;
}

static void null_op(int op, const char *name)
{
    op_names[op] = name;
    op_count[op][NULLOP]++;
    if (op_count[op][NULLOP] == 1)
        fprintf(stderr, "fi_fuzz: FINDING: the provider's table entry for %s is NULL "
                        "(libfabric calls it without a check)\n", name);
    null_ops++;
}

/* A provider table entry is present: counts a NULL one. */
#define HAVE(op, name, table, fn) \
    (((table) && (table)->fn) ? 1 : (null_op(op, name), 0))

/* ---- the state of one sequence ------------------------------------------------- */

struct state {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_eq *eq;
    struct fid_cq *cq[NCQ];
    struct fid_av *av[NAV];
    struct fid_ep *ep[NEP];
    int ep_av[NEP];
    uint8_t name[NEP][NAME];
    size_t namelen[NEP];
    fi_addr_t addr[8];
    int naddr;
    struct fi_cq_err_entry lasterr;
    int have_err;
};

static int closefid(struct fid *f) { return f->ops && f->ops->close ? f->ops->close(f) : -FI_ENOSYS; }

static void do_getinfo(struct state *s, struct input *in)
{
    struct fi_info *hints = fi_allocinfo(), *out = NULL;
    if (!hints)
        return;
    hints->fabric_attr->prov_name = strdup("clusternet");
    hints->ep_attr->type = (enum fi_ep_type)PICK(in, FI_EP_RDM, FI_EP_RDM, FI_EP_DGRAM, FI_EP_UNSPEC, FI_EP_MSG);
    hints->caps = PICK(in, 0, FI_TAGGED, FI_MSG, FI_TAGGED | FI_MSG | FI_DIRECTED_RECV,
                       FI_TAGGED | FI_SOURCE | FI_SOURCE_ERR, FI_RMA, u64(in));
    hints->mode = PICK(in, FI_CONTEXT | FI_CONTEXT2, 0, FI_CONTEXT, ~0ULL);
    hints->domain_attr->mr_mode = (int)PICK(in, 0, FI_MR_LOCAL, FI_MR_BASIC, ~0U);
    hints->domain_attr->threading = (enum fi_threading)PICK(in, 0, FI_THREAD_DOMAIN, FI_THREAD_SAFE, 77);
    hints->domain_attr->av_type = (enum fi_av_type)PICK(in, 0, FI_AV_MAP, FI_AV_TABLE, 9);
    hints->tx_attr->op_flags = PICK(in, 0, FI_COMPLETION, FI_DELIVERY_COMPLETE, FI_INJECT);
    hints->addr_format = (uint32_t)PICK(in, FI_FORMAT_UNSPEC, FI_FORMAT_UNSPEC, FI_SOCKADDR_IN, FI_SOCKADDR_IB);
    const char *node = NULL, *service = NULL;
    uint64_t flags = 0;
    switch (u8(in) % 5) {
    case 1: node = "127.0.0.1"; service = "0"; flags = FI_SOURCE; break;
    case 2: node = "127.0.0.1"; service = "9999"; break;
    case 3: node = "not-an-address"; service = "x"; break;
    case 4: service = "0"; flags = FI_SOURCE; break;
    default: break;
    }
    long r = note(0, "fi_getinfo", fi_getinfo(FI_VERSION(1, 17), node, service, flags, hints, &out));
    if (r == 0 && out) {
        if (s->info)
            fi_freeinfo(s->info);
        s->info = fi_dupinfo(out);
        fi_freeinfo(out);
    }
    fi_freeinfo(hints);
}

static void do_fabric(struct state *s, struct input *in)
{
    (void)in;
    if (!s->info || s->fabric)
        return;
    note(1, "fi_fabric", fi_fabric(s->info->fabric_attr, &s->fabric, NULL));
}

static void do_domain(struct state *s, struct input *in)
{
    (void)in;
    if (!s->fabric || !s->info || s->domain)
        return;
    if (!HAVE(2, "fi_domain", s->fabric->ops, domain))
        return;
    note(2, "fi_domain", fi_domain(s->fabric, s->info, &s->domain, NULL));
}

static void do_eq(struct state *s, struct input *in)
{
    if (!s->fabric || s->eq)
        return;
    struct fi_eq_attr a = {0};
    a.size = PICK(in, 0, 8, 1);
    a.wait_obj = (enum fi_wait_obj)PICK(in, FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_FD, 55);
    if (!HAVE(3, "fi_eq_open", s->fabric->ops, eq_open))
        return;
    note(3, "fi_eq_open", fi_eq_open(s->fabric, &a, &s->eq, NULL));
}

static void do_cq(struct state *s, struct input *in)
{
    int k = u8(in) % NCQ;
    if (!s->domain || s->cq[k])
        return;
    struct fi_cq_attr a = {0};
    a.format = (enum fi_cq_format)PICK(in, FI_CQ_FORMAT_TAGGED, FI_CQ_FORMAT_TAGGED, FI_CQ_FORMAT_CONTEXT,
                                       FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_UNSPEC, 9);
    a.size = PICK(in, 0, 1, 16, 1 << 20);
    a.wait_obj = (enum fi_wait_obj)PICK(in, FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_FD, FI_WAIT_MUTEX_COND, 99);
    a.flags = PICK(in, 0, 0, FI_AFFINITY);
    if (!HAVE(4, "fi_cq_open", s->domain->ops, cq_open))
        return;
    note(4, "fi_cq_open", fi_cq_open(s->domain, &a, &s->cq[k], NULL));
}

static void do_av(struct state *s, struct input *in)
{
    int k = u8(in) % NAV;
    if (!s->domain || s->av[k])
        return;
    struct fi_av_attr a = {0};
    a.type = (enum fi_av_type)PICK(in, FI_AV_MAP, FI_AV_TABLE, FI_AV_UNSPEC, 7);
    a.count = PICK(in, 0, 1, 4, 1 << 20);
    a.flags = PICK(in, 0, 0, FI_EVENT, FI_SYMMETRIC, FI_READ);
    a.name = (u8(in) % 8 == 0) ? "fi_fuzz" : NULL;
    if (!HAVE(5, "fi_av_open", s->domain->ops, av_open))
        return;
    note(5, "fi_av_open", fi_av_open(s->domain, &a, &s->av[k], NULL));
}

static void do_ep(struct state *s, struct input *in)
{
    int k = u8(in) % NEP;
    if (!s->domain || !s->info || s->ep[k])
        return;
    struct fi_info *i = s->info;
    struct fi_info *alt = NULL;
    if (u8(in) % 4 == 0 && (alt = fi_dupinfo(s->info))) {
        alt->caps |= PICK(in, FI_RMA, FI_ATOMIC, FI_MULTI_RECV, 0);
        alt->ep_attr->type = (enum fi_ep_type)PICK(in, FI_EP_RDM, FI_EP_DGRAM, FI_EP_MSG, 99);
        i = alt;
    }
    if (HAVE(6, "fi_endpoint", s->domain->ops, endpoint))
        note(6, "fi_endpoint", fi_endpoint(s->domain, i, &s->ep[k], &ctxs[k]));
    if (alt)
        fi_freeinfo(alt);
    s->namelen[k] = 0;
    s->ep_av[k] = -1;
}

static struct fid *any_fid(struct state *s, struct input *in)
{
    int which = u8(in) % 6, k = u8(in);
    switch (which) {
    case 0: return s->cq[k % NCQ] ? &s->cq[k % NCQ]->fid : NULL;
    case 1: return s->fabric ? &s->fabric->fid : NULL;
    case 2: return s->av[k % NAV] ? &s->av[k % NAV]->fid : NULL;
    case 3: return s->eq ? &s->eq->fid : NULL;
    case 4: return s->domain ? &s->domain->fid : NULL;
    default: return s->ep[k % NEP] ? &s->ep[k % NEP]->fid : NULL;
    }
}

static void do_bind(struct state *s, struct input *in)
{
    int k = u8(in) % NEP;
    struct fid_ep *ep = s->ep[k];
    if (!ep)
        return;
    struct fid *f;
    uint64_t flags = 0;
    switch (u8(in) % 4) {
    case 0: {
        int c = u8(in) % NCQ;
        f = s->cq[c] ? &s->cq[c]->fid : NULL;
        flags = PICK(in, FI_TRANSMIT | FI_RECV, FI_TRANSMIT, FI_RECV,
                     FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION, 0, u64(in));
        break;
    }
    case 1: {
        int a = u8(in) % NAV;
        f = s->av[a] ? &s->av[a]->fid : NULL;
        if (f)
            s->ep_av[k] = a;
        break;
    }
    case 2: f = s->eq ? &s->eq->fid : NULL; break;
    default: f = any_fid(s, in); flags = u64(in); break;
    }
    if (!f || !HAVE(7, "fi_ep_bind", ep->fid.ops, bind))
        return;
    note(7, "fi_ep_bind", fi_ep_bind(ep, f, flags));
}

static void do_av_bind(struct state *s, struct input *in)
{
    struct fid_av *av = s->av[u8(in) % NAV];
    if (!av || !s->eq || !HAVE(8, "fi_av_bind", av->fid.ops, bind))
        return;
    note(8, "fi_av_bind", fi_av_bind(av, &s->eq->fid, 0));
}

static void do_enable(struct state *s, struct input *in)
{
    struct fid_ep *ep = s->ep[u8(in) % NEP];
    if (!ep || !HAVE(9, "fi_enable", ep->fid.ops, control))
        return;
    note(9, "fi_enable", fi_enable(ep));
}

static void do_getname(struct state *s, struct input *in)
{
    int k = u8(in) % NEP;
    struct fid_ep *ep = s->ep[k];
    if (!ep || !HAVE(10, "fi_getname", ep->cm, getname))
        return;
    size_t len = PICK(in, NAME, NAME, 0, 4, 8, 16);
    uint8_t tmp[NAME];
    long r = note(10, "fi_getname", fi_getname(&ep->fid, tmp, &len));
    if (r == 0 && len <= NAME) {
        memcpy(s->name[k], tmp, len);
        s->namelen[k] = len;
    }
}

static void do_setname(struct state *s, struct input *in)
{
    struct fid_ep *ep = s->ep[u8(in) % NEP];
    if (!ep || !HAVE(11, "fi_setname", ep->cm, setname))
        return;
    uint8_t tmp[NAME];
    size_t len = u8(in) % (NAME + 1);
    for (size_t j = 0; j < len; j++)
        tmp[j] = u8(in);
    note(11, "fi_setname", fi_setname(&ep->fid, tmp, len));
}

static void do_av_insert(struct state *s, struct input *in)
{
    struct fid_av *av = s->av[u8(in) % NAV];
    if (!av || !HAVE(12, "fi_av_insert", av->ops, insert))
        return;
    uint8_t names[2 * NAME];
    size_t count = 1 + u8(in) % 2;
    int k = u8(in) % (NEP + 1);
    size_t len = NAME;
    if (k < NEP && s->namelen[k]) {
        /* a live endpoint's name (legal), twice when count is 2 */
        len = s->namelen[k];
        memcpy(names, s->name[k], len);
        memcpy(names + len, s->name[(k + 1) % NEP], len);
    } else {
        for (size_t j = 0; j < sizeof names; j++)
            names[j] = u8(in);
    }
    (void)len;
    fi_addr_t out[2] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
    uint64_t flags = PICK(in, 0, 0, FI_MORE, FI_SYNC_ERR, u64(in));
    /* with an EQ bound the insert may complete there: a context that lives */
    long r = note(12, "fi_av_insert", fi_av_insert(av, names, count, out, flags, &ctxs[NCTX - 1]));
    for (size_t j = 0; r > 0 && j < count && j < 2; j++)
        if (out[j] != FI_ADDR_NOTAVAIL && s->naddr < 8)
            s->addr[s->naddr++] = out[j];
}

static fi_addr_t an_addr(struct state *s, struct input *in)
{
    switch (u8(in) % 4) {
    case 0: return FI_ADDR_UNSPEC;
    case 1: return u64(in);
    default: return s->naddr ? s->addr[u8(in) % s->naddr] : 0;
    }
}

static void do_av_misc(struct state *s, struct input *in)
{
    struct fid_av *av = s->av[u8(in) % NAV];
    if (!av)
        return;
    char str[NAME];
    size_t len;
    fi_addr_t a = an_addr(s, in);
    switch (u8(in) % 3) {
    case 0:
        if (HAVE(13, "fi_av_remove", av->ops, remove))
            note(13, "fi_av_remove", fi_av_remove(av, &a, 1, 0));
        break;
    case 1:
        len = PICK(in, NAME, 0, 4, 16);
        if (HAVE(14, "fi_av_lookup", av->ops, lookup))
            note(14, "fi_av_lookup", fi_av_lookup(av, a, str, &len));
        break;
    default:
        len = PICK(in, NAME, 0, 1, 10);
        if (HAVE(15, "fi_av_straddr", av->ops, straddr)) {
            int k = u8(in) % NEP;
            const char *r = fi_av_straddr(av, s->namelen[k] ? s->name[k] : scratch, str, &len);
            note(15, "fi_av_straddr", r ? 0 : -1);
        }
        break;
    }
}

static size_t a_len(struct input *in)
{
    switch (u8(in) % 4) {
    case 0: return 0;
    case 1: return u8(in);
    case 2: return u16(in) % (BUFSZ + 1);
    default: return PICK(in, 16383, 16384, 16385, 8192, BUFSZ);
    }
}

static void *a_buf(int k, struct input *in) { return bufs[k][u8(in) % NBUF]; }

static void *a_ctx(struct input *in) { return &ctxs[u8(in) % (NCTX - 1)]; }

static void do_send(struct state *s, struct input *in)
{
    int k = u8(in) % NEP;
    struct fid_ep *ep = s->ep[k];
    if (!ep)
        return;
    size_t len = a_len(in);
    void *buf = a_buf(k, in);
    fi_addr_t dest = an_addr(s, in);
    uint64_t tag = PICK(in, 0, 1, 7, u64(in));
    uint64_t data = u64(in);
    struct iovec iov[4];
    void *desc[4] = {0};
    size_t niov = u8(in) % 5;
    for (size_t j = 0; j < 4; j++) {
        iov[j].iov_base = bufs[k][j];
        iov[j].iov_len = len / 4;
    }
    uint64_t flags = PICK(in, 0, FI_COMPLETION, FI_INJECT, FI_REMOTE_CQ_DATA | FI_COMPLETION,
                          FI_DELIVERY_COMPLETE, FI_INJECT_COMPLETE, FI_TRANSMIT_COMPLETE, FI_MORE, u64(in));
    struct fi_msg m = {.msg_iov = iov, .desc = desc, .iov_count = niov, .addr = dest,
                       .context = a_ctx(in), .data = data};
    struct fi_msg_tagged t = {.msg_iov = iov, .desc = desc, .iov_count = niov, .addr = dest,
                              .tag = tag, .ignore = 0, .context = m.context, .data = data};
    struct fi_ops_msg *mo = ep->msg;
    struct fi_ops_tagged *to = ep->tagged;
    switch (u8(in) % 12) {
    case 0: if (HAVE(16, "fi_send", mo, send)) note(16, "fi_send", fi_send(ep, buf, len, NULL, dest, a_ctx(in))); break;
    case 1: if (HAVE(17, "fi_sendv", mo, sendv)) note(17, "fi_sendv", fi_sendv(ep, iov, desc, niov, dest, a_ctx(in))); break;
    case 2: if (HAVE(18, "fi_sendmsg", mo, sendmsg)) note(18, "fi_sendmsg", fi_sendmsg(ep, &m, flags)); break;
    case 3: if (HAVE(19, "fi_senddata", mo, senddata)) note(19, "fi_senddata", fi_senddata(ep, buf, len, NULL, data, dest, a_ctx(in))); break;
    case 4: if (HAVE(20, "fi_inject", mo, inject)) note(20, "fi_inject", fi_inject(ep, buf, len, dest)); break;
    case 5: if (HAVE(21, "fi_injectdata", mo, injectdata)) note(21, "fi_injectdata", fi_injectdata(ep, buf, len, data, dest)); break;
    case 6: if (HAVE(22, "fi_tsend", to, send)) note(22, "fi_tsend", fi_tsend(ep, buf, len, NULL, dest, tag, a_ctx(in))); break;
    case 7: if (HAVE(23, "fi_tsendv", to, sendv)) note(23, "fi_tsendv", fi_tsendv(ep, iov, desc, niov, dest, tag, a_ctx(in))); break;
    case 8: if (HAVE(24, "fi_tsendmsg", to, sendmsg)) note(24, "fi_tsendmsg", fi_tsendmsg(ep, &t, flags)); break;
    case 9: if (HAVE(25, "fi_tsenddata", to, senddata)) note(25, "fi_tsenddata", fi_tsenddata(ep, buf, len, NULL, data, dest, tag, a_ctx(in))); break;
    case 10: if (HAVE(26, "fi_tinject", to, inject)) note(26, "fi_tinject", fi_tinject(ep, buf, len, dest, tag)); break;
    default: if (HAVE(27, "fi_tinjectdata", to, injectdata)) note(27, "fi_tinjectdata", fi_tinjectdata(ep, buf, len, data, dest, tag)); break;
    }
}

static void do_recv(struct state *s, struct input *in)
{
    int k = u8(in) % NEP;
    struct fid_ep *ep = s->ep[k];
    if (!ep)
        return;
    size_t len = a_len(in);
    void *buf = a_buf(k, in);
    fi_addr_t src = an_addr(s, in);
    uint64_t tag = PICK(in, 0, 1, 7, u64(in)), ignore = PICK(in, 0, 0, ~0ULL, u64(in));
    struct iovec iov[4];
    void *desc[4] = {0};
    size_t niov = u8(in) % 5;
    for (size_t j = 0; j < 4; j++) {
        iov[j].iov_base = bufs[k][NBUF - 1 - j];
        iov[j].iov_len = len / 4;
    }
    void *ctx = a_ctx(in);
    uint64_t flags = PICK(in, 0, FI_COMPLETION, FI_PEEK, FI_PEEK | FI_CLAIM, FI_CLAIM, FI_DISCARD,
                          FI_CLAIM | FI_DISCARD, FI_PEEK | FI_DISCARD, FI_MULTI_RECV, u64(in));
    struct fi_msg m = {.msg_iov = iov, .desc = desc, .iov_count = niov, .addr = src, .context = ctx};
    struct fi_msg_tagged t = {.msg_iov = iov, .desc = desc, .iov_count = niov, .addr = src,
                              .tag = tag, .ignore = ignore, .context = ctx};
    struct fi_ops_msg *mo = ep->msg;
    struct fi_ops_tagged *to = ep->tagged;
    switch (u8(in) % 6) {
    case 0: if (HAVE(28, "fi_recv", mo, recv)) note(28, "fi_recv", fi_recv(ep, buf, len, NULL, src, ctx)); break;
    case 1: if (HAVE(29, "fi_recvv", mo, recvv)) note(29, "fi_recvv", fi_recvv(ep, iov, desc, niov, src, ctx)); break;
    case 2: if (HAVE(30, "fi_recvmsg", mo, recvmsg)) note(30, "fi_recvmsg", fi_recvmsg(ep, &m, flags)); break;
    case 3: if (HAVE(31, "fi_trecv", to, recv)) note(31, "fi_trecv", fi_trecv(ep, buf, len, NULL, src, tag, ignore, ctx)); break;
    case 4: if (HAVE(32, "fi_trecvv", to, recvv)) note(32, "fi_trecvv", fi_trecvv(ep, iov, desc, niov, src, tag, ignore, ctx)); break;
    default: if (HAVE(33, "fi_trecvmsg", to, recvmsg)) note(33, "fi_trecvmsg", fi_trecvmsg(ep, &t, flags)); break;
    }
}

static void do_cq_read(struct state *s, struct input *in)
{
    struct fid_cq *cq = s->cq[u8(in) % NCQ];
    if (!cq)
        return;
    size_t count = u8(in) % 17;
    fi_addr_t src[16];
    switch (u8(in) % 5) {
    case 0:
    case 1:
        if (HAVE(34, "fi_cq_read", cq->ops, read))
            note(34, "fi_cq_read", fi_cq_read(cq, cqbuf, count));
        break;
    case 2:
        if (HAVE(35, "fi_cq_readfrom", cq->ops, readfrom))
            note(35, "fi_cq_readfrom", fi_cq_readfrom(cq, cqbuf, count, src));
        break;
    case 3: {
        struct fi_cq_err_entry e;
        memset(&e, 0, sizeof e);
        if (u8(in) & 1) {
            e.err_data = errbuf;
            e.err_data_size = u16(in) % (sizeof errbuf + 1);
        }
        if (!HAVE(36, "fi_cq_readerr", cq->ops, readerr))
            break;
        long r = note(36, "fi_cq_readerr", fi_cq_readerr(cq, &e, 0));
        if (r > 0) {
            /* read what the provider points to: a bad pointer shows here */
            volatile uint8_t sum = 0;
            if (e.err_data && e.err_data_size)
                for (size_t j = 0; j < e.err_data_size && j < 4096; j++)
                    sum ^= ((const uint8_t *)e.err_data)[j];
            (void)sum;
            s->lasterr = e;
            s->have_err = 1;
        }
        break;
    }
    default: {
        if (HAVE(37, "fi_cq_sread", cq->ops, sread))
            note(37, "fi_cq_sread", fi_cq_sread(cq, cqbuf, count, NULL, u8(in) % 4));
        char str[128];
        if (HAVE(38, "fi_cq_strerror", cq->ops, strerror)) {
            const char *r = fi_cq_strerror(cq, s->have_err ? s->lasterr.prov_errno : (int)u64(in),
                                           s->have_err ? s->lasterr.err_data : NULL, str, u8(in) % 128);
            note(38, "fi_cq_strerror", r ? 0 : -1);
        }
        break;
    }
    }
}

static void do_eq_read(struct state *s, struct input *in)
{
    struct fid_eq *eq = s->eq;
    if (!eq)
        return;
    uint32_t ev;
    struct fi_eq_err_entry e;
    memset(&e, 0, sizeof e);
    switch (u8(in) % 3) {
    case 0:
        if (HAVE(39, "fi_eq_read", eq->ops, read))
            note(39, "fi_eq_read", fi_eq_read(eq, &ev, scratch, u8(in) % 256, PICK(in, 0, FI_PEEK)));
        break;
    case 1:
        if (HAVE(40, "fi_eq_readerr", eq->ops, readerr))
            note(40, "fi_eq_readerr", fi_eq_readerr(eq, &e, 0));
        break;
    default:
        if (HAVE(41, "fi_eq_sread", eq->ops, sread))
            note(41, "fi_eq_sread", fi_eq_sread(eq, &ev, scratch, u8(in) % 256, u8(in) % 4, 0));
        break;
    }
}

static void do_cancel(struct state *s, struct input *in)
{
    struct fid_ep *ep = s->ep[u8(in) % NEP];
    if (!ep || !HAVE(42, "fi_cancel", ep->ops, cancel))
        return;
    note(42, "fi_cancel", fi_cancel(&ep->fid, a_ctx(in)));
}

static void do_opt(struct state *s, struct input *in)
{
    struct fid_ep *ep = s->ep[u8(in) % NEP];
    if (!ep)
        return;
    int level = (int)PICK(in, FI_OPT_ENDPOINT, FI_OPT_ENDPOINT, u64(in));
    int name = (int)PICK(in, FI_OPT_MIN_MULTI_RECV, FI_OPT_CM_DATA_SIZE, FI_OPT_BUFFERED_LIMIT,
                         FI_OPT_BUFFERED_MIN, FI_OPT_TX_SIZE, FI_OPT_FI_HMEM_P2P, u8(in));
    size_t len = u8(in) % 65;
    if (u8(in) & 1) {
        if (HAVE(43, "fi_getopt", ep->ops, getopt))
            note(43, "fi_getopt", fi_getopt(&ep->fid, level, name, scratch, &len));
    } else if (HAVE(44, "fi_setopt", ep->ops, setopt)) {
        note(44, "fi_setopt", fi_setopt(&ep->fid, level, name, scratch, len));
    }
}

static void do_control(struct state *s, struct input *in)
{
    struct fid *f = any_fid(s, in);
    if (!f || !HAVE(45, "fi_control", f->ops, control))
        return;
    /* commands whose argument is plain memory (no pointers inside), and
     * numbers no libfabric defines */
    int cmd = (int)PICK(in, FI_GETFIDFLAG, FI_SETFIDFLAG, FI_GETOPSFLAG, FI_SETOPSFLAG, FI_GETWAIT,
                        FI_ENABLE, FI_BACKLOG, FI_GETWAITOBJ, FI_FLUSH_WORK, 1000 + u8(in));
    uint64_t arg[8] = {PICK(in, FI_TRANSMIT, FI_RECV, FI_TRANSMIT | FI_COMPLETION, u64(in)), 0};
    note(45, "fi_control", fi_control(f, cmd, arg));
}

static void do_close(struct state *s, struct input *in)
{
    int which = u8(in) % 7;
    struct fid *f = NULL;
    void **slot = NULL;
    switch (which) {
    case 0: { int k = u8(in) % NEP; if (s->ep[k]) { f = &s->ep[k]->fid; slot = (void **)&s->ep[k]; } break; }
    case 1: { int k = u8(in) % NCQ; if (s->cq[k]) { f = &s->cq[k]->fid; slot = (void **)&s->cq[k]; } break; }
    case 2: { int k = u8(in) % NAV; if (s->av[k]) { f = &s->av[k]->fid; slot = (void **)&s->av[k]; } break; }
    case 3: if (s->eq) { f = &s->eq->fid; slot = (void **)&s->eq; } break;
    case 4: if (s->domain) { f = &s->domain->fid; slot = (void **)&s->domain; } break;
    case 5: if (s->fabric) { f = &s->fabric->fid; slot = (void **)&s->fabric; } break;
    default: break;
    }
    if (!f)
        return;
    if (!HAVE(46, "fi_close", f->ops, close))
        return;
    long r = note(46, "fi_close", closefid(f));
    if (r == 0) {
        *slot = NULL;
        if (which == 2)
            s->naddr = 0;
    }
}

/* The legal set-up of two endpoints that know each other. */
static void setup(struct state *s)
{
    struct fi_info *hints = fi_allocinfo(), *out = NULL;
    if (!hints)
        return;
    hints->fabric_attr->prov_name = strdup("clusternet");
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    long r = note(0, "fi_getinfo", fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &out));
    fi_freeinfo(hints);
    if (r != 0 || !out)
        return;
    s->info = fi_dupinfo(out);
    fi_freeinfo(out);
    struct input none = {NULL, 0, 0};
    do_fabric(s, &none);
    do_domain(s, &none);
    if (!s->domain)
        return;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
    struct fi_av_attr aa = {.type = FI_AV_MAP};
    for (int k = 0; k < NEP; k++) {
        note(4, "fi_cq_open", fi_cq_open(s->domain, &ca, &s->cq[k], NULL));
        note(5, "fi_av_open", fi_av_open(s->domain, &aa, &s->av[k], NULL));
        if (note(6, "fi_endpoint", fi_endpoint(s->domain, s->info, &s->ep[k], NULL)) != 0 ||
            !s->cq[k] || !s->av[k])
            continue;
        note(7, "fi_ep_bind", fi_ep_bind(s->ep[k], &s->cq[k]->fid, FI_TRANSMIT | FI_RECV));
        note(7, "fi_ep_bind", fi_ep_bind(s->ep[k], &s->av[k]->fid, 0));
        s->ep_av[k] = k;
        note(9, "fi_enable", fi_enable(s->ep[k]));
        s->namelen[k] = NAME;
        if (fi_getname(&s->ep[k]->fid, s->name[k], &s->namelen[k]) != 0)
            s->namelen[k] = 0;
    }
    for (int k = 0; k < NEP; k++) {
        if (!s->av[k] || !s->namelen[1 - k])
            continue;
        fi_addr_t a = FI_ADDR_NOTAVAIL;
        if (note(12, "fi_av_insert", fi_av_insert(s->av[k], s->name[1 - k], 1, &a, 0, NULL)) == 1 &&
            s->naddr < 8)
            s->addr[s->naddr++] = a;
    }
}

static void teardown(struct state *s)
{
    for (int k = 0; k < NEP; k++)
        if (s->ep[k])
            closefid(&s->ep[k]->fid);
    for (int k = 0; k < NAV; k++)
        if (s->av[k])
            closefid(&s->av[k]->fid);
    for (int k = 0; k < NCQ; k++)
        if (s->cq[k])
            closefid(&s->cq[k]->fid);
    if (s->eq)
        closefid(&s->eq->fid);
    if (s->domain)
        closefid(&s->domain->fid);
    if (s->fabric)
        closefid(&s->fabric->fid);
    if (s->info)
        fi_freeinfo(s->info);
    memset(s, 0, sizeof *s);
}

static void one(const uint8_t *data, size_t size)
{
    struct state s;
    memset(&s, 0, sizeof s);
    struct input in = {data, size, 0};
    sequences++;
    if (u8(&in) & 1)
        setup(&s);
    int steps = 0;
    while (more(&in) && steps++ < 400) {
        switch (u8(&in) % 24) {
        case 0: do_getinfo(&s, &in); break;
        case 1: do_fabric(&s, &in); break;
        case 2: do_domain(&s, &in); break;
        case 3: do_eq(&s, &in); break;
        case 4: do_cq(&s, &in); break;
        case 5: do_av(&s, &in); break;
        case 6: do_ep(&s, &in); break;
        case 7: case 8: do_bind(&s, &in); break;
        case 9: do_av_bind(&s, &in); break;
        case 10: do_enable(&s, &in); break;
        case 11: do_getname(&s, &in); break;
        case 12: do_setname(&s, &in); break;
        case 13: do_av_insert(&s, &in); break;
        case 14: do_av_misc(&s, &in); break;
        case 15: case 16: do_send(&s, &in); break;
        case 17: do_recv(&s, &in); break;
        case 18: case 19: do_cq_read(&s, &in); break;
        case 20: do_eq_read(&s, &in); break;
        case 21: do_cancel(&s, &in); break;
        case 22: do_opt(&s, &in); break;
        default:
            if (u8(&in) % 4 == 0)
                do_close(&s, &in);
            else
                do_control(&s, &in);
            break;
        }
    }
    teardown(&s);
}

#ifdef FI_FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size);
    return 0;
}
#else

static const char *save_path;

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "fi_fuzz: HANG: a sequence ran past 20 s; its input is in the save file\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
    }
    _exit(2);
}

static uint64_t rng;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void save(const uint8_t *d, size_t n)
{
    FILE *f = fopen(save_path, "wb");
    if (f) {
        fwrite(d, 1, n, f);
        fclose(f);
    }
}

static void run_one(const uint8_t *d, size_t n)
{
    save(d, n);
    alarm(20);
    one(d, n);
    alarm(0);
}

int main(int argc, char **argv)
{
    uint64_t seed = (uint64_t)time(NULL) ^ (uint64_t)getpid();
    long runs = -1;
    double limit = -1;
    size_t max_len = 600;
    int files = 0;
    save_path = getenv("FI_FUZZ_SAVE") ? getenv("FI_FUZZ_SAVE") : "fi_fuzz-current.bin";
    signal(SIGALRM, on_alarm);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atol(argv[++i]);
        else if (!strcmp(argv[i], "--time") && i + 1 < argc)
            limit = atof(argv[++i]);
        else if (!strcmp(argv[i], "--max-len") && i + 1 < argc)
            max_len = (size_t)atol(argv[++i]);
        else {
            FILE *f = fopen(argv[i], "rb");
            if (!f) {
                perror(argv[i]);
                return 1;
            }
            static uint8_t d[1 << 16];
            size_t n = fread(d, 1, sizeof d, f);
            fclose(f);
            fprintf(stderr, "fi_fuzz: replaying %s (%zu bytes)\n", argv[i], n);
            run_one(d, n);
            files++;
        }
    }
    if (!files) {
        if (runs < 0 && limit < 0)
            runs = 1000;
        rng = seed ? seed : 1;
        fprintf(stderr, "fi_fuzz: seed %llu\n", (unsigned long long)seed);
        static uint8_t d[1 << 16];
        for (long r = 0; runs < 0 || r < runs; r++) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (limit >= 0 && (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 >= limit)
                break;
            size_t n = 8 + next_rand() % (max_len - 7);
            for (size_t j = 0; j < n; j++)
                d[j] = (uint8_t)next_rand();
            run_one(d, n);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t);
    double took = (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9;
    printf("fi_fuzz: %lu sequences, %lu calls in %.1f s (seed %llu); NULL table entries met: %lu\n",
           sequences, calls, took, (unsigned long long)seed, null_ops);
    for (int op = 0; op < NOPS; op++)
        if (op_names[op])
            printf("  %-16s %8lu ok %8lu error %6lu NULL\n", op_names[op], op_count[op][OK],
                   op_count[op][ERR], op_count[op][NULLOP]);
    return 0;
}
#endif
