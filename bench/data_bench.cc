// Loading a CSV against reading its bytes, and the loader's peak memory, in one run.
//
// Writes Fashion-MNIST's training set (Debian's dataset-fashion-mnist: 60000 images of 28x28
// bytes) as the Kaggle CSV does: a header "label,pixel1,...,pixel784", then one row per image,
// its label first. Then, for N interleaved runs:
//   (a) reads the file's bytes with read() into a buffer (from the page cache: a warm-up read
//       comes first);
//   (b) loads it with data::LoadFile as `shmtrain train --label-col 0` does (classification,
//       with a check_size callback), in a forked child that reports its time and its peak
//       memory: the growth of VmHWM over the RSS it had before the load (the fork's shared
//       pages are in both, so they cancel).
// Prints the medians: read MB/s, load MB/s, the load / read time ratio against the ratio the
// loader had before it was made faster, and the peak memory as a multiple of the data's
// float32 size (rows * features * 4 + rows * 4).
// Usage: data_bench [runs (default 5)] [dataset folder (default /usr/share/datasets/fashion-mnist)]
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "data/dataset.h"

namespace {

using shmtrain::bench::Median;
using Clock = std::chrono::steady_clock;

// The load / read time ratio of the loader before it was made faster, measured with this
// benchmark on this machine (median of 5 runs, load average 0.5): 1202 ms against 66.4 ms.
constexpr double kBaselineRatio = 17.5;
constexpr const char* kBaselineCommit = "7007fc5";

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "data_bench: %s\n", what.c_str());
  std::exit(1);
}

uint32_t BigEndian32(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

// An IDX file (gzip-compressed): big-endian u32 magic 0x000008NN (NN = the number of
// dimensions, the element type u8), the dimensions as u32, then the bytes.
std::vector<unsigned char> ReadIdx(const std::string& path, uint32_t magic,
                                   std::vector<uint32_t>* dims) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) Fail("cannot open " + path + " (apt-get install dataset-fashion-mnist)");
  auto read = [&](void* p, unsigned n) {
    if (gzread(f, p, n) != static_cast<int>(n)) Fail(path + ": truncated");
  };
  unsigned char head[4];
  read(head, 4);
  if (BigEndian32(head) != magic) Fail(path + ": not an IDX file of the expected kind");
  size_t count = 1;
  for (uint32_t d = 0; d < (magic & 0xff); ++d) {
    read(head, 4);
    dims->push_back(BigEndian32(head));
    count *= dims->back();
  }
  std::vector<unsigned char> bytes(count);
  for (size_t at = 0; at < count;) {
    const unsigned n = static_cast<unsigned>(std::min<size_t>(count - at, 1 << 30));
    read(bytes.data() + at, n);
    at += n;
  }
  gzclose(f);
  return bytes;
}

struct Images {
  int64_t rows = 0;
  int pixels = 0;
  std::vector<unsigned char> labels, pixels_bytes;
};

Images ReadFashionMnist(const std::string& dir) {
  Images im;
  std::vector<uint32_t> ld, id;
  im.labels = ReadIdx(dir + "/train-labels-idx1-ubyte.gz", 0x00000801, &ld);
  im.pixels_bytes = ReadIdx(dir + "/train-images-idx3-ubyte.gz", 0x00000803, &id);
  if (ld.size() != 1 || id.size() != 3 || ld[0] != id[0]) Fail("labels and images disagree");
  im.rows = id[0];
  im.pixels = static_cast<int>(id[1] * id[2]);
  return im;
}

// The Kaggle layout: "label,pixel1,...,pixel784", then "label,p1,...,p784" per image.
void WriteCsv(const Images& im, const std::string& path) {
  std::string text = "label";
  for (int j = 1; j <= im.pixels; ++j) text += ",pixel" + std::to_string(j);
  text += '\n';
  for (int64_t i = 0; i < im.rows; ++i) {
    text += std::to_string(im.labels[i]);
    const unsigned char* px = &im.pixels_bytes[static_cast<size_t>(i) * im.pixels];
    for (int j = 0; j < im.pixels; ++j) {
      text += ',';
      text += std::to_string(px[j]);
    }
    text += '\n';
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(text.data(), 1, text.size(), f) != text.size() ||
      std::fclose(f) != 0) {
    Fail("cannot write " + path);
  }
}

// Seconds to read the whole file into a fresh buffer with read().
double ReadSeconds(const std::string& path, size_t size) {
  const auto t0 = Clock::now();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Fail("cannot open " + path);
  char* buf = static_cast<char*>(std::malloc(size + 1));
  size_t len = 0;
  for (;;) {
    const ssize_t n = read(fd, buf + len, size + 1 - len);
    if (n <= 0) break;
    len += static_cast<size_t>(n);
  }
  close(fd);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::free(buf);
  if (len != size) Fail("short read of " + path);
  return s;
}

// A field "<key>: <n> kB" of /proc/self/status, in bytes.
int64_t StatusBytes(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long long kib = -1;
  const size_t klen = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, klen) == 0 && line[klen] == ':') {
      kib = std::atoll(line + klen + 1);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

struct LoadResult {
  double seconds = 0;
  int64_t peak_bytes = 0;
  int ok = 0;  // 1: loaded, and every value and label is the image's
};

// The child's side: resets the peak RSS to the current RSS (clear_refs 5) so that the peak
// after the load is the load's alone, loads, and checks the result against the images.
LoadResult LoadHere(const std::string& path, const Images& im) {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
  const int64_t before = std::max(StatusBytes("VmRSS"), StatusBytes("VmHWM"));
  shmtrain::data::LoadOptions lo;
  lo.file.label_col = 0;
  lo.task = shmtrain::Task::kClassification;
  lo.check_size = [](int64_t, int) { return shmtrain::Status::Ok(); };  // as the master does
  shmtrain::data::Dataset ds;
  LoadResult r;
  const auto t0 = Clock::now();
  const shmtrain::Status s = shmtrain::data::LoadFile(path, lo, &ds);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.peak_bytes = StatusBytes("VmHWM") - before;
  if (!s.ok()) {
    std::fprintf(stderr, "data_bench: %s\n", s.message().c_str());
    return r;
  }
  bool same = ds.rows == im.rows && ds.features == im.pixels && ds.classes.size() == 10;
  for (size_t i = 0; same && i < im.pixels_bytes.size(); ++i) {
    same = ds.x[i] == static_cast<float>(im.pixels_bytes[i]);
  }
  // Numeric labels 0..9 map to classes 0..9.
  for (int64_t i = 0; same && i < im.rows; ++i) same = ds.y[i] == im.labels[i];
  r.ok = same ? 1 : 0;
  return r;
}

LoadResult LoadInChild(const std::string& path, const Images& im) {
  int fds[2];
  if (pipe(fds) != 0) Fail("pipe");
  const pid_t pid = fork();
  if (pid < 0) Fail("fork");
  if (pid == 0) {
    close(fds[0]);
    const LoadResult r = LoadHere(path, im);
    const ssize_t n = write(fds[1], &r, sizeof r);
    _exit(n == sizeof r ? 0 : 1);
  }
  close(fds[1]);
  LoadResult r;
  const ssize_t n = read(fds[0], &r, sizeof r);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n != sizeof r || !WIFEXITED(status) || WEXITSTATUS(status) != 0) Fail("the load child failed");
  return r;
}

const char* Verdict(bool met) {
  return met ? "met" : "MISSED";
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const std::string dir = argc > 2 ? argv[2] : "/usr/share/datasets/fashion-mnist";
  const Images im = ReadFashionMnist(dir);
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/data_bench.XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) Fail("mkstemp");
  close(fd);
  WriteCsv(im, path);
  struct stat st {};
  stat(path.c_str(), &st);
  const size_t size = static_cast<size_t>(st.st_size);
  const double mb = static_cast<double>(size) / 1e6;
  const double f32 = static_cast<double>(im.rows) * (im.pixels + 1) * 4;
  std::printf("Fashion-MNIST train as CSV: %lld rows x (label + %d pixels), %.1f MB; float32 "
              "size %.1f MB; %d interleaved runs\n",
              static_cast<long long>(im.rows), im.pixels, mb, f32 / 1e6, runs);

  ReadSeconds(path, size);  // warm-up: the file is in the page cache from here on
  std::vector<double> read_s, load_s, peak, ratio;
  bool all_ok = true;
  for (int i = 0; i < runs; ++i) {
    read_s.push_back(ReadSeconds(path, size));
    const LoadResult r = LoadInChild(path, im);
    load_s.push_back(r.seconds);
    peak.push_back(static_cast<double>(r.peak_bytes));
    ratio.push_back(r.seconds / read_s.back());
    all_ok = all_ok && r.ok;
  }
  unlink(path.c_str());

  const double read = Median(read_s), load = Median(load_s), rt = Median(ratio);
  std::printf("  read (page cache): median %.1f ms = %.0f MB/s\n", read * 1e3, mb / read);
  std::printf("  load (LoadFile, classification, label column 0): median %.0f ms = %.1f MB/s; "
              "%s\n", load * 1e3, mb / load,
              all_ok ? "every value and label as in the images" : "RESULT DIFFERS from the images");
  if (kBaselineRatio > 0) {
    const double speedup = kBaselineRatio / rt;
    std::printf("  load / read time: %.1f (median of the runs' ratios); baseline ratio %.1f "
                "(measured at commit %s): load rate %.2fx the baseline's (target >= 3: %s)\n",
                rt, kBaselineRatio, kBaselineCommit, speedup, Verdict(speedup >= 3));
  } else {
    std::printf("  load / read time: %.1f (median of the runs' ratios)\n", rt);
  }
  const double p = Median(peak);
  std::printf("  peak memory while loading: median %.1f MB = %.2f x the float32 size (target "
              "<= 1.5: %s)\n", p / 1e6, p / f32, Verdict(p / f32 <= 1.5));
  return all_ok ? 0 : 1;
}
