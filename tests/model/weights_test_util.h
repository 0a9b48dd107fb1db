// Compares loaded weights with summaries that transformers wrote (expected.json files).
#pragma once

#include <cmath>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "model/weights.h"
#include "model_test_util.h"

namespace optimate::testing {

// Every tensor of `w` by the name it has in its file.
inline std::map<std::string, const HostTensor*> by_file_name(const ModelWeights& w) {
  std::map<std::string, const HostTensor*> out;
  auto add = [&](const HostTensor& t) { out[t.name] = &t; };
  add(w.tok_embeddings);
  add(w.final_norm);
  add(w.lm_head);
  for (const auto& l : w.layers) {
    for (const HostTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate,
                                &l.w_up, &l.w_down}) {
      add(*t);
    }
    for (const auto* b : {&l.bq, &l.bk, &l.bv}) {
      if (b->has_value()) add(**b);
    }
  }
  return out;
}

// `summary` is {"shape", "index", "values", "sum"} from tensor_summary() in the fixture script.
inline void expect_matches_summary(const HostTensor& t, const nlohmann::json& summary,
                                   const std::string& label) {
  EXPECT_EQ(t.shape, summary.at("shape").get<std::vector<int64_t>>()) << label;
  const std::vector<float> values = to_f32(t);
  const auto index = summary.at("index").get<std::vector<size_t>>();
  const auto expected = summary.at("values").get<std::vector<float>>();
  for (size_t k = 0; k < index.size(); ++k) {
    ASSERT_LT(index[k], values.size()) << label;
    EXPECT_NEAR(values[index[k]], expected[k], 1e-7 + 1e-6 * std::abs(expected[k]))
        << label << " element " << index[k];
  }
  double sum = 0;
  for (float v : values) sum += v;
  const double expected_sum = summary.at("sum").get<double>();
  EXPECT_NEAR(sum, expected_sum, 1e-4 + 1e-5 * std::abs(expected_sum)) << label;
}

inline void expect_rows(const HostTensor& t, const nlohmann::json& rows, const std::string& label) {
  const std::vector<float> values = to_f32(t);
  const int64_t cols = t.dim(1);
  int mismatches = 0;
  for (const auto& [row, expected_json] : rows.items()) {
    const auto expected = expected_json.get<std::vector<float>>();
    const int64_t r = std::stoll(row);
    ASSERT_EQ(static_cast<int64_t>(expected.size()), cols) << label;
    for (int64_t c = 0; c < cols; ++c) {
      const float got = values[r * cols + c];
      if (!(std::abs(got - expected[c]) <= 1e-7 + 1e-6 * std::abs(expected[c])) &&
          ++mismatches <= 5) {
        ADD_FAILURE() << label << " row " << r << " col " << c << ": got " << got
                      << ", transformers " << expected[c];
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << label;
}

}  // namespace optimate::testing
