/*
 * main.c: cohort-worker's entry point: picks the subcommand.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "worker/train.h"

int main(int argc, char **argv)
{
    /* Gloo sends with writev(): once a peer has closed its end, a write
     * would raise SIGPIPE and end this rank without a word, and the others'
     * roll call would then call it lost.  Ignored, the write fails with
     * EPIPE, the collective throws, and this rank reports and answers. */
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 2 && !strcmp(argv[1], "train"))
        return train_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "mkdata"))
        return train_mkdata_main(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: cohort-worker train [options]     data-parallel training (train --help)\n"
               "       cohort-worker mkdata DIR [options] write a synthetic MNIST-format set\n");
        return 0;
    }
    fprintf(stderr, "usage: cohort-worker train|mkdata ... (cohort-worker --help)\n");
    return 2;
}
