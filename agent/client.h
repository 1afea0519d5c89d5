/*
 * client: the agent's calls to cohortd over HTTP (libcurl), each with a
 * connect and a total timeout and a bound on what it reads back.
 */
#ifndef COHORT_AGENT_CLIENT_H
#define COHORT_AGENT_CLIENT_H

#include <cjson/cJSON.h>
#include <stddef.h>

#define CLIENT_MAX_BODY (16u << 20) /* the largest answer read */

typedef struct client client;

/*
 * server: "http://host:port", or several cohortd of one control plane
 * separated by commas (CLIENT_MAX_SERVERS at most).  Calls go to one of
 * them until it stops answering: a call it refuses to connect is made
 * again at once at the next; after any other failure to get an answer
 * (a timeout, a connection cut) the next call goes to the next one.
 */
#define CLIENT_MAX_SERVERS 8
client *client_new(const char *server, char *err, size_t errlen);
/* The server calls go to now, and how many times calls moved to another. */
const char *client_server(const client *c);
unsigned client_moves(const client *c);
void client_free(client *c);
void client_set_token(client *c, const char *token);

/*
 * One JSON call.  body (may be NULL) is sent as application/json.  Returns
 * the HTTP status (0 when no answer came: why in client_errmsg), and the
 * parsed answer in *out (caller deletes; NULL when it was not JSON).
 */
long client_call(client *c, const char *method, const char *path, const cJSON *body,
                 cJSON **out, long timeout_ms);

/* PUT of raw bytes (application/octet-stream); otherwise as client_call. */
long client_put_raw(client *c, const char *path, const void *data, size_t n, cJSON **out,
                    long timeout_ms);

/* Why the last call on c got no answer ("" when it got one); c keeps it. */
const char *client_errmsg(const client *c);

#endif
