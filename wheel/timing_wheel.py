"""Hierarchical timing wheel: a shard leader's in-memory set of upcoming fire times.

The model is Varghese & Lauck's hierarchical wheel as Apache Kafka's timer uses it, reshaped for
a structure that is driven from outside (`advance(now_ms)`) and must be exact to the millisecond.

Layout
    Level ``L`` cuts time into buckets of ``span(L) = tick_ms * wheel_size**L`` milliseconds,
    aligned to multiples of the span, so a bucket is named by ``(L, due_ms // span(L))`` — an
    absolute slot, never a slot modulo the wheel size. Absolute slots are why there is no
    "slot equal to the current pointer" ambiguity and no round counter: a bucket can only ever
    hold the time range its name says. Levels are added on demand (a ten-year delay with
    ``tick_ms=1, wheel_size=64`` needs seven).

    An entry goes to the lowest level whose window, ``wheel_size`` buckets starting at the bucket
    that holds the wheel's clock, contains its due time; due times in the past land in level 0.
    This is Kafka's overflow rule, so each level holds at most about ``wheel_size`` live buckets.

    Every live bucket carries ``lo`` (a lower bound of its due times, exact unless the earliest
    entry was removed) and ``hi`` (an upper bound). A min-heap orders buckets by ``lo``; an
    entry of the heap is stale once the bucket has been retired or its ``lo`` has changed, and
    stale entries are dropped when they surface (lazy deletion). ``advance`` therefore pops
    exactly the buckets that can hold something due and never visits an empty tick, however far
    the clock jumps.

Life of an entry (the state machine this module owns)
    pending(L) --advance, bucket wholly due (hi <= now)--> fired   (emitted in bulk, no sorting
                                                                    into finer levels)
    pending(L) --advance, bucket partly due, L > 0-------> fired if due <= now, otherwise
                                                           pending(L' < L) (cascade)
    pending(0) --advance, bucket partly due--------------> fired if due <= now, otherwise stays
                                                           (partition; only when tick_ms > 1)
    pending    --cancel--------------------------------> gone  (dict delete, O(1))
    pending    --schedule same key---------------------> pending at the new due time (moved)

Every entry cascades at most once per level, which gives O(levels) amortised work per entry.

Life of a bucket: created by the first entry placed in it (pushed on the heap) → live (pushed
again whenever ``lo`` changes) → retired when ``advance`` empties it, cascades it, or
``next_deadline_ms`` finds it empty. Retired buckets are cleared so that stale heap entries pin
no entries in memory.

Order of ties: entries with equal ``due_ms`` come out of one ``advance`` in an unspecified
order. It is reproducible (the same calls give the same output, because dicts iterate in
insertion order) but it is not insertion order: keeping insertion order would cost a sequence
number per entry and a two-key sort on every advance, and the shard leader claims a batch with
one statement, so it has no use for it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable
from heapq import heappop, heappush, heapreplace
from itertools import count
from operator import itemgetter
from typing import Generic, TypeVar

__all__ = ["TimingWheel"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_DUE = itemgetter(1)  # due_ms of an entry tuple (key, due_ms, value)


class _Bucket(dict[K, tuple[K, int, V | None]]):
    """The entries of one time range at one level, keyed by entry key.

    A dict subclass rather than a dict inside an object: the key index points straight at the
    dict that holds the key, so cancel is one index pop plus one dict pop.
    """

    __slots__ = ("exact", "hi", "level", "live", "lo", "slot")

    level: int
    slot: int  # the bucket covers [slot * span(level), (slot + 1) * span(level)) ms
    lo: int  # ms; <= every due time inside, == the earliest one when `exact`
    hi: int  # ms; >= every due time inside (never lowered on removal: still a bound)
    exact: bool
    live: bool


class TimingWheel(Generic[K, V]):
    """Pending fire times keyed by job, exact to the millisecond; driven by `advance(now_ms)`.

    Pure: it owns no thread, clock or I/O; all times are integer milliseconds.
    """

    __slots__ = (
        "_heap",
        "_index",
        "_last_advance_ms",
        "_levels",
        "_limits",
        "_now_ms",
        "_serial",
        "_spans",
        "_tick_ms",
        "_wheel_size",
    )

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int) -> None:
        for name, arg in (("tick_ms", tick_ms), ("wheel_size", wheel_size), ("start_ms", start_ms)):
            # bool is an int subclass, but True as a tick length is always a mistake.
            if not isinstance(arg, int) or isinstance(arg, bool):
                raise TypeError(f"{name} must be an int (milliseconds), got {arg!r}")
        if tick_ms <= 0:
            raise ValueError(f"tick_ms must be a positive number of milliseconds, got {tick_ms}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be at least 2 buckets per level, got {wheel_size}")
        self._tick_ms = tick_ms
        self._wheel_size = wheel_size
        # The clock that placement is relative to; start_ms until the first advance.
        self._now_ms = start_ms
        # Only an earlier *advance* makes a later, smaller now_ms a step back in time.
        self._last_advance_ms: int | None = None
        self._spans: list[int] = [tick_ms]  # ms per bucket, per level
        self._levels: list[dict[int, _Bucket[K, V]]] = [{}]  # slot -> bucket, per level
        # _limits[L]: the first due_ms beyond level L's window. Strictly increasing in L, so
        # bisect finds an entry's level in C rather than a Python loop over levels.
        self._limits: list[int] = [self._limit(tick_ms)]
        self._index: dict[K, _Bucket[K, V]] = {}  # key -> the bucket holding it
        # (lo ms, serial, bucket); the serial breaks ties so buckets are never compared.
        self._heap: list[tuple[int, int, _Bucket[K, V]]] = []
        self._serial = count()

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def get(self, key: K) -> V | None:
        """The value `key` is pending with; None if it is not pending (or has no value)."""
        bucket = self._index.get(key)
        return None if bucket is None else bucket[key][2]

    def __repr__(self) -> str:
        return (
            f"TimingWheel(tick_ms={self._tick_ms}, wheel_size={self._wheel_size}, "
            f"now_ms={self._now_ms}, levels={len(self._spans)}, pending={len(self._index)})"
        )

    def schedule(self, key: K, due_ms: int, value: V | None = None) -> None:
        """Make `key` fire at `due_ms`, moving it if it is pending; a past due_ms fires next."""
        index = self._index
        old = index.get(key)
        if old is not None and old.pop(key)[1] == old.lo:
            old.exact = False
        # Placement is written out here and again in _cascade rather than shared: these are the
        # two per-entry hot paths, and a Python method call costs about as much as the placing.
        limits = self._limits
        level = bisect_right(limits, due_ms)
        if level == len(limits):
            self._add_levels(due_ms)
        slot = due_ms // self._spans[level]
        bucket = self._levels[level].get(slot)
        if bucket is None:
            bucket = self._new_bucket(level, slot, due_ms)
        elif due_ms <= bucket.lo:
            if due_ms < bucket.lo:
                bucket.lo = due_ms
                heappush(self._heap, (due_ms, next(self._serial), bucket))
            # An entry sitting on the lower bound makes the bound exact again.
            bucket.exact = True
        elif due_ms > bucket.hi:
            bucket.hi = due_ms
        bucket[key] = (key, due_ms, value)
        index[key] = bucket

    def cancel(self, key: K) -> bool:
        """Forget `key`; True only if it was pending. O(1): two dict pops."""
        bucket = self._index.pop(key, None)
        if bucket is None:
            return False
        if bucket.pop(key)[1] == bucket.lo:
            # The bucket may stay on the heap, empty or not: lazy deletion, resolved when it
            # surfaces. Only its lower bound may have become loose.
            bucket.exact = False
        return True

    def advance(self, now_ms: int) -> list[tuple[K, int, V | None]]:
        """Remove and return every pending entry with due_ms <= now_ms, sorted by due_ms."""
        last = self._last_advance_ms
        if last is not None and now_ms < last:
            return []
        self._last_advance_ms = now_ms
        self._set_clock(now_ms)

        heap = self._heap
        index = self._index
        fired: list[tuple[K, int, V | None]] = []
        while heap and heap[0][0] <= now_ms:
            lo, _, bucket = heap[0]
            if not bucket.live or bucket.lo != lo:
                heappop(heap)
                continue
            if bucket.hi <= now_ms:
                # Wholly due: hand the entries over in bulk, with no per-entry placement. This
                # is the hot-bucket path: only the index clean-up is a Python-level loop.
                heappop(heap)
                self._retire(bucket)
                fired.extend(bucket.values())
                for key in bucket:
                    del index[key]
                bucket.clear()
            elif bucket.level:
                # Partly due: the bucket holds now_ms, so every entry not yet due fits a finer
                # level of the window around now_ms.
                heappop(heap)
                self._retire(bucket)
                self._cascade(bucket, now_ms, fired)
            else:
                self._partition(bucket, now_ms, fired)
        fired.sort(key=_DUE)
        return fired

    def next_deadline_ms(self) -> int | None:
        """The earliest pending due_ms (advance returns something from then on); None if empty.

        It may lie before the last `advance` (an entry scheduled in the past): the driver should
        then advance at once. Costs O(1) unless a bucket's earliest entry was removed, in which
        case that bucket is rescanned once (in C).
        """
        heap = self._heap
        while heap:
            lo, _, bucket = heap[0]
            if not bucket.live or bucket.lo != lo:
                heappop(heap)
            elif not bucket:
                heappop(heap)
                self._retire(bucket)
            elif bucket.exact:
                return lo
            else:
                bucket.lo = min(map(_DUE, bucket.values()))
                bucket.exact = True
                heapreplace(heap, (bucket.lo, next(self._serial), bucket))
        return None

    def _cascade(
        self, bucket: _Bucket[K, V], now_ms: int, fired: list[tuple[K, int, V | None]]
    ) -> None:
        """Fire the due entries of a retired, partly due bucket; re-place the rest lower down.

        The bucket holds now_ms, so every entry not yet due lies less than one span of the
        bucket's level ahead and fits a finer level of the window around now_ms: no new levels.
        """
        index = self._index
        limits = self._limits
        spans = self._spans
        levels = self._levels
        heap = self._heap
        serial = self._serial
        for key, entry in bucket.items():
            due = entry[1]
            if due <= now_ms:
                fired.append(entry)
                del index[key]
                continue
            level = bisect_right(limits, due)
            slot = due // spans[level]
            target = levels[level].get(slot)
            if target is None:
                target = self._new_bucket(level, slot, due)
            elif due <= target.lo:
                if due < target.lo:
                    target.lo = due
                    heappush(heap, (due, next(serial), target))
                target.exact = True
            elif due > target.hi:
                target.hi = due
            target[key] = entry
            index[key] = target
        bucket.clear()

    def _new_bucket(self, level: int, slot: int, due_ms: int) -> _Bucket[K, V]:
        """Create the live bucket (level, slot) for a first entry due at `due_ms`."""
        bucket: _Bucket[K, V] = _Bucket()
        bucket.level = level
        bucket.slot = slot
        bucket.lo = bucket.hi = due_ms
        bucket.exact = bucket.live = True
        self._levels[level][slot] = bucket
        heappush(self._heap, (due_ms, next(self._serial), bucket))
        return bucket

    def _partition(
        self, bucket: _Bucket[K, V], now_ms: int, fired: list[tuple[K, int, V | None]]
    ) -> None:
        """Fire the due entries of a partly due level-0 bucket and keep the rest in it.

        Level 0 has no finer level to cascade into; with tick_ms > 1 its buckets can straddle
        now_ms, and advance must not return anything due later, not even inside the tick.
        """
        index = self._index
        due_keys: list[K] = []
        rest_lo: int | None = None
        for key, entry in bucket.items():
            due = entry[1]
            if due <= now_ms:
                fired.append(entry)
                due_keys.append(key)
            elif rest_lo is None or due < rest_lo:
                rest_lo = due
        for key in due_keys:
            del bucket[key]
            del index[key]
        if rest_lo is None:
            heappop(self._heap)
            self._retire(bucket)
        else:
            bucket.lo = rest_lo
            bucket.exact = True
            heapreplace(self._heap, (rest_lo, next(self._serial), bucket))

    def _retire(self, bucket: _Bucket[K, V]) -> None:
        bucket.live = False
        del self._levels[bucket.level][bucket.slot]

    def _limit(self, span_ms: int) -> int:
        """First due_ms past the window of the level whose buckets span `span_ms`."""
        return (self._now_ms // span_ms + self._wheel_size) * span_ms

    def _set_clock(self, now_ms: int) -> None:
        self._now_ms = now_ms
        self._limits = [self._limit(span) for span in self._spans]

    def _add_levels(self, due_ms: int) -> None:
        """Create overflow levels until one's window reaches `due_ms`."""
        spans = self._spans
        limits = self._limits
        while limits[-1] <= due_ms:
            span = spans[-1] * self._wheel_size
            spans.append(span)
            limits.append(self._limit(span))
            self._levels.append({})
