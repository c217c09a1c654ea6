// Conversations (the common form every text trace is read into) and their rendering into
// requests through a chat template.
//
// Each message is tokenized on its own: header, content, end marker. A request's prompt is
// the concatenation of the messages before it plus the assistant header, and its output the
// assistant's content plus the end marker, so turn k's prompt + output is an exact token
// prefix of turn k+1's prompt by construction. An engine that re-tokenizes the whole
// rendered text can differ at a message boundary where BPE would merge across it (content
// that starts with a newline right after a header); real chat templates put special tokens
// at those boundaries, which stop merges, so such differences are rare.
//
// Thread-safety: ChatRenderer is immutable after construction.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "kvtier/tokenizer.h"
#include "kvtier/trace.h"

namespace kvtier::replay {

enum class Role { kSystem, kUser, kAssistant, kTool };

struct ChatMessage {
  Role role = Role::kUser;
  std::string content;  // as rendered: an assistant's tool calls are already in the text
  std::string tool;     // assistant: the tool it calls; tool: the tool that answered
  std::string agent;    // the agent that wrote an assistant message, if the trace says
  // A user-role message that is really the environment's output (SWE-agent observations):
  // tagged tool context, not user context.
  bool observation = false;
};

struct Conversation {
  std::string session;
  std::vector<ChatMessage> messages;
};

class ChatRenderer {
 public:
  ChatRenderer(const Tokenizer& tokenizer, ChatTemplate chat_template);

  // Appends one request per assistant message that has a user or tool message before it
  // (assistant messages before any, as ShareGPT conversations cut mid-way start, are kept as
  // history only), at most `max_requests` in all (0: no limit). Arrival times stay 0.
  void AppendRequests(const Conversation& conversation, bool include_output, std::size_t max_requests,
                      std::vector<TraceRequest>& out) const;

 private:
  const Tokenizer& tokenizer_;
  ChatTemplate template_;
  std::vector<uint32_t> begin_;                 // once at the start of a conversation
  std::array<std::vector<uint32_t>, 4> header_; // per Role
  std::vector<uint32_t> end_;                   // closes a message
  std::vector<uint32_t> separator_;             // between messages, after end_
};

// Tool-call text in an assistant message, Hermes / Qwen style.
std::string RenderToolCall(std::string_view name, std::string_view arguments);

}  // namespace kvtier::replay
