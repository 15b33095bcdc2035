"""Cooperating proxy caches that share Bloom-filter summaries (Summary Cache; the Bloom paradox, section VII).

The engine is synchronous pure Python over the compiled filters, with no I/O: the simulator
(``bloomwise.cache.simulation``, ``bloomwise simulate``) and the network proxy drive the same classes.
See docs/cache.md.
"""
from bloomwise.cache.node import STATS_KEYS, CacheNode
from bloomwise.cache.routing import (DEFAULT_ORIGIN_COST, DEFAULT_PEER_COST, POLICY_NAMES, IcpPolicy, NoCooperation,
                                     OnlinePrior, ParadoxPolicy, PeerState, RoutingPolicy, SummaryPolicy, make_policy)
from bloomwise.cache.store import (AVERAGE_DOCUMENT_SIZE, EVICTION_POLICIES, Document, DocumentCache, EvictionPolicy,
                                   FIFOPolicy, LRUPolicy)
from bloomwise.cache.summary import (DEFAULT_MAX_SUMMARY_BYTES, SUMMARY_KINDS, PeerSummary, SummaryGap,
                                     SummaryPublisher, SummaryUpdate)

__all__ = [
    # store
    "AVERAGE_DOCUMENT_SIZE", "EVICTION_POLICIES", "Document", "DocumentCache", "EvictionPolicy", "FIFOPolicy",
    "LRUPolicy",
    # summary
    "DEFAULT_MAX_SUMMARY_BYTES", "SUMMARY_KINDS", "PeerSummary", "SummaryGap", "SummaryPublisher", "SummaryUpdate",
    # routing
    "DEFAULT_ORIGIN_COST", "DEFAULT_PEER_COST", "POLICY_NAMES", "IcpPolicy", "NoCooperation", "OnlinePrior",
    "ParadoxPolicy", "PeerState", "RoutingPolicy", "SummaryPolicy", "make_policy",
    # node
    "STATS_KEYS", "CacheNode",
]
