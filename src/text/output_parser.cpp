#include "text/output_parser.h"

#include <algorithm>

#include "text/detokenizer.h"

namespace nemo::text {

using ojson = nlohmann::ordered_json;

namespace {
bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Type declared for `param` of function `fn` in an OpenAI tool list ("" if unknown).
std::string declared_type(const ojson& tools, const std::string& fn, const std::string& param) {
  if (!tools.is_array()) return {};
  for (const auto& t : tools) {
    const ojson& f = t.contains("function") ? t["function"] : t;
    if (!f.is_object() || !f.contains("name") || f["name"] != fn) continue;
    if (!f.contains("parameters") || !f["parameters"].is_object()) return {};
    const ojson& props = f["parameters"].value("properties", ojson::object());
    if (!props.is_object() || !props.contains(param) || !props[param].is_object()) return {};
    const ojson& ty = props[param].value("type", ojson());
    return ty.is_string() ? ty.get<std::string>() : std::string();
  }
  return {};
}

std::string_view strip_one_newline(std::string_view v) {
  if (v.starts_with("\n")) v.remove_prefix(1);
  if (v.ends_with("\n")) v.remove_suffix(1);
  return v;
}
}  // namespace

ojson ToolCall::to_openai() const {
  return ojson{{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

bool parse_tool_call_body(std::string_view body, const ojson& tools, ToolCall& out) {
  size_t f = body.find("<function=");
  if (f == std::string_view::npos) return false;
  size_t ne = body.find('>', f);
  if (ne == std::string_view::npos) return false;
  std::string name(body.substr(f + 10, ne - f - 10));
  while (!name.empty() && is_ws(name.back())) name.pop_back();
  out.name = name;
  ojson args = ojson::object();
  size_t pos = ne + 1;
  size_t fend = body.find("</function>", pos);
  std::string_view rest = body.substr(pos, fend == std::string_view::npos ? std::string_view::npos : fend - pos);
  size_t p = 0;
  while (true) {
    size_t ps = rest.find("<parameter=", p);
    if (ps == std::string_view::npos) break;
    size_t pe = rest.find('>', ps);
    if (pe == std::string_view::npos) break;
    std::string key(rest.substr(ps + 11, pe - ps - 11));
    size_t vstart = pe + 1;
    // The value ends at </parameter>, or (when that was omitted) at the next parameter.
    size_t close = rest.find("</parameter>", vstart);
    size_t next = rest.find("<parameter=", vstart);
    size_t vend = std::min(close, next);
    if (vend == std::string_view::npos) vend = rest.size();
    std::string_view raw = strip_one_newline(rest.substr(vstart, vend - vstart));
    std::string value(raw);
    ojson v;
    bool as_json = false;
    if (declared_type(tools, name, key) != "string") {
      try {
        v = ojson::parse(value);
        as_json = true;
      } catch (const ojson::exception&) {
      }
    }
    args[key] = as_json ? v : ojson(value);
    p = vend == close ? close + 12 : vend;
    if (p >= rest.size()) break;
  }
  // Ill-formed UTF-8 in a value becomes U+FFFD (dump() would throw on it).
  out.arguments = args.dump(-1, ' ', false, ojson::error_handler_t::replace);
  return true;
}

OutputParser::OutputParser(OutputParserOptions opts) : opts_(std::move(opts)) {
  state_ = !opts_.parse_reasoning     ? State::Content
           : opts_.start_in_reasoning ? State::Reasoning
                                      : State::Start;
}

void OutputParser::emit_reasoning(std::string_view s, bool final, OutputDelta& out) {
  // Leading whitespace is dropped, trailing whitespace held until more text follows.
  for (char c : s) {
    if (is_ws(c)) {
      if (reasoning_started_) ws_ += c;
      continue;
    }
    if (!ws_.empty()) { out.reasoning += ws_; ws_.clear(); }
    out.reasoning += c;
    reasoning_started_ = true;
  }
  if (final) ws_.clear();
}

void OutputParser::emit_content(std::string_view s, bool final, OutputDelta& out) {
  for (char c : s) {
    if (is_ws(c)) {
      if (content_started_) ws_ += c;
      continue;
    }
    if (!ws_.empty()) { out.content += ws_; ws_.clear(); }
    out.content += c;
    content_started_ = true;
  }
  if (final) ws_.clear();
}

void OutputParser::finish_call(OutputDelta& out) {
  ToolCall tc;
  if (parse_tool_call_body(call_buf_, opts_.tools, tc)) {
    tc.id = "call_" + std::to_string(ncalls_++);
    out.tool_calls.push_back(std::move(tc));
  } else {
    // Not a well-formed call: keep the text visible rather than dropping it.
    emit_content(opts_.call_open + call_buf_, false, out);
  }
  call_buf_.clear();
}

void OutputParser::feed(std::string_view text, bool final, OutputDelta& out) {
  buf_.append(text);
  while (true) {
    std::vector<std::string> tags;
    switch (state_) {
      case State::Start:
        tags = {opts_.think_open, opts_.think_close};
        if (opts_.parse_tool_calls) tags.push_back(opts_.call_open);
        break;
      case State::Reasoning:
        tags = {opts_.think_close};
        if (opts_.parse_tool_calls) tags.push_back(opts_.call_open);
        // A model that re-emits <think> although the prompt opened it: drop the tag.
        if (!reasoning_started_) tags.push_back(opts_.think_open);
        break;
      case State::Content:
        if (opts_.parse_tool_calls) tags.push_back(opts_.call_open);
        break;
      case State::ToolCall: tags = {opts_.call_close}; break;
    }
    auto [pos, idx] = find_stop(buf_, tags);
    if (idx < 0) {
      size_t keep = final ? 0 : stop_prefix_suffix(buf_, tags);
      std::string_view ready(buf_.data(), buf_.size() - keep);
      if (state_ == State::Reasoning) emit_reasoning(ready, false, out);
      else if (state_ == State::ToolCall) call_buf_.append(ready);
      else {
        // In Start, wait for non-whitespace before deciding there is no <think>.
        if (state_ == State::Start) {
          size_t k = 0;
          while (k < ready.size() && is_ws(ready[k])) ++k;
          if (k < ready.size()) state_ = State::Content;
        }
        emit_content(ready, false, out);
      }
      buf_.erase(0, buf_.size() - keep);
      break;
    }
    const std::string& tag = tags[idx];
    std::string_view before(buf_.data(), pos);
    switch (state_) {
      case State::Start:
        // A tag after other text is no reasoning block: the text decided Content, as it does
        // when it arrives in a piece of its own (the result must not depend on the chunking).
        if (std::any_of(before.begin(), before.end(), [](char c) { return !is_ws(c); })) {
          state_ = State::Content;
          continue;
        }
        if (tag == opts_.think_open) {
          emit_content(before, false, out);
          ws_.clear();
          state_ = State::Reasoning;
        } else if (tag == opts_.think_close) {  // reasoning without an opening tag
          emit_reasoning(before, true, out);
          content_started_ = false;
          state_ = State::Content;
        } else {
          emit_content(before, false, out);
          state_ = State::ToolCall;
        }
        break;
      case State::Reasoning:
        if (tag == opts_.think_open) {  // dropped only before any reasoning text, else text
          emit_reasoning(before, false, out);
          if (reasoning_started_) emit_reasoning(tag, false, out);
          break;
        }
        emit_reasoning(before, true, out);
        ws_.clear();
        state_ = tag == opts_.think_close ? State::Content : State::ToolCall;
        break;
      case State::Content:
        emit_content(before, false, out);
        state_ = State::ToolCall;
        break;
      case State::ToolCall:
        call_buf_.append(before);
        finish_call(out);
        state_ = State::Content;
        break;
    }
    buf_.erase(0, pos + tag.size());
  }
  if (final) {
    if (state_ == State::ToolCall) {
      finish_call(out);
      state_ = State::Content;
    }
    ws_.clear();
  }
}

OutputDelta OutputParser::push(std::string_view text) {
  OutputDelta out;
  feed(text, false, out);
  return out;
}

OutputDelta OutputParser::finish() {
  OutputDelta out;
  feed({}, true, out);
  return out;
}

ParsedOutput parse_output(std::string_view text, const OutputParserOptions& opts) {
  OutputParser p(opts);
  OutputDelta a = p.push(text), b = p.finish();
  ParsedOutput r;
  r.reasoning_content = a.reasoning + b.reasoning;
  r.content = a.content + b.content;
  r.tool_calls = std::move(a.tool_calls);
  for (auto& t : b.tool_calls) r.tool_calls.push_back(std::move(t));
  return r;
}

}  // namespace nemo::text
