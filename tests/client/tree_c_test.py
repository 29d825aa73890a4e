#!/usr/bin/python3
"""The tree's C ABI (perserve/tree_c.h) driven as users drive it: ctypes with
NumPy arrays passed by pointer, no copies. Usage: tree_c_test.py path/to/libperserve_tree.so
"""
import ctypes
import itertools
import math
import sys
import threading
import unittest

import numpy as np

LIB_PATH = sys.argv.pop(1) if len(sys.argv) > 1 else "libperserve_tree.so"
lib = ctypes.CDLL(LIB_PATH)

i64p = ctypes.POINTER(ctypes.c_int64)
f64p = ctypes.POINTER(ctypes.c_double)
lib.perserve_tree_create.restype = ctypes.c_void_p
lib.perserve_tree_create.argtypes = [ctypes.c_int64, ctypes.c_char_p]
lib.perserve_tree_destroy.argtypes = [ctypes.c_void_p]
lib.perserve_tree_set_strategy.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.perserve_tree_update.argtypes = [ctypes.c_void_p, i64p, f64p, ctypes.c_int64]
lib.perserve_tree_find_prefixsum.argtypes = [ctypes.c_void_p, f64p, i64p, ctypes.c_int64]
lib.perserve_tree_get.argtypes = [ctypes.c_void_p, i64p, f64p, ctypes.c_int64]
lib.perserve_tree_update_with_exponent.argtypes = [ctypes.c_void_p, i64p, f64p, ctypes.c_int64, ctypes.c_double]
lib.perserve_tree_sample.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, i64p, f64p, ctypes.c_int64]
lib.perserve_tree_total.restype = ctypes.c_double
lib.perserve_tree_total.argtypes = [ctypes.c_void_p]
lib.perserve_tree_min.restype = ctypes.c_double
lib.perserve_tree_min.argtypes = [ctypes.c_void_p]
lib.perserve_tree_capacity.restype = ctypes.c_int64
lib.perserve_tree_capacity.argtypes = [ctypes.c_void_p]
lib.perserve_last_error.restype = ctypes.c_char_p
u8p = ctypes.POINTER(ctypes.c_uint8)
lib.perserve_episodic_prefix_sum.argtypes = [f64p, u8p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, f64p, u8p,
                                             f64p, ctypes.c_char_p]
lib.perserve_last_error.argtypes = []


def ptr(array, kind):
    assert array.flags["C_CONTIGUOUS"]
    return array.ctypes.data_as(kind)


def cuda_usable():
    handle = lib.perserve_tree_create(1, b"cuda")
    if handle:
        lib.perserve_tree_destroy(handle)
    return bool(handle)


# Where a GPU is usable, the CUDA tree is held to the same reference.
DEVICES = (b"cpu", b"cuda") if cuda_usable() else (b"cpu",)


def last_error():
    return lib.perserve_last_error().decode()


class Tree:
    """A thin wrapper, as a user would write one."""

    def __init__(self, capacity, device=b"cpu"):
        self.handle = lib.perserve_tree_create(capacity, device)
        if not self.handle:
            raise RuntimeError(last_error())
        self.capacity = lib.perserve_tree_capacity(self.handle)

    def close(self):
        lib.perserve_tree_destroy(self.handle)

    def update(self, indices, values):
        return lib.perserve_tree_update(self.handle, ptr(indices, i64p), ptr(values, f64p), len(indices))

    def descend(self, masses):
        out = np.full(len(masses), -1, dtype=np.int64)
        rc = lib.perserve_tree_find_prefixsum(self.handle, ptr(masses, f64p), ptr(out, i64p), len(masses))
        return rc, out

    def leaves(self):
        indices = np.arange(self.capacity, dtype=np.int64)
        out = np.empty(self.capacity, dtype=np.float64)
        assert lib.perserve_tree_get(self.handle, ptr(indices, i64p), ptr(out, f64p), self.capacity) == 0
        return out


def reference_levels(leaves):
    """Every level of the sum tree, bottom first, each node left + right, as docs/design.md fixes it."""
    levels = [leaves.copy()]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append(below[0::2] + below[1::2])
    return levels


def reference_descent(levels, mass):
    """The guarded descent over reference levels (top is levels[-1])."""
    node = 0
    for depth in range(len(levels) - 2, -1, -1):
        left, right = levels[depth][2 * node], levels[depth][2 * node + 1]
        if left > mass or (right == 0.0 and left > 0.0):
            node = 2 * node
        else:
            mass -= left
            node = 2 * node + 1
    return node


class TreeCApiTest(unittest.TestCase):
    def test_update_with_exponent_and_sample(self):
        rng = np.random.default_rng(9)
        for device in DEVICES:
            tree = Tree(1 << 10, device)
            indices = np.arange(tree.capacity, dtype=np.int64)
            priorities = rng.exponential(1.0, size=tree.capacity) * (rng.random(tree.capacity) > 0.2)
            self.assertEqual(lib.perserve_tree_update_with_exponent(tree.handle, ptr(indices, i64p),
                                                                    ptr(priorities, f64p), tree.capacity, 0.6),
                             0, last_error())
            leaves = tree.leaves()
            # C's pow, as std::pow (NumPy's is not), never below the smallest normal double (0 included).
            expected = np.array([max(math.pow(p, 0.6), sys.float_info.min) for p in priorities])
            ulps = np.abs(leaves.view(np.int64) - expected.view(np.int64))
            self.assertLessEqual(int(ulps.max()), 0 if device == b"cpu" else 2, device)
            draws = 256
            out_indices = np.zeros(draws, dtype=np.int64)
            out_values = np.zeros(draws)
            self.assertEqual(lib.perserve_tree_sample(tree.handle, 3, 0, ptr(out_indices, i64p), ptr(out_values, f64p),
                                                      draws), 0, last_error())
            np.testing.assert_array_equal(out_values, leaves[out_indices])
            self.assertTrue((out_values > 0).all(), "an empty leaf was drawn")
            # Draw i lies in stratum i of the prefix sums (up to rounding).
            after = np.cumsum(leaves)
            before = after - leaves
            total = lib.perserve_tree_total(tree.handle)
            strata = np.arange(draws)
            self.assertTrue((before[out_indices] <= (strata + 1) * total / draws * (1 + 1e-9)).all())
            self.assertTrue((after[out_indices] >= strata * total / draws * (1 - 1e-9)).all())
            again = np.zeros(draws, dtype=np.int64)
            self.assertEqual(lib.perserve_tree_sample(tree.handle, 3, 0, ptr(again, i64p), ptr(out_values, f64p),
                                                      draws), 0)
            np.testing.assert_array_equal(again, out_indices)
            self.assertNotEqual(lib.perserve_tree_update_with_exponent(tree.handle, ptr(indices, i64p),
                                                                       ptr(priorities, f64p), 4, -1.0), 0)
            self.assertIn("alpha -1", last_error())
            np.testing.assert_array_equal(tree.leaves(), leaves)  # unchanged by the rejected call
            tree.close()

    def test_capacity_rounds_up_and_devices(self):
        tree = Tree(1000)
        self.assertEqual(tree.capacity, 1024)
        tree.close()
        handle = lib.perserve_tree_create(16, b"cuda")
        if handle:  # a usable GPU: the CUDA tree
            lib.perserve_tree_destroy(handle)
        else:
            self.assertIn('device "cuda" requested', last_error())
        self.assertIsNone(lib.perserve_tree_create(16, b"tpu"))
        self.assertIn("unknown device", last_error())
        self.assertIsNone(lib.perserve_tree_create(0, b"cpu"))
        self.assertIn("capacity", last_error())
        handle = lib.perserve_tree_create(16, b"auto")
        self.assertIsNotNone(handle)
        lib.perserve_tree_destroy(handle)

    def test_every_strategy_matches_the_numpy_reference_bit_for_bit(self):
        rng = np.random.default_rng(5)
        for device, strategy in itertools.product(DEVICES, (b"per_element", b"rebuild", b"sparse", b"auto")):
            tree = Tree(1 << 12, device)
            self.assertEqual(lib.perserve_tree_set_strategy(tree.handle, strategy), 0, last_error())
            expected = np.zeros(tree.capacity)
            for k in (1, 7, 50, 512, 4096, 6000):
                indices = rng.integers(0, tree.capacity, size=k, dtype=np.int64)
                values = rng.exponential(1.0, size=k) * (rng.random(k) > 0.1)
                self.assertEqual(tree.update(indices, values), 0, last_error())
                expected[indices] = values  # NumPy fancy assignment: the last repeat wins, as in the tree
                np.testing.assert_array_equal(tree.leaves(), expected)
                levels = reference_levels(expected)
                self.assertEqual(lib.perserve_tree_total(tree.handle), levels[-1][0])
                positive = expected[expected > 0]  # a zero leaf is an empty slot: not part of the min
                self.assertEqual(lib.perserve_tree_min(tree.handle), positive.min() if positive.size else math.inf)
                total = levels[-1][0]
                masses = np.concatenate([(np.arange(256) + rng.random(256)) * total / 256,
                                         [0.0, total, np.nextafter(total, math.inf), 3.0 * total]])
                rc, found = tree.descend(masses)
                self.assertEqual(rc, 0, last_error())
                want = [reference_descent(levels, m) for m in masses]
                np.testing.assert_array_equal(found, want)
                self.assertTrue((expected[found] > 0).all(), "a descent returned an empty leaf")
            tree.close()

    def test_batched_descent_matches_the_reference_at_every_batch_size(self):
        # The CPU tree descends up to 512 paths a level at a time: sizes below,
        # at and past one group and a remainder, masses sorted (stratified) and
        # in any order, a tree with zero leaves, a run of zeros and an empty tail.
        rng = np.random.default_rng(28)
        for device in DEVICES:
            tree = Tree(1 << 12, device)
            leaves = rng.exponential(1.0, size=tree.capacity) * (rng.random(tree.capacity) > 0.1)
            leaves[1000:1500] = 0.0
            leaves[3000:] = 0.0
            indices = np.arange(tree.capacity, dtype=np.int64)
            self.assertEqual(tree.update(indices, leaves), 0, last_error())
            levels = reference_levels(leaves)
            total = levels[-1][0]
            for k in (1, 7, 511, 512, 513, 1000, 1024, 1500):
                stratified = (np.arange(k) + rng.random(k)) * total / k
                edges = rng.choice([0.0, total, np.nextafter(total, math.inf), 2.0 * total,
                                    np.cumsum(leaves)[999], np.cumsum(leaves)[2999]], size=k)
                scattered = np.where(rng.random(k) < 0.2, edges, rng.random(k) * total)
                for masses in (stratified, scattered):
                    want = [reference_descent(levels, m) for m in masses]
                    for _ in range(2):  # the same batch again: nothing carried over
                        rc, found = tree.descend(masses)
                        self.assertEqual(rc, 0, last_error())
                        np.testing.assert_array_equal(found, want, f"k = {k}")
                    self.assertTrue((leaves[found] > 0).all(), f"an empty leaf at k = {k}")
            tree.close()

    def test_bad_input_fails_and_leaves_the_tree_unchanged(self):
        tree = Tree(64)
        indices = np.arange(8, dtype=np.int64)
        self.assertEqual(tree.update(indices, np.linspace(1.0, 2.0, 8)), 0)
        before = tree.leaves()
        total = lib.perserve_tree_total(tree.handle)
        cases = [
            (np.array([1, 2], dtype=np.int64), np.array([1.0, np.nan]), "NaN"),
            (np.array([1, 2], dtype=np.int64), np.array([-1.0, 1.0]), "negative"),
            (np.array([3], dtype=np.int64), np.array([np.inf]), "infinite"),
            (np.array([1, 64], dtype=np.int64), np.array([1.0, 1.0]), "index 64"),
            (np.array([-1], dtype=np.int64), np.array([1.0]), "index -1"),
        ]
        for bad_indices, bad_values, mention in cases:
            self.assertNotEqual(tree.update(bad_indices, bad_values), 0)
            self.assertIn(mention, last_error())
            np.testing.assert_array_equal(tree.leaves(), before)
            self.assertEqual(lib.perserve_tree_total(tree.handle), total)
        rc, _ = tree.descend(np.array([0.5, np.nan]))
        self.assertNotEqual(rc, 0)
        self.assertIn("mass", last_error())
        self.assertNotEqual(lib.perserve_tree_set_strategy(tree.handle, b"fastest"), 0)
        self.assertIn("unknown update strategy", last_error())
        self.assertNotEqual(lib.perserve_tree_update(tree.handle, None, None, 3), 0)
        self.assertIn("NULL", last_error())
        self.assertNotEqual(lib.perserve_tree_update(tree.handle, None, None, -1), 0)
        self.assertIn("negative", last_error())
        self.assertEqual(lib.perserve_tree_update(tree.handle, None, None, 0), 0)  # k = 0 is a no-op
        np.testing.assert_array_equal(tree.leaves(), before)
        tree.close()

    def test_empty_tree_descent_fails_and_min_is_infinite(self):
        tree = Tree(16)
        self.assertEqual(lib.perserve_tree_min(tree.handle), math.inf)
        rc, _ = tree.descend(np.array([0.0]))
        self.assertNotEqual(rc, 0)
        self.assertIn("total is 0", last_error())
        tree.close()

    def test_last_error_is_per_thread(self):
        self.assertIsNone(lib.perserve_tree_create(16, b"bogus-main"))
        seen = []

        def fail_elsewhere():
            lib.perserve_tree_create(16, b"bogus-thread")
            seen.append(last_error())

        worker = threading.Thread(target=fail_elsewhere)
        worker.start()
        worker.join()
        self.assertIn("bogus-thread", seen[0])
        self.assertIn("bogus-main", last_error())


def episodic_reference(x, dones, boundary):
    """The recurrence as the issue writes it, per stream."""
    out = np.empty_like(x)
    for s in range(x.shape[0]):
        c, previous = 0.0, 0
        for t in range(x.shape[1]):
            keep = 1 - (previous if boundary == 0 else dones[s, t])
            c = x[s, t] + keep * c
            previous = dones[s, t]
            out[s, t] = c
    return out


class EpisodicPrefixSumCApiTest(unittest.TestCase):
    def scan(self, x, dones, boundary, carry_sum, carry_done, device=b"cpu"):
        out = np.empty_like(x)
        rc = lib.perserve_episodic_prefix_sum(ptr(x, f64p), ptr(dones, u8p), x.shape[0], x.shape[1], boundary,
                                              ptr(carry_sum, f64p), ptr(carry_done, u8p), ptr(out, f64p), device)
        return rc, out

    def test_chunks_with_carries_equal_the_whole_recurrence(self):
        rng = np.random.default_rng(3)
        x = rng.standard_normal((5, 60))
        dones = (rng.random((5, 60)) < 0.1).astype(np.uint8)
        for boundary in (0, 1):
            expected = episodic_reference(x, dones, boundary)
            carry_sum, carry_done = np.zeros(5), np.zeros(5, dtype=np.uint8)
            pieces = []
            for start in range(0, 60, 25):
                xs = np.ascontiguousarray(x[:, start:start + 25])
                ds = np.ascontiguousarray(dones[:, start:start + 25])
                rc, out = self.scan(xs, ds, boundary, carry_sum, carry_done)
                self.assertEqual(rc, 0, last_error())
                pieces.append(out)
            np.testing.assert_array_equal(np.concatenate(pieces, axis=1), expected)
            self.assertTrue((carry_done == dones[:, -1]).all())

    def test_bad_arguments_fail_with_a_message(self):
        x = np.zeros((2, 3))
        dones = np.zeros((2, 3), dtype=np.uint8)
        carry_sum, carry_done = np.zeros(2), np.zeros(2, dtype=np.uint8)
        rc, _ = self.scan(x, dones, 5, carry_sum, carry_done)
        self.assertNotEqual(rc, 0)
        self.assertIn("boundary", last_error())
        rc, _ = self.scan(x, dones, 0, carry_sum, carry_done, device=b"tpu")
        self.assertNotEqual(rc, 0)
        self.assertIn("unknown device", last_error())


if __name__ == "__main__":
    unittest.main(verbosity=2)
