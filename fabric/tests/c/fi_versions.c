/*
 * fi_versions: the provider as a program built against one libfabric
 * header set sees it through the core it links. Built twice by
 * tests/ofi_versions.rs: against Debian's headers and libfabric 1.17, and
 * against libfabric 2.5.1's headers and the libfabric.so.1 of the PyPI
 * wheel mpich==5.0.2.
 *
 *   fi_versions MAJOR MINOR     fi_getinfo(FI_VERSION(MAJOR, MINOR)) for an
 *                               FI_EP_RDM endpoint with FI_TAGGED, as MPI
 *                               libraries ask; then fabric, domain, counter,
 *                               AV, CQ and endpoint opened, bound, enabled,
 *                               the endpoint's own name inserted, and every
 *                               object closed
 *
 * Prints "key: value" lines (the core's version, the answer's attributes,
 * with the fields 2.x appended to fi_domain_attr when built against 2.x)
 * and "fi_versions: ok" at the end; a failed call prints "FAIL <call>:
 * <error>" and exits 1. Run with FI_PROVIDER=clusternet and
 * FI_PROVIDER_PATH set.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#define CHECK(call)                                                     \
    do {                                                                \
        int rc_ = (int)(call);                                          \
        if (rc_ != 0) {                                                 \
            printf("FAIL %s: %d (%s)\n", #call, rc_, fi_strerror(-rc_)); \
            exit(1);                                                    \
        }                                                               \
    } while (0)

#define EXPECT(what, cond)                                              \
    do {                                                                \
        if (!(cond)) {                                                  \
            printf("FAIL %s\n", what);                                  \
            exit(1);                                                    \
        }                                                               \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fi_versions MAJOR MINOR\n");
        return 2;
    }
    uint32_t version = FI_VERSION(atoi(argv[1]), atoi(argv[2]));
    printf("headers: %d.%d\n", FI_MAJOR_VERSION, FI_MINOR_VERSION);
    printf("core: %u.%u\n", FI_MAJOR(fi_version()), FI_MINOR(fi_version()));

    struct fi_info *hints = fi_allocinfo();
    EXPECT("fi_allocinfo", hints);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->av_type = FI_AV_TABLE;
    hints->domain_attr->cq_data_size = 4;
    hints->domain_attr->mr_mode = 0;
    hints->domain_attr->cntr_cnt = 1;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
#if FI_MAJOR_VERSION >= 2
    /* What 2.x callers may ask beyond 1.x: a named tag format, a counter
     * range (2.5), unified progress; a caller asking for a 1.x version
     * (Open MPI 5 asks 1.18) sets none of them. */
    if (version >= FI_VERSION(2, 0)) {
        hints->ep_attr->mem_tag_format = FI_TAG_MPI;
        hints->domain_attr->max_cntr_value = (uint64_t)1 << 40;
        hints->domain_attr->progress = FI_PROGRESS_CONTROL_UNIFIED;
    }
#endif

    struct fi_info *info = NULL;
    CHECK(fi_getinfo(version, NULL, NULL, 0, hints, &info));
    EXPECT("an answer", info);
    printf("prov_name: %s\n", info->fabric_attr->prov_name);
    printf("api_version: %u.%u\n", FI_MAJOR(info->fabric_attr->api_version),
           FI_MINOR(info->fabric_attr->api_version));
    printf("prov_version: %u.%u\n", FI_MAJOR(info->fabric_attr->prov_version),
           FI_MINOR(info->fabric_attr->prov_version));
    printf("ep_type: %d\n", (int)info->ep_attr->type);
    printf("caps_tagged: %d\n", (info->caps & FI_TAGGED) != 0);
    printf("caps_rma: %d\n", (info->caps & FI_RMA) != 0);
    printf("mr_mode: %d\n", info->domain_attr->mr_mode);
    printf("threading: %d\n", (int)info->domain_attr->threading);
    printf("cntr_cnt: %zu\n", info->domain_attr->cntr_cnt);
    printf("mem_tag_format: %#llx\n", (unsigned long long)info->ep_attr->mem_tag_format);
#if FI_MAJOR_VERSION >= 2
    printf("progress: %d\n", (int)info->domain_attr->progress);
    printf("max_ep_auth_key: %zu\n", info->domain_attr->max_ep_auth_key);
    printf("max_group_id: %u\n", info->domain_attr->max_group_id);
    printf("max_cntr_value: %#llx\n", (unsigned long long)info->domain_attr->max_cntr_value);
    printf("max_err_cntr_value: %#llx\n",
           (unsigned long long)info->domain_attr->max_err_cntr_value);
#endif

    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_cntr *cntr;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
    CHECK(fi_domain(fabric, info, &domain, NULL));

    struct fi_cntr_attr cntr_attr;
    memset(&cntr_attr, 0, sizeof(cntr_attr));
    cntr_attr.events = FI_CNTR_EVENTS_COMP;
    cntr_attr.wait_obj = FI_WAIT_UNSPEC;
    CHECK(fi_cntr_open(domain, &cntr_attr, &cntr, NULL));

    struct fi_av_attr av_attr;
    memset(&av_attr, 0, sizeof(av_attr));
    av_attr.type = FI_AV_TABLE;
    CHECK(fi_av_open(domain, &av_attr, &av, NULL));

    struct fi_cq_attr cq_attr;
    memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));

    CHECK(fi_endpoint(domain, info, &ep, NULL));
    CHECK(fi_ep_bind(ep, &av->fid, 0));
    CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION));
    /* As MPICH binds its per-domain counter: for RMA events. */
    CHECK(fi_ep_bind(ep, &cntr->fid, FI_READ | FI_WRITE));
    int rc = fi_ep_bind(ep, &cntr->fid, FI_SEND);
    printf("cntr_bind_send: %d\n", rc);
    EXPECT("a counter for sends is refused", rc == -FI_ENOSYS);
    CHECK(fi_enable(ep));

    char name[FI_NAME_MAX];
    size_t len = sizeof(name);
    CHECK(fi_getname(&ep->fid, name, &len));
    printf("name_len: %zu\n", len);
    fi_addr_t self = FI_ADDR_NOTAVAIL;
    EXPECT("fi_av_insert of the own name", fi_av_insert(av, name, 1, &self, 0, NULL) == 1);
    EXPECT("an address for the own name", self != FI_ADDR_NOTAVAIL);
#if FI_MAJOR_VERSION >= 2
    /* A call 2.x appended to fi_ops_av: beyond the provider's table. */
    fi_addr_t key;
    rc = fi_av_insert_auth_key(av, name, len, &key, 0);
    printf("av_insert_auth_key: %d\n", rc);
    EXPECT("fi_av_insert_auth_key answers FI_ENOSYS", rc == -FI_ENOSYS);
#endif

    CHECK(fi_cntr_add(cntr, 5));
    CHECK(fi_cntr_wait(cntr, 5, 0));
    printf("cntr: %llu\n", (unsigned long long)fi_cntr_read(cntr));
    EXPECT("the counter counts", fi_cntr_read(cntr) == 5);
    rc = fi_cntr_wait(cntr, 6, 10);
    EXPECT("fi_cntr_wait times out", rc == -FI_ETIMEDOUT);

    struct fi_cq_tagged_entry entry;
    ssize_t n = fi_cq_read(cq, &entry, 1);
    EXPECT("an empty CQ answers FI_EAGAIN", n == -FI_EAGAIN);

    CHECK(fi_close(&ep->fid));
    CHECK(fi_close(&cq->fid));
    CHECK(fi_close(&av->fid));
    CHECK(fi_close(&cntr->fid));
    CHECK(fi_close(&domain->fid));
    CHECK(fi_close(&fabric->fid));
    fi_freeinfo(info);
    fi_freeinfo(hints);
    printf("fi_versions: ok\n");
    return 0;
}
