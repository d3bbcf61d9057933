// Lookups in the registries of units (optimizers, schedules, layer types): each registry is a
// vector of pointers to definitions with a `name` (and, when stored, an `id`), in --help order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shmtrain::nn {

template <class Def>
const Def* FindByName(const std::vector<const Def*>& all, std::string_view name) {
  for (const Def* d : all) {
    if (name == d->name) return d;
  }
  return nullptr;
}

template <class Def>
const Def* FindById(const std::vector<const Def*>& all, uint32_t id) {
  for (const Def* d : all) {
    if (d->id == id) return d;
  }
  return nullptr;
}

// "sgd, adam, adamw" (sep ", ").
template <class Def>
std::string NamesOf(const std::vector<const Def*>& all, const char* sep) {
  std::string s;
  for (const Def* d : all) s += (s.empty() ? "" : sep) + std::string(d->name);
  return s;
}

}  // namespace shmtrain::nn
