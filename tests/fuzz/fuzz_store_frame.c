/*
 * fuzz_store_frame: the rendezvous store's frame parser, fed as one
 * connection's bytes (comm_store_feed: the server's own header checks,
 * allocation and handling, without a socket).  Every rank of a job can
 * reach rank 0's store, so every rank's bytes are untrusted.  The input is
 * fed twice (a second connection sees the first one's keys); then a SET
 * and a GET built with comm_store_frame from the input's first bytes must
 * be accepted.
 */
#include <string.h>

#include "tests/fuzz/fuzz.h"
#include "worker/comm_store.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t frame[8 + COMM_STORE_MAX_KEY + 256];
    char key[64];
    comm_store_server *s = comm_store_server_detached();
    if (!s)
        return 0;
    comm_store_feed(s, data, size);
    comm_store_feed(s, data, size);

    /* A well-formed SET then GET of a key made of the input's bytes. */
    size_t klen = size < 32 ? size : 32, n = 0;
    for (size_t i = 0; i < klen; i++)
        key[n++] = data[i] ? (char)data[i] : 'k';
    key[n] = '\0';
    if (n > 0) {
        size_t vlen = size - klen < 200 ? size - klen : 200;
        size_t f = comm_store_frame(frame, sizeof frame, COMM_STORE_SET, key, data + klen, vlen);
        fuzz_check(f > 0, "comm_store_frame refused a small SET");
        fuzz_check(comm_store_feed(s, frame, f) == 0, "a well-formed SET was refused");
        f = comm_store_frame(frame, sizeof frame, COMM_STORE_GET, key, NULL, 0);
        fuzz_check(f > 0 && comm_store_feed(s, frame, f) == 0, "a well-formed GET was refused");
    }
    comm_store_server_stop(s);
    return 0;
}
