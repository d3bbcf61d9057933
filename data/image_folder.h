// Image folders, as torchvision's ImageFolder reads them: root/<class>/<name>.jpg.
//
// Classes are the root's sub-folders, sorted by name (bytes, as Python sorts them), and class k
// is the model's output k; files at the root itself are not rows. The rows are each class's
// images in that order: the class folder and the folders below it (symbolic links followed),
// sorted by path, and each folder's files sorted by name — ImageFolder's order, so the same
// images as a NumPy array in this order give the same rows. A file is an image by its name:
// .jpg, .jpeg or .png (any case), decoded by data/image.h. Files with another name are not
// rows, as ImageFolder skips them; they are counted (ImageFolderFiles::skipped) for a warning.
// Image names ImageFolder would read but these decoders do not (.bmp, .ppm, .pgm, .tif, .tiff,
// .webp) are refused, as a row left out would shift every row after it.
//
// A row is one image's samples as floats 0..255, channels first (c x h x w, as the conv
// layers and PyTorch's tensors hold them): the rows of a NumPy array of shape (n, c, h, w),
// i.e. numpy.asarray(image).transpose(2, 0, 1) for a colour image. Every image of a data set
// has the first image's size and channels, or the load is refused naming the first that
// differs (nothing is resized). The images are decoded by the loader's threads.
//
// Refused, each naming the file or folder: no class folder, a class folder with no image, a
// symbolic link that leads back to a folder above it, an image that cannot be decoded, one of
// another size, an unreadable folder, a file named as an image that is not a regular file (a
// FIFO, a socket, a device, or a link to one: never opened, since opening a FIFO waits for a
// writer; such a file with another name is left out like any other). Names in messages show
// their control bytes as \xNN (Printable, core/utf8.h): a file name may hold a line break.
//
// A load ends between two images, kInterrupted naming the signal, once the function given to
// SetLoadStop (data/dataset.h) reports a stop signal: the master's (master/run/signals.h), so
// that a stop signal ends train's start within one image's decode, not after every image.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "shmtrain/status.h"

namespace shmtrain::data {

// The listing of an image folder, before any image is decoded.
struct ImageFolderFiles {
  std::vector<std::string> classes;  // the class folders' names, sorted
  std::vector<std::string> paths;    // the images, in row order (root joined with the rest)
  std::vector<int> labels;           // each image's class (index into classes)
  int64_t skipped = 0;               // files that are not images by their names
  std::string first_skipped;         // the first of them, for the warning
};

// Whether `path` is a directory (after symbolic links): an image folder by its kind.
bool IsImageFolder(const std::string& path);

// Lists root's classes and images in row order. flat_ok (predict): a root without class
// folders (a folder of images) lists its own image files, with no classes; a root that holds
// both images and folders is refused, naming the images a folder of class folders would leave
// out (ImageFolder, and train and eval, leave files at the root out).
Status ListImageFolder(const std::string& root, bool flat_ok, ImageFolderFiles* out);

// The shape of one sample (the first image's header, c x h x w), without decoding; flat_ok as
// for ListImageFolder.
Status ImageFolderShape(const std::string& root, bool flat_ok, Shape* out);

// The warning a load that left files out deserves ("" when it left none out): how many, and
// the first, of the files in `src` that are not images by their names.
std::string SkippedFilesWarning(const Dataset& d, const std::string& src);

// Loads the image folder `root` into *out: rows as above, targets the class indices (through
// opts.classes when given: a class folder not in it is refused), out->classes the classes,
// out->row_names the images' paths. opts.check_image gets the image shape and opts.check_size
// the rows and features before a row is stored. opts.no_labels (predict) also takes a folder of
// images without class folders.
Status LoadImageFolder(const std::string& root, const LoadOptions& opts, Dataset* out);

}  // namespace shmtrain::data
