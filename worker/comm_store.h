/*
 * comm_store: the rendezvous key-value store of a job's ranks.
 *
 * Rank 0 serves it on MASTER_PORT (comm_store_serve, a thread of its own);
 * every rank, rank 0 included, talks to it through a client
 * (comm_store_connect).  Operations: set, get (waiting for the key), wait
 * with a timeout, and add (an atomic counter).  Frames are length-checked
 * on both sides; a bad or oversized frame closes that one connection.
 *
 * A server given a secret (the attempt's COHORT_RDZV_SECRET) admits only
 * clients whose first frame is AUTH with that secret: any other first
 * frame, or a wrong secret, closes the connection before anything is read
 * or written.  A server without one (a run outside Cohort) admits anyone.
 *
 * Wire format (all integers big-endian):
 *   request:  u32 body_len | u8 op | u8 0 | u16 key_len | key | value
 *   response: u32 body_len | u8 status | payload
 */
#ifndef COHORT_COMM_STORE_H
#define COHORT_COMM_STORE_H

#include <stddef.h>
#include <stdint.h>

#define COMM_STORE_MAX_KEY   512u
#define COMM_STORE_MAX_VALUE (1u << 20)   /* 1 MiB per value */
#define COMM_STORE_MAX_KEYS  65536u       /* keys one server holds */
#define COMM_STORE_MAX_SECRET 256u        /* bytes of a server's secret */

enum comm_store_op {
    COMM_STORE_SET = 1,
    COMM_STORE_GET = 2,   /* answers NOTFOUND at once when absent */
    COMM_STORE_WAIT = 3,  /* value: u32 timeout in ms */
    COMM_STORE_ADD = 4,   /* value: i64 delta; answers the new i64 */
    COMM_STORE_AUTH = 5,  /* key "auth", value: the secret; answers OK or closes */
};

enum comm_store_status {
    COMM_STORE_OK = 0,
    COMM_STORE_NOTFOUND = 1,
    COMM_STORE_TIMEOUT = 2,
};

typedef struct comm_store_server comm_store_server;
typedef struct comm_store comm_store;

/* Listens on every address at `port` and serves from a thread; secret
 * (copied; NULL or "" for none, at most COMM_STORE_MAX_SECRET bytes) is
 * what every client must present first.  Returns 0, or -1 with a message
 * in err. */
int comm_store_serve(int port, const char *secret, comm_store_server **out, char *err,
                     size_t errlen);
/* The port it listens on (useful when asked for port 0). */
int comm_store_server_port(const comm_store_server *s);
/* Stops the thread, closes every connection, frees everything. */
void comm_store_server_stop(comm_store_server *s);

/* The frame parser without a socket or a thread (for the fuzz target and
 * tests): comm_store_feed runs bytes through it as one connection's stream,
 * against this server's key table; a parked WAIT times out at once.  Returns
 * 0, or -1 where a real connection would have been closed.  Free the server
 * with comm_store_server_stop. */
comm_store_server *comm_store_server_detached(void);
int comm_store_feed(comm_store_server *s, const uint8_t *p, size_t n);

/* Connects to host:port, retrying refused and unreachable attempts until
 * timeout_ms has passed.  Returns 0, or -1 with a message in err. */
int comm_store_connect(const char *host, int port, int timeout_ms,
                       comm_store **out, char *err, size_t errlen);
void comm_store_close(comm_store *c);
/* Presents secret to the server: the first call on a new connection to a
 * server that has one.  0, or -1 (the connection closed; why in errmsg). */
int comm_store_auth(comm_store *c, const char *secret);

/* Every call below returns 0 on success, -1 on failure with the reason in
 * comm_store_errmsg(c); after a failure the connection is closed and every
 * later call fails too. */
int comm_store_set(comm_store *c, const char *key, const void *val, size_t len);
/* Waits up to timeout_ms for the key, then returns a malloc'd copy of its
 * value (the caller frees it) and its length. */
int comm_store_get(comm_store *c, const char *key, int timeout_ms,
                   void **val, size_t *len);
/* 0 when the key exists within timeout_ms; -1 (timeout or error) if not. */
int comm_store_wait(comm_store *c, const char *key, int timeout_ms);
int comm_store_add(comm_store *c, const char *key, int64_t delta, int64_t *result);
const char *comm_store_errmsg(const comm_store *c);

/* The raw frame helpers, shared by the client and the tests. */
size_t comm_store_frame(uint8_t *buf, size_t cap, int op, const char *key,
                        const void *val, size_t vlen);

#endif
