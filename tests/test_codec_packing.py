"""Bit packing: round trips at every width and the exact wire layout."""
import pytest
import torch

from ina.compression import pack_bits, unpack_bits


def as_uint32(words):
    return [w & 0xFFFFFFFF for w in words.tolist()]


@pytest.mark.parametrize("width", range(1, 33))
def test_round_trip_every_width(width):
    generator = torch.Generator().manual_seed(width)
    count = 1000 + width  # not a multiple of the fields per word
    values = torch.randint(0, 2**width, (count,), dtype=torch.int64, generator=generator)
    values[:2] = torch.tensor([0, 2**width - 1])  # extremes
    words = pack_bits(values, width)
    assert words.dtype == torch.int32
    assert words.numel() == -(-count // (32 // width))
    back = unpack_bits(words, width, count)
    assert back.dtype == (torch.uint8 if width <= 8 else torch.int32)
    assert torch.equal(back.long() & 0xFFFFFFFF, values)


def test_exact_layout_hand_made():
    # width 3: ten fields per word, field j at bits [3j, 3j + 3) from the LSB.
    assert as_uint32(pack_bits(torch.tensor([1, 2, 3, 4, 5]), 3)) == [1 | 2 << 3 | 3 << 6 | 4 << 9 | 5 << 12]
    # width 10: three fields per word, bits 30-31 unused, never straddling; last word zero-padded.
    words = pack_bits(torch.tensor([0x3FF, 0x001, 0x2AA, 0x155]), 10)
    assert as_uint32(words) == [0x3FF | 0x001 << 10 | 0x2AA << 20, 0x155]
    # width 4 with uint8 input: eight nibbles per word, the first in the lowest nibble.
    nibbles = torch.tensor([0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0xF], dtype=torch.uint8)
    assert as_uint32(pack_bits(nibbles, 4)) == [0x87654321, 0xF]
    # width 32: the int32 word holds the uint32 bit pattern.
    assert pack_bits(torch.tensor([2**32 - 1, 2**31, 7]), 32).tolist() == [-1, -(2**31), 7]
    assert pack_bits(torch.tensor([1, 0, 1]), 1).tolist() == [0b101]


def test_unpack_reads_only_count_fields():
    words = torch.tensor([0x87654321 - 2**32], dtype=torch.int32)
    assert unpack_bits(words, 4, 3).tolist() == [1, 2, 3]
    assert unpack_bits(words, 16, 2).tolist() == [0x4321, 0x8765]
    assert unpack_bits(words, 4, 0).numel() == 0


def test_empty_input():
    assert pack_bits(torch.empty(0, dtype=torch.int64), 5).numel() == 0


@pytest.mark.parametrize(
    "call,name",
    [(lambda: pack_bits(torch.tensor([8]), 3), "values"), (lambda: pack_bits(torch.tensor([-1]), 3), "values"),
     (lambda: pack_bits(torch.tensor([1]), 0), "width"), (lambda: pack_bits(torch.tensor([1]), 33), "width"),
     (lambda: pack_bits(torch.tensor([1.0]), 4), "values"), (lambda: pack_bits(torch.tensor([[1]]), 4), "values"),
     (lambda: unpack_bits(torch.tensor([1], dtype=torch.int32), 4, 9), "count"),
     (lambda: unpack_bits(torch.tensor([1]), 4, 1), "words")],
)  # fmt: skip
def test_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize("width", [1, 3, 4, 7, 8, 12, 16, 32])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.int64])
def test_torch_packing_matches_the_protocols_numpy_packing(width, dtype):
    """The worker packs with torch, the PS unpacks with numpy: both follow docs/protocol.md."""
    from ina.protocol import pack_fields, unpack_fields

    top = min(2**width, 256 if dtype == torch.uint8 else 2**31)
    values = torch.randint(0, top, (777,), generator=torch.Generator().manual_seed(width)).to(dtype)
    words = pack_bits(values, width)
    reference = pack_fields(values.long().numpy(), width)
    assert as_uint32(words) == reference.tolist()
    assert unpack_bits(words, width, 777).long().tolist() == unpack_fields(reference, width, 777).tolist()
