#include "kvtier/protocol.h"
#include "testing/test_paths.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <list>

#include <gtest/gtest.h>

namespace kvtier::protocol {
namespace {

// Encodes a message, decodes it back, and returns what came out. Its inline bytes view the
// frame, which is kept for the rest of the test program.
Message RoundTrip(const Message& m, MessageType reply_to = MessageType::kError, uint16_t version = kVersion) {
  const Limits limits;
  static std::list<std::vector<std::byte>> frames;
  std::vector<std::byte>& frame = frames.emplace_back();
  const Status encoded = EncodeFrame(m, 42, reply_to, limits, frame, version);
  EXPECT_TRUE(encoded.ok()) << encoded.ToString();
  Result<FrameHeader> h = DecodeHeader(frame, limits);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->request_id, 42u);
  EXPECT_EQ(h->version, version);
  EXPECT_EQ(h->payload_bytes + kHeaderBytes, frame.size());
  Result<Message> back = DecodePayload(*h, std::span(frame).subspan(kHeaderBytes), limits);
  EXPECT_TRUE(back.ok()) << back.status().ToString();
  return back.ok() ? *back : Message{};
}

std::vector<std::byte> Owned(std::span<const std::byte> view) { return {view.begin(), view.end()}; }
std::vector<std::vector<std::byte>> Owned(const std::vector<std::span<const std::byte>>& views) {
  std::vector<std::vector<std::byte>> owned;
  for (const auto& v : views) owned.push_back(Owned(v));
  return owned;
}

TEST(Protocol, EveryRequestRoundTrips) {
  const Hello hello{.tenant = "team-a", .auth_token = "t0k", .segment_bytes = {1u << 30, 4096}};
  const auto h = std::get<Hello>(RoundTrip(hello));
  EXPECT_EQ(h.tenant, "team-a");
  EXPECT_EQ(h.auth_token, "t0k");
  EXPECT_EQ(h.segment_bytes, hello.segment_bytes);

  const Lookup lookup{.chains = {{{1, 2}, {3, 4}}, {}, {{5, 6}}}};
  EXPECT_EQ(std::get<Lookup>(RoundTrip(lookup)).chains, lookup.chains);

  Put put;
  put.parent = BlockKey{7, 8};
  put.blocks.push_back({.key = {9, 10}, .tokens = 16, .type = BlockType::kToolContext,
                        .transition = TransitionType::kToolSwitch, .payload = {.segment = 0, .offset = 4096, .length = 1 << 20},
                        .checksum = 0x0123456789abcdefull});
  const std::vector<std::byte> three{std::byte{1}, std::byte{2}, std::byte{3}};
  put.blocks.push_back({.key = {11, 12}, .tokens = 3, .payload = {.length = 3}, .inline_bytes = three, .checksum = 5});
  const auto p = std::get<Put>(RoundTrip(put));
  ASSERT_EQ(p.blocks.size(), 2u);
  EXPECT_EQ(p.parent, put.parent);
  EXPECT_EQ(p.blocks[0].type, BlockType::kToolContext);
  EXPECT_EQ(p.blocks[0].payload.offset, 4096u);
  EXPECT_EQ(Owned(p.blocks[1].inline_bytes), three);
  EXPECT_EQ(p.blocks[0].checksum, 0x0123456789abcdefull);
  EXPECT_EQ(p.blocks[1].checksum, 5u);

  const Get get{.transition = TransitionType::kAgentHandoff, .keys = {{1, 1}}, .destinations = {{.segment = 1, .offset = 0, .length = 64}}};
  const auto g = std::get<Get>(RoundTrip(get));
  EXPECT_EQ(g.keys, get.keys);
  EXPECT_EQ(g.transition, TransitionType::kAgentHandoff);
  EXPECT_EQ(g.destinations[0].segment, 1u);

  EXPECT_EQ(std::get<Prefetch>(RoundTrip(Prefetch{{{1, 2}}})).keys.size(), 1u);
  EXPECT_EQ(std::get<Pin>(RoundTrip(Pin{{{1, 2}, {3, 4}}})).keys.size(), 2u);
  EXPECT_EQ(std::get<Unpin>(RoundTrip(Unpin{77})).pin_id, 77u);
  EXPECT_EQ(std::get<Expect>(RoundTrip(Expect{{{1, 2}, {3, 4}, {5, 6}}})).keys.size(), 3u);
  EXPECT_EQ(std::get<Unexpect>(RoundTrip(Unexpect{78})).expect_id, 78u);
  const Tags tags{{{.key = {1, 2}, .type = BlockType::kSystemPrompt, .transition = TransitionType::kReasoningStep}}};
  EXPECT_EQ(std::get<Tags>(RoundTrip(tags)).updates[0].type, BlockType::kSystemPrompt);
  const Importance importance{{{.layer = 3, .head = 5, .value = 0.25}}};
  EXPECT_DOUBLE_EQ(std::get<Importance>(RoundTrip(importance)).reports[0].value, 0.25);
  EXPECT_TRUE(std::holds_alternative<Stats>(RoundTrip(Stats{})));
}

TEST(Protocol, EveryReplyRoundTrips) {
  const auto e = std::get<ErrorReply>(RoundTrip(ErrorReply{StatusCode::kNotFound, "no such pin"}));
  EXPECT_EQ(e.code, StatusCode::kNotFound);
  EXPECT_EQ(e.message, "no such pin");
  EXPECT_EQ(std::get<HelloReply>(RoundTrip(HelloReply{.tier_count = 3})).tier_count, 3u);
  const LookupReply lookup{{{.prefix_blocks = 2, .load_blocks = 1, .tier = {0, 3}, .bytes = {4096, 8192}}}};
  EXPECT_EQ(std::get<LookupReply>(RoundTrip(lookup)).chains[0].tier, (std::vector<uint8_t>{0, 3}));
  EXPECT_EQ(std::get<PutReply>(RoundTrip(PutReply{5, 1, 2})).refused_blocks, 2u);
  EXPECT_EQ(std::get<LookupReply>(RoundTrip(lookup)).chains[0].bytes, (std::vector<uint32_t>{4096, 8192}));
  const auto shared_get = std::get<GetReply>(RoundTrip(GetReply{{10, 20}, {}, {0xab, 0xcd}}));
  EXPECT_EQ(shared_get.sizes, (std::vector<uint32_t>{10, 20}));
  EXPECT_EQ(shared_get.checksums, (std::vector<uint64_t>{0xab, 0xcd}));
  const std::vector<std::byte> seven_eight{std::byte{7}, std::byte{8}}, nine{std::byte{9}};
  const GetReply inline_get{{2, 1}, {seven_eight, nine}, {1, 2}};
  EXPECT_EQ(Owned(std::get<GetReply>(RoundTrip(inline_get)).inline_blocks),
            (std::vector<std::vector<std::byte>>{seven_eight, nine}));
  EXPECT_EQ(std::get<PinReply>(RoundTrip(PinReply{9, 4})).pinned_blocks, 4u);
  EXPECT_EQ(std::get<ExpectReply>(RoundTrip(ExpectReply{12})).expect_id, 12u);
  EXPECT_TRUE(std::holds_alternative<EmptyReply>(RoundTrip(EmptyReply{}, MessageType::kUnexpect)));
  EXPECT_TRUE(std::holds_alternative<EmptyReply>(RoundTrip(EmptyReply{}, MessageType::kTags)));
  EXPECT_EQ(std::get<StatsReply>(RoundTrip(StatsReply{"{\"a\":1}"})).json, "{\"a\":1}");
}

// Version 1 (before end-to-end checksums) is still spoken: its Put and Get reply carry no
// checksums, and version 2 refuses to go without them.
TEST(Protocol, VersionOneCarriesNoChecksumsAndVersionTwoRequiresThem) {
  Put put;
  const std::vector<std::byte> four{std::byte{4}};
  put.blocks.push_back({.key = {1, 2}, .tokens = 1, .payload = {.length = 1}, .inline_bytes = four, .checksum = 9});
  const auto p = std::get<Put>(RoundTrip(put, MessageType::kError, 1));
  ASSERT_EQ(p.blocks.size(), 1u);
  EXPECT_EQ(p.blocks[0].checksum, std::nullopt);
  EXPECT_EQ(Owned(p.blocks[0].inline_bytes), four);
  const auto g = std::get<GetReply>(RoundTrip(GetReply{{1}, {four}, {9}}, MessageType::kError, 1));
  EXPECT_EQ(g.sizes, (std::vector<uint32_t>{1}));
  EXPECT_TRUE(g.checksums.empty());
  EXPECT_EQ(std::get<HelloReply>(RoundTrip(HelloReply{.version = 1, .tier_count = 2}, MessageType::kError, 1)).version, 1u);

  std::vector<std::byte> frame;
  put.blocks[0].checksum.reset();
  EXPECT_EQ(EncodeFrame(put, 1, MessageType::kError, Limits{}, frame).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeFrame(GetReply{{1, 2}, {}, {3}}, 1, MessageType::kGet, Limits{}, frame).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeFrame(Stats{}, 1, MessageType::kError, Limits{}, frame, 3).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(EncodeFrame(Stats{}, 1, MessageType::kError, Limits{}, frame, 1).ok());
  frame[4] = std::byte{3};  // a version from the future
  EXPECT_NE(DecodeHeader(frame, Limits{}).status().message().find("version 3"), std::string::npos);
}

TEST(Protocol, MalformedFramesAreClearErrors) {
  const Limits limits;
  std::vector<std::byte> frame;
  ASSERT_TRUE(EncodeFrame(Pin{{{1, 2}, {3, 4}}}, 1, MessageType::kError, limits, frame).ok());
  auto header_error = [&](std::vector<std::byte> bytes) { return DecodeHeader(bytes, limits).status().message(); };
  EXPECT_NE(header_error({frame.begin(), frame.begin() + 10}).find("24 bytes"), std::string::npos);
  std::vector<std::byte> bad = frame;
  bad[0] = std::byte{0};
  EXPECT_NE(header_error(bad).find("magic"), std::string::npos);
  bad = frame;
  bad[4] = std::byte{9};
  EXPECT_NE(header_error(bad).find("version 9"), std::string::npos);
  bad = frame;
  bad[6] = std::byte{99};
  EXPECT_NE(header_error(bad).find("message type"), std::string::npos);

  Result<FrameHeader> h = DecodeHeader(frame, limits);
  ASSERT_TRUE(h.ok());
  const std::span<const std::byte> payload = std::span(frame).subspan(kHeaderBytes);
  // Truncated, padded, and a count that claims more keys than the frame holds.
  FrameHeader shorter = *h;
  shorter.payload_bytes -= 1;
  const Status truncated = DecodePayload(shorter, payload.first(payload.size() - 1), limits).status();
  EXPECT_EQ(truncated.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(truncated.message().find("keys"), std::string::npos) << truncated.message();
  std::vector<std::byte> padded(payload.begin(), payload.end());
  padded.push_back(std::byte{0});
  FrameHeader longer = *h;
  longer.payload_bytes += 1;
  EXPECT_NE(DecodePayload(longer, padded, limits).status().message().find("after the end"), std::string::npos);
  std::vector<std::byte> lying(payload.begin(), payload.end());
  lying[0] = std::byte{0xff};
  lying[1] = std::byte{0xff};
  EXPECT_EQ(DecodePayload(*h, lying, limits).status().code(), StatusCode::kInvalidArgument);
}

TEST(Protocol, LimitsBoundFramesBatchesAndStrings) {
  Limits limits;
  limits.max_batch = 2;
  limits.max_payload_bytes = 64;
  std::vector<std::byte> frame;
  EXPECT_EQ(EncodeFrame(Pin{{{1, 1}, {2, 2}, {3, 3}}}, 1, MessageType::kError, limits, frame).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeFrame(Hello{.tenant = std::string(5000, 'x')}, 1, MessageType::kError, limits, frame).code(),
            StatusCode::kInvalidArgument);
  frame.clear();
  ASSERT_TRUE(EncodeFrame(Pin{{{1, 1}, {2, 2}}}, 1, MessageType::kError, Limits{}, frame).ok());
  Limits tiny;
  tiny.max_payload_bytes = 64;
  frame.clear();
  ASSERT_TRUE(EncodeFrame(Lookup{{{{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}}}}, 1, MessageType::kError, Limits{}, frame).ok());
  EXPECT_EQ(DecodeHeader(frame, tiny).status().code(), StatusCode::kInvalidArgument);
}

// Frames are appended to what `out` holds, each whole; one that cannot be encoded (a payload
// over the limit, a batch too large) appends nothing.
TEST(Protocol, FramesAppendAndAFailedEncodingLeavesTheBufferAsItWas) {
  std::vector<std::byte> frames;
  ASSERT_TRUE(EncodeFrame(Stats{}, 1, MessageType::kError, Limits{}, frames).ok());
  const std::vector<std::byte> first = frames;
  Limits tiny;
  tiny.max_payload_bytes = 64;
  const std::vector<std::byte> big(65, std::byte{1});
  const GetReply too_big{{65}, {big}, {7}};
  EXPECT_EQ(EncodeFrame(too_big, 2, MessageType::kGet, tiny, frames).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(frames, first);
  tiny.max_batch = 1;
  EXPECT_EQ(EncodeFrame(Pin{{{1, 1}, {2, 2}}}, 3, MessageType::kError, tiny, frames).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(frames, first);

  const GetReply small{{3}, {std::span(big).first(3)}, {7}};
  ASSERT_TRUE(EncodeFrame(small, 4, MessageType::kGet, Limits{}, frames).ok());
  ASSERT_EQ(std::vector<std::byte>(frames.begin(), frames.begin() + static_cast<std::ptrdiff_t>(first.size())), first);
  const std::span<const std::byte> second = std::span(frames).subspan(first.size());
  Result<FrameHeader> h = DecodeHeader(second, Limits{});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->request_id, 4u);
  EXPECT_TRUE(h->reply);
  ASSERT_EQ(h->payload_bytes + kHeaderBytes, second.size());
  Result<Message> back = DecodePayload(*h, second.subspan(kHeaderBytes), Limits{});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto& g = std::get<GetReply>(*back);
  ASSERT_EQ(g.inline_blocks.size(), 1u);
  EXPECT_EQ(Owned(g.inline_blocks[0]), std::vector<std::byte>(3, std::byte{1}));
  // Decoded without a copy: the block is viewed where it lies in the frame.
  EXPECT_GE(g.inline_blocks[0].data(), second.data());
  EXPECT_LE(g.inline_blocks[0].data() + 3, second.data() + second.size());
}

// The fuzzers' seed frames (written by hand, byte by byte, from docs/protocol.md) decode.
TEST(Protocol, TheFuzzSeedsDecode) {
  const std::filesystem::path dir = std::filesystem::path(testing::SourceDir()) / "fuzz/corpus/protocol";
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("seed_", 0) != 0) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // A seed is one frame or, for the session fuzzer, a sequence of them: every one decodes.
    std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(text.data()), text.size());
    while (!bytes.empty()) {
      Result<FrameHeader> h = DecodeHeader(bytes, Limits{});
      ASSERT_TRUE(h.ok()) << entry.path() << ": " << h.status().ToString();
      ASSERT_GE(bytes.size() - kHeaderBytes, h->payload_bytes) << entry.path() << ": a truncated frame";
      Result<Message> m = DecodePayload(*h, bytes.subspan(kHeaderBytes, h->payload_bytes), Limits{});
      EXPECT_TRUE(m.ok()) << entry.path() << ": " << m.status().ToString();
      bytes = bytes.subspan(kHeaderBytes + h->payload_bytes);
    }
    ++seeds;
  }
  EXPECT_GE(seeds, 10);
}

}  // namespace
}  // namespace kvtier::protocol
