/*
 * vk.c — the Vulkan compute backend (vk.h): the loader opened at run time, device
 * enumeration, one compute context per opened device, buffers, and the recorded
 * dispatches of the embedded shaders.
 *
 * Memory ownership: a context owns its device, queue, pipelines, descriptor pool,
 * command buffer and staging buffer; a dj_vk_buf is owned by whoever created it and
 * must be freed before its context is closed.  One thread uses a context at a time.
 */
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ggml_type.h"
#include "core/status.h"
#include "kernels/quant_tables.h"
#include "kernels/vulkan/spirv.h"
#include "kernels/vulkan/vk.h"

bool dj_vk_built(void) { return true; }

/* ---- the loader and the entry points ------------------------------------------------ */

#define DJ_VK_INSTANCE_FNS(X)                                                                                      \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)                          \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceMemoryProperties)                                     \
    X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)
#define DJ_VK_DEVICE_FNS(X)                                                                                        \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements)  \
    X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory) X(vkUnmapMemory)                     \
    X(vkCreateShaderModule) X(vkDestroyShaderModule) X(vkCreateDescriptorSetLayout)                               \
    X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout)                          \
    X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool)         \
    X(vkResetDescriptorPool) X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets) X(vkCreateCommandPool)         \
    X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer)             \
    X(vkResetCommandBuffer) X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets) X(vkCmdPushConstants)                 \
    X(vkCmdDispatch) X(vkCmdCopyBuffer) X(vkCmdPipelineBarrier) X(vkQueueSubmit) X(vkCreateFence)                 \
    X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences)

#define DJ_VK_DECL(f) PFN_##f f;
struct vk_inst_fns {
    DJ_VK_INSTANCE_FNS(DJ_VK_DECL)
};
struct vk_dev_fns {
    DJ_VK_DEVICE_FNS(DJ_VK_DECL)
};
#undef DJ_VK_DECL

/* The loader and one instance for the process, made once and never destroyed: destroying
 * an instance unloads the driver, and Mesa's leaves allocations behind (128 bytes an
 * instance on lavapipe, seen by LeakSanitizer from a plain create/destroy program too). */
static struct {
    pthread_once_t once;
    void *lib;
    PFN_vkGetInstanceProcAddr gipa;
    VkInstance inst;
    struct vk_inst_fns fi;
    enum dj_status st;
    char why[320];
} g_loader = {PTHREAD_ONCE_INIT, NULL, NULL, VK_NULL_HANDLE, {0}, DJ_ERR_UNSUPPORTED, ""};
static __thread char g_why_none[320];


static const char *vk_result_name(VkResult r) {
    switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "out of host memory";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "out of device memory";
    case VK_ERROR_INITIALIZATION_FAILED: return "initialization failed";
    case VK_ERROR_DEVICE_LOST: return "device lost";
    case VK_ERROR_MEMORY_MAP_FAILED: return "memory map failed";
    case VK_ERROR_LAYER_NOT_PRESENT: return "layer not present";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "extension not present";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "feature not present";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "incompatible driver (no Vulkan 1.1 ICD)";
    case VK_ERROR_TOO_MANY_OBJECTS: return "too many objects";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "out of pool memory";
    case VK_TIMEOUT: return "timeout";
    default: return "error";
    }
}
#define VK_FAIL(st, r, what) dj_fail((st), "vulkan: %s: %s (VkResult %d)", (what), vk_result_name(r), (int)(r))

static void loader_open(void) {
    const char *env = getenv("DJ_VULKAN_LOADER");
    const char *name = env && *env ? env : "libvulkan.so.1";
    g_loader.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!g_loader.lib) {
        snprintf(g_loader.why, sizeof g_loader.why, "vulkan: no Vulkan loader (%s)", dlerror());
        return;
    }
    g_loader.gipa = (PFN_vkGetInstanceProcAddr)dlsym(g_loader.lib, "vkGetInstanceProcAddr");
    PFN_vkCreateInstance create =
        g_loader.gipa ? (PFN_vkCreateInstance)g_loader.gipa(VK_NULL_HANDLE, "vkCreateInstance") : NULL;
    if (!create) {
        snprintf(g_loader.why, sizeof g_loader.why, "vulkan: %s has no vkGetInstanceProcAddr / vkCreateInstance", name);
        return;
    }
    const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                   .pApplicationName = "deja",
                                   .pEngineName = "deja",
                                   .apiVersion = VK_API_VERSION_1_1};
    const VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    const VkResult r = create(&ci, NULL, &g_loader.inst);
    if (r != VK_SUCCESS) {
        snprintf(g_loader.why, sizeof g_loader.why, "vulkan: vkCreateInstance: %s (VkResult %d)", vk_result_name(r),
                 (int)r);
        return;
    }
#define DJ_VK_LOAD(f)                                                                                              \
    if (!(g_loader.fi.f = (PFN_##f)g_loader.gipa(g_loader.inst, #f))) {                                            \
        snprintf(g_loader.why, sizeof g_loader.why, "vulkan: the loader has no %s", #f);                           \
        return;                                                                                                    \
    }
    DJ_VK_INSTANCE_FNS(DJ_VK_LOAD)
#undef DJ_VK_LOAD
    g_loader.st = DJ_OK;
}

/* The process's instance and its entry points; DJ_OK or a message. */
static enum dj_status instance_get(VkInstance *inst, const struct vk_inst_fns **fi) {
    pthread_once(&g_loader.once, loader_open);
    if (g_loader.st != DJ_OK) return dj_fail(DJ_ERR_UNSUPPORTED, "%s", g_loader.why);
    *inst = g_loader.inst;
    *fi = &g_loader.fi;
    return DJ_OK;
}

static void device_info(const struct vk_inst_fns *fi, VkPhysicalDevice pd, struct dj_vk_device_info *o) {
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    fi->vkGetPhysicalDeviceProperties2(pd, &p2);
    const VkPhysicalDeviceProperties *p = &p2.properties;
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", p->deviceName);
    o->vendor_id = p->vendorID;
    o->device_id = p->deviceID;
    o->api_version = p->apiVersion;
    o->driver_version = p->driverVersion;
    o->type = p->deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU     ? "discrete"
              : p->deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ? "integrated"
              : p->deviceType == VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU    ? "virtual"
              : p->deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU            ? "cpu"
                                                                        : "other";
    o->subgroup_size = sg.subgroupSize;
    o->max_storage_buffer_range = p->limits.maxStorageBufferRange;
    for (int i = 0; i < 3; i++) o->max_workgroup_count[i] = p->limits.maxComputeWorkGroupCount[i];
    VkPhysicalDeviceMemoryProperties mp;
    fi->vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    for (uint32_t h = 0; h < mp.memoryHeapCount; h++)
        if ((mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && mp.memoryHeaps[h].size > o->device_local_bytes)
            o->device_local_bytes = mp.memoryHeaps[h].size;
}

#define DJ_VK_MAX_DEVICES 16

/* The physical devices of inst, at most DJ_VK_MAX_DEVICES. */
static enum dj_status physical_devices(const struct vk_inst_fns *fi, VkInstance inst, VkPhysicalDevice *pd,
                                       uint32_t *n) {
    *n = DJ_VK_MAX_DEVICES;
    const VkResult r = fi->vkEnumeratePhysicalDevices(inst, n, pd);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) return VK_FAIL(DJ_ERR_UNSUPPORTED, r, "vkEnumeratePhysicalDevices");
    return DJ_OK;
}

enum dj_status dj_vk_devices(struct dj_vk_device_info *out, size_t cap, size_t *n_out) {
    *n_out = 0;
    g_why_none[0] = 0;
    VkInstance inst = VK_NULL_HANDLE;
    const struct vk_inst_fns *fi = NULL;
    if (instance_get(&inst, &fi) != DJ_OK) { /* no loader or no driver: no devices, and why */
        snprintf(g_why_none, sizeof g_why_none, "%s", dj_last_error());
        dj_clear_error();
        return DJ_OK;
    }
    VkPhysicalDevice pd[DJ_VK_MAX_DEVICES];
    uint32_t n;
    const enum dj_status st = physical_devices(fi, inst, pd, &n);
    if (st == DJ_OK) {
        for (uint32_t i = 0; i < n && i < cap; i++) device_info(fi, pd[i], &out[i]);
        *n_out = n;
        if (!n) snprintf(g_why_none, sizeof g_why_none, "vulkan: the loader reports no device (no ICD installed?)");
    }
    return st;
}

const char *dj_vk_why_none(void) { return g_why_none; }

/* ---- the context ---------------------------------------------------------------------- */

enum {
    PIPE_MM_F32,
    PIPE_MM_F16,
    PIPE_MM_BF16,
    PIPE_MM_Q8_0,
    PIPE_MM_Q4_0,
    PIPE_MM_Q4_K,
    PIPE_MM_Q6_K,
    PIPE_MM_Q4_1,
    PIPE_MM_Q5_0,
    PIPE_MM_Q5_1,
    PIPE_MM_Q5_K,
    PIPE_MM_IQ4_NL,
    PIPE_MM_MXFP4,
    PIPE_MM_Q2_K,
    PIPE_MM_Q3_K,
    PIPE_MM_IQ4_XS,
    PIPE_RMSNORM,
    PIPE_ROPE,
    PIPE_SWIGLU,
    PIPE_ADD,
    PIPE_ATTN_F32,
    PIPE_ATTN_F16,
    PIPE_GATHER,
    PIPE_MOE_SUM,
    PIPE_GEGLU,
    PIPE_SWIGLU_OAI,
    PIPE_SWIGLU_SIGMUL,
    PIPE_BIAS,
    PIPE_MM_IQ2_XXS,
    PIPE_MM_IQ2_XS,
    PIPE_MM_IQ2_S,
    PIPE_MM_IQ3_XXS,
    PIPE_MM_IQ3_S,
    PIPE_MM_IQ1_S,
    PIPE_MM_IQ1_M,
    PIPE_MM_TQ1_0,
    PIPE_MM_TQ2_0,
    PIPE_KV_STORE,
    PIPE_MM_NVFP4,
    PIPE_MM_Q1_0,
    PIPE_MM_Q2_0,
    PIPE_COUNT
};
static const char *const pipe_shader[PIPE_COUNT] = {
    "mm_f32",  "mm_f16",  "mm_bf16", "mm_q8_0",   "mm_q4_0",  "mm_q4_k", "mm_q6_k",  "mm_q4_1",  "mm_q5_0",
    "mm_q5_1", "mm_q5_k", "mm_iq4_nl", "mm_mxfp4", "mm_q2_k", "mm_q3_k", "mm_iq4_xs", "rmsnorm", "rope",    "swiglu",   "add",      "attn_f32", "attn_f16", "gather", "moe_sum", "geglu", "swiglu_oai", "swiglu_sigmul", "bias",
    "mm_iq2_xxs", "mm_iq2_xs", "mm_iq2_s", "mm_iq3_xxs", "mm_iq3_s", "mm_iq1_s", "mm_iq1_m", "mm_tq1_0", "mm_tq2_0", "kv_store", "mm_nvfp4", "mm_q1_0", "mm_q2_0"};

#define DJ_VK_SETS 1024        /* descriptor sets recorded between two syncs */
#define DJ_VK_PUSH_BYTES 64    /* the push-constant block of every shader fits */
#define DJ_VK_STAGING (64u << 20)
#define DJ_VK_ARENA (4u << 20) /* small per-dispatch inputs (positions, block tables) until a sync */
#define DJ_VK_BINDINGS 4

struct dj_vk_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    size_t bytes;   /* as asked */
    void *map;      /* host-visible: the mapping */
};

struct dj_vk {
    VkInstance inst;              /* the process's (g_loader) */
    const struct vk_inst_fns *fi; /* its entry points */
    struct vk_dev_fns f;
    VkPhysicalDevice pd;
    VkPhysicalDeviceMemoryProperties mp;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    struct dj_vk_device_info info;
    VkDescriptorSetLayout dsl;
    VkPipelineLayout pl;
    VkPipeline pipe[PIPE_COUNT];
    VkDescriptorPool dpool;
    uint32_t sets_used;
    VkCommandPool cpool;
    VkCommandBuffer cb;
    VkFence fence;
    bool recording;
    uint32_t n_dispatch; /* recorded since the last sync */
    struct dj_vk_buf *staging;
    struct dj_vk_buf *arena; /* host-visible; words [0, arena_used) belong to recorded dispatches */
    struct dj_vk_buf *iq_tables; /* the i-quants' codebooks (iq_tables), made on the first such product */
    size_t arena_used;
};

const struct dj_vk_device_info *dj_vk_info(const struct dj_vk *vk) { return &vk->info; }

static int memory_type(const struct dj_vk *vk, uint32_t bits, VkMemoryPropertyFlags want) {
    for (uint32_t i = 0; i < vk->mp.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (vk->mp.memoryTypes[i].propertyFlags & want) == want) return (int)i;
    return -1;
}

static enum dj_status pipelines_new(struct dj_vk *vk) {
    VkDescriptorSetLayoutBinding b[DJ_VK_BINDINGS];
    for (uint32_t i = 0; i < DJ_VK_BINDINGS; i++)
        b[i] = (VkDescriptorSetLayoutBinding){i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    const VkDescriptorSetLayoutCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                                 .bindingCount = DJ_VK_BINDINGS,
                                                 .pBindings = b};
    VkResult r = vk->f.vkCreateDescriptorSetLayout(vk->dev, &dci, NULL, &vk->dsl);
    if (r != VK_SUCCESS) return VK_FAIL(DJ_ERR_NOMEM, r, "vkCreateDescriptorSetLayout");
    const VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, DJ_VK_PUSH_BYTES};
    const VkPipelineLayoutCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                            .setLayoutCount = 1,
                                            .pSetLayouts = &vk->dsl,
                                            .pushConstantRangeCount = 1,
                                            .pPushConstantRanges = &pcr};
    r = vk->f.vkCreatePipelineLayout(vk->dev, &pci, NULL, &vk->pl);
    if (r != VK_SUCCESS) return VK_FAIL(DJ_ERR_NOMEM, r, "vkCreatePipelineLayout");
    for (int i = 0; i < PIPE_COUNT; i++) {
        const struct dj_vk_spirv *s = dj_vk_spirv;
        while (s->name && strcmp(s->name, pipe_shader[i])) s++;
        if (!s->name) return dj_fail(DJ_ERR_NOT_FOUND, "vulkan: shader %s is not in this build", pipe_shader[i]);
        const VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                              .codeSize = s->bytes,
                                              .pCode = (const uint32_t *)(const void *)s->code};
        VkShaderModule m;
        r = vk->f.vkCreateShaderModule(vk->dev, &mci, NULL, &m);
        if (r != VK_SUCCESS) return VK_FAIL(DJ_ERR_UNSUPPORTED, r, s->name);
        const VkComputePipelineCreateInfo cci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                      .module = m,
                      .pName = "main"},
            .layout = vk->pl};
        r = vk->f.vkCreateComputePipelines(vk->dev, VK_NULL_HANDLE, 1, &cci, NULL, &vk->pipe[i]);
        vk->f.vkDestroyShaderModule(vk->dev, m, NULL);
        if (r != VK_SUCCESS) return VK_FAIL(DJ_ERR_UNSUPPORTED, r, s->name);
    }
    const VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, DJ_VK_BINDINGS * DJ_VK_SETS};
    const VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                            .maxSets = DJ_VK_SETS,
                                            .poolSizeCount = 1,
                                            .pPoolSizes = &ps};
    r = vk->f.vkCreateDescriptorPool(vk->dev, &dpi, NULL, &vk->dpool);
    if (r != VK_SUCCESS) return VK_FAIL(DJ_ERR_NOMEM, r, "vkCreateDescriptorPool");
    return DJ_OK;
}

enum dj_status dj_vk_open(int index, struct dj_vk **out) {
    *out = NULL;
    struct dj_vk *vk = calloc(1, sizeof *vk);
    if (!vk) return dj_fail(DJ_ERR_NOMEM, "vulkan: out of memory");
    enum dj_status st = instance_get(&vk->inst, &vk->fi);
    if (st != DJ_OK) {
        free(vk);
        return st;
    }
    VkPhysicalDevice pd[DJ_VK_MAX_DEVICES];
    uint32_t n = 0;
    if ((st = physical_devices(vk->fi, vk->inst, pd, &n)) != DJ_OK) goto fail;
    if (index < 0 || (uint32_t)index >= n) {
        st = dj_fail(DJ_ERR_NOT_FOUND, "vulkan:%d: no such device (%u reported; deja inspect --devices lists them)",
                     index, n);
        goto fail;
    }
    vk->pd = pd[index];
    device_info(vk->fi, vk->pd, &vk->info);
    if (VK_API_VERSION_MAJOR(vk->info.api_version) == 1 && VK_API_VERSION_MINOR(vk->info.api_version) < 1) {
        st = dj_fail(DJ_ERR_UNSUPPORTED, "vulkan:%d (%s): Vulkan 1.1 is needed", index, vk->info.name);
        goto fail;
    }
    vk->fi->vkGetPhysicalDeviceMemoryProperties(vk->pd, &vk->mp);
    VkQueueFamilyProperties qf[16];
    uint32_t nq = 16;
    vk->fi->vkGetPhysicalDeviceQueueFamilyProperties(vk->pd, &nq, qf);
    vk->qfam = UINT32_MAX;
    for (uint32_t i = 0; i < nq && vk->qfam == UINT32_MAX; i++) /* prefer a compute queue without graphics */
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) vk->qfam = i;
    for (uint32_t i = 0; i < nq && vk->qfam == UINT32_MAX; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) vk->qfam = i;
    if (vk->qfam == UINT32_MAX) {
        st = dj_fail(DJ_ERR_UNSUPPORTED, "vulkan:%d (%s): no compute queue", index, vk->info.name);
        goto fail;
    }
    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                         .queueFamilyIndex = vk->qfam,
                                         .queueCount = 1,
                                         .pQueuePriorities = &prio};
    const VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                                    .queueCreateInfoCount = 1,
                                    .pQueueCreateInfos = &qci};
    VkResult r = vk->fi->vkCreateDevice(vk->pd, &dci, NULL, &vk->dev);
    if (r != VK_SUCCESS) {
        st = VK_FAIL(DJ_ERR_UNSUPPORTED, r, "vkCreateDevice");
        goto fail;
    }
#define DJ_VK_LOAD(fn)                                                                                             \
    if (!(vk->f.fn = (PFN_##fn)vk->fi->vkGetDeviceProcAddr(vk->dev, #fn))) {                                        \
        st = dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: the driver has no %s", #fn);                                     \
        goto fail;                                                                                                 \
    }
    DJ_VK_DEVICE_FNS(DJ_VK_LOAD)
#undef DJ_VK_LOAD
    vk->f.vkGetDeviceQueue(vk->dev, vk->qfam, 0, &vk->queue);
    if ((st = pipelines_new(vk)) != DJ_OK) goto fail;
    const VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                         .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                         .queueFamilyIndex = vk->qfam};
    if ((r = vk->f.vkCreateCommandPool(vk->dev, &cpi, NULL, &vk->cpool)) != VK_SUCCESS) {
        st = VK_FAIL(DJ_ERR_NOMEM, r, "vkCreateCommandPool");
        goto fail;
    }
    const VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                             .commandPool = vk->cpool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                             .commandBufferCount = 1};
    if ((r = vk->f.vkAllocateCommandBuffers(vk->dev, &cai, &vk->cb)) != VK_SUCCESS) {
        st = VK_FAIL(DJ_ERR_NOMEM, r, "vkAllocateCommandBuffers");
        goto fail;
    }
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = vk->f.vkCreateFence(vk->dev, &fci, NULL, &vk->fence)) != VK_SUCCESS) {
        st = VK_FAIL(DJ_ERR_NOMEM, r, "vkCreateFence");
        goto fail;
    }
    *out = vk;
    return DJ_OK;
fail:
    dj_vk_close(vk);
    return st;
}

void dj_vk_close(struct dj_vk *vk) {
    if (!vk) return;
    if (vk->dev) {
        if (vk->recording && vk->f.vkEndCommandBuffer) vk->f.vkEndCommandBuffer(vk->cb);
        dj_vk_buf_free(vk, vk->staging);
        dj_vk_buf_free(vk, vk->arena);
        dj_vk_buf_free(vk, vk->iq_tables);
        if (vk->fence) vk->f.vkDestroyFence(vk->dev, vk->fence, NULL);
        if (vk->cpool) vk->f.vkDestroyCommandPool(vk->dev, vk->cpool, NULL);
        if (vk->dpool) vk->f.vkDestroyDescriptorPool(vk->dev, vk->dpool, NULL);
        for (int i = 0; i < PIPE_COUNT; i++)
            if (vk->pipe[i]) vk->f.vkDestroyPipeline(vk->dev, vk->pipe[i], NULL);
        if (vk->pl) vk->f.vkDestroyPipelineLayout(vk->dev, vk->pl, NULL);
        if (vk->dsl) vk->f.vkDestroyDescriptorSetLayout(vk->dev, vk->dsl, NULL);
        if (vk->f.vkDestroyDevice) vk->f.vkDestroyDevice(vk->dev, NULL);
        else {
            PFN_vkDestroyDevice d = (PFN_vkDestroyDevice)vk->fi->vkGetDeviceProcAddr(vk->dev, "vkDestroyDevice");
            if (d) d(vk->dev, NULL);
        }
    }
    free(vk); /* the instance is the process's */
}

/* ---- buffers --------------------------------------------------------------------------- */

enum dj_status dj_vk_buf_new(struct dj_vk *vk, size_t bytes, bool host, struct dj_vk_buf **out) {
    *out = NULL;
    if (!bytes) return dj_fail(DJ_ERR_INVALID, "vulkan: a buffer of 0 bytes");
    /* whole words (the shaders read 32-bit words), within what one descriptor can see */
    const size_t alloc = (bytes + 3) & ~(size_t)3;
    if (alloc < bytes || alloc > vk->info.max_storage_buffer_range)
        return dj_fail(DJ_ERR_UNSUPPORTED,
                       "vulkan: a buffer of %zu bytes is larger than %s's storage buffer range (%llu bytes)", bytes,
                       vk->info.name, (unsigned long long)vk->info.max_storage_buffer_range);
    struct dj_vk_buf *b = calloc(1, sizeof *b);
    if (!b) return dj_fail(DJ_ERR_NOMEM, "vulkan: out of memory");
    b->bytes = bytes;
    const VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                    .size = alloc,
                                    .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                             VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                    .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = vk->f.vkCreateBuffer(vk->dev, &bci, NULL, &b->buf);
    if (r != VK_SUCCESS) {
        free(b);
        return VK_FAIL(DJ_ERR_NOMEM, r, "vkCreateBuffer");
    }
    VkMemoryRequirements req;
    vk->f.vkGetBufferMemoryRequirements(vk->dev, b->buf, &req);
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int mt = host ? memory_type(vk, req.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT) : -1;
    if (mt < 0) mt = memory_type(vk, req.memoryTypeBits, host ? hv : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (mt < 0 && !host) mt = memory_type(vk, req.memoryTypeBits, 0);
    enum dj_status st = DJ_OK;
    if (mt < 0) {
        st = dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: %s has no %s memory type for a storage buffer", vk->info.name,
                     host ? "host-visible" : "usable");
        goto fail;
    }
    const VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                      .allocationSize = req.size,
                                      .memoryTypeIndex = (uint32_t)mt};
    if ((r = vk->f.vkAllocateMemory(vk->dev, &mai, NULL, &b->mem)) != VK_SUCCESS) {
        st = dj_fail(DJ_ERR_NOMEM, "vulkan: allocating %zu bytes on %s: %s", alloc, vk->info.name, vk_result_name(r));
        goto fail;
    }
    if ((r = vk->f.vkBindBufferMemory(vk->dev, b->buf, b->mem, 0)) != VK_SUCCESS) {
        st = VK_FAIL(DJ_ERR_NOMEM, r, "vkBindBufferMemory");
        goto fail;
    }
    /* mapped where the memory allows it; DJ_VK_STAGING=1 sends device-local buffers through
     * the staging copies even where they could be mapped (lavapipe: tests of that path) */
    const char *stg = getenv("DJ_VK_STAGING");
    const bool force_staging = !host && stg && !strcmp(stg, "1");
    if (!force_staging && vk->mp.memoryTypes[mt].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT &&
        vk->mp.memoryTypes[mt].propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) {
        if ((r = vk->f.vkMapMemory(vk->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map)) != VK_SUCCESS) {
            st = VK_FAIL(DJ_ERR_NOMEM, r, "vkMapMemory");
            goto fail;
        }
    }
    *out = b;
    return DJ_OK;
fail:
    dj_vk_buf_free(vk, b);
    return st;
}

void dj_vk_buf_free(struct dj_vk *vk, struct dj_vk_buf *b) {
    if (!b) return;
    if (b->map) vk->f.vkUnmapMemory(vk->dev, b->mem);
    if (b->buf) vk->f.vkDestroyBuffer(vk->dev, b->buf, NULL);
    if (b->mem) vk->f.vkFreeMemory(vk->dev, b->mem, NULL);
    free(b);
}

size_t dj_vk_buf_bytes(const struct dj_vk_buf *b) { return b->bytes; }

/* ---- recording and submission ----------------------------------------------------------- */

static enum dj_status record_begin(struct dj_vk *vk) {
    if (vk->recording) return DJ_OK;
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    const VkResult r = vk->f.vkBeginCommandBuffer(vk->cb, &bi);
    if (r != VK_SUCCESS) return VK_FAIL(DJ_ERR_NOMEM, r, "vkBeginCommandBuffer");
    vk->recording = true;
    vk->n_dispatch = 0;
    return DJ_OK;
}

enum dj_status dj_vk_sync(struct dj_vk *vk) {
    if (!vk->recording) return DJ_OK;
    vk->recording = false;
    VkResult r = vk->f.vkEndCommandBuffer(vk->cb);
    if (r != VK_SUCCESS) return VK_FAIL(DJ_ERR_NOMEM, r, "vkEndCommandBuffer");
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &vk->cb};
    if ((r = vk->f.vkQueueSubmit(vk->queue, 1, &si, vk->fence)) != VK_SUCCESS)
        return VK_FAIL(DJ_ERR_IO, r, "vkQueueSubmit");
    r = vk->f.vkWaitForFences(vk->dev, 1, &vk->fence, VK_TRUE, UINT64_MAX);
    vk->f.vkResetFences(vk->dev, 1, &vk->fence);
    vk->f.vkResetCommandBuffer(vk->cb, 0);
    vk->f.vkResetDescriptorPool(vk->dev, vk->dpool, 0);
    vk->sets_used = 0;
    vk->arena_used = 0;
    if (r != VK_SUCCESS) return VK_FAIL(DJ_ERR_IO, r, "vkWaitForFences");
    return DJ_OK;
}

/* Every write of the dispatches before is visible to the commands after. */
static void barrier_all(struct dj_vk *vk) {
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                                .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                                 VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    const VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vk->f.vkCmdPipelineBarrier(vk->cb, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* bufs: up to DJ_VK_BINDINGS, NULL past what the shader uses (bound to bufs[0]). */
static enum dj_status dispatch(struct dj_vk *vk, int pipe, const struct dj_vk_buf *const *bufs, int n_bufs,
                               const void *push, size_t push_bytes, uint32_t gx, uint32_t gy) {
    if (vk->sets_used == DJ_VK_SETS) { /* the pool is full: run what is recorded, start again */
        const enum dj_status st = dj_vk_sync(vk);
        if (st != DJ_OK) return st;
    }
    enum dj_status st = record_begin(vk);
    if (st != DJ_OK) return st;
    const VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                            .descriptorPool = vk->dpool,
                                            .descriptorSetCount = 1,
                                            .pSetLayouts = &vk->dsl};
    VkDescriptorSet set;
    const VkResult r = vk->f.vkAllocateDescriptorSets(vk->dev, &ai, &set);
    if (r != VK_SUCCESS) return VK_FAIL(DJ_ERR_NOMEM, r, "vkAllocateDescriptorSets");
    vk->sets_used++;
    VkDescriptorBufferInfo bi[DJ_VK_BINDINGS];
    VkWriteDescriptorSet wr[DJ_VK_BINDINGS];
    for (int i = 0; i < DJ_VK_BINDINGS; i++) {
        bi[i] = (VkDescriptorBufferInfo){(i < n_bufs && bufs[i] ? bufs[i] : bufs[0])->buf, 0, VK_WHOLE_SIZE};
        wr[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                       .dstSet = set,
                                       .dstBinding = (uint32_t)i,
                                       .descriptorCount = 1,
                                       .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                       .pBufferInfo = &bi[i]};
    }
    vk->f.vkUpdateDescriptorSets(vk->dev, DJ_VK_BINDINGS, wr, 0, NULL);
    if (vk->n_dispatch) barrier_all(vk);
    vk->f.vkCmdBindPipeline(vk->cb, VK_PIPELINE_BIND_POINT_COMPUTE, vk->pipe[pipe]);
    vk->f.vkCmdBindDescriptorSets(vk->cb, VK_PIPELINE_BIND_POINT_COMPUTE, vk->pl, 0, 1, &set, 0, NULL);
    vk->f.vkCmdPushConstants(vk->cb, vk->pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)push_bytes, push);
    vk->f.vkCmdDispatch(vk->cb, gx, gy, 1);
    vk->n_dispatch++;
    return DJ_OK;
}

/* ---- copies ------------------------------------------------------------------------------ */

/* A context's host-visible helper buffer (staging, arena), made on first use: `want` bytes, or
 * what one descriptor can see. */
static enum dj_status host_buf_lazy(struct dj_vk *vk, size_t want, struct dj_vk_buf **b) {
    if (*b) return DJ_OK;
    if (want > vk->info.max_storage_buffer_range) want = (size_t)vk->info.max_storage_buffer_range & ~(size_t)3;
    return dj_vk_buf_new(vk, want, true, b);
}

static enum dj_status staging_get(struct dj_vk *vk, size_t *chunk) {
    const enum dj_status st = host_buf_lazy(vk, DJ_VK_STAGING, &vk->staging);
    if (st != DJ_OK) return st;
    *chunk = vk->staging->bytes;
    return DJ_OK;
}

static enum dj_status copy_range_ok(const struct dj_vk_buf *b, size_t off, size_t n, const char *what) {
    if (off > b->bytes || n > b->bytes - off)
        return dj_fail(DJ_ERR_INVALID, "vulkan: %s of %zu bytes at %zu is outside a buffer of %zu bytes", what, n, off,
                       b->bytes);
    return DJ_OK;
}

/* One transfer of n bytes between the staging buffer and b at off, submitted and waited. */
static enum dj_status staged_copy(struct dj_vk *vk, const struct dj_vk_buf *b, size_t off, size_t n, bool to_b) {
    enum dj_status st = record_begin(vk);
    if (st != DJ_OK) return st;
    const VkBufferCopy rg = {to_b ? 0 : off, to_b ? off : 0, n};
    vk->f.vkCmdCopyBuffer(vk->cb, to_b ? vk->staging->buf : b->buf, to_b ? b->buf : vk->staging->buf, 1, &rg);
    return dj_vk_sync(vk);
}

enum dj_status dj_vk_write(struct dj_vk *vk, struct dj_vk_buf *b, size_t off, const void *src, size_t n) {
    enum dj_status st = copy_range_ok(b, off, n, "a write");
    if (st != DJ_OK || (st = dj_vk_sync(vk)) != DJ_OK) return st;
    if (b->map) {
        memcpy((char *)b->map + off, src, n);
        return DJ_OK;
    }
    size_t chunk;
    if ((st = staging_get(vk, &chunk)) != DJ_OK) return st;
    for (size_t done = 0; done < n;) {
        const size_t m = n - done < chunk ? n - done : chunk;
        memcpy(vk->staging->map, (const char *)src + done, m);
        if ((st = staged_copy(vk, b, off + done, m, true)) != DJ_OK) return st;
        done += m;
    }
    return DJ_OK;
}

enum dj_status dj_vk_read(struct dj_vk *vk, const struct dj_vk_buf *b, size_t off, void *dst, size_t n) {
    enum dj_status st = copy_range_ok(b, off, n, "a read");
    if (st != DJ_OK || (st = dj_vk_sync(vk)) != DJ_OK) return st;
    if (b->map) {
        memcpy(dst, (const char *)b->map + off, n);
        return DJ_OK;
    }
    size_t chunk;
    if ((st = staging_get(vk, &chunk)) != DJ_OK) return st;
    for (size_t done = 0; done < n;) {
        const size_t m = n - done < chunk ? n - done : chunk;
        if ((st = staged_copy(vk, b, off + done, m, false)) != DJ_OK) return st;
        memcpy((char *)dst + done, vk->staging->map, m);
        done += m;
    }
    return DJ_OK;
}

/* ---- the operations ----------------------------------------------------------------------- */

static int mm_pipe(uint32_t wtype) {
    switch (wtype) {
    case DJ_TYPE_F32: return PIPE_MM_F32;
    case DJ_TYPE_F16: return PIPE_MM_F16;
    case DJ_TYPE_BF16: return PIPE_MM_BF16;
    case DJ_TYPE_Q8_0: return PIPE_MM_Q8_0;
    case DJ_TYPE_Q4_0: return PIPE_MM_Q4_0;
    case DJ_TYPE_Q4_K: return PIPE_MM_Q4_K;
    case DJ_TYPE_Q6_K: return PIPE_MM_Q6_K;
    case DJ_TYPE_Q4_1: return PIPE_MM_Q4_1;
    case DJ_TYPE_Q5_0: return PIPE_MM_Q5_0;
    case DJ_TYPE_Q5_1: return PIPE_MM_Q5_1;
    case DJ_TYPE_Q5_K: return PIPE_MM_Q5_K;
    case DJ_TYPE_IQ4_NL: return PIPE_MM_IQ4_NL;
    case DJ_TYPE_MXFP4: return PIPE_MM_MXFP4;
    case DJ_TYPE_Q2_K: return PIPE_MM_Q2_K;
    case DJ_TYPE_Q3_K: return PIPE_MM_Q3_K;
    case DJ_TYPE_IQ4_XS: return PIPE_MM_IQ4_XS;
    case DJ_TYPE_IQ2_XXS: return PIPE_MM_IQ2_XXS;
    case DJ_TYPE_IQ2_XS: return PIPE_MM_IQ2_XS;
    case DJ_TYPE_IQ2_S: return PIPE_MM_IQ2_S;
    case DJ_TYPE_IQ3_XXS: return PIPE_MM_IQ3_XXS;
    case DJ_TYPE_IQ3_S: return PIPE_MM_IQ3_S;
    case DJ_TYPE_IQ1_S: return PIPE_MM_IQ1_S;
    case DJ_TYPE_IQ1_M: return PIPE_MM_IQ1_M;
    case DJ_TYPE_TQ1_0: return PIPE_MM_TQ1_0;
    case DJ_TYPE_TQ2_0: return PIPE_MM_TQ2_0;
    case DJ_TYPE_NVFP4: return PIPE_MM_NVFP4;
    case DJ_TYPE_Q1_0: return PIPE_MM_Q1_0;
    case DJ_TYPE_Q2_0: return PIPE_MM_Q2_0;
    default: return -1;
    }
}

bool dj_vk_matmul_supports(uint32_t wtype) { return mm_pipe(wtype) >= 0; }

/* the last float element index touched by n_tok tokens of width w at off, stride s, fits b */
static bool floats_fit(const struct dj_vk_buf *b, size_t off, size_t s, int64_t n_tok, int64_t w) {
    const size_t cap = b->bytes / sizeof(float);
    if (n_tok <= 0 || w <= 0) return true;
    const size_t last_tok = (size_t)(n_tok - 1);
    if (s && last_tok > (SIZE_MAX - off) / s) return false;
    const size_t end = off + last_tok * s;
    return end <= cap && (size_t)w <= cap - end;
}

#define MM_NT 4 /* tokens a workgroup (mm.comp's NT) */

/* The codebooks of the i-quants as mm.comp reads them (its *_OFF): ksigns_iq2xs one byte a
 * word, then the grids, 8-byte entries as two little-endian words. */
#define IQ_TABLE_WORDS (128 + 2 * 256 + 2 * 512 + 2 * 1024 + 256 + 512 + 2 * 2048)
static enum dj_status iq_tables(struct dj_vk *vk) {
    if (vk->iq_tables) return DJ_OK;
    uint32_t *t = malloc(IQ_TABLE_WORDS * 4), *p = t;
    if (!t) return dj_fail(DJ_ERR_NOMEM, "vulkan: out of memory");
    for (int i = 0; i < 128; i++) *p++ = dj_ksigns_iq2xs[i];
    const uint64_t *const g8[3] = {dj_iq2xxs_grid, dj_iq2xs_grid, dj_iq2s_grid};
    const int n8[3] = {256, 512, 1024};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < n8[k]; i++, p += 2) p[0] = (uint32_t)g8[k][i], p[1] = (uint32_t)(g8[k][i] >> 32);
    memcpy(p, dj_iq3xxs_grid, 256 * 4), p += 256;
    memcpy(p, dj_iq3s_grid, 512 * 4), p += 512;
    for (int i = 0; i < 2048; i++, p += 2) p[0] = (uint32_t)dj_iq1s_grid[i], p[1] = (uint32_t)(dj_iq1s_grid[i] >> 32);
    enum dj_status st = dj_vk_buf_new(vk, IQ_TABLE_WORDS * 4, true, &vk->iq_tables);
    if (st == DJ_OK) st = dj_vk_write(vk, vk->iq_tables, 0, t, IQ_TABLE_WORDS * 4);
    free(t);
    return st;
}

enum dj_status dj_vk_matmul(struct dj_vk *vk, uint32_t wtype, int64_t k, const struct dj_vk_buf *w, size_t w_off,
                            size_t ws, const struct dj_vk_buf *a, size_t a_off, size_t as, struct dj_vk_buf *c,
                            size_t c_off, size_t ldc, int64_t r0, int64_t r1, int64_t n_tok) {
    const int pipe = mm_pipe(wtype);
    if (pipe < 0)
        return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: no matmul shader for weight type %s", dj_type_name(wtype));
    const struct dj_type_info *ti = dj_type_info(wtype);
    size_t row_bytes;
    if (k <= 0 || (ti->blck > 1 && k % 32) || k % (int64_t)ti->blck || !dj_row_bytes(wtype, k, &row_bytes) ||
        ws < row_bytes)
        return dj_fail(DJ_ERR_INVALID, "vulkan: matmul: k = %lld is not whole %s blocks in rows of %zu bytes",
                       (long long)k, ti->name, ws);
    if (r0 < 0 || r1 < r0 || n_tok < 0) return dj_fail(DJ_ERR_INVALID, "vulkan: matmul: bad row or token range");
    if (r1 == r0 || n_tok == 0) return DJ_OK;
    /* every byte and float the shader may touch is inside its buffer, and addressable in 32 bits */
    const size_t w_end = w_off + (size_t)(r1 - 1) * ws + row_bytes;
    if (w_end > w->bytes || w_off > w->bytes || !floats_fit(a, a_off, as, n_tok, k) ||
        !floats_fit(c, c_off, ldc, n_tok, r1) || (as < (size_t)k && n_tok > 1) || (ldc < (size_t)r1 && n_tok > 1))
        return dj_fail(DJ_ERR_INVALID, "vulkan: matmul: a %lld x %lld product does not fit its buffers", (long long)r1,
                       (long long)k);
    if (w_end > UINT32_MAX || a->bytes / 4 > UINT32_MAX || c->bytes / 4 > UINT32_MAX)
        return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: matmul: buffers past 4 GiB are not addressable by the shader");
    const bool iq = pipe >= PIPE_MM_IQ2_XXS && pipe <= PIPE_MM_TQ2_0;
    if (iq) {
        const enum dj_status st = iq_tables(vk);
        if (st != DJ_OK) return st;
    }
    const struct dj_vk_buf *bufs[4] = {w, a, c, iq ? vk->iq_tables : NULL};
    const uint32_t gx_max = vk->info.max_workgroup_count[0], gy_max = vk->info.max_workgroup_count[1];
    const int64_t tok_step = (int64_t)gy_max * MM_NT;
    for (int64_t t = 0; t < n_tok; t += tok_step) {
        const int64_t nt = n_tok - t < tok_step ? n_tok - t : tok_step;
        const int64_t r_step = (int64_t)gx_max * 64; /* 64 rows a workgroup */
        for (int64_t r = r0; r < r1; r += r_step) {
            const int64_t nr = r1 - r < r_step ? r1 - r : r_step;
            const uint32_t push[10] = {(uint32_t)k,       (uint32_t)nr,  (uint32_t)nt,  (uint32_t)ws,
                                       (uint32_t)w_off,   (uint32_t)as,  (uint32_t)ldc, (uint32_t)r,
                                       (uint32_t)(a_off + (size_t)t * as), (uint32_t)(c_off + (size_t)t * ldc)};
            const enum dj_status st = dispatch(vk, pipe, bufs, 4, push, sizeof push, (uint32_t)((nr + 63) / 64),
                                               (uint32_t)((nt + MM_NT - 1) / MM_NT));
            if (st != DJ_OK) return st;
        }
    }
    return DJ_OK;
}

enum dj_status dj_vk_rmsnorm(struct dj_vk *vk, const struct dj_vk_buf *x, size_t xs, const struct dj_vk_buf *w,
                             struct dj_vk_buf *y, size_t ys, int64_t n, int64_t n_tok, float eps) {
    if (n <= 0 || n_tok < 0) return dj_fail(DJ_ERR_INVALID, "vulkan: rmsnorm: bad size");
    if (!n_tok) return DJ_OK;
    if (!floats_fit(x, 0, xs, n_tok, n) || !floats_fit(y, 0, ys, n_tok, n) || !floats_fit(w, 0, 0, 1, n) ||
        x->bytes / 4 > UINT32_MAX || y->bytes / 4 > UINT32_MAX)
        return dj_fail(DJ_ERR_INVALID, "vulkan: rmsnorm: %lld tokens of %lld do not fit their buffers",
                       (long long)n_tok, (long long)n);
    if (n_tok > (int64_t)vk->info.max_workgroup_count[0])
        return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: rmsnorm: more than %u tokens at once", vk->info.max_workgroup_count[0]);
    const struct dj_vk_buf *bufs[3] = {x, w, y};
    const struct {
        uint32_t n, n_tok, xs, ys;
        float eps;
    } push = {(uint32_t)n, (uint32_t)n_tok, (uint32_t)xs, (uint32_t)ys, eps};
    const enum dj_status st = dispatch(vk, PIPE_RMSNORM, bufs, 3, &push, sizeof push, (uint32_t)n_tok, 1);
    if (st != DJ_OK) return st;
    return DJ_OK;
}

/* n words into the arena for the dispatches recorded next: *word = their first word.  A full
 * arena runs what is recorded (a sync) and starts again. */
static enum dj_status arena_put(struct dj_vk *vk, const void *w, size_t n, uint32_t *word) {
    const enum dj_status ast = host_buf_lazy(vk, DJ_VK_ARENA, &vk->arena);
    if (ast != DJ_OK) return ast;
    const size_t cap = vk->arena->bytes / 4;
    if (n > cap) return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: %zu words of positions and block tables at once (at most %zu)",
                                n, cap);
    /* a sync here, not in the dispatch that follows: that one must not find the pool full
     * (its sync would let the next arena_put overwrite these words before they are read) */
    if (vk->arena_used + n > cap || vk->sets_used == DJ_VK_SETS) {
        const enum dj_status st = dj_vk_sync(vk);
        if (st != DJ_OK) return st;
    }
    memcpy((uint32_t *)vk->arena->map + vk->arena_used, w, n * 4);
    *word = (uint32_t)vk->arena_used;
    vk->arena_used += n;
    return DJ_OK;
}

/* groups of 256 for n elements, as (x, y) within the device's counts */
static enum dj_status grid256(const struct dj_vk *vk, int64_t n, uint32_t *gx, uint32_t *gy) {
    const uint64_t g = ((uint64_t)n + 255) / 256, mx = vk->info.max_workgroup_count[0];
    *gx = (uint32_t)(g < mx ? g : mx);
    const uint64_t y = (g + *gx - 1) / *gx;
    if (y > vk->info.max_workgroup_count[1] || (uint64_t)n > UINT32_MAX)
        return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: %lld elements in one operation", (long long)n);
    *gy = (uint32_t)y;
    return DJ_OK;
}

enum dj_status dj_vk_rope(struct dj_vk *vk, struct dj_vk_buf *x, size_t x_off, size_t xs, int64_t n_tok, int n_heads,
                          int hd, int n_rot, bool neox, const struct dj_vk_buf *cs, size_t cs_w, const uint32_t *pos) {
    if (n_tok < 0 || n_heads <= 0 || hd <= 0 || n_rot <= 0 || n_rot % 2 || n_rot > hd || cs_w < (size_t)n_rot)
        return dj_fail(DJ_ERR_INVALID, "vulkan: rope: bad shape (%d heads of %d, %d rotated, table rows of %zu)",
                       n_heads, hd, n_rot, cs_w);
    if (!n_tok) return DJ_OK;
    if (n_tok > (int64_t)vk->info.max_workgroup_count[0])
        return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: rope: more than %u tokens at once", vk->info.max_workgroup_count[0]);
    const size_t cs_rows = cs->bytes / 4 / cs_w;
    for (int64_t t = 0; t < n_tok; t++)
        if (pos[t] >= cs_rows)
            return dj_fail(DJ_ERR_INVALID, "vulkan: rope: position %u past the table's %zu rows", pos[t], cs_rows);
    if (!floats_fit(x, x_off, xs, n_tok, (int64_t)n_heads * hd) || x->bytes / 4 > UINT32_MAX || cs->bytes / 4 > UINT32_MAX)
        return dj_fail(DJ_ERR_INVALID, "vulkan: rope: %lld tokens do not fit their buffer", (long long)n_tok);
    uint32_t pos0;
    enum dj_status st = arena_put(vk, pos, (size_t)n_tok, &pos0);
    if (st != DJ_OK) return st;
    const uint32_t push[9] = {(uint32_t)n_tok, (uint32_t)n_heads, (uint32_t)hd, (uint32_t)n_rot, neox,
                              (uint32_t)xs,    (uint32_t)cs_w,    (uint32_t)x_off, pos0};
    const struct dj_vk_buf *bufs[3] = {x, cs, vk->arena};
    return dispatch(vk, PIPE_ROPE, bufs, 3, push, sizeof push, (uint32_t)n_tok, 1);
}

/* the elementwise shaders: y (read-write) and x at their offsets, n floats */
static enum dj_status elementwise(struct dj_vk *vk, int pipe, const char *what, struct dj_vk_buf *y, size_t y_off,
                                  const struct dj_vk_buf *x, size_t x_off, int64_t n) {
    if (n < 0) return dj_fail(DJ_ERR_INVALID, "vulkan: %s: bad size", what);
    if (!n) return DJ_OK;
    if (!floats_fit(y, y_off, 0, 1, n) || !floats_fit(x, x_off, 0, 1, n) || y->bytes / 4 > UINT32_MAX ||
        x->bytes / 4 > UINT32_MAX)
        return dj_fail(DJ_ERR_INVALID, "vulkan: %s: %lld floats do not fit their buffers", what, (long long)n);
    uint32_t gx = 0, gy = 0;
    const enum dj_status st = grid256(vk, n, &gx, &gy);
    if (st != DJ_OK) return st;
    const uint32_t push[3] = {(uint32_t)n, (uint32_t)y_off, (uint32_t)x_off};
    const struct dj_vk_buf *bufs[2] = {y, x};
    return dispatch(vk, pipe, bufs, 2, push, sizeof push, gx, gy);
}

enum dj_status dj_vk_swiglu(struct dj_vk *vk, struct dj_vk_buf *g, size_t g_off, const struct dj_vk_buf *u,
                            size_t u_off, int64_t n) {
    return elementwise(vk, PIPE_SWIGLU, "swiglu", g, g_off, u, u_off, n);
}

enum dj_status dj_vk_swiglu_oai(struct dj_vk *vk, struct dj_vk_buf *g, size_t g_off, const struct dj_vk_buf *u,
                                size_t u_off, int64_t n) {
    return elementwise(vk, PIPE_SWIGLU_OAI, "swiglu_oai", g, g_off, u, u_off, n);
}

enum dj_status dj_vk_sigmoid_mul(struct dj_vk *vk, struct dj_vk_buf *y, size_t y_off, const struct dj_vk_buf *g,
                                 size_t g_off, int64_t n) {
    return elementwise(vk, PIPE_SWIGLU_SIGMUL, "sigmoid_mul", y, y_off, g, g_off, n);
}

/* bias.comp over n_rows rows of n floats of y from y_off: + b's row at b_off, or (scale) x b[b_off + r] */
static enum dj_status bias_rows(struct dj_vk *vk, const char *what, struct dj_vk_buf *y, size_t y_off,
                                const struct dj_vk_buf *b, size_t b_off, int64_t n, int64_t n_rows, bool scale) {
    if (n <= 0 || n_rows < 0) return dj_fail(DJ_ERR_INVALID, "vulkan: %s: bad size", what);
    if (!n_rows) return DJ_OK;
    if (!floats_fit(y, y_off, (size_t)n, n_rows, n) || !floats_fit(b, b_off, 0, 1, scale ? n_rows : n) ||
        y->bytes / 4 > UINT32_MAX || b->bytes / 4 > UINT32_MAX || (uint64_t)n * (uint64_t)n_rows > UINT32_MAX)
        return dj_fail(DJ_ERR_INVALID, "vulkan: %s: %lld rows of %lld do not fit their buffers", what, (long long)n_rows,
                       (long long)n);
    uint32_t gx = 0, gy = 0;
    const enum dj_status st = grid256(vk, n * n_rows, &gx, &gy);
    if (st != DJ_OK) return st;
    const uint32_t push[5] = {(uint32_t)(n * n_rows), (uint32_t)n, (uint32_t)y_off, (uint32_t)b_off, scale};
    const struct dj_vk_buf *bufs[2] = {y, b};
    return dispatch(vk, PIPE_BIAS, bufs, 2, push, sizeof push, gx, gy);
}

enum dj_status dj_vk_add_bias(struct dj_vk *vk, struct dj_vk_buf *y, size_t y_off, const struct dj_vk_buf *b,
                              size_t b_off, int64_t n, int64_t n_rows) {
    return bias_rows(vk, "add_bias", y, y_off, b, b_off, n, n_rows, false);
}

enum dj_status dj_vk_scale_rows(struct dj_vk *vk, struct dj_vk_buf *y, int64_t n, int64_t n_rows, const float *f) {
    if (n_rows <= 0) return n_rows ? dj_fail(DJ_ERR_INVALID, "vulkan: scale_rows: bad size") : DJ_OK;
    uint32_t f0; /* the factors' bits into the arena as they are */
    const enum dj_status st = arena_put(vk, f, (size_t)n_rows, &f0);
    if (st != DJ_OK) return st;
    return bias_rows(vk, "scale_rows", y, 0, vk->arena, f0, n, n_rows, true);
}

enum dj_status dj_vk_add(struct dj_vk *vk, struct dj_vk_buf *y, size_t y_off, const struct dj_vk_buf *x, size_t x_off,
                         int64_t n) {
    return elementwise(vk, PIPE_ADD, "add", y, y_off, x, x_off, n);
}

enum dj_status dj_vk_attn(struct dj_vk *vk, const struct dj_vk_attn_shape *a, const struct dj_vk_buf *q,
                          const struct dj_vk_buf *kv, struct dj_vk_buf *o, int64_t n_tok, const uint32_t *pos,
                          const uint32_t *tab_start, const uint32_t *blocks, size_t n_blocks) {
    const uint32_t vd = a->vd ? a->vd : a->hd; /* values: vd elements (MLA: the K row's first kv_lora) */
    const size_t os = a->os ? a->os : a->qs;
    if (a->n_head == 0 || a->n_kv_head == 0 || a->n_head % a->n_kv_head || a->hd == 0 || vd > 512 || a->bs == 0 ||
        a->row_stride < (size_t)a->n_kv_head * a->hd || n_tok < 0)
        return dj_fail(DJ_ERR_INVALID, "vulkan: attn: bad shape (%u heads, %u K/V heads of %u, blocks of %u rows)",
                       a->n_head, a->n_kv_head, a->hd, a->bs);
    if (!n_tok) return DJ_OK;
    if (n_tok > (int64_t)vk->info.max_workgroup_count[1] || a->n_head > vk->info.max_workgroup_count[0])
        return dj_fail(DJ_ERR_UNSUPPORTED, "vulkan: attn: %lld tokens x %u heads in one dispatch", (long long)n_tok,
                       a->n_head);
    /* every element the shader reads: K and V rows of every block named, Q and O rows */
    const size_t esz = a->kv_f16 ? 2 : 4, kv_elems = kv->bytes / esz;
    const size_t row_end = (size_t)(a->bs - 1) * a->row_stride + (size_t)a->n_kv_head * a->hd;
    const size_t v_end = (size_t)(a->bs - 1) * a->row_stride + (size_t)(a->n_kv_head - 1) * a->hd + vd;
    if (a->k_off + row_end > a->blk_stride || a->v_off + v_end > a->blk_stride || !a->blk_stride)
        return dj_fail(DJ_ERR_INVALID, "vulkan: attn: a layer's K/V rows do not fit a block of %zu elements",
                       a->blk_stride);
    const size_t n_blk_dev = kv_elems / a->blk_stride;
    for (size_t i = 0; i < n_blocks; i++)
        if (blocks[i] >= n_blk_dev)
            return dj_fail(DJ_ERR_INVALID, "vulkan: attn: block %u past the cache's %zu blocks", blocks[i], n_blk_dev);
    for (int64_t t = 0; t < n_tok; t++) {
        const uint64_t need = (uint64_t)pos[t] / a->bs + 1;
        if (tab_start[t] > n_blocks || need > n_blocks - tab_start[t])
            return dj_fail(DJ_ERR_INVALID, "vulkan: attn: token %lld at position %u has no block table that long",
                           (long long)t, pos[t]);
    }
    if (!floats_fit(q, 0, a->qs, n_tok, (int64_t)a->n_head * a->hd) ||
        !floats_fit(o, 0, os, n_tok, (int64_t)a->n_head * vd) || kv_elems > UINT32_MAX ||
        q->bytes / 4 > UINT32_MAX || o->bytes / 4 > UINT32_MAX)
        return dj_fail(DJ_ERR_INVALID, "vulkan: attn: %lld tokens do not fit their buffers", (long long)n_tok);
    /* [pos, table start (from the first word)] per token, then the tables */
    /* ... and the heads' sink logits (as float bits) after the tables */
    const size_t words = 2 * (size_t)n_tok + n_blocks + (a->sinks ? a->n_head : 0);
    uint32_t *tab = malloc(words * 4);
    if (!tab) return dj_fail(DJ_ERR_NOMEM, "vulkan: attn: out of memory");
    for (int64_t t = 0; t < n_tok; t++) {
        tab[2 * t] = pos[t];
        tab[2 * t + 1] = (uint32_t)(2 * (size_t)n_tok + tab_start[t]);
    }
    memcpy(tab + 2 * n_tok, blocks, n_blocks * 4);
    if (a->sinks) memcpy(tab + 2 * n_tok + n_blocks, a->sinks, (size_t)a->n_head * 4);
    uint32_t tab0;
    enum dj_status st = arena_put(vk, tab, words, &tab0);
    free(tab);
    if (st != DJ_OK) return st;
    struct {
        uint32_t n_head, n_kv_head, hd, bs, blk_stride, k_off, v_off, row_stride, qs;
        float scale;
        uint32_t tab0, n_swa;
        float cap;
        uint32_t sink0, vd, os;
    } push = {a->n_head,          a->n_kv_head,      a->hd,
              a->bs,              (uint32_t)a->blk_stride, (uint32_t)a->k_off,
              (uint32_t)a->v_off, (uint32_t)a->row_stride, (uint32_t)a->qs,
              a->scale,           tab0,              a->n_swa,
              a->softcap,         a->sinks ? tab0 + (uint32_t)(2 * (size_t)n_tok + n_blocks) : 0,
              vd,                 (uint32_t)os};
    _Static_assert(sizeof push <= DJ_VK_PUSH_BYTES, "attn's push constants");
    const struct dj_vk_buf *bufs[4] = {q, kv, o, vk->arena};
    return dispatch(vk, a->kv_f16 ? PIPE_ATTN_F16 : PIPE_ATTN_F32, bufs, 4, &push, sizeof push, a->n_head,
                    (uint32_t)n_tok);
}

enum dj_status dj_vk_geglu(struct dj_vk *vk, struct dj_vk_buf *g, size_t g_off, const struct dj_vk_buf *u, size_t u_off,
                           int64_t n, const struct dj_vk_buf *tab) {
    if (n < 0 || tab->bytes < 65536 * sizeof(float)) return dj_fail(DJ_ERR_INVALID, "vulkan: geglu: bad size or table");
    if (!n) return DJ_OK;
    if (!floats_fit(g, g_off, 0, 1, n) || !floats_fit(u, u_off, 0, 1, n) || g->bytes / 4 > UINT32_MAX ||
        u->bytes / 4 > UINT32_MAX)
        return dj_fail(DJ_ERR_INVALID, "vulkan: geglu: %lld floats do not fit their buffers", (long long)n);
    uint32_t gx = 0, gy = 0;
    const enum dj_status st = grid256(vk, n, &gx, &gy);
    if (st != DJ_OK) return st;
    const uint32_t push[3] = {(uint32_t)n, (uint32_t)g_off, (uint32_t)u_off};
    const struct dj_vk_buf *bufs[3] = {g, u, tab};
    return dispatch(vk, PIPE_GEGLU, bufs, 3, push, sizeof push, gx, gy);
}

enum dj_status dj_vk_kv_store(struct dj_vk *vk, struct dj_vk_buf *mirror, const struct dj_vk_buf *src, size_t ss,
                              int64_t n_tok, int64_t n_el, bool f16, const uint32_t *word, struct dj_vk_buf *out,
                              size_t out_word) {
    if (n_tok < 0 || n_el <= 0 || (f16 && n_el % 2) || ss < (size_t)n_el)
        return dj_fail(DJ_ERR_INVALID, "vulkan: kv_store: bad shape (%lld elements%s)", (long long)n_el,
                       f16 ? ", f16" : "");
    if (!n_tok) return DJ_OK;
    const size_t rw = f16 ? (size_t)n_el / 2 : (size_t)n_el, mw = mirror->bytes / 4;
    for (int64_t t = 0; t < n_tok; t++)
        if (word[t] > mw || rw > mw - word[t])
            return dj_fail(DJ_ERR_INVALID, "vulkan: kv_store: a row at word %u is past the cache's %zu words", word[t], mw);
    if (!floats_fit(src, 0, ss, n_tok, n_el) || out->bytes / 4 < out_word || (size_t)n_tok * rw > out->bytes / 4 - out_word ||
        mw > UINT32_MAX || src->bytes / 4 > UINT32_MAX || out->bytes / 4 > UINT32_MAX)
        return dj_fail(DJ_ERR_INVALID, "vulkan: kv_store: %lld rows do not fit their buffers", (long long)n_tok);
    uint32_t tab0, gx = 0, gy = 0;
    enum dj_status st = grid256(vk, n_tok * (int64_t)rw, &gx, &gy);
    if (st == DJ_OK) st = arena_put(vk, word, (size_t)n_tok, &tab0);
    if (st != DJ_OK) return st;
    const uint32_t push[6] = {(uint32_t)((size_t)n_tok * rw), (uint32_t)rw, (uint32_t)ss, f16, (uint32_t)out_word, tab0};
    const struct dj_vk_buf *bufs[4] = {mirror, src, out, vk->arena};
    return dispatch(vk, PIPE_KV_STORE, bufs, 4, push, sizeof push, gx, gy);
}

enum dj_status dj_vk_gather(struct dj_vk *vk, struct dj_vk_buf *y, size_t y_off, size_t ys, const struct dj_vk_buf *x,
                            size_t x_off, size_t xs, int64_t w, const uint32_t *idx, int64_t n_rows) {
    if (w <= 0 || n_rows < 0 || (size_t)w > xs || (size_t)w > ys) return dj_fail(DJ_ERR_INVALID, "vulkan: gather: bad shape");
    if (!n_rows) return DJ_OK;
    const size_t xw = x->bytes / 4; /* rows of x: those whose w words fit */
    const size_t x_rows = x_off > xw || (size_t)w > xw - x_off ? 0 : (xw - x_off - (size_t)w) / xs + 1;
    if (!idx && (uint64_t)n_rows > x_rows) /* the identity: rows 0 .. n_rows - 1 */
        return dj_fail(DJ_ERR_INVALID, "vulkan: gather: row %lld past the source's %zu rows", (long long)n_rows - 1,
                       x_rows);
    for (int64_t r = 0; idx && r < n_rows; r++)
        if (idx[r] >= x_rows)
            return dj_fail(DJ_ERR_INVALID, "vulkan: gather: row %u past the source's %zu rows", idx[r], x_rows);
    if (!floats_fit(y, y_off, ys, n_rows, w) || y->bytes / 4 > UINT32_MAX || x->bytes / 4 > UINT32_MAX ||
        (uint64_t)n_rows * (uint64_t)w > UINT32_MAX)
        return dj_fail(DJ_ERR_INVALID, "vulkan: gather: %lld rows of %lld do not fit their buffers", (long long)n_rows,
                       (long long)w);
    uint32_t idx0 = UINT32_MAX, gx = 0, gy = 0; /* UINT32_MAX: the identity, no indices (gather.comp) */
    enum dj_status st = grid256(vk, n_rows * w, &gx, &gy);
    if (st == DJ_OK && idx) st = arena_put(vk, idx, (size_t)n_rows, &idx0);
    if (st != DJ_OK) return st;
    const uint32_t push[7] = {(uint32_t)(n_rows * w), (uint32_t)w, (uint32_t)xs, (uint32_t)x_off, (uint32_t)y_off, idx0,
                              (uint32_t)ys};
    const struct dj_vk_buf *bufs[3] = {y, x, idx ? vk->arena : x};
    return dispatch(vk, PIPE_GATHER, bufs, 3, push, sizeof push, gx, gy);
}

enum dj_status dj_vk_moe_sum(struct dj_vk *vk, struct dj_vk_buf *x, const struct dj_vk_buf *o, int64_t n, int64_t n_tok,
                             int k, const uint32_t *rows, const float *wts, const struct dj_vk_buf *sh) {
    if (n <= 0 || n_tok < 0 || k <= 0 || k > 512) return dj_fail(DJ_ERR_INVALID, "vulkan: moe_sum: bad shape");
    if (!n_tok) return DJ_OK;
    const size_t o_rows = o->bytes / 4 / (size_t)n;
    for (int64_t i = 0; i < n_tok * k; i++)
        if (rows[i] >= o_rows)
            return dj_fail(DJ_ERR_INVALID, "vulkan: moe_sum: row %u past the experts' %zu rows", rows[i], o_rows);
    if (!floats_fit(x, 0, (size_t)n, n_tok, n) || x->bytes / 4 > UINT32_MAX || o->bytes / 4 > UINT32_MAX ||
        (sh && (!floats_fit(sh, 0, (size_t)n, n_tok, n) || sh->bytes / 4 > UINT32_MAX)))
        return dj_fail(DJ_ERR_INVALID, "vulkan: moe_sum: %lld tokens of %lld do not fit their buffer", (long long)n_tok,
                       (long long)n);
    uint32_t gx = 0, gy = 0;
    enum dj_status st = grid256(vk, n_tok * n, &gx, &gy);
    if (st != DJ_OK) return st;
    const size_t words = 2 * (size_t)k * (size_t)n_tok;
    uint32_t *tab = malloc(words * 4), tab0;
    if (!tab) return dj_fail(DJ_ERR_NOMEM, "vulkan: moe_sum: out of memory");
    for (int64_t t = 0; t < n_tok; t++) {
        memcpy(tab + 2 * (size_t)k * (size_t)t, rows + t * k, (size_t)k * 4);
        memcpy(tab + 2 * (size_t)k * (size_t)t + k, wts + t * k, (size_t)k * 4);
    }
    st = arena_put(vk, tab, words, &tab0);
    free(tab);
    if (st != DJ_OK) return st;
    const uint32_t push[5] = {(uint32_t)(n_tok * n), (uint32_t)n, (uint32_t)k, tab0, sh != NULL};
    const struct dj_vk_buf *bufs[4] = {x, o, vk->arena, sh};
    return dispatch(vk, PIPE_MOE_SUM, bufs, 4, push, sizeof push, gx, gy);
}
