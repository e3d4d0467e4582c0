"""The worker's payload words and sums (ina.transport.payload) are pack_bits' and unpack_bits' bits, with
the shortcuts (8-bit lanes as the values' bytes, 4-bit indices two to a byte) taken where they apply."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.compression import pack_bits, unpack_bits
from ina.transport.payload import pack_words, unpack_words


@settings(deadline=None, max_examples=200)
@given(width=st.sampled_from([3, 4, 5, 8, 16]), count=st.integers(1, 70), seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from([torch.uint8, torch.int32]))  # fmt: skip
def test_packed_words_and_unpacked_fields_are_the_reference_bits(width, count, seed, dtype):
    values = torch.from_numpy(np.random.default_rng(seed).integers(0, 2**width, size=count)).to(dtype)
    if dtype == torch.uint8 and width > 8:
        values = values.to(torch.int32)
    words = pack_words(values, width)
    assert words.dtype == np.uint32 and words.tobytes() == pack_bits(values, width).numpy().tobytes()
    fields = unpack_words(words, width, count)
    want = unpack_bits(torch.from_numpy(words.view(np.int32)), width, count)
    assert fields.dtype == want.dtype and torch.equal(fields, want)


def test_8_bit_lanes_are_the_values_own_bytes_both_ways():
    values = torch.arange(64, dtype=torch.uint8)
    words = pack_words(values, 8)
    assert np.shares_memory(words, values.numpy()) and words[0] == 0x03020100
    sums = unpack_words(words, 8, 61)
    assert np.shares_memory(sums.numpy(), words) and sums.tolist() == list(range(61))


def test_out_of_range_indices_and_counts_are_refused():
    with pytest.raises(ValueError, match="0..2\\*\\*4 - 1"):
        pack_words(torch.tensor([3, 16], dtype=torch.uint8), 4)
    with pytest.raises(ValueError, match="do not fit"):
        unpack_words(np.zeros(2, np.uint32), 8, 9)
