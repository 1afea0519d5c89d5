/*
 * config: where cohort keeps the server's URL and the user's token between
 * runs: $XDG_CONFIG_HOME/cohort/config, else ~/.config/cohort/config, two
 * "key = value" lines, the directory 0700 and the file 0600 (it holds a
 * bearer token).  COHORT_URL and COHORT_TOKEN win over the file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "lib/fmt.h"

int cli_config_path(char *out, size_t n)
{
    const char *xdg = getenv("XDG_CONFIG_HOME");
    const char *home = getenv("HOME");
    if (xdg && xdg[0] == '/')
        return fmt_whole(out, n, "%s/cohort/config", xdg);
    if (home && home[0])
        return fmt_whole(out, n, "%s/.config/cohort/config", home);
    return -1;
}

/* Copies value (without surrounding blanks) into out[n]: 0, or -1 when too long. */
static int set_value(char *out, size_t n, const char *value)
{
    while (*value == ' ' || *value == '\t')
        value++;
    size_t len = strcspn(value, "\r\n");
    while (len && (value[len - 1] == ' ' || value[len - 1] == '\t'))
        len--;
    if (len >= n)
        return -1;
    memcpy(out, value, len);
    out[len] = '\0';
    return 0;
}

static void strip_slash(char *url)
{
    size_t n = strlen(url);
    while (n && url[n - 1] == '/')
        url[--n] = '\0';
}

void cli_config_load(cli *c)
{
    char path[4096], line[1024];
    FILE *f = cli_config_path(path, sizeof path) == 0 ? fopen(path, "re") : NULL;
    while (f && fgets(line, sizeof line, f)) {
        char *eq = strchr(line, '=');
        if (!eq || line[0] == '#')
            continue;
        *eq = '\0';
        char key[32];
        if (set_value(key, sizeof key, line) != 0)
            continue;
        if (!strcmp(key, "url") && set_value(c->url, sizeof c->url, eq + 1) != 0)
            c->url[0] = '\0';
        else if (!strcmp(key, "token") && set_value(c->token, sizeof c->token, eq + 1) != 0)
            c->token[0] = '\0';
    }
    if (f)
        fclose(f);
    const char *u = getenv("COHORT_URL"), *t = getenv("COHORT_TOKEN");
    if (u && u[0] && set_value(c->url, sizeof c->url, u) != 0)
        c->url[0] = '\0';
    if (t && t[0] && set_value(c->token, sizeof c->token, t) != 0)
        c->token[0] = '\0';
    strip_slash(c->url);
}

/* mkdir -p of path's directories (0700 for those made here). */
static int make_dirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0700);
        *p = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    return 0;
}

int cli_config_save(const char *url, const char *token)
{
    char path[4096], tmp[4200];
    int fd = -1, rc = -1;
    if (cli_config_path(path, sizeof path) != 0) {
        fprintf(stderr, "cohort: no HOME (or XDG_CONFIG_HOME) to keep the config in\n");
        return -1;
    }
    if (fmt_whole(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid()) != 0 ||
        make_dirs(path) != 0)
        goto out;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        goto out;
    char body[CLI_URL_MAX + CLI_TOKEN_MAX + 64];
    if (fmt_whole(body, sizeof body, "# cohort's login (cohort login): keep it private\n"
                                     "url = %s\ntoken = %s\n", url, token) != 0 ||
        write(fd, body, strlen(body)) != (ssize_t)strlen(body) || fsync(fd) != 0)
        goto out;
    if (close(fd) != 0) {
        fd = -1;
        goto out;
    }
    fd = -1;
    if (rename(tmp, path) != 0)
        goto out;
    rc = 0;
out:
    if (rc != 0) {
        fprintf(stderr, "cohort: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
    }
    if (fd >= 0)
        close(fd);
    return rc;
}
