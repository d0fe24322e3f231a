"""Client-side local block cache (SPEC §5, discretionary-caching paper §3.2).

The mechanism is :class:`BlockCache`; replacement, water marks, write-back timing and bypass
decisions are policy objects. See ``docs/cache.md``.
"""

from ._bypass import Bypass as Bypass
from ._bypass import BypassEntry as BypassEntry
from ._bypass import BypassTable as BypassTable
from ._bypass import format_bypass as format_bypass
from ._bypass import parse_bypass as parse_bypass
from ._cache import BlockCache as BlockCache
from ._policy import LRU as LRU
from ._policy import Backend as Backend
from ._policy import BypassPolicy as BypassPolicy
from ._policy import FilesBackend as FilesBackend
from ._policy import ListBackend as ListBackend
from ._policy import ReplacementPolicy as ReplacementPolicy
from ._policy import SecondChanceLRU as SecondChanceLRU
from ._policy import StreamPolicy as StreamPolicy
from ._policy import StripedBackend as StripedBackend
from ._policy import WaterMarks as WaterMarks
from ._policy import WritebackPolicy as WritebackPolicy
from ._table import merge_range as merge_range

__all__ = [
    "LRU",
    "Backend",
    "BlockCache",
    "Bypass",
    "BypassEntry",
    "BypassPolicy",
    "BypassTable",
    "FilesBackend",
    "ListBackend",
    "ReplacementPolicy",
    "SecondChanceLRU",
    "StreamPolicy",
    "StripedBackend",
    "WaterMarks",
    "WritebackPolicy",
    "format_bypass",
    "merge_range",
    "parse_bypass",
]
