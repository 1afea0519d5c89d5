/*
 * regtoken: cohortd as the token server of its registry (the Distribution
 * registry's "token" authentication).  Owns the signing key and its
 * certificate, which cohortd makes at its first start in its data dir
 * (registry-key.pem 0600, registry-cert.pem 0644: the registry's
 * rootcertbundle), and writes the tokens: JWTs signed with ES256 whose
 * header names the key by its libtrust key id ("kid"), the id the registry
 * gives each key of its root certificate bundle.  Policy (who gets what)
 * is the caller's: here only the signing.  libcrypto only.
 */
#ifndef COHORT_REGTOKEN_H
#define COHORT_REGTOKEN_H

#include <stddef.h>
#include <stdint.h>

#define REGTOKEN_ISSUER "cohortd"
#define REGTOKEN_SERVICE "cohort-registry"
#define REGTOKEN_TTL_S 300 /* a token's lifetime: minutes, as the spec suggests */

typedef struct regtoken regtoken;

/* The signer of data dir dir: its key and certificate loaded, or made when
 * neither exists.  NULL with err set. */
regtoken *regtoken_open(const char *dir, char *err, size_t errlen);
void regtoken_close(regtoken *t);

/* The path of the certificate (for the registry's rootcertbundle). */
const char *regtoken_cert_path(const regtoken *t);
/* The key id the registry gives the key ("ABCD:EFGH:...", 12 groups). */
const char *regtoken_kid(const regtoken *t);

/* One grant of a token: a resource and the actions allowed on it. */
typedef struct regtoken_access {
    const char *type;    /* "repository", "registry" */
    const char *name;    /* "acme/app", "catalog" */
    const char *actions[4]; /* "pull", "push", "delete", "*": NULL-terminated */
} regtoken_access;

/*
 * A token for subject (""  when anonymous) holding the n grants, valid from
 * now_s until exp_s, or for REGTOKEN_TTL_S when exp_s is 0: a malloc'd
 * string the caller frees, or NULL (out of memory, or the signature failed).
 */
char *regtoken_sign(const regtoken *t, const char *subject, const regtoken_access *grants,
                    int n, int64_t now_s, int64_t exp_s);

/*
 * A token this signer wrote, read back: what it grants, once its signature,
 * key id, issuer and audience check and now_s lies within its lifetime.
 * NULL for anything else (forged, altered, expired, someone else's, not a
 * JWT).  Owned by the caller: regtoken_grant_free.
 */
typedef struct regtoken_grant regtoken_grant;
regtoken_grant *regtoken_verify(const regtoken *t, const char *jwt, int64_t now_s);
/* 1 when g grants action on name of type (a "*" action grants them all). */
int regtoken_grant_allows(const regtoken_grant *g, const char *type, const char *name,
                          const char *action);
/* When g's token expires (seconds since the epoch), and whom it names. */
int64_t regtoken_grant_exp(const regtoken_grant *g);
const char *regtoken_grant_subject(const regtoken_grant *g);
void regtoken_grant_free(regtoken_grant *g);

#endif
