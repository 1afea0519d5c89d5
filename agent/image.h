/*
 * image: a node's cache of OCI images, unpacked once per digest and shared
 * read-only by every worker that runs them.
 *
 * Images are pulled with skopeo (Debian's; it speaks the registry API with
 * its authentication, TLS, manifest lists and digest checks) into an OCI
 * layout, and unpacked with umoci into <cache>/<hex of digest>/:
 *   rootfs/      the image's root file system (owned as in the image)
 *   image.json   the image's configuration (Env, Entrypoint, WorkingDir...)
 *   .ready       written last: the directory is complete
 * Every worker that uses an image holds a shared flock on <cache>/<hex>.lock
 * from before it looks for .ready until its container ends, so eviction
 * (which takes that lock exclusively, without waiting) never removes an
 * image in use.  Where .ready is missing, the worker pulls and unpacks
 * under an exclusive flock on <cache>/<hex>.pull.lock, which the node's other
 * workers wait for; nobody ever waits for the use lock exclusively, since its
 * holders may be a gang's first workers, running and waiting for the rest.
 * What a tag resolved to is remembered for resolve_ttl_s seconds under
 * <cache>/refs/, keyed by the reference and the credentials together, so
 * a burst of workers asks the registry once, and nobody skips the registry's
 * authentication on the strength of another's credentials.
 * Everything here runs in a worker's shim, never in the agent's loop.
 */
#ifndef COHORT_AGENT_IMAGE_H
#define COHORT_AGENT_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#define IMG_REF_MAX 512

typedef struct img_source {
    const char *reference; /* HOST[:PORT]/REPO[:TAG] or HOST[:PORT]/REPO@sha256:HEX */
    const char *username;  /* NULL: anonymous */
    const char *password;
    const char *token;     /* a bearer token of the registry's token server
                            * (cohortd's, for its registry), used without a
                            * username; NULL: none */
    int insecure;          /* plain HTTP, or TLS without verification */
} img_source;

typedef struct img_cache {
    const char *dir;       /* exists, traversable by every worker's uid */
    const char *skopeo;    /* program paths */
    const char *umoci;
    int64_t max_bytes;     /* evict unused images past this (0: never) */
    int64_t resolve_ttl_s; /* a tag's digest is asked of the registry again after
                            * this many seconds (0: every time) */
    const char *tmp_dir;   /* private scratch (credentials file), e.g. the worker's dir */
} img_cache;

/* Called with a line for people while a pull goes on ("pulling image
 * ...: 312 of 905 MB"). */
typedef void (*img_progress_fn)(void *arg, const char *text);

typedef struct img_use {
    char digest[80];       /* sha256:HEX the reference resolved to */
    char bundle[4096];     /* <cache>/<hex>: rootfs/ and image.json inside */
    int lock_fd;           /* shared lock held while the image is in use */
    int pulled;            /* 1 when this call pulled and unpacked it */
} img_use;

/* 1 when ref is a reference this module accepts (no option-like or
 * path-like surprises: lower-case repository path, tag or digest). */
int img_reference_valid(const char *ref);

/* The host part of a reference ("127.0.0.1:5000"), into out. */
void img_reference_host(const char *ref, char *out, size_t n);

/* ref ("host/repo:tag" or "host/repo@sha256:HEX") pinned to digest
 * ("sha256:" and 64 lower-case hex digits): "host/repo@digest" into out.
 * 0, or -1 when digest is not one or the result does not fit. */
int img_reference_pin(const char *ref, const char *digest, char *out, size_t n);

/*
 * Makes sure src's image is unpacked in the cache and takes a shared lock
 * on it (release with img_release).  0, or -1 with a message for the job's
 * reason in err: it names the image and says whether the tag is missing,
 * the credentials were refused or the registry did not answer.
 */
int img_acquire(const img_cache *c, const img_source *src, img_progress_fn progress, void *arg,
                img_use *out, char *err, size_t errlen);

void img_release(img_use *u);

/* Removes the least recently used images nobody uses until the cache holds
 * at most c->max_bytes; returns how many went. */
int img_evict(const img_cache *c);

#endif
