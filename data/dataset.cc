#include "data/dataset.h"

#include "nn/rng.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>

namespace shmtrain::data {
namespace {

// Error prefixes: "<path>: ", "<path>:<line>: ", "<path>:<line>:<column>: ".
std::string At(const std::string& path) {
  return path + ": ";
}
std::string At(const std::string& path, int64_t line) {
  return path + ":" + std::to_string(line) + ": ";
}
std::string At(const std::string& path, int64_t line, int64_t col) {
  return path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": ";
}

// A cell as shown in a message: quoted, cut to a readable length, control bytes escaped (a
// binary file fed by mistake must not put raw bytes on the terminal).
std::string Quote(std::string_view cell) {
  constexpr size_t kMaxShown = 40;
  std::string s = "'";
  for (size_t i = 0; i < cell.size() && i < kMaxShown; ++i) {
    unsigned char c = static_cast<unsigned char>(cell[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      s += buf;
    } else {
      s += static_cast<char>(c);
    }
  }
  if (cell.size() > kMaxShown) s += "...";
  s += "'";
  return s;
}

std::string Plural(int64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t';
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), IsSpace);
}

// For a numeral that from_chars reported out of double range: whether it is too small
// (underflow, read as zero) rather than too large. The numeral is valid from_chars syntax,
// [-]digits[.digits][(e|E)[+|-]digits]; out of range means a decimal magnitude beyond about
// +-308, so the sign of (position of the first significant digit + exponent) decides.
bool IsUnderflow(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  // Decimal position of the first nonzero digit relative to the point: the count of
  // significant integer digits, or minus the zeros after the point when there are none.
  int64_t lead = 0;
  bool found = false;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    if (found || s[i] != '0') {
      found = true;
      ++lead;
    }
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
      if (!found) {
        if (s[i] != '0') {
          found = true;
        } else {
          --lead;
        }
      }
    }
  }
  int64_t exp = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool neg = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
      exp = std::min<int64_t>(exp * 10 + (s[i] - '0'), int64_t{1} << 40);  // saturate
    }
    if (neg) exp = -exp;
  }
  return lead + exp < 0;
}

enum class Cell { kOk, kEmpty, kNotNumber, kNotFinite, kTooLarge };

// Parses a trimmed cell strictly: the whole text must be one decimal number (an optional
// leading '+' is allowed; from_chars alone rejects it). Magnitudes below the smallest float
// become zero or subnormal; magnitudes that round to float infinity are kTooLarge.
Cell ParseCell(std::string_view cell, double* out) {
  if (cell.empty()) return Cell::kEmpty;
  std::string_view num = cell;
  if (num.size() >= 2 && num[0] == '+' && ((num[1] >= '0' && num[1] <= '9') || num[1] == '.')) {
    num.remove_prefix(1);
  }
  double v = 0;
  auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (ptr != num.data() + num.size()) return Cell::kNotNumber;
  if (ec == std::errc::result_out_of_range) {
    if (!IsUnderflow(num)) return Cell::kTooLarge;
    v = num[0] == '-' ? -0.0 : 0.0;
  } else if (ec != std::errc()) {
    return Cell::kNotNumber;
  }
  if (!std::isfinite(v)) return Cell::kNotFinite;
  // Round-to-nearest sends |v| >= 2^128 - 2^103 (half an ulp above FLT_MAX) to infinity.
  // Checked before the cast: converting an unrepresentable double to float is undefined.
  static const double kFloatOverflow = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
  if (std::fabs(v) >= kFloatOverflow) return Cell::kTooLarge;
  *out = v;
  return Cell::kOk;
}

// The message for a cell that did not parse (r != kOk).
std::string CellError(Cell r, std::string_view cell) {
  switch (r) {
    case Cell::kEmpty:
      return "cell is empty";
    case Cell::kNotNumber:
      return "cell " + Quote(cell) + " is not a number";
    case Cell::kNotFinite:
      return "value " + Quote(cell) + " is not finite";
    case Cell::kTooLarge:
      return "value " + Quote(cell) + " is too large for a 32-bit float";
    case Cell::kOk:
      break;
  }
  return "internal error";
}

// Reads the whole file into *buf. Errors carry strerror(errno).
Status ReadFile(const std::string& path, std::string* buf) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Data(At(path) + "cannot open file: " + std::strerror(errno));
  struct stat st;
  size_t cap = 1 << 16;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    cap = static_cast<size_t>(st.st_size) + 1;  // +1: EOF is seen without another grow
  }
  buf->clear();
  size_t len = 0;
  for (;;) {
    if (len == buf->size()) buf->resize(std::max(cap, buf->size() * 2));
    ssize_t n = ::read(fd, buf->data() + len, buf->size() - len);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = Status::Data(At(path) + "cannot read file: " + std::strerror(errno));
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  ::close(fd);
  buf->resize(len);
  return Status::Ok();
}

}  // namespace

Status LoadCsv(const std::string& path, const CsvOptions& opts, Dataset* out) {
  // Option errors first: they do not depend on the file.
  if (opts.label_col < -1) {
    return Status::Data(At(path) + "label column " + std::to_string(opts.label_col) +
                        " is invalid (use -1 for the last column)");
  }
  if (opts.classes < 0) {
    return Status::Data(At(path) + "number of classes " + std::to_string(opts.classes) +
                        " is invalid (use 0 for real-valued targets)");
  }

  std::string buf;
  if (Status s = ReadFile(path, &buf); !s.ok()) return s;
  if (buf.empty()) return Status::Data(At(path) + "file is empty");

  std::string_view text(buf);
  // A UTF-8 byte order mark (spreadsheet exports write one) is not part of the first cell.
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);

  Dataset ds;
  int64_t ncols = 0;     // cells per row, fixed by the first non-blank line
  int64_t ref_line = 0;  // that line
  int64_t label = 0;     // label column, 0-based
  bool has_header = false;

  // Bound on the rows, for reserving: no more than the lines.
  const int64_t max_lines = std::count(text.begin(), text.end(), '\n') + 1;

  const char* p = text.data();
  const char* const end = text.data() + text.size();
  int64_t line_no = 0;
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    const char* le = nl ? nl : end;
    std::string_view line(p, le - p);
    p = nl ? nl + 1 : end;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (IsBlank(line)) continue;

    const int64_t cells = std::count(line.begin(), line.end(), ',') + 1;
    if (ncols == 0) {
      // The first non-blank line fixes the shape and decides the header.
      ncols = cells;
      ref_line = line_no;
      if (ncols > INT_MAX) {
        return Status::Data(At(path, line_no) + "row has " + std::to_string(ncols) +
                            " cells, more than the supported " + std::to_string(INT_MAX));
      }
      label = opts.label_col == -1 ? ncols - 1 : opts.label_col;
      if (label >= ncols) {
        return Status::Data(At(path) + "label column " + std::to_string(opts.label_col) +
                            " does not exist (rows have " + Plural(ncols, "column") + ")");
      }
      if (ncols < 2) {
        return Status::Data(At(path) +
                            "rows have 1 column; need at least one feature column besides "
                            "the label");
      }
      ds.features = static_cast<int>(ncols - 1);
      // A row of n cells takes at least 2n - 1 bytes, so this reserves at most about
      // half as many floats as the file has bytes, however many lines are blank.
      const int64_t max_rows =
          std::min<int64_t>(max_lines, static_cast<int64_t>(text.size()) / (2 * ncols - 1) + 1);
      ds.x.reserve(static_cast<size_t>(max_rows) * static_cast<size_t>(ds.features));
      ds.y.reserve(static_cast<size_t>(max_rows));
      switch (opts.header) {
        case HeaderMode::kYes:
          has_header = true;
          break;
        case HeaderMode::kNo:
          has_header = false;
          break;
        case HeaderMode::kAuto: {
          // A header has a cell that is not a number. Empty, NaN and too-large cells do
          // not count: such a first line is data, and its error is reported as such.
          std::string_view rest = line;
          for (int64_t c = 0; c < ncols && !has_header; ++c) {
            size_t comma = rest.find(',');
            double v;
            has_header = ParseCell(Trim(rest.substr(0, comma)), &v) == Cell::kNotNumber;
            rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
          }
          break;
        }
      }
      if (has_header) continue;
    } else if (cells != ncols) {
      return Status::Data(At(path, line_no) + "row has " + Plural(cells, "cell") + ", expected " +
                          std::to_string(ncols) + " (as on line " + std::to_string(ref_line) + ")");
    }

    // A data row with exactly ncols cells.
    const char* c0 = line.data();
    const char* const lend = line.data() + line.size();
    for (int64_t c = 0; c < ncols; ++c) {
      const char* comma = static_cast<const char*>(std::memchr(c0, ',', lend - c0));
      const char* ce = comma ? comma : lend;
      std::string_view cell = Trim(std::string_view(c0, ce - c0));
      c0 = comma ? comma + 1 : lend;
      double v = 0;
      if (Cell r = ParseCell(cell, &v); r != Cell::kOk) {
        return Status::Data(At(path, line_no, c + 1) + CellError(r, cell));
      }
      if (c != label) {
        ds.x.push_back(static_cast<float>(v));
        continue;
      }
      if (opts.classes > 0) {
        if (v != std::floor(v)) {
          return Status::Data(At(path, line_no, c + 1) + "label " + Quote(cell) +
                              " is not an integer class");
        }
        if (v < 0 || v >= opts.classes) {
          // Integral values this small print exactly as integers ("12.0" shows as 12).
          std::string shown =
              std::fabs(v) < 0x1p53 ? std::to_string(static_cast<int64_t>(v)) : std::string(cell);
          return Status::Data(At(path, line_no, c + 1) + "label " + shown +
                              " is out of range for " + std::to_string(opts.classes) +
                              (opts.classes == 1 ? " class" : " classes") + " (0.." +
                              std::to_string(opts.classes - 1) + ")");
        }
      }
      ds.y.push_back(static_cast<float>(v));
    }
    ++ds.rows;
  }

  if (ncols == 0) return Status::Data(At(path) + "file is empty (it has only blank lines)");
  if (ds.rows == 0) return Status::Data(At(path) + "file has a header line but no data rows");
  *out = std::move(ds);
  return Status::Ok();
}

Dataset MakeParabola(int64_t n) {
  Dataset ds;
  ds.features = 1;
  if (n <= 0) return ds;
  ds.rows = n;
  ds.x.resize(n);
  ds.y.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    // In double, so the end points are exactly -2 and 2 and y is x^2 rounded once.
    double x = n == 1 ? 0.0 : -2.0 + 4.0 * static_cast<double>(i) / static_cast<double>(n - 1);
    ds.x[i] = static_cast<float>(x);
    ds.y[i] = static_cast<float>(x * x);
  }
  return ds;
}

Dataset MakeBlobs(int64_t n, int features, int classes, uint64_t seed) {
  nn::Rng rng(nn::MixSeed(seed, 0x424C4F4253ull));  // "BLOBS"
  std::vector<double> centres(static_cast<size_t>(classes) * features);
  for (double& c : centres) c = rng.Normal();
  Dataset d;
  d.rows = n;
  d.features = features;
  d.x.resize(static_cast<size_t>(n * features));
  d.y.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(i % classes);
    for (int j = 0; j < features; ++j) {
      d.x[i * features + j] = static_cast<float>(centres[k * features + j] + 0.5 * rng.Normal());
    }
    d.y[i] = static_cast<float>(k);
  }
  return d;
}

}  // namespace shmtrain::data
