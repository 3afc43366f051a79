/* donate.c — buffer donation.
 *
 * An optimiser's step replaces each moment m by m' = b m + (1 - b) g (and
 * v likewise): kiln_assign points the tensor at the new node, and the old
 * node, a leaf of the step's graph, is read by nothing after the step. Its
 * buffer was nevertheless kept until the run ended, beside m''s new one: the
 * 124M-parameter GPT-2 step peaked at 1.71x its parameters, gradients,
 * moments and activations, the moments' old and new copies side by side.
 *
 * An elementwise kernel that reads a leaf only at the index it stores its
 * output at, as the last kernel of the program to read it, may store that
 * output into the leaf's buffer: every lane loads its element before it
 * stores there, and no other lane reads it. That is the program's part
 * (jit_donations_plan, once per program). Whether nothing else can read the
 * leaf is the run's (jit_donations_pick): its node must die with the run.
 * A node dies when every reference to it comes from the capture's nodes
 * that themselves go: those that die, and those stored by the run that drop
 * their sources after it (the api forgets an assigned update's history).
 * The capture's order puts every node after its sources, so one sweep from
 * the last node back counts, for each node, the references that go. A user's
 * handle, a lazy node outside the capture that reads the leaf (a view kept
 * of the old moment), a forward node that stays (the loss, held, keeps the
 * parameters it read), or a second reference to the buffer all keep the
 * buffer where it is. */
#include "jit/donate.h"

#include <stdlib.h>
#include <string.h>

static int64_t index_of(const graph_node *n) { return (int64_t)(intptr_t)n->scratch - 1; }

/* Whether instruction i of k depends on a load of buffer buf (seen: the
 * instructions visited, one flag each). */
static bool depends_on_load(const lower_kernel *k, int i, int buf, bool *seen) {
    if (i < 0 || seen[i])
        return false;
    seen[i] = true;
    const lower_ins *x = &k->ins[i];
    if (x->op == UOP_LOAD && x->buf == buf)
        return true;
    return depends_on_load(k, x->a, buf, seen) || depends_on_load(k, x->b, buf, seen) ||
           depends_on_load(k, x->c, buf, seen);
}

/* Whether kernel k reads its input `in` only at its store index, unmasked,
 * and output o's value depends on that read: then every lane's store of o
 * follows its load of the input by data dependence, whatever the compiler
 * may reorder between pointers it was told do not alias. The input and the
 * output hold as many elements of one dtype. */
static bool reads_in_place(const lower_kernel *k, int in, int o, const graph_node *leaf,
                           const graph_node *out) {
    if (leaf->dtype != out->dtype || graph_numel(leaf) != graph_numel(out) || !leaf->buf)
        return false;
    int buf = k->nouts + in;
    bool read = false;
    for (int i = 0; i < k->nins; i++) {
        const lower_ins *x = &k->ins[i];
        if (x->op != UOP_LOAD || x->buf != buf)
            continue;
        if (x->a != k->store || x->b >= 0)
            return false;
        read = true;
    }
    if (!read)
        return false;
    bool *seen = calloc((size_t)k->nins, sizeof *seen);
    bool dep = seen && depends_on_load(k, k->results[o], k->nouts + in, seen);
    free(seen);
    return dep;
}

/* Whether x is read by a kernel that shares or hands over its buffer
 * rather than reading it at its own time: an alias (a reshape whose output
 * is x's buffer, read by later kernels that last[] does not count as x's
 * readers) or a collective (held until its result is needed). */
static bool shared_by_kernel(const lower_program *p, int64_t *const *inputs, int64_t x) {
    for (int i = 0; i < p->nkernels; i++)
        if (p->kernels[i].kind == LOWER_COLLECTIVE || p->kernels[i].kind == LOWER_ALIAS)
            for (int in = 0; in < p->kernels[i].ninputs; in++)
                if (inputs[i][in] == x)
                    return true;
    return false;
}

bool jit_donations_plan(jit_donations *dn, const lower_program *p, const graph_capture *cap,
                        int64_t *const *outs, int64_t *const *inputs, const int *last) {
    memset(dn, 0, sizeof *dn);
    int cap_d = 0;
    for (int i = 0; i < p->nkernels; i++) {
        const lower_kernel *k = &p->kernels[i];
        if (k->kind != LOWER_ELEMENTWISE || k->region)
            continue;
        bool taken[64] = {false}; /* outputs already given a leaf */
        for (int in = 0; in < k->ninputs; in++) {
            int64_t x = inputs[i][in];
            if (x < cap->npending || last[x] != i || shared_by_kernel(p, inputs, x))
                continue;
            for (int o = 0; o < k->nouts && o < 64; o++) {
                if (taken[o] || !reads_in_place(k, in, o, cap->nodes[x], cap->nodes[outs[i][o]]))
                    continue;
                if (dn->n == cap_d) {
                    cap_d = cap_d ? 2 * cap_d : 16;
                    jit_donation *d = realloc(dn->d, sizeof *d * (size_t)cap_d);
                    if (!d) {
                        jit_donations_free(dn);
                        return false;
                    }
                    dn->d = d;
                }
                dn->d[dn->n++] = (jit_donation){i, o, x};
                taken[o] = true;
                break;
            }
        }
    }
    if (!dn->n)
        return true;
    /* the structure the run's sweep walks */
    int64_t np = dn->npending = cap->npending, edges = 0;
    for (int64_t i = 0; i < np; i++)
        edges += cap->nodes[i]->nsrc;
    dn->src_off = malloc(sizeof *dn->src_off * ((size_t)np + 1));
    dn->src_idx = malloc(sizeof *dn->src_idx * (edges > 0 ? (size_t)edges : 1));
    dn->stored = calloc(np > 0 ? (size_t)np : 1, sizeof *dn->stored);
    if (!dn->src_off || !dn->src_idx || !dn->stored) {
        jit_donations_free(dn);
        return false;
    }
    int64_t e = 0;
    for (int64_t i = 0; i < np; i++) {
        dn->src_off[i] = e;
        const graph_node *x = cap->nodes[i];
        for (int s = 0; s < x->nsrc; s++)
            dn->src_idx[e++] = index_of(x->src[s]);
    }
    dn->src_off[np] = e;
    for (int i = 0; i < p->nkernels; i++)
        for (int o = 0; o < p->kernels[i].nouts; o++)
            if (outs[i][o] < np)
                dn->stored[outs[i][o]] = true;
    return true;
}

void jit_donations_free(jit_donations *dn) {
    free(dn->d);
    free(dn->src_off);
    free(dn->src_idx);
    free(dn->stored);
    memset(dn, 0, sizeof *dn);
}

bool jit_donations_pick(const jit_donations *dn, const graph_capture *cap, const bool *forgets,
                        bool *pick) {
    for (int j = 0; j < dn->n; j++)
        pick[j] = false;
    if (!dn->n)
        return true;
    int64_t total = cap->npending + cap->nleaves;
    /* gone[x]: the references to node x that go with the run */
    int64_t *gone = calloc((size_t)total, sizeof *gone);
    if (!gone)
        return false;
    for (int64_t i = dn->npending - 1; i >= 0; i--) {
        const graph_node *x = cap->nodes[i];
        bool goes = (dn->stored[i] && forgets && forgets[i]) || x->refs == gone[i];
        if (goes)
            for (int64_t e = dn->src_off[i]; e < dn->src_off[i + 1]; e++)
                gone[dn->src_idx[e]]++;
    }
    for (int j = 0; j < dn->n; j++) {
        const graph_node *leaf = cap->nodes[dn->d[j].leaf];
        pick[j] = leaf->refs == gone[dn->d[j].leaf] && leaf->buf && leaf->buf->refs == 1;
    }
    free(gone);
    return true;
}
