#include "text/chat_template.h"
#include "base/error.h"
namespace nemo::text {
struct ChatTemplate::Program {};
ChatTemplate::ChatTemplate(std::string_view, const std::string&) : prog_(std::make_unique<Program>()) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;
std::string ChatTemplate::render(const nlohmann::json&) const { fail("todo"); }
}
