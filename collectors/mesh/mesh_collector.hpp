#pragma once
// The mesh collector (pingmesh): every node answers small signed UDP probes
// and probes a bounded set of its peers, each rail from its own address or
// device, and exports the round-trip time, what it sent and what it lost,
// per peer and rail. A fleet's recording rules turn that into the matrix
// of every pair (alerts/nodewatch-recording.yml, nodewatch-mesh) and find
// the pair that is slower than the node's others, or losing probes.
//
// Off by default; on, it opens no port unless `listen` is set, and probes
// nothing unless `peers_file` is. The engine (mesh_service.hpp) runs on a
// thread of its own and keeps its counts across reloads; collect() re-reads
// the key and peers files when they changed (through a helper process: a
// file on a hung mount never holds the daemon) and exports a snapshot.
//
// Failure contract (nodewatch/collector.hpp): a key or peers file that
// cannot be read or parsed is counted each collection ("key_error",
// "peers_error") while the last good one stays in use; a target that is
// not an address or name with a port is skipped and counted
// ("bad_target"); a socket that cannot be opened or bound is counted
// ("socket_error") and tried again every minute. Without a key nothing is
// sent and nothing answered.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "mesh/mesh_service.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/fs_helper.hpp"

namespace nodewatch {

// The catalog entry: name "mesh", off by default, every 15s.
const CollectorSpec& mesh_collector_spec();

namespace mesh {

struct MeshOptions {
  MeshSettings settings;
  std::string peers_file;  // absolute, "" for none
  std::string key_file;    // absolute; required with listen or peers_file
  bool operator==(const MeshOptions&) const = default;
};

MeshOptions read_mesh_options(OptionReader& r);
const MetricTable& mesh_metric_table();

class MeshCollector final : public Collector {
 public:
  MeshCollector(std::shared_ptr<MeshService> service, MeshOptions options,
                std::shared_ptr<sources::Faults> faults = nullptr);

  const MetricTable& metrics() const override { return mesh_metric_table(); }
  void collect(const CollectContext& ctx, MetricSink& out) override;

  MeshService& service() { return *service_; }

 private:
  // One file followed by its size and modification time.
  struct Followed {
    std::string path;
    std::unique_ptr<helper::Fs> fs;
    std::optional<std::pair<std::uint64_t, double>> seen;  // (size, mtime) last taken
  };
  // The file's text and its (size, mtime) as seen before it was read,
  // when it changed since it was last taken; nullopt when it did not or
  // could not be read (counted under `reason`). The caller takes it (sets
  // f.seen) once it parses, so that a bad file is read and counted again
  // each collection while it lasts.
  struct Changed {
    std::string text;
    std::pair<std::uint64_t, double> stat;
  };
  std::optional<Changed> changed_text(Followed& f, const helper::Deadline& d,
                                      std::string_view reason, bool private_file, MetricSink& out);

  std::shared_ptr<MeshService> service_;
  MeshOptions options_;
  Followed key_;
  Followed peers_;
  // The last problems of the peers file, re-counted while it stays the same.
  std::vector<std::string> peer_problems_;
  std::size_t peers_skipped_ = 0;
};

}  // namespace mesh
}  // namespace nodewatch
