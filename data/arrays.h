// Datasets from array files: IDX and NumPy (.npy, .npz). The features are one array whose
// first dimension is the rows (every further dimension is flattened: (n, 28, 28) is n rows
// of 784 features); the labels are another, of shape (n,) or (n, 1), from the file
// ArraySource::labels_path names or from the .npz's own y_key array.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"

namespace shmtrain::data {

using shmtrain::IsArrayFormat;

// The format the name says (.npy, .npz, IDX names, .svm/.libsvm/.svmlight), else kAuto.
DataFormat FormatByName(std::string_view name);

// The format by the file's name, then by its first bytes (a regular file only: a pipe is
// never read ahead; a gzip file's first inflated bytes): kIdx, kNpy, kNpz or kLibsvm when
// they tell; kAuto when the file is text that its content must tell apart (CSV or LIBSVM).
DataFormat DetectFormat(const std::string& path);

// Loads `path` in `format` (kIdx, kNpy or kNpz) with the labels opts asks for. Every failure
// is Status::Data naming the file and what is wrong; a count mismatch names both files. No
// declared size is trusted: each is checked against its file (data/byte_stream.h) before
// anything is allocated for it; memory the machine lacks is Status::Resource.
Status LoadArrays(const std::string& path, DataFormat format, const LoadOptions& opts,
                  Dataset* out);

// The shape of one sample of the features array of `path` (the dimensions after the rows):
// {28, 28} for IDX images of 28 x 28, {784} for an (n, 784) array. Empty when the file is no
// array file, or not a regular file (a pipe is read once, by LoadArrays). Only the header is
// read; its errors are LoadArrays' own.
Status SampleShape(const std::string& path, const LoadOptions& opts, std::vector<int64_t>* dims);

// The image shape of one sample of those dimensions: (H, W) is 1xHxW, (C, H, W) is CxHxW;
// nullopt for flat data (one dimension, or more than three).
std::optional<Shape> SampleImage(const std::vector<int64_t>& dims);

}  // namespace shmtrain::data
