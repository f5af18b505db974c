// `tandem plan scaling RUN_DIR`: the step time, throughput and scaling
// efficiency of a profiled run's model and batch on D devices per host x
// H hosts (train/scaling_plan.h), with the links given as
// `tandem bench allreduce --json` tables or as numbers, for each way of
// keeping the replicas in step (--modes); where the time goes, the best
// bucket size for each link and wire, and the fastest setting.
// docs/multi_host.md.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "tandem/base/error.h"
#include "tandem/base/parse_number.h"
#include "tandem/cli/commands.h"
#include "tandem/cli/scaling_profile.h"
#include "tandem/train/scaling_plan.h"

namespace tandem::cli {
namespace {

using nlohmann::json;

struct ScalingOptions {
  std::string run_dir;
  std::string profile;  // a profile described in JSON, instead of a run
  std::string hosts = "1,2,4,8";
  std::string devices_per_host = "1";
  std::vector<std::string> links;  // bench allreduce --json files, one per wire dtype
  std::string local_link;
  bool spare_core = false;
  double link_gbps = 0.0, link_latency_us = 50.0;
  double local_gbps = 0.0, local_latency_us = 10.0;
  std::string wire = "f32,bf16";
  std::string modes = "all-reduce";
  std::optional<double> bucket_mb;  // default: 25 MiB, 1 under zero2 (as training)
  int small_collectives = 6;
  bool json = false;
};

struct LinkTable {
  train::LinkModel model;
  std::string wire;  // what the bench sent: f32, or the compressed all-reduce's bf16/f16
};

LinkTable read_link_table(const std::string& file) {
  const json table = read_json(file, "all-reduce table");
  if (!table.contains("results") || !table["results"].is_array() || !table.contains("ranks"))
    TANDEM_THROW(InvalidArgument, "'", file, "' is not the JSON of tandem bench allreduce --json");
  std::vector<train::MeasuredAllReduce> rows;
  for (const json& row : table["results"]) {
    const bool busy = row.contains("busy_time_us");  // measured with --busy-threads
    rows.push_back({.bytes = number_at(row, "bytes", file),
                    .seconds = number_at(row, "time_us", file) * 1e-6,
                    .busy_seconds = busy ? number_at(row, "busy_time_us", file) * 1e-6 : 0.0,
                    .busy_compute_rate = busy ? number_at(row, "busy_compute_rate", file) : 1.0});
  }
  if (table.value("dtype", "f32") != "f32")
    TANDEM_THROW(InvalidArgument, "'", file, "' measured ", table.value("dtype", "?"),
                 " buffers; the planner needs f32 gradients (bench allreduce --dtype f32, and "
                 "--wire for compression)");
  const std::string wire = table.value("wire", "f32");
  if (wire != "f32" && wire != "bf16" && wire != "f16")
    TANDEM_THROW(InvalidArgument, "'", file, "' has an unknown wire '", wire, "'");
  return {
      .model = train::fit_link(rows, static_cast<int>(count_at(table, "ranks", file, 1, 1000000))),
      .wire = wire};
}

// A link from numbers.
train::LinkModel link_from_numbers(double gbps, double latency_us, const char* flag) {
  if (!(gbps > 0.0) || !std::isfinite(gbps) || !(latency_us >= 0.0) || !std::isfinite(latency_us)) {
    TANDEM_THROW(InvalidArgument, flag, " needs a table (", flag,
                 " FILE) or a positive bandwidth in GB/s and a latency >= 0 us");
  }
  return {.latency = latency_us * 1e-6, .bus_bandwidth = gbps * 1e9};
}

// The hosts' link for one wire dtype: a table measured with that wire's
// compressed all-reduce (conversions and their CPU included) when given,
// else the f32 table or the numbers, with the wire's bytes per element.
struct WireLink {
  train::LinkModel model;
  int bytes_per_element = 4;
};

WireLink link_for_wire(const std::vector<LinkTable>& tables, const train::LinkModel& numbers,
                       const std::string& wire) {
  const int narrow = wire == "f32" ? 4 : 2;
  if (tables.empty()) return {numbers, narrow};
  for (const LinkTable& t : tables)
    if (t.wire == wire) return {t.model, 4};
  for (const LinkTable& t : tables)
    if (t.wire == "f32") return {t.model, narrow};
  TANDEM_THROW(InvalidArgument, "--wire ", wire, " needs a --link table measured with --wire ",
               wire, " or with f32");
}

// One --modes item: a way of keeping the replicas in step, as training's flags choose it.
struct PlannedMode {
  std::string name;  // as given
  train::UpdateMode mode = train::UpdateMode::all_reduce;
  int count = 0;  // local SGD's K, the parameter server's shards
};

PlannedMode parse_mode(const std::string& item) {
  const size_t colon = item.find(':');
  const std::string kind = item.substr(0, colon);
  PlannedMode m{.name = item};
  const std::pair<const char*, train::UpdateMode> kinds[] = {
      {"all-reduce", train::UpdateMode::all_reduce},
      {"zero1", train::UpdateMode::zero1},
      {"zero2", train::UpdateMode::zero2},
      {"local-sgd", train::UpdateMode::local_sgd},
      {"ps-sync", train::UpdateMode::ps_synchronous},
      {"ps-async", train::UpdateMode::ps_asynchronous}};
  const auto* found = std::find_if(std::begin(kinds), std::end(kinds),
                                   [&](const auto& k) { return kind == k.first; });
  if (found == std::end(kinds)) {
    TANDEM_THROW(InvalidArgument, "--modes: unknown mode '", item,
                 "' (all-reduce, zero1, zero2, local-sgd:K, ps-sync:SHARDS, ps-async:SHARDS)");
  }
  m.mode = found->second;
  const bool counted = m.mode == train::UpdateMode::local_sgd ||
                       m.mode == train::UpdateMode::ps_synchronous ||
                       m.mode == train::UpdateMode::ps_asynchronous;
  if (colon == std::string::npos) {
    m.count = m.mode == train::UpdateMode::local_sgd ? 8 : 1;
    if (counted) m.name += m.mode == train::UpdateMode::local_sgd ? ":8" : ":1";
    return m;
  }
  const std::optional<int64_t> n = parse_number<int64_t>(item.substr(colon + 1));
  if (!counted || !n || *n < 1 || *n > 1000000) {
    TANDEM_THROW(InvalidArgument, "--modes: '", item, "': ",
                 counted ? "the count after ':' must be 1 to 1000000"
                         : "only local-sgd, ps-sync and ps-async take a count");
  }
  m.count = static_cast<int>(*n);
  return m;
}

// Whether a mode sends the gradients in the wire dtype (training refuses
// --wire with the others).
bool takes_wire(train::UpdateMode mode) {
  return mode == train::UpdateMode::all_reduce || mode == train::UpdateMode::zero1;
}

bool bucketed(train::UpdateMode mode) {
  return mode == train::UpdateMode::all_reduce || mode == train::UpdateMode::zero1 ||
         mode == train::UpdateMode::zero2;
}

std::vector<int> counts(const std::string& text, const char* flag) {
  std::vector<int> out;
  for (const std::string& item : split_list(text)) {
    const std::optional<int64_t> n = parse_number<int64_t>(item);
    if (!n || *n < 1 || *n > 1000000)
      TANDEM_THROW(InvalidArgument, flag, " takes counts from 1 to 1000000, got '", item, "'");
    out.push_back(static_cast<int>(*n));
  }
  if (out.empty()) TANDEM_THROW(InvalidArgument, flag, " needs at least one count");
  return out;
}

// The links of the plan: the hosts' per wire (tables or numbers) and the
// local one.
struct Links {
  std::vector<LinkTable> host_tables;
  train::LinkModel host_numbers;
  train::LinkModel local;
  bool hosts = false, within_host = false;  // needed by some row
};

Links read_links(const ScalingOptions& o, bool need_hosts, bool need_local,
                 const std::vector<std::string>& wires) {
  Links links{.hosts = need_hosts, .within_host = need_local};
  // A table and numbers for one link: one of them would be ignored.
  if (!o.links.empty() && o.link_gbps != 0.0)
    TANDEM_THROW(InvalidArgument,
                 "--link FILE and --link-gbps both describe the hosts' link; give one");
  if (!o.local_link.empty() && o.local_gbps != 0.0) {
    TANDEM_THROW(InvalidArgument,
                 "--local-link FILE and --local-gbps both describe a host's link; give one");
  }
  if (need_hosts) {
    for (const std::string& file : o.links) {
      links.host_tables.push_back(read_link_table(file));
      for (size_t i = 0; i + 1 < links.host_tables.size(); ++i)
        if (links.host_tables[i].wire == links.host_tables.back().wire)
          TANDEM_THROW(InvalidArgument, "two --link tables were measured with wire ",
                       links.host_tables.back().wire, "; give one per wire dtype");
    }
    if (links.host_tables.empty())
      links.host_numbers = link_from_numbers(o.link_gbps, o.link_latency_us, "--link");
    for (const std::string& w : wires) link_for_wire(links.host_tables, links.host_numbers, w);
  }
  if (need_local) {
    if (o.local_link.empty()) {
      links.local = link_from_numbers(o.local_gbps, o.local_latency_us, "--local-link");
    } else {
      const LinkTable local = read_link_table(o.local_link);
      if (local.wire != "f32")
        TANDEM_THROW(InvalidArgument, "--local-link: a host's devices reduce in f32, but '",
                     o.local_link, "' was measured with wire ", local.wire);
      links.local = local.model;
    }
  }
  return links;
}

void print_plan_header(const ScalingProfile& profile, const Links& links, bool spare_core) {
  const train::StepProfile& s = profile.step;
  fmt::print(
      "{}: {} parameters, {} examples per device, one-device step {:.2f} ms (forward "
      "{:.2f}, backward {:.2f}, optimizer {:.2f}, other {:.2f}{}); gradients ready by {}\n",
      profile.model, profile.parameters, s.examples, 1e3 * s.one_device_step(), 1e3 * s.forward,
      1e3 * s.backward, 1e3 * s.optimizer, 1e3 * s.other,
      profile.devices > 1
          ? fmt::format("; the mean of {} mirrored devices computing at once", profile.devices)
          : "",
      profile.readiness);
  const auto describe = [](const char* where, const train::LinkModel& m, const std::string& wire) {
    fmt::print(
        "{}{}: {:.4g} GB/s bus bandwidth, {:.1f} us per small collective; while the host "
        "computes, all-reduce at {:.0f}% and compute at {:.0f}% of their speeds alone\n",
        where, wire.empty() ? "" : " (measured with wire " + wire + ")", m.bus_bandwidth / 1e9,
        m.latency * 1e6, 100.0 * m.shared_speed, 100.0 * m.compute_speed);
  };
  if (links.hosts && links.host_tables.empty()) describe("between hosts", links.host_numbers, "");
  for (const LinkTable& t : links.host_tables) describe("between hosts", t.model, t.wire);
  if (links.within_host) describe("within a host", links.local, "");
  if (spare_core) fmt::print("communication runs on a spare core of each host (--spare-core)\n");
  fmt::print(
      "{:>6} {:>8} {:>12} {:>5} {:>9} {:>10} {:>7} {:>11} {:>10} {:>9} {:>9} {:>11} {:>12}\n",
      "hosts", "devices", "mode", "wire", "step(ms)", "ex/s", "eff(%)", "exposed(ms)", "shared(ms)",
      "small(ms)", "update(ms)", "busy(ms)", "best bucket");
}

// Buckets as the Trainer sizes them: the first at most 1 MiB.
void set_bucket_mb(train::ScalingSetup& setup, double mb) {
  setup.bucket_bytes = static_cast<int64_t>(mb * (1 << 20));
  setup.first_bucket_bytes = std::min<int64_t>(setup.bucket_bytes, int64_t{1} << 20);
}

struct PlanRow {
  int hosts = 1, devices = 1;
  std::string mode, wire;
  train::UpdateMode update = train::UpdateMode::all_reduce;
  train::ScalingPrediction prediction;
  std::optional<double> best_bucket_mb;  // bucketed modes: the size with the shortest step
  double best_step = 0.0;                // with it
};

PlanRow plan_row(const ScalingProfile& profile, const Links& links, train::ScalingSetup setup,
                 const PlannedMode& mode, const std::string& wire,
                 std::optional<double> bucket_mb) {
  setup.mode = mode.mode;
  if (mode.mode == train::UpdateMode::local_sgd) setup.sync_every = mode.count;
  if (mode.mode == train::UpdateMode::ps_synchronous ||
      mode.mode == train::UpdateMode::ps_asynchronous)
    setup.ps_shards = mode.count;
  // The Trainer's default bucket under ZeRO-2 is 1 MiB (three staging slots).
  set_bucket_mb(setup, bucket_mb.value_or(mode.mode == train::UpdateMode::zero2 ? 1.0 : 25.0));
  if (setup.hosts > 1) {
    const WireLink link = link_for_wire(links.host_tables, links.host_numbers, wire);
    setup.between_hosts = link.model;
    setup.wire_bytes = link.bytes_per_element;
  }
  PlanRow row{.hosts = setup.hosts,
              .devices = setup.devices_per_host,
              .mode = mode.name,
              .wire = wire,
              .update = mode.mode,
              .prediction = train::predict_scaling(profile.step, setup)};
  row.best_step = row.prediction.step;
  if (bucketed(mode.mode)) {
    row.best_bucket_mb = static_cast<double>(setup.bucket_bytes) / (1 << 20);
    for (double mb : {0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0}) {
      train::ScalingSetup trial = setup;
      set_bucket_mb(trial, mb);
      const double step = train::predict_scaling(profile.step, trial).step;
      if (step < row.best_step * 0.999) row.best_step = step, row.best_bucket_mb = mb;
    }
  }
  return row;
}

json row_json(const PlanRow& r) {
  const train::ScalingPrediction& p = r.prediction;
  return {{"hosts", r.hosts},
          {"devices_per_host", r.devices},
          {"mode", r.mode},
          {"wire", r.wire},
          {"step_seconds", p.step},
          {"examples_per_second", p.examples_per_second},
          {"efficiency", p.efficiency},
          {"optimizer_seconds", p.optimizer},
          {"exposed_communication_seconds", p.exposed_communication},
          {"compute_slowdown_seconds", p.compute_slowdown},
          {"small_collectives_seconds", p.small_collectives},
          {"update_communication_seconds", p.update_communication},
          {"communication_busy_seconds", p.communication_busy},
          {"buckets", p.buckets.size()},
          {"best_bucket_mb", r.best_bucket_mb ? json(*r.best_bucket_mb) : json(nullptr)},
          {"best_step_seconds", r.best_step}};
}

void print_row(const PlanRow& r) {
  const train::ScalingPrediction& p = r.prediction;
  fmt::print(
      "{:>6} {:>8} {:>12} {:>5} {:>9.2f} {:>10.0f} {:>7.1f} {:>11.2f} {:>10.2f} {:>9.2f} {:>9.2f} "
      "{:>11.2f} {:>12}\n",
      r.hosts, r.devices, r.mode, r.wire, 1e3 * p.step, p.examples_per_second, 100.0 * p.efficiency,
      1e3 * p.exposed_communication, 1e3 * p.compute_slowdown, 1e3 * p.small_collectives,
      1e3 * p.update_communication, 1e3 * p.communication_busy,
      r.best_bucket_mb ? fmt::format("{:g} MiB", *r.best_bucket_mb) : "-");
}

// Whether a mode's updates are those of one device on the whole batch
// (local SGD and asynchronous updates are not).
bool same_updates(train::UpdateMode mode) {
  return mode != train::UpdateMode::local_sgd && mode != train::UpdateMode::ps_asynchronous;
}

// The fastest of one hosts x devices' rows at its best bucket size, of
// those with one device's updates when `same` is set; null when none.
const PlanRow* best_of(const std::vector<PlanRow>& rows, bool same) {
  const PlanRow* best = nullptr;
  for (const PlanRow& r : rows)
    if ((!same || same_updates(r.update)) && (best == nullptr || r.best_step < best->best_step))
      best = &r;
  return best;
}

std::string describe_best(const PlanRow& r, int64_t examples) {
  const double devices = static_cast<double>(r.hosts) * r.devices;
  return fmt::format(
      "{}{}{}: {:.2f} ms, {:.0f} ex/s", r.mode, r.wire == "f32" ? "" : " with wire " + r.wire,
      r.best_bucket_mb ? fmt::format(" and {:g} MiB buckets", *r.best_bucket_mb) : "",
      1e3 * r.best_step, devices * static_cast<double>(examples) / r.best_step);
}

int run_plan_scaling(const ScalingOptions& o) {
  const std::vector<int> hosts = counts(o.hosts, "--hosts");
  const std::vector<int> devices = counts(o.devices_per_host, "--devices-per-host");
  const std::vector<std::string> wires = split_list(o.wire);
  for (const std::string& w : wires) {
    if (w != "f32" && w != "bf16" && w != "f16")
      TANDEM_THROW(InvalidArgument, "--wire takes f32, bf16 or f16, got '", w, "'");
  }
  if (wires.empty()) TANDEM_THROW(InvalidArgument, "--wire needs at least one dtype");
  std::vector<PlannedMode> modes;
  for (const std::string& item : split_list(o.modes)) modes.push_back(parse_mode(item));
  if (modes.empty()) TANDEM_THROW(InvalidArgument, "--modes needs at least one mode");
  // The wires each mode plans: the compressing ones every --wire; the others f32.
  const auto wires_of = [&](const PlannedMode& m) {
    return takes_wire(m.mode) ? wires : std::vector<std::string>{"f32"};
  };
  std::vector<std::string> needed_wires;
  for (const PlannedMode& m : modes)
    for (const std::string& w : wires_of(m))
      if (std::find(needed_wires.begin(), needed_wires.end(), w) == needed_wires.end())
        needed_wires.push_back(w);
  if (o.bucket_mb && !(*o.bucket_mb > 0.0 && *o.bucket_mb <= 65536.0))
    TANDEM_THROW(InvalidArgument, "--bucket-mb must be > 0 and at most 65536, got ", *o.bucket_mb);
  if (o.small_collectives < 0 || o.small_collectives > 1000)
    TANDEM_THROW(InvalidArgument, "--small-collectives must be 0 to 1000, got ",
                 o.small_collectives);
  if (o.run_dir.empty() == o.profile.empty())
    TANDEM_THROW(InvalidArgument,
                 "give a run directory (one device, or the mirrored devices of one host) or "
                 "--profile FILE.json (one of them)");
  const ScalingProfile profile =
      o.profile.empty() ? profile_from_run(o.run_dir) : profile_from_json(o.profile);
  const Links links =
      read_links(o, *std::max_element(hosts.begin(), hosts.end()) > 1,
                 *std::max_element(devices.begin(), devices.end()) > 1, needed_wires);
  train::ScalingSetup base;
  base.spare_core = o.spare_core;
  base.local = links.local;
  base.small_collectives_per_step = o.small_collectives;

  json rows = json::array(), best = json::array();
  if (!o.json) print_plan_header(profile, links, o.spare_core);
  for (int h : hosts) {
    for (int d : devices) {
      base.hosts = h;
      base.devices_per_host = d;
      std::vector<PlanRow> planned;
      for (const PlannedMode& mode : modes) {
        for (const std::string& wire : wires_of(mode)) {
          planned.push_back(plan_row(profile, links, base, mode, wire, o.bucket_mb));
          if (o.json)
            rows.push_back(row_json(planned.back()));
          else
            print_row(planned.back());
        }
      }
      const PlanRow* fastest = best_of(planned, false);
      const PlanRow* exact = best_of(planned, true);
      if (o.json) {
        const auto setting = [](const PlanRow* r) {
          if (r == nullptr) return json(nullptr);
          return json{{"mode", r->mode},
                      {"wire", r->wire},
                      {"bucket_mb", r->best_bucket_mb ? json(*r->best_bucket_mb) : json(nullptr)},
                      {"step_seconds", r->best_step}};
        };
        best.push_back({{"hosts", h},
                        {"devices_per_host", d},
                        {"fastest", setting(fastest)},
                        {"fastest_synchronous", setting(exact)}});
      } else if (planned.size() > 1 && h * d > 1) {
        fmt::print("{:>6} {:>8} best: {}{}\n", h, d, describe_best(*fastest, profile.step.examples),
                   same_updates(fastest->update) ? "" : " (other updates: docs/sync_async.md)");
        if (exact != nullptr && exact != fastest) {
          fmt::print("{:>6} {:>8} best with synchronous updates: {}\n", h, d,
                     describe_best(*exact, profile.step.examples));
        }
      }
    }
  }
  if (o.json) {
    fmt::print("{}\n", json{{"model", profile.model},
                            {"parameters", profile.parameters},
                            {"examples_per_device", profile.step.examples},
                            {"one_device_step_seconds", profile.step.one_device_step()},
                            {"predictions", rows},
                            {"best", best}}
                           .dump(2));
  }
  return 0;
}

}  // namespace

Command add_plan_scaling_command(CLI::App& plan) {
  CLI::App* command = plan.add_subcommand(
      "scaling",
      "Predict step time and scaling efficiency on D devices per host x H hosts from a profiled "
      "run (one device, or one host's mirrored devices) and link models");
  auto o = std::make_shared<ScalingOptions>();
  command->add_option("run_dir", o->run_dir,
                      "A run directory (tandem train --output) of one device, or of a mirrored "
                      "run over one host's devices (their compute under each other's load)");
  command->add_option(
      "--profile", o->profile,
      "Instead of a run: a device and model described in JSON (docs/multi_host.md)");
  command->add_option("--hosts", o->hosts, "Host counts, comma-separated")->capture_default_str();
  command
      ->add_option("--devices-per-host", o->devices_per_host, "Devices per host, comma-separated")
      ->capture_default_str();
  command
      ->add_option("--link", o->links,
                   "The hosts' link: `tandem bench allreduce --backend mpi --json` tables "
                   "measured between two hosts, one per --wire of the bench (comma-separated); "
                   "a wire without its own table uses the f32 one at its bytes per element")
      ->delimiter(',');
  command->add_option("--link-gbps", o->link_gbps, "... or its bus bandwidth in GB/s");
  command
      ->add_option("--link-latency-us", o->link_latency_us,
                   "... and a small collective's time in us")
      ->capture_default_str();
  command->add_option("--local-link", o->local_link,
                      "The devices of a host: a `tandem bench allreduce --ranks D --json` table");
  command->add_option("--local-gbps", o->local_gbps, "... or its bus bandwidth in GB/s");
  command
      ->add_option("--local-latency-us", o->local_latency_us,
                   "... and a small collective's time in us")
      ->capture_default_str();
  command
      ->add_option("--wire", o->wire, "Wire dtypes between hosts: f32, bf16, f16 (comma-separated)")
      ->capture_default_str();
  command->add_option("--bucket-mb", o->bucket_mb,
                      "Gradient bucket size in MiB (as training's: default 25, 1 under zero2)");
  command
      ->add_option("--modes", o->modes,
                   "How the replicas keep in step, comma-separated: all-reduce, zero1, zero2 "
                   "(--zero), local-sgd:K (--sync-every K), ps-sync:SHARDS and "
                   "ps-async:SHARDS (--strategy parameter-server --ps SHARDS, --max-staleness 0 "
                   "or unbounded)")
      ->capture_default_str();
  command
      ->add_option("--small-collectives", o->small_collectives,
                   "Small collectives per step outside the buckets")
      ->capture_default_str();
  command->add_flag("--spare-core", o->spare_core,
                    "Each host keeps a core free of compute for communication (by default an "
                    "all-reduce and backward share the cores at the speeds bench allreduce "
                    "--busy-threads measured)");
  command->add_flag("--json", o->json, "Print the predictions as JSON");
  return {command, [o]() { return run_plan_scaling(*o); }};
}

}  // namespace tandem::cli
