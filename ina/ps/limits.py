"""What the Python and the native PS both check: their options, and the K a job may use.

A job through a switch uses the switch's K (the PS's `words`); a PS-only job may register its
own (docs/protocol.md, section 7), up to the PS's `max_words`, as long as its DATA and RESULT
packets each fit one UDP datagram.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Container
from typing import Any

from ina.control import Endpoint, JobSpec
from ina.control.jobs import MAX_DATAGRAM, MAX_WORDS
from ina.control.policy import caller, grant
from ina.protocol import HEADER_LEN, result_words

__all__ = ["MAX_WORDS", "admit", "check_options", "check_racks", "job_words", "packet_words"]


def check_options(words: int, flush_delay: float, piece_timeout: float, result_retention: int, max_words: int) -> None:
    """ValueError naming the option to change."""
    if not 1 <= words <= MAX_WORDS:
        raise ValueError(f"words (--words) must be 1..{MAX_WORDS} (one UDP datagram), got {words}")
    if not words <= max_words <= MAX_WORDS:
        raise ValueError(f"max_words (--max-words) must be {words}..{MAX_WORDS} (at least --words, one UDP datagram), got {max_words}")
    if not flush_delay > 0:
        raise ValueError(f"flush_delay (--flush-delay) must be positive seconds, got {flush_delay}")
    if not piece_timeout > 0:
        raise ValueError(f"piece_timeout (--piece-timeout) must be positive seconds, got {piece_timeout}")
    if result_retention < 1:
        raise ValueError(f"result_retention (--result-retention) must be at least 1 result per job, got {result_retention}")


def packet_words(words: int, index_bits: int, lane_bits: int) -> int:
    """The longest payload of a job's packets, in words: its DATA or its RESULT (indices come back as wider lanes)."""
    return max(words, result_words(words, index_bits, lane_bits))


def job_words(spec: JobSpec, words: int, max_words: int) -> int:
    """The K of `spec` at a PS of `words` and `max_words`; ValueError says what to change."""
    if not spec.words:
        chosen = words
    elif spec.switch is not None and spec.words != words:
        raise ValueError(f"job {spec.job} goes through a switch, which carries {words} words per packet: "
                         f"leave 'words' out (or 0) for it, not {spec.words}")
    elif spec.words > max_words:
        raise ValueError(f"job {spec.job} asks for {spec.words} words per packet; this PS takes at most {max_words} (max_words)")
    else:
        chosen = spec.words
    longest = HEADER_LEN + 4 * packet_words(chosen, spec.index_bits, spec.lane_bits)
    if longest > MAX_DATAGRAM:
        raise ValueError(f"job {spec.job}: at {chosen} words per packet its {spec.index_bits}-bit indices come back as "
                         f"{longest}-byte RESULTs, more than one UDP datagram ({MAX_DATAGRAM}); register fewer words")
    return chosen


def check_racks(spec: JobSpec) -> None:
    """What a racked job needs at the PS (docs/protocol.md, section 10) beyond what JobSpec checks: every
    address numeric IPv4 and its own, since the PS tells a packet's level and rack by its source alone."""
    if not spec.racks:
        return
    named: dict[tuple[str, int], str] = {}
    places = [("switch (the spine)", spec.switch), *((f"leaves[{r}]", leaf) for r, leaf in enumerate(spec.leaves)),
              *((f"workers[{place}]", w) for place, w in enumerate(spec.workers))]  # fmt: skip
    for what, endpoint in places:
        assert isinstance(endpoint, Endpoint)  # JobSpec: a racked job names its spine
        try:
            ipaddress.IPv4Address(endpoint.host)
        except ValueError:
            raise ValueError(f"job {spec.job}: {what} {endpoint.host!r} is not a numeric IPv4 address; a racked job "
                             "registers every switch and worker by the address its packets come from") from None
        if endpoint.addr in named:
            raise ValueError(f"job {spec.job}: {what} and {named[endpoint.addr]} are both {endpoint.host}:{endpoint.port}; "
                             "give the spine, each leaf and each worker of a racked job its own data address")
        named[endpoint.addr] = what


def admit(spec: JobSpec, registered: Container[int], words: int, max_words: int, retention: int) -> tuple[JobSpec, str | None, int, int]:
    """A registration as the control request's caller may have it (docs/protocol.md, section 7): the
    granted spec, its owner, its K and its ring of results; ValueError says what to change."""
    who = caller()
    spec = grant(spec, who)
    if spec.job in registered:
        raise ValueError(f"job {spec.job} is already registered; deregister it first (DELETE /jobs/{spec.job})")
    check_racks(spec)
    return spec, who.name, job_words(spec, words, max_words), max(4 * spec.window, retention)


def describe(ps: Any) -> dict[str, Any]:
    """A PS's answer to the control API's config request: the same fields on both paths."""
    return {
        "role": ps.role,
        "words": ps.words,
        "max_words": ps.max_words,
        "flush_delay": ps.flush_delay,
        "piece_timeout": ps.piece_timeout,
        "result_retention": ps.result_retention,
    }
