// Readers of the text traces: ShareGPT, LMSYS-Chat, tau-bench, SWE-agent and ToolBench, into
// conversations (chat_template.h). Field names and shapes are in docs/traces.md.
#include <filesystem>
#include <regex>

#include "replay/trace_readers.h"
#include "util/json_document.h"

namespace kvtier::replay {
namespace {

using nlohmann::json;

const json* Field(const json& object, std::string_view name) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// A message's text: a string, or OpenAI's content parts [{"type": "text", "text": ...}];
// null is empty; any other value is kept as its JSON text.
std::string TextOf(const json* value) {
  if (value == nullptr) return "";
  if (value->is_string()) return value->get<std::string>();
  if (value->is_array()) {
    std::string out;
    for (const json& part : *value) {
      const json* text = Field(part, "text");
      out += text != nullptr && text->is_string() ? text->get<std::string>() : part.dump();
    }
    return out;
  }
  return value->dump();
}

std::string StringOr(const json& object, std::string_view name, std::string fallback) {
  const json* value = Field(object, name);
  if (value == nullptr) return fallback;
  return value->is_string() ? value->get<std::string>() : value->dump();
}

Result<Role> RoleFromName(std::string_view name, const std::string& where) {
  if (name == "system") return Role::kSystem;
  if (name == "user" || name == "human") return Role::kUser;
  if (name == "assistant" || name == "gpt" || name == "chatgpt" || name == "bard" || name == "bing" ||
      name == "model") {
    return Role::kAssistant;
  }
  if (name == "tool" || name == "function" || name == "observation" || name == "ipython") return Role::kTool;
  return Status::InvalidArgument(where + ": unknown role '" + std::string(name) + "'");
}

// The name in a Python-repr'd call, "{'name': 'search', 'arguments': ...}" (SWE-agent and
// ToolBench store calls that way), or "".
std::string ReprCallName(const std::string& repr) {
  static const std::regex kName(R"re(['"]name['"]\s*:\s*['"]([^'"]*)['"])re");
  std::smatch match;
  return std::regex_search(repr, match, kName) ? match[1].str() : "";
}

// An OpenAI-style message list (tau-bench's traj, SWE-agent's history, ToolBench's
// train_messages) into a conversation.
Result<Conversation> ReadMessages(const json& messages, std::string session, const std::string& where,
                                  bool user_after_assistant_is_observation) {
  if (!messages.is_array()) return Status::InvalidArgument(where + ": messages are not a list");
  Conversation conversation{std::move(session), {}};
  bool seen_assistant = false;
  for (std::size_t k = 0; k < messages.size(); ++k) {
    const json& m = messages[k];
    const std::string at = where + ": message " + std::to_string(k);
    const json* role_field = Field(m, "role");
    if (role_field == nullptr || !role_field->is_string()) return Status::InvalidArgument(at + " has no string 'role'");
    KVTIER_ASSIGN_OR_RETURN(const Role role, RoleFromName(role_field->get<std::string>(), at));
    ChatMessage message{role, TextOf(Field(m, "content")), "", StringOr(m, "agent", ""), false};
    if (role == Role::kAssistant) {
      // ToolBench writes a missing content as the string "None".
      if (message.content == "None" && Field(m, "function_call") != nullptr) message.content.clear();
      if (const json* calls = Field(m, "tool_calls"); calls != nullptr && calls->is_array()) {
        for (const json& call : *calls) {
          const json* function = Field(call, "function");
          const std::string name = function != nullptr ? StringOr(*function, "name", "") : "";
          const std::string args = function != nullptr ? StringOr(*function, "arguments", "{}") : "{}";
          if (message.tool.empty()) message.tool = name;
          message.content += (message.content.empty() ? "" : "\n") + RenderToolCall(name, args);
        }
      } else if (calls != nullptr && calls->is_string()) {  // SWE-agent: a Python repr of the list
        message.tool = ReprCallName(calls->get<std::string>());
        const std::string action = StringOr(m, "action", calls->get<std::string>());
        message.content += (message.content.empty() ? "" : "\n") + RenderToolCall(message.tool, action);
      } else if (const json* call = Field(m, "function_call"); call != nullptr) {  // ToolBench, old OpenAI
        const std::string text = call->is_string() ? call->get<std::string>() : call->dump();
        message.tool = call->is_object() ? StringOr(*call, "name", "") : ReprCallName(text);
        message.content += std::string(message.content.empty() ? "" : "\n") + "<tool_call>\n" + text + "\n</tool_call>";
      } else if (const json* action = Field(m, "action"); action != nullptr && action->is_string()) {
        // SWE-agent without function calling: the command's first word names the tool.
        const std::string command = action->get<std::string>();
        const std::size_t start = command.find_first_not_of(" \t\n");
        if (start != std::string::npos) message.tool = command.substr(start, command.find_first_of(" \t\n", start) - start);
      }
      seen_assistant = true;
    } else if (role == Role::kTool) {
      message.tool = StringOr(m, "name", "");
    } else if (role == Role::kUser) {
      message.observation = user_after_assistant_is_observation && seen_assistant;
    }
    conversation.messages.push_back(std::move(message));
  }
  return conversation;
}

// A ShareGPT or LMSYS record: {id, conversations: [{from, value}]} or {conversation_id,
// conversation: [{role, content}]}.
Result<Conversation> ReadChatRecord(const json& record, const std::string& where, std::string_view list_field,
                                    std::string_view role_field, std::string_view text_field,
                                    std::string_view id_field) {
  const json* list = Field(record, list_field);
  if (list == nullptr || !list->is_array()) {
    return Status::InvalidArgument(where + ": no '" + std::string(list_field) + "' list");
  }
  Conversation conversation{StringOr(record, id_field, where), {}};
  for (std::size_t k = 0; k < list->size(); ++k) {
    const json& turn = (*list)[k];
    const std::string at = where + ": " + std::string(list_field) + "[" + std::to_string(k) + "]";
    const json* role = Field(turn, role_field);
    if (role == nullptr || !role->is_string()) {
      return Status::InvalidArgument(at + " has no string '" + std::string(role_field) + "'");
    }
    KVTIER_ASSIGN_OR_RETURN(const Role r, RoleFromName(role->get<std::string>(), at));
    conversation.messages.push_back({r, TextOf(Field(turn, text_field)), "", "", false});
  }
  return conversation;
}

// JSONL, or one JSON array of records (ShareGPT is published both ways).
Result<std::vector<Conversation>> ReadChatRecords(std::string_view text, std::string_view source,
                                                  const TraceReadOptions& options, std::string_view list_field,
                                                  std::string_view role_field, std::string_view text_field,
                                                  std::string_view id_field) {
  std::vector<Conversation> out;
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '[') {
    KVTIER_ASSIGN_OR_RETURN(const json doc, ParseLenientJson(text, source));
    for (std::size_t k = 0; k < doc.size(); ++k) {
      KVTIER_ASSIGN_OR_RETURN(Conversation c, ReadChatRecord(doc[k], std::string(source) + ": record " +
                                                                         std::to_string(k),
                                                             list_field, role_field, text_field, id_field));
      out.push_back(std::move(c));
    }
    return out;
  }
  KVTIER_RETURN_IF_ERROR(ForEachJsonLine(text, source, options.max_line_bytes,
                                         [&](const json& record, const std::string& where) -> Status {
                                           KVTIER_ASSIGN_OR_RETURN(Conversation c,
                                                                   ReadChatRecord(record, where, list_field, role_field,
                                                                                  text_field, id_field));
                                           out.push_back(std::move(c));
                                           return Status::Ok();
                                         }));
  return out;
}

std::string Stem(std::string_view source) { return std::filesystem::path(std::string(source)).stem().string(); }

}  // namespace

Result<std::vector<Conversation>> ReadShareGpt(std::string_view text, std::string_view source,
                                               const TraceReadOptions& options) {
  return ReadChatRecords(text, source, options, "conversations", "from", "value", "id");
}

Result<std::vector<Conversation>> ReadLmsys(std::string_view text, std::string_view source,
                                            const TraceReadOptions& options) {
  return ReadChatRecords(text, source, options, "conversation", "role", "content", "conversation_id");
}

Result<std::vector<Conversation>> ReadTauBench(std::string_view text, std::string_view source) {
  KVTIER_ASSIGN_OR_RETURN(const json doc, ParseLenientJson(text, source));
  // A list of results, or a single one.
  const json list = doc.is_array() ? doc : json::array({doc});
  std::vector<Conversation> out;
  for (std::size_t k = 0; k < list.size(); ++k) {
    const std::string where = std::string(source) + ": result " + std::to_string(k);
    const json* traj = Field(list[k], "traj");
    if (traj == nullptr) return Status::InvalidArgument(where + ": no 'traj' message list");
    const std::string session = "task" + StringOr(list[k], "task_id", std::to_string(k)) + "-trial" +
                                StringOr(list[k], "trial", "0");
    KVTIER_ASSIGN_OR_RETURN(Conversation c, ReadMessages(*traj, session, where, false));
    out.push_back(std::move(c));
  }
  return out;
}

Result<std::vector<Conversation>> ReadSweAgent(std::string_view text, std::string_view source) {
  KVTIER_ASSIGN_OR_RETURN(const json doc, ParseLenientJson(text, source));
  const json* history = Field(doc, "history");
  if (history == nullptr) return Status::InvalidArgument(std::string(source) + ": no 'history' message list");
  // Before function calling, SWE-agent sent each command's output back as a user message.
  KVTIER_ASSIGN_OR_RETURN(Conversation c, ReadMessages(*history, Stem(source), std::string(source), true));
  return std::vector<Conversation>{std::move(c)};
}

Result<std::optional<Conversation>> ReadToolBench(std::string_view text, std::string_view source) {
  KVTIER_ASSIGN_OR_RETURN(const json doc, ParseLenientJson(text, source));
  const json* generation = Field(doc, "answer_generation");
  if (generation == nullptr) return std::optional<Conversation>();
  const json* steps = Field(*generation, "train_messages");
  // Answers whose search found no valid path (valid_data false) carry no messages.
  if (steps == nullptr || (steps->is_array() && steps->empty())) return std::optional<Conversation>();
  if (!steps->is_array()) {
    return Status::InvalidArgument(std::string(source) + ": answer_generation.train_messages is not a list");
  }
  // Each entry is the prompt of one training step and extends the one before; the last
  // holds the whole successful path.
  KVTIER_ASSIGN_OR_RETURN(Conversation c, ReadMessages(steps->back(), Stem(source), std::string(source), false));
  return std::optional<Conversation>(std::move(c));
}

}  // namespace kvtier::replay
