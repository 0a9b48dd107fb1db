// An intrusive FIFO of small integer ids (pages, blocks) with O(1) push, pop and removal from
// the middle: the free queues of the block pool, ordered by when an id became free.
#pragma once

#include <cstdint>
#include <vector>

namespace optimate::kv {

class IndexQueue {
 public:
  static constexpr int32_t kNone = -1;

  explicit IndexQueue(int64_t capacity = 0) { resize(capacity); }
  void resize(int64_t capacity) { links_.assign(static_cast<size_t>(capacity), {}); }

  bool empty() const { return head_ == kNone; }
  int64_t size() const { return size_; }
  int32_t front() const { return head_; }
  bool contains(int32_t id) const { return links_[id].in; }

  void push_back(int32_t id) {
    Link& l = links_[id];
    l = {tail_, kNone, true};
    if (tail_ != kNone) links_[tail_].next = id; else head_ = id;
    tail_ = id;
    ++size_;
  }
  void push_front(int32_t id) {
    Link& l = links_[id];
    l = {kNone, head_, true};
    if (head_ != kNone) links_[head_].prev = id; else tail_ = id;
    head_ = id;
    ++size_;
  }
  void remove(int32_t id) {
    Link& l = links_[id];
    if (!l.in) return;
    if (l.prev != kNone) links_[l.prev].next = l.next; else head_ = l.next;
    if (l.next != kNone) links_[l.next].prev = l.prev; else tail_ = l.prev;
    l = {};
    --size_;
  }

 private:
  struct Link {
    int32_t prev = kNone;
    int32_t next = kNone;
    bool in = false;
  };
  std::vector<Link> links_;
  int32_t head_ = kNone;
  int32_t tail_ = kNone;
  int64_t size_ = 0;
};

}  // namespace optimate::kv
