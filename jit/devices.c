/* devices.c — the table of devices, and opening the one a context asks for.
 * A device is registered by one line in JIT_DEVICES (and its folder's
 * library in jit/BUILD's deps). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/device.h"

#define JIT_DEVICES(X)                                                                         \
    X(jit_ref_device)                                                                          \
    X(jit_cc_device)                                                                           \
    X(jit_llvm_device)                                                                         \
    X(jit_cuda_device_ops)

#define DECLARE(ops) extern const jit_device_ops ops;
JIT_DEVICES(DECLARE)
#undef DECLARE
#define ENTRY(ops) &ops,
static const jit_device_ops *const devices[] = {JIT_DEVICES(ENTRY)};
#undef ENTRY

enum { NDEVICES = sizeof devices / sizeof devices[0] };

int jit_device_count(void) { return NDEVICES; }

const jit_device_ops *jit_device_at(int i) { return i >= 0 && i < NDEVICES ? devices[i] : NULL; }

/* For KILN_CPU the compiler's name must match too: "cc or llvm" lists them. */
static const jit_device_ops *find(kiln_device kind, const char *compiler, char *msg,
                                  size_t cap) {
    char names[128] = "";
    for (int i = 0; i < NDEVICES; i++) {
        const jit_device_ops *o = devices[i];
        if (o->kind != kind)
            continue;
        if (!o->cpu_compiler || !strcmp(o->cpu_compiler, compiler))
            return o;
        size_t at = strlen(names);
        snprintf(names + at, sizeof names - at, "%s%s", at ? " or " : "", o->cpu_compiler);
    }
    if (names[0])
        snprintf(msg, cap, "kiln: KILN_CPU_COMPILER is '%s'; it must be %s", compiler, names);
    else
        snprintf(msg, cap, "kiln_ctx_new: no device serves kiln_device %d", (int)kind);
    return NULL;
}

jit_device *jit_device_open(kiln_device kind, const jit_device_config *cfg, kiln_status *st,
                            char *msg, size_t cap) {
    const char *compiler = getenv("KILN_CPU_COMPILER");
    if (kind != KILN_CPU || !compiler || !*compiler)
        compiler = "cc";
    const jit_device_ops *o = find(kind, compiler, msg, cap);
    jit_device *d = NULL;
    if (!o) {
        *st = KILN_ERR_DEVICE;
        return NULL;
    }
    *st = o->open(cfg, &d, msg, cap);
    return *st == KILN_OK ? d : NULL;
}

void jit_device_close(jit_device *d) {
    if (d)
        d->ops->close(d);
}
