/*
 * comm_gloo.cc: the Gloo backend, the one C++ file in the tree: a thin
 * extern "C" bridge from comm.c to Debian's libgloo.  It owns the Gloo TCP
 * device and context of one comm, and turns every Gloo exception into -1
 * and a message.  The rendezvous goes through Cohort's own store
 * (comm_store.h), wrapped as a gloo::rendezvous::Store.
 */
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gloo/algorithm.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

extern "C" {
#include "worker/comm_impl.h"
}

namespace {

/* Gloo's Store interface over a comm_store client; failures are thrown as
 * Gloo expects and reach the caller of comm_gloo_open as its message. */
class CohortStore : public gloo::rendezvous::Store {
  public:
    CohortStore(comm_store *c, int timeout_ms) : c_(c), timeout_ms_(timeout_ms) {}

    void set(const std::string &key, const std::vector<char> &data) override
    {
        if (comm_store_set(c_, key.c_str(), data.data(), data.size()) < 0)
            throw std::runtime_error(comm_store_errmsg(c_));
    }

    std::vector<char> get(const std::string &key) override
    {
        void *p = nullptr;
        size_t n = 0;
        if (comm_store_get(c_, key.c_str(), timeout_ms_, &p, &n) < 0)
            throw std::runtime_error(comm_store_errmsg(c_));
        std::vector<char> v(static_cast<char *>(p), static_cast<char *>(p) + n);
        free(p);
        return v;
    }

    void wait(const std::vector<std::string> &keys) override
    {
        wait(keys, std::chrono::milliseconds(timeout_ms_));
    }

    void wait(const std::vector<std::string> &keys,
              const std::chrono::milliseconds &timeout) override
    {
        auto end = std::chrono::steady_clock::now() + timeout;
        for (const auto &k : keys) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                end - std::chrono::steady_clock::now());
            int ms = left.count() > 0 ? static_cast<int>(left.count()) : 0;
            if (comm_store_wait(c_, k.c_str(), ms) < 0)
                throw std::runtime_error(comm_store_errmsg(c_));
        }
    }

  private:
    comm_store *c_;
    int timeout_ms_;
};

/*
 * Two ranks exchange whole buffers over two pairs of their own, one per
 * direction.  The sending side of each is in Gloo's default asynchronous
 * mode (the write never blocks the rank: what the socket does not take at
 * once, Gloo's event-loop thread finishes), the receiving side in its
 * synchronous mode (the rank reads its socket in its own thread, so it is
 * not woken by another thread for every message).
 */
struct Exchange {
    std::vector<float> peer;
    std::unique_ptr<gloo::transport::Buffer> send, recv;
};

struct GlooComm {
    std::shared_ptr<gloo::transport::Device> dev;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    /* two ranks: the exchange's pairs, out (this rank sends) and in */
    std::shared_ptr<gloo::rendezvous::Context> out, in;
    std::chrono::milliseconds timeout;
    uint32_t tag = 0;
    /* Allreduce algorithms and exchanges keep their buffers registered with
     * the pairs, so the trainer's one gradient buffer is set up once, not
     * every step. */
    std::map<std::pair<float *, size_t>, std::unique_ptr<gloo::Algorithm>> algos;
    std::map<std::pair<float *, size_t>, Exchange> exchanges;
    char err[768] = ""; /* why the last operation failed */
};

void message(char *err, size_t errlen, const std::exception &e)
{
    std::snprintf(err, errlen, "%s", e.what());
}

/* Gloo has no average: sum, then scale. */
void scale(float *buf, size_t n, float f)
{
    for (size_t i = 0; i < n; i++)
        buf[i] *= f;
}

/* Sum of two ranks, times f (1, or 0.5 for the average, in the same pass):
 * send all of buf, receive all of the peer's, add.  Both ranks add the same
 * two numbers (a + b == b + a), so they end equal. */
void exchange_sum(GlooComm *g, float *buf, size_t count, float f)
{
    auto key = std::make_pair(buf, count);
    auto it = g->exchanges.find(key);
    size_t bytes = count * sizeof(float);
    if (it == g->exchanges.end()) {
        if (g->exchanges.size() >= 16)
            g->exchanges.clear();
        int peer = 1 - g->ctx->rank;
        /* The same slot on both ranks: each takes the next of both contexts. */
        int so = g->out->nextSlot(), si = g->in->nextSlot();
        Exchange x;
        x.peer.resize(count);
        x.send = g->out->getPair(peer)->createSendBuffer(so, buf, bytes);
        x.recv = g->in->getPair(peer)->createRecvBuffer(si, x.peer.data(), bytes);
        it = g->exchanges.emplace(key, std::move(x)).first;
    }
    Exchange &x = it->second;
    x.send->send(0, bytes, 0);
    x.recv->waitRecv();
    x.send->waitSend(); /* buf changes below: the send must be done with it */
    const float *peer = x.peer.data();
    if (f == 1.0f)
        for (size_t i = 0; i < count; i++)
            buf[i] += peer[i];
    else
        for (size_t i = 0; i < count; i++)
            buf[i] = (buf[i] + peer[i]) * f;
}

int gloo_allreduce(void *b, float *buf, size_t count, int average)
{
    auto *g = static_cast<GlooComm *>(b);
    try {
        if (g->out) {
            exchange_sum(g, buf, count, average ? 0.5f : 1.0f);
            return 0;
        }
        auto key = std::make_pair(buf, count);
        auto it = g->algos.find(key);
        if (it == g->algos.end()) {
            if (g->algos.size() >= 16)
                g->algos.clear();
            std::vector<float *> ptrs{buf};
            std::unique_ptr<gloo::Algorithm> a;
            /* More than two ranks: halving-doubling, which moves 2(n-1)/n of
             * the buffer, not n-1.  COHORT_GLOO_ALGO=ring|ring_chunked|hd
             * picks one of Gloo's algorithms instead (two ranks too, in
             * place of the exchange), for comparisons. */
            const char *alg = getenv("COHORT_GLOO_ALGO");
            if (!alg || !strcmp(alg, "exchange"))
                alg = "hd";
            if (!strcmp(alg, "ring"))
                a.reset(new gloo::AllreduceRing<float>(g->ctx, ptrs, (int)count));
            else if (!strcmp(alg, "ring_chunked"))
                a.reset(new gloo::AllreduceRingChunked<float>(g->ctx, ptrs, (int)count));
            else
                a.reset(new gloo::AllreduceHalvingDoubling<float>(g->ctx, ptrs, (int)count));
            it = g->algos.emplace(key, std::move(a)).first;
        }
        it->second->run();
        if (average)
            scale(buf, count, 1.0f / static_cast<float>(g->ctx->size));
        return 0;
    } catch (const std::exception &e) {
        message(g->err, sizeof g->err, e);
        return -1;
    }
}

int gloo_broadcast(void *b, void *buf, size_t bytes, int root)
{
    auto *g = static_cast<GlooComm *>(b);
    try {
        std::vector<uint8_t *> ptrs{static_cast<uint8_t *>(buf)};
        gloo::BroadcastOneToAll<uint8_t> bc(g->ctx, ptrs, bytes, root);
        bc.run();
        return 0;
    } catch (const std::exception &e) {
        message(g->err, sizeof g->err, e);
        return -1;
    }
}

int gloo_barrier(void *b)
{
    auto *g = static_cast<GlooComm *>(b);
    try {
        gloo::BarrierAllToAll barrier(g->ctx);
        barrier.run();
        return 0;
    } catch (const std::exception &e) {
        message(g->err, sizeof g->err, e);
        return -1;
    }
}

const char *gloo_errmsg(const void *b)
{
    return static_cast<const GlooComm *>(b)->err;
}

void gloo_destroy(void *b)
{
    delete static_cast<GlooComm *>(b);
}

} // namespace

extern "C" const struct comm_backend_ops comm_gloo_ops = {
    gloo_allreduce, gloo_broadcast, gloo_barrier, gloo_errmsg, gloo_destroy,
};

extern "C" int comm_gloo_open(int rank, int size, comm_store *store, const char *prefix,
                              const char *local_addr, int timeout_ms, void **out, char *err,
                              size_t errlen)
{
    GlooComm *g = nullptr;
    try {
        g = new GlooComm;
        gloo::transport::tcp::attr attr;
        attr.hostname = local_addr;
        g->dev = gloo::transport::tcp::CreateDevice(attr);
        g->timeout = std::chrono::milliseconds(timeout_ms);
        g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
        g->ctx->setTimeout(g->timeout);
        CohortStore base(store, timeout_ms);
        /* a context of some of the ranks (the leaders of nodes) keeps its
         * keys apart from the whole world's */
        gloo::rendezvous::PrefixStore scoped(prefix ? prefix : "", base);
        gloo::rendezvous::Store &st = prefix ? static_cast<gloo::rendezvous::Store &>(scoped)
                                             : static_cast<gloo::rendezvous::Store &>(base);
        g->ctx->connectFullMesh(st, g->dev);
        const char *alg = getenv("COHORT_GLOO_ALGO");
        if (size == 2 && (!alg || !strcmp(alg, "exchange"))) {
            /* Context a carries rank 0's data to rank 1, b the other way. */
            std::shared_ptr<gloo::rendezvous::Context> ab[2];
            for (int i = 0; i < 2; i++) {
                gloo::rendezvous::PrefixStore ps(i ? "exchange-b" : "exchange-a", st);
                ab[i] = std::make_shared<gloo::rendezvous::Context>(rank, size);
                ab[i]->setTimeout(g->timeout);
                ab[i]->connectFullMesh(ps, g->dev);
            }
            g->out = ab[rank];
            g->in = ab[1 - rank];
            g->in->getPair(1 - rank)->setSync(true, false);
        }
        *out = g;
        return 0;
    } catch (const std::exception &e) {
        message(err, errlen, e);
        delete g;
        return -1;
    }
}
