// Parsers for Nemotron 3.x generations, usable incrementally while streaming.
//
// Reasoning: text up to `</think>` is reasoning_content, the rest is content. Generation
// may start inside `<think>` (the template's generation prompt opens it: "thinking forced
// open"); a `<tool_call>` ends reasoning even without `</think>` (a known omission).
//
// Tool calls:  <tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>
// become OpenAI tool_calls [{id, type:"function", function:{name, arguments}}], with
// `arguments` a JSON object string. A value that parses as JSON stays JSON (unless the
// tool's schema declares the parameter a string); anything else is a string. A missing
// final `</parameter>`, `</function>` or `</tool_call>` is tolerated.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace nemo::text {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON object text
  nlohmann::ordered_json to_openai() const;
};

struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;  // completed calls
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

struct OutputParserOptions {
  bool start_in_reasoning = true;  // the prompt ended inside <think> (enable_thinking)
  bool parse_reasoning = true;
  bool parse_tool_calls = true;
  nlohmann::ordered_json tools;    // optional OpenAI tool list: string-typed params stay strings
  std::string think_open = "<think>", think_close = "</think>";
  std::string call_open = "<tool_call>", call_close = "</tool_call>";
};

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions opts = {});
  // Feeds generated text (any split); returns what became final.
  OutputDelta push(std::string_view text);
  // End of generation: flushes held text and any unterminated tool call.
  OutputDelta finish();

 private:
  void feed(std::string_view text, bool final, OutputDelta& out);
  void emit_reasoning(std::string_view s, bool final, OutputDelta& out);
  void emit_content(std::string_view s, bool final, OutputDelta& out);
  void content_text(std::string_view s, OutputDelta& out);
  void finish_call(OutputDelta& out);

  OutputParserOptions opts_;
  enum class State { Start, Reasoning, Content, ToolCall } state_;
  std::string buf_;          // undecided text (possible partial tag)
  std::string ws_;           // held trailing whitespace (reasoning/content)
  bool content_started_ = false;
  bool reasoning_started_ = false;
  std::string call_buf_;     // body of the current <tool_call>
  int ncalls_ = 0;
};

// Parses a tool-call body (between <tool_call> and </tool_call>); false if no function.
bool parse_tool_call_body(std::string_view body, const nlohmann::ordered_json& tools, ToolCall& out);

struct ParsedOutput {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;
};
// Whole-text convenience wrapper over OutputParser.
ParsedOutput parse_output(std::string_view text, const OutputParserOptions& opts = {});

}  // namespace nemo::text
