/*
 * seal: AES-256-GCM of the secrets cohortd keeps at rest (see seal.h).
 */
#include "api/seal.h"
#include "lib/fmt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#define KEY_LEN 32
#define NONCE_LEN 12
#define TAG_LEN 16
#define PLAIN_MAX 4096

struct seal {
    unsigned char key[KEY_LEN];
};

/* Reads the key file, or writes a new one (0600, through a rename). */
static int load_or_make(const char *path, unsigned char key[KEY_LEN], char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got = read(fd, key, KEY_LEN);
        close(fd);
        if (got == KEY_LEN)
            return 0;
        fmt_cut(err, errlen, "%s is not a key of %d bytes", path, KEY_LEN);
        return -1;
    }
    char tmp[4300];
    if (errno != ENOENT || fmt_whole(tmp, sizeof tmp, "%s.tmp", path) != 0 ||
        RAND_bytes(key, KEY_LEN) != 1 ||
        (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
        fmt_cut(err, errlen, "cannot make %s: %s", path, strerror(errno ? errno : EIO));
        return -1;
    }
    int ok = write(fd, key, KEY_LEN) == KEY_LEN && fsync(fd) == 0;
    if (close(fd) != 0 || !ok || rename(tmp, path) != 0) {
        fmt_cut(err, errlen, "cannot write %s: %s", path, strerror(errno ? errno : EIO));
        unlink(tmp);
        return -1;
    }
    return 0;
}

seal *seal_open(const char *dir, char *err, size_t errlen)
{
    char path[4200];
    seal *s = calloc(1, sizeof *s);
    if (!s) {
        fmt_cut(err, errlen, "out of memory");
        return NULL;
    }
    if (fmt_path(path, sizeof path, dir, "secrets.key") != 0) {
        fmt_cut(err, errlen, "the data dir's path is too long");
        free(s);
        return NULL;
    }
    if (load_or_make(path, s->key, err, errlen) != 0) {
        seal_close(s);
        return NULL;
    }
    return s;
}

void seal_close(seal *s)
{
    if (!s)
        return;
    OPENSSL_cleanse(s->key, sizeof s->key);
    free(s);
}

int seal_is_sealed(const char *text)
{
    return !strncmp(text, SEAL_PREFIX, strlen(SEAL_PREFIX));
}

/* One AES-256-GCM pass: encrypt (enc 1) or decrypt (enc 0) n bytes of in
 * into out with nonce, writing or checking tag.  0 or -1. */
static int gcm(const seal *s, int enc, const unsigned char *nonce, const unsigned char *in,
               int n, unsigned char *out, unsigned char *tag)
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int len = 0, fin = 0, rc = -1;
    if (!c || EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL, enc) != 1 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, NULL) != 1 ||
        EVP_CipherInit_ex(c, NULL, NULL, s->key, nonce, enc) != 1 ||
        (n > 0 && EVP_CipherUpdate(c, out, &len, in, n) != 1) ||
        (!enc && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag) != 1) ||
        EVP_CipherFinal_ex(c, out + len, &fin) != 1 ||
        (enc && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag) != 1))
        goto out;
    rc = 0;
out:
    EVP_CIPHER_CTX_free(c);
    return rc;
}

int seal_encrypt(const seal *s, const char *plain, char *out, size_t n)
{
    size_t len = strlen(plain);
    unsigned char buf[NONCE_LEN + PLAIN_MAX + TAG_LEN];
    if (len > PLAIN_MAX || n < SEAL_LEN(len) || RAND_bytes(buf, NONCE_LEN) != 1)
        return -1;
    if (gcm(s, 1, buf, (const unsigned char *)plain, (int)len, buf + NONCE_LEN,
            buf + NONCE_LEN + len) != 0)
        return -1;
    memcpy(out, SEAL_PREFIX, strlen(SEAL_PREFIX));
    EVP_EncodeBlock((unsigned char *)out + strlen(SEAL_PREFIX), buf, (int)(NONCE_LEN + len + TAG_LEN));
    OPENSSL_cleanse(buf, sizeof buf);
    return 0;
}

int seal_decrypt(const seal *s, const char *sealed, char *out, size_t n)
{
    unsigned char buf[NONCE_LEN + PLAIN_MAX + TAG_LEN + 3];
    const char *b64 = sealed + strlen(SEAL_PREFIX);
    size_t bl = strlen(b64);
    if (!seal_is_sealed(sealed) || bl % 4 || bl / 4 * 3 > sizeof buf)
        return -1;
    int got = EVP_DecodeBlock(buf, (const unsigned char *)b64, (int)bl);
    got -= (bl > 0 && b64[bl - 1] == '=') + (bl > 1 && b64[bl - 2] == '=');
    int len = got - NONCE_LEN - TAG_LEN;
    if (len < 0 || (size_t)len + 1 > n)
        return -1;
    int rc = gcm(s, 0, buf, buf + NONCE_LEN, len, (unsigned char *)out, buf + NONCE_LEN + len);
    out[rc == 0 ? len : 0] = '\0';
    OPENSSL_cleanse(buf, sizeof buf);
    return rc;
}
