"""The recycled arrays of ina.transport.buffers: memory comes back only once nothing can read it."""

import gc

import numpy as np
import pytest
import torch

from ina.compression import pack_bits
from ina.transport.buffers import ArrayPool
from ina.transport.payload import pack_words


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_an_array_is_reused_once_it_and_all_its_views_are_gone():
    pool = ArrayPool()
    first = pool.take(1000)
    where = address(first)
    lanes = torch.from_numpy(first.view(np.uint8)[:3000])  # what a transport hands the caller
    tail = first[500:]
    del first, tail
    gc.collect()
    other = pool.take(1000)
    assert pool.idle_bytes == 0 and address(other) != where  # the tensor still reads it
    del lanes
    gc.collect()
    assert pool.idle_bytes == 4000
    again = pool.take(1000)
    assert address(again) == where and pool.idle_bytes == 0
    again[:] = 7  # writable, of its length
    assert again.dtype == np.uint32 and again.size == 1000


def test_arrays_are_reused_only_at_their_own_length():
    pool = ArrayPool()
    pool.take(10)  # dies at once
    gc.collect()
    assert pool.idle_bytes == 40
    longer = pool.take(11)
    assert longer.size == 11 and pool.idle_bytes == 40
    same = pool.take(10)
    assert same.size == 10 and pool.idle_bytes == 0


def test_idle_memory_is_bounded():
    pool = ArrayPool(max_bytes=100)
    arrays = [pool.take(10) for _ in range(4)]  # 40 bytes each
    del arrays
    gc.collect()
    assert pool.idle_bytes == 80  # the third and fourth went back to the allocator


@pytest.mark.parametrize("width", [4, 3, 8])
def test_pack_bits_into_a_given_tensor_is_pack_bits(width):
    values = torch.randint(0, 2**width, (1001,), dtype=torch.uint8)
    expected = pack_bits(values, width)
    out = torch.full_like(expected, -1)
    assert pack_bits(values, width, out=out) is out and torch.equal(out, expected)
    with pytest.raises(ValueError, match="out must be"):
        pack_bits(values, width, out=torch.empty(expected.numel() + 1, dtype=torch.int32))


def test_pack_words_of_indices_is_pack_bits_in_a_recycled_array():
    values = torch.randint(0, 16, (999,), dtype=torch.uint8)
    words = pack_words(values, 4)
    assert words.dtype == np.uint32 and np.array_equal(words.view(np.int32), pack_bits(values, 4).numpy())
    where = address(words)
    del words
    gc.collect()
    assert address(pack_words(values, 4)) == where
