#include "data/text_cells.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>

#include "core/utf8.h"

namespace shmtrain::data::text {

std::string At(const std::string& path) {
  return path + ": ";
}
std::string At(const std::string& path, int64_t line) {
  return path + ":" + std::to_string(line) + ": ";
}
std::string At(const std::string& path, int64_t line, int64_t col) {
  return path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": ";
}

std::string Quote(std::string_view cell) {
  constexpr size_t kMaxShown = 40;
  // Cut at a character's start (back over up to 3 continuation bytes), so that the cut leaves
  // no half of one to be shown as bytes.
  size_t cut = std::min(cell.size(), kMaxShown);
  for (int k = 0;
       k < 3 && cut < cell.size() && (static_cast<unsigned char>(cell[cut]) & 0xC0) == 0x80; ++k) {
    --cut;
  }
  return "'" + Printable(cell.substr(0, cut)) + (cut < cell.size() ? "...'" : "'");
}

bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), IsSpace);
}

namespace {

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

// The label of a regression row: a number.
Status RegressionTarget(const std::string& path, const PendingLabel& l, char decimal, float* out) {
  double v = 0;
  if (Cell r = ParseNumber(l.text, decimal, &v); r != Cell::kOk) {
    std::string what = CellError(r, l.text);
    if (r == Cell::kNotNumber)
      what += " (regression needs numeric targets; use --task classification for class labels)";
    return Status::Data((l.col > 0 ? At(path, l.line, l.col) : At(path, l.line)) + what);
  }
  *out = static_cast<float>(v);
  return Status::Ok();
}

std::string LabelAt(const std::string& path, int64_t line, int64_t col) {
  return col > 0 ? At(path, line, col) : At(path, line);
}

}  // namespace

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

Cell ParseNumber(std::string_view cell, char decimal, double* out) {
  if (decimal != ',' || cell.find_first_of(".,") == std::string_view::npos)
    return ParseCell(cell, out);
  if (cell.find('.') != std::string_view::npos) return Cell::kNotNumber;
  std::string dot(cell);
  std::replace(dot.begin(), dot.end(), ',', '.');
  return ParseCell(dot, out);
}

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

int32_t LabelBook::Intern(std::string_view text, int64_t line, int64_t col) {
  if (const auto it = index_.find(text); it != index_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(texts_.size());
  index_.emplace(texts_.emplace_back(text), id);
  line_.push_back(line);
  col_.push_back(col);
  return id;
}

void LabelBook::Add(const PendingLabel& l) {
  rows_.push_back(Intern(l.text, l.line, l.col));
}

void LabelBook::Append(const LabelBook& later) {
  std::vector<int32_t> to(later.texts_.size());
  for (size_t i = 0; i < to.size(); ++i)
    to[i] = Intern(later.texts_[i], later.line_[i], later.col_[i]);
  rows_.reserve(rows_.size() + later.rows_.size());
  for (int32_t id : later.rows_) rows_.push_back(to[id]);
}

void LabelBook::Clear() {
  index_.clear();
  texts_.clear();
  line_.clear();
  col_.clear();
  rows_.clear();
}

Status LabelBook::MapClasses(const std::string& path, const LoadOptions& opts, Dataset* ds) const {
  // Texts are in the order of their first rows: the first refused is the first row's.
  for (size_t t = 0; t < texts_.size(); ++t) {
    if (const Status s = ClassMap::CheckName(texts_[t]); !s.ok()) {
      return Status::Data(LabelAt(path, line_[t], col_[t]) + "label " + Quote(texts_[t]) + " " +
                          s.message() + " (class names must be printable text)");
    }
  }
  ClassMap built;
  if (opts.classes == nullptr) {
    // The map of the distinct texts is the map of all the labels.
    built = ClassMap::Build(std::vector<std::string_view>(texts_.begin(), texts_.end()));
    if (built.size() < 2) {
      return Status::Data(At(path) + "classification needs at least 2 classes, the labels have " +
                          std::to_string(built.size()) + " (" +
                          (built.size() == 1 ? "'" + built.names[0] + "'" : "none") + ")");
    }
  }
  const ClassMap& map = opts.classes ? *opts.classes : built;
  // Texts are in the order of their first rows, so the first one missing from the map is the
  // one of the first row whose label is missing.
  std::vector<float> klass(texts_.size());
  for (size_t t = 0; t < texts_.size(); ++t) {
    const int k = map.Find(texts_[t]);
    if (k < 0) {
      return Status::Data(LabelAt(path, line_[t], col_[t]) + "label " + Quote(texts_[t]) +
                          " is not one of the model's " + std::to_string(map.size()) +
                          " classes (" + map.List() + ")");
    }
    klass[t] = static_cast<float>(k);
  }
  ds->y.resize(rows_.size());
  for (size_t i = 0; i < rows_.size(); ++i) ds->y[i] = klass[rows_[i]];
  ds->classes = map;
  return Status::Ok();
}

Status TakeLabel(const std::string& path, const PendingLabel& l, bool classify, LabelBook* labels,
                 std::vector<float>* y, char decimal) {
  if (!classify) {
    float v = 0;
    if (Status s = RegressionTarget(path, l, decimal, &v); !s.ok()) return s;
    y->push_back(v);
    return Status::Ok();
  }
  if (l.text.empty()) return Status::Data(LabelAt(path, l.line, l.col) + "label cell is empty");
  // NaN or an infinity is a missing or broken value, not a class, as in regression. Only
  // text starting with n or i (after a sign) can be one, so the common label is not parsed.
  std::string_view t = l.text;
  if (t[0] == '+' || t[0] == '-') t.remove_prefix(1);
  if (!t.empty() && (t[0] == 'n' || t[0] == 'N' || t[0] == 'i' || t[0] == 'I')) {
    double v = 0;
    if (ParseCell(l.text, &v) == Cell::kNotFinite) {
      return Status::Data(LabelAt(path, l.line, l.col) + CellError(Cell::kNotFinite, l.text));
    }
  }
  labels->Add(l);
  return Status::Ok();
}

}  // namespace shmtrain::data::text
