// A small real data set for the tests that train on real data, made at test time from the
// Debian package dataset-fashion-mnist (scripts/install-deps.sh installs it).
//
// The set ("fashion8"): the first 1797 images of Fashion-MNIST's test set (t10k, in file
// order; its classes are interleaved, 168 to 204 rows each), each shrunk from 28x28 to 8x8:
// the central 24x24 pixels, each 3x3 block averaged, and that average scaled from 0..255 to
// an integer 0..16 (round half up). One CSV line per image, no header: the 64 values row by
// row, then the label 0..9 (T-shirt/top, trouser, pullover, dress, coat, sandal, shirt,
// sneaker, bag, ankle boot).
//
// Why this shape: it is the shape of the UCI digits the tests were first written on (1797
// rows of 64 counts 0..16 and a label 0..9), so their row counts, splits, layer sizes and
// step counts carry over unchanged. 8x8 keeps every run well under a second; the t10k set is
// the smaller file to unpack. It is harder than digits (the tests' MLPs reach 62% to 80%
// held-out accuracy on it, not 97%): their bounds are measured on this set and say so.
//
// Written once per build directory (SHMTRAIN_TEST_DATA_DIR) and reused: a temporary file
// renamed into place, so test processes running side by side never see half a file.
#pragma once

#include <string>

namespace shmtrain::test {

// Rows of the set, and the rows `--val-split 0.2` holds out of it (llround(0.2 * 1797)).
constexpr int kFashion8Rows = 1797;
constexpr int kFashion8HeldOut = 359;

// The path of the set's CSV file, written first if it is not there yet. When it cannot be
// made (the package is not installed, or the build directory is not writable) the current
// test fails with a message saying what to install, and the result is "": callers
// ASSERT_FALSE(path.empty()). Never skips.
std::string SmallFashionCsv();

}  // namespace shmtrain::test
