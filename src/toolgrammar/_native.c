/* toolgrammar._native: the vocabulary walks of toolgrammar.engine, in C.
 *
 * A state's mask is the set of tokens whose bytes the byte automaton accepts from that state. The
 * numpy walks (engine.TokenTable.walk_trie / walk_ids) touch every token or every trie node once per
 * state; here the token trie is laid out in preorder and walked depth-first, and a subtree whose
 * prefix the automaton rejects is skipped whole (the way xgrammar and llguidance walk theirs). Inside
 * a tool call most states accept a handful of bytes, so a first visit costs microseconds instead of a
 * pass over 151k tokens.
 *
 * The rest is what first visits and compiles spend their time on around that walk: the trie's layout
 * (trie_build, trie_symbols), the budget bound's token edges (trie_edges) and literal tokens
 * (text_tokens), the tail bound's shortest paths (relax), subset construction (subset), the joins of
 * composed parts (shift_rows), pruning (live_states, reach, compact), minimization (minimize,
 * Hopcroft's) and the canonical numbering after it (bfs_order); and one step of generation, prefix-true
 * masking's pour (pour), and a row's mask write and input check (mask_row, follow_ids). Each has a Python/numpy twin in runtime/token_table.py,
 * runtime/token_grammar.py, runtime/prefix_true.py, automata/subset.py and automata/compose.py that
 * gives the same result (tests/base/test_native.py compares them).
 *
 * No numpy headers: arrays come in through the buffer protocol (C-contiguous, the item sizes checked
 * below), and the caller allocates every output but trie_edges' and subset's (returned as bytes), so nothing here
 * owns memory across calls. Module functions never keep references; all run with the GIL held (they
 * are short).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    int held;
} Buf;

static int get_buf(PyObject *obj, Buf *b, const char *name, Py_ssize_t itemsize, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    b->held = 0;
    if (PyObject_GetBuffer(obj, &b->view, flags) != 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous%s array", name, writable ? " writable" : "");
        return -1;
    }
    b->held = 1;
    if (b->view.itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected %zd-byte items, got %zd", name, itemsize, b->view.itemsize);
        return -1;
    }
    return 0;
}

static void release(Buf *b) {
    if (b->held) {
        PyBuffer_Release(&b->view);
        b->held = 0;
    }
}

#define N(b, T) ((Py_ssize_t)((b).view.len / (Py_ssize_t)sizeof(T)))

/* ------------------------------------------------------------------------------------------------
 * trie_build(flat int16, offsets int64, lengths int32, order int64 (out, n_tokens),
 *            sym int16 (out), depth int32 (out), end int32 (out), leaf int32 (out, n_tokens),
 *            whole uint8 (out)) -> n_nodes
 *
 * Sorts the tokens by their symbols (order), then lays the trie out in preorder: node i has symbol
 * sym[i] at depth depth[i] (0: a child of the root), and its subtree is i .. end[i]-1. leaf[t] is the
 * node that ends token t. whole[i] = 1 when every token of i's subtree is, from node i on, whole
 * well-formed UTF-8 characters (RFC 3629; ASCII included, no control symbol). sym/depth/end/whole need
 * room for sum(lengths) nodes (the most there can be).
 * ---------------------------------------------------------------------------------------------- */

/* The length of the well-formed UTF-8 character at s[0] (RFC 3629, as automaton._UTF8_PATTERNS spells it),
 * or 0: a continuation byte, a bad lead, a short, overlong or surrogate sequence, a control symbol. */
static int utf8_char(const int16_t *s, int32_t avail) {
    int16_t b = s[0];
    if (b < 0 || b > 0xFF) return 0;
    if (b < 0x80) return 1;
    int m;
    int16_t lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (b >= 0xC2 && b <= 0xDF) m = 2;
    else if (b == 0xE0) { m = 3; lo = 0xA0; }
    else if (b >= 0xE1 && b <= 0xEC) m = 3;
    else if (b == 0xED) { m = 3; hi = 0x9F; }
    else if (b >= 0xEE && b <= 0xEF) m = 3;
    else if (b == 0xF0) { m = 4; lo = 0x90; }
    else if (b >= 0xF1 && b <= 0xF3) m = 4;
    else if (b == 0xF4) { m = 4; hi = 0x8F; }
    else return 0;
    if (avail < m) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int k = 2; k < m; k++)
        if (s[k] < 0x80 || s[k] > 0xBF) return 0;
    return m;
}

/* Whether every well-formed multi-byte character leads from q back to q (engine._utf8_returns). */
static const int16_t UTF8_RANGES[8][4][2] = {
    {{0xC2, 0xDF}, {0x80, 0xBF}, {0, -1}, {0, -1}},
    {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}, {0, -1}},
    {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}, {0, -1}},
    {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}, {0, -1}},
    {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}, {0, -1}},
    {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
};

static int utf8_returns(const int32_t *T, Py_ssize_t k, Py_ssize_t rows, int32_t q) {
    int32_t cur[64], nxt[64];
    for (int p = 0; p < 8; p++) {
        int nc = 1;
        cur[0] = q;
        for (int pos = 0; pos < 4 && UTF8_RANGES[p][pos][1] >= 0; pos++) {
            int nn = 0;
            for (int c = 0; c < nc; c++) {
                for (int b = UTF8_RANGES[p][pos][0]; b <= UTF8_RANGES[p][pos][1]; b++) {
                    int32_t x = T[(Py_ssize_t)cur[c] * k + b];
                    if (x < 0 || x >= rows) return 0;
                    int seen = 0;
                    for (int j = 0; j < nn; j++) if (nxt[j] == x) { seen = 1; break; }
                    if (!seen) {
                        if (nn == 64) return 0; /* more distinct states than a text state has: say no */
                        nxt[nn++] = x;
                    }
                }
            }
            memcpy(cur, nxt, sizeof(int32_t) * (size_t)nn);
            nc = nn;
        }
        if (nc != 1 || cur[0] != q) return 0;
    }
    return 1;
}

static const int16_t *g_flat;
static const int64_t *g_offsets;
static const int32_t *g_lengths;

static int cmp_tokens(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    const int16_t *p = g_flat + g_offsets[x], *q = g_flat + g_offsets[y];
    int32_t lx = g_lengths[x], ly = g_lengths[y];
    int32_t m = lx < ly ? lx : ly;
    for (int32_t k = 0; k < m; k++) {
        if (p[k] != q[k]) return p[k] < q[k] ? -1 : 1;
    }
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : (x > y ? 1 : 0); /* equal symbols: by id, so the order is total */
}

static PyObject *trie_build(PyObject *self, PyObject *args) {
    PyObject *o_flat, *o_off, *o_len, *o_order, *o_sym, *o_depth, *o_end, *o_leaf, *o_whole;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &o_flat, &o_off, &o_len, &o_order, &o_sym, &o_depth, &o_end, &o_leaf,
                          &o_whole))
        return NULL;
    Buf flat = {0}, off = {0}, len = {0}, order = {0}, sym = {0}, depth = {0}, end = {0}, leaf = {0}, whole = {0};
    PyObject *result = NULL;
    int32_t *path = NULL;
    uint8_t *valid = NULL;
    if (get_buf(o_flat, &flat, "flat", 2, 0) || get_buf(o_off, &off, "offsets", 8, 0) ||
        get_buf(o_len, &len, "lengths", 4, 0) || get_buf(o_order, &order, "order", 8, 1) ||
        get_buf(o_sym, &sym, "sym", 2, 1) || get_buf(o_depth, &depth, "depth", 4, 1) ||
        get_buf(o_end, &end, "end", 4, 1) || get_buf(o_leaf, &leaf, "leaf", 4, 1) ||
        get_buf(o_whole, &whole, "whole", 1, 1))
        goto done;
    Py_ssize_t n = N(len, int32_t);
    const int16_t *F = flat.view.buf;
    const int64_t *O = off.view.buf;
    const int32_t *L = len.view.buf;
    if (N(off, int64_t) != n || N(order, int64_t) != n || N(leaf, int32_t) != n) {
        PyErr_SetString(PyExc_ValueError, "offsets, order and leaf must have one entry per token");
        goto done;
    }
    Py_ssize_t total = 0;
    int32_t maxlen = 0;
    for (Py_ssize_t t = 0; t < n; t++) {
        if (L[t] <= 0 || O[t] < 0 || O[t] + L[t] > N(flat, int16_t)) {
            PyErr_Format(PyExc_ValueError, "token %zd: length %d at offset %lld lies outside the symbols", t, L[t],
                         (long long)O[t]);
            goto done;
        }
        total += L[t];
        if (L[t] > maxlen) maxlen = L[t];
    }
    if (N(sym, int16_t) < total || N(depth, int32_t) < total || N(end, int32_t) < total ||
        N(whole, uint8_t) < total) {
        PyErr_SetString(PyExc_ValueError, "sym, depth, end and whole need room for sum(lengths) nodes");
        goto done;
    }
    int64_t *ord = order.view.buf;
    int16_t *S = sym.view.buf;
    int32_t *D = depth.view.buf, *E = end.view.buf, *LF = leaf.view.buf;
    for (Py_ssize_t t = 0; t < n; t++) ord[t] = t;
    g_flat = F;
    g_offsets = O;
    g_lengths = L;
    qsort(ord, (size_t)n, sizeof(int64_t), cmp_tokens);
    path = malloc(sizeof(int32_t) * (size_t)(maxlen + 1));
    valid = malloc((size_t)(maxlen + 1));
    uint8_t *W = whole.view.buf;
    if (!path || !valid) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t nodes = 0;
    int32_t path_len = 0; /* nodes on the path of the previous token */
    int64_t prev = -1;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t t = ord[k];
        const int16_t *s = F + O[t];
        int32_t l = L[t], lcp = 0;
        if (prev >= 0) {
            const int16_t *p = F + O[prev];
            int32_t m = l < L[prev] ? l : L[prev];
            while (lcp < m && p[lcp] == s[lcp]) lcp++;
        }
        if (lcp > path_len) lcp = path_len;
        for (int32_t d = lcp; d < l; d++) {
            S[nodes] = s[d];
            D[nodes] = d;
            W[nodes] = 1;
            path[d] = (int32_t)nodes;
            nodes++;
        }
        path_len = l;
        valid[l] = 1;
        for (int32_t d = l - 1; d >= 0; d--) {
            int m = utf8_char(s + d, l - d);
            valid[d] = m > 0 && valid[d + m];
        }
        for (int32_t d = 0; d < l; d++) W[path[d]] &= valid[d];
        LF[t] = path[l - 1];
        prev = t;
    }
    /* end[i]: the first later node no deeper than i (a stack of open subtrees, by depth). */
    int32_t *stack = path; /* reused: at most maxlen nodes are open at once */
    int32_t top = 0;
    for (Py_ssize_t i = 0; i < nodes; i++) {
        while (top > 0 && D[stack[top - 1]] >= D[i]) E[stack[--top]] = (int32_t)i;
        stack[top++] = (int32_t)i;
    }
    while (top > 0) E[stack[--top]] = (int32_t)nodes;
    result = PyLong_FromSsize_t(nodes);
done:
    free(path);
    free(valid);
    release(&whole);
    release(&flat); release(&off); release(&len); release(&order);
    release(&sym); release(&depth); release(&end); release(&leaf);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * trie_symbols(sym, end, sub_low0 uint64 (out), sub_low1 uint64 (out), sub_high uint8 (out))
 *
 * Per node, the symbols of its subtree (itself included): ASCII ones as two 64-bit sets, and whether
 * any other symbol (a byte >= 128, a control token) is among them.
 * ---------------------------------------------------------------------------------------------- */

static PyObject *trie_symbols(PyObject *self, PyObject *args) {
    PyObject *o_sym, *o_end, *o_s0, *o_s1, *o_sh;
    if (!PyArg_ParseTuple(args, "OOOOO", &o_sym, &o_end, &o_s0, &o_s1, &o_sh)) return NULL;
    Buf sym = {0}, end = {0}, s0 = {0}, s1 = {0}, sh = {0};
    PyObject *result = NULL;
    if (get_buf(o_sym, &sym, "sym", 2, 0) || get_buf(o_end, &end, "end", 4, 0) ||
        get_buf(o_s0, &s0, "sub_low0", 8, 1) || get_buf(o_s1, &s1, "sub_low1", 8, 1) ||
        get_buf(o_sh, &sh, "sub_high", 1, 1))
        goto done;
    Py_ssize_t nodes = N(sym, int16_t);
    if (N(end, int32_t) != nodes || N(s0, uint64_t) != nodes || N(s1, uint64_t) != nodes ||
        N(sh, uint8_t) != nodes) {
        PyErr_SetString(PyExc_ValueError, "trie arrays and outputs disagree in size");
        goto done;
    }
    const int16_t *S = sym.view.buf;
    const int32_t *E = end.view.buf;
    uint64_t *A = s0.view.buf, *B = s1.view.buf;
    uint8_t *H = sh.view.buf;
    for (Py_ssize_t i = nodes - 1; i >= 0; i--) {
        int16_t x = S[i];
        uint64_t a = x >= 0 && x < 64 ? (uint64_t)1 << x : 0;
        uint64_t b = x >= 64 && x < 128 ? (uint64_t)1 << (x - 64) : 0;
        uint8_t h = x < 0 || x >= 128;
        if (E[i] <= i || E[i] > nodes) {
            PyErr_Format(PyExc_ValueError, "trie node %zd: subtree end %d out of order", i, E[i]);
            goto done;
        }
        for (Py_ssize_t c = i + 1; c < E[i]; c = E[c]) { /* the children, already summed up */
            a |= A[c];
            b |= B[c];
            h |= H[c];
        }
        A[i] = a;
        B[i] = b;
        H[i] = h;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    release(&sym); release(&end); release(&s0); release(&s1); release(&sh);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * trie_walk(transitions int32 (rows, n_symbols), state, max_depth, sym, depth, end, tok_start int32 (nodes+1),
 *           toks int64, dense int32 (out, n_tokens, prefilled with -1), ids int64 (out), states int32 (out))
 *   -> how many tokens the automaton accepts from ``state``
 *
 * Depth-first over the preorder trie: a node whose symbol is rejected from its parent's state is
 * skipped with its subtree. Each accepted token t (tokens at node i: toks[tok_start[i]:tok_start[i+1]])
 * gets dense[t] = its end state, and is appended to ids/states in preorder.
 * ---------------------------------------------------------------------------------------------- */

static PyObject *trie_walk(PyObject *self, PyObject *args) {
    PyObject *o_t, *o_sym, *o_depth, *o_end, *o_ts, *o_toks, *o_dense, *o_ids, *o_states;
    Py_ssize_t n_symbols, state, maxdepth;
    if (!PyArg_ParseTuple(args, "OnnnOOOOOOOO", &o_t, &n_symbols, &state, &maxdepth, &o_sym, &o_depth, &o_end, &o_ts, &o_toks,
                          &o_dense, &o_ids, &o_states))
        return NULL;
    Buf t = {0}, sym = {0}, depth = {0}, end = {0}, ts = {0}, toks = {0}, dense = {0}, ids = {0}, states = {0};
    PyObject *result = NULL;
    int32_t *stack = NULL;
    if (get_buf(o_t, &t, "transitions", 4, 0) || get_buf(o_sym, &sym, "sym", 2, 0) ||
        get_buf(o_depth, &depth, "depth", 4, 0) || get_buf(o_end, &end, "end", 4, 0) ||
        get_buf(o_ts, &ts, "tok_start", 4, 0) || get_buf(o_toks, &toks, "toks", 8, 0) ||
        get_buf(o_dense, &dense, "dense", 4, 1) || get_buf(o_ids, &ids, "ids", 8, 1) ||
        get_buf(o_states, &states, "states", 4, 1))
        goto done;
    Py_ssize_t rows = n_symbols > 0 ? N(t, int32_t) / n_symbols : 0;
    Py_ssize_t nodes = N(sym, int16_t), n_tok = N(toks, int64_t);
    if (n_symbols <= 0 || rows * n_symbols != N(t, int32_t)) {
        PyErr_SetString(PyExc_ValueError, "transitions: not a (rows, n_symbols) table");
        goto done;
    }
    if (state < 0 || state >= rows) {
        PyErr_Format(PyExc_ValueError, "state %zd is not one of the %zd rows", state, rows);
        goto done;
    }
    if (N(depth, int32_t) != nodes || N(end, int32_t) != nodes || N(ts, int32_t) != nodes + 1 ||
        N(dense, int32_t) != n_tok || N(ids, int64_t) < n_tok || N(states, int32_t) < n_tok) {
        PyErr_SetString(PyExc_ValueError, "trie arrays and outputs disagree in size");
        goto done;
    }
    const int32_t *T = t.view.buf, *D = depth.view.buf, *E = end.view.buf, *TS = ts.view.buf;
    const int16_t *S = sym.view.buf;
    const int64_t *K = toks.view.buf;
    int32_t *DN = dense.view.buf, *OS = states.view.buf;
    int64_t *OI = ids.view.buf;
    if (maxdepth < 0) {
        PyErr_SetString(PyExc_ValueError, "max_depth must be >= 0");
        goto done;
    }
    stack = malloc(sizeof(int32_t) * (size_t)(maxdepth + 2));
    if (!stack) {
        PyErr_NoMemory();
        goto done;
    }
    stack[0] = (int32_t)state;
    Py_ssize_t k = 0, i = 0;
    while (i < nodes) {
        int32_t d = D[i];
        int32_t sym_i = S[i];
        if (sym_i < 0 || sym_i >= n_symbols || d < 0 || d > maxdepth) {
            PyErr_Format(PyExc_ValueError, "trie node %zd: symbol %d or depth %d outside the table", i, sym_i, d);
            goto done;
        }
        int32_t ns = T[(Py_ssize_t)stack[d] * n_symbols + sym_i];
        if (ns < 0 || ns >= rows) {
            i = E[i] > i ? E[i] : i + 1;
            continue;
        }
        stack[d + 1] = ns;
        for (int32_t j = TS[i]; j < TS[i + 1]; j++) {
            int64_t tok = K[j];
            DN[tok] = ns;
            OI[k] = tok;
            OS[k] = ns;
            k++;
        }
        i++;
    }
    result = PyLong_FromSsize_t(k);
done:
    free(stack);
    release(&t); release(&sym); release(&depth); release(&end); release(&ts);
    release(&toks); release(&dense); release(&ids); release(&states);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * trie_mask(transitions, n_symbols, state, max_depth, sym, depth, end, tok_start, toks, dist int32, inf, trap,
 *           loop_low0 uint64 (rows), loop_low1, sub_low0 uint64 (nodes), sub_low1, sub_high uint8, whole uint8,
 *           utf8 int8 (rows, in/out: -1 not known yet), dense (0/1), ok uint8 (out, n_tokens: zeroed, or
 *           all 1 when dense), ids int64 (out), trapped int64 (out)[, exits int32 (m, 3), has_pure,
 *           record int32 (out, cap, 3)]) -> (allowed, max_need, n_trapped, n_recorded, has_pure)
 *
 * trie_walk's walk with the mask made on the way: a token is allowed when its end state can still leave
 * every block (dist[end] < inf); ok[t] = 1 and ids[:allowed] lists them (trie order); max_need is the
 * largest dist[end] among them (0 if none). Tokens ending in ``trap`` (a tail not built yet) are neither
 * allowed nor dropped silently: they are listed in trapped[:n_trapped] for the caller to build. ids lists
 * at most n_tokens / 4 + 1 tokens (past that, ok is what the caller reads). When dense, ok starts at 1 and
 * only the tokens left out are written (a text state allows nearly everything), and ids lists those
 * instead (trie order, up to the same count).
 *
 * Text states (free text, inside a string) accept nearly every token and most bytes loop on them, so a
 * subtree whose symbols (sub_low0/sub_low1: ASCII bits; sub_high: anything else) all loop on the state
 * reached at its root (loop_low0/loop_low1, per state) ends every one of its tokens in that state: its
 * tokens (a contiguous run of toks) are taken at once, without walking it. Non-ASCII subtrees too, when
 * their tokens are whole UTF-8 characters from the root on (whole) and every character leads from the
 * state back to it (utf8: computed once per state, kept by the caller).
 *
 * Exits. A dense text state q (utf8[q] = 1, dist[q] < inf, not the trap) walks most of the trie along
 * paths that never leave it: symbols it loops on and whole UTF-8 characters, which lead back to q in
 * every such state. What the walk does there depends only on q's loop words; only the exits differ
 * between states (a string's closing quote leads to what follows this string). With ``record``, the
 * walk writes each exit as (node, end, prefix): the walk of nodes node..end-1 starts in the state the
 * bytes of prefix lead to from q (a partial UTF-8 character: bits 0-23 the bytes, bits 24-25 how many);
 * end is node + 1 for a node whose tokens end inside a character (their need is q's state's own), the
 * end of the node's subtree otherwise; has_pure says whether some token ended in q on the way. With
 * ``exits`` (recorded by a state with the same loop words), only those ranges are walked, ok starting
 * at 1: every other token is allowed with need dist[q]. n_recorded is -1 where nothing was recorded
 * (not asked, a state that does not qualify, more exits than record holds).
 * ---------------------------------------------------------------------------------------------- */

typedef struct {
    const int32_t *T, *D, *E, *TS, *DI;
    const int16_t *S;
    const int64_t *K;
    const uint64_t *L0, *L1, *S0, *S1;
    const uint8_t *SH, *WH;
    int8_t *U8;
    uint8_t *OK;
    int64_t *OI, *TR;
    Py_ssize_t n_symbols, rows, n_dist, nodes, maxdepth, id_cap;
    int64_t inf;
    int32_t trap;
    int dense;
    int32_t *stack;
    Py_ssize_t k, n_trapped, rejected;
    int32_t max_need;
    /* recording (rec != NULL): the path's standing per depth, and where exits go */
    int8_t *pure;    /* per depth: 1 in q at a character's end, 2 inside a character, 0 left (an exit) */
    int32_t *partial; /* per depth: the partial character's bytes so far (bits 0-23) and count (24-25) */
    int8_t *need_left; /* per depth: continuation bytes still to come inside the character */
    int8_t *pattern;  /* per depth: the UTF8_RANGES row of the character being read */
    int32_t *rec;
    Py_ssize_t rec_cap, n_rec;
    int rec_overflow, has_pure;
} Walk;

static void record_exit(Walk *w, Py_ssize_t node, Py_ssize_t end, int32_t prefix) {
    if (w->n_rec >= w->rec_cap) {
        w->rec_overflow = 1;
        return;
    }
    w->rec[3 * w->n_rec] = (int32_t)node;
    w->rec[3 * w->n_rec + 1] = (int32_t)end;
    w->rec[3 * w->n_rec + 2] = prefix;
    w->n_rec++;
}

static int utf8_pattern_of(int32_t lead) {
    for (int p = 0; p < 8; p++)
        if (lead >= UTF8_RANGES[p][0][0] && lead <= UTF8_RANGES[p][0][1]) return p;
    return -1;
}

/* Walks nodes i0..i1-1 (i0's depth holds its state on the stack); returns -1 on a bad node. */
static int walk_nodes(Walk *w, Py_ssize_t i0, Py_ssize_t i1) {
    const int32_t *T = w->T, *D = w->D, *E = w->E, *TS = w->TS, *DI = w->DI;
    const int16_t *S = w->S;
    const int64_t *K = w->K;
    int dense = w->dense;
    Py_ssize_t i = i0;
#define TAKE(j)                                                                                             \
    do {                                                                                                    \
        if (!dense) {                                                                                       \
            w->OK[K[j]] = 1;                                                                                \
            if (w->k < w->id_cap) w->OI[w->k] = K[j];                                                       \
            w->k++;                                                                                         \
        }                                                                                                   \
    } while (0)
#define DROP(j)                                                                                             \
    do {                                                                                                    \
        if (dense) {                                                                                        \
            w->OK[K[j]] = 0;                                                                                \
            if (w->rejected < w->id_cap) w->OI[w->rejected] = K[j];                                         \
            w->rejected++;                                                                                  \
        }                                                                                                   \
    } while (0)
    while (i < i1) {
        int32_t d = D[i];
        int32_t sym_i = S[i];
        if (sym_i < 0 || sym_i >= w->n_symbols || d < 0 || d > w->maxdepth) {
            PyErr_Format(PyExc_ValueError, "trie node %zd: symbol %d or depth %d outside the table", i, sym_i, d);
            return -1;
        }
        int32_t q = w->stack[d];
        int32_t skip = E[i] > i ? E[i] : (int32_t)(i + 1);
        int loops_all = q != w->trap && (w->S0[i] & ~w->L0[q]) == 0 && (w->S1[i] & ~w->L1[q]) == 0;
        if (loops_all && w->SH[i]) {
            if (!w->WH[i]) loops_all = 0;
            else {
                if (w->U8[q] < 0) w->U8[q] = (int8_t)utf8_returns(T, w->n_symbols, w->rows, q);
                loops_all = w->U8[q];
            }
        }
        int8_t standing = w->rec ? w->pure[d] : 0;
        if (loops_all) {
            /* the whole subtree loops on q: every token in it ends there */
            if (standing == 1) w->has_pure = 1;
            else if (standing == 2) record_exit(w, i, skip, w->partial[d]);
            if (q < w->n_dist && DI[q] < w->inf) {
                if (DI[q] > w->max_need) w->max_need = DI[q];
                if (!dense)
                    for (int32_t j = TS[i]; j < TS[skip]; j++) TAKE(j);
            } else if (dense) {
                for (int32_t j = TS[i]; j < TS[skip]; j++) DROP(j);
            }
            i = skip;
            continue;
        }
        int32_t ns = T[(Py_ssize_t)q * w->n_symbols + sym_i];
        if (w->rec && !standing) w->pure[d + 1] = 0; /* inside an exit: nothing below is recorded */
        if (standing) {
            /* Where does this node leave the path standing? 1: back in q, 2: inside a character, 0: an exit. */
            int8_t next = 0;
            if (standing == 1) {
                if (sym_i < 128 && ((sym_i < 64 ? w->L0[q] >> sym_i : w->L1[q] >> (sym_i - 64)) & 1)) next = 1;
                else if (sym_i >= 0xC2 && sym_i <= 0xF4) { /* a lead byte (utf8_pattern_of finds its row) */
                    int p = utf8_pattern_of(sym_i);
                    next = 2;
                    w->pattern[d + 1] = (int8_t)p;
                    w->need_left[d + 1] = (int8_t)(p == 0 ? 1 : (p < 5 ? 2 : 3));
                    w->partial[d + 1] = (1 << 24) | sym_i;
                }
            } else {
                int p = w->pattern[d];
                int pos = (w->partial[d] >> 24) & 3; /* bytes read so far: the range of this one */
                if (sym_i >= UTF8_RANGES[p][pos][0] && sym_i <= UTF8_RANGES[p][pos][1] && ns >= 0 &&
                    ns < w->rows && ns != w->trap) {
                    if (w->need_left[d] == 1) next = 1;
                    else {
                        next = 2;
                        w->pattern[d + 1] = (int8_t)p;
                        w->need_left[d + 1] = (int8_t)(w->need_left[d] - 1);
                        w->partial[d + 1] = ((pos + 1) << 24) | (w->partial[d] & 0xFFFFFF) | (sym_i << (8 * pos));
                    }
                }
            }
            if (next == 0) {
                record_exit(w, i, skip, standing == 2 ? w->partial[d] : 0);
            } else {
                if (next == 2 && TS[i] < TS[i + 1]) record_exit(w, i, i + 1, standing == 2 ? w->partial[d] : 0);
                if (next == 1 && TS[i] < TS[i + 1]) w->has_pure = 1;
            }
            w->pure[d + 1] = next;
        }
        if (ns < 0 || ns >= w->rows) {
            if (dense)
                for (int32_t j = TS[i]; j < TS[skip]; j++) DROP(j);
            i = skip;
            continue;
        }
        w->stack[d + 1] = ns;
        int32_t a = TS[i], b = TS[i + 1];
        if (a < b) {
            if (ns == w->trap) {
                for (int32_t j = a; j < b; j++) {
                    w->TR[w->n_trapped++] = K[j];
                    DROP(j);
                }
            } else if (ns < w->n_dist && DI[ns] < w->inf) {
                int32_t need = DI[ns];
                if (need > w->max_need) w->max_need = need;
                if (!dense)
                    for (int32_t j = a; j < b; j++) TAKE(j);
            } else if (dense) {
                for (int32_t j = a; j < b; j++) DROP(j);
            }
        }
        i++;
    }
#undef TAKE
#undef DROP
    return 0;
}

static PyObject *trie_mask(PyObject *self, PyObject *args) {
    PyObject *o_t, *o_sym, *o_depth, *o_end, *o_ts, *o_toks, *o_dist, *o_ok, *o_ids, *o_trapped;
    PyObject *o_l0, *o_l1, *o_s0, *o_s1, *o_sh, *o_wh, *o_u8, *o_exits = Py_None, *o_rec = Py_None;
    Py_ssize_t n_symbols, state, maxdepth, inf, trap, dense, exits_pure = 0;
    if (!PyArg_ParseTuple(args, "OnnnOOOOOOnnOOOOOOOnOOO|OnO", &o_t, &n_symbols, &state, &maxdepth, &o_sym,
                          &o_depth, &o_end, &o_ts, &o_toks, &o_dist, &inf, &trap, &o_l0, &o_l1, &o_s0, &o_s1, &o_sh,
                          &o_wh, &o_u8, &dense, &o_ok, &o_ids, &o_trapped, &o_exits, &exits_pure, &o_rec))
        return NULL;
    Buf t = {0}, sym = {0}, depth = {0}, end = {0}, ts = {0}, toks = {0}, dist = {0}, ok = {0}, ids = {0},
        trapped = {0}, l0 = {0}, l1 = {0}, s0 = {0}, s1 = {0}, sh = {0}, wh = {0}, u8 = {0}, ex = {0}, rc = {0};
    PyObject *result = NULL;
    Walk w;
    memset(&w, 0, sizeof(w));
    void *mem = NULL;
    if (get_buf(o_t, &t, "transitions", 4, 0) || get_buf(o_sym, &sym, "sym", 2, 0) ||
        get_buf(o_depth, &depth, "depth", 4, 0) || get_buf(o_end, &end, "end", 4, 0) ||
        get_buf(o_ts, &ts, "tok_start", 4, 0) || get_buf(o_toks, &toks, "toks", 8, 0) ||
        get_buf(o_dist, &dist, "dist", 4, 0) || get_buf(o_ok, &ok, "ok", 1, 1) || get_buf(o_ids, &ids, "ids", 8, 1) ||
        get_buf(o_trapped, &trapped, "trapped", 8, 1) || get_buf(o_l0, &l0, "loop_low0", 8, 0) ||
        get_buf(o_l1, &l1, "loop_low1", 8, 0) || get_buf(o_s0, &s0, "sub_low0", 8, 0) ||
        get_buf(o_s1, &s1, "sub_low1", 8, 0) || get_buf(o_sh, &sh, "sub_high", 1, 0) ||
        get_buf(o_wh, &wh, "whole", 1, 0) || get_buf(o_u8, &u8, "utf8", 1, 1))
        goto done;
    if (o_exits != Py_None && get_buf(o_exits, &ex, "exits", 4, 0)) goto done;
    if (o_rec != Py_None && get_buf(o_rec, &rc, "record", 4, 1)) goto done;
    Py_ssize_t rows = n_symbols > 0 ? N(t, int32_t) / n_symbols : 0;
    Py_ssize_t nodes = N(sym, int16_t), n_tok = N(toks, int64_t);
    if (n_symbols <= 0 || rows * n_symbols != N(t, int32_t)) {
        PyErr_SetString(PyExc_ValueError, "transitions: not a (rows, n_symbols) table");
        goto done;
    }
    if (state < 0 || state >= rows || maxdepth < 0) {
        PyErr_Format(PyExc_ValueError, "state %zd is not one of the %zd rows (or max_depth < 0)", state, rows);
        goto done;
    }
    if (N(depth, int32_t) != nodes || N(end, int32_t) != nodes || N(ts, int32_t) != nodes + 1 ||
        N(ok, uint8_t) != n_tok || N(ids, int64_t) < n_tok || N(trapped, int64_t) < n_tok ||
        N(dist, int32_t) < rows - 1 || N(l0, uint64_t) != rows || N(l1, uint64_t) != rows ||
        N(s0, uint64_t) != nodes || N(s1, uint64_t) != nodes || N(sh, uint8_t) != nodes ||
        N(wh, uint8_t) != nodes || N(u8, int8_t) != rows || (ex.held && N(ex, int32_t) % 3) ||
        (rc.held && N(rc, int32_t) % 3)) {
        PyErr_SetString(PyExc_ValueError, "trie arrays, loops, dist, exits and outputs disagree in size");
        goto done;
    }
    w.T = t.view.buf; w.D = depth.view.buf; w.E = end.view.buf; w.TS = ts.view.buf; w.DI = dist.view.buf;
    w.S = sym.view.buf; w.K = toks.view.buf;
    w.L0 = l0.view.buf; w.L1 = l1.view.buf; w.S0 = s0.view.buf; w.S1 = s1.view.buf;
    w.SH = sh.view.buf; w.WH = wh.view.buf; w.U8 = u8.view.buf;
    w.OK = ok.view.buf; w.OI = ids.view.buf; w.TR = trapped.view.buf;
    w.n_symbols = n_symbols; w.rows = rows; w.n_dist = N(dist, int32_t); w.nodes = nodes; w.maxdepth = maxdepth;
    /* ids past a quarter of the vocabulary are not listed: the caller reads ok then (a text state) */
    w.id_cap = n_tok / 4 + 1;
    w.inf = inf; w.trap = (int32_t)trap; w.dense = (int)dense;
    /* one block: the stack, and the recording's per-depth arrays */
    size_t depth_n = (size_t)(maxdepth + 2);
    mem = malloc(depth_n * (sizeof(int32_t) * 2 + 3));
    if (!mem) {
        PyErr_NoMemory();
        goto done;
    }
    w.stack = mem;
    w.partial = w.stack + depth_n;
    w.pure = (int8_t *)(w.partial + depth_n);
    w.need_left = w.pure + depth_n;
    w.pattern = w.need_left + depth_n;
    w.stack[0] = (int32_t)state;
    /* The exits apply to a dense text state in which UTF-8 characters return (see above). */
    int32_t q = (int32_t)state;
    int text = dense && q != w.trap && q < w.n_dist && w.DI[q] < inf;
    if (text) {
        if (w.U8[q] < 0) w.U8[q] = (int8_t)utf8_returns(w.T, n_symbols, rows, q);
        text = w.U8[q] == 1;
    }
    Py_ssize_t n_recorded = -1;
    if (ex.held && text) {
        const int32_t *X = ex.view.buf;
        Py_ssize_t m = N(ex, int32_t) / 3;
        if (exits_pure) w.max_need = w.DI[q];
        for (Py_ssize_t e = 0; e < m; e++) {
            int32_t x = X[3 * e], x_end = X[3 * e + 1], pre = X[3 * e + 2];
            if (x < 0 || x >= nodes || x_end <= x || x_end > nodes) {
                PyErr_Format(PyExc_ValueError, "exit %zd: nodes %d..%d outside the trie", e, x, x_end);
                goto done;
            }
            int32_t st = q;
            int n_pre = (pre >> 24) & 3;
            for (int b = 0; b < n_pre && st >= 0 && st < rows && st != w.trap; b++)
                st = w.T[(Py_ssize_t)st * n_symbols + ((pre >> (8 * b)) & 0xFF)];
            if (st < 0 || st >= rows) {
                for (int32_t j = w.TS[x]; j < w.TS[x_end]; j++) {
                    w.OK[w.K[j]] = 0;
                    if (w.rejected < w.id_cap) w.OI[w.rejected] = w.K[j];
                    w.rejected++;
                }
                continue;
            }
            w.stack[w.D[x]] = st;
            if (walk_nodes(&w, x, x_end) < 0) goto done;
        }
    } else {
        if (rc.held && text) {
            w.rec = rc.view.buf;
            w.rec_cap = N(rc, int32_t) / 3;
            w.pure[0] = 1;
        }
        if (walk_nodes(&w, 0, nodes) < 0) goto done;
        if (w.rec && !w.rec_overflow) n_recorded = w.n_rec;
    }
    if (dense) w.k = n_tok - w.rejected;
    result = Py_BuildValue("ninni", w.k, w.max_need, w.n_trapped, n_recorded, w.has_pure);
done:
    free(mem);
    release(&t); release(&sym); release(&depth); release(&end); release(&ts);
    release(&toks); release(&dist); release(&ok); release(&ids); release(&trapped);
    release(&l0); release(&l1); release(&s0); release(&s1); release(&sh); release(&wh); release(&u8);
    release(&ex); release(&rc);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * minimize(table int32 (n, k): successors, -1 dead; cls int64 (n, in/out): the starting classes) -> classes
 *
 * Hopcroft's partition refinement: the coarsest partition that refines the starting classes and in which
 * states of one class go, column by column, to states of one class (dead is a class of its own: an
 * explicit sink). O(k n log n), where Moore's rounds (automaton._minimize's numpy loop) cost a pass over
 * the table per round and a chain of n states needs n rounds. The partition is unique, so both reach the
 * same one; cls comes back numbered by first appearance (state 0's class is 0).
 * ---------------------------------------------------------------------------------------------- */

static PyObject *minimize(PyObject *self, PyObject *args) {
    PyObject *o_t, *o_cls;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "OnO", &o_t, &k, &o_cls)) return NULL;
    Buf t = {0}, c = {0};
    PyObject *result = NULL;
    int64_t *mem = NULL;
    uint8_t *in_w = NULL;
    if (get_buf(o_t, &t, "table", 4, 0) || get_buf(o_cls, &c, "cls", 8, 1)) goto done;
    Py_ssize_t n = N(c, int64_t);
    if (k <= 0 || N(t, int32_t) != n * k) {
        PyErr_SetString(PyExc_ValueError, "table: not an (n, k) array for n classes");
        goto done;
    }
    const int32_t *T = t.view.buf;
    int64_t *cls = c.view.buf;
    for (Py_ssize_t s = 0; s < n * k; s++) {
        if (T[s] < -1 || T[s] >= n) {
            PyErr_Format(PyExc_ValueError, "table entry %zd: state %d outside 0..%zd", s, T[s], n - 1);
            goto done;
        }
    }
    int64_t m = 0;
    for (Py_ssize_t s = 0; s < n; s++) {
        if (cls[s] < 0 || cls[s] >= n) {
            PyErr_Format(PyExc_ValueError, "cls[%zd] = %lld: starting classes must be numbered 0..n-1", s,
                         (long long)cls[s]);
            goto done;
        }
        if (cls[s] + 1 > m) m = cls[s] + 1;
    }
    int64_t NS = n + 1; /* states and the dead sink (state n) */
    /* One allocation: inverse edges by column (start: k*(NS+1), list: k*NS), the partition (elems, loc,
     * blk: NS each; first, end, mid: NS each), the touched blocks and predecessors (NS each), the
     * worklist (2 * (k*NS + k*(m+1)) entries: every (block, column) enters at most once per split). */
    int64_t wcap = k * NS + k * (m + 1);
    size_t total = (size_t)(k * (NS + 1) + k * NS + 3 * NS + 3 * NS + 2 * NS + 2 * wcap + NS);
    mem = malloc(sizeof(int64_t) * total);
    in_w = calloc((size_t)(NS * k), 1);
    if (!mem || !in_w) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *inv_start = mem, *inv = inv_start + k * (NS + 1);
    int64_t *elems = inv + k * NS, *loc = elems + NS, *blk = loc + NS;
    int64_t *first = blk + NS, *end = first + NS, *mid = end + NS;
    int64_t *touched = mid + NS, *preds = touched + NS;
    int64_t *work = preds + NS, *remap = work + 2 * wcap;
#define SUCC(s, j) ((s) == n ? n : (T[(s) * k + (j)] < 0 ? n : T[(s) * k + (j)]))
    for (Py_ssize_t i = 0; i < k * (NS + 1); i++) inv_start[i] = 0;
    for (int64_t s = 0; s < NS; s++)
        for (Py_ssize_t j = 0; j < k; j++) inv_start[j * (NS + 1) + SUCC(s, j) + 1]++;
    for (Py_ssize_t j = 0; j < k; j++) {
        int64_t *st = inv_start + j * (NS + 1);
        for (int64_t x = 0; x < NS; x++) st[x + 1] += st[x];
    }
    {
        int64_t *fill = touched; /* scratch: a write position per target, column by column */
        for (Py_ssize_t j = 0; j < k; j++) {
            int64_t *st = inv_start + j * (NS + 1);
            for (int64_t x = 0; x < NS; x++) fill[x] = st[x];
            for (int64_t s = 0; s < NS; s++) inv[j * NS + fill[SUCC(s, j)]++] = s;
        }
    }
    /* The starting partition: blocks 0..m-1 by class, block m the sink; counting sort into elems. */
    int64_t n_blocks = m + 1;
    for (int64_t b = 0; b <= m; b++) first[b] = 0;
    for (int64_t s = 0; s < NS; s++) blk[s] = s == n ? m : cls[s];
    for (int64_t s = 0; s < NS; s++) first[blk[s]]++;
    {
        int64_t acc = 0;
        for (int64_t b = 0; b < n_blocks; b++) {
            int64_t size = first[b];
            first[b] = acc;
            end[b] = acc;
            acc += size;
        }
    }
    for (int64_t s = 0; s < NS; s++) {
        elems[end[blk[s]]] = s;
        loc[s] = end[blk[s]]++;
    }
    Py_ssize_t top = 0;
    for (int64_t b = 0; b < n_blocks; b++) {
        mid[b] = first[b];
        if (end[b] == first[b]) continue; /* an unused class number */
        for (Py_ssize_t j = 0; j < k; j++) {
            work[top++] = b * k + j;
            in_w[b * k + j] = 1;
        }
    }
    while (top > 0) {
        int64_t item = work[--top];
        int64_t a = item / k, j = item % k;
        in_w[item] = 0;
        /* Predecessors of block a on column j: each state has one successor per column, so no repeats. */
        int64_t n_preds = 0;
        const int64_t *st = inv_start + j * (NS + 1), *lst = inv + j * NS;
        for (int64_t i = first[a]; i < end[a]; i++) {
            int64_t x = elems[i];
            for (int64_t q = st[x]; q < st[x + 1]; q++) preds[n_preds++] = lst[q];
        }
        int64_t n_touched = 0;
        for (int64_t q = 0; q < n_preds; q++) {
            int64_t p = preds[q], b = blk[p], i = loc[p], mpos = mid[b];
            if (i < mpos) continue;
            int64_t other = elems[mpos];
            elems[mpos] = p;
            loc[p] = mpos;
            elems[i] = other;
            loc[other] = i;
            if (mid[b]++ == first[b]) touched[n_touched++] = b;
        }
        for (int64_t q = 0; q < n_touched; q++) {
            int64_t b = touched[q];
            if (mid[b] == end[b]) { /* every state of b goes into a: no split */
                mid[b] = first[b];
                continue;
            }
            int64_t nb = n_blocks++;
            first[nb] = first[b];
            end[nb] = mid[b];
            mid[nb] = first[nb];
            first[b] = mid[b];
            mid[b] = first[b];
            for (int64_t i = first[nb]; i < end[nb]; i++) blk[elems[i]] = nb;
            int64_t small = (end[nb] - first[nb]) <= (end[b] - first[b]) ? nb : b;
            for (Py_ssize_t jj = 0; jj < k; jj++) {
                int64_t add = in_w[b * k + jj] ? nb : small;
                if (top >= 2 * wcap) {
                    PyErr_SetString(PyExc_RuntimeError, "internal: minimize's worklist overflowed");
                    goto done;
                }
                work[top++] = add * k + jj;
                in_w[add * k + jj] = 1;
            }
        }
    }
#undef SUCC
    for (int64_t b = 0; b < n_blocks; b++) remap[b] = -1;
    int64_t n_cls = 0;
    for (int64_t s = 0; s < n; s++) {
        if (remap[blk[s]] < 0) remap[blk[s]] = n_cls++;
        cls[s] = remap[blk[s]];
    }
    result = PyLong_FromLongLong(n_cls);
done:
    free(mem);
    free(in_w);
    release(&t);
    release(&c);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * reach(seen uint8 (n, in/out), heads int64 (sorted), tails int64) -> how many states are seen
 *
 * Grows ``seen`` by every state reachable along the edges heads[i] -> tails[i] (breadth-first).
 * ---------------------------------------------------------------------------------------------- */

static PyObject *reach(PyObject *self, PyObject *args) {
    PyObject *o_seen, *o_heads, *o_tails;
    if (!PyArg_ParseTuple(args, "OOO", &o_seen, &o_heads, &o_tails)) return NULL;
    Buf seen = {0}, heads = {0}, tails = {0};
    PyObject *result = NULL;
    int64_t *start = NULL, *queue = NULL;
    if (get_buf(o_seen, &seen, "seen", 1, 1) || get_buf(o_heads, &heads, "heads", 8, 0) ||
        get_buf(o_tails, &tails, "tails", 8, 0))
        goto done;
    Py_ssize_t n = N(seen, uint8_t), m = N(heads, int64_t);
    if (N(tails, int64_t) != m) {
        PyErr_SetString(PyExc_ValueError, "heads and tails differ in length");
        goto done;
    }
    const int64_t *H = heads.view.buf, *TL = tails.view.buf;
    uint8_t *S = seen.view.buf;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (H[i] < 0 || H[i] >= n || TL[i] < 0 || TL[i] >= n || (i && H[i] < H[i - 1])) {
            PyErr_Format(PyExc_ValueError, "edge %zd (%lld -> %lld): outside 0..%zd or heads not sorted", i,
                         (long long)H[i], (long long)TL[i], n - 1);
            goto done;
        }
    }
    start = calloc((size_t)n + 1, sizeof(int64_t));
    queue = malloc(sizeof(int64_t) * ((size_t)n + 1));
    if (!start || !queue) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < m; i++) start[H[i] + 1]++;
    for (Py_ssize_t x = 0; x < n; x++) start[x + 1] += start[x];
    Py_ssize_t qh = 0, qt = 0, count = 0;
    for (Py_ssize_t x = 0; x < n; x++)
        if (S[x]) {
            queue[qt++] = x;
            count++;
        }
    while (qh < qt) {
        int64_t x = queue[qh++];
        for (int64_t e = start[x]; e < start[x + 1]; e++) {
            int64_t y = TL[e];
            if (!S[y]) {
                S[y] = 1;
                queue[qt++] = y;
                count++;
            }
        }
    }
    result = PyLong_FromSsize_t(count);
done:
    free(start);
    free(queue);
    release(&seen);
    release(&heads);
    release(&tails);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * text_tokens(data uint8, mode, max_len, root int32 (256), level2 int32 (65536), sym, depth, end,
 *             node_token int32 (nodes), out int64) -> count
 *
 * Reads bytes against the trie by their bytes (a token's id for a byte string: node_token[node], -1
 * where the string is no token the caller wants). mode 0: every token that spells data[i:j] with
 * j - i <= max_len, for every i (out needs len(data) * max_len); mode 1: data cut into the longest such
 * tokens first (out needs len(data)); a byte no token starts with gives -1 - its position; mode 2:
 * the node that spells the whole of data (or -1; out unused).
 * ---------------------------------------------------------------------------------------------- */

static int32_t child_of(int32_t node, int32_t first_pos, int16_t b, const int32_t *root, const int32_t *level2,
                        const int16_t *S, const int32_t *D, const int32_t *E, const uint8_t *data, Py_ssize_t nodes) {
    /* the child of `node` (spelling data[first_pos..]) by byte b */
    if (node < 0) return root[b];
    if (D[node] == 0) return level2[(int32_t)data[first_pos] * 256 + b];
    for (int32_t c = node + 1; c < E[node] && c < nodes; c = E[c]) {
        if (S[c] == b) return c;
        if (S[c] > b) break; /* children come in ascending symbol order */
    }
    return -1;
}

static PyObject *text_tokens(PyObject *self, PyObject *args) {
    PyObject *o_data, *o_root, *o_l2, *o_sym, *o_depth, *o_end, *o_nt, *o_out;
    Py_ssize_t mode, max_len;
    if (!PyArg_ParseTuple(args, "OnnOOOOOOO", &o_data, &mode, &max_len, &o_root, &o_l2, &o_sym, &o_depth, &o_end,
                          &o_nt, &o_out))
        return NULL;
    Buf data = {0}, root = {0}, l2 = {0}, sym = {0}, depth = {0}, end = {0}, nt = {0}, out = {0};
    PyObject *result = NULL;
    if (get_buf(o_data, &data, "data", 1, 0) || get_buf(o_root, &root, "root", 4, 0) ||
        get_buf(o_l2, &l2, "level2", 4, 0) || get_buf(o_sym, &sym, "sym", 2, 0) ||
        get_buf(o_depth, &depth, "depth", 4, 0) || get_buf(o_end, &end, "end", 4, 0) ||
        get_buf(o_nt, &nt, "node_token", 4, 0) || get_buf(o_out, &out, "out", 8, 1))
        goto done;
    Py_ssize_t L = N(data, uint8_t), nodes = N(sym, int16_t), cap = N(out, int64_t);
    if (N(root, int32_t) != 256 || N(l2, int32_t) != 65536 || N(depth, int32_t) != nodes ||
        N(end, int32_t) != nodes || N(nt, int32_t) != nodes || max_len <= 0 || mode < 0 || mode > 2) {
        PyErr_SetString(PyExc_ValueError, "text_tokens: tables of the wrong size, or a bad mode or max_len");
        goto done;
    }
    const uint8_t *B = data.view.buf;
    const int32_t *R = root.view.buf, *L2 = l2.view.buf, *D = depth.view.buf, *E = end.view.buf, *NT = nt.view.buf;
    const int16_t *S = sym.view.buf;
    int64_t *O = out.view.buf;
    Py_ssize_t count = 0;
    if (mode == 2) {
        int32_t node = -1;
        for (Py_ssize_t j = 0; j < L; j++) {
            node = child_of(node, 0, B[j], R, L2, S, D, E, B, nodes);
            if (node < 0) break;
        }
        result = PyLong_FromLong(L ? node : -1);
        goto done;
    }
    Py_ssize_t i = 0;
    while (i < L) {
        int32_t node = -1;
        int64_t best = -1;
        Py_ssize_t best_len = 0;
        for (Py_ssize_t j = i; j < L && j - i < max_len; j++) {
            node = child_of(node, (int32_t)i, B[j], R, L2, S, D, E, B, nodes);
            if (node < 0 || node >= nodes) break;
            if (NT[node] >= 0) {
                if (mode == 0) {
                    if (count >= cap) {
                        PyErr_SetString(PyExc_ValueError, "text_tokens: out is too small");
                        goto done;
                    }
                    O[count++] = NT[node];
                } else {
                    best = NT[node];
                    best_len = j - i + 1;
                }
            }
        }
        if (mode == 0) {
            i++;
            continue;
        }
        if (best < 0) {
            result = PyLong_FromSsize_t(-1 - i);
            goto done;
        }
        if (count >= cap) {
            PyErr_SetString(PyExc_ValueError, "text_tokens: out is too small");
            goto done;
        }
        O[count++] = best;
        i += best_len;
    }
    result = PyLong_FromSsize_t(count);
done:
    release(&data); release(&root); release(&l2); release(&sym); release(&depth); release(&end);
    release(&nt); release(&out);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * trie_edges(transitions, n_symbols, states int32, max_depth, sym, depth, end, tok_start, trap, eos)
 *   -> bytes: (source, end state) pairs, int64, one per token of a node
 *
 * token_edges by a trie of the tokens (laid out by trie_build): from each state, depth-first, a subtree
 * the automaton rejects is skipped whole, as are the trap (a tail not built yet: the trap loops on every
 * symbol, so nothing below it counts) and the end-of-turn symbol (an end of turn ends no edge).
 * ---------------------------------------------------------------------------------------------- */

static PyObject *trie_edges(PyObject *self, PyObject *args) {
    PyObject *o_t, *o_states, *o_sym, *o_depth, *o_end, *o_ts;
    Py_ssize_t n_symbols, maxdepth, trap, eos;
    if (!PyArg_ParseTuple(args, "OnOnOOOOnn", &o_t, &n_symbols, &o_states, &maxdepth, &o_sym, &o_depth, &o_end,
                          &o_ts, &trap, &eos))
        return NULL;
    Buf t = {0}, st = {0}, sym = {0}, depth = {0}, end = {0}, ts = {0};
    PyObject *result = NULL;
    int32_t *stack = NULL;
    int64_t *buf = NULL;
    if (get_buf(o_t, &t, "transitions", 4, 0) || get_buf(o_states, &st, "states", 4, 0) ||
        get_buf(o_sym, &sym, "sym", 2, 0) || get_buf(o_depth, &depth, "depth", 4, 0) ||
        get_buf(o_end, &end, "end", 4, 0) || get_buf(o_ts, &ts, "tok_start", 4, 0))
        goto done;
    Py_ssize_t rows = n_symbols > 0 ? N(t, int32_t) / n_symbols : 0;
    Py_ssize_t nodes = N(sym, int16_t), n_states = N(st, int32_t);
    if (n_symbols <= 0 || rows * n_symbols != N(t, int32_t) || maxdepth < 0) {
        PyErr_SetString(PyExc_ValueError, "transitions: not a (rows, n_symbols) table (or max_depth < 0)");
        goto done;
    }
    if (N(depth, int32_t) != nodes || N(end, int32_t) != nodes || N(ts, int32_t) != nodes + 1) {
        PyErr_SetString(PyExc_ValueError, "trie arrays disagree in size");
        goto done;
    }
    const int32_t *T = t.view.buf, *ST = st.view.buf, *D = depth.view.buf, *E = end.view.buf, *TS = ts.view.buf;
    const int16_t *S = sym.view.buf;
    for (Py_ssize_t i = 0; i < nodes; i++) {
        if (S[i] < 0 || S[i] >= n_symbols || D[i] < 0 || D[i] > maxdepth || E[i] <= i || E[i] > nodes) {
            PyErr_Format(PyExc_ValueError, "trie node %zd: symbol, depth or subtree end outside the table", i);
            goto done;
        }
    }
    stack = malloc(sizeof(int32_t) * (size_t)(maxdepth + 2));
    Py_ssize_t cap = 1024, count = 0;
    buf = malloc(sizeof(int64_t) * 2 * (size_t)cap);
    if (!stack || !buf) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t a = 0; a < n_states; a++) {
        int32_t s0 = ST[a];
        if (s0 < 0 || s0 >= rows) {
            PyErr_Format(PyExc_ValueError, "state %d is not one of the %zd rows", s0, rows);
            goto done;
        }
        stack[0] = s0;
        Py_ssize_t i = 0;
        while (i < nodes) {
            int32_t ns = S[i] == eos ? -1 : T[(Py_ssize_t)stack[D[i]] * n_symbols + S[i]];
            if (ns < 0 || ns >= rows || ns == trap) {
                i = E[i];
                continue;
            }
            stack[D[i] + 1] = ns;
            for (int32_t j = TS[i]; j < TS[i + 1]; j++) {
                if (count == cap) {
                    int64_t *grown = realloc(buf, sizeof(int64_t) * 4 * (size_t)cap);
                    if (!grown) {
                        PyErr_NoMemory();
                        goto done;
                    }
                    buf = grown;
                    cap *= 2;
                }
                buf[2 * count] = s0;
                buf[2 * count + 1] = ns;
                count++;
            }
            i++;
        }
    }
    result = PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)(sizeof(int64_t) * 2 * (size_t)count));
done:
    free(stack);
    free(buf);
    release(&t); release(&st); release(&sym); release(&depth); release(&end); release(&ts);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * live_states(table int32 (n, k), accepting uint8 (n), start, keep uint8 (out, n)) -> whether start is live
 *
 * automaton._prune's two searches in one pass over the table: the states that can reach acceptance
 * (backwards from the accepting ones), then those of them the start reaches through live states.
 * keep[s] = 1 for those; if the start cannot reach acceptance, keep is all 0 and the result False.
 * ---------------------------------------------------------------------------------------------- */

static PyObject *live_states(PyObject *self, PyObject *args) {
    PyObject *o_t, *o_acc, *o_keep;
    Py_ssize_t k, start;
    if (!PyArg_ParseTuple(args, "OnOnO", &o_t, &k, &o_acc, &start, &o_keep)) return NULL;
    Buf t = {0}, acc = {0}, keep = {0};
    PyObject *result = NULL;
    int64_t *fstart = NULL, *rstart = NULL, *queue = NULL, *seen_by = NULL;
    int32_t *fadj = NULL, *radj = NULL;
    uint8_t *live = NULL;
    if (get_buf(o_t, &t, "table", 4, 0) || get_buf(o_acc, &acc, "accepting", 1, 0) ||
        get_buf(o_keep, &keep, "keep", 1, 1))
        goto done;
    Py_ssize_t n = N(acc, uint8_t);
    if (k <= 0 || N(t, int32_t) != n * k || N(keep, uint8_t) != n || start < 0 || start >= n) {
        PyErr_SetString(PyExc_ValueError, "live_states: table, accepting, keep or start do not fit together");
        goto done;
    }
    const int32_t *T = t.view.buf;
    const uint8_t *A = acc.view.buf;
    uint8_t *K = keep.view.buf;
    size_t cells = (size_t)(n > 0 ? n : 1);
    fstart = malloc(sizeof(int64_t) * (cells + 1));
    rstart = calloc(cells + 1, sizeof(int64_t));
    queue = malloc(sizeof(int64_t) * cells);
    seen_by = malloc(sizeof(int64_t) * cells);
    live = calloc(cells, 1);
    Py_ssize_t cap = n > 0 ? 4 * n : 4, m = 0;
    fadj = malloc(sizeof(int32_t) * (size_t)cap);
    if (!fstart || !rstart || !queue || !seen_by || !live || !fadj) goto nomem;
    /* One pass over the table: each row's distinct targets (seen_by[y] == s: y is listed for s already),
     * as forward edges by source. A row sends most symbols to a few targets, so the edges are few. */
    for (Py_ssize_t y = 0; y < n; y++) seen_by[y] = -1;
    for (Py_ssize_t s = 0; s < n; s++) {
        fstart[s] = m;
        const int32_t *row = T + s * k;
        for (Py_ssize_t j = 0; j < k; j++) {
            int32_t y = row[j];
            if (y < 0) {
                if (y != -1) goto bad;
                continue;
            }
            if (y >= n) goto bad;
            if (seen_by[y] == s) continue;
            seen_by[y] = s;
            if (m == cap) {
                int32_t *grown = realloc(fadj, sizeof(int32_t) * (size_t)(2 * cap));
                if (!grown) goto nomem;
                fadj = grown;
                cap *= 2;
            }
            fadj[m++] = y;
            rstart[y + 1]++;
            continue;
        bad:
            PyErr_Format(PyExc_ValueError, "table entry %zd: state %d outside 0..%zd", s * k + j, y, n - 1);
            goto done;
        }
    }
    fstart[n] = m;
    /* The reverse edges, as CSR by target, from the forward ones. */
    for (Py_ssize_t y = 0; y < n; y++) rstart[y + 1] += rstart[y];
    radj = malloc(sizeof(int32_t) * (size_t)(m > 0 ? m : 1));
    if (!radj) goto nomem;
    for (Py_ssize_t y = 0; y < n; y++) seen_by[y] = rstart[y]; /* fill cursors */
    for (Py_ssize_t s = 0; s < n; s++)
        for (int64_t e = fstart[s]; e < fstart[s + 1]; e++) radj[seen_by[fadj[e]]++] = (int32_t)s;
    Py_ssize_t qh = 0, qt = 0;
    for (Py_ssize_t s = 0; s < n; s++)
        if (A[s]) {
            live[s] = 1;
            queue[qt++] = s;
        }
    while (qh < qt) {
        int64_t y = queue[qh++];
        for (int64_t e = rstart[y]; e < rstart[y + 1]; e++) {
            int32_t s = radj[e];
            if (!live[s]) {
                live[s] = 1;
                queue[qt++] = s;
            }
        }
    }
    memset(K, 0, (size_t)n);
    if (!live[start]) {
        result = Py_False;
        Py_INCREF(result);
        goto done;
    }
    qh = qt = 0;
    K[start] = 1;
    queue[qt++] = start;
    while (qh < qt) {
        int64_t s = queue[qh++];
        for (int64_t e = fstart[s]; e < fstart[s + 1]; e++) {
            int32_t y = fadj[e];
            if (live[y] && !K[y]) {
                K[y] = 1;
                queue[qt++] = y;
            }
        }
    }
    result = Py_True;
    Py_INCREF(result);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(fstart);
    free(rstart);
    free(queue);
    free(seen_by);
    free(live);
    free(fadj);
    free(radj);
    release(&t);
    release(&acc);
    release(&keep);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * relax(d int64 (m, in/out), heads int64, tails int64, inf)
 *
 * The least d with d[tails[e]] <= d[heads[e]] + 1 for every edge and d <= its starting value (a
 * shortest path in unit steps from starting values: the budget bound of a tail's states). Starting
 * values at or above inf count as unknown. Multi-source BFS with the sources taken in order of value.
 * The edges come in any order: they are bucketed by head here (a counting sort, linear), which an
 * argsort of the edge list in numpy cost several times over (2 ms of a 4,579-state tail's bound).
 * ---------------------------------------------------------------------------------------------- */

static const int64_t *g_dist;

static int cmp_by_dist(const void *a, const void *b) {
    int64_t x = g_dist[*(const int64_t *)a], y = g_dist[*(const int64_t *)b];
    return x < y ? -1 : (x > y ? 1 : 0);
}

static PyObject *relax(PyObject *self, PyObject *args) {
    PyObject *o_d, *o_heads, *o_tails;
    long long inf;
    if (!PyArg_ParseTuple(args, "OOOL", &o_d, &o_heads, &o_tails, &inf)) return NULL;
    Buf d = {0}, heads = {0}, tails = {0};
    PyObject *result = NULL;
    int64_t *start = NULL, *src = NULL, *queue = NULL, *adj = NULL;
    if (get_buf(o_d, &d, "d", 8, 1) || get_buf(o_heads, &heads, "heads", 8, 0) ||
        get_buf(o_tails, &tails, "tails", 8, 0))
        goto done;
    Py_ssize_t n = N(d, int64_t), m = N(heads, int64_t);
    const int64_t *H = heads.view.buf, *TL = tails.view.buf;
    int64_t *D = d.view.buf;
    if (N(tails, int64_t) != m) {
        PyErr_SetString(PyExc_ValueError, "heads and tails differ in length");
        goto done;
    }
    for (Py_ssize_t e = 0; e < m; e++) {
        if (H[e] < 0 || H[e] >= n || TL[e] < 0 || TL[e] >= n) {
            PyErr_Format(PyExc_ValueError, "edge %zd: outside 0..%zd", e, n - 1);
            goto done;
        }
    }
    start = calloc((size_t)n + 1, sizeof(int64_t));
    src = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    queue = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    adj = malloc(sizeof(int64_t) * (size_t)(m > 0 ? m : 1));
    if (!start || !src || !queue || !adj) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t e = 0; e < m; e++) start[H[e] + 1]++;
    for (Py_ssize_t x = 0; x < n; x++) start[x + 1] += start[x];
    /* adj[start[x] .. start[x + 1]) = the tails of x's edges; src doubles as the fill cursor here. */
    for (Py_ssize_t x = 0; x < n; x++) src[x] = start[x];
    for (Py_ssize_t e = 0; e < m; e++) adj[src[H[e]]++] = TL[e];
    Py_ssize_t n_src = 0;
    for (Py_ssize_t x = 0; x < n; x++)
        if (D[x] < inf) src[n_src++] = x;
    g_dist = D;
    qsort(src, (size_t)n_src, sizeof(int64_t), cmp_by_dist);
    /* Two sorted streams, the sources by starting value and the FIFO of reached states (whose values
     * grow by one as they are found): always settle the smaller head; a state settles once. */
    uint8_t *done_ = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!done_) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t si = 0, qh = 0, qt = 0;
    while (si < n_src || qh < qt) {
        int64_t x;
        if (qh < qt && (si >= n_src || D[queue[qh]] <= D[src[si]])) x = queue[qh++];
        else x = src[si++];
        if (done_[x]) continue;
        done_[x] = 1;
        for (int64_t e = start[x]; e < start[x + 1]; e++) {
            int64_t y = adj[e];
            if (!done_[y] && D[x] + 1 < D[y]) {
                D[y] = D[x] + 1;
                queue[qt++] = y;
                if (qt > n) { /* a state enters the queue at most once per improvement: bounded by n here */
                    free(done_);
                    PyErr_SetString(PyExc_RuntimeError, "internal: relax's queue overflowed");
                    goto done;
                }
            }
        }
    }
    free(done_);
    result = Py_None;
    Py_INCREF(result);
done:
    free(start);
    free(src);
    free(queue);
    free(adj);
    release(&d);
    release(&heads);
    release(&tails);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * bfs_order(table int32 (n, k), start, order int64 (out, n)) -> how many states the start reaches
 *
 * automaton._canonical's numbering: breadth-first from the start, each row's successors by symbol;
 * order[s] is state s's number, -1 where the start does not reach it.
 * ---------------------------------------------------------------------------------------------- */

static PyObject *bfs_order(PyObject *self, PyObject *args) {
    PyObject *o_t, *o_order;
    Py_ssize_t k, start;
    if (!PyArg_ParseTuple(args, "OnnO", &o_t, &k, &start, &o_order)) return NULL;
    Buf t = {0}, order = {0};
    PyObject *result = NULL;
    int64_t *queue = NULL;
    if (get_buf(o_t, &t, "table", 4, 0) || get_buf(o_order, &order, "order", 8, 1)) goto done;
    Py_ssize_t n = N(order, int64_t);
    if (k <= 0 || N(t, int32_t) != n * k || start < 0 || start >= n) {
        PyErr_SetString(PyExc_ValueError, "bfs_order: table, order or start do not fit together");
        goto done;
    }
    const int32_t *T = t.view.buf;
    int64_t *O = order.view.buf;
    queue = malloc(sizeof(int64_t) * (size_t)n);
    if (!queue) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t s = 0; s < n; s++) O[s] = -1;
    Py_ssize_t qh = 0, qt = 0;
    O[start] = 0;
    queue[qt++] = start;
    while (qh < qt) {
        int64_t s = queue[qh++];
        for (Py_ssize_t j = 0; j < k; j++) {
            int32_t y = T[s * k + j];
            if (y < -1 || y >= n) {
                PyErr_Format(PyExc_ValueError, "table entry (%lld, %zd): state %d outside 0..%zd", (long long)s, j, y,
                             n - 1);
                goto done;
            }
            if (y >= 0 && O[y] < 0) {
                O[y] = qt;
                queue[qt++] = y;
            }
        }
    }
    result = PyLong_FromSsize_t(qt);
done:
    free(queue);
    release(&t);
    release(&order);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * subset(edge_ptr int64 (m+1), edge_bits uint64 (E, words), edge_dst int32 (E), eps_ptr int64 (m+1),
 *        eps_dst int32, safe uint8 (m), start, end, n_symbols, max_states)
 *   -> (table bytes (n, n_symbols) int32, accepting bytes (n), safe bytes (n)), or None past max_states
 *
 * automaton.subset_dfa's loop: the Thompson NFA (m states; state x's edges are edge_ptr[x] ..
 * edge_ptr[x+1]-1, each a symbol set of `words` 64-bit words and a target; its epsilon moves likewise)
 * determinized from the closure of `start`. DFA states are numbered breadth-first, successors by
 * symbol (the numbering automaton._canonical gives), so the result does not depend on the NFA's edge
 * order. A DFA state accepts when its set holds `end`, and is safe when any of its NFA states is.
 *
 * A set is keyed by the NFA states in it that read a symbol (and `end`), plus whether it is safe (the
 * member m, past every state, stands for that): the states an epsilon path merely passes through add
 * nothing to the future. Keyed by the whole closure, a string's body after one kind of character and
 * after another were two states with the same row (the end of each alternative in the set), so UTF-8
 * characters did not lead back to the state they left, and a large tail, which is not minimized, kept
 * both (the plot_series tail: 4,579 states, 3,953 so keyed).
 * ---------------------------------------------------------------------------------------------- */

typedef struct {
    int32_t *data;
    Py_ssize_t len, cap;
} IntVec;

/* Room for at least `need` items (len unchanged). */
static int vec_reserve(IntVec *v, Py_ssize_t need) {
    if (v->cap >= need) return 0;
    Py_ssize_t cap = v->cap ? v->cap : 1024;
    while (cap < need) cap *= 2;
    int32_t *grown = realloc(v->data, sizeof(int32_t) * (size_t)cap);
    if (!grown) return -1;
    v->data = grown;
    v->cap = cap;
    return 0;
}

static int vec_push(IntVec *v, int32_t x) {
    if (v->len == v->cap) {
        Py_ssize_t cap = v->cap ? 2 * v->cap : 1024;
        int32_t *grown = realloc(v->data, sizeof(int32_t) * (size_t)cap);
        if (!grown) return -1;
        v->data = grown;
        v->cap = cap;
    }
    v->data[v->len++] = x;
    return 0;
}

static int cmp_int32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static uint64_t hash_set(const int32_t *xs, Py_ssize_t n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)xs[i];
        h *= 0x100000001b3ULL;
        h ^= h >> 29;
    }
    return h;
}

static PyObject *subset(PyObject *self, PyObject *args) {
    PyObject *o_ep, *o_eb, *o_ed, *o_xp, *o_xd, *o_safe;
    Py_ssize_t start, end, k, max_states;
    if (!PyArg_ParseTuple(args, "OOOOOOnnnn", &o_ep, &o_eb, &o_ed, &o_xp, &o_xd, &o_safe, &start, &end, &k,
                          &max_states))
        return NULL;
    Buf ep = {0}, eb = {0}, ed = {0}, xp = {0}, xd = {0}, sf = {0};
    PyObject *result = NULL;
    int32_t *clo_at = NULL, *mark = NULL, *cmark = NULL, *stack = NULL, *gather = NULL, *table = NULL;
    int64_t *sym_start = NULL, *slots = NULL;
    uint64_t *sym_hash = NULL;
    int32_t *sym_rep = NULL, *sym_target = NULL;
    uint8_t *acc = NULL, *safe_out = NULL;
    IntVec clo = {0}, pool = {0}, se = {0}; /* se: per symbol, the targets of the edges that hold it */
    int64_t *set_at = NULL; /* set i is pool.data[set_at[i] .. set_at[i+1]) */
    Py_ssize_t n_sets = 0, set_cap = 0, n_slots = 0;
    if (get_buf(o_ep, &ep, "edge_ptr", 8, 0) || get_buf(o_eb, &eb, "edge_bits", 8, 0) ||
        get_buf(o_ed, &ed, "edge_dst", 4, 0) || get_buf(o_xp, &xp, "eps_ptr", 8, 0) ||
        get_buf(o_xd, &xd, "eps_dst", 4, 0) || get_buf(o_safe, &sf, "safe", 1, 0))
        goto done;
    Py_ssize_t m = N(sf, uint8_t), n_edges = N(ed, int32_t), n_eps = N(xd, int32_t);
    Py_ssize_t words = (k + 63) / 64;
    const int64_t *EP = ep.view.buf, *XP = xp.view.buf;
    const uint64_t *EB = eb.view.buf;
    const int32_t *ED = ed.view.buf, *XD = xd.view.buf;
    const uint8_t *SF = sf.view.buf;
    if (k <= 0 || N(ep, int64_t) != m + 1 || N(xp, int64_t) != m + 1 || N(eb, uint64_t) != n_edges * words ||
        start < 0 || start >= m || end < 0 || end >= m || EP[0] != 0 || XP[0] != 0 || EP[m] != n_edges ||
        XP[m] != n_eps) {
        PyErr_SetString(PyExc_ValueError, "subset: the NFA's arrays do not fit together");
        goto done;
    }
    for (Py_ssize_t x = 0; x < m; x++) {
        if (EP[x + 1] < EP[x] || XP[x + 1] < XP[x]) {
            PyErr_Format(PyExc_ValueError, "subset: NFA state %zd: edge ranges not ascending", x);
            goto done;
        }
    }
    for (Py_ssize_t e = 0; e < n_edges; e++)
        if (ED[e] < 0 || ED[e] >= m) {
            PyErr_Format(PyExc_ValueError, "subset: edge %zd leads to %d, outside 0..%zd", e, ED[e], m - 1);
            goto done;
        }
    for (Py_ssize_t e = 0; e < n_eps; e++)
        if (XD[e] < 0 || XD[e] >= m) {
            PyErr_Format(PyExc_ValueError, "subset: epsilon move %zd leads to %d, outside 0..%zd", e, XD[e], m - 1);
            goto done;
        }
    for (Py_ssize_t e = 0; e < n_edges; e++)
        if (k % 64 && (EB[e * words + words - 1] >> (k % 64)))
            {
                PyErr_Format(PyExc_ValueError, "subset: edge %zd holds a symbol past %zd", e, k - 1);
                goto done;
            }
    clo_at = malloc(sizeof(int32_t) * (size_t)(2 * m + 1)); /* [2x]: start in clo, [2x+1]: length; -1 unset */
    mark = calloc((size_t)m, sizeof(int32_t));
    cmark = calloc((size_t)m, sizeof(int32_t)); /* the closures' own marks: a closure is built inside a gather */
    stack = malloc(sizeof(int32_t) * (size_t)(m + n_eps + 1));
    sym_start = malloc(sizeof(int64_t) * (size_t)(k + 1));
    sym_hash = malloc(sizeof(uint64_t) * (size_t)k);
    sym_rep = malloc(sizeof(int32_t) * (size_t)k);
    sym_target = malloc(sizeof(int32_t) * (size_t)k);
    gather = malloc(sizeof(int32_t) * (size_t)(m + 1));
    if (!clo_at || !mark || !cmark || !stack || !sym_start || !sym_hash || !sym_rep || !sym_target || !gather) goto nomem;
    for (Py_ssize_t x = 0; x < 2 * m; x++) clo_at[x] = -1;
    int32_t stamp = 0, cstamp = 0;

/* The closure of NFA state x, computed once: clo.data[clo_at[2x] .. + clo_at[2x+1]). */
#define CLOSURE_OF(x)                                                                                        \
    do {                                                                                                     \
        if (clo_at[2 * (x)] < 0) {                                                                           \
            cstamp++;                                                                                        \
            Py_ssize_t sp = 0, first = clo.len;                                                              \
            stack[sp++] = (int32_t)(x);                                                                      \
            cmark[x] = cstamp;                                                                               \
            while (sp) {                                                                                     \
                int32_t y = stack[--sp];                                                                     \
                if (vec_push(&clo, y)) goto nomem;                                                           \
                for (int64_t q = XP[y]; q < XP[y + 1]; q++)                                                  \
                    if (cmark[XD[q]] != cstamp) {                                                            \
                        cmark[XD[q]] = cstamp;                                                               \
                        stack[sp++] = XD[q];                                                                 \
                    }                                                                                        \
            }                                                                                                \
            clo_at[2 * (x)] = (int32_t)first;                                                                \
            clo_at[2 * (x) + 1] = (int32_t)(clo.len - first);                                                \
        }                                                                                                    \
    } while (0)

    /* The hash table of sets (open addressing over set ids, -1 empty), grown at half full. */
    n_slots = 1024;
    slots = malloc(sizeof(int64_t) * (size_t)n_slots);
    if (!slots) goto nomem;
    for (Py_ssize_t i = 0; i < n_slots; i++) slots[i] = -1;
    set_cap = 256;
    set_at = malloc(sizeof(int64_t) * (size_t)(set_cap + 1));
    if (!set_at) goto nomem;
    set_at[0] = 0;

    /* Interns the set gather[0..g) (sorted, distinct): its DFA state, a new one appended when unseen
       (-2 past max_states). */
#define INTERN(g, out)                                                                                       \
    do {                                                                                                     \
        uint64_t h_ = hash_set(gather, (g));                                                                 \
        Py_ssize_t at_ = (Py_ssize_t)(h_ & (uint64_t)(n_slots - 1));                                         \
        (out) = -1;                                                                                          \
        while (slots[at_] >= 0) {                                                                            \
            int64_t id_ = slots[at_];                                                                        \
            if (set_at[id_ + 1] - set_at[id_] == (g) &&                                                      \
                !memcmp(pool.data + set_at[id_], gather, sizeof(int32_t) * (size_t)(g))) {                   \
                (out) = (int32_t)id_;                                                                        \
                break;                                                                                       \
            }                                                                                                \
            at_ = (at_ + 1) & (n_slots - 1);                                                                 \
        }                                                                                                    \
        if ((out) < 0) {                                                                                     \
            if (n_sets >= max_states) {                                                                      \
                (out) = -2;                                                                                  \
                break;                                                                                       \
            }                                                                                                \
            if (n_sets == set_cap) {                                                                         \
                int64_t *grown_ = realloc(set_at, sizeof(int64_t) * (size_t)(2 * set_cap + 1));              \
                if (!grown_) goto nomem;                                                                     \
                set_at = grown_;                                                                             \
                set_cap *= 2;                                                                                \
            }                                                                                                \
            for (Py_ssize_t i_ = 0; i_ < (g); i_++)                                                          \
                if (vec_push(&pool, gather[i_])) goto nomem;                                                 \
            set_at[n_sets + 1] = pool.len;                                                                   \
            slots[at_] = n_sets;                                                                             \
            (out) = (int32_t)n_sets++;                                                                       \
            if (2 * n_sets > n_slots) {                                                                      \
                Py_ssize_t grown_n_ = 2 * n_slots;                                                           \
                int64_t *grown_ = malloc(sizeof(int64_t) * (size_t)grown_n_);                                \
                if (!grown_) goto nomem;                                                                     \
                for (Py_ssize_t i_ = 0; i_ < grown_n_; i_++) grown_[i_] = -1;                               \
                for (Py_ssize_t id2_ = 0; id2_ < n_sets; id2_++) {                                           \
                    uint64_t h2_ = hash_set(pool.data + set_at[id2_], (Py_ssize_t)(set_at[id2_ + 1] - set_at[id2_])); \
                    Py_ssize_t a2_ = (Py_ssize_t)(h2_ & (uint64_t)(grown_n_ - 1));                           \
                    while (grown_[a2_] >= 0) a2_ = (a2_ + 1) & (grown_n_ - 1);                               \
                    grown_[a2_] = id2_;                                                                      \
                }                                                                                            \
                free(slots);                                                                                 \
                slots = grown_;                                                                              \
                n_slots = grown_n_;                                                                          \
            }                                                                                                \
        }                                                                                                    \
    } while (0)

    /* gather[0..g), sorted: only the states that read a symbol and `end`, then m when any was safe. */
#define KEY(g)                                                                                               \
    do {                                                                                                     \
        Py_ssize_t kept_ = 0;                                                                                \
        int safe_ = 0;                                                                                       \
        for (Py_ssize_t i_ = 0; i_ < (g); i_++) {                                                            \
            int32_t x_ = gather[i_];                                                                         \
            safe_ |= SF[x_] != 0;                                                                            \
            if (EP[x_ + 1] > EP[x_] || x_ == end) gather[kept_++] = x_;                                      \
        }                                                                                                    \
        if (safe_) gather[kept_++] = (int32_t)m;                                                             \
        (g) = kept_;                                                                                         \
    } while (0)

    {
        CLOSURE_OF(start);
        Py_ssize_t g = clo_at[2 * start + 1];
        memcpy(gather, clo.data + clo_at[2 * start], sizeof(int32_t) * (size_t)g);
        qsort(gather, (size_t)g, sizeof(int32_t), cmp_int32);
        KEY(g);
        int32_t id;
        INTERN(g, id);
        (void)id;
    }
    Py_ssize_t table_cap = 0;
    for (Py_ssize_t i = 0; i < n_sets; i++) {
        const int32_t *members = pool.data + set_at[i];
        Py_ssize_t size = (Py_ssize_t)(set_at[i + 1] - set_at[i]);
        if (size && members[size - 1] == m) size--; /* the safe mark reads nothing */
        for (Py_ssize_t s = 0; s <= k; s++) sym_start[s] = 0;
        for (Py_ssize_t a = 0; a < size; a++)
            for (int64_t e = EP[members[a]]; e < EP[members[a] + 1]; e++)
                for (Py_ssize_t w = 0; w < words; w++) {
                    uint64_t bits = EB[e * words + w];
                    while (bits) {
                        sym_start[w * 64 + __builtin_ctzll(bits) + 1]++;
                        bits &= bits - 1;
                    }
                }
        for (Py_ssize_t s = 0; s < k; s++) sym_start[s + 1] += sym_start[s];
        if (vec_reserve(&se, sym_start[k])) goto nomem;
        se.len = sym_start[k];
        for (Py_ssize_t s = 0; s < k; s++) sym_hash[s] = (uint64_t)sym_start[s]; /* fill cursor, for now */
        for (Py_ssize_t a = 0; a < size; a++)
            for (int64_t e = EP[members[a]]; e < EP[members[a] + 1]; e++)
                for (Py_ssize_t w = 0; w < words; w++) {
                    uint64_t bits = EB[e * words + w];
                    while (bits) {
                        Py_ssize_t s = w * 64 + __builtin_ctzll(bits);
                        se.data[sym_hash[s]++] = ED[e];
                        bits &= bits - 1;
                    }
                }
        if (n_sets > table_cap || !table) {
            Py_ssize_t cap = table_cap ? table_cap : 256;
            while (cap < n_sets + 1) cap *= 2;
            int32_t *grown = realloc(table, sizeof(int32_t) * (size_t)(cap * k));
            if (!grown) goto nomem;
            table = grown;
            table_cap = cap;
        }
        int32_t *row = table + i * k;
        Py_ssize_t n_reps = 0;
        for (Py_ssize_t s = 0; s < k; s++) {
            Py_ssize_t lo = sym_start[s], len = sym_start[s + 1] - lo;
            if (!len) {
                row[s] = -1;
                continue;
            }
            uint64_t h = hash_set(se.data + lo, len);
            int32_t found = -1;
            for (Py_ssize_t r = 0; r < n_reps; r++) {
                Py_ssize_t rs = sym_rep[r], rlo = sym_start[rs], rlen = sym_start[rs + 1] - rlo;
                if (sym_hash[r] == h && rlen == len && !memcmp(se.data + rlo, se.data + lo, sizeof(int32_t) * (size_t)len)) {
                    found = sym_target[r];
                    break;
                }
            }
            if (found < 0) {
                stamp++;
                Py_ssize_t g = 0;
                for (Py_ssize_t q = lo; q < lo + len; q++) {
                    int32_t t = se.data[q];
                    CLOSURE_OF(t);
                    const int32_t *c = clo.data + clo_at[2 * t];
                    for (int32_t j = 0; j < clo_at[2 * t + 1]; j++)
                        if (mark[c[j]] != stamp) {
                            mark[c[j]] = stamp;
                            gather[g++] = c[j];
                        }
                }
                qsort(gather, (size_t)g, sizeof(int32_t), cmp_int32);
                KEY(g);
                INTERN(g, found);
                if (found == -2) {
                    Py_INCREF(Py_None);
                    result = Py_None;
                    goto done;
                }
                members = pool.data + set_at[i]; /* the pool may have moved */
                sym_hash[n_reps] = h;
                sym_rep[n_reps] = (int32_t)s;
                sym_target[n_reps] = found;
                n_reps++;
            }
            row[s] = found;
        }
    }
#undef CLOSURE_OF
#undef INTERN
#undef KEY
    acc = malloc((size_t)n_sets + 1);
    safe_out = malloc((size_t)n_sets + 1);
    if (!acc || !safe_out) goto nomem;
    for (Py_ssize_t i = 0; i < n_sets; i++) {
        acc[i] = 0;
        safe_out[i] = 0;
        for (int64_t q = set_at[i]; q < set_at[i + 1]; q++) {
            if (pool.data[q] == end) acc[i] = 1;
            if (pool.data[q] == m) safe_out[i] = 1;
        }
    }
    result = Py_BuildValue("(y#y#y#)", (const char *)table, (Py_ssize_t)(sizeof(int32_t) * (size_t)(n_sets * k)),
                           (const char *)acc, n_sets, (const char *)safe_out, n_sets);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(clo_at); free(mark); free(cmark); free(stack); free(sym_start); free(sym_hash); free(sym_rep); free(sym_target);
    free(gather); free(table); free(slots); free(set_at); free(acc); free(safe_out); free(clo.data); free(pool.data);
    free(se.data);
    release(&ep); release(&eb); release(&ed); release(&xp); release(&xd); release(&sf);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * shift_rows(src int32 (rows, k), dst int32 (out), first_row, k, shift)
 *
 * Copies the table src into dst from row first_row on, every target moved by shift and every -1
 * (dead) kept: how compose.py stacks its parts' tables and lazy.py appends a tail (one pass over the
 * rows; numpy's masked add took two and most of a large tail's joins).
 * ---------------------------------------------------------------------------------------------- */

static PyObject *shift_rows(PyObject *self, PyObject *args) {
    PyObject *o_src, *o_dst;
    Py_ssize_t first_row, k, shift;
    if (!PyArg_ParseTuple(args, "OOnnn", &o_src, &o_dst, &first_row, &k, &shift)) return NULL;
    Buf src = {0}, dst = {0};
    PyObject *result = NULL;
    if (get_buf(o_src, &src, "src", 4, 0) || get_buf(o_dst, &dst, "dst", 4, 1)) goto done;
    Py_ssize_t n = N(src, int32_t);
    if (k <= 0 || n % k || first_row < 0 || first_row * k + n > N(dst, int32_t) || shift < 0 ||
        shift > INT32_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "shift_rows: the rows do not fit in dst (or the shift is out of range)");
        goto done;
    }
    const int32_t *S = src.view.buf;
    int32_t *D = (int32_t *)dst.view.buf + first_row * k;
    int32_t sh = (int32_t)shift;
    /* One branch-free pass (the compiler vectorizes it; an early exit per entry kept it scalar), then, only
     * when some entry was out of range, a second pass to name the first one. */
    int bad = 0;
    for (Py_ssize_t x = 0; x < n; x++) {
        int32_t v = S[x];
        bad |= (v < -1) | (v > INT32_MAX / 2);
        D[x] = v < 0 ? -1 : v + sh;
    }
    if (bad) {
        for (Py_ssize_t x = 0; x < n; x++) {
            if (S[x] < -1 || S[x] > INT32_MAX / 2) {
                PyErr_Format(PyExc_ValueError, "shift_rows: entry %zd holds %d, not a state or -1", x, S[x]);
                goto done;
            }
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release(&src);
    release(&dst);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * compact(table int32 (n, k), keep int64 (m), remap int32 (n), out int32 (m, k))
 *
 * automaton._prune's renumbering: out[i] = table[keep[i]] with every target t read as remap[t]
 * (-1 where t is -1 or remap[t] is -1, a dropped state).
 * ---------------------------------------------------------------------------------------------- */

static PyObject *compact(PyObject *self, PyObject *args) {
    PyObject *o_t, *o_keep, *o_remap, *o_out;
    if (!PyArg_ParseTuple(args, "OOOO", &o_t, &o_keep, &o_remap, &o_out)) return NULL;
    Buf t = {0}, keep = {0}, remap = {0}, out = {0};
    PyObject *result = NULL;
    if (get_buf(o_t, &t, "table", 4, 0) || get_buf(o_keep, &keep, "keep", 8, 0) ||
        get_buf(o_remap, &remap, "remap", 4, 0) || get_buf(o_out, &out, "out", 4, 1))
        goto done;
    Py_ssize_t n = N(remap, int32_t), m = N(keep, int64_t);
    Py_ssize_t k = n ? N(t, int32_t) / n : 0;
    if (n == 0 || k * n != N(t, int32_t) || N(out, int32_t) != m * k) {
        PyErr_SetString(PyExc_ValueError, "compact: table, keep, remap and out do not fit together");
        goto done;
    }
    const int32_t *T = t.view.buf, *R = remap.view.buf;
    const int64_t *K = keep.view.buf;
    int32_t *O = out.view.buf;
    for (Py_ssize_t x = 0; x < n; x++)
        if (R[x] < -1 || R[x] >= m) {
            PyErr_Format(PyExc_ValueError, "compact: remap[%zd] = %d, outside -1..%zd", x, R[x], m - 1);
            goto done;
        }
    for (Py_ssize_t i = 0; i < m; i++) {
        if (K[i] < 0 || K[i] >= n) {
            PyErr_Format(PyExc_ValueError, "compact: keep[%zd] = %lld, outside 0..%zd", i, (long long)K[i], n - 1);
            goto done;
        }
        const int32_t *row = T + K[i] * k;
        int32_t *o = O + i * k;
        for (Py_ssize_t j = 0; j < k; j++) {
            int32_t v = row[j];
            if (v < -1 || v >= n) {
                PyErr_Format(PyExc_ValueError, "compact: table entry (%lld, %zd) = %d, outside -1..%zd",
                             (long long)K[i], j, v, n - 1);
                goto done;
            }
            o[j] = v < 0 ? -1 : R[v];
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release(&t);
    release(&keep);
    release(&remap);
    release(&out);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * pour(row float32 (in/out), donor_logits float32, donor_group int64, receivers int64,
 *      receiver_slot int64, receiver_group int64, scratch float64 (2 * n_groups + n_receivers)) -> None
 *
 * Prefix-true masking's step on one masked row (runtime/prefix_true.pour_host_row is its numpy twin, in the
 * same order of sums): each group's donors (their logits read before masking) give their probability to the
 * group's receivers (pairs: receivers[receiver_slot[j]] in group receiver_group[j]), in proportion to the
 * receivers' own. In double, shifted by the largest logit involved; a group whose receivers hold nothing
 * (all masked, or underflowing) moves nothing.
 * ---------------------------------------------------------------------------------------------- */

static PyObject *pour(PyObject *self, PyObject *args) {
    PyObject *o_row, *o_dl, *o_dg, *o_rc, *o_rs, *o_rg, *o_sc;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &o_row, &o_dl, &o_dg, &o_rc, &o_rs, &o_rg, &o_sc)) return NULL;
    Buf row = {0}, dl = {0}, dg = {0}, rc = {0}, rs = {0}, rg = {0}, sc = {0};
    PyObject *result = NULL;
    if (get_buf(o_row, &row, "row", 4, 1) || get_buf(o_dl, &dl, "donor_logits", 4, 0) ||
        get_buf(o_dg, &dg, "donor_group", 8, 0) || get_buf(o_rc, &rc, "receivers", 8, 0) ||
        get_buf(o_rs, &rs, "receiver_slot", 8, 0) || get_buf(o_rg, &rg, "receiver_group", 8, 0) ||
        get_buf(o_sc, &sc, "scratch", 8, 1))
        goto done;
    Py_ssize_t width = N(row, float), nd = N(dl, float), nr = N(rc, int64_t), npairs = N(rs, int64_t);
    Py_ssize_t ng = (N(sc, double) - nr) / 2;
    if (N(dg, int64_t) != nd || N(rg, int64_t) != npairs || ng < 0 || 2 * ng + nr != N(sc, double)) {
        PyErr_SetString(PyExc_ValueError, "pour: donors, receivers, pairs and scratch do not fit together");
        goto done;
    }
    float *R = row.view.buf;
    const float *D = dl.view.buf;
    const int64_t *DG = dg.view.buf, *RC = rc.view.buf, *RS = rs.view.buf, *RG = rg.view.buf;
    for (Py_ssize_t i = 0; i < nr; i++)
        if (RC[i] < 0 || RC[i] >= width) {
            PyErr_Format(PyExc_ValueError, "pour: receivers[%zd] = %lld, outside the row", i, (long long)RC[i]);
            goto done;
        }
    for (Py_ssize_t i = 0; i < nd; i++)
        if (DG[i] < 0 || DG[i] >= ng) {
            PyErr_Format(PyExc_ValueError, "pour: donor_group[%zd] = %lld, outside 0..%zd", i, (long long)DG[i], ng - 1);
            goto done;
        }
    for (Py_ssize_t j = 0; j < npairs; j++)
        if (RS[j] < 0 || RS[j] >= nr || RG[j] < 0 || RG[j] >= ng) {
            PyErr_Format(PyExc_ValueError, "pour: pair %zd = (%lld, %lld), outside the receivers or groups", j,
                         (long long)RS[j], (long long)RG[j]);
            goto done;
        }
    double top = -INFINITY;
    for (Py_ssize_t i = 0; i < nd; i++)
        if (D[i] > top) top = D[i];
    for (Py_ssize_t i = 0; i < nr; i++)
        if (R[RC[i]] > top) top = R[RC[i]];
    if (isfinite(top)) {
        double *given = sc.view.buf, *held = given + ng, *gain = held + ng;
        memset(given, 0, (size_t)(2 * ng + nr) * sizeof(double));
        for (Py_ssize_t i = 0; i < nd; i++) given[DG[i]] += exp((double)D[i] - top);
        for (Py_ssize_t j = 0; j < npairs; j++) held[RG[j]] += exp((double)R[RC[RS[j]]] - top);
        for (Py_ssize_t j = 0; j < npairs; j++)
            if (held[RG[j]] > 0.0) gain[RS[j]] += given[RG[j]] / held[RG[j]];
        for (Py_ssize_t i = 0; i < nr; i++) R[RC[i]] = (float)((double)R[RC[i]] + log1p(gain[i]));
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release(&row);
    release(&dl);
    release(&dg);
    release(&rc);
    release(&rs);
    release(&rg);
    release(&sc);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * One row's constrained step on the host (the one-row paths of the transformers and llama.cpp
 * processors): the two pieces of it that touch the row or the input, so that a step's Python sequences
 * the cursor and nothing else.
 *
 * A row is a writable float32 buffer (a numpy row), or an address: a CPU tensor's data_ptr(), given by
 * a caller that checked it is float32, C-contiguous, on the CPU, outside autograd and at least `width`
 * columns long (runtime/host_row.py's HostMasker and integrations/hf.py do); reading the address costs
 * ~0.1 us where a numpy view of the tensor costs 1-4.
 * ---------------------------------------------------------------------------------------------- */

static int row_arg(PyObject *obj, Py_ssize_t width, Buf *b, float **out) {
    b->held = 0;
    if (PyLong_Check(obj)) {
        void *p = PyLong_AsVoidPtr(obj);
        if (p == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "row: address 0");
            return -1;
        }
        *out = p;
        return 0;
    }
    if (get_buf(obj, b, "row", 4, 1)) return -1;
    if (N(*b, float) != width) {
        PyErr_Format(PyExc_ValueError, "row: %zd columns, but width is %zd", N(*b, float), width);
        return -1;
    }
    *out = b->view.buf;
    return 0;
}

/* mask_row(row, width, n_tokens, banned or None, allowed or None) -> None
 *
 * Writes a StateMask into one row, padding columns n_tokens..width-1 included: with `banned` (int64 ids)
 * those ids and the padding become -inf; with `allowed` every column but those does; with neither only the
 * padding (an all-allowed state, or a finished row). The numpy twin is HostMasker.apply_numpy. Every id is
 * checked against 0..n_tokens-1 before anything is written. */
static PyObject *mask_row(PyObject *self, PyObject *args) {
    PyObject *o_row, *o_banned, *o_allowed;
    Py_ssize_t width, n_tokens;
    if (!PyArg_ParseTuple(args, "OnnOO", &o_row, &width, &n_tokens, &o_banned, &o_allowed)) return NULL;
    Buf row = {0}, ids = {0};
    PyObject *result = NULL;
    float *R;
    float *kept = NULL;
    if (n_tokens < 0 || width < n_tokens) {
        PyErr_Format(PyExc_ValueError, "mask_row: width %zd is less than n_tokens %zd", width, n_tokens);
        return NULL;
    }
    if (o_banned != Py_None && o_allowed != Py_None) {
        PyErr_SetString(PyExc_ValueError, "mask_row: give banned or allowed ids, not both");
        return NULL;
    }
    if (row_arg(o_row, width, &row, &R)) goto done;
    PyObject *o_ids = o_banned != Py_None ? o_banned : o_allowed;
    const int64_t *I = NULL;
    Py_ssize_t n = 0;
    if (o_ids != Py_None) {
        if (get_buf(o_ids, &ids, o_banned != Py_None ? "banned" : "allowed", 8, 0)) goto done;
        I = ids.view.buf;
        n = N(ids, int64_t);
        for (Py_ssize_t i = 0; i < n; i++)
            if (I[i] < 0 || I[i] >= n_tokens) {
                PyErr_Format(PyExc_ValueError, "mask_row: id %lld at %zd is outside 0..%zd", (long long)I[i], i,
                             n_tokens - 1);
                goto done;
            }
    }
    const float neg = -INFINITY;
    if (o_allowed != Py_None) {
        kept = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(float));
        if (kept == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) kept[i] = R[I[i]];
        for (Py_ssize_t j = 0; j < width; j++) R[j] = neg;
        for (Py_ssize_t i = 0; i < n; i++) R[I[i]] = kept[i];
    } else {
        for (Py_ssize_t i = 0; i < n; i++) R[I[i]] = neg;
        for (Py_ssize_t j = n_tokens; j < width; j++) R[j] = neg;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyMem_Free(kept);
    release(&row);
    release(&ids);
    return result;
}

/* follow_ids(ids, length, before, head, tail) -> the new token, or -1
 *
 * Whether a sequence of `length` int64 ids (an address, checked by the caller as for a row, or a buffer)
 * is the previous call's `before` ids plus one: it must start with `head` (bytes: the first ids, as the
 * processor kept them when the generation started) and its ids before-k..before-1 must equal the first k
 * of `tail` (a writable buffer of w ids: the previous call's last k = min(w, before)). Where it is, `tail`
 * becomes this call's last min(w, length) ids and the new id is returned; where not, nothing changes and
 * the answer is -1. The numpy twin is InputWindow.follows in runtime/input_window.py. */
static PyObject *follow_ids(PyObject *self, PyObject *args) {
    PyObject *o_ids, *o_head, *o_tail;
    Py_ssize_t length, before;
    if (!PyArg_ParseTuple(args, "OnnOO", &o_ids, &length, &before, &o_head, &o_tail)) return NULL;
    Buf ids = {0}, head = {0}, tail = {0};
    PyObject *result = NULL;
    const int64_t *I;
    if (length < 0) {
        PyErr_Format(PyExc_ValueError, "follow_ids: length %zd", length);
        return NULL;
    }
    if (PyLong_Check(o_ids)) {
        I = PyLong_AsVoidPtr(o_ids);
        if (I == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "follow_ids: address 0");
            return NULL;
        }
    } else {
        if (get_buf(o_ids, &ids, "ids", 8, 0)) goto done;
        if (N(ids, int64_t) != length) {
            PyErr_Format(PyExc_ValueError, "follow_ids: %zd ids, but length is %zd", N(ids, int64_t), length);
            goto done;
        }
        I = ids.view.buf;
    }
    if (get_buf(o_head, &head, "head", 1, 0) || get_buf(o_tail, &tail, "tail", 1, 1)) goto done;
    Py_ssize_t nh = head.view.len / 8, w = tail.view.len / 8;
    long long token = -1;
    if (before > 0 && before + 1 == length && nh <= before && head.view.len % 8 == 0) {
        Py_ssize_t k = before < w ? before : w;
        if (memcmp(I, head.view.buf, (size_t)nh * 8) == 0 && memcmp(I + before - k, tail.view.buf, (size_t)k * 8) == 0) {
            Py_ssize_t m = length < w ? length : w;
            memcpy(tail.view.buf, I + length - m, (size_t)m * 8);
            token = I[length - 1];
        }
    }
    result = PyLong_FromLongLong(token);
done:
    release(&ids);
    release(&head);
    release(&tail);
    return result;
}

static PyMethodDef methods[] = {
    {"trie_build", trie_build, METH_VARARGS, "Sort the tokens and lay their trie out in preorder."},
    {"trie_walk", trie_walk, METH_VARARGS, "Every token the automaton accepts from a state, with its end state."},
    {"trie_symbols", trie_symbols, METH_VARARGS, "Per trie node, the symbols of its subtree."},
    {"trie_mask", trie_mask, METH_VARARGS, "The allowed tokens of a state, their largest need, the trapped ones."},
    {"minimize", minimize, METH_VARARGS, "Hopcroft's partition refinement (classes in place; returns how many)."},
    {"live_states", live_states, METH_VARARGS, "The states on a path from the start to acceptance."},
    {"relax", relax, METH_VARARGS, "Shortest unit-step distances from starting values, along edges."},
    {"bfs_order", bfs_order, METH_VARARGS, "Breadth-first numbering from the start, successors by symbol."},
    {"reach", reach, METH_VARARGS, "Grow a set of states by everything reachable along sorted edges."},
    {"text_tokens", text_tokens, METH_VARARGS, "The tokens that spell pieces of a byte string."},
    {"trie_edges", trie_edges, METH_VARARGS, "(state, end state) of a token trie walked from states."},
    {"shift_rows", shift_rows, METH_VARARGS, "Copy a table's rows into another, targets shifted, dead kept."},
    {"compact", compact, METH_VARARGS, "The kept rows of a table, targets renumbered."},
    {"pour", pour, METH_VARARGS, "Prefix-true masking: the donors' probability onto their groups' receivers."},
    {"mask_row", mask_row, METH_VARARGS, "One row masked by a state's banned or allowed ids, padding included."},
    {"follow_ids", follow_ids, METH_VARARGS, "The id a sequence adds to the previous call's, or -1."},
    {"subset", subset, METH_VARARGS, "Subset construction of a Thompson NFA, states numbered breadth-first."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "toolgrammar._native",
                                    "The vocabulary walks of toolgrammar.engine, in C.", -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
