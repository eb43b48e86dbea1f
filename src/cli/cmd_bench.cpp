// nemotron bench: prefill / decode speed, memory, roofline, and speculative decoding
// (verify-width cost curve, rollback cost, speedup per drafter and γ), measured side by side.
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

#include "base/clock.h"
#include "base/error.h"
#include "base/mapped_file.h"
#include "base/memory.h"
#include "base/threads.h"
#include "cli/commands.h"
#include "engine/generator.h"
#include "engine/scheduler.h"
#include "kernels/linear.h"
#include "kernels/ops.h"
#include "kernels/peak.h"
#include "kernels/sampling.h"
#include "model/dflash.h"
#include "model/mtp.h"
#include "model/nemotron_h.h"
#include "speculative/dflash_drafter.h"
#include "speculative/drafter.h"
#include "speculative/mtp_drafter.h"
#include "text/text_session.h"

namespace nemo::cli {

namespace {

// Multiply-adds per second of the instruction the products' multi-row passes run on (arith, the
// active ISA), on every thread at once: best of 5 runs of ~10 ms.
double measure_dot_peak(const ThreadConfig& tc, kernels::Arith arith) {
  const kernels::Isa isa = kernels::active_isa();
  const int64_t rounds = isa == kernels::Isa::Reference ? (int64_t(1) << 18) : (int64_t(1) << 21);
  const int nt = std::max(1, tc.n_threads);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<int64_t> done(size_t(nt), 0);
    const double t0 = now_seconds();
    parallel_for(tc, nt, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) done[size_t(i)] = kernels::run_dot_peak(arith, isa, rounds);
    });
    const double dt = now_seconds() - t0;
    int64_t macs = 0;
    for (int64_t d : done) macs += d;
    best = std::max(best, double(macs) / dt);
  }
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct BenchOpts {
  std::string model, spec = "none", gammas = "1,2,3,4,5,6,7", kv_cache = "f32", draft,
                     arith = "f32";
  std::string concurrency, serve_spec = "none,auto";
  std::vector<std::string> prompt_files;
  int64_t prompt = 128, gen = 32;
  int threads = 0, reps = 1;
  bool json = false, membw = false, verify_curve = false, cold = false, no_mmap = false;
};

// One benchmark run over one loaded model: each part adds its numbers to `j` and prints them
// unless --json.
// Pays a real drafter's cost every round but proposes the oracle's tokens: the speedup such a
// drafter would give at 100% acceptance (the ceiling), measured, not predicted.
class CostedOracle : public speculative::Drafter {
 public:
  CostedOracle(std::unique_ptr<speculative::Drafter> real, std::vector<int32_t> script,
               int64_t vocab)
      : real_(std::move(real)), oracle_(std::move(script), false, vocab) {}
  std::string name() const override { return real_->name() + "-oracle"; }
  bool wants_hidden() const override { return real_->wants_hidden(); }
  std::span<const int64_t> tap_layers() const override { return real_->tap_layers(); }
  bool tap_last_post_norm() const override { return real_->tap_last_post_norm(); }
  void begin(std::span<const int32_t> p, const float* h, int32_t a) override {
    real_->begin(p, h, a);
    oracle_.begin(p, h, a);
  }
  speculative::DraftProposal propose(int n, const speculative::SamplingParams& sp,
                                     Rng& rng) override {
    real_->propose(n, sp, rng);
    return oracle_.propose(n, sp, rng);
  }
  void commit(std::span<const int32_t> acc, int32_t next, const float* h) override {
    real_->commit(acc, next, h);
    oracle_.commit(acc, next, h);
  }

 private:
  std::unique_ptr<speculative::Drafter> real_;
  speculative::ScriptedDrafter oracle_;
};

struct Bench {
  const BenchOpts& o;
  const model::NemotronH& m;
  const model::DFlashModel* draft;
  ThreadConfig tc;
  std::vector<int32_t> prompt;                // the plain-speed prompt (random, or the first file)
  std::vector<std::vector<int32_t>> prompts;  // --prompt-file texts, tokenized
  Rng rng{42};
  nlohmann::json j;
  size_t state_bytes = 0;
  double decode_tok_s = 0;
  // --membw: the read probe before each repetition of plain() and after the last, and each
  // repetition's decode seconds, so that every repetition meets the bandwidth of its own minutes.
  std::vector<double> probes_gb_s{}, decode_s{};

  engine::GenerateRequest request(int64_t max_tokens) const { return request(max_tokens, prompt); }
  static engine::GenerateRequest request(int64_t max_tokens, const std::vector<int32_t>& p) {
    engine::GenerateRequest r;  // greedy, no stop tokens
    r.prompt = p;
    r.max_tokens = max_tokens;
    return r;
  }

  static nlohmann::json time_shares(const model::ForwardProfile& p) {
    const double tot = p.mamba_s + p.attention_s + p.moe_s + p.mlp_s + p.norms_s + p.lm_head_s;
    return {{"mamba", p.mamba_s / tot},       {"attention", p.attention_s / tot},
            {"moe", p.moe_s / tot},           {"mlp", p.mlp_s / tot},
            {"norms_embed", p.norms_s / tot}, {"lm_head", p.lm_head_s / tot}};
  }
  void show_shares(const char* what, const nlohmann::json& b) const {
    std::printf(
        "%-10s time share: mamba %.0f%%, attention %.0f%%, moe %.0f%%, mlp %.0f%%, norms/embed "
        "%.0f%%, "
        "lm_head %.0f%%\n",
        what, 100 * b["mamba"].get<double>(), 100 * b["attention"].get<double>(),
        100 * b["moe"].get<double>(), 100 * b["mlp"].get<double>(),
        100 * b["norms_embed"].get<double>(), 100 * b["lm_head"].get<double>());
  }

  // Prefill of the prompt, then --gen plain decode steps through the engine's decode loop.
  void plain() {
    double best_pf = 1e30, best_dec = 1e30;
    // Major page faults inside the timed steps: weights read from disk, because the page cache
    // did not hold them (--cold) or could not keep them after the warm-up (a 52-layer checkpoint
    // on a 24 GB machine).
    int64_t pf_faults = 0, dec_faults = 0, all_faults = 0;
    // Seconds and major faults of fn(); the fault counter is read outside the timed interval.
    const auto timed = [&all_faults](auto&& fn) {
      const int64_t f0 = major_page_faults();
      const double t0 = now_seconds();
      fn();
      const double t = now_seconds() - t0;
      const int64_t faults = major_page_faults() - f0;
      all_faults += faults;
      return std::pair{t, faults};
    };
    model::ForwardProfile pf_prof, dec_prof;
    std::optional<kernels::ReadProbe> probe;
    if (o.membw) probe.emplace();
    for (int rep = 0; rep < std::max(1, o.reps); ++rep) {
      if (probe) probes_gb_s.push_back(probe->measure(tc));
      engine::Generator g(m, tc);
      g.begin(request(o.gen + 1));
      g.set_profile(&pf_prof);
      const auto [t_pf, f_pf] = timed([&] { g.step(); });
      if (t_pf < best_pf) best_pf = t_pf, pf_faults = f_pf;
      g.set_profile(&dec_prof);
      const auto [t_dec, f_dec] = timed([&] {
        while (!g.done()) g.step();
      });
      if (o.gen > 0 && t_dec < best_dec) best_dec = t_dec, dec_faults = f_dec;
      decode_s.push_back(t_dec);
      state_bytes = g.state().bytes();
    }
    if (probe) probes_gb_s.push_back(probe->measure(tc));
    const double pf_tps = double(prompt.size()) / best_pf;
    decode_tok_s = o.gen > 0 ? double(o.gen) / best_dec : 0.0;
    const double dec_gb = double(m.decode_bytes_per_token()) / 1e9;
    j["prompt_tokens"] = prompt.size();
    j["prefill_tok_s"] = pf_tps;
    j["decode_tokens"] = o.gen;
    j["decode_tok_s"] = decode_tok_s;
    j["decode_runs_s"] = decode_s;  // every repetition's --gen steps, in order
    j["decode_gb_per_token"] = dec_gb;
    j["decode_gb_s"] = dec_gb * decode_tok_s;
    j["prefill_major_faults"] = pf_faults;  // of the repetitions reported
    j["decode_major_faults"] = dec_faults;
    j["timed_major_faults"] = all_faults;  // every repetition
    j["file_gb"] = double(m.store().file_bytes()) / 1e9;
    j["state_mb"] = double(state_bytes) / 1e6;
    // The experts this run routed to, per MoE layer (the check of tests/model/check_rss.sh).
    nlohmann::json used = nlohmann::json::object();
    for (const auto* prof : {&pf_prof, &dec_prof})
      for (size_t l = 0; l < prof->experts_used.size(); ++l)
        for (size_t e = 0; e < prof->experts_used[l].size(); ++e)
          if (prof->experts_used[l][e]) used[std::to_string(l)][std::to_string(e)] = 1;
    j["experts_used"] = nlohmann::json::object();
    for (const auto& [l, es] : used.items())
      for (const auto& [e, _] : es.items()) j["experts_used"][l].push_back(std::stoi(e));
    j["prefill_time_share"] = time_shares(pf_prof);
    if (o.gen > 0) j["decode_time_share"] = time_shares(dec_prof);
    if (o.json) return;
    const auto& cfg = m.config();
    std::printf("model      %s (%zu layers: %s)\n", j["model"].get<std::string>().c_str(),
                cfg.layers.size(), cfg.pattern().c_str());
    std::printf("threads    %d (%s kernels; %s)\n", tc.n_threads,
                kernels::isa_name(kernels::active_isa()), arith_summary(o.arith).c_str());
    std::printf("prefill    %lld tokens: %.2f tok/s\n", (long long)prompt.size(), pf_tps);
    std::printf("decode     %lld tokens: %.2f tok/s (%.3f GB of weights per token -> %.1f GB/s)\n",
                (long long)o.gen, decode_tok_s, dec_gb, dec_gb * decode_tok_s);
    show_shares("prefill", j["prefill_time_share"]);
    if (o.gen > 0) show_shares("decode", j["decode_time_share"]);
    if (pf_faults + dec_faults > 0)
      std::printf(
          "warning    the reported prefill / decode repetitions took %lld / %lld major page faults "
          "(reads from disk: the page cache did not hold the checkpoint, --cold or more than RAM "
          "keeps), so these numbers are below what the kernels do\n",
          (long long)pf_faults, (long long)dec_faults);
    std::fflush(stdout);
  }

  // The best decode repetition against the best probe (the machine at its fastest, both ways),
  // and each repetition against the mean of the probes just before and after it: on a host whose
  // bandwidth drifts by half within minutes (Zen 5 VM, 2026-12-06: 33-63 GB/s) a probe taken at
  // another time says little about the minutes a decode ran in.
  void roofline() {
    const double dec_gb = double(m.decode_bytes_per_token()) / 1e9;
    const double bw = *std::max_element(probes_gb_s.begin(), probes_gb_s.end());
    std::vector<double> paired;
    for (size_t i = 0; i < decode_s.size() && o.gen > 0; ++i)
      paired.push_back(double(o.gen) / decode_s[i] * dec_gb /
                       ((probes_gb_s[i] + probes_gb_s[i + 1]) / 2));
    j["read_bandwidth_gb_s"] = bw;
    j["read_bandwidth_probes_gb_s"] = probes_gb_s;
    const double share = decode_tok_s * dec_gb / bw;  // best against best
    j["roofline_tok_s"] = bw / dec_gb;
    j["roofline_fraction"] = share;
    const double mid = paired.empty() ? 0.0 : median(paired);
    const auto [lo, hi] = std::minmax_element(paired.begin(), paired.end());
    if (!paired.empty())
      j["roofline_fraction_paired"] = {
          {"median", mid}, {"min", *lo}, {"max", *hi}, {"runs", paired}};
    if (o.json) return;
    std::printf(
        "roofline   read bandwidth %.1f GB/s (best of %zu probes, one before each repetition and "
        "one after the last) -> %.2f tok/s; decode reaches %.0f%% (best against best)\n",
        bw, probes_gb_s.size(), bw / dec_gb, 100.0 * share);
    if (!paired.empty())
      std::printf(
          "           each repetition against the probes around it: median %.0f%% (%.0f-%.0f%%; "
          "probes %.1f-%.1f GB/s)\n",
          100 * mid, 100 * *lo, 100 * *hi,
          *std::min_element(probes_gb_s.begin(), probes_gb_s.end()), bw);
  }

  // Cost of one target forward of width w (recorded, as a verify round is) after the prompt, and
  // of rolling it back to one row, relative to one plain decode step.
  void verify_curve() {
    const int reps = std::max(3, o.reps);
    const int64_t V = m.config().vocab_size;
    std::vector<int32_t> rows(8);
    for (auto& t : rows) t = int32_t(rng.next() % uint64_t(V));
    // Widths interleaved: each round times one pass of every width in turn (one row without the
    // journal first: the decode step the floors are relative to), so that a slow spell of the
    // machine falls on every width alike rather than on the widths timed during it (timed one
    // width after another, 52 layers on Zen 5: the decode step 69.8 ms, the recorded one-row pass
    // right after it 60.0). One state, reset to the prompt's snapshot before each pass: its
    // journal and scratch buffers are warm, as in a decoding loop (a fresh state per pass measured
    // page faults: ~0.3 decode steps here). The first round is a warm-up; its profile says which
    // experts each width's rows routed to ([layer][expert]), whose bytes the pass reads at best
    // (shared matrices once, the union of its rows' experts once). Each round opens with an
    // untimed decode step: the pass right after a w = 8 round and its rollback ran ~10 % slower
    // than a decode step after another (52 layers, Zen 5: 67.3 against 61.1 ms, the standalone
    // decode 61.4), which made every width's floor that much too generous.
    struct Width {
      std::vector<double> ts, rb;
      model::ForwardProfile warm, timed;
    };
    std::vector<Width> runs(9);  // [0]: the decode step; [w]: w rows, recorded, then rolled back
    {
      auto st = m.new_state();
      m.forward(st, prompt, {}, tc);
      const model::SequenceState snap = st.snapshot();
      for (int r = -1; r < reps; ++r)
        for (int i = -1; i <= 8; ++i) {
          st.restore(snap);
          if (i < 0) {  // the settling step
            m.forward(st, std::span<const int32_t>(rows).first(1), {}, tc);
            continue;
          }
          Width& x = runs[size_t(i)];
          const bool record = i > 0;
          model::ForwardOptions fo;
          fo.all_logits = true;
          fo.record = record;
          fo.profile = r < 0 ? &x.warm : &x.timed;
          const double t0 = now_seconds();
          m.forward(st, std::span<const int32_t>(rows).first(size_t(std::max(1, i))), fo, tc);
          const double t = now_seconds() - t0;
          double t_rb = 0.0;
          if (record) {
            const double t1 = now_seconds();
            m.accept(st, 1, tc);  // worst case: replay from the pre-round state, keep one row
            t_rb = now_seconds() - t1;
          }
          if (r < 0) continue;
          x.ts.push_back(t);
          if (record) x.rb.push_back(t_rb);
        }
    }
    const std::vector<std::vector<uint8_t>>& used1 = runs[0].warm.experts_used;
    const double t1 = median(runs[0].ts);
    const int64_t b1 = m.bytes_read(used1);
    // The floor of width w in decode steps: its bytes over the 1-row step's, i.e. what the pass
    // would cost if every kernel ran at the 1-row step's bytes per second. With --membw the
    // floor at the measured read bandwidth as well.
    const double bw =
        j.contains("read_bandwidth_gb_s") ? j["read_bandwidth_gb_s"].get<double>() : 0.0;
    // The compute floor of width w: w rows of matrix multiply-adds, every one at the peak of the
    // instruction the multi-row passes use, on every thread (a pass cannot be faster than both
    // floors). The per-matrix floor: each product at the slower of its bytes at the step's rate
    // and its w rows' multiply-adds at the peak (a product's reading and arithmetic overlapped,
    // products in turn); where it is above the byte floor no kernel reaches the byte floor.
    const kernels::Arith arith = kernels::parse_arith(o.arith);
    const kernels::DotPeak peak = kernels::dot_peak_instruction(arith, kernels::active_isa());
    const double peak_macs_s = measure_dot_peak(tc, arith);
    const int64_t macs_row = m.matmul_macs_per_row();
    const double step_bytes_s = double(b1) / t1;  // the one-row step's rate
    j["dot_peak"] = {{"instruction", peak.instruction},
                     {"macs_per_s", peak_macs_s},
                     {"threads", tc.n_threads},
                     {"matmul_macs_per_row", macs_row}};
    nlohmann::json curve = nlohmann::json::array();
    if (!o.json) {
      std::printf(
          "compute    %s peak %.1f GMAC/s on %d thread(s); %.3f GMAC of matrix products a row "
          "(%.2f ms at that peak, %.2fx the decode step)\n",
          peak.instruction, peak_macs_s / 1e9, tc.n_threads, double(macs_row) / 1e9,
          double(macs_row) / peak_macs_s * 1e3, double(macs_row) / peak_macs_s / t1);
      std::printf(
          "verify     width (medians of %d rounds, the widths and the decode step interleaved): "
          "time (x one decode step, %.2f ms); byte floor (x step) = bytes read / the step's; "
          "time / floor%s; compute floor (x step) = the rows' multiply-adds at the peak; per "
          "matrix = each product at the slower of its bytes and its multiply-adds (time / that)\n",
          reps, t1 * 1e3, bw > 0 ? "; time / (bytes at the measured bandwidth)" : "");
    }
    for (int w = 1; w <= 8; ++w) {
      const Width& x = runs[size_t(w)];
      const double tw = median(x.ts), rb = median(x.rb);
      const std::vector<std::vector<uint8_t>>& used = x.warm.experts_used;
      const model::ForwardProfile& parts = x.timed;
      const int64_t bw_bytes = m.bytes_read(used);
      // The per-matrix floor, and its share in each part that the profile times (the parts'
      // floors beside their times show which part is furthest from its floor).
      double matrix_s = 0;
      std::array<double, size_t(model::NemotronH::CostPart::LmHead) + 1> part_floor_s{};
      int64_t matmul_bytes = 0;
      for (const auto& c : m.matmul_costs(used)) {
        matmul_bytes += c.bytes;
        const double s = std::max(double(c.bytes) / step_bytes_s,
                                  double(w) * double(c.macs_per_row) / peak_macs_s);
        matrix_s += s;
        part_floor_s[size_t(c.part)] += s;
      }
      const double other_s = double(bw_bytes - matmul_bytes) / step_bytes_s;  // embedding, norms
      matrix_s += other_s;
      // Mean seconds per pass in each part (the profile's timers sum over the timed passes).
      const double n_pass = double(std::max<int64_t>(1, reps));
      const nlohmann::json ms = {{"mamba", parts.mamba_s / n_pass * 1e3},
                                 {"attention", parts.attention_s / n_pass * 1e3},
                                 {"moe", parts.moe_s / n_pass * 1e3},
                                 {"mlp", parts.mlp_s / n_pass * 1e3},
                                 {"norms_embed", parts.norms_s / n_pass * 1e3},
                                 {"lm_head", parts.lm_head_s / n_pass * 1e3}};
      using CP = model::NemotronH::CostPart;
      const auto floor_ms = [&](CP p) { return part_floor_s[size_t(p)] * 1e3; };
      const nlohmann::json floor_parts = {
          {"mamba", floor_ms(CP::Mamba)}, {"attention", floor_ms(CP::Attention)},
          {"moe", floor_ms(CP::MoE)},     {"mlp", floor_ms(CP::Mlp)},
          {"norms_embed", other_s * 1e3}, {"lm_head", floor_ms(CP::LmHead)}};
      const double floor = double(bw_bytes) / double(std::max<int64_t>(1, b1));
      nlohmann::json e = {{"width", w},
                          {"seconds", tw},
                          {"relative", tw / t1},
                          {"bytes", bw_bytes},
                          {"floor_relative", floor},
                          {"over_floor", tw / t1 / floor},
                          {"rollback_s", rb},
                          {"rollback_relative", rb / t1},
                          {"part_ms", ms},
                          {"part_matrix_floor_ms", floor_parts}};
      if (bw > 0) e["over_bandwidth_floor"] = tw / (double(bw_bytes) / 1e9 / bw);
      const double compute_s = double(w) * double(macs_row) / peak_macs_s;
      e["macs"] = int64_t(w) * macs_row;
      e["compute_floor_relative"] = compute_s / t1;
      e["matrix_floor_relative"] = matrix_s / t1;
      curve.push_back(e);
      if (!o.json) {
        std::printf("           %d: %.2f ms (%.2fx)  floor %.2fx (%.3f GB)  %.2fx the floor", w,
                    tw * 1e3, tw / t1, floor, double(bw_bytes) / 1e9, tw / t1 / floor);
        if (bw > 0) std::printf("  %.2fx at %.1f GB/s", tw / (double(bw_bytes) / 1e9 / bw), bw);
        std::printf("  compute floor %.2fx, per matrix %.2fx (%.2fx that)", compute_s / t1,
                    matrix_s / t1, tw / matrix_s);
        std::printf("   rollback %.3f ms (%.3fx)\n", rb * 1e3, rb / t1);
        std::printf("              parts, ms (per-matrix floor at the step's rate):");
        const char* sep = " ";
        for (const char* part : {"mamba", "attention", "moe", "mlp", "lm_head"}) {
          if (part == std::string_view("mlp") && floor_parts[part].get<double>() == 0) continue;
          std::printf("%s%s %.1f (%.1f)", sep, part, ms[part].get<double>(),
                      floor_parts[part].get<double>());
          sep = ", ";
        }
        std::printf("\n");
      }
    }
    j["decode_step_s"] = t1;
    j["verify_rounds"] = reps;
    j["decode_step_bytes"] = b1;
    j["verify_curve"] = curve;
  }

  std::unique_ptr<speculative::Drafter> make_drafter(const std::string& kind,
                                                     const std::vector<int32_t>& script) {
    const int64_t V = m.config().vocab_size;
    if (kind == "ngram") return std::make_unique<speculative::NgramDrafter>();
    if (kind == "oracle") return std::make_unique<speculative::ScriptedDrafter>(script, false, V);
    if (kind == "wrong") return std::make_unique<speculative::ScriptedDrafter>(script, true, V);
    if (kind == "mtp") return std::make_unique<speculative::MtpDrafter>(m, tc);
    if (kind == "draft" || kind == "draft-oracle") {
      if (!draft) fail("--spec {} needs --draft DIR", kind);
      auto real = std::make_unique<speculative::DFlashDrafter>(*draft, tc);
      if (kind == "draft") return real;
      return std::make_unique<CostedOracle>(std::move(real), script, V);
    }
    fail("--spec '{}': expected none, ngram, mtp, oracle, wrong, draft, draft-oracle or all", kind);
  }

  // Speculative decoding per drafter and γ, side by side with plain decoding of the same prompts
  // (every --prompt-file, else the random prompt); every run must emit exactly the plain tokens.
  // Speeds and acceptance are totals over all prompts. With --reps N the whole comparison runs N
  // times, plain first in even repetitions and last in odd ones, and the speedup reported is the
  // median of the N paired ratios (this VM's speed drifts between processes and within one);
  // acceptance and the draft / verify / rollback seconds are the first repetition's.
  void speculation() {
    std::vector<std::string> kinds;
    if (o.spec == "all") {
      kinds = {"ngram", "oracle", "wrong"};
      if (model::MtpHead::present(m)) kinds.push_back("mtp");
      if (draft) kinds.insert(kinds.end(), {"draft", "draft-oracle"});
    } else {
      std::stringstream ss(o.spec);
      std::string k;
      while (std::getline(ss, k, ',')) kinds.push_back(k);
    }
    const std::vector<int> gammas = int_list(o.gammas);
    struct Total {
      speculative::SpecStats s;
      std::vector<double> secs;  // per repetition
      bool same = true;
    };
    const int reps = std::max(1, o.reps);
    std::vector<Total> tot(kinds.size() * gammas.size());
    for (auto& t : tot) t.secs.assign(size_t(reps), 0.0);
    std::vector<double> plain_s(size_t(reps), 0.0);
    int64_t plain_tokens = 0;
    const auto& ps = prompts.empty() ? std::vector<std::vector<int32_t>>{prompt} : prompts;
    for (size_t pi = 0; pi < ps.size(); ++pi) {
      const auto req = request(std::max<int64_t>(2, o.gen), ps[pi]);
      // The plain run that writes the script also warms the pages and buffers up.
      std::vector<int32_t> script;
      {
        engine::Generator warm(m, tc);
        warm.generate(req, [&](int32_t t) {
          script.push_back(t);
          return true;
        });
      }
      const auto run_plain = [&](int rep) {
        engine::Generator plain_gen(m, tc);
        std::vector<int32_t> out;
        const double t0 = now_seconds();
        const auto plain = plain_gen.generate(req, [&](int32_t t) {
          out.push_back(t);
          return true;
        });
        plain_s[size_t(rep)] += now_seconds() - t0 - plain.prefill_seconds;
        if (rep == 0) plain_tokens += plain.generated_tokens - 1;
        if (out != script) fail("plain decoding is not deterministic across repetitions");
      };
      for (int rep = 0; rep < reps; ++rep) {
        if (rep % 2 == 0) run_plain(rep);
        for (size_t ki = 0; ki < kinds.size(); ++ki)
          for (size_t gi = 0; gi < gammas.size(); ++gi) {
            engine::Generator gen(m, tc, make_drafter(kinds[ki], script), gammas[gi]);
            std::vector<int32_t> out;
            const double t1 = now_seconds();
            const auto s = gen.generate(req,
                                        [&](int32_t t) {
                                          out.push_back(t);
                                          return true;
                                        })
                               .spec;
            auto& t = tot[ki * gammas.size() + gi];
            t.secs[size_t(rep)] += now_seconds() - t1 - s.prefill_s;
            if (rep == 0) {
              t.s.add(s);
              t.s.emitted -= 1;  // the first token comes from the prefill, as in plain_tokens
            }
            t.same = t.same && out == script;
          }
        if (rep % 2 == 1) run_plain(rep);
      }
    }
    std::vector<double> plain_tps_rep;
    for (double secs : plain_s) plain_tps_rep.push_back(double(plain_tokens) / secs);
    const double plain_tps = median(plain_tps_rep);
    nlohmann::json runs = nlohmann::json::array();
    if (!o.json)
      std::printf("spec       plain decoding %.2f tok/s (%lld tokens, %zu prompt%s%s)\n", plain_tps,
                  (long long)plain_tokens, ps.size(), ps.size() == 1 ? "" : "s",
                  reps > 1 ? fmt::format("; median of {} runs", reps).c_str() : "");
    for (size_t ki = 0; ki < kinds.size(); ++ki)
      for (size_t gi = 0; gi < gammas.size(); ++gi) {
        const auto& [s, secs, same] = tot[ki * gammas.size() + gi];
        const auto& kind = kinds[ki];
        const int g = gammas[gi];
        std::vector<double> tps_rep, ratio;  // per repetition; ratio: paired with its plain run
        for (size_t r = 0; r < secs.size(); ++r) {
          tps_rep.push_back(double(s.emitted) / secs[r]);
          ratio.push_back(tps_rep.back() / plain_tps_rep[r]);
        }
        const double tps = median(tps_rep), speedup = median(ratio);
        const auto [lo, hi] = std::minmax_element(ratio.begin(), ratio.end());
        runs.push_back(
            {{"drafter", kind},
             {"gamma", g},
             {"tok_s", tps},
             {"speedup", speedup},
             {"speedup_runs", ratio},
             {"mean_accept_length", s.mean_accept_length()},
             {"acceptance_rate", s.acceptance_rate()},
             {"verify_calls", s.rounds},
             {"draft_s", s.draft_s},
             {"draft_ms_per_round", s.rounds ? 1e3 * s.draft_s / double(s.rounds) : 0.0},
             {"draft_gb_per_round",
              draft && kind.starts_with("draft") ? double(draft->round_bytes(g)) / 1e9 : 0.0},
             {"verify_s", s.verify_s},
             {"rollback_s", s.rollback_s},
             {"identical_to_plain", same}});
        if (!o.json)
          std::printf(
              "spec       %-6s gamma %d: %.2f tok/s (%.2fx%s), accept len %.2f, acceptance %.0f%%, "
              "draft %.2fs (%.2f ms/round) verify %.2fs rollback %.3fs%s\n",
              kind.c_str(), g, tps, speedup,
              reps > 1 ? fmt::format("; paired runs {:.2f}-{:.2f}x", *lo, *hi).c_str() : "",
              s.mean_accept_length(), 100.0 * s.acceptance_rate(), s.draft_s,
              s.rounds ? 1e3 * s.draft_s / double(s.rounds) : 0.0, s.verify_s, s.rollback_s,
              same ? "" : "  OUTPUT DIFFERS FROM PLAIN DECODING");
        if (!same)
          fail("speculative output differs from plain decoding (drafter {}, gamma {})", kind, g);
      }
    j["spec_plain_tok_s"] = plain_tps;
    j["spec"] = runs;
  }

  // The serving scheduler under load: for each concurrency c, 4c requests (distinct prompts of
  // --prompt-tokens, --gen tokens each, greedy) submitted at once with c decoding together.
  // Aggregate generated tok/s, time to first token p50/p99 (queueing included), rows per pass.
  void serving() {
    nlohmann::json runs = nlohmann::json::array();
    std::vector<int> cs = int_list(o.concurrency);
    std::vector<std::string> specs;
    std::stringstream ss(o.serve_spec);
    for (std::string t; std::getline(ss, t, ',');)
      if (!t.empty()) specs.push_back(t);
    for (const std::string& sp : specs)
      for (int c : cs) {
        if (c < 1 || c > 256) fail("--concurrency {}: expected 1..256", c);
        engine::Scheduler sched(m, {.threads = tc,
                                    .spec = engine::parse_spec_mode(sp),
                                    .drafter = draft,
                                    .max_active = c,
                                    .max_queue = 4 * c,
                                    .prefix_cache_bytes = 0});
        std::vector<std::shared_ptr<engine::RequestStream>> streams;
        const double t0 = now_seconds();
        for (int i = 0; i < 4 * c; ++i) {
          engine::RequestOptions r;
          r.prompt = prompt;
          r.prompt[0] = int32_t(uint64_t(i) % uint64_t(m.config().vocab_size));  // distinct
          r.max_tokens = std::max<int64_t>(1, o.gen);
          std::string why;
          streams.push_back(sched.submit(r, &why));
          if (!streams.back()) fail("bench: {}", why);
        }
        std::vector<double> ttft;
        int64_t generated = 0;
        for (auto& s : streams) {
          std::vector<engine::TokenOut> sink;
          while (!s->finished()) s->wait(sink, std::chrono::milliseconds(20));
          const auto sum = s->summary();
          if (sum.finish == engine::FinishReason::Error) fail("bench: {}", sum.error);
          ttft.push_back(sum.ttft_s);
          generated += sum.completion_tokens;
        }
        const double wall = now_seconds() - t0;
        std::sort(ttft.begin(), ttft.end());
        auto pct = [&](double p) { return ttft[size_t(p * double(ttft.size() - 1) + 0.5)]; };
        const auto mt = sched.metrics();
        const double rows =
            mt.forward_passes ? double(mt.forward_rows) / double(mt.forward_passes) : 0;
        runs.push_back({{"spec", engine::spec_mode_name(sched.default_spec())},
                        {"concurrency", c},
                        {"requests", 4 * c},
                        {"tok_s", double(generated) / wall},
                        {"ttft_p50_s", pct(0.5)},
                        {"ttft_p99_s", pct(0.99)},
                        {"rows_per_pass", rows},
                        {"mean_accept_length", mt.spec.mean_accept_length()}});
        if (!o.json)
          std::printf(
              "serve      %-5s c=%-3d %3d requests: %8.1f tok/s aggregate, TTFT p50 %.3f s p99 "
              "%.3f s, %.1f rows/pass%s\n",
              engine::spec_mode_name(sched.default_spec()), c, 4 * c, double(generated) / wall,
              pct(0.5), pct(0.99), rows,
              mt.spec.drafted
                  ? fmt::format(", accept length {:.2f}", mt.spec.mean_accept_length()).c_str()
                  : "");
      }
    j["serving"] = runs;
  }

  void memory(double load_s) {
    const double rss_gb = double(peak_rss_bytes()) / 1e9;
    j["peak_rss_gb"] = rss_gb;
    j["rss_mb"] = double(current_rss_bytes()) / 1e6;
    j["rss_anon_mb"] = double(current_rss_anon_bytes()) / 1e6;
    std::error_code ec;
    const auto dir = std::filesystem::canonical(m.store().dir(), ec);
    j["rss_checkpoint_mb"] = ec ? 0.0 : double(mapped_rss_bytes(dir.string() + "/")) / 1e6;
    // Of those, mapped in 2 MB pages (MappedFile asks for them; the file system decides).
    j["rss_checkpoint_huge_mb"] =
        ec ? 0.0 : double(mapped_rss_bytes(dir.string() + "/", "FilePmdMapped:")) / 1e6;
    if (o.json) return;
    std::printf("memory     peak RSS %.3f GB, checkpoint files %.3f GB, state %.1f MB\n", rss_gb,
                j["file_gb"].get<double>(), double(state_bytes) / 1e6);
    if (!j.value("no_mmap", false) && j["rss_checkpoint_mb"].get<double>() > 0)
      std::printf(
          "mapped     %.3f GB of checkpoint pages resident, %.0f%% of them in 2 MB pages\n",
          j["rss_checkpoint_mb"].get<double>() / 1e3,
          100.0 * j["rss_checkpoint_huge_mb"].get<double>() / j["rss_checkpoint_mb"].get<double>());
    std::printf("load       %.2f s\n", load_s);
    if (j.value("no_mmap", false))
      std::printf("weights    read into memory at load (--no-mmap)\n");
    else if (j.contains("warm_pages_s"))
      std::printf(
          "warm-up    every page of the %.3f GB of checkpoint files mapped in %.2f s (--cold: "
          "not)\n",
          j["warm_pages_gb"].get<double>(), j["warm_pages_s"].get<double>());
    else
      std::printf(
          "warm-up    none (--cold): first touches of expert pages fall inside timed steps\n");
  }
};

}  // namespace

std::vector<Command> make_bench_command() {
  auto bo = std::make_shared<BenchOpts>();
  std::vector<Command> v(1);
  v[0].attach_fn = [bo, sub = v[0].sub](CLI::App& app) {
    auto* s = app.add_subcommand(
        "bench", "Measure prefill/decode speed, memory, roofline and speculative decoding");
    s->add_option("-m,--model", bo->model,
                  "Model directory or name in models/ (default: tiny-code)");
    s->add_option("--prompt-tokens", bo->prompt, "Prefill length")
        ->check(in_range(1, 1 << 20))
        ->capture_default_str();
    s->add_option("--gen", bo->gen, "Decode steps")
        ->check(in_range(0, 1 << 20))
        ->capture_default_str();
    s->add_option("-t,--threads", bo->threads, "Threads (default: all cores)")
        ->check(threads_range());
    s->add_option("--reps", bo->reps,
                  "Repetitions (best is reported; with --spec, the median of paired plain / "
                  "speculative runs)")
        ->check(in_range(1, 1000))
        ->capture_default_str();
    s->add_flag("--json", bo->json, "Machine-readable output");
    s->add_option("--kv-cache", bo->kv_cache, "KV-cache storage: f32 | bf16 | fp8")
        ->capture_default_str();
    add_arith_option(s, bo->arith);
    s->add_flag("--membw", bo->membw,
                "Also measure memory read bandwidth (roofline): a probe before each repetition "
                "and after the last");
    s->add_flag("--no-mmap", bo->no_mmap,
                "Read the checkpoint into memory at load instead of mapping it (the time is in "
                "load_s)");
    s->add_flag("--cold", bo->cold,
                "Do not map every weight page before measuring: experts then pay their first-touch "
                "page faults inside the timed steps, and RSS shows only the pages the run read");
    s->add_option(
         "--spec", bo->spec,
         "Also run speculative decoding with: none | ngram | mtp | oracle | wrong | draft | "
         "draft-oracle | all (comma list)")
        ->capture_default_str();
    s->add_option("--gammas", bo->gammas, "Draft lengths to measure with --spec")
        ->check(int_list_range(1, 15))
        ->capture_default_str();
    s->add_option("--draft", bo->draft,
                  "DFlash / DSpark drafter (directory or name in models/): --spec draft (the "
                  "drafter) and draft-oracle (its cost, the oracle's "
                  "tokens: the speedup at 100% acceptance)");
    s->add_option("--prompt-file", bo->prompt_files,
                  "Text prompt(s) for --spec, tokenized with the model's tokenizer and cut to "
                  "--prompt-tokens "
                  "(repeatable; totals over all; default: one random prompt)")
        ->check(CLI::ExistingFile);
    s->add_option("--concurrency", bo->concurrency,
                  "Serving sweep: the scheduler with these many requests decoding together "
                  "(comma list, e.g. 1,2,4,8,16)")
        ->check(int_list_range(1, 256));
    s->add_option(
         "--serve-spec", bo->serve_spec,
         "Speculation modes of the serving sweep (comma list: none, auto, mtp, ngram, ...)")
        ->capture_default_str();
    s->add_flag(
        "--verify-curve", bo->verify_curve,
        "Cost of a verify forward of width 1..8 and of a rollback, relative to one decode step, "
        "beside its byte, compute and per-matrix floors");
    *sub = s;
  };
  v[0].run = [bo]() {
    auto dir = resolve_model_dir(bo->model);
    const double rss_before_load = double(current_rss_bytes()) / 1e6;
    const double rss_anon_before_load = double(current_rss_anon_bytes()) / 1e6;
    const double tl = now_seconds();
    auto m = model::NemotronH::load(dir->path, {.kv_dtype = model::parse_kv_dtype(bo->kv_cache),
                                                .no_mmap = bo->no_mmap,
                                                .packed_arith = arith_of(bo->arith)});
    const double load_s = now_seconds() - tl;
    std::unique_ptr<model::DFlashModel> draft;
    if (!bo->draft.empty()) draft = model::DFlashModel::load(resolve_draft_dir(bo->draft), *m);
    Bench b{
        *bo, *m, draft.get(), ThreadConfig{bo->threads > 0 ? bo->threads : default_thread_count()},
        {},  {}, Rng{42},     {}};
    b.prompt.resize(size_t(std::max<int64_t>(1, bo->prompt)));
    for (auto& t : b.prompt) t = int32_t(b.rng.next() % uint64_t(m->config().vocab_size));
    if (!bo->prompt_files.empty()) {
      const text::TextCodec codec(dir->path, m->config().vocab_size);
      if (!codec.has_tokenizer()) fail("--prompt-file: {} has no tokenizer.json", dir->path);
      for (const auto& f : bo->prompt_files) {
        auto ids = codec.encode(MappedFile(f).text());
        if (ids.empty()) fail("--prompt-file {}: no tokens", f);
        if (int64_t(ids.size()) > bo->prompt)
          ids.resize(size_t(bo->prompt));  // the first --prompt-tokens
        b.prompts.push_back(std::move(ids));
      }
      b.prompt = b.prompts[0];
    }
    b.j = {{"model", dir->path},
           {"layers", m->config().pattern()},
           {"threads", b.tc.n_threads},
           {"isa", kernels::isa_name(kernels::active_isa())},
           {"arith", bo->arith},
           {"kernel", arith_kernel_name(bo->arith)},
           {"load_s", load_s},
           {"rss_before_load_mb", rss_before_load},
           {"rss_anon_before_load_mb", rss_anon_before_load}};
    // Steady state, as in a server that has run a while (and as llama-bench's warm-up, which runs
    // every expert): every page of the checkpoint mapped before anything is timed.
    if (!bo->cold && !bo->no_mmap) {  // --no-mmap: every page was written at load
      const double tw = now_seconds();
      const double gb = double(m->store().touch_pages()) / 1e9;
      b.j["warm_pages_gb"] = gb;
      b.j["warm_pages_s"] = now_seconds() - tw;
    }
    b.j["cold"] = bo->cold;
    b.j["no_mmap"] = bo->no_mmap;
    b.plain();
    if (bo->membw) b.roofline();
    if (bo->verify_curve) b.verify_curve();
    if (bo->spec != "none") b.speculation();
    if (!bo->concurrency.empty()) b.serving();
    b.memory(load_s);
    if (bo->json) std::printf("%s\n", b.j.dump(2).c_str());
    return 0;
  };
  return v;
}

}  // namespace nemo::cli
