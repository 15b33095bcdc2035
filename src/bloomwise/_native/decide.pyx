# cython: freethreading_compatible = False
"""Compiled decisions of the selective filters (``bloomwise.paradox.selective`` and ``.selective_counting``).

A selective filter's answer for a key depends on the key only through its prior and what the filter says about it:
one bit for a Bloom filter, k counters for a counting one. Everything else is a function of the filter's state:

* Bloom (Theorem 1 and Bayes): the false-positive rate of the filter as built, the paradox threshold
  ``FPR / (FPR + alpha)``, the costs; with a constant prior, the three possible decisions themselves (not asked,
  asked and "no", asked and "yes") are fixed, and a query returns one of three precomputed tuples.
* Counting (Theorems 2 and 4): the per-counter-value log likelihood ratio table of ``(n, m, k)``
  (``SelectiveCountingBloomFilter.counter_log_ratio_table``), the skip threshold and the costs; a key's posterior is
  then ``1 / (1 + exp(-z))`` with ``z = sum_j table[c_j] + log P - log(1 - P)``.

These kernels sit below the paradox layer and import nothing of it: ``bloomwise.paradox`` hands them, once, what they
need of it with :func:`bind_paradox` (the Decision types, the prior classes they recognise, its key helpers, and the
names of the selective filters' attributes a state depends on), and the per-state values come from the selective
filters' own methods (``estimated_fpr()``, ``threshold``, ``skip_threshold``, ``counter_log_ratio_table()``,
``compiled_decisions_apply()``) and the priors' ``label_probability()``.

The per-state values live in a cache object in the selective filter's ``__dict__``. Each call first checks that the
state is still the one they were computed from: the same objects (by identity: the filter, prior, cost, flags, the
key count and the constant prior's value; the cache holds references to them, so an identity cannot be reused) and,
for counting filters, the same key count ``n``. Any change recomputes them. On CPython 3.11 an unchanged dict version
(PEP 509) of the selective filter and of its prior proves that nothing changed; where there are no dict versions
(3.12 on) the identities are compared one by one. :func:`use_dict_versions` switches versions off on 3.11 too, so
the tests run that comparison everywhere.

Exactness: every per-key formula is the one of the Python code, with the same double-precision operations in the
same order (C compiled with ``-ffp-contract=off``: no fused multiply-adds). The row sum of k table entries follows
numpy's ``add.reduce`` order (pairwise, eight accumulators from eight terms on), and ``exp``/``log``/``log1p`` are the C
library's, in the Python path too (``posteriors_from_log_ratio``; numpy's own, used with AVX-512, differ by an ulp
now and then). Decisions and posteriors therefore equal those of the Python code bit for bit, on every CPU.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.sequence cimport PySequence_Contains
from libc.math cimport exp, log, log1p, fabs, INFINITY
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from bloomwise._native.hashing cimport Hasher, hash_common_str, hash_object
from bloomwise._native.layouts cimport (
    Geometry, geometry_init, positions, test_bits, prefetch_key, bw_prefetch_read, MAX_HASHES,
)
from bloomwise._native.support cimport numpy
from bloomwise._native.counting cimport counter_array_num_keys

cdef extern from "Python.h":
    object PyFloat_FromDouble(double)
    double PyFloat_AsDouble(object) except? -1.0
    void PyTuple_SET_ITEM(object, Py_ssize_t, object)
    ctypedef object (*allocfunc)(PyTypeObject*, Py_ssize_t)
    ctypedef struct PyTypeObjectAlloc "PyTypeObject":
        allocfunc tp_alloc

cdef extern from *:
    """
    /* PEP 509: a dict's version tag changes with every change to it and is unique across dicts (CPython < 3.12;
       deprecated from 3.12 on, where the attributes are compared one by one instead). */
    #if PY_VERSION_HEX < 0x030C0000
    #define BW_HAVE_DICT_VERSION 1
    #define BW_DICT_VERSION(d) ((unsigned long long)((PyDictObject*)(d))->ma_version_tag)
    #else
    #define BW_HAVE_DICT_VERSION 0
    #define BW_DICT_VERSION(d) 0ULL
    #endif
    """
    bint BW_HAVE_DICT_VERSION
    unsigned long long BW_DICT_VERSION(PyObject* d) noexcept
    PyObject** _PyObject_GetDictPtr(object)
    PyObject* PyDict_GetItemWithError(object, object) except? NULL
    PyObject* dict_lookup "PyDict_GetItemWithError"(object, object)  # NULL: missing, or an error (see PyErr_Occurred)
    object PyObject_CallOneArg(object, object)
    double PyFloat_AS_DOUBLE(object) noexcept
    bint PyFloat_CheckExact(object) noexcept
    PyObject* PyErr_Occurred() noexcept
    int PyErr_ExceptionMatches(object) noexcept
    void PyErr_Clear() noexcept


cdef inline PyObject* instance_dict(object obj) noexcept:
    """An instance's __dict__ (borrowed), NULL if it has none."""
    cdef PyObject** ptr = _PyObject_GetDictPtr(obj)
    return ptr[0] if ptr != NULL else NULL


cdef inline unsigned long long dict_version(object obj) noexcept:
    cdef PyObject* d = instance_dict(obj)
    return BW_DICT_VERSION(d) if d != NULL else 0


from bloomwise._native.hashes import hash_many
from bloomwise._native.counting import CountingCore
from bloomwise._native.bloom import BloomCore


# ---- what bloomwise.paradox hands the kernels (bind_paradox) ---------------------------------------------------------
cdef object _decision_type = None   # Decision (a NamedTuple) and Decisions
cdef object _decisions_type = None
cdef object _constant_prior_type = None, _class_prior_type = None
cdef object _take = None, _keys_list = None   # (keys, bool mask) -> the keys where True; keys -> a list or array
# the selective filters' attributes a state depends on (their __dict__ keys), and the one that holds the state
cdef str A_FILTER = None, A_PRIOR = None, A_COST = None, A_NUM_INSERTED = None, A_MAX_SKIPPED = None
cdef str A_SELECTIVE_INSERT = None, A_SELECTIVE_QUERY = None, A_RULE = None, A_EXACT = None, A_STATE = None
# False: compare identities one by one even where dict versions exist (use_dict_versions)
cdef bint dict_versions = BW_HAVE_DICT_VERSION

BOUND_ATTRIBUTES = ("filter", "prior", "cost", "num_inserted", "max_skipped_prior", "selective_insert",
                    "selective_query", "rule", "exact", "state")


def bind_paradox(*, decision, decisions, constant_prior, class_prior, take, keys_list, attributes):
    """Hand the kernels what they use of ``bloomwise.paradox`` (called once, by ``bloomwise.paradox.selective``):
    the ``Decision`` and ``Decisions`` types, the ``ConstantPrior`` and ``ClassPrior`` classes (decided here without
    calling their methods), ``take(keys, mask)`` and ``keys_list(keys)``, and ``attributes``: for each role of
    ``BOUND_ATTRIBUTES`` the name of the selective filters' attribute that plays it."""
    global _decision_type, _decisions_type, _constant_prior_type, _class_prior_type, _take, _keys_list
    global A_FILTER, A_PRIOR, A_COST, A_NUM_INSERTED, A_MAX_SKIPPED, A_SELECTIVE_INSERT, A_SELECTIVE_QUERY, A_RULE
    global A_EXACT, A_STATE
    if set(attributes) != set(BOUND_ATTRIBUTES) or not all(type(name) is str for name in attributes.values()):
        raise ValueError(f"attributes must name each of {', '.join(BOUND_ATTRIBUTES)} with a str, got {attributes!r}")
    A_FILTER, A_PRIOR, A_COST = attributes["filter"], attributes["prior"], attributes["cost"]
    A_NUM_INSERTED, A_MAX_SKIPPED = attributes["num_inserted"], attributes["max_skipped_prior"]
    A_SELECTIVE_INSERT, A_SELECTIVE_QUERY = attributes["selective_insert"], attributes["selective_query"]
    A_RULE, A_EXACT, A_STATE = attributes["rule"], attributes["exact"], attributes["state"]
    _constant_prior_type, _class_prior_type, _take, _keys_list = constant_prior, class_prior, take, keys_list
    _decisions_type = decisions
    _decision_type = decision


def use_dict_versions(bint enabled):
    """Whether a state is proven unchanged by dict versions (CPython < 3.12; the default there) or by comparing
    the identities it depends on one by one (always, from 3.12 on). Returns the previous setting. For tests: so that
    the comparison 3.12 relies on runs on 3.11 too. States are recomputed after a switch."""
    global dict_versions
    previous = dict_versions
    dict_versions = enabled and BW_HAVE_DICT_VERSION
    _last_bloom.version = _last_counting.version = 0
    return previous


cdef int _not_bound() except -1:
    if _decision_type is None:
        raise RuntimeError("bloomwise._native.decide is used through bloomwise.paradox, which binds it on import")
    return 0


cdef object make_decision(bint member, double post, object answer, double expected):
    """A Decision without the NamedTuple's Python __new__: the tuple subclass allocated and filled directly."""
    cdef object m = True if member else False
    cdef object p = PyFloat_FromDouble(post)
    cdef object e = PyFloat_FromDouble(expected)
    cdef object result = (<PyTypeObjectAlloc*>_decision_type).tp_alloc(<PyTypeObject*>_decision_type, 4)
    Py_INCREF(m)
    PyTuple_SET_ITEM(result, 0, m)
    Py_INCREF(p)
    PyTuple_SET_ITEM(result, 1, p)
    Py_INCREF(answer)
    PyTuple_SET_ITEM(result, 2, answer)
    Py_INCREF(e)
    PyTuple_SET_ITEM(result, 3, e)
    return result


cdef object take(object keys, object mask):
    """_support.take(keys, mask) (the keys where the bool array mask is True, in the container they came in),
    the list built in C."""
    if type(keys) is not list:
        return _take(keys, mask)
    cdef const uint8_t[::1] m = mask.view(numpy().uint8)
    cdef Py_ssize_t i
    cdef list items = <list>keys
    cdef list out = []
    if len(items) != m.shape[0]:
        raise RuntimeError("the list of keys changed size during the operation")
    for i in range(m.shape[0]):
        if m[i]:
            out.append(items[i])
    return out


cdef inline bint same(dict d, str name, object expected):
    """Whether attribute ``name`` in the instance dict ``d`` is the object ``expected`` (no attribute: False)."""
    return PyDict_GetItem(d, name) == <PyObject*>expected


# ---- priors -----------------------------------------------------------------------------------------------------------
cdef enum PriorKind:
    PRIOR_CONSTANT = 0   # exactly ConstantPrior: one value, observe() does nothing
    PRIOR_CLASS = 1      # exactly ClassPrior, not vectorised: classify(key) and a dict look-up, done here
    PRIOR_OTHER = 2      # anything else: prior.probability / probabilities / observe / observe_many


cdef int prior_kind(object prior):
    if type(prior) is _constant_prior_type:
        return PRIOR_CONSTANT
    if type(prior) is _class_prior_type and not prior.vectorized:
        return PRIOR_CLASS
    return PRIOR_OTHER


cdef inline bint prior_unchanged(int kind, object prior, object value, dict class_table, object class_default):
    """Whether a constant or class prior still holds the values a cached state was computed from."""
    if kind == PRIOR_CONSTANT:
        return same(prior.__dict__, "p", value)
    if kind == PRIOR_CLASS:
        return same(prior.__dict__, "table", class_table) and same(prior.__dict__, "default", class_default)
    return True


cdef inline double class_prior(object prior, dict table, object classify, object default, object key,
                               bint single) except -1.0:
    """ClassPrior.probability(key) (single) or its per-key step of probabilities() (batch), the same look-up."""
    cdef object label = PyObject_CallOneArg(classify, key)  # vectorcall, as Python's own call of it
    if single and isinstance(label, numpy().generic):
        label = label.item()
    return label_prior(prior, table, default, label, key, NULL)


cdef inline double label_prior(object prior, dict table, object default, object label, object key,
                               bint* repeatable) except -1.0:
    """The prior of a class label: its table value, else the default, else ClassPrior.label_probability's answer
    (KeyError).
    ``repeatable`` (if given) is set when the value is the table's own or the default: the same label gets the same
    value again while the table is unchanged."""
    cdef PyObject* value = dict_lookup(table, label)  # no try block on the common path (it costs a state save)
    if value != NULL:
        if repeatable != NULL:
            repeatable[0] = True
        return PyFloat_AS_DOUBLE(<object>value) if PyFloat_CheckExact(<object>value) else PyFloat_AsDouble(<object>value)
    if PyErr_Occurred() != NULL:
        if not PyErr_ExceptionMatches(TypeError):
            raise_current()
        PyErr_Clear()  # an unhashable label: ClassPrior.label_probability says what happens (default or KeyError)
        return PyFloat_AsDouble(prior.label_probability(label, key))
    if default is not None:  # a missing label: the default (without label_probability's KeyError, raised and caught)
        if repeatable != NULL:
            repeatable[0] = True
        return PyFloat_AsDouble(default)
    return PyFloat_AsDouble(prior.label_probability(label, key))


cdef int raise_current() except -1:
    """Propagate the exception already set (a classifier label whose __hash__ or __eq__ raised)."""
    return -1


cdef double checked_prior(object value, object prior) except -1.0:
    """A prior returned by a Prior subclass, as a double in [0, 1]."""
    cdef double p = PyFloat_AsDouble(value)
    if not (0.0 <= p <= 1.0):
        raise ValueError(f"the prior of a key must be a probability in [0, 1], got {value!r} from {prior!r}")
    return p


cdef inline Py_ssize_t fibonacci_slot(uint64_t x, int bits) noexcept nogil:
    """One of 2^bits slots for x: the top bits of x times 2^64 / golden ratio (Knuth's multiplicative hashing), so
    that values a fixed stride apart (object addresses, nearby doubles' bits) spread over the slots."""
    return <Py_ssize_t>((x * <uint64_t>0x9E3779B97F4A7C15ULL) >> (64 - bits))


cdef enum:
    LABEL_PAIR_BITS = 5  # batch_priors: the table values of the last labels seen, by the label object's address:
    LABEL_SLOTS = 64     # 32 pairs of slots, the pair chosen by the address's fibonacci_slot


cdef object batch_priors(object prior, int kind, object keys, Py_ssize_t n):
    """One prior per key as a float64 array (ClassPrior: the same look-ups as ClassPrior.probabilities).

    Classifiers mostly return a few label objects over and over (small ints, one-letter or interned strings, enum
    members): within one batch, a label object seen before gets its table value again without a dict look-up, as
    long as the table is unchanged (its dict version; CPython 3.11; later versions look every label up). The labels
    are held meanwhile, so an address cannot be reused by another object."""
    if kind != PRIOR_CLASS:
        return prior.probabilities(keys)
    np = numpy()
    out = np.empty(n, dtype=np.float64)
    cdef double[::1] o = out
    cdef dict table = prior.table
    classify, default = prior.classify, prior.default
    cdef Py_ssize_t i = 0, slot
    cdef PyObject* seen[LABEL_SLOTS]
    cdef double seen_value[LABEL_SLOTS]
    cdef list held = [None] * LABEL_SLOTS
    cdef unsigned long long version = BW_DICT_VERSION(<PyObject*>table)
    cdef bint cache = dict_versions, repeatable
    cdef object label
    for slot in range(LABEL_SLOTS):
        seen[slot] = NULL
    for key in keys:
        label = PyObject_CallOneArg(classify, key)
        slot = 2 * fibonacci_slot(<uint64_t><size_t><PyObject*>label, LABEL_PAIR_BITS)
        slot += seen[slot] != <PyObject*>label  # (the pair's second slot, when the label is not in the first)
        if cache and seen[slot] == <PyObject*>label and BW_DICT_VERSION(<PyObject*>table) == version:
            o[i] = seen_value[slot]
        else:
            repeatable = False
            o[i] = label_prior(prior, table, default, label, key, &repeatable)
            if cache and repeatable and BW_DICT_VERSION(<PyObject*>table) == version:
                slot &= ~1  # the pair's first slot when it is free or holds this label, else the second
                slot += seen[slot] != NULL and seen[slot] != <PyObject*>label
                held[slot] = label
                seen[slot] = <PyObject*>label
                seen_value[slot] = o[i]
        i += 1
    return out


# ---- numpy's float64 sum of one row (add.reduce over k contiguous terms) ----------------------------------------------
cdef inline double row_sum(const double* a, Py_ssize_t n) noexcept nogil:
    """numpy's pairwise summation for n <= 128 terms: sequential below 8, else eight interleaved partial sums."""
    cdef double res, r0, r1, r2, r3, r4, r5, r6, r7
    cdef Py_ssize_t i
    if n < 8:
        res = -0.0
        for i in range(n):
            res += a[i]
        return res
    r0 = a[0]; r1 = a[1]; r2 = a[2]; r3 = a[3]; r4 = a[4]; r5 = a[5]; r6 = a[6]; r7 = a[7]
    i = 8
    while i < n - (n % 8):
        r0 += a[i]; r1 += a[i + 1]; r2 += a[i + 2]; r3 += a[i + 3]
        r4 += a[i + 4]; r5 += a[i + 5]; r6 += a[i + 6]; r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[i]
        i += 1
    return res


def _row_sum(values):
    """The sum of a 1-D float64 array in numpy's order (exposed for the tests)."""
    cdef const double[::1] v = numpy().ascontiguousarray(values, dtype=numpy().float64)
    return row_sum(&v[0], v.shape[0]) if v.shape[0] else -0.0


cdef inline double posterior_from_log_ratio(double lr, double p, double log_p, double log1m_p) noexcept nogil:
    """posterior._posterior_from_log_ratio for one key: P L / (P L + 1 - P), L = exp(lr), overflow-safe."""
    cdef double z, e
    if not (lr > -INFINITY):
        return 0.0
    if p >= 1.0:
        return 1.0
    if not (p > 0.0):
        return 0.0
    z = (lr + log_p) - log1m_p
    e = exp(-fabs(z))
    if z >= 0:
        return 1.0 / (1.0 + e)
    return e / (1.0 + e)


cdef inline void log_odds_terms(double p, double* log_p, double* log1m_p) noexcept nogil:
    log_p[0] = log(p) if p > 0.0 else -INFINITY
    log1m_p[0] = log1p(-p) if p < 1.0 else -INFINITY


def posteriors_from_log_ratio(log_ratio, prior):
    """``P L / (P L + 1 - P)`` with ``L = exp(log_ratio)`` for arrays of the same shape (posterior.py's vectorised
    path): the per-key formula of the compiled decisions, so both give the same bits on every CPU."""
    np = numpy()
    lr_arr = np.array(log_ratio, dtype=np.float64, order="C")  # keeps a 0-d shape (ascontiguousarray would not)
    p_arr = np.array(np.broadcast_to(np.asarray(prior, dtype=np.float64), lr_arr.shape), order="C")
    out_arr = np.empty(lr_arr.shape, dtype=np.float64)
    cdef const double[::1] lr = lr_arr.reshape(-1)
    cdef const double[::1] p = p_arr.reshape(-1)
    cdef double[::1] out = out_arr.reshape(-1)
    cdef Py_ssize_t i
    cdef double log_p, log1m_p
    with nogil:
        for i in range(lr.shape[0]):
            log_odds_terms(p[i], &log_p, &log1m_p)
            out[i] = posterior_from_log_ratio(lr[i], p[i], log_p, log1m_p)
    return out_arr


# ---- Bloom filter (SelectiveBloomFilter) -----------------------------------------------------------------------------
@cython.final
cdef class BloomState:
    """What a SelectiveBloomFilter's decisions depend on besides the key's prior and the filter's bit answer."""
    # identities the values below were computed from
    cdef object filter, prior, prior_value, cost, num_inserted, max_skipped, selective_insert, selective_query, rule
    cdef int prior_kind
    cdef dict class_table
    cdef object classify, class_default
    cdef double p                 # the constant prior
    cdef double fpr, threshold, false_positive, false_negative, max_skipped_prior
    cdef bint use_skipped, query_selectively
    cdef object if_skipped, if_absent, if_present   # constant prior: the three possible Decisions
    cdef unsigned long long version, prior_version  # the dict versions of the filter and its prior (when known)

    def __reduce__(self):  # a copy or pickle of the selective filter recomputes its state
        return (type(None), ())

    cdef bint valid(self, dict d):
        if dict_versions and self.version:
            return BW_DICT_VERSION(<PyObject*>d) == self.version and dict_version(self.prior) == self.prior_version
        if not (same(d, A_FILTER, self.filter) and same(d, A_PRIOR, self.prior) and same(d, A_COST, self.cost)
                and same(d, A_NUM_INSERTED, self.num_inserted) and same(d, A_MAX_SKIPPED, self.max_skipped)
                and same(d, A_SELECTIVE_INSERT, self.selective_insert)
                and same(d, A_SELECTIVE_QUERY, self.selective_query) and same(d, A_RULE, self.rule)):
            return False
        return prior_unchanged(self.prior_kind, self.prior, self.prior_value, self.class_table, self.class_default)


cdef struct LastState:   # the state of the selective filter answered last, and its dict's version then
    unsigned long long version
    PyObject* state       # (borrowed: that dict, while unchanged, still holds it)


cdef LastState _last_bloom, _last_counting


cdef inline PyObject* last_state(const LastState* last, dict d) noexcept:
    """``last``'s state when ``d`` is the very dict it came from, unchanged since (a dict version is unique across
    dicts): no look-up. NULL otherwise."""
    if dict_versions and last.version and BW_DICT_VERSION(<PyObject*>d) == last.version:
        return last.state
    return NULL


cdef inline void remember_state(LastState* last, unsigned long long version, object state) noexcept:
    last.version = version
    last.state = <PyObject*>state


cdef BloomState bloom_state(object sel):
    """The valid state of ``sel`` (recomputed when something it depends on changed)."""
    cdef dict d = <dict>instance_dict(sel)
    cdef BloomState s
    cdef PyObject* found = last_state(&_last_bloom, d)
    if found != NULL and (<BloomState>found).valid(d):
        return <BloomState>found
    found = PyDict_GetItemWithError(d, A_STATE)
    if found != NULL and type(<object>found) is BloomState and (<BloomState>found).valid(d):
        remember_state(&_last_bloom, (<BloomState>found).version, <object>found)
        return <BloomState>found
    _not_bound()
    s = BloomState.__new__(BloomState)
    s.filter, s.prior, s.cost = d[A_FILTER], d[A_PRIOR], d[A_COST]
    s.num_inserted, s.max_skipped = d[A_NUM_INSERTED], d[A_MAX_SKIPPED]
    s.selective_insert, s.selective_query, s.rule = d[A_SELECTIVE_INSERT], d[A_SELECTIVE_QUERY], d[A_RULE]
    s.prior_kind = prior_kind(s.prior)
    s.fpr = sel.estimated_fpr()
    s.threshold = sel.threshold  # paradox_threshold(FPR, alpha) of the filter as built
    s.false_positive, s.false_negative = s.cost.false_positive, s.cost.false_negative
    s.max_skipped_prior = s.max_skipped
    s.use_skipped = bool(s.selective_insert) and s.rule == "exact"
    s.query_selectively = bool(s.selective_query)
    if s.prior_kind == PRIOR_CLASS:
        s.class_table, s.classify, s.class_default = s.prior.table, s.prior.classify, s.prior.default
    if s.prior_kind == PRIOR_CONSTANT:
        s.prior_value = s.prior.__dict__["p"]
        s.p = checked_prior(s.prior_value, s.prior)
        # the three possible answers, by the batch's formulas
        informative = s.p > s.max_skipped_prior if s.use_skipped else True
        consult = informative and s.p >= s.threshold if s.query_selectively else True
        s.if_skipped = None if consult else constant_decision(s, informative, False, None)
        s.if_absent = constant_decision(s, informative, True, False) if consult else None
        s.if_present = constant_decision(s, informative, True, True) if consult else None
    d[A_STATE] = s
    s.version = BW_DICT_VERSION(<PyObject*>d) if dict_versions else 0
    s.prior_version = dict_version(s.prior)
    remember_state(&_last_bloom, s.version, s)
    return s


cdef object constant_decision(BloomState s, bint informative, bint consulted, object answer):
    """The Decision of a constant prior given the filter's answer (None: not consulted), by the batch's formulas."""
    cdef double post = bloom_posterior(s.p, consulted, informative, answer is True, s.fpr)
    cdef bint member = cost_optimal(post, answer is True, s.query_selectively, s.false_positive, s.false_negative)
    return make_decision(member, post, answer, expected_cost(post, member, s.false_positive, s.false_negative))


def bloom_query(sel, key):
    """The cost-optimal answer for ``key`` (Theorems 1 and 4), with its posterior and expected cost: a Decision.

    With ``selective_query``, a key whose prior is below ``threshold`` (or that selective insertion skipped) is
    answered "absent" without asking the filter; otherwise the filter is asked and a positive answer gives the
    posterior ``P / (P + (1 - P) FPR)``, a negative one 0. Without ``selective_query``, the answer is the filter's.

    (``SelectiveBloomFilter.query``.)
    """
    cdef BloomState s = bloom_state(sel)
    cdef double p, post, expected
    cdef bint informative, consult, answer, member
    if s.prior_kind == PRIOR_CONSTANT:
        if s.if_skipped is not None:
            return s.if_skipped
        return s.if_present if PySequence_Contains(s.filter, key) else s.if_absent
    if s.prior_kind == PRIOR_CLASS:
        p = class_prior(s.prior, s.class_table, s.classify, s.class_default, key, True)
    else:
        p = checked_prior(s.prior.probability(key), s.prior)
        s.prior.observe(key)
    informative = p > s.max_skipped_prior if s.use_skipped else True
    consult = (informative and p >= s.threshold) if s.query_selectively else True
    answer = PySequence_Contains(s.filter, key) if consult else False
    post = bloom_posterior(p, consult, informative, answer, s.fpr)
    member = cost_optimal(post, answer, s.query_selectively, s.false_positive, s.false_negative)
    expected = expected_cost(post, member, s.false_positive, s.false_negative)
    return make_decision(member, post, (True if answer else False) if consult else None, expected)


def bloom_query_many(sel, keys):
    """SelectiveBloomFilter.query_many(keys): priors, the filter's batch answer where needed, one C pass."""
    cdef BloomState s = bloom_state(sel)
    np = numpy()
    keys = _keys_list(keys)
    cdef Py_ssize_t i, n = len(keys)
    cdef double pi, post, fpr = s.fpr, thr = s.threshold, fp = s.false_positive, fn = s.false_negative
    cdef double skipped = s.max_skipped_prior
    cdef bint use_skipped = s.use_skipped, selective = s.query_selectively, informative, consult, answer
    cdef bint constant = s.prior_kind == PRIOR_CONSTANT
    cdef const double[::1] priors
    if constant:
        pi = s.p
        informative = pi > skipped if use_skipped else True
        consult = (informative and pi >= thr) if selective else True
        consulted_arr = np.full(n, consult, dtype=np.bool_)
    else:
        p_arr = batch_priors(s.prior, s.prior_kind, keys, n)
        if s.prior_kind == PRIOR_OTHER:
            s.prior.observe_many(keys)
        priors = p_arr
        consulted_arr = np.empty(n, dtype=np.bool_)
        consult_view = consulted_arr.view(np.uint8)
        _bloom_consulted(priors, consult_view, skipped, thr, use_skipped, selective)
    answer_arr = np.zeros(n, dtype=np.bool_)
    if n:
        if constant:
            if consult:
                answer_arr = np.asarray(s.filter.contains_many(keys), dtype=bool)
        elif type(keys) is list and isinstance(s.filter, BloomCore):
            _bloom_answers_where(s.filter, <list>keys, consulted_arr.view(np.uint8), answer_arr.view(np.uint8))
        elif consulted_arr.all():
            answer_arr = np.asarray(s.filter.contains_many(keys), dtype=bool)
        elif consulted_arr.any():
            answer_arr[consulted_arr] = np.asarray(s.filter.contains_many(take(keys, consulted_arr)),
                                                   dtype=bool)
    member_arr = np.empty(n, dtype=np.bool_)
    cdef const uint8_t[::1] ans = answer_arr.view(np.uint8)
    cdef const uint8_t[::1] cons = consulted_arr.view(np.uint8)
    cdef uint8_t[::1] mem = member_arr.view(np.uint8)
    cdef BloomColumns columns = BloomColumns.__new__(BloomColumns)
    columns.answer, columns.consulted, columns.member = answer_arr, consulted_arr, member_arr
    columns.fpr, columns.false_positive, columns.false_negative = fpr, fp, fn
    columns.max_skipped_prior, columns.use_skipped = skipped, use_skipped
    cdef bint member_if[2]
    if constant:  # the answer decides everything: two precomputed outcomes, chosen per key
        columns.constant = True
        for answer in (False, True):
            post = bloom_posterior(pi, consult, informative, answer, fpr)
            member_if[answer] = cost_optimal(post, answer, selective, fp, fn)
            columns.post_if[answer] = post
            columns.expected_if[answer] = expected_cost(post, member_if[answer], fp, fn)
        with nogil:
            for i in range(n):
                mem[i] = member_if[ans[i] != 0]
    else:
        columns.priors = p_arr
        with nogil:
            for i in range(n):
                pi = priors[i]
                informative = pi > skipped or not use_skipped
                post = bloom_posterior(pi, cons[i], informative, ans[i], fpr)
                mem[i] = cost_optimal(post, ans[i], selective, fp, fn)
    return _decisions_type.deferred(member_arr, answer_arr, consulted_arr, columns)


cdef inline double bloom_posterior(double p, bint consulted, bint informative, bint answer, double fpr) noexcept nogil:
    """``Pr(key in S)`` after the filter's answer, where it was asked and says something about the key: Bayes,
    ``P / (P + (1 - P) FPR)`` after "present" and 0 after "absent" (Bloom paradox, section IV.A); the prior ``P``
    otherwise. A prior of 0 stays 0 after "present" too, also when the FPR is 0 and the formula is 0 / 0: a key the
    prior rules out is not made possible by a filter that answers "present" for it (``posterior.posterior``'s rule)."""
    if consulted and informative:
        return p / (p + (1.0 - p) * fpr) if answer and p != 0.0 else 0.0
    return p


cdef inline bint cost_optimal(double post, bint answer, bint selective, double fp, double fn) noexcept nogil:
    """The answer to act on: "present" when ``post W_FN >= (1 - post) W_FP`` (Theorem 1), or the filter's own."""
    return (post * fn >= (1.0 - post) * fp) if selective else answer


cdef inline double expected_cost(double post, bint member, double fp, double fn) noexcept nogil:
    """The expected cost of an answer: ``(1 - post) W_FP`` if it says "present", ``post W_FN`` if "absent"."""
    return (1.0 - post) * fp if member else post * fn


@cython.final
cdef class BloomColumns:
    """The posterior and expected-cost arrays of a SelectiveBloomFilter.query_many batch, computed when first read
    (``Decisions.posterior`` / ``.expected_cost``) from what the batch saw: the priors, the filter's answers, which
    keys were consulted, and the filter's FPR and costs at the time of the query. The same formulas as the batch's
    member decisions (``bloom_posterior``, ``expected_cost``), so the arrays are those an eager batch would write."""
    cdef object answer, consulted, member, priors, computed
    cdef bint constant, use_skipped
    cdef double fpr, false_positive, false_negative, max_skipped_prior
    cdef double post_if[2]
    cdef double expected_if[2]

    def __reduce__(self):  # Decisions pickles its arrays, never this
        raise TypeError("BloomColumns is internal to Decisions and cannot be pickled")

    def arrays(self):
        """``(posterior, expected_cost)``: computed on the first call, the same arrays on every later one."""
        if self.computed is None:
            self.computed = self._compute()
        return self.computed

    cdef tuple _compute(self):
        np = numpy()
        cdef Py_ssize_t i, n = len(self.member)
        post_arr = np.empty(n, dtype=np.float64)
        expected_arr = np.empty(n, dtype=np.float64)
        cdef double[::1] po = post_arr
        cdef double[::1] ex = expected_arr
        cdef const uint8_t[::1] ans = self.answer.view(np.uint8)
        cdef const uint8_t[::1] cons = self.consulted.view(np.uint8)
        cdef const uint8_t[::1] mem = self.member.view(np.uint8)
        cdef const double[::1] priors
        cdef double pi, post, fpr = self.fpr, fp = self.false_positive, fn = self.false_negative
        cdef double skipped = self.max_skipped_prior
        cdef bint use_skipped = self.use_skipped, answer
        if self.constant:
            for i in range(n):
                answer = ans[i] != 0
                po[i] = self.post_if[answer]
                ex[i] = self.expected_if[answer]
        else:
            priors = self.priors
            for i in range(n):
                pi = priors[i]
                post = bloom_posterior(pi, cons[i], pi > skipped or not use_skipped, ans[i], fpr)
                po[i] = post
                ex[i] = expected_cost(post, mem[i], fp, fn)
        return post_arr, expected_arr


cdef enum:
    ANSWER_CHUNK = 256     # keys hashed (with the GIL) before their bits are tested (without it)
    ANSWER_PREFETCH = 8    # the bits of the key this many ahead are requested early


cdef int _bloom_answers_where(object filter, list keys, const uint8_t[::1] consulted, uint8_t[::1] answers) except -1:
    """``answers[i] = keys[i] in filter`` where ``consulted[i]``, for a bloomwise Bloom filter: each consulted key
    hashed once and its bits tested in place (the same hashing and bit tests as ``contains_many``), with no list of
    the consulted keys and no second pass."""
    cdef Geometry g
    cdef Hasher hasher
    cdef object key_func = filter._key_function
    cdef uint64_t hs[ANSWER_CHUNK]
    cdef Py_ssize_t idx[ANSWER_CHUNK]
    cdef Py_ssize_t start = 0, i, t, m, n = len(keys)
    cdef Py_buffer view
    cdef const uint64_t* words
    if n != consulted.shape[0]:
        raise RuntimeError("the list of keys changed size during the operation")
    geometry_init(&g, filter.num_cells, filter.num_hashes, filter._layout_id)
    hasher.seed = filter.seed
    hasher.scheme = filter._hash_scheme_id
    PyObject_GetBuffer(filter._payload(), &view, PyBUF_SIMPLE)  # held for the call: the bits cannot go away
    try:
        words = <const uint64_t*>view.buf
        while start < n:
            m = 0
            i = start
            while i < n and m < ANSWER_CHUNK:
                if consulted[i]:
                    key = keys[i]
                    if key_func is not None or not hash_common_str(key, hasher, &hs[m]):
                        hash_object(key, hasher, key_func, &hs[m])
                    idx[m] = i
                    m += 1
                i += 1
            start = i
            with nogil:
                for t in range(min(m, <Py_ssize_t>ANSWER_PREFETCH)):
                    prefetch_key(&g, words, hs[t], False)
                for t in range(m):
                    if t + ANSWER_PREFETCH < m:
                        prefetch_key(&g, words, hs[t + ANSWER_PREFETCH], False)
                    answers[idx[t]] = test_bits(&g, words, hs[t])
    finally:
        PyBuffer_Release(&view)
    return 0


cdef void _bloom_consulted(const double[::1] priors, uint8_t[::1] out, double skipped, double thr, bint use_skipped,
                           bint selective) noexcept nogil:
    cdef Py_ssize_t i
    cdef double p
    for i in range(priors.shape[0]):
        p = priors[i]
        if selective:
            out[i] = (p > skipped or not use_skipped) and p >= thr
        else:
            out[i] = 1


# ---- counting filter (SelectiveCountingBloomFilter over a bloomwise CountingBloomFilter) -----------------------------
cdef inline uint32_t cell_value(const uint8_t* cells, int width, uint64_t i) noexcept nogil:
    """Counter i of a packed array (docs/counting.md): 4-bit nibbles (low nibble first), 8- or 16-bit integers."""
    if width == 4:
        return (cells[i >> 1] >> ((i & 1) << 2)) & 0xF
    if width == 8:
        return cells[i]
    return (<const uint16_t*>cells)[i]


cdef enum:
    DECISION_MEMO_BITS = 6  # Decisions remembered per counting state: 64, by fibonacci_slot
    DECISION_MEMO = 1 << DECISION_MEMO_BITS


@cython.final
cdef class CountingState:
    """What a SelectiveCountingBloomFilter's decisions depend on besides the key's prior and counters."""
    # the Decisions last made, by posterior and filter answer (the rest of a Decision follows from those and the
    # state): a key whose counters give a posterior seen before gets the same (immutable) tuple again
    cdef uint64_t memo_bits[DECISION_MEMO]
    cdef int memo_kind[DECISION_MEMO]   # -1: empty; else decision_kind(consulted, answer)
    cdef list memo
    cdef object filter, prior, prior_value, cost, selective_query, exact
    cdef uint64_t num_items
    cdef int prior_kind
    cdef dict class_table
    cdef object classify, class_default
    cdef double p, log_p, log1m_p  # the constant prior and its log-odds terms
    cdef double skip, false_positive, false_negative
    cdef bint query_selectively
    cdef unsigned long long version, prior_version  # the dict versions of the selective filter and its prior
    # the filter's counters, read in place: geometry, hashing, cells (a held buffer of its storage)
    cdef Geometry g
    cdef Hasher hasher
    cdef object key_func
    cdef int width
    cdef Py_buffer view
    cdef bint has_view
    cdef const uint8_t* cells
    # log likelihood ratio of a counter value c = 0 .. table_len - 1 (sel.counter_log_ratio_table)
    cdef object table_arr
    cdef const double* table
    cdef Py_ssize_t table_len, table_max   # table_max: the largest length it may need (the counter maximum + 1)

    def __dealloc__(self):
        if self.has_view:
            PyBuffer_Release(&self.view)

    def __reduce__(self):  # a copy or pickle of the selective filter recomputes its state
        return (type(None), ())

    cdef bint valid(self, dict d):
        # (an unchanged dict version, or the same _filter entry, means self.filter is the selective filter's filter)
        if dict_versions and self.version:
            return (BW_DICT_VERSION(<PyObject*>d) == self.version and dict_version(self.prior) == self.prior_version
                    and counter_array_num_keys(self.filter) == self.num_items)
        if not (same(d, A_FILTER, self.filter) and same(d, A_PRIOR, self.prior) and same(d, A_COST, self.cost)
                and same(d, A_SELECTIVE_QUERY, self.selective_query) and same(d, A_EXACT, self.exact)):
            return False
        if counter_array_num_keys(self.filter) != self.num_items:
            return False
        return prior_unchanged(self.prior_kind, self.prior, self.prior_value, self.class_table, self.class_default)

    cdef int set_table(self, object sel, Py_ssize_t length) except -1:
        table = sel.counter_log_ratio_table(length, int(self.num_items))
        self.table_arr = numpy().ascontiguousarray(table, dtype=numpy().float64)
        cdef const double[::1] t = self.table_arr
        self.table = &t[0]
        self.table_len = length
        return 0


@cython.final
cdef class Unsupported:
    """The state of a selective counting filter the compiled decisions do not apply to (its filter is kept)."""
    cdef object filter

    def __reduce__(self):
        return (type(None), ())


cdef CountingState counting_state(object sel):
    """The valid state of ``sel``, or None when the compiled decisions do not apply (see counting_supported)."""
    cdef dict d = <dict>instance_dict(sel)
    cdef CountingState s
    cdef Py_ssize_t slot
    cdef PyObject* found = last_state(&_last_counting, d)
    if found != NULL and (<CountingState>found).valid(d):
        return <CountingState>found
    found = PyDict_GetItemWithError(d, A_STATE)
    cdef object filter
    cdef Unsupported no
    if found != NULL:
        if type(<object>found) is CountingState and (<CountingState>found).valid(d):
            remember_state(&_last_counting, (<CountingState>found).version, <object>found)
            return <CountingState>found
        if type(<object>found) is Unsupported and (<Unsupported>found).filter is d[A_FILTER]:
            return None
    _not_bound()
    filter = d[A_FILTER]
    # (a bloomwise CountingBloomFilter under a class that computes posteriors as SelectiveCountingBloomFilter does)
    if not (isinstance(filter, CountingCore) and sel.compiled_decisions_apply()):
        no = Unsupported.__new__(Unsupported)
        no.filter = filter
        d[A_STATE] = no
        return None
    np = numpy()
    s = CountingState.__new__(CountingState)
    s.filter, s.prior, s.cost = filter, d[A_PRIOR], d[A_COST]
    s.selective_query, s.exact = d[A_SELECTIVE_QUERY], d[A_EXACT]
    s.num_items = filter.num_keys
    s.prior_kind = prior_kind(s.prior)
    s.query_selectively = bool(s.selective_query)
    s.false_positive, s.false_negative = s.cost.false_positive, s.cost.false_negative
    s.skip = sel.skip_threshold
    if s.prior_kind == PRIOR_CLASS:
        s.class_table, s.classify, s.class_default = s.prior.table, s.prior.classify, s.prior.default
    if s.prior_kind == PRIOR_CONSTANT:
        s.prior_value = s.prior.__dict__["p"]
        s.p = checked_prior(s.prior_value, s.prior)
        log_odds_terms(s.p, &s.log_p, &s.log1m_p)
    geometry_init(&s.g, filter._num_cells, filter.num_hashes, filter._layout_id)
    s.hasher.seed = filter.seed
    s.hasher.scheme = filter._hash_scheme_id
    s.key_func = filter._key_function
    s.width = filter.counter_bits
    PyObject_GetBuffer(filter._payload(), &s.view, PyBUF_SIMPLE)  # the filter's storage: fixed for its lifetime
    s.has_view = True
    s.cells = <const uint8_t*>s.view.buf
    s.table_max = <Py_ssize_t>filter.counter_max + 1
    if s.num_items > 0:
        s.set_table(sel, min(s.table_max, 256))
    s.memo = [None] * DECISION_MEMO
    for slot in range(DECISION_MEMO):
        s.memo_kind[slot] = -1
    d[A_STATE] = s
    s.version = BW_DICT_VERSION(<PyObject*>d) if dict_versions else 0
    s.prior_version = dict_version(s.prior)
    remember_state(&_last_counting, s.version, s)
    return s


cdef enum:
    NEEDS_LARGER_TABLE = -2


cdef inline int counting_log_ratio(CountingState s, uint64_t h, double* lr_out, bint* answer_out) noexcept nogil:
    """The log-likelihood ratio of one consulted key's counters (the sum of table[c] over its k counters, in numpy's
    order) and the plain answer; lr = -inf when the posterior is 0 whatever the prior (a zero counter, or an empty
    filter). Returns NEEDS_LARGER_TABLE if a counter is past the table, -1 if n = 0 while a counter is not 0
    (inconsistent), 0 otherwise."""
    cdef uint64_t pos[MAX_HASHES]
    cdef double terms[MAX_HASHES]
    cdef uint32_t j, c, k = s.g.num_hashes
    positions(&s.g, h, pos)
    if s.num_items == 0:  # every counter must be 0
        for j in range(k):
            if cell_value(s.cells, s.width, pos[j]) != 0:
                return -1
        answer_out[0] = False
        lr_out[0] = -INFINITY
        return 0
    for j in range(k):
        c = cell_value(s.cells, s.width, pos[j])
        if c == 0:  # certainly absent: table[0] = -inf makes the posterior 0 whatever the other counters say
            answer_out[0] = False
            lr_out[0] = -INFINITY
            return 0
        if c >= <uint32_t>s.table_len:
            return NEEDS_LARGER_TABLE
        terms[j] = s.table[c]
    answer_out[0] = True
    lr_out[0] = row_sum(terms, k)
    return 0


cdef inline int counting_decide(CountingState s, uint64_t h, double p, double log_p, double log1m_p,
                                double* post_out, bint* answer_out) noexcept nogil:
    """The posterior and plain answer of one consulted key (counting_log_ratio's statuses)."""
    cdef double lr
    cdef int status = counting_log_ratio(s, h, &lr, answer_out)
    if status == 0:
        post_out[0] = posterior_from_log_ratio(lr, p, log_p, log1m_p)
    return status


cdef enum:
    POSTERIOR_MEMO_BITS = 10  # batches with one prior: posteriors by their log ratio's bits (few distinct sums)
    POSTERIOR_MEMO = 1 << POSTERIOR_MEMO_BITS


cdef enum:
    PREFETCH_KEYS_AHEAD = 16       # counting batches: the counters of the key this far ahead are requested early
    PREFETCH_FROM_BYTES = 1 << 20  # only for counter arrays beyond the L2 cache (smaller ones stay in cache)


cdef inline void prefetch_counters(CountingState s, uint64_t h) noexcept nogil:
    """Ask for the cache lines of a key's k counters (a decision reads all of them, so the misses of consecutive
    keys overlap only if requested early)."""
    cdef uint64_t pos[MAX_HASHES]
    cdef uint32_t j
    positions(&s.g, h, pos)
    for j in range(s.g.num_hashes):
        bw_prefetch_read(s.cells + ((pos[j] * <uint64_t>s.width) >> 3))


cdef int raise_inconsistent(CountingState s) except -1:
    raise ValueError("num_items is 0 but counters are not all 0: inconsistent")


def counting_query(sel, key):
    """The cost-optimal answer for ``key`` from its counters (Theorems 2/5 and 4): a Decision.

    With ``selective_query``, the answer is "present" iff the posterior is at least ``1 / (alpha + 1)``, and a key
    whose prior is below ``skip_threshold`` is answered "absent" without reading the filter. Without it, the answer
    is the plain filter's, and ``posterior``/``expected_cost`` say how good it is.

    (``SelectiveCountingBloomFilter.query`` and ``SelectiveVariableIncrementCountingBloomFilter.query``: decided here
    for a bloomwise CountingBloomFilter, by the filter's ``query_many([key])`` otherwise.)
    """
    cdef CountingState s = counting_state(sel)
    if s is None:
        return sel.query_many([key])[0]
    cdef double p, log_p, log1m_p, post, expected
    cdef bint consult, answer = False, member
    cdef uint64_t h
    cdef int status
    if s.prior_kind == PRIOR_CONSTANT:
        p, log_p, log1m_p = s.p, s.log_p, s.log1m_p
    elif s.prior_kind == PRIOR_CLASS:
        p = class_prior(s.prior, s.class_table, s.classify, s.class_default, key, True)
        log_odds_terms(p, &log_p, &log1m_p)
    else:
        p = checked_prior(s.prior.probability(key), s.prior)
        s.prior.observe(key)
        log_odds_terms(p, &log_p, &log1m_p)
    consult = p >= s.skip if s.query_selectively else True
    post = p
    if consult:
        hash_object(key, s.hasher, s.key_func, &h)
        status = counting_decide(s, h, p, log_p, log1m_p, &post, &answer)
        while status == NEEDS_LARGER_TABLE:
            s.set_table(sel, s.table_max)
            status = counting_decide(s, h, p, log_p, log1m_p, &post, &answer)
        if status == -1:
            raise_inconsistent(s)
    cdef int kind = (1 + answer) if consult else 0
    cdef uint64_t bits
    memcpy(&bits, &post, 8)
    cdef Py_ssize_t slot = fibonacci_slot(bits ^ <uint64_t>kind, DECISION_MEMO_BITS)
    if s.memo_kind[slot] == kind and s.memo_bits[slot] == bits:
        return s.memo[slot]
    member = (post * s.false_negative >= (1.0 - post) * s.false_positive) if s.query_selectively else answer
    expected = (1.0 - post) * s.false_positive if member else post * s.false_negative
    decision = make_decision(member, post, (True if answer else False) if consult else None, expected)
    s.memo[slot] = decision
    s.memo_bits[slot] = bits
    s.memo_kind[slot] = kind
    return decision


def counting_query_many(sel, keys):
    """SelectiveCountingBloomFilter.query_many(keys): priors, then hashes, counters and decisions in one C pass;
    None when the compiled decisions do not apply."""
    cdef CountingState s = counting_state(sel)
    if s is None:
        return None
    np = numpy()
    keys = _keys_list(keys)
    cdef Py_ssize_t i, j = 0, n = len(keys)
    cdef bint constant = s.prior_kind == PRIOR_CONSTANT, selective = s.query_selectively, member, answer
    cdef double p = s.p, log_p = s.log_p, log1m_p = s.log1m_p, post, skip = s.skip
    cdef double fp = s.false_positive, fn = s.false_negative
    cdef const double[::1] priors
    cdef int status = 0
    cdef double lr
    cdef uint64_t bits
    cdef Py_ssize_t slot
    cdef uint64_t memo_bits[POSTERIOR_MEMO]
    cdef double memo_post[POSTERIOR_MEMO]
    cdef uint8_t memo_used[POSTERIOR_MEMO]
    memset(memo_used, 0, sizeof(memo_used))
    if constant:
        p_arr = None
        consulted_arr = np.full(n, (p >= skip) if selective else True, dtype=np.bool_)
    else:
        p_arr = batch_priors(s.prior, s.prior_kind, keys, n)
        if s.prior_kind == PRIOR_OTHER:
            s.prior.observe_many(keys)
        priors = p_arr
        consulted_arr = (p_arr >= skip) if selective else np.ones(n, dtype=np.bool_)
    cdef Py_ssize_t num_consulted = int(np.count_nonzero(consulted_arr)) if n else 0
    if num_consulted == n:
        hashes = hash_many(keys, s.hasher.seed, s.key_func, s.hasher.scheme).reshape(-1)
    elif num_consulted:
        hashes = hash_many(take(keys, consulted_arr), s.hasher.seed, s.key_func, s.hasher.scheme).reshape(-1)
    else:
        hashes = np.zeros(0, dtype=np.uint64)
    hashes = np.ascontiguousarray(hashes)
    cdef const uint64_t[::1] hs = hashes
    cdef Py_ssize_t num_hashes = hs.shape[0]
    cdef bint prefetch = s.g.num_bits * <uint64_t>s.width > PREFETCH_FROM_BYTES * 8
    member_arr = np.empty(n, dtype=np.bool_)
    post_arr = np.empty(n, dtype=np.float64)
    answer_arr = np.zeros(n, dtype=np.bool_)
    expected_arr = np.empty(n, dtype=np.float64)
    cdef const uint8_t[::1] cons = consulted_arr.view(np.uint8)
    cdef uint8_t[::1] mem = member_arr.view(np.uint8)
    cdef uint8_t[::1] ans = answer_arr.view(np.uint8)
    cdef double[::1] po = post_arr
    cdef double[::1] ex = expected_arr
    i = 0
    while True:
        with nogil:
            while i < n:
                if not constant:
                    p = priors[i]
                    log_odds_terms(p, &log_p, &log1m_p)
                post = p
                answer = False
                if cons[i]:
                    if prefetch and j + PREFETCH_KEYS_AHEAD < num_hashes:
                        prefetch_counters(s, hs[j + PREFETCH_KEYS_AHEAD])
                    status = counting_log_ratio(s, hs[j], &lr, &answer)
                    if status != 0:
                        break
                    j += 1
                    if constant:  # the posterior is a function of lr alone: computed once per distinct lr
                        memcpy(&bits, &lr, 8)
                        slot = fibonacci_slot(bits, POSTERIOR_MEMO_BITS)
                        if not (memo_used[slot] and memo_bits[slot] == bits):
                            memo_post[slot] = posterior_from_log_ratio(lr, p, log_p, log1m_p)
                            memo_bits[slot] = bits
                            memo_used[slot] = True
                        post = memo_post[slot]
                    else:
                        post = posterior_from_log_ratio(lr, p, log_p, log1m_p)
                member = (post * fn >= (1.0 - post) * fp) if selective else answer
                mem[i] = member
                ans[i] = answer
                po[i] = post
                ex[i] = (1.0 - post) * fp if member else post * fn
                i += 1
        if status == NEEDS_LARGER_TABLE:
            s.set_table(sel, s.table_max)
            status = 0
            continue
        if status == -1:
            raise_inconsistent(s)
        break
    return _decisions_type(member_arr, post_arr, answer_arr, consulted_arr, expected_arr)
