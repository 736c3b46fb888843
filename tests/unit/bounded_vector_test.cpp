// weft/bounded_vector.hpp: element lifetimes, order, bounds, copies and moves.
#include <weft/bounded_vector.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

// Records its id in `log` when destroyed (only while it still owns a value); throws
// from its constructor when asked to.
struct logged {
  std::vector<int>* log;
  int id;
  logged(std::vector<int>& l, int i, bool fail = false) : log(&l), id(i) {
    if (fail) throw std::runtime_error("constructor failed");
  }
  logged(const logged&) = default;
  logged(logged&& o) noexcept : log(std::exchange(o.log, nullptr)), id(o.id) {}
  logged& operator=(const logged&) = delete;
  ~logged() {
    if (log != nullptr) log->push_back(id);
  }
};

// Counts live objects; its copy constructor throws once `copies_left` reaches zero.
struct fragile {
  static inline int live = 0;
  static inline int copies_left = 0;
  fragile() { ++live; }
  fragile(const fragile&) {
    if (copies_left-- <= 0) throw std::runtime_error("copy failed");
    ++live;
  }
  fragile& operator=(const fragile&) = default;
  ~fragile() { --live; }
};

}  // namespace

TEST_CASE("bounded_vector: starts empty, capacity N, stores inline", "[bounded_vector]") {
  weft::bounded_vector<int, 4> v;
  CHECK(v.empty());
  CHECK(v.size() == 0);
  CHECK(v.capacity() == 4);
  CHECK(v.max_size() == 4);
  CHECK(v.begin() == v.end());
  static_assert(sizeof(weft::bounded_vector<int, 4>) <= 4 * sizeof(int) + 2 * sizeof(std::size_t));
  const auto* self = reinterpret_cast<const unsigned char*>(&v);
  const auto* data = reinterpret_cast<const unsigned char*>(v.data());
  CHECK((data >= self && data < self + sizeof v));  // no heap
}

TEST_CASE("bounded_vector: elements in insertion order, accessors", "[bounded_vector]") {
  weft::bounded_vector<std::string, 3> v;
  v.push_back("a");
  const std::string b = "b";
  v.push_back(b);
  CHECK(v.emplace_back(3, 'c') == "ccc");
  REQUIRE(v.size() == 3);
  CHECK(v[0] == "a");
  CHECK(v.at(1) == "b");
  CHECK(v.front() == "a");
  CHECK(v.back() == "ccc");
  CHECK(std::vector<std::string>(v.begin(), v.end()) == std::vector<std::string>{"a", "b", "ccc"});
  const auto& cv = v;
  CHECK(cv[2] == "ccc");
  CHECK(cv.at(0) == "a");
  CHECK(cv.front() == "a");
  CHECK(cv.back() == "ccc");
  CHECK(cv.data() == v.data());
  v.pop_back();
  CHECK(v.size() == 2);
  CHECK(v.back() == "b");

  weft::bounded_vector<std::string, 3> w(v);
  CHECK(v == w);
  w.pop_back();
  CHECK(v != w);  // shorter
  w.emplace_back(1, 'c');
  CHECK(v != w);  // same size, one element differs
}

TEST_CASE("bounded_vector: bad input throws and changes nothing", "[bounded_vector]") {
  weft::bounded_vector<std::unique_ptr<int>, 2> v;
  CHECK_THROWS_AS(v.at(0), std::out_of_range);
  v.push_back(std::make_unique<int>(1));
  v.emplace_back(std::make_unique<int>(2));
  CHECK_THROWS_AS(v.at(2), std::out_of_range);
  CHECK_THROWS_AS(std::as_const(v).at(2), std::out_of_range);
  auto extra = std::make_unique<int>(3);
  CHECK_THROWS_AS(v.push_back(std::move(extra)), std::length_error);
  CHECK(extra != nullptr);  // not moved from
  CHECK(v.size() == 2);
  CHECK(*v[0] == 1);
  CHECK(*v[1] == 2);

  std::vector<int> log;
  {
    weft::bounded_vector<logged, 3> w;
    w.emplace_back(log, 0);
    CHECK_THROWS_AS(w.emplace_back(log, 1, true), std::runtime_error);  // constructor throws
    CHECK(w.size() == 1);
  }
  CHECK(log == std::vector<int>{0});  // the failed element was never counted
}

TEST_CASE("bounded_vector: elements are destroyed last first, once each", "[bounded_vector]") {
  std::vector<int> log;
  {
    weft::bounded_vector<logged, 5> v;
    for (int i = 0; i < 4; ++i) v.emplace_back(log, i);
    v.pop_back();
    CHECK(log == std::vector<int>{3});
  }
  CHECK(log == std::vector<int>{3, 2, 1, 0});
  log.clear();
  weft::bounded_vector<logged, 5> v;
  for (int i = 0; i < 3; ++i) v.emplace_back(log, i);
  v.clear();
  CHECK(v.empty());
  CHECK(log == std::vector<int>{2, 1, 0});
  v.emplace_back(log, 7);  // reusable after clear
  CHECK(v.size() == 1);
}

TEST_CASE("bounded_vector: copies and moves", "[bounded_vector]") {
  SECTION("copy construct and assign") {
    weft::bounded_vector<std::string, 4> a;
    a.push_back("x");
    a.push_back("y");
    weft::bounded_vector<std::string, 4> b(a);
    CHECK(std::vector<std::string>(b.begin(), b.end()) == std::vector<std::string>{"x", "y"});
    weft::bounded_vector<std::string, 4> c;
    c.push_back("old");
    c.push_back("old");
    c.push_back("old");
    c = a;
    CHECK(std::vector<std::string>(c.begin(), c.end()) == std::vector<std::string>{"x", "y"});
    auto& alias = c;
    c = alias;  // self-assignment keeps the elements
    CHECK(c.size() == 2);
    CHECK(a.size() == 2);
  }
  SECTION("move construct and assign: the elements are moved") {
    weft::bounded_vector<std::unique_ptr<int>, 3> a;
    a.push_back(std::make_unique<int>(5));
    a.push_back(std::make_unique<int>(6));
    weft::bounded_vector<std::unique_ptr<int>, 3> b(std::move(a));
    REQUIRE(b.size() == 2);
    CHECK(*b[0] == 5);
    CHECK(*b[1] == 6);
    weft::bounded_vector<std::unique_ptr<int>, 3> c;
    c.push_back(std::make_unique<int>(9));
    c = std::move(b);
    REQUIRE(c.size() == 2);
    CHECK(*c[0] == 5);
    CHECK(*c[1] == 6);
    static_assert(!std::is_copy_constructible_v<weft::bounded_vector<std::unique_ptr<int>, 3>>);
  }
  SECTION("no element is lost or destroyed twice") {
    std::vector<int> log;
    {
      weft::bounded_vector<logged, 3> a;
      a.emplace_back(log, 1);
      a.emplace_back(log, 2);
      weft::bounded_vector<logged, 3> b(std::move(a));
      weft::bounded_vector<logged, 3> c(b);  // copies log to the same ids
      CHECK(log.empty());
    }
    std::sort(log.begin(), log.end());
    CHECK(log == std::vector<int>{1, 1, 2, 2});
  }
}

TEST_CASE("bounded_vector: a copy that throws half-way leaves nothing behind", "[bounded_vector]") {
  using fragile4 = weft::bounded_vector<fragile, 4>;
  {
    fragile4 a;
    for (int i = 0; i < 4; ++i) a.emplace_back();
    REQUIRE(fragile::live == 4);
    fragile::copies_left = 2;  // the third copy throws
    CHECK_THROWS_AS(fragile4(a), std::runtime_error);
    CHECK(fragile::live == 4);  // the two copies made were destroyed
    fragile4 b;
    b.emplace_back();
    fragile::copies_left = 1;
    CHECK_THROWS_AS(b = a, std::runtime_error);
    CHECK(b.size() == 1);  // basic guarantee: the copies made so far
    CHECK(fragile::live == 5);
  }
  CHECK(fragile::live == 0);
}
