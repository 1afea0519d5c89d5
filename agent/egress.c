/*
 * egress: the bridge and the nftables table that let jobs' networks out
 * (see egress.h).
 */
#include "agent/egress.h"
#include "lib/fmt.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/fileutil.h"
#include "agent/netns.h"

/* Never reached through the bridge, whatever --egress-deny says. */
static const char *const always_denied[] = {
    "0.0.0.0/8",      "10.0.0.0/8",     "100.64.0.0/10", "127.0.0.0/8",
    "169.254.0.0/16", "172.16.0.0/12",  "192.0.0.0/24",  "192.168.0.0/16",
    "198.18.0.0/15",  "224.0.0.0/3",    NULL};

int egress_cidr(const char *text, int lo, int hi, uint32_t *addr, int *len)
{
    char a[20], *end;
    struct in_addr in;
    const char *slash = text ? strchr(text, '/') : NULL;
    if (!slash || (size_t)(slash - text) >= sizeof a)
        return -1;
    memcpy(a, text, (size_t)(slash - text));
    a[slash - text] = '\0';
    long n = strtol(slash + 1, &end, 10);
    if (!slash[1] || *end || n < lo || n > hi || inet_pton(AF_INET, a, &in) != 1)
        return -1;
    uint32_t v = ntohl(in.s_addr), mask = n ? 0xffffffffu << (32 - n) : 0;
    if (v & ~mask)
        return -1; /* not the first address of its prefix */
    *addr = v;
    *len = (int)n;
    return 0;
}

static void dotted(uint32_t a, char *out, size_t n)
{
    fmt_cut(out, n, "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
}

/* The table's text for nft -f: made afresh whatever was there. */
static char *ruleset(const egress *e)
{
    char sub[20], *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    dotted(e->subnet, sub, sizeof sub);
    fprintf(f, "table inet %s\ndelete table inet %s\ntable inet %s {\n", e->table, e->table,
            e->table);
    fprintf(f, "  set deny { type ipv4_addr; flags interval; auto-merge; elements = { ");
    for (int i = 0; always_denied[i]; i++)
        fprintf(f, "%s%s", i ? ", " : "", always_denied[i]);
    for (int i = 0; i < e->ndeny; i++) {
        char a[20];
        dotted(e->deny[i], a, sizeof a);
        fprintf(f, ", %s/%d", a, e->deny_len[i]);
    }
    fprintf(f, " } }\n");
    fprintf(f, "  chain input { type filter hook input priority -10; policy accept;\n"
               "    iifname \"%s\" ct state established,related accept\n"
               "    iifname \"%s\" drop\n  }\n",
            e->bridge, e->bridge);
    fprintf(f, "  chain forward { type filter hook forward priority -10; policy accept;\n"
               "    iifname \"%s\" oifname \"%s\" drop\n"
               "    iifname \"%s\" meta nfproto ipv6 drop\n"
               "    iifname \"%s\" udp dport " NETNS_VXLAN_PORTS " drop\n"
               "    iifname \"%s\" ip daddr @deny drop\n"
               "    iifname \"%s\" accept\n"
               "    oifname \"%s\" ct state established,related accept\n"
               "    oifname \"%s\" drop\n  }\n",
            e->bridge, e->bridge, e->bridge, e->bridge, e->bridge, e->bridge, e->bridge,
            e->bridge);
    fprintf(f, "  chain postrouting { type nat hook postrouting priority 100; policy accept;\n"
               "    ip saddr %s/%d oifname != \"%s\" masquerade\n  }\n}\n",
            sub, e->prefix_len, e->bridge);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* The IPv4 addresses of each host in hosts ("URL,host:port,...") added to
 * the denied ranges as /32: cohortd's and the registry's, wherever they
 * live.  0, or -1 (a name that does not resolve is said in err). */
static int deny_hosts(egress *e, const char *hosts, char *err, size_t errlen)
{
    char item[300], host[256];
    for (const char *p = hosts; p && *p;) {
        size_t n = strcspn(p, ",");
        fmt_cut(item, sizeof item, "%.*s", (int)(n < sizeof item ? n : sizeof item - 1), p);
        p += n + (p[n] == ',');
        const char *h = strstr(item, "://") ? strstr(item, "://") + 3 : item;
        size_t hl = h[0] == '[' ? 0 : strcspn(h, ":/");
        if (hl == 0 || hl >= sizeof host)
            continue; /* IPv6 literals: IPv6 is dropped whole */
        memcpy(host, h, hl);
        host[hl] = '\0';
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
        if (getaddrinfo(host, NULL, &hints, &ai) != 0) {
            fmt_cut(err, errlen, "cannot resolve %s to keep jobs from it", host);
            return -1;
        }
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
            if (e->ndeny == EGRESS_DENY_MAX) {
                freeaddrinfo(ai);
                fmt_cut(err, errlen, "more than %d ranges to deny", EGRESS_DENY_MAX);
                return -1;
            }
            e->deny[e->ndeny] = ntohl(((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr);
            e->deny_len[e->ndeny++] = 32;
        }
        freeaddrinfo(ai);
    }
    return 0;
}

static int parse_deny(egress *e, const char *deny)
{
    char item[64];
    for (const char *p = deny; p && *p;) {
        size_t n = strcspn(p, ",");
        if (n >= sizeof item || e->ndeny == EGRESS_DENY_MAX)
            return -1;
        memcpy(item, p, n);
        item[n] = '\0';
        if (egress_cidr(item, 0, 32, &e->deny[e->ndeny], &e->deny_len[e->ndeny]) != 0)
            return -1;
        e->ndeny++;
        p += n + (p[n] == ',');
    }
    return 0;
}

int egress_open(egress *e, uint32_t hash, const char *subnet, const char *deny,
                const char *services, const char *lease_root, cJSON *container, char *err,
                size_t errlen)
{
    char gw[20], sub[20], why[256], cidr[32];
    char *rules = NULL;
    int rc = -1;
    memset(e, 0, sizeof *e);
    if (egress_cidr(subnet, 16, 28, &e->subnet, &e->prefix_len) != 0) {
        fmt_cut(err, errlen, "--egress-subnet wants A.B.C.D/N, N from 16 to 28, the address "
                              "the first of its prefix (10.78.0.0/16)");
        return -1;
    }
    if (parse_deny(e, deny) != 0) {
        fmt_cut(err, errlen, "--egress-deny wants up to %d CIDR ranges, comma-separated",
                 EGRESS_DENY_MAX);
        return -1;
    }
    if (deny_hosts(e, services, err, errlen) != 0)
        return -1;
    if (fu_find_program("ip", e->ip, sizeof e->ip) != 0 ||
        fu_find_program("nft", e->nft, sizeof e->nft) != 0) {
        fmt_cut(err, errlen, "--egress on needs iproute2's ip and nftables' nft (apt-get "
                              "install iproute2 nftables)");
        return -1;
    }
    fmt_cut(e->bridge, sizeof e->bridge, "cb%08x", hash);
    fmt_cut(e->veth_prefix, sizeof e->veth_prefix, "cv%07x", hash & 0xfffffff);
    fmt_cut(e->table, sizeof e->table, "cohort_%08x", hash);
    dotted(e->subnet + 1, gw, sizeof gw);
    dotted(e->subnet, sub, sizeof sub);
    fmt_cut(cidr, sizeof cidr, "%s/%d", gw, e->prefix_len);
    const char *add[] = {"link", "add", e->bridge, "type", "bridge", NULL};
    const char *addr[] = {"addr", "replace", cidr, "dev", e->bridge, NULL};
    const char *up[] = {"link", "set", e->bridge, "up", NULL};
    const char *nft[] = {"-f", "-", NULL};
    netns_run(e->ip, add, NULL, NULL, 0); /* there already after a restart */
    e->up = 1;
    if (netns_run(e->ip, addr, NULL, why, sizeof why) != 0 ||
        netns_run(e->ip, up, NULL, why, sizeof why) != 0) {
        fmt_cut(err, errlen, "cannot make the egress bridge %s: %s", e->bridge, why);
        goto out;
    }
    FILE *fwd = fopen("/proc/sys/net/ipv4/ip_forward", "w");
    if (!fwd || fputs("1\n", fwd) < 0 || fclose(fwd) != 0) {
        fmt_cut(err, errlen, "cannot turn on IPv4 forwarding (/proc/sys/net/ipv4/ip_forward)");
        goto out;
    }
    if (!(rules = ruleset(e)) || netns_run(e->nft, nft, rules, why, sizeof why) != 0) {
        fmt_cut(err, errlen, "cannot load the egress rules (nft): %s", rules ? why : "no memory");
        goto out;
    }
    const char *leases = e->leases;
    if (fmt_whole(e->leases, sizeof e->leases, "%s/egress-%08x", lease_root, hash) != 0 ||
        (mkdir(lease_root, 0755) != 0 && access(lease_root, W_OK) != 0) ||
        (mkdir(leases, 0700) != 0 && access(leases, W_OK) != 0)) {
        fmt_cut(err, errlen, "cannot make %s", leases);
        goto out;
    }
    cJSON *o = cJSON_AddObjectToObject(container, "egress");
    cJSON_AddStringToObject(o, "bridge", e->bridge);
    cJSON_AddStringToObject(o, "veth_prefix", e->veth_prefix);
    cJSON_AddStringToObject(o, "leases", leases);
    cJSON_AddStringToObject(o, "subnet", sub);
    cJSON_AddNumberToObject(o, "prefix_len", e->prefix_len);
    rc = 0;
out:
    free(rules);
    if (rc != 0)
        egress_close(e);
    return rc;
}

void egress_close(egress *e)
{
    if (!e->up)
        return;
    const char *del[] = {"link", "del", e->bridge, NULL};
    const char *nft[] = {"delete", "table", "inet", e->table, NULL};
    netns_run(e->nft, nft, NULL, NULL, 0);
    netns_run(e->ip, del, NULL, NULL, 0);
    DIR *d = e->leases[0] ? opendir(e->leases) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            unlinkat(dirfd(d), de->d_name, 0);
    if (d)
        closedir(d);
    if (e->leases[0])
        rmdir(e->leases);
    e->up = 0;
}
