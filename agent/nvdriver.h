/*
 * nvdriver: the host NVIDIA driver's user-space files that a GPU worker's
 * container needs beside its device nodes, found once when the agent starts.
 *
 * An image brings CUDA's runtime (libcudart, cuDNN, NCCL; PyTorch's builds
 * carry their own) but never the driver's libraries: libcuda and
 * libnvidia-ml must match the node's kernel module, so they come from the
 * host, as enroot and Apptainer's --nv arrange it (nvidia-container-toolkit
 * is not in Debian).  The agent lists them from the dynamic linker's cache
 * (`ldconfig -p`, this machine's architecture only) and the driver's
 * programs (nvidia-smi, ...) from PATH; the shim binds them read-only into a
 * GPU worker's container under MOUNT_ROOT/.nvidia/lib and .../bin and puts
 * those directories on LD_LIBRARY_PATH and PATH.  Workers without GPUs get
 * none of it.
 */
#ifndef COHORT_AGENT_NVDRIVER_H
#define COHORT_AGENT_NVDRIVER_H

#include <stddef.h>

#include <cjson/cJSON.h>

/*
 * The driver's libraries in the text `ldconfig -p` prints: an array of
 * {"name": file name as the linker knows it, "path": host path}, each name
 * once (the linker's first), entries of other architectures left out.
 * NULL only when out of memory.  The caller owns the array.
 */
cJSON *nvd_parse_ldconfig(const char *text);

/*
 * This node's driver files: {"libs": [...as above], "bins": [{"name",
 * "path"}...]}, both empty on a node without the driver.  NULL with err set
 * when `ldconfig -p` cannot be run or memory runs out.
 */
cJSON *nvd_find(char *err, size_t errlen);

#endif
