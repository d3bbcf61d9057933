// Datasets from array files: IDX and NumPy (.npy, .npz). The features are one array whose
// first dimension is the rows (every further dimension is flattened: (n, 28, 28) is n rows
// of 784 features); the labels are another, of shape (n,) or (n, 1), from the file
// ArraySource::labels_path names or from the .npz's own y_key array.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace shmtrain::data {

// The formats IDX ("idx"), .npy ("npy") and .npz ("npz") of data/format.h are this file's.
// Their loads check every declared size against its file (data/byte_stream.h) before
// anything is allocated for it: every failure is Status::Data naming the file and what is
// wrong (a count mismatch names both files), memory the machine lacks Status::Resource. Their
// sample shape is the features array's dimensions after the rows: {28, 28} for IDX images
// of 28 x 28, {784} for an (n, 784) array.

// The image shape of one sample of those dimensions: (H, W) is 1xHxW, (C, H, W) is CxHxW;
// nullopt for flat data (one dimension, or more than three).
std::optional<Shape> SampleImage(const std::vector<int64_t>& dims);

}  // namespace shmtrain::data
