/*
 * alog: cohortd's access log, written by a thread of its own.
 *
 * Request threads hand each line to alog_put, which copies it into an
 * in-memory buffer and returns: a request never waits for the disk, even
 * while the disk stalls (a write into a file whose pages are being written
 * back can block for as long as the device does).  The writer thread takes
 * the buffer every ALOG_FLUSH_MS, or sooner once it is half full, and
 * writes it out.  Only a buffer that is full (a disk stalled for seconds)
 * makes alog_put wait: lines are never dropped.
 */
#ifndef COHORT_SERVER_ALOG_H
#define COHORT_SERVER_ALOG_H

#include <stddef.h>
#include <stdio.h>

#define ALOG_FLUSH_MS 200

typedef struct alog alog;

/* Starts the writer for f (which the alog owns from now on, and closes
 * unless it is stderr) with a buffer of cap bytes.  NULL with a message. */
alog *alog_open(FILE *f, size_t cap, char *err, size_t errlen);
/* Appends one line of n bytes (its newline included). */
void alog_put(alog *a, const char *line, size_t n);
/* Writes out everything put so far, stops the writer, closes the file. */
void alog_close(alog *a);

#endif
