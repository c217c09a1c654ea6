#include "util/json_document.h"

#include <cmath>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(LenientJson, NonFiniteLiteralsBecomeReadableNumbers) {
  Result<nlohmann::json> doc = ParseLenientJson(
      R"({"a": NaN, "b": Infinity, "c": -Infinity, "d": [NaN, 1], "s": "NaN Infinity stay text", "NaNx": 1})", "t");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  JsonFields fields(*doc, "t");
  EXPECT_TRUE(std::isnan(**fields.OptionalNumber({"a"})));
  EXPECT_EQ(**fields.OptionalNumber({"b"}), INFINITY);
  EXPECT_EQ(**fields.OptionalNumber({"c"}), -INFINITY);
  EXPECT_EQ((*doc)["s"], "NaN Infinity stay text");
  EXPECT_EQ((*doc)["NaNx"], 1);
}

TEST(LenientJson, EscapedQuotesDoNotEndStrings) {
  Result<nlohmann::json> doc = ParseLenientJson(R"({"s": "say \"NaN\"", "n": NaN})", "t");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ((*doc)["s"], "say \"NaN\"");
  EXPECT_EQ((*doc)["n"], "NaN");
}

TEST(LenientJson, MalformedInputNamesTheSource) {
  Result<nlohmann::json> doc = ParseLenientJson("{\"a\": ", "config.json");
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().message().rfind("config.json: not valid JSON", 0), 0u);
}

TEST(JsonFields, AliasesAndTypeChecks) {
  nlohmann::json doc = {{"n_layer", 32}, {"hidden", 4096.0}, {"half", 1.5}, {"flag", 1}, {"nested", {{"x", 2}}}};
  JsonFields fields(doc, "cfg");
  EXPECT_EQ(*fields.RequireInt({"num_hidden_layers", "n_layer"}, 1), 32);
  EXPECT_EQ(*fields.RequireInt({"hidden"}, 1), 4096);
  Result<int64_t> half = fields.RequireInt({"half"}, 1);
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.status().message(), "cfg: field 'half' must be an integer, got 1.5");
  Result<int64_t> missing = fields.RequireInt({"a", "b"}, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'a' or 'b'"), std::string::npos);
  EXPECT_FALSE(fields.OptionalBool({"flag"}).ok());
  auto nested = fields.Object("nested");
  ASSERT_TRUE(nested.ok() && nested->has_value());
  Result<int64_t> x = (*nested)->RequireInt({"x"}, 5);
  ASSERT_FALSE(x.ok());
  EXPECT_EQ(x.status().message(), "cfg: field 'nested.x' must be >= 5, got 2");
}

TEST(JsonFields, HugeUnsignedIsRejected) {
  Result<nlohmann::json> doc = ParseLenientJson(R"({"n": 18446744073709551615})", "t");
  ASSERT_TRUE(doc.ok());
  JsonFields fields(*doc, "t");
  EXPECT_FALSE(fields.RequireInt({"n"}, 1).ok());
}

}  // namespace
}  // namespace kvtier
