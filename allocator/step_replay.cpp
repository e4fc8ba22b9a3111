#include "step_replay.hpp"

#include <algorithm>

namespace strata {

namespace {

constexpr std::uint64_t multiplier = 0x9e3779b97f4a7c15ULL;
constexpr std::size_t table_size = 4096;  // sampled windows remembered

// A size spread over all 64 bits (splitmix64's finalizer).
constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr std::uint64_t power(std::uint64_t base, std::size_t exponent) noexcept {
  std::uint64_t r = 1;
  for (std::size_t i = 0; i < exponent; ++i) r *= base;
  return r;
}

}  // namespace

bool step_replay::resized(std::size_t r, std::size_t size) const noexcept {
  if (!held(r)) return false;
  const std::size_t was = at(r).size;
  return was >= resized_min && size >= resized_min && was <= resized_ratio * size &&
         size <= resized_ratio * was;
}

std::size_t step_replay::counterpart(std::size_t size) const noexcept {
  // Lost (several misses in a row): only a window's match realigns.
  if (cursor_ == none || misses_ >= resync_after) return none;
  // A step whose shapes changed: the request in this one's place.
  if (misses_ == 0 && resizing_ > 0 && resized(cursor_, size)) return cursor_;
  if (misses_ >= resized_after && misses_resized_ && resized(cursor_ + misses_, size)) {
    return cursor_ + misses_;
  }
  for (std::size_t r = cursor_; r < cursor_ + slack && held(r); ++r) {
    if (at(r).size == size) return r;
  }
  return none;
}

std::size_t step_replay::previous(std::size_t r) const noexcept {
  if (!held(r)) return none;
  const std::size_t p = at(r).counterpart;
  return p != none && held(p) ? p : none;
}

bool step_replay::windows_match(std::size_t pos) const noexcept {
  for (std::size_t k = 1; k <= window; ++k) {
    if (at(n_ - k).size != at(pos - k).size) return false;
  }
  return true;
}

void step_replay::reserve() {
  if (history_.capacity() < capacity) history_.reserve(capacity);
  if (table_.empty()) table_.resize(table_size);
}

void step_replay::resync() noexcept {
  // The nearest position around the cursor after a window like the last.
  for (std::size_t d = 0; d <= resync_reach; ++d) {
    // The cursor has stayed put through the misses; the requests since
    // moved on.
    const std::size_t at_now = cursor_ + misses_;
    for (const std::size_t pos : {at_now + d, at_now - d}) {
      if (pos >= n_ || pos < window || n_ - pos < min_period || !held(pos - window)) continue;
      if (windows_match(pos)) {
        cursor_ = pos;
        misses_ = 0;
        misses_resized_ = true;
        return;
      }
    }
  }
}

void step_replay::seed() noexcept {
  seen& s = table_[(hash_ >> 8) % table_size];
  // The request after the earlier window is the one the next repeats.
  if (s.hash == hash_ && n_ - s.pos >= min_period && n_ - s.pos + window < capacity &&
      (cursor_ == none || misses_ > 0) && windows_match(s.pos)) {
    cursor_ = s.pos;
    misses_ = 0;
    misses_resized_ = true;
  }
  s = {hash_, n_};
}

void step_replay::record(std::size_t size, std::uintptr_t addr, std::size_t counterpart) noexcept {
  static constexpr std::uint64_t leaving = power(multiplier, window);
  const entry e{size, addr, counterpart, repairing_};
  repairing_ = false;
  // Asked before this one is recorded (it may take the oldest's slot): did
  // it repeat a request of another size; on a miss, is the request in its
  // place (a step ago) this one at another size?
  const bool resized_match = counterpart != none && at(counterpart).size != size;
  const bool in_place_resized = cursor_ != none && resized(cursor_ + misses_, size);
  if (history_.size() < capacity) {
    history_.push_back(e);  // within the capacity reserve() made
  } else {
    history_[n_ % capacity] = e;
  }
  hash_ = hash_ * multiplier + mix(size);
  if (n_ >= window) hash_ -= leaving * mix(at(n_ - window).size);
  ++n_;
  if (counterpart != none) {
    if (resized_match) {
      resizing_ = resized_run;
    } else if (resizing_ > 0) {
      --resizing_;
    }
    cursor_ = counterpart + 1;
    misses_ = 0;
    misses_resized_ = true;
  } else if (cursor_ != none) {
    misses_resized_ = misses_resized_ && in_place_resized;
    if (++misses_ >= resync_after && misses_ % resync_every == 0) resync();
  }
  if (n_ >= window && (hash_ & 7) == 0) seed();
}

}  // namespace strata
