// The names of an enum's values: one table per enum, beside the enum, from which come the
// parser (flags, model files, model text), the printer (logs, messages, files) and the lists
// of names in --help and in "unknown value" refusals.
//
// An enum E takes part by a function NameTable(E) in E's namespace (found by argument-dependent
// lookup) that returns its table: every value of E with its name, in the order --help lists
// them. A value's first entry is its name; a later entry of the same value is an alias that
// the parser accepts and nothing prints (libsvm's "svmlight").
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace shmtrain {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

template <class E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) {
  { NameTable(e)[0] } -> std::convertible_to<EnumName<E>>;
};

// The value named `name` (exact, case-sensitive), or nullopt.
template <NamedEnum E>
constexpr std::optional<E> ParseEnum(std::string_view name) {
  for (const EnumName<E>& n : NameTable(E{})) {
    if (name == n.name) return n.value;
  }
  return std::nullopt;
}

// e's name. A value outside the table can only come from a corrupt file or segment: it gets
// "unknown", which no table holds, so a message can still be printed.
template <NamedEnum E>
constexpr const char* ToString(E e) {
  for (const EnumName<E>& n : NameTable(E{})) {
    if (n.value == e) return n.name;
  }
  return "unknown";
}

// The names of E's values without the aliases, in the table's order, joined by `sep`:
// "sync|async" for a flag's argument, "sync, async" for a message.
template <NamedEnum E>
std::string EnumNames(std::string_view sep) {
  std::string s;
  const auto table = NameTable(E{});
  for (size_t i = 0; i < table.size(); ++i) {
    bool alias = false;
    for (size_t j = 0; j < i; ++j) alias = alias || table[j].value == table[i].value;
    if (alias) continue;
    if (!s.empty()) s += sep;
    s += table[i].name;
  }
  return s;
}

}  // namespace shmtrain
