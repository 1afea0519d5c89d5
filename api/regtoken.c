/*
 * regtoken: the registry's signing key, its certificate, and ES256 JWTs
 * (see regtoken.h).
 */
#include "api/regtoken.h"
#include "lib/fmt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#define CERT_YEARS 10

struct regtoken {
    EVP_PKEY *key;
    char cert_path[4200];
    char kid[64];
};

/* ---- encodings ---- */

/* base64url without padding: the n characters at in decoded into out (room:
 * 3 * (n + 3) / 4), or -1 when they are not base64url.  The decoded length. */
static int unb64url(const char *in, size_t n, unsigned char *out, size_t room)
{
    char buf[4096];
    size_t len = n;
    if (n % 4 == 1 || n + 3 > sizeof buf || 3 * (n + 3) / 4 > room)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (c == '-')
            c = '+';
        else if (c == '_')
            c = '/';
        else if (c == '+' || c == '/' || c == '=')
            return -1;
        buf[i] = c;
    }
    while (len % 4)
        buf[len++] = '=';
    int got = EVP_DecodeBlock(out, (const unsigned char *)buf, (int)len);
    if (got < 0)
        return -1;
    return got - (int)(len - n); /* EVP_DecodeBlock counts the padding's zero bytes */
}

/* base64url without padding of n bytes into out (room: 4 * (n + 2) / 3 + 1). */
static void b64url(const unsigned char *in, size_t n, char *out)
{
    int len = EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    for (int i = 0; i < len; i++) {
        if (out[i] == '+')
            out[i] = '-';
        else if (out[i] == '/')
            out[i] = '_';
    }
    while (len > 0 && out[len - 1] == '=')
        len--;
    out[len] = '\0';
}

/*
 * libtrust's key id, which the registry gives each key of its root
 * certificate bundle: the first 240 bits of the SHA-256 of the key's
 * SubjectPublicKeyInfo (DER), in base32, as 12 groups of 4 joined by ':'.
 */
static int key_id(EVP_PKEY *key, char out[64])
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    unsigned char *der = NULL, md[32];
    unsigned int mdlen = 0;
    int n = i2d_PUBKEY(key, &der);
    if (n <= 0 || !EVP_Digest(der, (size_t)n, md, &mdlen, EVP_sha256(), NULL)) {
        OPENSSL_free(der);
        return -1;
    }
    OPENSSL_free(der);
    /* 30 bytes = 240 bits = 48 base32 digits, no padding */
    char b32[49];
    for (int i = 0; i < 48; i++) {
        int bit = i * 5, byte = bit / 8, shift = bit % 8;
        unsigned v = (unsigned)md[byte] << 8 | (byte + 1 < 30 ? md[byte + 1] : 0);
        b32[i] = alphabet[(v >> (11 - shift)) & 31];
    }
    for (int g = 0, o = 0; g < 12; g++) {
        memcpy(out + o, b32 + g * 4, 4);
        o += 4;
        out[o++] = g < 11 ? ':' : '\0';
    }
    return 0;
}

/* ---- the key and its certificate ---- */

/* A self-signed certificate of key, valid from an hour ago for CERT_YEARS. */
static X509 *self_signed(EVP_PKEY *key)
{
    X509 *x = X509_new();
    unsigned char serial[16];
    BIGNUM *bn = NULL;
    if (!x || RAND_bytes(serial, sizeof serial) != 1)
        goto fail;
    serial[0] &= 0x7f; /* positive */
    bn = BN_bin2bn(serial, sizeof serial, NULL);
    X509_NAME *name = X509_get_subject_name(x);
    if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) || !X509_set_version(x, 2) ||
        !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
        !X509_gmtime_adj(X509_getm_notAfter(x), (long)CERT_YEARS * 365 * 24 * 3600) ||
        !X509_set_pubkey(x, key) ||
        !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                    (const unsigned char *)"cohortd registry token signer", -1,
                                    -1, 0) ||
        !X509_set_issuer_name(x, name) || !X509_sign(x, key, EVP_sha256()))
        goto fail;
    BN_free(bn);
    return x;
fail:
    BN_free(bn);
    X509_free(x);
    return NULL;
}

/* Writes a PEM file at path with mode, through a temporary file and a
 * rename: 0, or -1 with errno. */
static int write_pem(const char *path, int mode, EVP_PKEY *key, X509 *cert)
{
    char tmp[4300];
    int fd = fmt_whole(tmp, sizeof tmp, "%s.tmp", path) == 0
                 ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
                 : (errno = ENAMETOOLONG, -1);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int ok = key ? PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL)
                 : PEM_write_X509(f, cert);
    ok = fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) {
        unlink(tmp);
        if (!errno)
            errno = EIO;
        return -1;
    }
    return 0;
}

/* A new key and certificate in the data dir. */
static EVP_PKEY *make_key(const char *key_path, const char *cert_path, char *err, size_t errlen)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *cert = key ? self_signed(key) : NULL;
    if (!cert) {
        fmt_cut(err, errlen, "cannot make the registry's signing key");
        goto fail;
    }
    if (write_pem(cert_path, 0644, NULL, cert) != 0 || write_pem(key_path, 0600, key, NULL) != 0) {
        fmt_cut(err, errlen, "cannot write %s: %s", key_path, strerror(errno));
        goto fail;
    }
    X509_free(cert);
    return key;
fail:
    X509_free(cert);
    EVP_PKEY_free(key);
    return NULL;
}

static EVP_PKEY *load_key(const char *key_path, char *err, size_t errlen)
{
    FILE *f = fopen(key_path, "re");
    EVP_PKEY *key = f ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : NULL;
    if (f)
        fclose(f);
    if (!key || EVP_PKEY_get_base_id(key) != EVP_PKEY_EC) {
        fmt_cut(err, errlen, "%s is not an EC private key in PEM", key_path);
        EVP_PKEY_free(key);
        return NULL;
    }
    return key;
}

regtoken *regtoken_open(const char *dir, char *err, size_t errlen)
{
    char key_path[4200];
    struct stat sb;
    regtoken *t = calloc(1, sizeof *t);
    if (!t) {
        fmt_cut(err, errlen, "out of memory");
        return NULL;
    }
    if (fmt_path(key_path, sizeof key_path, dir, "registry-key.pem") != 0 ||
        fmt_path(t->cert_path, sizeof t->cert_path, dir, "registry-cert.pem") != 0) {
        fmt_cut(err, errlen, "the data dir's path is too long");
        goto fail;
    }
    if (stat(key_path, &sb) == 0 && stat(t->cert_path, &sb) == 0)
        t->key = load_key(key_path, err, errlen);
    else
        t->key = make_key(key_path, t->cert_path, err, errlen);
    if (!t->key)
        goto fail;
    if (key_id(t->key, t->kid) != 0) {
        fmt_cut(err, errlen, "cannot compute the signing key's id");
        goto fail;
    }
    return t;
fail:
    regtoken_close(t);
    return NULL;
}

void regtoken_close(regtoken *t)
{
    if (!t)
        return;
    EVP_PKEY_free(t->key);
    free(t);
}

const char *regtoken_cert_path(const regtoken *t)
{
    return t->cert_path;
}

const char *regtoken_kid(const regtoken *t)
{
    return t->kid;
}

/* ---- tokens ---- */

/* The JWT's claims: a cJSON string the caller frees, or NULL. */
static char *claims(const char *subject, const regtoken_access *grants, int n, int64_t now_s,
                    int64_t exp_s)
{
    unsigned char raw[12];
    char jti[25];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return NULL;
    for (size_t i = 0; i < sizeof raw; i++)
        fmt_cut(jti + 2 * i, 3, "%02x", raw[i]);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "iss", REGTOKEN_ISSUER);
    cJSON_AddStringToObject(c, "sub", subject);
    cJSON_AddStringToObject(c, "aud", REGTOKEN_SERVICE);
    cJSON_AddNumberToObject(c, "exp", (double)(exp_s ? exp_s : now_s + REGTOKEN_TTL_S));
    cJSON_AddNumberToObject(c, "nbf", (double)(now_s - 10));
    cJSON_AddNumberToObject(c, "iat", (double)now_s);
    cJSON_AddStringToObject(c, "jti", jti);
    cJSON *access = cJSON_AddArrayToObject(c, "access");
    for (int i = 0; i < n; i++) {
        cJSON *a = cJSON_CreateObject(), *acts = cJSON_CreateArray();
        cJSON_AddStringToObject(a, "type", grants[i].type);
        cJSON_AddStringToObject(a, "name", grants[i].name);
        for (int k = 0; k < 4 && grants[i].actions[k]; k++)
            cJSON_AddItemToArray(acts, cJSON_CreateString(grants[i].actions[k]));
        cJSON_AddItemToObject(a, "actions", acts);
        cJSON_AddItemToArray(access, a);
    }
    char *text = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    return text;
}

/* ES256 of the n bytes at msg: the raw r || s JWS wants, into sig[64]. */
static int es256(EVP_PKEY *key, const char *msg, size_t n, unsigned char sig[64])
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char der[80];
    size_t dlen = sizeof der;
    ECDSA_SIG *s = NULL;
    int rc = -1;
    if (!md || EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key) != 1 ||
        EVP_DigestSign(md, der, &dlen, (const unsigned char *)msg, n) != 1)
        goto out;
    const unsigned char *p = der;
    if (!(s = d2i_ECDSA_SIG(NULL, &p, (long)dlen)))
        goto out;
    const BIGNUM *r, *ss;
    ECDSA_SIG_get0(s, &r, &ss);
    if (BN_bn2binpad(r, sig, 32) != 32 || BN_bn2binpad(ss, sig + 32, 32) != 32)
        goto out;
    rc = 0;
out:
    ECDSA_SIG_free(s);
    EVP_MD_CTX_free(md);
    return rc;
}

char *regtoken_sign(const regtoken *t, const char *subject, const regtoken_access *grants,
                    int n, int64_t now_s, int64_t exp_s)
{
    char header[160], *body = claims(subject, grants, n, now_s, exp_s), *out = NULL;
    unsigned char sig[64];
    fmt_cut(header, sizeof header, "{\"typ\":\"JWT\",\"alg\":\"ES256\",\"kid\":\"%s\"}", t->kid);
    if (!body)
        return NULL;
    size_t hl = strlen(header), bl = strlen(body);
    size_t cap = 4 * (hl + bl + 64 + 6) / 3 + 8;
    char *jwt = malloc(cap);
    if (!jwt)
        goto out;
    b64url((const unsigned char *)header, hl, jwt);
    size_t at = strlen(jwt);
    jwt[at++] = '.';
    b64url((const unsigned char *)body, bl, jwt + at);
    at += strlen(jwt + at);
    if (es256(t->key, jwt, at, sig) != 0)
        goto out;
    jwt[at++] = '.';
    b64url(sig, sizeof sig, jwt + at);
    out = jwt;
    jwt = NULL;
out:
    free(jwt);
    free(body);
    return out;
}

/* ---- tokens read back ---- */

struct regtoken_grant {
    cJSON *claims;
    int64_t exp;
};

/* Whether the ES256 signature sig[64] (r || s) of msg[n] is key's. */
static int es256_valid(EVP_PKEY *key, const char *msg, size_t n, const unsigned char sig[64])
{
    ECDSA_SIG *s = ECDSA_SIG_new();
    BIGNUM *r = BN_bin2bn(sig, 32, NULL), *ss = BN_bin2bn(sig + 32, 32, NULL);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char *der = NULL;
    int ok = 0;
    if (!s || !r || !ss || !md || ECDSA_SIG_set0(s, r, ss) != 1)
        goto out;
    r = ss = NULL; /* s owns them now */
    int dlen = i2d_ECDSA_SIG(s, &der);
    ok = dlen > 0 && EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, key) == 1 &&
         EVP_DigestVerify(md, der, (size_t)dlen, (const unsigned char *)msg, n) == 1;
out:
    OPENSSL_free(der);
    EVP_MD_CTX_free(md);
    BN_free(r);
    BN_free(ss);
    ECDSA_SIG_free(s);
    return ok;
}

/* The JSON object of the n base64url characters at in, or NULL. */
static cJSON *json_part(const char *in, size_t n)
{
    unsigned char text[3072];
    int len = unb64url(in, n, text, sizeof text - 1);
    if (len <= 0)
        return NULL;
    text[len] = '\0';
    if (memchr(text, '\0', (size_t)len))
        return NULL;
    cJSON *o = cJSON_Parse((const char *)text);
    if (o && !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        o = NULL;
    }
    return o;
}

static int str_is(const cJSON *o, const char *key, const char *want)
{
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
    return v && !strcmp(v, want);
}

regtoken_grant *regtoken_verify(const regtoken *t, const char *jwt, int64_t now_s)
{
    const char *dot1 = strchr(jwt, '.'), *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
    unsigned char sig[66];
    cJSON *header = NULL, *body = NULL;
    regtoken_grant *g = NULL;
    if (!dot2 || strchr(dot2 + 1, '.') || strlen(jwt) > 4000 ||
        unb64url(dot2 + 1, strlen(dot2 + 1), sig, sizeof sig) != 64 ||
        !es256_valid(t->key, jwt, (size_t)(dot2 - jwt), sig))
        goto out;
    header = json_part(jwt, (size_t)(dot1 - jwt));
    body = json_part(dot1 + 1, (size_t)(dot2 - dot1 - 1));
    if (!header || !body || !str_is(header, "alg", "ES256") || !str_is(header, "kid", t->kid) ||
        !str_is(body, "iss", REGTOKEN_ISSUER) || !str_is(body, "aud", REGTOKEN_SERVICE))
        goto out;
    const cJSON *exp = cJSON_GetObjectItemCaseSensitive(body, "exp");
    const cJSON *nbf = cJSON_GetObjectItemCaseSensitive(body, "nbf");
    if (!cJSON_IsNumber(exp) || !cJSON_IsNumber(nbf) || (double)now_s >= exp->valuedouble ||
        (double)now_s < nbf->valuedouble ||
        !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(body, "access")))
        goto out;
    if (!(g = calloc(1, sizeof *g)))
        goto out;
    g->exp = (int64_t)exp->valuedouble;
    g->claims = body;
    body = NULL;
out:
    cJSON_Delete(header);
    cJSON_Delete(body);
    return g;
}

int regtoken_grant_allows(const regtoken_grant *g, const char *type, const char *name,
                          const char *action)
{
    const cJSON *a;
    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(g->claims, "access"))
    {
        if (!str_is(a, "type", type) || !str_is(a, "name", name))
            continue;
        const cJSON *act;
        cJSON_ArrayForEach(act, cJSON_GetObjectItemCaseSensitive(a, "actions"))
        {
            const char *v = cJSON_GetStringValue(act);
            if (v && (!strcmp(v, action) || !strcmp(v, "*")))
                return 1;
        }
    }
    return 0;
}

int64_t regtoken_grant_exp(const regtoken_grant *g)
{
    return g->exp;
}

const char *regtoken_grant_subject(const regtoken_grant *g)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(g->claims, "sub"));
    return s ? s : "";
}

void regtoken_grant_free(regtoken_grant *g)
{
    if (!g)
        return;
    cJSON_Delete(g->claims);
    free(g);
}
