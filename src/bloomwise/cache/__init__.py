"""Cooperating proxy caches that share Bloom-filter summaries (Summary Cache; the Bloom paradox, section VII).

The engine is synchronous pure Python over the compiled filters, with no I/O: the simulator
(``bloomwise.cache.simulation``, ``bloomwise simulate``) and the network proxy drive the same classes.
``bloomwise.cache.traces``: request records, trace readers (Squid access.log, plain, libCacheSim csv and
oracleGeneral, compressed) and writers, the client -> proxy mapping, the synthetic workload generator and real
traces fetched from package registries. See docs/cache.md and docs/traces.md.
"""
from bloomwise.cache.node import STATS_KEYS, CacheNode
from bloomwise.cache.routing import (DEFAULT_ORIGIN_COST, DEFAULT_PEER_COST, POLICY_NAMES, CarpPolicy, IcpPolicy,
                                     NoCooperation, OnlinePrior, ParadoxPolicy, PeerState, RoutingPolicy, SummaryPolicy,
                                     make_policy)
from bloomwise.cache.store import (AVERAGE_DOCUMENT_SIZE, EVICTION_POLICIES, Document, DocumentCache, EvictionPolicy,
                                   FIFOPolicy, LRUPolicy)
from bloomwise.cache.summary import (DEFAULT_MAX_SUMMARY_BYTES, SUMMARY_KINDS, PeerSummary, SummaryGap,
                                     SummaryPublisher, SummaryUpdate)
from bloomwise.cache.traces import (
    Request, SyntheticTrace, TraceError, TraceReader, assign_proxy, open_trace, read_plain_trace, read_squid_log,
    request_key, write_plain_trace, write_squid_log,
)

__all__ = [
    # store
    "AVERAGE_DOCUMENT_SIZE", "EVICTION_POLICIES", "Document", "DocumentCache", "EvictionPolicy", "FIFOPolicy",
    "LRUPolicy",
    # summary
    "DEFAULT_MAX_SUMMARY_BYTES", "SUMMARY_KINDS", "PeerSummary", "SummaryGap", "SummaryPublisher", "SummaryUpdate",
    # routing
    "DEFAULT_ORIGIN_COST", "DEFAULT_PEER_COST", "POLICY_NAMES", "CarpPolicy", "IcpPolicy", "NoCooperation",
    "OnlinePrior",
    "ParadoxPolicy", "PeerState", "RoutingPolicy", "SummaryPolicy", "make_policy",
    # node
    "STATS_KEYS", "CacheNode",
    # traces
    "Request", "SyntheticTrace", "TraceError", "TraceReader", "assign_proxy", "open_trace", "read_plain_trace",
    "read_squid_log", "request_key", "write_plain_trace", "write_squid_log",
]
