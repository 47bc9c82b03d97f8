"""bench/varlen_model.py's wave model (deviceless): the two schedulers, the causal block count, and that on
equal-length batches the compact model equals the sections one without empty blocks (the same order)."""
from bench import varlen_model as vm


def test_list_schedule_hands_each_tile_to_the_first_free_sm():
    assert vm.list_schedule([3, 1, 1, 1], 2) == 3      # 3 | 1+1+1
    assert vm.list_schedule([1, 1, 1, 3], 2) == 4      # the long tile last ends late
    assert vm.list_schedule(sorted([1, 1, 1, 3], reverse=True), 2) == 3


def test_static_schedule_strides():
    assert vm.static_schedule([3, 1, 1, 1], 2) == 4    # CTA 0: 3 + 1, CTA 1: 1 + 1


def test_causal_blocks():
    assert [vm.blocks(m, 300, 128, 128) for m in range(3)] == [1, 2, 3]
    assert vm.blocks(0, 100, 128, 64) == 2 and vm.blocks(1, 200, 128, 64) == 4


def test_equal_lengths_compact_is_sections():
    r = vm.schedules([512, 512, 512], 4, 2, 128, 128, 5, c=1.0, c_empty=9.0, persistent_share=0.5)
    assert r["tiles"] == r["blocks"] == 3 * 4 * 4 and r["work"] == 3 * 4 * (1 + 2 + 3 + 4)
    assert r["compact"] == r["sections"]
    assert r["persistent-lpt"] <= r["lpt"]
