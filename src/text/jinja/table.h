// Constant name -> function tables (filters, tests, methods, globals) and the call they receive.
#pragma once
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>

#include "text/jinja/value.h"

namespace nemo::text::jinja {

// A table is a constexpr array sorted by name: lookup is a binary search and the table needs no
// run-time initialisation.
template <class Fn>
struct Named {
  std::string_view name;
  Fn fn;
};

// For a static_assert beside each table: sorted, and no name twice.
template <class Fn, size_t N>
constexpr bool strictly_sorted(const Named<Fn> (&table)[N]) {
  for (size_t k = 1; k < N; ++k)
    if (!(table[k - 1].name < table[k].name)) return false;
  return true;
}

template <class Fn, size_t N>
constexpr const Named<Fn>* find_named(const Named<Fn> (&table)[N], std::string_view name) {
  const Named<Fn>* it =
      std::lower_bound(std::begin(table), std::end(table), name,
                       [](const Named<Fn>& e, std::string_view n) { return e.name < n; });
  return it != std::end(table) && it->name == name ? it : nullptr;
}

// One use of a filter, test or method on `v`: `v | name(args)`, `v is name(args)`,
// `v.name(args)`. `name` is as written: one function may serve several (`d` / `default`).
struct Call {
  const std::string& name;
  const Value& v;
  const Args& args;
  const Site& at;
};

}  // namespace nemo::text::jinja
