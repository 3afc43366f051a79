/* device.c — the CUDA device's registration. Its runtime (buffers through
 * the driver API, NVRTC-compiled programs, launches) is not written yet, so
 * opening it fails with KILN_ERR_DEVICE and says so; every other entry stays
 * empty until then. The compile check (KILN_CHECK_CUDA) does not need it. */
#include <stdio.h>

#include "jit/cuda/cuda.h"
#include "jit/device.h"

static kiln_status cuda_open(const jit_device_config *cfg, jit_device **out, char *msg,
                             size_t cap) {
    (void)cfg;
    *out = NULL;
    char why[256] = "";
    int n = jit_cuda_device_count(why, sizeof why);
    if (n == 0)
        snprintf(msg, cap, "kiln_ctx_new: KILN_CUDA: no CUDA device is usable (%s); kiln's "
                           "CUDA runtime is not implemented yet either", why);
    else
        snprintf(msg, cap, "kiln_ctx_new: KILN_CUDA: kiln's CUDA runtime is not implemented "
                           "yet (%d device%s found; KILN_CHECK_CUDA=1 checks that every "
                           "program compiles for it)", n, n == 1 ? "" : "s");
    return KILN_ERR_DEVICE;
}

const jit_device_ops jit_cuda_device_ops = {
    .name = "cuda",
    .kind = KILN_CUDA,
    .watched = true,
    .open = cuda_open,
};
