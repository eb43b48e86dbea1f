// nemotron chat: multi-turn chat with the model directory's tokenizer and chat template.
// Reasoning (<think>…</think>) and tool calls are parsed out of the stream as it is generated.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/threads.h"
#include "cli/commands.h"
#include "engine/scheduler.h"
#include "model/dflash.h"
#include "model/nemotron_h.h"
#include "text/chat_template.h"
#include "text/detokenizer.h"
#include "text/output_parser.h"
#include "text/tokenizer.h"

namespace nemo::cli {

std::vector<Command> make_chat_command() {
  struct Opts {
    GenerationFlags g;
    std::string system, message;
    bool no_think = false, show_reasoning = false, stats = false;
  };
  auto o = std::make_shared<Opts>();
  o->g.max_tokens = 512;
  std::vector<Command> v(1);
  v[0].attach_fn = [o, sub = v[0].sub](CLI::App& app) {
    auto* s =
        app.add_subcommand("chat", "Chat with the model (its tokenizer.json and chat template)");
    o->g.add_to(s);
    s->add_option("--system", o->system, "System prompt");
    s->add_option("--message", o->message,
                  "Send one message, print the reply and exit (no prompt loop)");
    s->add_flag("--no-think", o->no_think, "enable_thinking = false in the chat template");
    s->add_flag("--show-reasoning", o->show_reasoning, "Print the reasoning (<think>) text too");
    s->add_flag("--stats", o->stats, "Print speed and speculation figures after each reply");
    *sub = s;
  };
  v[0].run = [o]() {
    const GenerationFlags& f = o->g;
    auto dir = resolve_model_dir(f.model);
    auto m = model::NemotronH::load(dir->path, f.load_options());
    if (!std::filesystem::exists(std::filesystem::path(dir->path) / "tokenizer.json"))
      fail("{}: chat needs tokenizer.json (use `run --ids` for token-level generation)", dir->path);
    const text::Tokenizer tok = text::Tokenizer::from_dir(dir->path);
    const auto src = text::load_chat_template(dir->path);
    if (!src)
      fail("{}: no chat template (chat_template.jinja or tokenizer_config.json chat_template)",
           dir->path);
    const text::ChatTemplate tmpl(
        *src, (std::filesystem::path(dir->path) / "chat_template.jinja").string());
    const auto draft = f.load_draft(*m, *dir);
    // The serving scheduler, one request at a time: its prefix cache lets each turn resume from
    // the previous turns' prompt instead of prefilling the whole conversation again (exactly).
    engine::Scheduler sched(*m, {.threads = {f.threads > 0 ? f.threads : default_thread_count()},
                                 .spec = engine::parse_spec_mode(f.spec),
                                 .draft_max = f.draft_max,
                                 .drafter = draft.get(),
                                 .max_active = 1});
    std::vector<int32_t> stops;
    for (auto e : m->config().eos_token_ids) stops.push_back(int32_t(e));
    if (tok.eos_id()) stops.push_back(*tok.eos_id());

    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
    const bool interactive = o->message.empty() && isatty(fileno(stdin));
    auto turn = [&](const std::string& user) {
      messages.push_back({{"role", "user"}, {"content", user}});
      text::ChatOptions co;
      co.enable_thinking = !o->no_think;
      const std::string prompt = tmpl.apply(messages, co);
      engine::RequestOptions req;
      req.prompt = tok.encode(prompt, {.add_special_tokens = false});
      req.max_tokens = f.max_tokens;
      req.sampling = {f.temp, f.top_k, f.top_p, f.min_p, f.seed};
      req.stop_tokens = stops;
      text::StreamDecoder sd(tok, {}, /*skip_special_tokens=*/true);
      text::OutputParserOptions po;
      po.start_in_reasoning = prompt.ends_with("<think>\n") || prompt.ends_with("<think>");
      text::OutputParser parser(po);
      std::string content, reasoning;
      bool in_reasoning_shown = false;
      auto show = [&](const text::OutputDelta& d) {
        reasoning += d.reasoning;
        content += d.content;
        if (o->show_reasoning && !d.reasoning.empty()) {
          if (!in_reasoning_shown) std::fputs("[reasoning] ", stdout);
          in_reasoning_shown = true;
          std::fputs(d.reasoning.c_str(), stdout);
        }
        if (!d.content.empty()) {
          if (in_reasoning_shown) {
            std::fputs("\n[answer] ", stdout);
            in_reasoning_shown = false;
          }
          std::fputs(d.content.c_str(), stdout);
        }
        for (const auto& tc : d.tool_calls) std::printf("\n[tool call] %s\n", tc.name.c_str());
        std::fflush(stdout);
      };
      std::string why;
      const auto stream = sched.submit(req, &why);
      if (!stream) fail("chat: {}", why);
      std::vector<engine::TokenOut> got;
      while (!stream->finished()) {
        got.clear();
        stream->wait(got, std::chrono::milliseconds(100));
        for (const auto& t : got)
          if (std::find(stops.begin(), stops.end(), t.token) == stops.end())
            show(parser.push(sd.push(t.token)));
      }
      const engine::RequestSummary stats = stream->summary();
      if (stats.finish == engine::FinishReason::Error) fail("{}", stats.error);
      show(parser.push(sd.finish()));
      show(parser.finish());
      std::printf("\n");
      nlohmann::ordered_json reply = {{"role", "assistant"}, {"content", content}};
      if (!reasoning.empty()) reply["reasoning_content"] = reasoning;
      messages.push_back(reply);
      if (o->stats) {
        const double decode_s = stats.total_s - stats.ttft_s;
        std::fprintf(
            stderr,
            "[%lld prompt tokens (%lld from the prefix cache), %lld generated, %.2f tok/s; "
            "%s]\n",
            (long long)stats.prompt_tokens, (long long)stats.cached_tokens,
            (long long)stats.completion_tokens,
            decode_s > 0 ? double(stats.completion_tokens - 1) / decode_s : 0.0,
            engine::spec_mode_name(sched.default_spec()));
      }
    };
    if (!o->message.empty()) {
      turn(o->message);
      return 0;
    }
    std::string line;
    while (true) {
      if (interactive) {
        std::printf("> ");
        std::fflush(stdout);
      }
      if (!std::getline(std::cin, line)) break;
      if (line == "/exit" || line == "/quit") break;
      if (line == "/reset") {
        messages = nlohmann::ordered_json::array();
        if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
        continue;
      }
      if (line.empty()) continue;
      turn(line);
    }
    return 0;
  };
  return v;
}

}  // namespace nemo::cli
