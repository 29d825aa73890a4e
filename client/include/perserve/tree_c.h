/* perserve/tree_c.h: the priority tree as a C ABI, for ctypes and other FFI users.
 *
 * Library: libperserve_tree.so. Arrays are passed as plain pointers, so NumPy
 * arrays (int64 and float64, C-contiguous) go in without a copy.
 *
 * The contract (docs/design.md, "The tree's contract"):
 *  - A sum and a min over `capacity` leaves (the capacity asked for, rounded up
 *    to a power of two), in double precision. Every leaf starts at 0.
 *  - Leaves are finite and >= 0. A leaf of 0 is an EMPTY SLOT: it adds
 *    nothing to the total and no sample or descent ever lands on it.
 *  - The MIN COVERS THE POSITIVE LEAVES ONLY: perserve_tree_min() is the
 *    smallest leaf > 0, the smallest that can be drawn, and +inf when every
 *    leaf is 0. It is never 0 (a classic min tree would give 0 as soon as one
 *    slot is empty); importance weights can divide by it.
 *  - Internal nodes are left + right and min(left, right), in that order, so
 *    every update strategy and device ("cpu", "cuda") gives bit-identical
 *    totals, mins and descents for the same leaves.
 *  - Calls are batched and validated whole first: a call that fails changes
 *    nothing. In a batch with repeated indices the last value wins.
 *  - Cost: an update of k leaves O(k log capacity); a descent or a draw
 *    O(log capacity) each; total, min and capacity O(1).
 *
 * Functions returning int give 0 on success and non-zero on error, and
 * perserve_last_error() (per thread) says why. Values and masses must be
 * finite and >= 0; indices in [0, perserve_tree_capacity(t)). A tree is not
 * thread-safe: one thread at a time per tree (different trees may be used
 * from different threads).
 */
#ifndef PERSERVE_TREE_C_H_
#define PERSERVE_TREE_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct perserve_tree perserve_tree;

/* capacity is rounded up to a power of two. device: "cpu", "cuda", "auto".
 * NULL on error. */
perserve_tree* perserve_tree_create(int64_t capacity, const char* device);
void perserve_tree_destroy(perserve_tree* t);
/* strategy: "auto", "per_element", "rebuild", "sparse". */
int perserve_tree_set_strategy(perserve_tree* t, const char* strategy);
/* Sets leaf indices[j] to values[j]; repeated indices: the last one wins. */
int perserve_tree_update(perserve_tree* t, const int64_t* indices, const double* values, int64_t k);
/* Sets leaf indices[j] to priorities[j]^alpha, computed where the tree lives
 * (on the GPU for a CUDA tree). alpha finite and >= 0. A power below the
 * smallest normal double (an underflow, or 0 from a zero priority) is clamped
 * up to it, 2^-1022: a leaf set from a priority is never 0. */
int perserve_tree_update_with_exponent(perserve_tree* t, const int64_t* indices, const double* priorities,
                                       int64_t k, double alpha);
/* k stratified proportional draws: out_indices[i] and its leaf value out_values[i],
 * mass_i = (i + u_i) * total / k, u_i in (0, 1] keyed by (seed, counter): the same
 * pair repeats a draw, a new counter draws afresh (on a CUDA tree: one kernel).
 * Leaf i is drawn with probability leaf_i / total, never an empty one. Needs a
 * total > 0. */
int perserve_tree_sample(perserve_tree* t, uint64_t seed, uint64_t counter, int64_t* out_indices,
                         double* out_values, int64_t k);
/* For each mass, the leaf the prefix-sum descent lands on: from the root, left if
 * left_sum > mass, else mass -= left_sum and right (never into a right subtree
 * whose sum is 0). A mass at or past the total lands on the last non-empty leaf.
 * Needs a total > 0. */
int perserve_tree_find_prefixsum(perserve_tree* t, const double* masses, int64_t* out_indices, int64_t k);
int perserve_tree_get(perserve_tree* t, const int64_t* indices, double* out_values, int64_t k);
/* The sum of every leaf. */
double perserve_tree_total(perserve_tree* t);
/* The min over the POSITIVE leaves only (a leaf of 0 is an empty slot and does
 * not count); +inf when there is none. Never 0. */
double perserve_tree_min(perserve_tree* t);
int64_t perserve_tree_capacity(perserve_tree* t); /* after rounding */
/* The episodic prefix sum: running sums of x that reset at episode boundaries.
 * x, dones, out: [streams, length] row-major; carry_sum, carry_done: [streams], read
 * (the state before this call; zeros for a fresh stream) and written (the state after).
 * boundary: 0 = ends_at (dones[t] = 1 ends an episode at t), 1 = starts_at (dones[t] = 1
 * starts one at t). device: "cpu", "cuda", "auto". 0 on success. */
int perserve_episodic_prefix_sum(const double* x, const uint8_t* dones, int64_t streams, int64_t length,
                                 int boundary, double* carry_sum, uint8_t* carry_done, double* out,
                                 const char* device);

/* Message of the last failed call on this thread ("" if none). */
const char* perserve_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* PERSERVE_TREE_C_H_ */
