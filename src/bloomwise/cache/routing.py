"""Routing on a local miss: which peers a proxy asks, in which order, before it goes to the origin.

Five policies, all driven by the same :class:`~bloomwise.cache.node.CacheNode` calls:

- ``none``: no cooperation; every miss goes to the origin.
- ``icp``: ask every healthy peer at once (ICP, RFC 2186/2187: the baseline Summary Cache compares itself with).
- ``summary``: ask at once every healthy peer whose summary says "maybe" (Summary Cache, Fan, Cao, Almeida and
  Broder, section VI).
- ``paradox``: the Bloom-paradox paper's optimal order (Rottenstreich and Keslassy, *The Bloom Paradox: When Not to
  Use a Bloom Filter*, section VII): ``p_j = Pr(key in S_j | summary_j)`` from peer j's summary (Theorem 2 with
  counters, Bayes with the summary's FPR with bits) under a per-peer prior learnt online; peers are asked one at a
  time in non-increasing ``p_j / tau_j``, stopping at the first hit, and only while ``p_j / tau_j > 1 / omega``
  (Theorem 6; ``bloomwise.paradox.proxies.optimal_query_order``), where ``tau_j`` is the cost of asking peer j and
  ``omega`` the cost of the origin. Its expected cost per miss is
  ``sum_i tau_(i) prod_{l<i} (1 - p_(l)) + omega prod_l (1 - p_(l))``, the minimum over all query sequences.
- ``carp``: what Squid (CARP), Apache Traffic Server, Varnish's shard director and nginx do today: every URL has one
  home proxy, the highest random weight over the healthy proxies (the requesting one included) with the hash of the
  Cache Array Routing Protocol (Valloppillil and Ross, draft-vinod-carp-v1-03, section 3: the URL hash, the member
  hash and their combination, all load factors equal; the member names are the proxies' ids). A local miss goes to
  the home proxy, which serves it from its cache or fetches it from the origin and keeps it; the requesting proxy
  does not keep a copy (CARP's aim: no duplication across the array), so every document is cached at its home only.
  ``RoutingPolicy.home_fetches`` tells the caller.

``RoutingPolicy.sequential`` tells the caller how to use the order: False (icp, summary): every peer listed is asked
(in parallel); True (paradox): one at a time, stopping at the first hit.

Costs: a peer's ``tau`` (the network proxy measures it: the round-trip time) and the origin's ``omega`` are
configuration; the defaults model a LAN peer as the unit and a WAN origin as ten times that
(:data:`DEFAULT_PEER_COST`, :data:`DEFAULT_ORIGIN_COST`).

The prior ``P_j = Pr(key in S_j)`` of a locally missed key (section IV.D of the paper estimates priors online with a
bias-corrected exponentially weighted average, ``bloomwise.paradox.priors.SampledPrior``). Two estimators, both that
average (:class:`OnlinePrior`, weight ``1 / prior_window``):

- ``"mixture"`` (the default): on every miss the node reads every peer's summary anyway, and a summary without false
  negatives says "maybe" with probability ``q_j = P_j + (1 - P_j) FPR_j``. So ``P_j = (q_j - FPR_j) / (1 - FPR_j)``
  (clamped to [0, 1]), with ``q_j`` the average of the "maybe" answers and ``FPR_j`` the summary's, estimated from its
  fill. Every miss is a sample, none costs a query, and the sample is not selected by the policy's own decisions.
- ``"outcomes"``: the average of the answers of the queries actually sent (:meth:`RoutingPolicy.observe`). Those
  keys were chosen because their summary said "maybe", so this estimates ``Pr(hit | asked)``, a posterior rather
  than a prior (``SampledPrior`` warns: unbiased samples only), and the posterior then counts the summary's evidence
  twice. Kept to compare with.

Neither average is used raw: a prior of exactly 0 makes every posterior 0, the peer is never asked again, and (for
``outcomes``) no new sample can ever lift it. Both are smoothed with Laplace's rule of succession (the mean of the
Beta(1 + x, 1 + n - x) posterior of a uniform prior) over the average's effective sample size:
``P = (n_eff * a + 1) / (n_eff + 2)``, where ``a`` is the estimate above (clamped to [0, 1]) and ``n_eff`` the
effective number of samples of the bias-corrected EWMA after t samples with weight ``w = 1/window``, ``r = 1 - w``:
``n_eff = (sum r^i)^2 / sum r^(2i) = (1 - r^t)(1 + r) / ((1 - r)(1 + r^t))`` (1 after one sample, about
``2 window - 1`` in the long run). So ``P >= 1 / (n_eff + 2) > 0`` (about ``1 / (2 window)``): a peer whose summary's
counters are strong evidence is still asked, and an estimate of 0 needs thousands of samples to approach it.
"""
from __future__ import annotations

from typing import Optional, Sequence

from bloomwise._checks import check_finite_positive

__all__ = ["PeerState", "RoutingPolicy", "NoCooperation", "IcpPolicy", "SummaryPolicy", "ParadoxPolicy", "CarpPolicy",
           "OnlinePrior", "make_policy", "POLICY_NAMES", "PRIOR_ESTIMATORS", "DEFAULT_PEER_COST", "DEFAULT_ORIGIN_COST",
           "carp_url_hash", "carp_member_hash", "carp_score", "squid_carp_parent"]

#: the cost of asking a peer on the LAN: the unit of cost
DEFAULT_PEER_COST = 1.0
#: the cost of fetching from the origin over the WAN, in units of a peer query
DEFAULT_ORIGIN_COST = 10.0
POLICY_NAMES = ("none", "icp", "summary", "paradox", "carp")


class PeerState:
    """What a node knows about one peer: ``peer_id``, its last ``summary`` (a PeerSummary, or None before the
    first one), the ``cost`` tau of asking it, and whether it is ``healthy`` (unhealthy peers are never asked)."""

    __slots__ = ("peer_id", "summary", "cost", "healthy")

    def __init__(self, peer_id, summary=None, cost: float = DEFAULT_PEER_COST, healthy: bool = True):
        self.peer_id = peer_id
        self.summary = summary
        self.cost = cost
        self.healthy = healthy

    def __repr__(self) -> str:
        return f"PeerState({self.peer_id!r}, summary={self.summary!r}, cost={self.cost}, healthy={self.healthy})"


class RoutingPolicy:
    """Base class. ``order(key, peers)``: the peer ids to ask, in order (empty: go to the origin);
    ``observe(peer_id, key, hit)``: the outcome of a query actually sent. ``home_fetches``: a peer asked that misses
    fetches the document from the origin itself and keeps it (carp), instead of the requesting proxy."""

    name = "abstract"
    uses_summaries = False
    sequential = False
    home_fetches = False

    def order(self, key, peers: Sequence[PeerState]) -> list:
        raise NotImplementedError

    def observe(self, peer_id, key, hit: bool) -> None:
        pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class NoCooperation(RoutingPolicy):
    """``none``: never ask a peer."""

    name = "none"

    def order(self, key, peers) -> list:
        return []


class IcpPolicy(RoutingPolicy):
    """``icp``: ask every healthy peer, all at once."""

    name = "icp"

    def order(self, key, peers) -> list:
        return [p.peer_id for p in peers if p.healthy]


class SummaryPolicy(RoutingPolicy):
    """``summary``: ask, all at once, every healthy peer whose summary may contain the key."""

    name = "summary"
    uses_summaries = True

    def order(self, key, peers) -> list:
        return [p.peer_id for p in peers if p.healthy and p.summary is not None and key in p.summary.filter]


_CARP_MULTIPLIER = 0x62531965
_MASK32 = 0xFFFFFFFF


def _rotate_left32(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK32


def carp_url_hash(url: str) -> int:
    """CARP's 32-bit URL hash: ``h += rotl(h, 19) + byte`` over the URL's UTF-8 bytes (unsigned), from h = 0.

    >>> carp_url_hash("http://example.org/")
    932162260
    """
    h = 0
    for byte in url.encode("utf-8", "surrogateescape"):
        h = (h + (((h << 19) | (h >> 13)) & _MASK32) + byte) & _MASK32
    return h


def carp_member_hash(name: str) -> int:
    """CARP's 32-bit hash of an array member's name: the URL hash of the name, then ``h += h * 0x62531965``,
    ``h = rotl(h, 21)``."""
    h = carp_url_hash(name)
    h = (h + h * _CARP_MULTIPLIER) & _MASK32
    return _rotate_left32(h, 21)


def carp_score(url_hash: int, member_hash: int) -> int:
    """The combined hash whose highest value, over the members, names a URL's home (equal load factors):
    ``c = url_hash ^ member_hash; c += c * 0x62531965; c = rotl(c, 21)``."""
    c = url_hash ^ member_hash
    c = (c + c * _CARP_MULTIPLIER) & _MASK32
    return _rotate_left32(c, 21)


def squid_carp_parent(url: str, member_names: Sequence[str]) -> str:
    """The CARP parent Squid (5.7, ``carp.cc``, equal weights) picks for ``url`` among ``member_names`` in
    ``cache_peer`` order: the same three hashes, except that Squid does not reset the URL hash between members (it
    keeps adding the URL's bytes to one running hash), so member i is scored with the hash of the URL repeated i + 1
    times. The result is not a highest-random-weight choice in the draft's sense (a member's score depends on its
    place in the list). Checked against Debian's Squid on 300 URLs and 3 parents, all equal (tests). bloomwise's
    ``carp`` policy follows the draft (:class:`CarpPolicy`); this function documents and pins the difference.
    """
    h, best, best_score = 0, None, -1
    data = url.encode("utf-8", "surrogateescape")
    for name in member_names:
        for byte in data:
            h = (h + (((h << 19) | (h >> 13)) & _MASK32) + byte) & _MASK32
        score = carp_score(h, carp_member_hash(name))
        if score > best_score:
            best, best_score = name, score
    return best


class CarpPolicy(RoutingPolicy):
    """``carp``: ask the URL's home proxy, the member of highest :func:`carp_score` among this proxy and its
    healthy peers (none when this proxy is the home). Members are named ``str(peer_id)`` (``member_names`` can map
    ids to other names, such as host names). A key is ``"METHOD URL"``: the URL is hashed.

    :param node_name: the id of the proxy this policy routes for.
    """

    name = "carp"
    home_fetches = True

    def __init__(self, node_name, *, member_names: Optional[dict] = None):
        self.node_name = node_name
        self._names = dict(member_names or {})
        self._member_hashes: dict = {}

    def member_hash(self, member_id) -> int:
        value = self._member_hashes.get(member_id)
        if value is None:
            value = self._member_hashes[member_id] = carp_member_hash(self._names.get(member_id, str(member_id)))
        return value

    def home(self, key, peers: Sequence[PeerState]):
        """The id of ``key``'s home among this proxy and its healthy peers (ties: the member listed first, this
        proxy before its peers)."""
        url_hash = carp_url_hash(key.partition(" ")[2] or key)
        best, best_score = self.node_name, carp_score(url_hash, self.member_hash(self.node_name))
        for p in peers:
            if p.healthy:
                score = carp_score(url_hash, self.member_hash(p.peer_id))
                if score > best_score:
                    best, best_score = p.peer_id, score
        return best

    def order(self, key, peers) -> list:
        home = self.home(key, peers)
        return [] if home == self.node_name else [home]


class OnlinePrior:
    """One peer's prior ``Pr(key in S_j)``: the bias-corrected EWMA of ``SampledPrior`` with weight ``w = 1/window``.

    After samples ``x_1..x_t`` (1 member, 0 not) the estimate is ``sum (1-w)^(t-i) x_i / sum (1-w)^(t-i)``, and
    ``initial`` before any sample. Runs of non-members are folded in closed form (``(1-w)^r``), so recording
    "certainly not" answers costs one addition each.

    >>> prior = OnlinePrior(window=4)
    >>> prior.record(True); prior.record_absent(3)
    >>> round(prior.estimate(), 3)       # as SampledPrior's doctest: samples [1, 0, 0, 0]
    0.154
    """

    __slots__ = ("_w", "_num", "_den", "_pending", "_recorded", "initial")

    def __init__(self, *, window: float = 1000.0, initial: float = 1.0):
        if isinstance(window, bool) or not isinstance(window, (int, float)) or not window >= 1.0:
            raise ValueError(f"prior window must be a number >= 1, got {window!r}")
        if isinstance(initial, bool) or not isinstance(initial, (int, float)) or not 0.0 <= initial <= 1.0:
            raise ValueError(f"initial prior must be in [0, 1], got {initial!r}")
        self._w = 1.0 / window
        self._num = 0.0
        self._den = 0.0
        self._pending = 0  # non-members not folded in yet
        self._recorded = 0
        self.initial = float(initial)

    @property
    def samples(self) -> int:
        """Samples seen so far."""
        return self._recorded + self._pending

    @property
    def effective_samples(self) -> float:
        """Kish's effective sample size of the weighted average, ``(sum a_i)^2 / sum a_i^2`` with weights
        ``a_i = (1-w)^i``, i < t: ``(1 - r^t)(1 + r) / ((1 - r)(1 + r^t))``, ``r = 1 - w`` (0 before any sample)."""
        t = self._recorded + self._pending
        if t == 0:
            return 0.0
        r = 1.0 - self._w
        if r == 0.0:
            return 1.0
        rt = r ** t
        return (1.0 - rt) * (1.0 + r) / ((1.0 - r) * (1.0 + rt))

    def smoothed(self, fraction: Optional[float] = None) -> float:
        """Laplace's rule of succession over the effective sample: ``(n_eff * a + 1) / (n_eff + 2)`` with ``a`` the
        estimate (or ``fraction``, clamped to [0, 1]); ``initial`` before any sample. Never 0 nor 1."""
        if not (self._recorded or self._pending):
            return self.initial
        a = self.estimate() if fraction is None else min(1.0, max(0.0, fraction))
        n = self.effective_samples
        return (n * a + 1.0) / (n + 2.0)

    def record(self, member: bool) -> None:
        self._fold()
        w = self._w
        self._num = (1.0 - w) * self._num + (w if member else 0.0)
        self._den = (1.0 - w) * self._den + w
        self._recorded += 1

    def record_absent(self, count: int = 1) -> None:
        self._pending += count

    def _fold(self) -> None:
        if self._pending:
            decay = (1.0 - self._w) ** self._pending
            self._num *= decay
            self._den = self._den * decay + (1.0 - decay)
            self._recorded += self._pending
            self._pending = 0

    def estimate(self) -> float:
        self._fold()
        return self._num / self._den if self._den > 0.0 else self.initial


PRIOR_ESTIMATORS = ("mixture", "outcomes")


class ParadoxPolicy(RoutingPolicy):
    """``paradox``: Theorem 6's optimal sequence over the peers' posteriors (see the module docstring).

    :param origin_cost: omega, the cost of the origin (> 0).
    :param prior_window: the EWMA window of each peer's prior (>= 1).
    :param initial_prior: a peer's prior before any sample (1.0: trust its summary, as ``summary`` does).
    :param prior_estimator: ``"mixture"`` (default) or ``"outcomes"`` (module docstring).
    """

    name = "paradox"
    uses_summaries = True
    sequential = True

    def __init__(self, *, origin_cost: float = DEFAULT_ORIGIN_COST, prior_window: float = 1000.0,
                 initial_prior: float = 1.0, prior_estimator: str = "mixture"):
        self.origin_cost = check_finite_positive("origin_cost", origin_cost)
        if prior_estimator not in PRIOR_ESTIMATORS:
            raise ValueError(f"prior_estimator must be one of {', '.join(PRIOR_ESTIMATORS)}, got {prior_estimator!r}")
        self.prior_estimator = prior_estimator
        self.prior_window = prior_window
        self.initial_prior = initial_prior
        OnlinePrior(window=prior_window, initial=initial_prior)  # checks both
        self._averages: dict = {}
        self._mixture = prior_estimator == "mixture"

    def _average(self, peer_id) -> OnlinePrior:
        average = self._averages.get(peer_id)
        if average is None:
            average = self._averages[peer_id] = OnlinePrior(window=self.prior_window, initial=self.initial_prior)
        return average

    def _prior_from(self, average: OnlinePrior, summary) -> float:
        """The smoothed prior (module docstring): never 0, so a posterior can always rise with strong evidence."""
        if not self._mixture:
            return average.smoothed()
        fpr = summary.fpr
        if not average.samples or fpr >= 1.0:
            return self.initial_prior
        return average.smoothed((average.estimate() - fpr) / (1.0 - fpr))

    def order(self, key, peers) -> list:
        threshold = 1.0 / self.origin_cost
        mixture = self._mixture
        ranked = []
        averages = self._averages
        for p in peers:
            summary = p.summary
            if summary is None or not p.healthy:
                continue
            average = averages.get(p.peer_id) or self._average(p.peer_id)
            if key not in summary.filter:
                if mixture:
                    average._pending += 1  # record_absent(), inlined: this is the hot loop
                continue
            if mixture:
                average.record(True)
            prob = summary.posterior(key, self._prior_from(average, summary))
            ratio = prob / p.cost
            if ratio > threshold:
                ranked.append((-ratio, len(ranked), prob, p.peer_id))
        if not ranked:
            return []
        ranked.sort()
        out = []
        for _, _, prob, peer_id in ranked:
            out.append(peer_id)
            if prob >= 1.0:  # a certain hit ends the sequence
                break
        return out

    def observe(self, peer_id, key, hit: bool) -> None:
        if not self._mixture:
            average = self._average(peer_id)
            average.record(True) if hit else average.record_absent()

    def prior(self, peer_id, summary=None) -> float:
        """The current prior estimate of a peer (the mixture estimator needs the peer's summary for its FPR)."""
        average = self._average(peer_id)
        if self._mixture and summary is None:
            raise ValueError("the mixture estimator needs the peer's summary")
        return self._prior_from(average, summary)


def make_policy(name: str, *, origin_cost: float = DEFAULT_ORIGIN_COST, prior_window: float = 1000.0,
                initial_prior: float = 1.0, prior_estimator: str = "mixture", node_name=None) -> RoutingPolicy:
    """A new policy by name: ``"none"``, ``"icp"``, ``"summary"``, ``"paradox"`` or ``"carp"`` (the cost and prior
    keyword arguments are the paradox policy's; ``node_name``, the id of the proxy routed for, is carp's and
    required by it; the others ignore them).

    >>> make_policy("summary").sequential, make_policy("paradox").sequential
    (False, True)
    """
    if name == "none":
        return NoCooperation()
    if name == "icp":
        return IcpPolicy()
    if name == "summary":
        return SummaryPolicy()
    if name == "paradox":
        return ParadoxPolicy(origin_cost=origin_cost, prior_window=prior_window, initial_prior=initial_prior,
                             prior_estimator=prior_estimator)
    if name == "carp":
        if node_name is None:
            raise ValueError("policy 'carp' needs node_name, the id of the proxy it routes for")
        return CarpPolicy(node_name)
    raise ValueError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {name!r}")
