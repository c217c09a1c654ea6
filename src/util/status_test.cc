#include "kvtier/status.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

Result<int> Half(int value) {
  if (value % 2 != 0) return Status::InvalidArgument(std::to_string(value) + " is odd");
  return value / 2;
}

Result<int> Quarter(int value) {
  KVTIER_ASSIGN_OR_RETURN(int half, Half(value));
  return Half(half);
}

Status CheckEven(int value) {
  KVTIER_RETURN_IF_ERROR(Half(value).status());
  return Status::Ok();
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Status s = Status::NotFound("model 'x'");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NotFound: model 'x'");
  EXPECT_EQ(s.WithContext("catalog").message(), "catalog: model 'x'");
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
}

TEST(Status, CodesAreStable) {
  // On the wire: these numbers must never change.
  EXPECT_EQ(static_cast<int>(StatusCode::kInvalidArgument), 1);
  EXPECT_EQ(static_cast<int>(StatusCode::kNotFound), 2);
  EXPECT_EQ(static_cast<int>(StatusCode::kCorruption), 4);
  EXPECT_EQ(static_cast<int>(StatusCode::kInternal), 8);
}

TEST(Result, PropagatesThroughMacros) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> odd = Quarter(6);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().message(), "3 is odd");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_FALSE(CheckEven(5).ok());
}

TEST(Result, OkStatusWithoutValueBecomesInternal) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(ResultDeathTest, ValueOfErrorAborts) {
  Result<int> r{Status::InvalidArgument("no")};
  EXPECT_DEATH((void)r.value(), "no");
}

}  // namespace
}  // namespace kvtier
