/*
 * fuzz_launch_request: what a node does with the desired state cohortd
 * sends it.  The input is the body of GET /v1/agent/desired; each worker in
 * it is wrapped, as cohort-agent does, in the launch request cohort-shim
 * reads (with the container settings of a node running crun, or, when the
 * first byte is odd, of a trusted host-process node), and parsed by
 * shim_req_parse, the shim's own parser.  Checked on every request it
 * accepts: the program stays inside the workspace, the environment is
 * NAME=value strings ending in NULL, a container's image reference is valid
 * and its uids are never the host's, and no credential reaches spec.json.
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "agent/image.h"
#include "agent/shim_req.h"
#include "lib/util.h"
#include "tests/fuzz/fuzz.h"

#define MAX_WORKERS_FUZZ 16

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static cJSON *container_settings(void)
{
    cJSON *ct = cJSON_CreateObject(), *insecure = cJSON_CreateArray();
    cJSON_AddStringToObject(ct, "crun", "/usr/bin/crun");
    cJSON_AddStringToObject(ct, "crun_root", "/var/lib/cohort-agent/crun");
    cJSON_AddStringToObject(ct, "init", "/var/lib/cohort-agent/images/.cohort-init");
    cJSON_AddStringToObject(ct, "skopeo", "/usr/bin/skopeo");
    cJSON_AddStringToObject(ct, "umoci", "/usr/bin/umoci");
    cJSON_AddStringToObject(ct, "image_cache", "/var/lib/cohort-agent/images");
    cJSON_AddNumberToObject(ct, "image_cache_max", 1 << 30);
    cJSON_AddStringToObject(ct, "registry", "127.0.0.1:5000");
    cJSON_AddItemToArray(insecure, cJSON_CreateString("127.0.0.1:5000"));
    cJSON_AddItemToObject(ct, "insecure", insecure);
    return ct;
}

static void check(const shim_req *r, int container)
{
    const shim_spec *sp = &r->sp;
    int n = 0;
    fuzz_check(util_relpath_valid(sp->program, strlen(sp->program)), "program leaves the workspace");
    for (; sp->env[n]; n++)
        fuzz_check(strchr(sp->env[n], '=') != NULL, "an environment entry without '='");
    fuzz_check(n <= SHIM_REQ_MAX_ENV + 4 && sp->nenv_own <= n, "environment count");
    for (int i = 0; sp->args[i]; i++)
        fuzz_check(i < SHIM_MAX_ARGS, "argument count");
    for (int i = 0; i < sp->ndatasets; i++)
        fuzz_check(util_name_valid(sp->ds_name[i]) && sp->ds_path[i], "a dataset without a name");
    cJSON *note = cJSON_Parse(r->note);
    fuzz_check(note && !cJSON_GetObjectItemCaseSensitive(note, "registry_auth") &&
                   !cJSON_GetObjectItemCaseSensitive(note, "registry_token"),
               "credentials left in spec.json");
    cJSON_Delete(note);
    if (container) {
        fuzz_check(sp->crun && img_reference_valid(sp->image.reference), "image reference");
        fuzz_check(sp->uid_base >= 65536, "a container mapped onto host uids");
        fuzz_check(sp->shm_mb >= 64, "/dev/shm below 64 MB");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[700], dir[64];
    const cJSON *w;
    int i = 0;
    if (size < 1)
        return 0;
    int container = !(data[0] & 1);
    cJSON *desired = cJSON_ParseWithLength((const char *)data + 1, size - 1);
    shim_req *r = malloc(sizeof *r);
    if (!r) {
        cJSON_Delete(desired);
        return 0;
    }
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(desired, "workers"))
    {
        if (i == MAX_WORKERS_FUZZ)
            break;
        cJSON *req = cJSON_CreateObject();
        snprintf(dir, sizeof dir, "/nonexistent/cohort-fuzz/w%d", i++);
        cJSON_AddStringToObject(req, "dir", dir);
        cJSON_AddItemToObject(req, "spec", cJSON_Duplicate(w, 1));
        cJSON_AddStringToObject(req, "agent_dir", "/var/lib/cohort-agent");
        cJSON_AddStringToObject(req, "agent_lock", "/var/lib/cohort-agent/lock");
        cJSON_AddNumberToObject(req, "lease_ms", 30000);
        if (container)
            cJSON_AddItemToObject(req, "container", container_settings());
        else
            cJSON_AddStringToObject(req, "launcher", "/usr/bin/python3");
        char *text = cJSON_PrintUnformatted(req);
        cJSON_Delete(req);
        if (text && shim_req_parse(text, r, err, sizeof err) == 0)
            check(r, container);
        else if (text)
            fuzz_check(err[0] != '\0', "a refusal without a message");
        shim_req_free(r);
        free(text);
    }
    free(r);
    cJSON_Delete(desired);
    return 0;
}
