/*
 * seal: secrets kept at rest (the registry passwords of private images),
 * encrypted with a key that lives beside the registry's signing key in
 * cohortd's data dir (secrets.key, 0600, 32 random bytes made at the first
 * start), never in the database: a copy of the database alone gives none
 * of them.  AES-256-GCM with a random 96-bit nonce per value; a sealed value
 * is "enc1:" + base64(nonce || ciphertext || tag).  libcrypto only.
 */
#ifndef COHORT_SEAL_H
#define COHORT_SEAL_H

#include <stddef.h>

#define SEAL_PREFIX "enc1:"
/* The sealed length of a value of n bytes, its NUL included. */
#define SEAL_LEN(n) (5 + 4 * (((n) + 28 + 2) / 3) + 1)

typedef struct seal seal;

/* The key of data dir dir, loaded, or made when there is none.  NULL with
 * err set. */
seal *seal_open(const char *dir, char *err, size_t errlen);
void seal_close(seal *s);

/* 1 when text is a sealed value (else it is a value kept before sealing). */
int seal_is_sealed(const char *text);

/* plain sealed into out (at least SEAL_LEN(strlen(plain)) bytes): 0 or -1. */
int seal_encrypt(const seal *s, const char *plain, char *out, size_t n);

/* A sealed value opened into out (NUL-terminated): 0, or -1 when it is not
 * one of this key's, or does not fit. */
int seal_decrypt(const seal *s, const char *sealed, char *out, size_t n);

#endif
