/*
 * A stand-in libnvidia-ml.so.1 for tests on machines without a GPU.
 *
 * It exports the NVML entry points our adapter reaches through the real
 * pynvml bindings and answers them from a plain-text table named by the
 * FAKE_NVML_TABLE environment variable, read at every nvmlInitWithFlags.
 * One record per line, fields separated by blanks:
 *
 *   init <code>                                   nvmlInitWithFlags returns <code>
 *   gpu <uuid> <minor> <MiB> <busId> <numa|na> <mig 0|1> <name...>
 *   mig <gpu> <slot> <uuid> <gi> <ci> <giSlices> <ciSlices> <MiB>
 *   topo <gpuA> <gpuB> <level>                    symmetric
 *   link <gpu> <remoteBusId> [down]               the GPU's next NVLink slot: active, or
 *                                                 inactive with "down"; remote "-": a slot
 *                                                 that answers NOT_SUPPORTED
 *   event <gpu> <xid> <gi|-1> <ci|-1>             queued for nvmlEventSetWait
 *   lostevent                                     a wait that fails with GPU_IS_LOST
 *   lost <gpu>                                    every call on this GPU fails
 *   driver <version> <cudaVersion>                system versions (default 550.54.15 12040)
 *   cc <gpu> <major> <minor>                      CUDA compute capability (default: not
 *                                                 supported)
 *   nomig <gpu>                                   no MIG support: GetMigMode NOT_SUPPORTED
 *   telemetry <gpu> <key> <value|na|err>          a sensor reading, "not supported"
 *                                                 or a failing call (UNKNOWN);
 *       keys: util_gpu util_mem mem_used (bytes) temp power_mw ecc_corrected
 *       ecc_uncorrected. Unset sensors are not supported; mem_used defaults to 0.
 *
 * Only the layout of the structs pynvml passes matters; values are ours.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OK 0
#define E_UNINITIALIZED 1
#define E_INVALID_ARGUMENT 2
#define E_NOT_SUPPORTED 3
#define E_NOT_FOUND 6
#define E_INSUFFICIENT_SIZE 7
#define E_TIMEOUT 10
#define E_GPU_IS_LOST 15
#define E_UNKNOWN 999

#define MAX_GPUS 16
#define MAX_MIGS 8
#define MAX_LINKS 18
#define MAX_EVENTS 64

enum { T_UTIL_GPU, T_UTIL_MEM, T_MEM_USED, T_TEMP, T_POWER_MW, T_ECC_CORR, T_ECC_UNCORR, T_KEYS };
static const char *telemetry_keys[T_KEYS] = {
    "util_gpu", "util_mem", "mem_used", "temp", "power_mw", "ecc_corrected", "ecc_uncorrected",
};

/* One sensor: its value, or the NVML code a read returns instead (OK when it has a value). */
struct reading {
    unsigned long long value;
    int code;
};

struct fake_device {
    int gpu; /* owning GPU index */
    int mig; /* -1 for the GPU itself */
    char uuid[96];
    unsigned minor;
    unsigned long long mib;
    unsigned gi, ci, gi_slices, ci_slices;
    int present;
};

struct fake_gpu {
    struct fake_device self;
    struct fake_device migs[MAX_MIGS];
    char name[96];
    char bus_id[32];
    int numa; /* -2: not supported */
    int mig_mode;
    int lost;
    int links;
    char remote[MAX_LINKS][32];
    int down[MAX_LINKS];
    unsigned topo[MAX_GPUS];
    struct reading telemetry[T_KEYS];
    int cc_major, cc_minor; /* cc_major 0: not supported */
    int no_mig;
};

static char driver_version[32];
static int cuda_version;

struct fake_event {
    int gpu;
    unsigned long long xid;
    unsigned gi, ci;
    int lost;
};

typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_info_t;

typedef struct {
    unsigned long long total, free, used;
} memory_t;

typedef struct {
    unsigned multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount;
    unsigned sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    unsigned gpuInstanceSliceCount, computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} attributes_t;

typedef struct {
    struct fake_device *device;
    unsigned long long eventType, eventData;
    unsigned gpuInstanceId, computeInstanceId;
} event_data_t;

static struct fake_gpu gpus[MAX_GPUS];
static int gpu_count;
static struct fake_event events[MAX_EVENTS];
static int event_count, event_next;
static int init_code;
static int refcount;
static int init_calls, shutdown_calls;
static int registered[MAX_GPUS];
static int event_set_token;

/* Read back by the tests through ctypes. */
int fakeNvmlInitCount(void) { return init_calls; }
int fakeNvmlShutdownCount(void) { return shutdown_calls; }
int fakeNvmlRefcount(void) { return refcount; }

static void load_table(void) {
    memset(gpus, 0, sizeof gpus);
    memset(registered, 0, sizeof registered);
    gpu_count = event_count = event_next = init_code = 0;
    strcpy(driver_version, "550.54.15");
    cuda_version = 12040;
    const char *path = getenv("FAKE_NVML_TABLE");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char kind[16];
        int used = 0;
        if (sscanf(line, "%15s %n", kind, &used) != 1) continue;
        const char *rest = line + used;
        if (!strcmp(kind, "init")) {
            sscanf(rest, "%d", &init_code);
        } else if (!strcmp(kind, "gpu") && gpu_count < MAX_GPUS) {
            struct fake_gpu *g = &gpus[gpu_count];
            char numa[16];
            int name_at = 0;
            sscanf(rest, "%95s %u %llu %31s %15s %d %n", g->self.uuid, &g->self.minor,
                   &g->self.mib, g->bus_id, numa, &g->mig_mode, &name_at);
            snprintf(g->name, sizeof g->name, "%s", rest + name_at);
            g->numa = strcmp(numa, "na") ? atoi(numa) : -2;
            g->self.gpu = gpu_count;
            g->self.mig = -1;
            g->self.present = 1;
            for (int k = 0; k < T_KEYS; k++) g->telemetry[k].code = E_NOT_SUPPORTED;
            g->telemetry[T_MEM_USED].code = OK;
            gpu_count++;
        } else if (!strcmp(kind, "mig")) {
            int gpu, slot;
            struct fake_device d = {0};
            sscanf(rest, "%d %d %95s %u %u %u %u %llu", &gpu, &slot, d.uuid, &d.gi, &d.ci,
                   &d.gi_slices, &d.ci_slices, &d.mib);
            if (gpu < 0 || gpu >= MAX_GPUS || slot < 0 || slot >= MAX_MIGS) continue;
            d.gpu = gpu;
            d.mig = slot;
            d.present = 1;
            gpus[gpu].migs[slot] = d;
        } else if (!strcmp(kind, "topo")) {
            int a, b;
            unsigned level;
            sscanf(rest, "%d %d %u", &a, &b, &level);
            if (a >= 0 && a < MAX_GPUS && b >= 0 && b < MAX_GPUS)
                gpus[a].topo[b] = gpus[b].topo[a] = level;
        } else if (!strcmp(kind, "link")) {
            int gpu;
            char remote[32], state[16] = "";
            sscanf(rest, "%d %31s %15s", &gpu, remote, state);
            if (gpu >= 0 && gpu < MAX_GPUS && gpus[gpu].links < MAX_LINKS) {
                struct fake_gpu *g = &gpus[gpu];
                g->down[g->links] = !strcmp(state, "down");
                strcpy(g->remote[g->links++], remote);
            }
        } else if (!strcmp(kind, "event") && event_count < MAX_EVENTS) {
            struct fake_event *e = &events[event_count++];
            int gi, ci;
            sscanf(rest, "%d %llu %d %d", &e->gpu, &e->xid, &gi, &ci);
            e->gi = (unsigned)gi;
            e->ci = (unsigned)ci;
            e->lost = 0;
        } else if (!strcmp(kind, "lostevent") && event_count < MAX_EVENTS) {
            events[event_count++] = (struct fake_event){.lost = 1};
        } else if (!strcmp(kind, "telemetry")) {
            int gpu;
            char key[32], value[32];
            if (sscanf(rest, "%d %31s %31s", &gpu, key, value) != 3) continue;
            if (gpu < 0 || gpu >= MAX_GPUS) continue;
            for (int k = 0; k < T_KEYS; k++) {
                if (strcmp(key, telemetry_keys[k])) continue;
                struct reading *r = &gpus[gpu].telemetry[k];
                if (!strcmp(value, "na")) {
                    r->code = E_NOT_SUPPORTED;
                } else if (!strcmp(value, "err")) {
                    r->code = E_UNKNOWN;
                } else {
                    r->code = OK;
                    r->value = strtoull(value, NULL, 10);
                }
            }
        } else if (!strcmp(kind, "lost")) {
            int gpu = atoi(rest);
            if (gpu >= 0 && gpu < MAX_GPUS) gpus[gpu].lost = 1;
        } else if (!strcmp(kind, "driver")) {
            sscanf(rest, "%31s %d", driver_version, &cuda_version);
        } else if (!strcmp(kind, "cc")) {
            int gpu = -1, major = 0, minor = 0;
            sscanf(rest, "%d %d %d", &gpu, &major, &minor);
            if (gpu >= 0 && gpu < MAX_GPUS) {
                gpus[gpu].cc_major = major;
                gpus[gpu].cc_minor = minor;
            }
        } else if (!strcmp(kind, "nomig")) {
            int gpu = atoi(rest);
            if (gpu >= 0 && gpu < MAX_GPUS) gpus[gpu].no_mig = 1;
        }
    }
    fclose(f);
}

static int check(struct fake_device *d) {
    if (refcount <= 0) return E_UNINITIALIZED;
    if (!d || !d->present) return E_INVALID_ARGUMENT;
    if (gpus[d->gpu].lost) return E_GPU_IS_LOST;
    return OK;
}

static int copy(char *out, unsigned size, const char *text) {
    if (strlen(text) + 1 > size) return E_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return OK;
}

int nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    load_table();
    if (init_code) return init_code;
    refcount++;
    init_calls++;
    return OK;
}

int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

int nvmlShutdown(void) {
    if (refcount <= 0) return E_UNINITIALIZED;
    refcount--;
    shutdown_calls++;
    return OK;
}

const char *nvmlErrorString(int code) {
    switch (code) {
    case OK: return "Success";
    case E_UNINITIALIZED: return "Uninitialized";
    case E_INVALID_ARGUMENT: return "Invalid Argument";
    case E_NOT_SUPPORTED: return "Not Supported";
    case E_NOT_FOUND: return "Not Found";
    case E_TIMEOUT: return "Timeout";
    case E_GPU_IS_LOST: return "GPU is lost";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

int nvmlDeviceGetCount_v2(unsigned *count) {
    if (refcount <= 0) return E_UNINITIALIZED;
    *count = (unsigned)gpu_count;
    return OK;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, struct fake_device **out) {
    if (refcount <= 0) return E_UNINITIALIZED;
    if (index >= (unsigned)gpu_count) return E_INVALID_ARGUMENT;
    if (gpus[index].lost) return E_GPU_IS_LOST;
    *out = &gpus[index].self;
    return OK;
}

int nvmlDeviceGetName(struct fake_device *d, char *name, unsigned size) {
    int rc = check(d);
    return rc ? rc : copy(name, size, gpus[d->gpu].name);
}

int nvmlDeviceGetUUID(struct fake_device *d, char *uuid, unsigned size) {
    int rc = check(d);
    return rc ? rc : copy(uuid, size, d->uuid);
}

int nvmlDeviceGetMinorNumber(struct fake_device *d, unsigned *minor) {
    int rc = check(d);
    if (rc) return rc;
    if (d->mig >= 0) return E_NOT_SUPPORTED;
    *minor = d->minor;
    return OK;
}

/* A GPU's sensor; MIG devices have none of their own. */
static int sensor(struct fake_device *d, int key, unsigned long long *value) {
    int rc = check(d);
    if (rc) return rc;
    if (d->mig >= 0) return E_NOT_SUPPORTED;
    struct reading *r = &gpus[d->gpu].telemetry[key];
    if (r->code == OK) *value = r->value;
    return r->code;
}

int nvmlDeviceGetMemoryInfo(struct fake_device *d, memory_t *memory) {
    int rc = check(d);
    if (rc) return rc;
    unsigned long long used = 0;
    if (d->mig < 0) {
        rc = sensor(d, T_MEM_USED, &used);
        if (rc) return rc;
    }
    memory->total = d->mib * 1024ULL * 1024ULL;
    memory->used = used;
    memory->free = memory->total - used;
    return OK;
}

typedef struct {
    unsigned gpu, memory;
} utilization_t;

int nvmlDeviceGetUtilizationRates(struct fake_device *d, utilization_t *rates) {
    unsigned long long busy = 0, memory = 0;
    int rc = sensor(d, T_UTIL_GPU, &busy);
    if (!rc) rc = sensor(d, T_UTIL_MEM, &memory);
    if (rc) return rc;
    rates->gpu = (unsigned)busy;
    rates->memory = (unsigned)memory;
    return OK;
}

int nvmlDeviceGetTemperature(struct fake_device *d, int sensor_type, unsigned *celsius) {
    unsigned long long value = 0;
    if (sensor_type != 0) return E_INVALID_ARGUMENT; /* NVML_TEMPERATURE_GPU only */
    int rc = sensor(d, T_TEMP, &value);
    if (!rc) *celsius = (unsigned)value;
    return rc;
}

int nvmlDeviceGetPowerUsage(struct fake_device *d, unsigned *milliwatts) {
    unsigned long long value = 0;
    int rc = sensor(d, T_POWER_MW, &value);
    if (!rc) *milliwatts = (unsigned)value;
    return rc;
}

int nvmlDeviceGetTotalEccErrors(struct fake_device *d, int error_type, int counter_type,
                                unsigned long long *count) {
    if (counter_type != 0) return E_INVALID_ARGUMENT; /* NVML_VOLATILE_ECC only */
    if (error_type != 0 && error_type != 1) return E_INVALID_ARGUMENT;
    return sensor(d, error_type == 0 ? T_ECC_CORR : T_ECC_UNCORR, count);
}

int nvmlDeviceGetPciInfo_v3(struct fake_device *d, pci_info_t *info) {
    int rc = check(d);
    if (rc) return rc;
    memset(info, 0, sizeof *info);
    snprintf(info->busId, sizeof info->busId, "%s", gpus[d->gpu].bus_id);
    snprintf(info->busIdLegacy, sizeof info->busIdLegacy, "%s", gpus[d->gpu].bus_id);
    return OK;
}

int nvmlDeviceGetNumaNodeId(struct fake_device *d, int *node) {
    int rc = check(d);
    if (rc) return rc;
    if (gpus[d->gpu].numa == -2) return E_NOT_SUPPORTED;
    *node = gpus[d->gpu].numa;
    return OK;
}

int nvmlSystemGetDriverVersion(char *version, unsigned size) {
    if (refcount <= 0) return E_UNINITIALIZED;
    return copy(version, size, driver_version);
}

int nvmlSystemGetCudaDriverVersion(int *version) {
    if (refcount <= 0) return E_UNINITIALIZED;
    *version = cuda_version;
    return OK;
}

int nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }

int nvmlDeviceGetCudaComputeCapability(struct fake_device *d, int *major, int *minor) {
    int rc = check(d);
    if (rc) return rc;
    if (!gpus[d->gpu].cc_major) return E_NOT_SUPPORTED;
    *major = gpus[d->gpu].cc_major;
    *minor = gpus[d->gpu].cc_minor;
    return OK;
}

int nvmlDeviceGetMigMode(struct fake_device *d, unsigned *current, unsigned *pending) {
    int rc = check(d);
    if (rc) return rc;
    if (d->mig >= 0) return E_NOT_SUPPORTED;
    if (gpus[d->gpu].no_mig) return E_NOT_SUPPORTED; /* as a GPU without MIG answers */
    *current = *pending = (unsigned)gpus[d->gpu].mig_mode;
    return OK;
}

int nvmlDeviceGetMaxMigDeviceCount(struct fake_device *d, unsigned *count) {
    int rc = check(d);
    if (rc) return rc;
    *count = gpus[d->gpu].mig_mode ? MAX_MIGS : 0;
    return OK;
}

int nvmlDeviceGetMigDeviceHandleByIndex(struct fake_device *d, unsigned slot,
                                        struct fake_device **out) {
    int rc = check(d);
    if (rc) return rc;
    if (slot >= MAX_MIGS) return E_INVALID_ARGUMENT;
    if (!gpus[d->gpu].migs[slot].present) return E_NOT_FOUND;
    *out = &gpus[d->gpu].migs[slot];
    return OK;
}

int nvmlDeviceGetGpuInstanceId(struct fake_device *d, unsigned *id) {
    int rc = check(d);
    if (rc) return rc;
    if (d->mig < 0) return E_NOT_SUPPORTED;
    *id = d->gi;
    return OK;
}

int nvmlDeviceGetComputeInstanceId(struct fake_device *d, unsigned *id) {
    int rc = check(d);
    if (rc) return rc;
    if (d->mig < 0) return E_NOT_SUPPORTED;
    *id = d->ci;
    return OK;
}

int nvmlDeviceGetAttributes_v2(struct fake_device *d, attributes_t *attrs) {
    int rc = check(d);
    if (rc) return rc;
    memset(attrs, 0, sizeof *attrs);
    attrs->gpuInstanceSliceCount = d->gi_slices;
    attrs->computeInstanceSliceCount = d->ci_slices;
    attrs->memorySizeMB = d->mib;
    return OK;
}

int nvmlDeviceGetTopologyCommonAncestor(struct fake_device *a, struct fake_device *b,
                                        unsigned *level) {
    int rc = check(a);
    if (!rc) rc = check(b);
    if (rc) return rc;
    *level = gpus[a->gpu].topo[b->gpu];
    return OK;
}

int nvmlDeviceGetNvLinkState(struct fake_device *d, unsigned link, unsigned *active) {
    int rc = check(d);
    if (rc) return rc;
    if (gpus[d->gpu].links == 0) return E_NOT_SUPPORTED;
    if (link >= (unsigned)gpus[d->gpu].links) return E_INVALID_ARGUMENT;
    if (!strcmp(gpus[d->gpu].remote[link], "-")) return E_NOT_SUPPORTED;
    *active = !gpus[d->gpu].down[link];
    return OK;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(struct fake_device *d, unsigned link, pci_info_t *info) {
    int rc = check(d);
    if (rc) return rc;
    if (link >= (unsigned)gpus[d->gpu].links) return E_INVALID_ARGUMENT;
    if (!strcmp(gpus[d->gpu].remote[link], "-")) return E_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    snprintf(info->busId, sizeof info->busId, "%s", gpus[d->gpu].remote[link]);
    return OK;
}

int nvmlEventSetCreate(void **set) {
    if (refcount <= 0) return E_UNINITIALIZED;
    *set = &event_set_token;
    return OK;
}

int nvmlDeviceRegisterEvents(struct fake_device *d, unsigned long long types, void *set) {
    int rc = check(d);
    if (rc) return rc;
    if (set != &event_set_token || !(types & 0x8ULL)) return E_INVALID_ARGUMENT;
    registered[d->gpu] = 1;
    return OK;
}

int nvmlEventSetWait_v2(void *set, event_data_t *data, unsigned timeout_ms) {
    if (refcount <= 0) return E_UNINITIALIZED;
    if (set != &event_set_token) return E_INVALID_ARGUMENT;
    while (event_next < event_count) {
        struct fake_event *e = &events[event_next++];
        if (e->lost) return E_GPU_IS_LOST;
        if (!registered[e->gpu]) continue;
        data->device = &gpus[e->gpu].self;
        data->eventType = 0x8ULL; /* nvmlEventTypeXidCriticalError */
        data->eventData = e->xid;
        data->gpuInstanceId = e->gi;
        data->computeInstanceId = e->ci;
        return OK;
    }
    /* An empty queue times out after at most 20 ms: tests must never wait long. */
    usleep((timeout_ms < 20 ? timeout_ms : 20) * 1000);
    return E_TIMEOUT;
}

int nvmlEventSetFree(void *set) {
    if (set != &event_set_token) return E_INVALID_ARGUMENT;
    return OK;
}
