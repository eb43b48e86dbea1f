// Server-sent events framing (text/event-stream): one `data: ...` event per JSON chunk, and
// comment lines (": ping") that keep idle connections open and reveal clients that went away.
#pragma once
#include <string>
#include <string_view>

namespace nemo::server {

inline std::string sse_data(std::string_view payload) {
  std::string s;
  s.reserve(payload.size() + 8);
  s += "data: ";
  s += payload;  // JSON from dump() has no raw newlines
  s += "\n\n";
  return s;
}

inline std::string sse_comment(std::string_view text) {
  return std::string(": ").append(text).append("\n\n");
}

// Writes one event to a sink (httplib::DataSink or a test double); false once the peer is gone.
template <typename Sink>
bool sse_write(Sink& sink, const std::string& event) {
  return sink.write(event.data(), event.size());
}

}  // namespace nemo::server
