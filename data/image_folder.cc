#include "data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/utf8.h"
#include "data/format.h"
#include "data/image.h"

namespace shmtrain::data {
namespace {

namespace fs = std::filesystem;

enum class NameKind { kImage, kUnreadImage, kOther };

// A path in a message: a file name may hold any byte, a line break among them.
std::string Shown(const std::string& path) {
  return Printable(path);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

// By the name's extension, as ImageFolder's IMG_EXTENSIONS (any case).
NameKind KindOfName(const std::string& name) {
  const std::string ext = Lower(fs::path(name).extension().string());
  if (ext == ".jpg" || ext == ".jpeg" || ext == ".png") return NameKind::kImage;
  for (const char* e : {".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp"}) {
    if (ext == e) return NameKind::kUnreadImage;
  }
  return NameKind::kOther;
}

struct DirId {
  dev_t dev;
  ino_t ino;
  friend bool operator==(const DirId&, const DirId&) = default;
};

Status StatDir(const std::string& path, DirId* id) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return Status::Data(Shown(path) + ": cannot read it: " + std::strerror(errno));
  }
  *id = {st.st_dev, st.st_ino};
  return Status::Ok();
}

// One folder's entries, each kind sorted (symbolic links followed): sub-folders, special files
// (FIFOs, sockets, devices: never opened), and the other names (regular files, and names
// whose target cannot be found, which fail when they are read, naming why). The types come
// from the listing itself where the file system gives them: no call per file.
struct Entries {
  std::vector<std::string> dirs, files, special;
};

Status ReadEntries(const std::string& dir, Entries* out) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return Status::Data(Shown(dir) + ": cannot list the folder: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return Status::Data(Shown(dir) + ": cannot list the folder: " + ec.message());
    const std::string name = it->path().filename().string();
    std::error_code dec;
    if (it->is_directory(dec)) {
      out->dirs.push_back(name);
    } else if (it->is_regular_file(dec) || !it->is_other(dec)) {
      out->files.push_back(name);
    } else {
      out->special.push_back(name);
    }
  }
  for (auto* v : {&out->dirs, &out->files, &out->special}) std::sort(v->begin(), v->end());
  return Status::Ok();
}

// The folders below `dir` (itself first), as os.walk(dir, followlinks=True) reaches them,
// sorted by path as ImageFolder sorts them. A folder reached again below itself through a
// symbolic link is a loop: refused (os.walk would go round it for ever).
struct Above {
  DirId id;
  std::string path;
};

Status WalkFolders(const std::string& dir, std::vector<Above>* above,
                   std::vector<std::string>* out) {
  DirId id{};
  if (Status s = StatDir(dir, &id); !s.ok()) return s;
  for (const Above& a : *above) {
    if (a.id == id) {
      return Status::Data(Shown(dir) + ": this folder is " + Shown(a.path) +
                          " again, reached through a symbolic link (a loop); remove the link");
    }
  }
  out->push_back(dir);
  Entries e;
  if (Status s = ReadEntries(dir, &e); !s.ok()) return s;
  above->push_back({id, dir});
  for (const std::string& d : e.dirs) {
    if (Status s = WalkFolders(dir + "/" + d, above, out); !s.ok()) return s;
  }
  above->pop_back();
  return Status::Ok();
}

// One folder's files into the class's rows: images by name; special files named as images are
// refused without being opened (a FIFO would wait for a writer, and skipping it would shift
// the rows); other names are counted as left out.
Status ListFiles(const std::string& folder, const Entries& e, int label, ImageFolderFiles* out) {
  for (const std::string& name : e.special) {
    const std::string path = folder + "/" + name;
    if (KindOfName(name) != NameKind::kOther) {
      if (Status s = CheckImageFile(path); !s.ok()) return s;
      return Status::Data(Shown(path) + ": it was not a regular file when the folder was listed "
                                        "and is one now: load the folder again");
    }
    if (out->skipped++ == 0) out->first_skipped = path;
  }
  for (const std::string& name : e.files) {
    const std::string path = folder + "/" + name;
    switch (KindOfName(name)) {
      case NameKind::kImage:
        out->paths.push_back(path);
        out->labels.push_back(label);
        break;
      case NameKind::kUnreadImage:
        return Status::Data(Shown(path) + ": only JPEG (.jpg, .jpeg) and PNG (.png) images are "
                                          "read; convert it, or move it out of the folder");
      case NameKind::kOther:
        if (out->skipped++ == 0) out->first_skipped = path;
        break;
    }
  }
  return Status::Ok();
}

// A class's images in ImageFolder's order: its folders sorted by path, each one's files by name.
Status ListClass(const std::string& dir, int label, ImageFolderFiles* out) {
  std::vector<std::string> folders;
  std::vector<Above> above;
  if (Status s = WalkFolders(dir, &above, &folders); !s.ok()) return s;
  std::sort(folders.begin(), folders.end());
  const size_t before = out->paths.size();
  for (const std::string& f : folders) {
    if (const int sig = LoadStopSignal(); sig != 0) {
      return StoppedLoading(sig, "listing " + Shown(f));
    }
    Entries e;
    if (Status s = ReadEntries(f, &e); !s.ok()) return s;
    if (Status s = ListFiles(f, e, label, out); !s.ok()) return s;
  }
  if (out->paths.size() == before && label >= 0) {
    return Status::Data(Shown(dir) + ": the class folder holds no image (.jpg, .jpeg or .png)");
  }
  return Status::Ok();
}

// The row of one decoded image: floats 0..255, channels first.
void ToRow(const Image& img, float* row) {
  const int64_t c = img.header.channels, hw = int64_t{img.header.width} * img.header.height;
  for (int64_t p = 0; p < hw; ++p) {
    for (int64_t k = 0; k < c; ++k) row[k * hw + p] = img.pixels[static_cast<size_t>(p * c + k)];
  }
}

std::string ShapeText(const ImageHeader& h) {
  return std::to_string(h.width) + "x" + std::to_string(h.height) +
         (h.channels == 1 ? " grey" : " colour");
}

// Decodes every image into its row, in `threads` threads taking the next file in turn. The
// first failure in row order is the one reported: a thread does not start files past it. A
// stop signal ends every thread before its next file.
class RowDecoder {
 public:
  RowDecoder(const std::vector<std::string>& paths, const ImageHeader& first,
             const ImageLimits& limits, int features, std::vector<float>* x)
      : paths_(paths), first_(first), limits_(limits), features_(features), x_(x),
        n_(static_cast<int>(paths.size())), failed_at_(n_), failures_(paths.size()) {}

  Status Run(int threads, const std::string& root) {
    if (threads <= 0) {
      threads = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, 8u));
    }
    std::vector<std::thread> pool;
    for (int t = 1; t < threads && t < n_; ++t) pool.emplace_back([this] { Work(); });
    Work();
    for (std::thread& t : pool) t.join();
    if (const int sig = stopped_.load(); sig != 0) {
      return StoppedLoading(sig, "loading the images of " + Shown(root) + " (" +
                                     std::to_string(decoded_.load()) + " of " +
                                     std::to_string(n_) + " decoded)");
    }
    if (failed_at_.load() < n_) return std::move(failures_[static_cast<size_t>(failed_at_.load())]);
    return Status::Ok();
  }

 private:
  void Work() {
    Image img;
    for (int i; (i = next_.fetch_add(1)) < n_ && i < failed_at_.load();) {
      if (const int sig = LoadStopSignal(); sig != 0) {
        stopped_.store(sig);
        return;
      }
      const std::string& path = paths_[static_cast<size_t>(i)];
      Status s = DecodeImage(path, limits_, &img);
      if (s.ok() && (img.header.width != first_.width || img.header.height != first_.height ||
                     img.header.channels != first_.channels)) {
        s = Status::Data(Shown(path) + ": " + ShapeText(img.header) +
                         ", but the data set's images are " + ShapeText(first_) + " (from " +
                         Shown(paths_[0]) + "): every image must have the same size and "
                                            "channels (images are not resized)");
      }
      if (!s.ok()) {
        failures_[static_cast<size_t>(i)] = std::move(s);
        int seen = failed_at_.load();
        while (i < seen && !failed_at_.compare_exchange_weak(seen, i)) {
        }
        continue;
      }
      ToRow(img, x_->data() + static_cast<int64_t>(i) * features_);
      decoded_.fetch_add(1);
    }
  }

  const std::vector<std::string>& paths_;
  const ImageHeader first_;
  const ImageLimits limits_;
  const int features_;
  std::vector<float>* x_;
  const int n_;
  std::atomic<int> next_{0}, failed_at_, stopped_{0}, decoded_{0};
  std::vector<Status> failures_;
};

// The training's classes are the model's outputs: each class folder must be one of them.
Status MapLabels(const ImageFolderFiles& files, const ClassMap& to, const std::string& root,
                 std::vector<int>* index) {
  for (const std::string& name : files.classes) {
    const int k = to.Find(name);
    if (k < 0) {
      return Status::Data(Shown(root + "/" + name) + ": class '" + Shown(name) +
                          "' is not one of the model's classes (" + to.List() + ")");
    }
    index->push_back(k);
  }
  return Status::Ok();
}

// Predict's folder is one of images or one of class folders: the rows of a folder of class
// folders are their images, and images beside them would not be predicted, silently. Such a
// folder is refused, naming the images it would leave out and a folder beside them.
Status RefuseMixedLayout(const std::string& root, const Entries& top) {
  int64_t images = 0;
  std::string first;
  for (const auto* names : {&top.files, &top.special}) {
    for (const std::string& name : *names) {
      if (KindOfName(name) == NameKind::kOther) continue;
      if (images++ == 0 || name < first) first = name;
    }
  }
  if (images == 0) return Status::Ok();
  return Status::Data(
      Shown(root) + ": holds both images (" + std::to_string(images) + ", the first " +
      Shown(root + "/" + first) + ") and folders (the first " + Shown(root + "/" + top.dirs[0]) +
      "): read as a folder of class folders, its images at the top would not be predicted; "
      "predict reads a folder of images or a folder of class folders: move the images into a "
      "folder, or the folders out");
}

}  // namespace

std::string SkippedFilesWarning(const Dataset& d, const std::string& src) {
  if (d.skipped_files == 0) return "";
  return "warning: " + Shown(src) + ": " + std::to_string(d.skipped_files) +
         (d.skipped_files == 1 ? " file is" : " files are") +
         " not an image by its name (.jpg, .jpeg, .png) and left out, as torchvision's "
         "ImageFolder leaves them (the first: " + Shown(d.first_skipped) + ")";
}

bool IsImageFolder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

Status ListImageFolder(const std::string& root, bool flat_ok, ImageFolderFiles* out) {
  *out = {};
  Entries top;
  if (Status s = ReadEntries(root, &top); !s.ok()) return s;
  for (const std::string& d : top.dirs) {
    if (const Status s = ClassMap::CheckName(d); !s.ok()) {
      return Status::Data(Shown(root + "/" + d) + ": the class folder's name " + s.message());
    }
  }
  if (top.dirs.empty()) {
    if (!flat_ok) {
      return Status::Data(Shown(root) + ": no class folder in it (an image folder holds one "
                                        "folder per class: " + Shown(root) +
                          "/<class>/<image>.jpg)");
    }
    if (Status s = ListClass(root, -1, out); !s.ok()) return s;
    if (out->paths.empty()) return Status::Data(Shown(root) + ": the folder holds no image");
    return Status::Ok();
  }
  if (flat_ok) {
    if (Status s = RefuseMixedLayout(root, top); !s.ok()) return s;
  }
  out->classes = top.dirs;
  for (size_t k = 0; k < top.dirs.size(); ++k) {
    if (Status s = ListClass(root + "/" + top.dirs[k], static_cast<int>(k), out); !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

Status ImageFolderShape(const std::string& root, bool flat_ok, Shape* out) {
  ImageFolderFiles files;
  if (Status s = ListImageFolder(root, flat_ok, &files); !s.ok()) return s;
  ImageHeader h;
  if (Status s = ReadImageHeader(files.paths[0], ImageLimits{}, &h); !s.ok()) return s;
  *out = Shape{h.channels, h.height, h.width};
  return Status::Ok();
}

Status LoadImageFolder(const std::string& root, const LoadOptions& opts, Dataset* out) {
  ImageFolderFiles files;
  if (Status s = ListImageFolder(root, opts.no_labels, &files); !s.ok()) return s;
  if (!opts.no_labels && opts.task != Task::kClassification) {
    return Status::Usage(Shown(root) + ": an image folder's labels are its class folders: "
                                       "train it as a classification (--task classification, "
                                       "or --loss xent)");
  }
  const ImageLimits limits;
  ImageHeader first;
  if (Status s = ReadImageHeader(files.paths[0], limits, &first); !s.ok()) return s;
  const Shape shape{first.channels, first.height, first.width};
  if (opts.check_image) {
    if (Status s = opts.check_image(shape); !s.ok()) return s;
  }
  const int64_t rows = static_cast<int64_t>(files.paths.size());
  const int features = static_cast<int>(shape.Size());
  if (opts.check_size) {
    if (Status s = opts.check_size(rows, features); !s.ok()) return s;
  }
  Dataset d;
  d.rows = rows;
  d.features = features;
  d.x.resize(static_cast<size_t>(rows) * static_cast<size_t>(features));
  RowDecoder decoder(files.paths, first, limits, features, &d.x);
  if (Status s = decoder.Run(opts.threads, root); !s.ok()) return s;
  if (!opts.no_labels) {
    std::vector<int> index;
    if (opts.classes != nullptr) {
      if (Status s = MapLabels(files, *opts.classes, root, &index); !s.ok()) return s;
      d.classes = *opts.classes;
    } else {
      for (size_t k = 0; k < files.classes.size(); ++k) index.push_back(static_cast<int>(k));
      d.classes.numeric = false;
      d.classes.names = files.classes;
    }
    d.y.reserve(files.labels.size());
    for (int label : files.labels) d.y.push_back(static_cast<float>(index[label]));
  }
  d.row_names = std::move(files.paths);
  d.skipped_files = files.skipped;
  d.first_skipped = std::move(files.first_skipped);
  *out = std::move(d);
  return Status::Ok();
}

namespace {

Status FolderSampleShape(const std::string& path, const LoadOptions& opts,
                         std::vector<int64_t>* dims) {
  Shape shape;
  if (Status s = ImageFolderShape(path, opts.no_labels, &shape); !s.ok()) return s;
  *dims = {shape.c, shape.h, shape.w};
  return Status::Ok();
}

}  // namespace

// A directory, by what it is; its labels are its class folders.
extern constinit const DataFormatDef kImagesFormat = {
    .name = "images", .noun = "image folders", .what = "is an image folder",
    .labels = "are its class folders", .flags = {}, .by_dir = IsImageFolder,
    .load = LoadImageFolder, .sample_shape = FolderSampleShape};

}  // namespace shmtrain::data
