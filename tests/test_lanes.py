"""Lane packing of the collective's sums (compression/lanes.py): several b-bit sums an int32 or int64,
summed by gloo and NCCL with no carry between lanes, and the bytes it saves on a real gloo group."""
from fractions import Fraction

import pytest
import torch
import torch.distributed as dist

from conftest import needs_cuda
from ina.compression import SumPacking, THCConfig, THCCodec, collective_packing
from ina.launch import run_workers
from ina.transport.collective import CollectiveTransport
from ina.transport.hierarchy import HierarchicalTransport

# (workers, max_value): THC's 2-, 4- and 8-bit defaults (g = 6, 30, 255), every word's lane boundaries
# (largest sums of 2**b - 1 for b = 1, 7, 8, 9, 15, 16, 21, 22, 31, 32, 63) and odd sizes in between.
CASES = [(4, 6), (4, 30), (2, 255), (4, 255), (8, 255), (32, 255), (1, 1), (1, 127), (3, 85), (1, 511), (7, 73),
         (1, 2**15 - 1), (1, 2**16 - 1), (1, 2**21 - 1), (1, 2**22 - 1), (1, 2**31 - 1), (1, 2**32 - 1),
         (3, 2**40 + 1), (1, 2**63 - 1), (5, 0)]  # fmt: skip
LENGTHS = [0, 1, 2, 5, 6, 7, 62, 63, 64, 1000]  # around every lane count (1, 2, 3, 6, 7, 9, 63 lanes)


def _values(generator: torch.Generator, high: int, length: int) -> torch.Tensor:
    """``length`` integers in 0..high (int64: any lane width's values), the last at ``high``: a lane's maximum."""
    values = torch.randint(0, max(high, 1), (length,), generator=generator)
    if length:
        values[-1] = high
    return values


@pytest.mark.parametrize("workers, max_value", CASES)
def test_a_packing_round_trips_every_sum_up_to_the_largest(workers, max_value):
    packing, largest = collective_packing(workers, max_value), workers * max_value
    generator = torch.Generator().manual_seed(largest % 2**32)
    for length in LENGTHS:
        for values in (_values(generator, largest, length), torch.full((length,), largest)):
            words = packing.pack(values)
            assert words.dtype == packing.word and words.numel() == -(-length // packing.lanes)
            sums = packing.unpack(words, length)
            assert sums.dtype == packing.sum_dtype and sums.shape == (length,)
            assert torch.equal(sums.long(), values)


@pytest.mark.parametrize("workers, max_value", CASES)
def test_summed_words_are_the_words_of_the_sums_with_no_carry(workers, max_value):
    """The homomorphism a collective relies on: the word sum of every worker's words packs the exact sums."""
    packing = collective_packing(workers, max_value)
    generator = torch.Generator().manual_seed(workers)
    for length in (1, 63, 1000):
        for values in ([_values(generator, max_value, length) for _ in range(workers)],
                       [torch.full((length,), max_value)] * workers):  # every lane at its largest sum
            words = torch.stack([packing.pack(v) for v in values]).sum(0, dtype=packing.word)
            exact = torch.stack(values).sum(0)
            assert torch.equal(words, packing.pack(exact))
            assert torch.equal(packing.unpack(words, length).long(), exact)


@pytest.mark.parametrize(
    "workers, max_value, lane_bits, lanes, word, nbytes, sums",
    [(4, 255, 10, 3, torch.int32, Fraction(8, 6), torch.int32),  # 8-bit THC, 4 workers: an int64's 6 lanes tie
     (2, 255, 9, 7, torch.int64, Fraction(8, 7), torch.int32),
     (8, 255, 11, 5, torch.int64, Fraction(8, 5), torch.int32),
     (4, 30, 7, 9, torch.int64, Fraction(8, 9), torch.uint8),  # 4-bit THC (g = 30): sums up to 120
     (4, 6, 5, 6, torch.int32, Fraction(2, 3), torch.uint8),  # 2-bit THC (g = 6): an int64's 12 lanes tie
     (1, 255, 8, 1, torch.uint8, 1, torch.uint8),  # sums of 8 bits: a byte each, as before
     (8, 30, 8, 1, torch.uint8, 1, torch.uint8),
     (3, 85, 8, 1, torch.uint8, 1, torch.uint8),
     (1, 2**31 - 1, 31, 1, torch.int32, 4, torch.int32),
     (2, 2**31 - 1, 32, 1, torch.int64, 8, torch.int64)],
)  # fmt: skip
def test_the_fewest_bytes_a_coordinate_win(workers, max_value, lane_bits, lanes, word, nbytes, sums):
    packing = collective_packing(workers, max_value)
    assert packing == SumPacking(lane_bits, lanes, word)
    assert packing.bytes_per_coordinate == nbytes and packing.sum_dtype == sums


def test_impossible_packings_and_tensors_are_refused_clearly():
    with pytest.raises(ValueError, match=r"workers \* max_value = 2 \* 9223372036854775807 .* exceeds int64"):
        collective_packing(2, 2**63 - 1)
    impossible = ((7, 10, torch.int64), (3, 11, torch.int32), (2, 8, torch.uint8), (0, 8, torch.int32), (-1, -1, torch.int64))
    for lanes, bits, word in impossible:
        with pytest.raises(ValueError, match="do not fit"):
            SumPacking(bits, lanes, word)
    with pytest.raises(ValueError, match="do not fit"):
        SumPacking(8, 1, torch.int16)  # no collective sums it
    packing = collective_packing(4, 255)
    for values in (torch.zeros(2, 3, dtype=torch.int32), torch.zeros(3)):
        with pytest.raises(ValueError, match="1-D integer tensor"):
            packing.pack(values)
    with pytest.raises(ValueError, match="10 sums take 4 torch.int32 words, got 3"):
        packing.unpack(torch.zeros(3, dtype=torch.int32), 10)
    with pytest.raises(ValueError, match="got 4 torch.int64"):
        packing.unpack(torch.zeros(4, dtype=torch.int64), 10)


def test_packing_leaves_its_input_alone():
    values = torch.arange(10, dtype=torch.int32)
    packing = collective_packing(4, 255)
    packing.unpack(packing.pack(values), 10)
    assert torch.equal(values, torch.arange(10, dtype=torch.int32))


@needs_cuda
@pytest.mark.parametrize("workers, max_value", CASES)
def test_cuda_tensors_pack_and_unpack_on_the_gpu(workers, max_value):
    packing, values = collective_packing(workers, max_value), torch.full((1001,), workers * max_value)
    words = packing.pack(values.cuda())
    assert words.is_cuda and torch.equal(words.cpu(), packing.pack(values))
    sums = packing.unpack(words, 1001)
    assert sums.is_cuda and torch.equal(sums.cpu().long(), values)


# --- a real gloo group ------------------------------------------------------------------------------

EIGHT_BIT = THCConfig(bits=8, granularity=255)
LENGTH = 10_001  # not a whole number of words


def _rank_values(rank: int) -> torch.Tensor:
    """8-bit THC table values (0..255) of ``rank``, the same in every process."""
    return torch.randint(0, 256, (LENGTH,), dtype=torch.uint8, generator=torch.Generator().manual_seed(rank))


def _sum_over_gloo(rank: int, workers: int, nodes: list[list[int]]) -> tuple[bool, bool, int, int]:
    """Whether a flat and a two-level (``nodes``) collective give the exact sums, and the bytes each sent."""
    codec = THCCodec(EIGHT_BIT)
    exact = torch.stack([_rank_values(r).long() for r in range(workers)]).sum(0)
    flat = CollectiveTransport(None)
    flat_sums = flat.table_sum(_rank_values(rank), codec, workers, bucket=0).wait()
    hierarchical = HierarchicalTransport(CollectiveTransport(), nodes=nodes)
    hierarchical.attach(codec, dist.group.WORLD)
    node_sums = hierarchical.table_sum(_rank_values(rank), codec, workers, bucket=0).wait()
    dist.barrier()
    hierarchical.close()
    return (torch.equal(flat_sums.long(), exact) and flat_sums.dtype == torch.int32,
            torch.equal(node_sums.long(), exact) and node_sums.dtype == torch.int32,
            flat.bytes_sent, hierarchical.bytes_sent)  # fmt: skip


def test_eight_bit_thc_on_four_gloo_workers_sends_a_third_of_int32s_bytes_exactly():
    outcomes = run_workers(_sum_over_gloo, 4, [[0, 1], [2, 3]], timeout=120)
    words = -(-LENGTH // 3)  # three 10-bit lanes an int32
    assert all(flat_exact and node_exact for flat_exact, node_exact, _, _ in outcomes)
    assert [flat for _, _, flat, _ in outcomes] == [4 * words] * 4  # 1.33 bytes a coordinate, not 4
    assert 4 * words / LENGTH == pytest.approx(4 / 3, abs=1e-3)
    assert [node for _, _, _, node in outcomes] == [4 * words, 0, 4 * words, 0]  # the leaders' all-reduce
