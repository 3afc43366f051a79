/* collective.c — a program's collective kernels, run through dist/. Their
 * descriptors are made once, when the program is built; each run first has
 * the ranks agree on all of them (one small message, and a mismatch is
 * reported on every rank before any data moves), then hands consecutive
 * collectives to dist/ together. On a device whose buffers are host memory
 * dist/ reads and writes them in place; elsewhere they are staged through
 * host copies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/collective.h"

bool jit_collectives_plan(const lower_program *p, jit_collectives *c) {
    memset(c, 0, sizeof *c);
    int n = 0;
    for (int i = 0; i < p->nkernels; i++)
        n += p->kernels[i].kind == LOWER_COLLECTIVE;
    if (!n)
        return true;
    c->descs = calloc((size_t)n, sizeof *c->descs);
    c->of_kernel = malloc(sizeof *c->of_kernel * (size_t)p->nkernels);
    if (!c->descs || !c->of_kernel) {
        jit_collectives_free(c);
        return false;
    }
    for (int i = 0; i < p->nkernels; i++) {
        const lower_kernel *k = &p->kernels[i];
        c->of_kernel[i] = -1;
        if (k->kind != LOWER_COLLECTIVE)
            continue;
        if (!c->n)
            snprintf(c->what, sizeof c->what, "kiln_%s", graph_op_name(k->out->op));
        dist_desc_of(k->out, &c->descs[c->n]);
        c->of_kernel[i] = c->n++;
    }
    return true;
}

void jit_collectives_free(jit_collectives *c) {
    free(c->descs);
    free(c->of_kernel);
    memset(c, 0, sizeof *c);
}

static size_t node_bytes(const graph_node *x) {
    return (size_t)graph_numel(x) * graph_dtype_size(x->dtype);
}

kiln_status jit_collectives_run(const jit_collectives *c, dist_world *w, jit_device *d, int n,
                                const int *held, graph_node *const *ins,
                                graph_node *const *outs, char *msg, size_t cap) {
    dist_desc stackd[8];
    const void *stacks[8];
    void *stacko[8];
    bool heap = n > 8;
    dist_desc *descs = heap ? malloc(sizeof *descs * (size_t)n) : stackd;
    const void **src = heap ? calloc((size_t)n, sizeof *src) : stacks;
    void **dst = heap ? calloc((size_t)n, sizeof *dst) : stacko;
    kiln_status st = descs && src && dst ? KILN_OK : KILN_ERR_OOM;
    bool staged = !d->ops->host_memory;
    if (!heap) {
        memset(stacks, 0, sizeof stacks);
        memset(stacko, 0, sizeof stacko);
    }
    for (int i = 0; st == KILN_OK && i < n; i++) {
        descs[i] = c->descs[c->of_kernel[held[i]]];
        if (!staged) {
            src[i] = ins[i]->buf->data;
            dst[i] = outs[i]->buf->data;
            continue;
        }
        size_t si = node_bytes(ins[i]), so = node_bytes(outs[i]);
        void *s = malloc(si ? si : 1);
        src[i] = s;
        if (!s || !(dst[i] = malloc(so ? so : 1)))
            st = KILN_ERR_OOM;
        else
            st = d->ops->copy_out(d, s, ins[i]->buf, 0, si, msg, cap);
    }
    if (st == KILN_ERR_OOM)
        snprintf(msg, cap, "%s: out of memory for %d collectives", c->what, n);
    if (st == KILN_OK)
        st = dist_run(w, n, descs, src, dst, c->what, msg, cap);
    for (int i = 0; staged && i < n && src && dst; i++) {
        if (st == KILN_OK && dst[i])
            st = d->ops->copy_in(d, outs[i]->buf, 0, dst[i], node_bytes(outs[i]), msg, cap);
        free((void *)src[i]);
        free(dst[i]);
    }
    if (heap) {
        free(descs);
        free(src);
        free(dst);
    }
    return st;
}
