// The hardware profile's JSON form (experts/hw_profile.h spells it): writing, and reading
// with every field checked, each error naming the field ("cpu_expert[2].type: ...").
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "experts/hw_profile.h"

namespace mt {

std::string hw_profile_to_json(const HwProfile& p) {
  nlohmann::ordered_json j;
  j["version"] = 1;
  j["source"] = p.source;
  j["date"] = p.date;
  j["cpu"] = p.cpu;
  j["threads"] = p.threads;
  j["host_read_gbps"] = nlohmann::ordered_json::array();
  for (const HostReadPoint& r : p.host_read) j["host_read_gbps"].push_back({{"threads", r.threads}, {"gbps", r.gbps}});
  j["cpu_expert"] = nlohmann::ordered_json::array();
  for (const CpuExpertSpeed& s : p.cpu_expert) {
    j["cpu_expert"].push_back(
        {{"type", type_name(s.type)}, {"decode_gbps", s.decode_gbps}, {"prefill_gflops", s.prefill_gflops}});
  }
  j["gpu"] = nullptr;
  if (p.has_gpu) {
    nlohmann::ordered_json g;
    g["name"] = p.gpu.name;
    g["device_gbps"] = p.gpu.device_gbps;
    g["h2d"] = nlohmann::ordered_json::array();
    for (const CopyPoint& c : p.gpu.h2d) {
      g["h2d"].push_back({{"bytes", c.bytes}, {"pinned_gbps", c.pinned_gbps}, {"pageable_gbps", c.pageable_gbps}});
    }
    j["gpu"] = std::move(g);
  }
  return j.dump(2);
}

namespace {

using Json = nlohmann::json;

Status bad_field(const std::string& field, const std::string& what) {
  return data_loss("hardware profile: " + field + ": " + what);
}

// The member `key` of object `j` (named `where` in messages), which must be present.
StatusOr<const Json*> member(const Json& j, const std::string& where, const char* key) {
  const auto it = j.find(key);
  if (it == j.end()) return bad_field(where + key, "missing");
  return &*it;
}

StatusOr<std::string> get_string(const Json& j, const std::string& where, const char* key) {
  MT_ASSIGN_OR_RETURN(const Json* v, member(j, where, key));
  if (!v->is_string()) return bad_field(where + key, "not a string");
  return v->get<std::string>();
}

// A positive finite number.
StatusOr<double> get_positive(const Json& j, const std::string& where, const char* key) {
  MT_ASSIGN_OR_RETURN(const Json* v, member(j, where, key));
  if (!v->is_number()) return bad_field(where + key, "not a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x <= 0) return bad_field(where + key, "must be > 0");
  return x;
}

// A positive integer no larger than `max`.
StatusOr<uint64_t> get_count(const Json& j, const std::string& where, const char* key, uint64_t max) {
  MT_ASSIGN_OR_RETURN(const Json* v, member(j, where, key));
  if (!v->is_number_integer()) return bad_field(where + key, "not an integer");  // signed or unsigned
  if (!v->is_number_unsigned() && v->get<int64_t>() < 0) return bad_field(where + key, "must be > 0");
  const uint64_t x = v->get<uint64_t>();
  if (x == 0 || x > max) return bad_field(where + key, "must be in 1.." + std::to_string(max));
  return x;
}

// An array of objects; each element's path is where + key + "[i].".
StatusOr<const Json*> get_objects(const Json& j, const std::string& where, const char* key) {
  MT_ASSIGN_OR_RETURN(const Json* v, member(j, where, key));
  if (!v->is_array()) return bad_field(where + key, "not an array");
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_object()) return bad_field(where + key + "[" + std::to_string(i) + "]", "not an object");
  }
  return v;
}

std::string at(const std::string& where, const char* key, size_t i) {
  return where + key + "[" + std::to_string(i) + "].";
}

StatusOr<GpuProfile> parse_gpu(const Json& g) {
  GpuProfile gpu;
  const std::string w = "gpu.";
  MT_ASSIGN_OR_RETURN(gpu.name, get_string(g, w, "name"));
  MT_ASSIGN_OR_RETURN(gpu.device_gbps, get_positive(g, w, "device_gbps"));
  MT_ASSIGN_OR_RETURN(const Json* h2d, get_objects(g, w, "h2d"));
  if (h2d->empty()) return bad_field("gpu.h2d", "no points");
  for (size_t i = 0; i < h2d->size(); ++i) {
    const std::string e = at(w, "h2d", i);
    CopyPoint c;
    MT_ASSIGN_OR_RETURN(c.bytes, get_count((*h2d)[i], e, "bytes", std::numeric_limits<uint64_t>::max()));
    MT_ASSIGN_OR_RETURN(c.pinned_gbps, get_positive((*h2d)[i], e, "pinned_gbps"));
    MT_ASSIGN_OR_RETURN(c.pageable_gbps, get_positive((*h2d)[i], e, "pageable_gbps"));
    if (!gpu.h2d.empty() && c.bytes <= gpu.h2d.back().bytes) return bad_field(e + "bytes", "not ascending");
    gpu.h2d.push_back(c);
  }
  return gpu;
}

StatusOr<HwProfile> parse(const Json& j) {
  if (!j.is_object()) return bad_field("(top level)", "not an object");
  HwProfile p;
  MT_ASSIGN_OR_RETURN(const Json* version, member(j, "", "version"));
  if (!version->is_number_integer() || version->get<int64_t>() != 1) return bad_field("version", "must be 1");
  MT_ASSIGN_OR_RETURN(p.source, get_string(j, "", "source"));
  if (p.source != "measured" && p.source != "assumed") return bad_field("source", "must be \"measured\" or \"assumed\"");
  MT_ASSIGN_OR_RETURN(p.date, get_string(j, "", "date"));
  MT_ASSIGN_OR_RETURN(p.cpu, get_string(j, "", "cpu"));
  MT_ASSIGN_OR_RETURN(const uint64_t threads, get_count(j, "", "threads", std::numeric_limits<uint32_t>::max()));
  p.threads = static_cast<uint32_t>(threads);

  MT_ASSIGN_OR_RETURN(const Json* reads, get_objects(j, "", "host_read_gbps"));
  if (reads->empty()) return bad_field("host_read_gbps", "no points");
  for (size_t i = 0; i < reads->size(); ++i) {
    const std::string e = at("", "host_read_gbps", i);
    HostReadPoint r;
    MT_ASSIGN_OR_RETURN(const uint64_t t, get_count((*reads)[i], e, "threads", std::numeric_limits<uint32_t>::max()));
    r.threads = static_cast<uint32_t>(t);
    MT_ASSIGN_OR_RETURN(r.gbps, get_positive((*reads)[i], e, "gbps"));
    if (!p.host_read.empty() && r.threads <= p.host_read.back().threads) return bad_field(e + "threads", "not ascending");
    p.host_read.push_back(r);
  }

  MT_ASSIGN_OR_RETURN(const Json* experts, get_objects(j, "", "cpu_expert"));
  for (size_t i = 0; i < experts->size(); ++i) {
    const std::string e = at("", "cpu_expert", i);
    CpuExpertSpeed s;
    MT_ASSIGN_OR_RETURN(const std::string name, get_string((*experts)[i], e, "type"));
    const std::optional<QuantType> type = type_from_name(name);
    if (!type) return bad_field(e + "type", "unknown quant type '" + name + "'");
    s.type = *type;
    for (const CpuExpertSpeed& prev : p.cpu_expert) {
      if (prev.type == s.type) return bad_field(e + "type", "'" + name + "' listed twice");
    }
    MT_ASSIGN_OR_RETURN(s.decode_gbps, get_positive((*experts)[i], e, "decode_gbps"));
    MT_ASSIGN_OR_RETURN(s.prefill_gflops, get_positive((*experts)[i], e, "prefill_gflops"));
    p.cpu_expert.push_back(s);
  }

  MT_ASSIGN_OR_RETURN(const Json* gpu, member(j, "", "gpu"));
  if (!gpu->is_null()) {
    if (!gpu->is_object()) return bad_field("gpu", "neither null nor an object");
    MT_ASSIGN_OR_RETURN(p.gpu, parse_gpu(*gpu));
    p.has_gpu = true;
  }
  return p;
}

}  // namespace

StatusOr<HwProfile> hw_profile_from_json(const std::string& text) {
  try {
    return parse(Json::parse(text));
  } catch (const Json::exception& e) {  // a parse error, or anything nlohmann refuses
    return data_loss(std::string("hardware profile: not valid JSON: ") + e.what());
  }
}

StatusOr<HwProfile> read_hw_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open hardware profile '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return io_error("cannot read hardware profile '" + path + "'");
  StatusOr<HwProfile> p = hw_profile_from_json(text.str());
  if (!p.ok()) return Status(p.status().code(), path + ": " + p.status().message());
  return p;
}

}  // namespace mt
