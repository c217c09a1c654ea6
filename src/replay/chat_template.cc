#include "replay/chat_template.h"

#include <string_view>

namespace kvtier::replay {
namespace {

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kTool: return "tool";
  }
  return "user";
}

BlockType TagOf(const ChatMessage& message) {
  switch (message.role) {
    case Role::kSystem: return BlockType::kSystemPrompt;
    case Role::kUser: return message.observation ? BlockType::kToolContext : BlockType::kUserContext;
    case Role::kAssistant: return BlockType::kIntermediateReasoning;
    case Role::kTool: return BlockType::kToolContext;
  }
  return BlockType::kUserContext;
}

void Append(std::vector<uint32_t>& to, const std::vector<uint32_t>& from) { to.insert(to.end(), from.begin(), from.end()); }

uint32_t Size32(std::size_t n) { return static_cast<uint32_t>(n); }

}  // namespace

ChatRenderer::ChatRenderer(const Tokenizer& tokenizer, ChatTemplate chat_template)
    : tokenizer_(tokenizer), template_(chat_template) {
  for (Role role : {Role::kSystem, Role::kUser, Role::kAssistant, Role::kTool}) {
    const std::string name(RoleName(role));
    const std::string header = template_ == ChatTemplate::kChatMl
                                   ? "<|im_start|>" + name + "\n"
                                   : "<|start_header_id|>" + name + "<|end_header_id|>\n\n";
    header_[static_cast<std::size_t>(role)] = tokenizer_.Encode(header);
  }
  if (template_ == ChatTemplate::kChatMl) {
    end_ = tokenizer_.Encode("<|im_end|>");
    separator_ = tokenizer_.Encode("\n");
  } else {
    begin_ = tokenizer_.Encode("<|begin_of_text|>");
    end_ = tokenizer_.Encode("<|eot_id|>");
  }
}

void ChatRenderer::AppendRequests(const Conversation& conversation, bool include_output, std::size_t max_requests,
                                  std::vector<TraceRequest>& out) const {
  std::vector<uint32_t> history = begin_;
  std::vector<TraceTag> tags;
  if (!begin_.empty()) tags.push_back({0, Size32(begin_.size()), BlockType::kSystemPrompt});
  bool has_input = false;
  uint32_t turn = 0;
  const std::vector<uint32_t>& assistant_header = header_[static_cast<std::size_t>(Role::kAssistant)];
  for (const ChatMessage& message : conversation.messages) {
    const std::vector<uint32_t> content = tokenizer_.Encode(message.content);
    const bool is_request = message.role == Role::kAssistant && has_input;
    if (is_request && (max_requests == 0 || out.size() < max_requests)) {
      TraceRequest request;
      request.session = conversation.session;
      request.turn = turn++;
      request.tokens = history;
      Append(request.tokens, assistant_header);
      request.prompt_tokens = Size32(request.tokens.size());
      request.tags = tags;
      request.tags.push_back({Size32(history.size()), request.prompt_tokens, BlockType::kIntermediateReasoning});
      request.output_tokens = Size32(content.size() + end_.size());
      if (include_output) {
        request.output_token_ids = content;
        Append(request.output_token_ids, end_);
      }
      request.agent = message.agent;
      request.tool = message.tool;
      out.push_back(std::move(request));
    }
    const uint32_t begin = Size32(history.size());
    Append(history, header_[static_cast<std::size_t>(message.role)]);
    Append(history, content);
    Append(history, end_);
    Append(history, separator_);
    tags.push_back({begin, Size32(history.size()), TagOf(message)});
    has_input = has_input || message.role == Role::kUser || message.role == Role::kTool;
  }
}

std::string RenderToolCall(std::string_view name, std::string_view arguments) {
  std::string out = "<tool_call>\n{\"name\": \"";
  out += name;
  out += "\", \"arguments\": ";
  out += arguments.empty() ? std::string_view("{}") : arguments;
  out += "}\n</tool_call>";
  return out;
}

}  // namespace kvtier::replay
