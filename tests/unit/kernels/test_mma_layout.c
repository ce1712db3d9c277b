/* The tensor-core fragment maps of kernels/common/mma_layout.h, checked for the properties the
 * CUDA attention builds on, since the kernels cannot run here: every element of each fragment is
 * held by exactly one (lane, slot); the two halves of a 32-bit register are neighbours along the
 * dimension that is contiguous in shared memory (so one 32-bit load fills a register); and the C
 * layout of two adjacent 16x8 tiles is the A layout of one 16x16 k-step (the probabilities of
 * S = Q K^T feed P V straight from registers). The expected shapes come from the PTX ISA. */
#include "kernels/common/mma_layout.h"
#include "tests/unit/harness.h"

/* Every (row, col) of a rows x cols fragment is hit exactly once by 32 lanes x `slots`. */
static void check_cover(tr_mma_rc (*elem)(int, int), int rows, int cols, int slots) {
    int seen[16][16] = {{0}};
    for (int lane = 0; lane < 32; lane++)
        for (int e = 0; e < slots; e++) {
            tr_mma_rc rc = elem(lane, e);
            CHECK(rc.row >= 0 && rc.row < rows && rc.col >= 0 && rc.col < cols);
            if (rc.row >= 0 && rc.row < rows && rc.col >= 0 && rc.col < cols)
                seen[rc.row][rc.col]++;
        }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) CHECK_INT_EQ(seen[r][c], 1);
    CHECK_INT_EQ(32 * slots, rows * cols);
}

static void test_fragments_cover_once(void) {
    check_cover(tr_mma_a_elem, 16, 16, 8);
    check_cover(tr_mma_b_elem, 16, 8, 4);
    check_cover(tr_mma_c_elem, 16, 8, 4);
}

/* A is stored row-major (pairs along k = col), B with n-major rows (pairs along k = row), C
 * written as pairs along col; the low half has the even index, so a 4-byte aligned load works. */
static void test_register_pairs_are_contiguous(void) {
    for (int lane = 0; lane < 32; lane++) {
        for (int e = 0; e < 8; e += 2) {
            tr_mma_rc lo = tr_mma_a_elem(lane, e), hi = tr_mma_a_elem(lane, e + 1);
            CHECK(lo.row == hi.row && hi.col == lo.col + 1 && lo.col % 2 == 0);
        }
        for (int e = 0; e < 4; e += 2) {
            tr_mma_rc lo = tr_mma_b_elem(lane, e), hi = tr_mma_b_elem(lane, e + 1);
            CHECK(lo.col == hi.col && hi.row == lo.row + 1 && lo.row % 2 == 0);
            tr_mma_rc clo = tr_mma_c_elem(lane, e), chi = tr_mma_c_elem(lane, e + 1);
            CHECK(clo.row == chi.row && chi.col == clo.col + 1 && clo.col % 2 == 0);
        }
    }
}

/* A register r of the k-step is C tile r / 2, elements 2 (r % 2) and 2 (r % 2) + 1, that tile
 * covering cols 8 (r / 2) .. 8 (r / 2) + 7 of the 16x16 block. */
static void test_c_pair_is_a_fragment(void) {
    for (int lane = 0; lane < 32; lane++)
        for (int e = 0; e < 8; e++) {
            int reg = e >> 1, tile = reg >> 1, ce = 2 * (reg & 1) + (e & 1);
            tr_mma_rc a = tr_mma_a_elem(lane, e), c = tr_mma_c_elem(lane, ce);
            CHECK_INT_EQ(a.row, c.row);
            CHECK_INT_EQ(a.col, c.col + 8 * tile);
        }
}

/* The row a lane owns in C is the same in A (row statistics of S are per lane, per row g and
 * g + 8), and the four lanes of a quad share both rows: the softmax reduces over xor 1 and 2. */
static void test_rows_shared_by_quads(void) {
    for (int lane = 0; lane < 32; lane++)
        for (int x = 1; x < 4; x++) {
            int other = lane ^ x;
            CHECK(other >> 2 == lane >> 2);
            CHECK_INT_EQ(tr_mma_c_elem(other, 0).row, tr_mma_c_elem(lane, 0).row);
            CHECK_INT_EQ(tr_mma_c_elem(other, 2).row, tr_mma_c_elem(lane, 2).row);
        }
    for (int lane = 0; lane < 32; lane++)
        CHECK_INT_EQ(tr_mma_c_elem(lane, 2).row, tr_mma_c_elem(lane, 0).row + 8);
}

TR_TEST_MAIN(TR_TEST(test_fragments_cover_once), TR_TEST(test_register_pairs_are_contiguous),
             TR_TEST(test_c_pair_is_a_fragment), TR_TEST(test_rows_shared_by_quads))
