"""THCConfig validation and the overflow-free choice of sum widths."""
import dataclasses

import pytest
import torch

from ina.compression import THCConfig, collective_packing, sum_lane_bits, thc_table, uniform_table


def test_defaults_are_the_reference_ones():
    config = THCConfig()
    assert (config.bits, config.granularity, config.clip, config.block_size, config.grid) == (4, 30, 1 / 32, 1024, 1001)
    assert config.table == (0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30)
    assert config.threshold == pytest.approx(2.15387, abs=5e-6)
    assert not config.uniform_levels


def test_table_follows_the_parameters():
    config = THCConfig(bits=3, granularity=20, clip=0.05, grid=501)
    assert config.table == tuple(thc_table(3, 20, 0.05, 501))
    assert config.table is config.table  # cached


def test_uniform_config():
    config = THCConfig.uniform(4)
    assert config.uniform_levels and config.granularity == 15 and config.clip == 1e-4
    assert config.table == tuple(uniform_table(4))
    assert THCConfig.uniform(2, clip=0.01, block_size=256) == THCConfig(
        bits=2, granularity=3, clip=0.01, block_size=256, uniform_levels=True
    )


def test_config_is_frozen_and_hashable():
    config = THCConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.bits = 3
    assert hash(config) == hash(THCConfig())


@pytest.mark.parametrize(
    "kwargs,name",
    [({"bits": 0}, "bits"), ({"bits": 9}, "bits"), ({"bits": 2.5}, "bits"), ({"granularity": 14}, "granularity"),
     ({"granularity": 300}, "granularity"), ({"clip": 0}, "clip"), ({"clip": 1}, "clip"), ({"clip": -0.1}, "clip"),
     ({"block_size": 1000}, "block_size"), ({"block_size": 1}, "block_size"), ({"block_size": 0}, "block_size"),
     ({"grid": 1}, "grid"), ({"uniform_levels": True}, "granularity"), ({"uniform_levels": 1}, "uniform_levels")],
)  # fmt: skip
def test_bad_configurations_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        THCConfig(**kwargs)


def test_uniform_rejects_bad_bits():
    with pytest.raises(ValueError, match="bits"):
        THCConfig.uniform(0)


def test_check_workers():
    config = THCConfig()
    config.check_workers(1)
    config.check_workers((2**63 - 1) // 30)  # the collective's widest lane: one a whole int64
    with pytest.raises(ValueError, match="workers"):
        config.check_workers((2**63 - 1) // 30 + 1)
    with pytest.raises(ValueError, match="workers"):
        config.check_workers(0)


@pytest.mark.parametrize("granularity", [1, 3, 15, 30, 31, 100, 255])
def test_sum_widths_never_overflow(granularity):
    for workers in range(2, 257):
        largest = workers * granularity
        width = sum_lane_bits(workers, granularity)
        assert largest <= 2**width - 1
        assert width == 8 or largest > 2 ** {16: 8, 32: 16}[width] - 1, "narrowest lane"
        packing = collective_packing(workers, granularity)
        assert largest <= 2**packing.lane_bits - 1 and largest <= torch.iinfo(packing.sum_dtype).max
        # The collective really sums in those words: every worker sends the largest value in every lane.
        words = packing.pack(torch.full((packing.lanes,), granularity))
        assert packing.unpack(words * workers, packing.lanes).tolist() == [largest] * packing.lanes


def test_eight_bit_boundary():
    assert sum_lane_bits(255, 1) == 8 and sum_lane_bits(256, 1) == 16
    assert collective_packing(255, 1).word == torch.uint8 and collective_packing(256, 1).lane_bits == 9
    assert collective_packing(8, 30).word == torch.uint8  # 240: the reference's 8 workers still fit
    assert collective_packing(9, 30).sum_dtype == torch.int32  # 270: the reference would wrap here
    assert sum_lane_bits(2**16 - 1, 1) == 16 and sum_lane_bits(2**16, 1) == 32


def test_beyond_the_widest_sum_raises():
    assert sum_lane_bits(1, 2**32 - 1) == 32
    with pytest.raises(ValueError, match="workers"):
        sum_lane_bits(2, 2**32 - 1)
    assert collective_packing(1, 2**63 - 1).word == torch.int64
    with pytest.raises(ValueError, match="workers"):
        collective_packing(2, 2**63 - 1)


@pytest.mark.parametrize("args,name", [((0, 30), "workers"), ((2, -1), "max_value"), ((2.0, 30), "workers")])
def test_sum_width_arguments_are_checked(args, name):
    with pytest.raises(ValueError, match=name):
        sum_lane_bits(*args)
    with pytest.raises(ValueError, match=name):
        collective_packing(*args)
