#include "server/client_json.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "server/api_error.h"

namespace optimate::server {

namespace {

// ordered_json's object storage: a vector of members searched on every insert. The builder
// appends to the vector itself.
using Members = std::vector<std::pair<const std::string, Json>>;

// Below this many members a duplicate is found by scanning; from it on, by a hash map.
constexpr size_t kIndexFrom = 16;

class Builder {
 public:
  explicit Builder(ClientJsonError* error) : error_(error) {}

  Json take() { return std::move(root_); }

  bool null() { return place(Json(nullptr)) != nullptr; }
  bool boolean(bool value) { return place(Json(value)) != nullptr; }
  bool number_integer(Json::number_integer_t value) { return place(Json(value)) != nullptr; }
  bool number_unsigned(Json::number_unsigned_t value) { return place(Json(value)) != nullptr; }
  bool number_float(Json::number_float_t value, const Json::string_t&) { return place(Json(value)) != nullptr; }
  bool string(Json::string_t& value) { return place(Json(std::move(value))) != nullptr; }
  bool binary(Json::binary_t& value) { return place(Json::binary(std::move(value))) != nullptr; }
  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(Json::string_t& key) {
    key_ = std::move(key);
    if (levels_.size() == 1) top_key_ = key_;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const Json::exception&) {
    // nlohmann's own message quotes the last token read, which may be most of the input.
    return fail(fmt::format("not valid JSON (or not valid UTF-8) at byte {}", position));
  }

 private:
  struct Level {
    Json* value;
    std::unordered_map<std::string, size_t> index;  // key -> member position, once large
  };

  bool fail(std::string message, bool over_bound = false) {
    if (error_ && error_->message.empty()) {
      error_->message = std::move(message);
      error_->over_bound = over_bound;
      error_->top_level_key = levels_.empty() ? std::string() : top_key_;
    }
    return false;
  }

  bool open(Json container) {
    if (static_cast<int>(levels_.size()) >= kMaxJsonDepth)
      return fail(fmt::format("nested deeper than {} levels", kMaxJsonDepth), true);
    Json* at = place(std::move(container));
    if (!at) return false;
    levels_.push_back({at, {}});
    return true;
  }

  bool close() {
    levels_.pop_back();
    return true;
  }

  // Puts `value` where the parser is: the root, the next array item, or the member `key_`.
  Json* place(Json value) {
    if (levels_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Level& level = levels_.back();
    if (level.value->is_array()) {
      auto& items = level.value->get_ref<Json::array_t&>();
      items.push_back(std::move(value));
      return &items.back();
    }
    auto& members = static_cast<Members&>(level.value->get_ref<Json::object_t&>());
    if (auto found = find(level, members)) {
      members[*found].second = std::move(value);  // the last value wins, in the first place
      return &members[*found].second;
    }
    if (members.size() >= kMaxJsonMembers) {
      fail(fmt::format("an object has more than {} members", kMaxJsonMembers), true);
      return nullptr;
    }
    if (!level.index.empty() || members.size() + 1 == kIndexFrom) {
      if (level.index.empty())
        for (size_t i = 0; i < members.size(); ++i) level.index.emplace(members[i].first, i);
      level.index.emplace(key_, members.size());
    }
    members.emplace_back(std::move(key_), std::move(value));
    return &members.back().second;
  }

  std::optional<size_t> find(const Level& level, const Members& members) const {
    if (!level.index.empty()) {
      auto it = level.index.find(key_);
      if (it == level.index.end()) return std::nullopt;
      return it->second;
    }
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i].first == key_) return i;
    return std::nullopt;
  }

  ClientJsonError* error_;
  Json root_;
  std::vector<Level> levels_;
  std::string key_;
  std::string top_key_;
};

}  // namespace

std::optional<Json> try_parse_client_json(std::string_view text, ClientJsonError* error) {
  ClientJsonError local;
  ClientJsonError* sink = error ? error : &local;
  *sink = {};
  Builder builder(sink);
  if (!Json::sax_parse(text.begin(), text.end(), &builder, Json::input_format_t::json, /*strict=*/true)) {
    if (sink->message.empty()) sink->message = "not valid JSON";
    return std::nullopt;
  }
  return builder.take();
}

Json parse_field_json(std::string_view text, const std::string& field) {
  ClientJsonError error;
  std::optional<Json> parsed = try_parse_client_json(text, &error);
  if (!parsed) bad_request(field, "{}: {}", field, error.message);
  return std::move(*parsed);
}

Json parse_json_body(const std::string& body) {
  ClientJsonError error;
  std::optional<Json> parsed = try_parse_client_json(body, &error);
  if (!parsed) {
    if (error.over_bound && !error.top_level_key.empty()) {
      // A key is client text: name it, but not at any length.
      std::string field = error.top_level_key.substr(0, 100);
      bad_request(field, "{}: {}", field, error.message);
    }
    throw ApiError(400, "The request body is " + error.message + ".");
  }
  if (!parsed->is_object()) throw ApiError(400, "The request body must be a JSON object.");
  return std::move(*parsed);
}

}  // namespace optimate::server
