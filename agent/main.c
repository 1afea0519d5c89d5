/*
 * cohort-agent: one node of a Cohort cluster.  Registers once with a join
 * token (keeping its node id and token in its data dir), then heartbeats
 * the state of its workers and polls its desired state, which it applies
 * (sup.h).  Cut off from cohortd longer than its lease, it stops its
 * workers; on SIGTERM or SIGINT it stops them and exits.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/cgroup.h"
#include "lib/fmt.h"
#include "agent/client.h"
#include "agent/egress.h"
#include "agent/fileutil.h"
#include "agent/netns.h"
#include "agent/runtime.h"
#include "agent/sup.h"
#include "storage/store_bill.h"
#include "lib/util.h"

#define POLL_MS 100
#define BUSY_POLL_MS 10 /* while workers run: their ends are noticed this soon */
#define CALL_TIMEOUT_MS 3000
#define LONG_POLL_S 20

struct config {
    const char *server, *join_token, *name, *address, *data_dir, *mount_root, *shim, *cgroup;
    const char *runtime, *registry, *insecure, *image_cache, *seccomp, *network;
    const char *egress, *egress_subnet, *egress_deny;
    long long image_cache_max_mb, resolve_ttl_s, start_timeout_s;
    char gpu_type[64];
    long long cpus, memory_mb, gpus, port_lo, port_hi, grace_s, keep_s, pids_max;
    int nlaunchers;
    char launcher[SUP_MAX_LAUNCHERS][2][PATH_MAX];
};

static volatile sig_atomic_t stopping;
/* What this agent gives jobs ("job" or "host"), said with every heartbeat:
 * an agent restarted with another --network is known as such at once. */
static const char *node_network = "host";

static void sleep_ms(long ms);

static void on_stop(int sig)
{
    (void)sig;
    stopping = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cohort-agent --server URL --join-token T --name N [options]\n"
            "\n"
            "  --server URL[,URL...] cohortd, e.g. http://127.0.0.1:8080; several cohortd of one\n"
            "                        control plane (on PostgreSQL): the agent moves to the next\n"
            "                        when one stops answering\n"
            "  --join-token T        from POST /v1/nodes/join-tokens (first start only); or\n"
            "                        COHORT_JOIN_TOKEN in the environment, which ps does not show\n"
            "  --name N              this node's name ([a-z0-9][a-z0-9._-]{0,62})\n"
            "  --address ADDR        where other nodes reach this one (default: the address\n"
            "                        this machine uses to reach the server)\n"
            "  --data-dir DIR        node identity and worker state (default /var/lib/cohort-agent)\n"
            "  --cpus N --memory-mb M --gpus G\n"
            "                        capacity (default: detected; GPUs by nvidia-smi -L)\n"
            "  --gpu-type T          the GPUs' model (default: the first GPU's, as\n"
            "                        nvidia-smi -L names it: nvidia-h200)\n"
            "  --port-range LO-HI    rendezvous ports for jobs (default 29500-29999)\n"
            "  --launcher IMAGE=PATH interpreter for an image or framework (default\n"
            "                        pytorch and tensorflow: python3 from PATH); '' runs the\n"
            "                        program itself\n"
            "  --mount-root DIR      where workers see datasets/ and workspace/ (default /cohort)\n"
            "  --stop-grace S        SIGTERM, then SIGKILL after S seconds (default 10, at\n"
            "                        most 300: billed past a job's max_runtime_seconds)\n"
            "  --keep-finished S     a finished worker's directory (its output, status) stays\n"
            "                        S seconds after cohortd has all of it (default 600)\n"
            "  --cgroup DIR|off      a cgroup v2 directory under which each worker gets a\n"
            "                        cgroup limited to its worker spec's CPUs and memory\n"
            "                        (default: <the cgroup2 mount>/cohort, and the cgroup v1\n"
            "                        hierarchies of the controllers v2 lacks, hybrid hosts)\n"
            "  --worker-pids N       processes and threads one worker may have (pids.max;\n"
            "                        default 4096)\n"
            "  --shim PATH           the cohort-shim program (default: beside this one)\n"
            "  --network job|host    job (default): each job gets a network namespace of its\n"
            "                        own here: loopback only, joined to its other nodes by a\n"
            "                        VXLAN overlay (UDP 4789) where they give jobs theirs too;\n"
            "                        host: jobs share the node's network, for a trusted node\n"
            "  --egress on|off       off (default): jobs' networks have no route out; on: out\n"
            "                        through NAT on this node, never to the node itself, to\n"
            "                        other jobs, or to private, link-local (cloud metadata)\n"
            "                        or multicast ranges\n"
            "  --egress-subnet CIDR  the addresses of jobs' way out here (10.78.0.0/16)\n"
            "  --egress-deny CIDR,.. more ranges jobs may not reach (the cluster's public ones)\n"
            "  --runtime crun|host   crun (default): each worker in an OCI container from its\n"
            "                        job's image, in a user namespace of its tenant's uids;\n"
            "                        host: workers as root processes on the host's files,\n"
            "                        only for a trusted single-tenant node\n"
            "  --registry HOST:PORT  registry of image references without a host\n"
            "                        (default 127.0.0.1:5000)\n"
            "  --insecure-registry H1,H2  registries spoken to over plain HTTP (default:\n"
            "                        127.0.0.1:5000,localhost:5000)\n"
            "  --image-cache DIR     unpacked images (default DATA_DIR/images)\n"
            "  --image-cache-max MB  evict unused images past this size (default 51200)\n"
            "  --image-resolve-ttl S a tag's digest is asked of the registry again after S\n"
            "                        seconds (default 10; 0: for every worker)\n"
            "  --start-timeout S     crun that has not started a container within S seconds\n"
            "                        is killed, where it was blocked logged, and run once\n"
            "                        more (default 15; 0: wait for ever)\n"
            "  --seccomp FILE|off    seccomp profile in the containers-common format\n"
            "                        (default /usr/share/containers/seccomp.json)\n"
            "  --help\n");
}

/*
 * GPUs as `nvidia-smi -L` lists them ("GPU 0: NVIDIA H200 (UUID: GPU-...)"):
 * their count, and the model of the first as a name ("nvidia-h200") into
 * type when type is empty.  No nvidia-smi, or no GPU: 0.
 */
static long long detect_gpus(char *type, size_t tn)
{
    FILE *p = popen("nvidia-smi -L 2>/dev/null", "r");
    if (!p)
        return 0;
    char line[512];
    long long n = 0;
    while (fgets(line, sizeof line, p)) {
        const char *model = strstr(line, ": ");
        if (strncmp(line, "GPU ", 4) || !model)
            continue;
        if (n++ == 0 && !type[0]) {
            size_t k = 0;
            for (const char *c = model + 2; *c && *c != '\n' && strncmp(c, " (UUID", 6) && k + 1 < tn &&
                                            k < 63;
                 c++) {
                char ch = (char)tolower((unsigned char)*c);
                if (isalnum((unsigned char)ch) || ch == '.' || ch == '_' || ch == '-')
                    type[k++] = ch;
                else if (k && type[k - 1] != '-')
                    type[k++] = '-';
            }
            while (k && type[k - 1] == '-')
                k--;
            type[k] = '\0';
        }
    }
    pclose(p);
    return n;
}

/* FNV-1a of text: tells apart the agents of one machine. */
static unsigned hash32(const char *text)
{
    unsigned h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

/* --network: "job" gives the container settings what a shim needs to put a
 * job on one node into a network of its own (netns.h); "host" says what
 * that costs.  0, or -1 (said). */
static int job_network(const struct config *cfg, cJSON *container, egress *eg)
{
    char ip[PATH_MAX], bridge[PATH_MAX], prefix[96];
    if (!strcmp(cfg->network, "host")) {
        fprintf(stderr, "cohort-agent: WARNING: --network host: every job shares this node's "
                        "network: its services, and every other job's ports, are reachable "
                        "from any job. Use it only on a trusted single-tenant node.\n");
        return 0;
    }
    if (fu_find_program("ip", ip, sizeof ip) != 0 ||
        fu_find_program("bridge", bridge, sizeof bridge) != 0) {
        fprintf(stderr, "cohort-agent: --network job needs iproute2's ip and bridge (apt-get "
                        "install iproute2), or --network host on a trusted node\n");
        return -1;
    }
    fmt_cut(prefix, sizeof prefix, "cohort-%.40s-%08x", cfg->name, hash32(cfg->data_dir));
    cJSON_AddStringToObject(container, "network", "job");
    cJSON_AddStringToObject(container, "netns_prefix", prefix);
    cJSON_AddStringToObject(container, "ip", ip);
    cJSON_AddStringToObject(container, "bridge", bridge);
    if (!strcmp(cfg->egress, "on")) {
        char err[512], services[4096];
        if (fmt_whole(services, sizeof services, "%s,%s", cfg->server, cfg->registry) != 0) {
            fprintf(stderr, "cohort-agent: --server and --registry are too long\n");
            return -1;
        }
        if (egress_open(eg, hash32(cfg->data_dir), cfg->egress_subnet, cfg->egress_deny,
                        services, "/run/cohort", container, err, sizeof err) != 0) {
            fprintf(stderr, "cohort-agent: %s\n", err);
            return -1;
        }
        printf("cohort-agent: jobs' networks go out through NAT on bridge %s (%s; nftables "
               "table inet %s)\n", eg->bridge, cfg->egress_subnet, eg->table);
    }
    printf("cohort-agent: every job gets a network of its own here (%s/%s-j<job>-a<attempt>): "
           "loopback only, and a VXLAN overlay (UDP %s) to its other nodes where they give "
           "jobs theirs too\n", "/run/netns", prefix, NETNS_VXLAN_PORT);
    return 0;
}

/* The local address this machine uses to reach host. */
static int route_address(const char *server, char *out, size_t n)
{
    char host[256] = "";
    const char *p = strstr(server, "://");
    p = p ? p + 3 : server;
    size_t len = strcspn(p, ":/");
    if (len == 0 || len >= sizeof host)
        return -1;
    memcpy(host, p, len);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai = NULL;
    if (getaddrinfo(host, "9", &hints, &ai) != 0)
        return -1;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in me;
    socklen_t sl = sizeof me;
    int rc = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
                     getsockname(fd, (struct sockaddr *)&me, &sl) == 0 &&
                     inet_ntop(AF_INET, &me.sin_addr, out, (socklen_t)n)
                 ? 0
                 : -1;
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}

/* An option with a value: where it goes in struct config, and what it may be
 * (a number in lo..hi, or one of choices "a|b", or any text). */
enum opt_type { OPT_STR, OPT_NUM, OPT_CHOICE };

struct opt {
    const char *name;
    enum opt_type type;
    size_t off;
    long long lo, hi;
    const char *choices;
};

#define OPT_AT(f) offsetof(struct config, f)

static const struct opt options[] = {
    {"server", OPT_STR, OPT_AT(server), 0, 0, NULL},
    {"join-token", OPT_STR, OPT_AT(join_token), 0, 0, NULL},
    {"name", OPT_STR, OPT_AT(name), 0, 0, NULL},
    {"address", OPT_STR, OPT_AT(address), 0, 0, NULL},
    {"data-dir", OPT_STR, OPT_AT(data_dir), 0, 0, NULL},
    {"mount-root", OPT_STR, OPT_AT(mount_root), 0, 0, NULL},
    {"shim", OPT_STR, OPT_AT(shim), 0, 0, NULL},
    {"cgroup", OPT_STR, OPT_AT(cgroup), 0, 0, NULL},
    {"registry", OPT_STR, OPT_AT(registry), 0, 0, NULL},
    {"insecure-registry", OPT_STR, OPT_AT(insecure), 0, 0, NULL},
    {"image-cache", OPT_STR, OPT_AT(image_cache), 0, 0, NULL},
    {"seccomp", OPT_STR, OPT_AT(seccomp), 0, 0, NULL},
    {"egress-subnet", OPT_STR, OPT_AT(egress_subnet), 0, 0, NULL},
    {"egress-deny", OPT_STR, OPT_AT(egress_deny), 0, 0, NULL},
    {"runtime", OPT_CHOICE, OPT_AT(runtime), 0, 0, "crun|host"},
    {"network", OPT_CHOICE, OPT_AT(network), 0, 0, "job|host"},
    {"egress", OPT_CHOICE, OPT_AT(egress), 0, 0, "on|off"},
    {"cpus", OPT_NUM, OPT_AT(cpus), 1, 1 << 20, NULL},
    {"memory-mb", OPT_NUM, OPT_AT(memory_mb), 1, 1LL << 40, NULL},
    {"gpus", OPT_NUM, OPT_AT(gpus), 0, 1024, NULL},
    /* at most the stop grace cohortd bills past max_runtime_seconds */
    {"stop-grace", OPT_NUM, OPT_AT(grace_s), 0, STORE_BILL_GRACE_S, NULL},
    {"keep-finished", OPT_NUM, OPT_AT(keep_s), 0, 1LL << 40, NULL},
    {"image-cache-max", OPT_NUM, OPT_AT(image_cache_max_mb), 0, 1LL << 40, NULL},
    {"image-resolve-ttl", OPT_NUM, OPT_AT(resolve_ttl_s), 0, 86400, NULL},
    {"start-timeout", OPT_NUM, OPT_AT(start_timeout_s), 0, 86400, NULL},
    {"worker-pids", OPT_NUM, OPT_AT(pids_max), 16, 4194304, NULL},
};
#define NOPTS (sizeof options / sizeof *options)

/* "a|b|c" holds word: 1, else 0. */
static int one_of(const char *choices, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = choices; *p; p += strcspn(p, "|") + (p[strcspn(p, "|")] == '|'))
        if (strcspn(p, "|") == n && !strncmp(p, word, n))
            return 1;
    return 0;
}

/* Stores arg for option o into c: 0, or -1 (said). */
static int set_option(const struct opt *o, const char *arg, struct config *c)
{
    char *at = (char *)c + o->off, *end;
    if (o->type == OPT_STR || (o->type == OPT_CHOICE && one_of(o->choices, arg))) {
        *(const char **)at = arg;
        return 0;
    }
    if (o->type == OPT_NUM) {
        errno = 0;
        long long v = strtoll(arg, &end, 10);
        if (*arg && !*end && !errno && v >= o->lo && v <= o->hi) {
            *(long long *)at = v;
            return 0;
        }
        fprintf(stderr, "cohort-agent: --%s must be %lld..%lld, got '%s'\n", o->name, o->lo,
                o->hi, arg);
        return -1;
    }
    fprintf(stderr, "cohort-agent: --%s must be one of %s, got '%s'\n", o->name, o->choices,
            arg);
    return -1;
}

/* The options that take more than a table row: a range, a type name, a list. */
static int set_special(int o, const char *arg, struct config *c)
{
    if (o == 'p' && sscanf(arg, "%lld-%lld", &c->port_lo, &c->port_hi) == 2 &&
        c->port_lo >= 1024 && c->port_hi <= 65535 && c->port_hi >= c->port_lo)
        return 0;
    if (o == 'T' && util_name_valid(arg)) {
        fmt_cut(c->gpu_type, sizeof c->gpu_type, "%s", arg);
        return 0;
    }
    const char *eq = o == 'l' ? strchr(arg, '=') : NULL;
    if (eq && eq != arg && c->nlaunchers < SUP_MAX_LAUNCHERS && (size_t)(eq - arg) < PATH_MAX &&
        strlen(eq + 1) < PATH_MAX) {
        memcpy(c->launcher[c->nlaunchers][0], arg, (size_t)(eq - arg));
        c->launcher[c->nlaunchers][0][eq - arg] = '\0';
        fmt_cut(c->launcher[c->nlaunchers][1], PATH_MAX, "%s", eq + 1);
        c->nlaunchers++;
        return 0;
    }
    fprintf(stderr, "cohort-agent: bad value for --%s: %s\n",
            o == 'p' ? "port-range" : o == 'T' ? "gpu-type" : "launcher", arg);
    return -1;
}

static void config_defaults(struct config *c)
{
    c->data_dir = "/var/lib/cohort-agent";
    c->mount_root = "/cohort";
    c->cpus = sysconf(_SC_NPROCESSORS_ONLN);
    c->memory_mb = (long long)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE) / (1024 * 1024);
    c->gpus = -1;
    c->port_lo = 29500;
    c->port_hi = 29999;
    c->grace_s = 10;
    c->keep_s = 600;
    c->runtime = "crun";
    c->registry = "127.0.0.1:5000";
    c->insecure = "127.0.0.1:5000,localhost:5000";
    c->seccomp = "/usr/share/containers/seccomp.json";
    c->image_cache_max_mb = 51200;
    c->resolve_ttl_s = 10;
    c->start_timeout_s = 15;
    c->pids_max = 4096;
    c->network = "job";
    c->egress = "off";
    c->egress_subnet = "10.78.0.0/16";
}

static int parse_args(int argc, char **argv, struct config *c)
{
    static struct option longopts[NOPTS + 5];
    for (size_t i = 0; i < NOPTS; i++)
        longopts[i] = (struct option){options[i].name, required_argument, NULL, 0};
    longopts[NOPTS] = (struct option){"port-range", required_argument, NULL, 'p'};
    longopts[NOPTS + 1] = (struct option){"gpu-type", required_argument, NULL, 'T'};
    longopts[NOPTS + 2] = (struct option){"launcher", required_argument, NULL, 'l'};
    longopts[NOPTS + 3] = (struct option){"help", no_argument, NULL, 'h'};
    config_defaults(c);
    int o, idx;
    while ((o = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        if (o == 'h') {
            usage(stdout);
            exit(0);
        }
        if (o != 0 && o != 'p' && o != 'T' && o != 'l') {
            usage(stderr);
            return -1;
        }
        if (o == 0 ? set_option(&options[idx], optarg, c) : set_special(o, optarg, c))
            return -1;
    }
    if (!c->server || !c->name || !util_name_valid(c->name)) {
        fprintf(stderr, "cohort-agent: --server and a valid --name are required\n");
        return -1;
    }
    /* Containers only: host processes share the node's network whatever --network says. */
    node_network = strcmp(c->runtime, "host") && !strcmp(c->network, "job") ? "job" : "host";
    if (!strcmp(c->egress, "on") && (strcmp(c->network, "job") || !strcmp(c->runtime, "host"))) {
        fprintf(stderr, "cohort-agent: --egress on is for jobs' own networks: --network job "
                        "and --runtime crun\n");
        return -1;
    }
    return 0;
}

/* The node as cohortd knows it: its id, and its token, kept at path and
 * used by both connections. */
struct self {
    char path[PATH_MAX];
    long long node_id;
    char token[128];
    struct poller *pl; /* the desired-state thread */
};

/* The node's identity kept at path (node.json): 0 with *node_id and token
 * filled, or -1 when there is none (said when it is damaged). */
static int identity_load(const char *path, char *token, size_t tn, long long *node_id)
{
    char buf[2048];
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    cJSON *o = cJSON_Parse(buf);
    const cJSON *id = cJSON_GetObjectItem(o, "node_id"), *t = cJSON_GetObjectItem(o, "node_token");
    int ok = cJSON_IsNumber(id) && cJSON_IsString(t);
    if (ok) {
        *node_id = (long long)id->valuedouble;
        ok = fmt_whole(token, tn, "%s", t->valuestring) == 0;
    }
    cJSON_Delete(o);
    if (!ok)
        fprintf(stderr, "cohort-agent: %s is damaged; registering again\n", path);
    return ok ? 0 : -1;
}

/* Keeps the node's identity at path, whole or not at all (0600, written
 * aside and renamed): 0, or -1 said. */
static int identity_save(const char *path, long long node_id, const char *token)
{
    char tmp[PATH_MAX + 8], text[512];
    fmt_cut(tmp, sizeof tmp, "%s.tmp", path);
    fmt_cut(text, sizeof text, "{\"node_id\":%lld,\"node_token\":\"%s\"}\n", node_id, token);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text) && fsync(fd) == 0;
    if (fd >= 0)
        close(fd);
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "cohort-agent: cannot save %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* What the node says of itself when it registers. */
static cJSON *register_body(const struct config *c)
{
    cJSON *body = cJSON_CreateObject();
    cJSON_AddStringToObject(body, "join_token", c->join_token);
    cJSON_AddStringToObject(body, "name", c->name);
    cJSON_AddStringToObject(body, "address", c->address);
    cJSON_AddNumberToObject(body, "cpus", (double)c->cpus);
    cJSON_AddNumberToObject(body, "memory_mb", (double)c->memory_mb);
    cJSON_AddNumberToObject(body, "gpus", (double)c->gpus);
    if (c->gpus > 0 && c->gpu_type[0])
        cJSON_AddStringToObject(body, "gpu_type", c->gpu_type);
    cJSON_AddNumberToObject(body, "port_lo", (double)c->port_lo);
    cJSON_AddNumberToObject(body, "port_hi", (double)c->port_hi);
    cJSON_AddStringToObject(body, "network", node_network);
    return body;
}

/* The node's identity: the one kept in its data dir, or a new one from
 * registering with the join token (kept then).  0, or -1 said. */
static int identity(struct config *c, client *cl, struct self *me)
{
    static char addr[256]; /* c->address points here from now on */
    char *token = me->token;
    size_t tn = sizeof me->token;
    long long *node_id = &me->node_id;
    const char *path = me->path;
    fmt_cut(me->path, sizeof me->path, "%s/node.json", c->data_dir);
    if (identity_load(path, token, tn, node_id) == 0)
        return 0;
    if (!c->join_token) {
        fprintf(stderr, "cohort-agent: not registered yet: --join-token (or COHORT_JOIN_TOKEN) "
                        "is required\n");
        return -1;
    }
    if (!c->address) {
        if (route_address(c->server, addr, sizeof addr) != 0)
            fmt_cut(addr, sizeof addr, "127.0.0.1");
        c->address = addr;
    }
    cJSON *body = register_body(c), *out = NULL;
    long st;
    /* A server that is busy, limiting, down or unreachable is tried again
     * (up to 10 s apart, until stopped); a refusal (4xx) is final. */
    for (int64_t wait_ms = 500;; wait_ms = wait_ms < 5000 ? wait_ms * 2 : 10000) {
        st = client_call(cl, "POST", "/v1/agent/register", body, &out, CALL_TIMEOUT_MS);
        if ((st > 0 && st < 500 && st != 429) || stopping)
            break;
        fprintf(stderr, "cohort-agent: registration: %s; trying again in %lld ms\n",
                st > 0 ? "the server is busy" : client_errmsg(cl), (long long)wait_ms);
        cJSON_Delete(out);
        out = NULL;
        sleep_ms(wait_ms);
    }
    cJSON_Delete(body);
    const cJSON *id = cJSON_GetObjectItem(out, "node_id"), *t = cJSON_GetObjectItem(out, "node_token");
    if (st != 201 || !cJSON_IsNumber(id) || !cJSON_IsString(t)) {
        const cJSON *e = cJSON_GetObjectItem(cJSON_GetObjectItem(out, "error"), "message");
        fprintf(stderr, "cohort-agent: registration failed: %s\n",
                st ? (cJSON_IsString(e) ? e->valuestring : "unexpected answer")
                   : client_errmsg(cl));
        cJSON_Delete(out);
        return -1;
    }
    *node_id = (long long)id->valuedouble;
    int whole = fmt_whole(token, tn, "%s", t->valuestring) == 0;
    cJSON_Delete(out);
    if (!whole) {
        fprintf(stderr, "cohort-agent: registration failed: the node token is too long\n");
        return -1;
    }
    if (identity_save(path, *node_id, token) != 0)
        return -1;
    printf("cohort-agent: registered as node %lld (%s, %lld CPUs, %lld MiB, %lld GPUs%s%s)\n",
           *node_id, c->name, c->cpus, c->memory_mb, c->gpus, c->gpu_type[0] ? " " : "",
           c->gpu_type);
    return 0;
}

/* The link to cohortd for one round of the loop: after a call that got no
 * answer, the round's other calls are skipped instead of timing out too. */
struct link {
    client *cl;
    int down;
    struct self *me; /* takes a new node token from a heartbeat's answer */
};

static int64_t ship_log(void *arg, int64_t id, int64_t offset, const char *buf, size_t n)
{
    struct link *ln = arg;
    client *cl = ln->cl;
    char path[96];
    if (ln->down)
        return -1;
    cJSON *out = NULL;
    fmt_cut(path, sizeof path, "/v1/agent/logs/%lld?offset=%lld", (long long)id, (long long)offset);
    long st = client_put_raw(cl, path, buf, n, &out, CALL_TIMEOUT_MS);
    int64_t size = -1;
    if (st == 0)
        ln->down = 1;
    /* "offset": how far cohortd took the output (past its log limit it takes
     * and drops); "size", from a cohortd before the limit, says the same. */
    const cJSON *sz = cJSON_GetObjectItem(out, "offset");
    if (!cJSON_IsNumber(sz))
        sz = cJSON_GetObjectItem(out, "size");
    if (st == 200 && cJSON_IsNumber(sz) && sz->valuedouble >= 0 && sz->valuedouble < 9e15)
        size = (int64_t)sz->valuedouble;
    if (st == 200 && cJSON_IsTrue(cJSON_GetObjectItem(out, "cut")))
        size = SUP_LOG_CUT; /* its job's log limit: send no more of it */
    else if (st == 404)
        size = offset + (int64_t)n; /* the job is gone: drop its output */
    cJSON_Delete(out);
    return size;
}

/*
 * The desired state arrives on a thread of its own, by long poll: cohortd
 * answers as soon as it changes, and the main loop takes the newest one.
 * A node whose token cohortd refuses is given up after REFUSED_GIVE_UP_MS
 * of refusals, not at the first: its heartbeats go on meanwhile, so that a
 * token taken over by a thief's rotation is presented again past cohortd's
 * grace, which revokes the node (api_nodes.c) instead of leaving it to the
 * thief.
 */
#define REFUSED_GIVE_UP_MS 10000
struct poller {
    client *cl; /* its own connection */
    pthread_mutex_t lock;
    pthread_cond_t arrived;
    cJSON *latest;        /* newest desired state not yet taken; owned */
    int64_t refused_since; /* monotonic ms of the first 401 in a row; 0: none */
    int64_t answered_at;  /* monotonic ms of the last answer */
    char token[128];      /* the node token to call with, and its generation */
    unsigned token_gen;
};

/* The node token the desired-state thread calls with from its next call. */
static void poller_set_token(struct poller *p, const char *token)
{
    pthread_mutex_lock(&p->lock);
    fmt_cut(p->token, sizeof p->token, "%s", token);
    p->token_gen++;
    pthread_mutex_unlock(&p->lock);
}

/* The poller's connection takes its newest token: the generation used. */
static unsigned poller_token(struct poller *p, unsigned used)
{
    pthread_mutex_lock(&p->lock);
    if (p->token_gen != used) {
        client_set_token(p->cl, p->token);
        used = p->token_gen;
    }
    pthread_mutex_unlock(&p->lock);
    return used;
}

/* After a 401: 1 when the token was replaced since the call began (the
 * refusal was of the old one: call again), else 0, the refusal counted
 * from its first in a row. */
static int poller_refused(struct poller *p, unsigned used)
{
    pthread_mutex_lock(&p->lock);
    int renewed = p->token_gen != used, first = !renewed && !p->refused_since;
    if (first)
        p->refused_since = util_mono_ms();
    pthread_cond_signal(&p->arrived);
    pthread_mutex_unlock(&p->lock);
    if (first)
        fprintf(stderr, "cohort-agent: cohortd refuses this node's token (revoked, or taken "
                        "over by another holder); trying for %d s more\n",
                REFUSED_GIVE_UP_MS / 1000);
    return renewed;
}

static void *poller_main(void *arg)
{
    struct poller *p = arg;
    char path[128], version[32] = "0";
    unsigned moves = client_moves(p->cl), gen = 0;
    while (!stopping) {
        cJSON *out = NULL;
        gen = poller_token(p, gen);
        /* Versions are one cohortd's own: at another, start again from none. */
        if (client_moves(p->cl) != moves) {
            moves = client_moves(p->cl);
            fmt_cut(version, sizeof version, "0");
        }
        fmt_cut(path, sizeof path, "/v1/agent/desired?version=%s&wait=%d", version, LONG_POLL_S);
        long st = client_call(p->cl, "GET", path, NULL, &out, (LONG_POLL_S + 5) * 1000L);
        const cJSON *v = cJSON_GetObjectItem(out, "version");
        if (st == 200 && cJSON_IsString(v) && strlen(v->valuestring) < sizeof version) {
            fmt_cut(version, sizeof version, "%s", v->valuestring);
            pthread_mutex_lock(&p->lock);
            cJSON_Delete(p->latest);
            p->latest = out;
            p->refused_since = 0;
            p->answered_at = util_mono_us() / 1000;
            pthread_cond_signal(&p->arrived);
            pthread_mutex_unlock(&p->lock);
            continue;
        }
        cJSON_Delete(out);
        if (st == 401 && poller_refused(p, gen))
            continue;
        /* cohortd away, or refusing: try again soon */
        struct timespec ts = {st == 401 ? 1 : 0, st == 401 ? 0 : 500 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Waits up to ms for a new desired state; returns it (caller deletes) or NULL. */
static cJSON *poller_take(struct poller *p, long ms, int *unknown, int64_t *answered_at)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000000L;
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&p->lock);
    if (!p->latest)
        pthread_cond_timedwait(&p->arrived, &p->lock, &ts);
    cJSON *got = p->latest;
    p->latest = NULL;
    *unknown = p->refused_since && util_mono_ms() - p->refused_since >= REFUSED_GIVE_UP_MS;
    *answered_at = p->answered_at;
    pthread_mutex_unlock(&p->lock);
    return got;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The workers' cgroup subtree: this agent's, named by the node and its data
 * dir, or none (cg->path "").  -1 when --cgroup names one that cannot be. */
static int open_workers_cgroup(const struct config *cfg, cg_root *cg)
{
    char tag[128], ctl[128], err[512] = "", path[PATH_MAX + 64];
    if (fmt_whole(tag, sizeof tag, "%s-%08x", cfg->name, hash32(cfg->data_dir)) != 0) {
        fprintf(stderr, "cohort-agent: --name is too long\n");
        return -1;
    }
    /* Under `ip netns exec` nothing is at /sys/fs/cgroup until it is mounted. */
    if (!cfg->cgroup && rt_mount_cgroup2(err, sizeof err) != 0) {
        fprintf(stderr, "cohort-agent: warning: %s\n", err);
        err[0] = '\0';
    }
    if (cg_open(cfg->cgroup, tag, cg, err, sizeof err) != 0) {
        fprintf(stderr, "cohort-agent: --cgroup: %s\n", err);
        return -1;
    }
    if (!cg_used(cg)) {
        printf("cohort-agent: workers get no cgroup of their own (%s)\n",
               cfg->cgroup ? "--cgroup off" : err[0] ? err : "no cgroup hierarchy is mounted");
        return 0;
    }
    if (err[0])
        fprintf(stderr, "cohort-agent: warning: %s\n", err);
    printf("cohort-agent: workers get cgroups under %s (controllers: %s)\n",
           cg->path[0] ? cg->path : cg->v1[CG_V1_PIDS], cg_controllers(cg, ctl, sizeof ctl));
    /* For whoever cleans up after an agent that could not (kill -9): each
     * subtree on a line of its own, v2 first. */
    fmt_cut(path, sizeof path, "%s/cgroup", cfg->data_dir);
    FILE *f = fopen(path, "w");
    int ok = f != NULL;
    for (int i = -1; ok && i < CG_V1_N; i++) {
        const char *dir = i < 0 ? cg->path : cg->v1[i];
        if (dir[0])
            ok = fprintf(f, "%s\n", dir) >= 0;
    }
    if (!f || fclose(f) != 0 || !ok)
        fprintf(stderr, "cohort-agent: warning: cannot write %s\n", path);
    return 0;
}

/* The paths a sup_config points at: they live as long as the sup. */
struct sup_paths {
    char shim[PATH_MAX + 16], lock[PATH_MAX + 64], dir[PATH_MAX + 64], python[PATH_MAX];
};

/* The worker table, with the shim, the runtime (crun's settings into
 * *container, which the caller deletes) and the launchers.  NULL, and why
 * on stderr, on failure. */
static sup *open_sup(const struct config *cfg, cg_root *cg, struct sup_paths *sp,
                     cJSON **container, egress *eg)
{
    char err[512];
    sup_config sc = {0};
    if (cfg->shim) {
        if (fmt_whole(sp->shim, sizeof sp->shim, "%s", cfg->shim) != 0) {
            fprintf(stderr, "cohort-agent: --shim is too long\n");
            return NULL;
        }
    } else {
        ssize_t n = readlink("/proc/self/exe", sp->shim, PATH_MAX);
        sp->shim[n > 0 ? n : 0] = '\0';
        char *slash = strrchr(sp->shim, '/');
        fmt_cut(slash ? slash + 1 : sp->shim, 16, "cohort-shim");
    }
    if (access(sp->shim, X_OK) != 0) {
        fprintf(stderr, "cohort-agent: cannot run the shim %s: %s\n", sp->shim, strerror(errno));
        return NULL;
    }
    sc.shim = sp->shim;
    if (!strcmp(cfg->runtime, "crun")) {
        char self_dir[PATH_MAX + 16];
        fmt_cut(self_dir, sizeof self_dir, "%s", sp->shim);
        char *slash = strrchr(self_dir, '/');
        if (slash)
            *slash = '\0';
        rt_config rtc = {cfg->data_dir,    cfg->image_cache, cfg->image_cache_max_mb << 20,
                         cfg->resolve_ttl_s, cfg->registry,  cfg->insecure, cfg->seccomp,
                         slash ? self_dir : ".", cfg->start_timeout_s};
        err[0] = '\0';
        if (!(*container = rt_open(&rtc, err, sizeof err))) {
            fprintf(stderr, "cohort-agent: cannot run containers: %s\n", err);
            return NULL;
        }
        printf("cohort-agent: workers run in containers (crun); images without a registry "
               "come from %s\n", cfg->registry);
        if (job_network(cfg, *container, eg) != 0)
            return NULL;
        const cJSON *drv = cJSON_GetObjectItem(*container, "gpu_driver");
        int nlibs = cJSON_GetArraySize(cJSON_GetObjectItem(drv, "libs")),
            nbins = cJSON_GetArraySize(cJSON_GetObjectItem(drv, "bins"));
        if (nlibs > 0)
            printf("cohort-agent: GPU workers get the host's NVIDIA driver: %d libraries and %d "
                   "programs, read-only\n", nlibs, nbins);
        else if (cfg->gpus > 0)
            fprintf(stderr, "cohort-agent: warning: %lld GPUs but no NVIDIA driver library in "
                            "ldconfig's cache: GPU containers get the device nodes only, and "
                            "CUDA in them will not find libcuda\n", cfg->gpus);
    } else {
        fprintf(stderr, "cohort-agent: WARNING: --runtime host: workers run as root processes "
                        "on this machine's own files, and any job can take the node over. Use "
                        "it only on a trusted single-tenant node.\n");
    }
    sc.container = *container;
    fmt_cut(sp->lock, sizeof sp->lock, "%s/agent.lock", cfg->data_dir);
    sc.agent_lock = sp->lock;
    sc.lease_ms = 30000;
    fmt_cut(sp->dir, sizeof sp->dir, "%s/workers", cfg->data_dir);
    sc.dir = sp->dir;
    sc.agent_dir = cfg->data_dir;
    sc.grace_ms = cfg->grace_s * 1000;
    for (int i = 0; i < cfg->nlaunchers; i++) {
        sc.launcher_image[sc.nlaunchers] = cfg->launcher[i][0];
        sc.launcher_path[sc.nlaunchers++] = cfg->launcher[i][1];
    }
    if (fu_find_program("python3", sp->python, sizeof sp->python) == 0 &&
        sc.nlaunchers < SUP_MAX_LAUNCHERS - 2) {
        sc.launcher_image[sc.nlaunchers] = "pytorch";
        sc.launcher_path[sc.nlaunchers++] = sp->python;
        sc.launcher_image[sc.nlaunchers] = "tensorflow";
        sc.launcher_path[sc.nlaunchers++] = sp->python;
    }
    sc.cgroup = cg;
    sc.pids_max = cfg->pids_max;
    sc.ngpus = (int)cfg->gpus;
    sup *s = sup_open(&sc, err, sizeof err);
    if (!s)
        fprintf(stderr, "cohort-agent: %s\n", err);
    return s;
}

/* Starts the desired-state thread on a connection of its own. */
static int start_poller(const struct config *cfg, const char *token, struct poller *pl)
{
    char err[512];
    pthread_t t;
    pl->cl = client_new(cfg->server, err, sizeof err);
    if (!pl->cl) {
        fprintf(stderr, "cohort-agent: %s\n", err);
        return -1;
    }
    pthread_mutex_init(&pl->lock, NULL);
    pthread_cond_init(&pl->arrived, NULL);
    poller_set_token(pl, token);
    if (pthread_create(&t, NULL, poller_main, pl) != 0) {
        fprintf(stderr, "cohort-agent: cannot start the desired-state thread\n");
        return -1;
    }
    pthread_detach(t); /* it may sit in a long poll when we exit */
    return 0;
}

/* A new node token from a heartbeat's answer: kept in node.json first,
 * then used by both connections; its first use makes cohortd refuse the
 * old one.  One that cannot be kept is not used, and cohortd sends
 * another with the next heartbeat. */
static void take_token(client *cl, struct self *me, const cJSON *out)
{
    const cJSON *t = cJSON_GetObjectItem(out, "node_token");
    const char *v = cJSON_GetStringValue(t);
    if (!v || strlen(v) != UTIL_TOKEN_LEN || strncmp(v, UTIL_TOKEN_PREFIX, 4) ||
        strspn(v + 4, "0123456789abcdef") != UTIL_TOKEN_LEN - 4 || !strcmp(v, me->token))
        return;
    if (identity_save(me->path, me->node_id, v) != 0)
        return;
    fmt_cut(me->token, sizeof me->token, "%s", v);
    client_set_token(cl, me->token);
    poller_set_token(me->pl, me->token);
    printf("cohort-agent: node token rotated (the old one is refused from its first use)\n");
    fflush(stdout);
}

/* One heartbeat with the workers' report; on 200 takes cohortd's heartbeat
 * and lease periods (and a new node token, when sent) and returns 1, else
 * 0 (ln->down when unreachable). */
static int heartbeat(client *cl, sup *s, struct link *ln, int64_t *hb_ms, int64_t *lease_ms)
{
    cJSON *body = cJSON_CreateObject(), *out = NULL;
    cJSON_AddItemToObject(body, "workers", sup_report(s));
    cJSON_AddStringToObject(body, "network", node_network);
    long st = client_call(cl, "POST", "/v1/agent/heartbeat", body, &out, CALL_TIMEOUT_MS);
    cJSON_Delete(body);
    if (st == 200) {
        const cJSON *h = cJSON_GetObjectItem(out, "heartbeat_seconds");
        const cJSON *l = cJSON_GetObjectItem(out, "lease_seconds");
        if (cJSON_IsNumber(h) && h->valuedouble >= 1)
            *hb_ms = (int64_t)h->valuedouble * 1000;
        if (cJSON_IsNumber(l) && l->valuedouble >= 1) {
            *lease_ms = (int64_t)l->valuedouble * 1000;
            sup_set_lease(s, *lease_ms);
        }
        take_token(cl, ln->me, out);
        sup_reported(s);
    } else if (st == 0) {
        fprintf(stderr, "cohort-agent: %s\n", client_errmsg(cl));
        ln->down = 1;
    }
    cJSON_Delete(out);
    return st == 200;
}

/* The agent's loop, until a stop signal or cohortd forgets the node:
 * desired state in, workers reconciled and watched, logs out, heartbeats,
 * and every worker stopped once cohortd has been silent past the lease. */
static void serve(const struct config *cfg, client *cl, sup *s, struct self *me)
{
    struct poller *pl = me->pl;
    int64_t hb_ms = 2000, lease_ms = 30000;
    int64_t now = util_mono_ms(), last_contact = now, next_hb = 0, next_sweep = 0;
    int lease_lost = 0;
    struct link ln = {cl, 0, me};
    /* A worker keeps the lease in force when it was launched: learn
     * cohortd's before the first desired state can launch any (else the
     * first workers would outlive a dead agent by the 30 s default). */
    if (heartbeat(cl, s, &ln, &hb_ms, &lease_ms))
        next_hb = util_mono_ms() + hb_ms;
    while (!stopping) {
        int unknown = 0;
        int64_t answered = 0;
        cJSON *desired = poller_take(pl, sup_running(s) ? BUSY_POLL_MS : POLL_MS, &unknown,
                                     &answered);
        if (unknown) {
            fprintf(stderr, "cohort-agent: cohortd does not know this node any more\n");
            break;
        }
        now = util_mono_ms();
        if (answered > last_contact)
            last_contact = answered;
        ln.down = 0;
        int changed = sup_scan(s);
        if (desired) {
            sup_reconcile(s, cJSON_GetObjectItem(desired, "workers"));
            cJSON_Delete(desired);
            changed |= sup_scan(s);
        }
        sup_tick(s);
        if (now >= next_sweep) {
            /* Finished workers' directories, cohortd having their logs. */
            sup_sweep(s, cfg->keep_s * 1000);
            next_sweep = now + (cfg->keep_s < 60 ? cfg->keep_s + 1 : 60) * 1000;
        }
        changed |= sup_ship_logs(s, ship_log, &ln);
        if ((now >= next_hb || changed) && !ln.down) {
            if (heartbeat(cl, s, &ln, &hb_ms, &lease_ms)) {
                last_contact = now;
                lease_lost = 0;
            }
            next_hb = now + hb_ms;
        }
        now = util_mono_ms();
        if (now - last_contact > lease_ms && !lease_lost) {
            fprintf(stderr, "cohort-agent: no word from cohortd for %lld s: stopping every worker\n",
                    (long long)(now - last_contact) / 1000);
            sup_stop_all(s);
            lease_lost = 1;
        }
    }
}

/* Stopping: every worker gets SIGTERM, then SIGKILL after the grace
 * period; what they printed is shipped and their ends reported. */
static void wind_down(const struct config *cfg, client *cl, sup *s, struct self *me)
{
    int64_t hb_ms, lease_ms;
    sup_stop_all(s);
    for (int64_t t0 = util_mono_ms(); sup_running(s) > 0;) {
        sup_scan(s);
        sup_tick(s);
        if (util_mono_ms() - t0 > cfg->grace_s * 1000 + 5000)
            break;
        sleep_ms(POLL_MS);
    }
    sup_scan(s);
    struct link ln = {cl, 0, me};
    sup_ship_logs(s, ship_log, &ln);
    heartbeat(cl, s, &ln, &hb_ms, &lease_ms);
}

/*
 * The data dir made, resolved into data_dir (PATH_MAX; cfg->data_dir then
 * points there) and locked for this agent alone: the lock's descriptor, or
 * -1 said on stderr.  Every path the agent makes lies under it, in buffers
 * of 4,200 bytes or more: bounded here, once, to AGENT_DIR_MAX, they all
 * fit (fmt_cut says so where they are made).
 */
static int lock_data_dir(struct config *cfg, char *data_dir)
{
    char path[PATH_MAX + 64];
    if (mkdir(cfg->data_dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "cohort-agent: %s: %s\n", cfg->data_dir, strerror(errno));
        return -1;
    }
    if (!realpath(cfg->data_dir, data_dir)) {
        fprintf(stderr, "cohort-agent: %s: %s\n", cfg->data_dir, strerror(errno));
        return -1;
    }
    cfg->data_dir = data_dir;
    if (strlen(data_dir) > AGENT_DIR_MAX) {
        fprintf(stderr, "cohort-agent: the data dir's path is longer than %d bytes: %s\n",
                AGENT_DIR_MAX, data_dir);
        return -1;
    }
    fmt_cut(path, sizeof path, "%s/agent.lock", cfg->data_dir);
    int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) != 0) {
        fprintf(stderr, "cohort-agent: another agent is using %s\n", cfg->data_dir);
        if (lock >= 0)
            close(lock);
        return -1;
    }
    return lock;
}

int main(int argc, char **argv)
{
    struct config cfg = {0};
    char err[512];
    static struct self me;          /* the node's id and token */
    int rc = 1;
    client *cl = NULL;
    sup *s = NULL;
    static cg_root cg;              /* the workers' cgroup subtree; path "" for none */
    static struct sup_paths paths;  /* what the sup's configuration points at */
    static struct poller pl;        /* its thread outlives main's return */
    cJSON *container = NULL;        /* the launch requests' container settings */
    static egress eg;               /* the jobs' way out, when given */
    if (parse_args(argc, argv, &cfg))
        return 2;
    /* A join token from the environment, where other users' ps does not
     * see it; taken out of it, so that nothing the agent starts inherits it. */
    static char env_join[512];
    const char *ej = getenv("COHORT_JOIN_TOKEN");
    if (!cfg.join_token && ej && *ej && fmt_whole(env_join, sizeof env_join, "%s", ej) == 0)
        cfg.join_token = env_join;
    unsetenv("COHORT_JOIN_TOKEN");
    if (cfg.gpus < 0)
        cfg.gpus = detect_gpus(cfg.gpu_type, sizeof cfg.gpu_type);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* Children (the shims' first forks) are reaped by the kernel: launching
     * never waits on them. */
    struct sigaction chld = {0};
    chld.sa_handler = SIG_DFL;
    chld.sa_flags = SA_NOCLDWAIT;
    sigaction(SIGCHLD, &chld, NULL);

    static char data_dir[PATH_MAX];
    int lock = lock_data_dir(&cfg, data_dir);
    if (lock < 0)
        return 1;
    if (mkdir(cfg.mount_root, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "cohort-agent: cannot create the mount root %s: %s\n", cfg.mount_root,
                strerror(errno));
        goto out;
    }
    if (open_workers_cgroup(&cfg, &cg) != 0)
        goto out;
    cl = client_new(cfg.server, err, sizeof err);
    if (!cl || identity(&cfg, cl, &me) != 0)
        goto out;
    client_set_token(cl, me.token);
    me.pl = &pl;
    if (!(s = open_sup(&cfg, &cg, &paths, &container, &eg)))
        goto out;
    printf("cohort-agent: node %lld serving %s (mount root %s)\n", me.node_id, cfg.server,
           cfg.mount_root);
    fflush(stdout);
    if (start_poller(&cfg, me.token, &pl) != 0)
        goto out;
    serve(&cfg, cl, s, &me);
    wind_down(&cfg, cl, s, &me);
    printf("cohort-agent: stopped\n");
    rc = 0;
out:
    /* The way out goes when no worker is left to use it (after a stop
     * that ended them all; a start that failed made none). */
    if (!s || sup_running(s) == 0)
        egress_close(&eg);
    sup_close(s);
    cJSON_Delete(container);
    cg_close(&cg);
    client_free(cl);
    close(lock);
    return rc;
}
