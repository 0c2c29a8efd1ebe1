// norm_mcast: NORM (NACK-Oriented Reliable Multicast, RFC 5740) sender and
// receiver for netgauge's norm mode (netgauge/src/mcast/norm.rs),
// over Debian's libnorm (libnorm-dev; scripts/build-norm.sh installs it and builds this). C++ only
// because normApi.h uses C++ default arguments and references; the API is
// NORM's C API.
//
// The parent runs one process per host (in the host's network namespace)
// and reads stdout. Times are CLOCK_MONOTONIC nanoseconds, the clock every
// namespace of the machine shares, so the parent computes "until the last
// receiver has it" from the lines below.
//
//   norm_mcast send GROUP PORT IFACE NODE COUNT SIZE MEASURE RATE_MBPS SEGMENT RECEIVER_NODES...
//     MEASURE = latency: one message (a NORM data object) at a time, the
//       next after every receiver acknowledged it (a watermark with every
//       receiver as acking node); stream: every message queued as fast as
//       the transmit cache takes it, then a watermark on the last.
//     RATE_MBPS > 0: fixed transmit rate; 0: NORM's congestion control.
//     prints "READY", then per message "S k t_ns", then "END t_ns".
//   norm_mcast recv GROUP PORT IFACE NODE COUNT SIZE LOSS_PERCENT
//     LOSS_PERCENT: NORM's own loss injection on this receiver's receive
//       and transmit paths (NormSetRxLoss / NormSetTxLoss).
//     prints "READY", then per message "R k t_ns" (k = the first 8 bytes of
//     the message, little endian), then "DONE"; keeps serving
//     acknowledgement requests until killed.

#include <normApi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

static uint64_t now_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char* what) {
    fprintf(stderr, "norm_mcast: %s\n", what);
    exit(1);
}

// Waits for an event of type `want` (or NORM_TX_QUEUE_EMPTY when `want`
// is NORM_TX_QUEUE_VACANCY); frees purged objects' buffers.
static NormEventType wait_for(NormInstanceHandle inst, NormEventType want, NormEventType also) {
    NormEvent ev;
    for (;;) {
        if (!NormGetNextEvent(inst, &ev, true)) die("NormGetNextEvent failed");
        if (ev.type == NORM_TX_OBJECT_PURGED) {
            free((void*)NormObjectGetUserData(ev.object));
        }
        if (ev.type == want || ev.type == also) return ev.type;
    }
}

static int sender(int argc, char** argv) {
    if (argc < 12) die("usage: send GROUP PORT IFACE NODE COUNT SIZE MEASURE RATE_MBPS SEGMENT RECEIVERS...");
    const char* group = argv[2];
    int port = atoi(argv[3]);
    const char* iface = argv[4];
    NormNodeId node = (NormNodeId)atoi(argv[5]);
    long count = atol(argv[6]);
    long size = atol(argv[7]);
    bool latency = strcmp(argv[8], "latency") == 0;
    double rate = atof(argv[9]) * 1e6;
    int segment = atoi(argv[10]);

    NormInstanceHandle inst = NormCreateInstance();
    NormSessionHandle s = NormCreateSession(inst, group, (UINT16)port, node);
    if (s == NORM_SESSION_INVALID) die("NormCreateSession failed");
    NormSetMulticastInterface(s, iface);
    NormSetTTL(s, 1);
    NormSetMulticastLoopback(s, false);
    NormSetTxSocketBuffer(s, 8 << 20);
    if (rate > 0) {
        NormSetTxRate(s, rate);
    } else {
        NormSetCongestionControl(s, true);
    }
    NormSetGrttEstimate(s, 0.001);
    NormSetGrttProbingMode(s, NORM_PROBE_ACTIVE);
    long cache = count < 16384 ? count : 16384;
    NormSetTxCacheBounds(s, (NormSize)size * cache + (1 << 20), 16, (UINT32)(cache < 16 ? 16 : cache));
    for (int i = 11; i < argc; i++) NormAddAckingNode(s, (NormNodeId)atoi(argv[i]));
    // No parity: NORM repairs by retransmission, as MAK does (FEC off so
    // the comparison is of the repair schemes).
    if (!NormStartSender(s, (NormSessionId)(now_ns() & 0xffff), 64u << 20, (UINT16)segment, 64, 0))
        die("NormStartSender failed");
    printf("READY\n");
    fflush(stdout);

    std::vector<uint64_t> at((size_t)count);
    NormObjectHandle last = NORM_OBJECT_INVALID;
    for (long k = 0; k < count; k++) {
        char* buf = (char*)malloc((size_t)(size < 8 ? 8 : size));
        for (long i = 0; i < size; i++) buf[i] = (char)(i * 7 + k);
        uint64_t kk = (uint64_t)k;
        memcpy(buf, &kk, size < 8 ? (size_t)size : 8);
        at[(size_t)k] = now_ns();
        NormObjectHandle o;
        while ((o = NormDataEnqueue(s, buf, (UINT32)size)) == NORM_OBJECT_INVALID) {
            wait_for(inst, NORM_TX_QUEUE_VACANCY, NORM_TX_QUEUE_EMPTY);
        }
        NormObjectSetUserData(o, buf);
        last = o;
        if (latency) {
            if (!NormSetWatermark(s, o, true)) die("NormSetWatermark failed");
            wait_for(inst, NORM_TX_WATERMARK_COMPLETED, NORM_TX_WATERMARK_COMPLETED);
        }
    }
    if (!latency) {
        if (!NormSetWatermark(s, last, true)) die("NormSetWatermark failed");
    }
    // A watermark whose acknowledgement round ends before every acking node
    // has the data (repairs still under way, a burst lost) completes with a
    // failure status: NORM's guide has the application reset it and wait
    // again. Up to 50 rounds (each NORM's robust factor x GRTT).
    bool ok = true;
    for (int round = 0;; round++) {
        if (!latency) wait_for(inst, NORM_TX_WATERMARK_COMPLETED, NORM_TX_WATERMARK_COMPLETED);
        ok = NormGetAckingStatus(s, NORM_NODE_ANY) == NORM_ACK_SUCCESS;
        if (ok || latency || round >= 50) break;
        if (!NormResetWatermark(s)) die("NormResetWatermark failed");
    }
    uint64_t end = now_ns();
    NormNodeId who = NORM_NODE_ANY;
    while (NormGetNextAckingNode(s, &who)) {
        if (NormGetAckingStatus(s, who) != NORM_ACK_SUCCESS) {
            fprintf(stderr, "norm_mcast: node %u did not acknowledge\n", (unsigned)who);
            ok = false;
        }
    }
    for (long k = 0; k < count; k++) printf("S %ld %llu\n", k, (unsigned long long)at[(size_t)k]);
    printf("END %llu %s\n", (unsigned long long)end, ok ? "acked" : "NOT-ACKED");
    fflush(stdout);
    NormStopSender(s);
    NormDestroySession(s);
    NormDestroyInstance(inst);
    return 0;
}

static int receiver(int argc, char** argv) {
    if (argc < 9) die("usage: recv GROUP PORT IFACE NODE COUNT SIZE LOSS_PERCENT");
    const char* group = argv[2];
    int port = atoi(argv[3]);
    const char* iface = argv[4];
    NormNodeId node = (NormNodeId)atoi(argv[5]);
    long count = atol(argv[6]);
    long size = atol(argv[7]);
    double loss = atof(argv[8]);

    NormInstanceHandle inst = NormCreateInstance();
    NormSessionHandle s = NormCreateSession(inst, group, (UINT16)port, node);
    if (s == NORM_SESSION_INVALID) die("NormCreateSession failed");
    NormSetMulticastInterface(s, iface);
    NormSetTTL(s, 1);
    NormSetMulticastLoopback(s, false);
    NormSetDefaultSyncPolicy(s, NORM_SYNC_ALL);
    NormSetRxSocketBuffer(s, 8 << 20);
    if (loss > 0) {
        NormSetRxLoss(s, loss);
        NormSetTxLoss(s, loss);
    }
    // NORM's receiver keeps at most 256 objects pending by default; a
    // stream of more messages than that, behind a loss, has its oldest
    // objects aborted (never delivered) while the sender's watermark is
    // still acknowledged. Size the cache to the run (NORM's maximum 16384).
    NormSetRxCacheLimit(s, (unsigned short)(count < 256 ? 256 : (count < 16384 ? count : 16384)));
    if (!NormStartReceiver(s, 64u << 20)) die("NormStartReceiver failed");
    printf("READY\n");
    fflush(stdout);
    std::vector<uint64_t> at((size_t)count, 0);
    long got = 0, bad = 0;
    NormEvent ev;
    while (got < count) {
        if (!NormGetNextEvent(inst, &ev, true)) die("NormGetNextEvent failed");
        if (ev.type != NORM_RX_OBJECT_COMPLETED) continue;
        uint64_t t = now_ns();
        const char* d = NormDataAccessData(ev.object);
        long len = (long)NormObjectGetSize(ev.object);
        uint64_t k = (uint64_t)got;
        if (len >= 8) memcpy(&k, d, 8);
        if (len != size || k >= (uint64_t)count || at[(size_t)k] != 0) {
            bad++;
            continue;
        }
        at[(size_t)k] = t;
        got++;
    }
    for (long k = 0; k < count; k++) printf("R %ld %llu\n", k, (unsigned long long)at[(size_t)k]);
    printf("DONE %ld\n", bad);
    fflush(stdout);
    // Keep answering acknowledgement requests until the parent kills us.
    for (;;) {
        if (!NormGetNextEvent(inst, &ev, true)) break;
    }
    return 0;
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOFBF, 1 << 20);
    if (argc > 1 && strcmp(argv[1], "send") == 0) return sender(argc, argv);
    if (argc > 1 && strcmp(argv[1], "recv") == 0) return receiver(argc, argv);
    die("usage: norm_mcast send|recv ...");
    return 2;
}
