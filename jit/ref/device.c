/* device.c — the float64 reference evaluator as a device, so that KILN_REF
 * contexts take the runtime's path (capture, graph cache, schedule, memory
 * plan, buffers through the interface) and only the arithmetic differs: a
 * kernel is run by graph_eval over the graph below its outputs, each node
 * rounded to its dtype as on every device. Its buffers are host memory. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/device.h"

/* Nothing is compiled: the code is the evaluator, the same for every program. */
struct jit_code {
    int unused;
};

static kiln_status ref_open(const jit_device_config *cfg, jit_device **out, char *msg,
                            size_t cap);

/* Buffers still out return to the pool and are freed there. */
static void ref_close(jit_device *d) {
    jit_pool_close(d->pool);
    free(d);
}

/* The kernels' IR: what the evaluator runs, for KILN_DUMP and the cache key. */
static kiln_status ref_render(jit_device *d, const lower_program *p, const lower_plan *plans,
                              char **out, char *msg, size_t cap) {
    (void)d;
    (void)plans;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    *out = NULL;
    if (f) {
        for (int i = 0; i < p->nkernels; i++)
            lower_print_kernel(f, &p->kernels[i]);
        if (fclose(f) == 0)
            *out = text;
        else
            free(text);
    }
    if (!*out) {
        snprintf(msg, cap, "kiln: out of memory while printing the kernels");
        return KILN_ERR_OOM;
    }
    return KILN_OK;
}

static kiln_status ref_compile(jit_device *d, const lower_program *p, const lower_plan *plans,
                               const char *text, cache_key key, jit_code **out, bool *from_disk,
                               char *msg, size_t cap) {
    (void)d;
    (void)p;
    (void)plans;
    (void)text;
    (void)key;
    *from_disk = false;
    if (!(*out = calloc(1, sizeof **out))) {
        snprintf(msg, cap, "kiln_realize: out of memory");
        return KILN_ERR_OOM;
    }
    return KILN_OK;
}

static void ref_code_free(void *code) { free(code); }

/* graph_eval gives each requested node a buffer of its own: the runtime's
 * buffers are set aside while it runs, then get its values copied in (not
 * its memory swapped in: theirs belongs to the device's pool, whose size
 * classes are larger than graph_eval's exact sizes). */
static kiln_status ref_launch(jit_device *d, const jit_code *c, int i, const lower_kernel *k,
                              graph_node *const *nodes, char *msg, size_t cap) {
    (void)d;
    (void)c;
    (void)i;
    if (k->region)
        return KILN_OK; /* a cat's first region evaluated the whole of it */
    graph_buffer *stackv[16];
    graph_buffer **held = k->nouts <= 16 ? stackv : malloc(sizeof *held * (size_t)k->nouts);
    if (!held) {
        snprintf(msg, cap, "kiln_realize: out of memory");
        return KILN_ERR_OOM;
    }
    for (int o = 0; o < k->nouts; o++) {
        held[o] = nodes[o]->buf;
        nodes[o]->buf = NULL;
    }
    kiln_status st = graph_eval(k->nouts, nodes, msg, cap);
    for (int o = 0; o < k->nouts; o++) {
        graph_buffer *mine = nodes[o]->buf;
        if (mine) {
            memcpy(held[o]->data, mine->data, held[o]->nbytes);
            graph_buffer_unref(mine);
        }
        nodes[o]->buf = held[o];
    }
    if (held != stackv)
        free(held);
    return st;
}

static bool ref_supports(const jit_device *d, graph_op op, kiln_dtype dt) {
    (void)d;
    if (graph_op_is_attention(op))
        return dt == KILN_F32 || dt == KILN_F64;
    return op >= 0 && op < GRAPH_NUM_OPS && (unsigned)dt < KILN_NUM_DTYPES;
}

const jit_device_ops jit_ref_device = {
    .name = "ref",
    .host_memory = true,
    .joint_attention_grads = true, /* its launch evaluates whatever nodes a kernel names */
    .kind = KILN_REF,
    .open = ref_open,
    .close = ref_close,
    .alloc = jit_host_alloc,
    .free = jit_host_free,
    .copy_in = jit_host_copy_in,
    .copy_out = jit_host_copy_out,
    .render = ref_render,
    .compile = ref_compile,
    .code_free = ref_code_free,
    .launch = ref_launch,
    .sync = jit_host_sync,
    .supports = ref_supports,
};

static kiln_status ref_open(const jit_device_config *cfg, jit_device **out, char *msg,
                            size_t cap) {
    (void)cfg;
    jit_device *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(msg, cap, "kiln: out of memory");
        return KILN_ERR_OOM;
    }
    d->ops = &jit_ref_device;
    d->target = (lower_target){.name = "ref"};
    d->key = jit_device_key(&d->target, "graph_eval float64", NULL);
    kiln_status st = jit_host_pool_open(d, msg, cap);
    if (st != KILN_OK) {
        free(d);
        return st;
    }
    *out = d;
    return KILN_OK;
}
