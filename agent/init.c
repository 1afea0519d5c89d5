/*
 * cohort-init: PID 1 of a worker's container.  A program that is PID 1 of
 * its namespace ignores every signal it has no handler for, SIGTERM
 * included, and nothing would reap the orphans it leaves; so crun starts
 * this instead, bind-mounted read-only from the host, and it:
 *   - starts the program (argv[1..]) as its own process group, with the
 *     signal mask and dispositions reset and descriptor 3 closed;
 *   - passes SIGTERM, SIGINT and SIGHUP on to every process of the
 *     container (kill(-1)), so a stop reaches grandchildren too;
 *   - reaps everything, and when the program ends writes how it ended to
 *     descriptor 3 ("exit N", "signal N" or "error MESSAGE", one line),
 *     kills what is left and exits.
 * Statically linked: it must run in any image, whatever its libc.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/fmt.h"

#define RESULT_FD 3

static void forward(int sig)
{
    kill(-1, sig); /* from PID 1: every other process of the namespace */
}

static void report(const char *line)
{
    size_t n = strlen(line);
    ssize_t w = write(RESULT_FD, line, n);
    (void)w;
}

int main(int argc, char **argv)
{
    char line[512];
    int ep[2];
    if (argc < 2) {
        report("error cohort-init: no program to run\n");
        return 1;
    }
    if (pipe2(ep, O_CLOEXEC) != 0) {
        fmt_cut(line, sizeof line, "error cohort-init: pipe: %s\n", strerror(errno));
        report(line);
        return 1;
    }
    struct sigaction sa = {0};
    sa.sa_handler = forward;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    pid_t child = fork();
    if (child < 0) {
        fmt_cut(line, sizeof line, "error cohort-init: fork: %s\n", strerror(errno));
        report(line);
        return 1;
    }
    if (child == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int s = 1; s < NSIG; s++)
            signal(s, SIG_DFL);
        setpgid(0, 0);
        close(RESULT_FD);
        execvp(argv[1], argv + 1);
        int e = errno;
        ssize_t w = write(ep[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    close(ep[1]);
    int e = 0;
    ssize_t got;
    while ((got = read(ep[0], &e, sizeof e)) < 0 && errno == EINTR)
        ;
    close(ep[0]);
    if (got == (ssize_t)sizeof e) {
        fmt_cut(line, sizeof line, "error cannot start %.400s: %s\n", argv[1], strerror(e));
        report(line);
        waitpid(child, NULL, 0);
        return 1;
    }
    int st = 0;
    for (;;) {
        pid_t r = waitpid(-1, &st, 0);
        if (r == child)
            break;
        if (r < 0 && errno != EINTR) {
            st = 0;
            break;
        }
    }
    if (WIFSIGNALED(st))
        fmt_cut(line, sizeof line, "signal %d\n", WTERMSIG(st));
    else
        fmt_cut(line, sizeof line, "exit %d\n", WEXITSTATUS(st));
    report(line);
    kill(-1, SIGKILL); /* whatever the program left behind */
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}
