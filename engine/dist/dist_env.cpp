// dist_env_from_environment: the rank variables of torchrun, Slurm or Open MPI, and the store's address.
#include "engine/dist/dist_env.h"

#include <cstdlib>
#include <exception>

#include "engine/errors.h"
#include "data/limits.h"

namespace pinfeed::engine {
namespace {

std::string getenv_or(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

int env_int(const char* name, int fallback, int lo, int hi) {
  std::string v = getenv_or(name);
  if (v.empty()) return fallback;
  // Slurm writes SLURM_NTASKS_PER_NODE as "4", or "4(x2),3" for uneven nodes: the leading count is taken
  // (it sizes the decode threads per rank).
  if (std::string(name) == "SLURM_NTASKS_PER_NODE") v = v.substr(0, v.find_first_not_of("0123456789"));
  try {
    size_t used = 0;
    const long n = std::stol(v, &used);
    if (used == v.size() && n >= lo && n <= hi) return static_cast<int>(n);
  } catch (const std::exception&) {
  }
  throw RankSetupError("environment: " + std::string(name) + "=" + v + " must be an integer in [" + std::to_string(lo) +
                    ", " + std::to_string(hi) + "]");
}

// The first launcher whose rank variable is set: torchrun, then Slurm, then Open MPI.
void read_ranks(DistEnv& e) {
  struct Names {
    const char *rank, *world, *local_rank, *local_world;
  };
  const Names launchers[] = {{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
                             {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
                             {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                              "OMPI_COMM_WORLD_LOCAL_SIZE"}};
  for (const Names& n : launchers) {
    if (getenv_or(n.rank).empty()) continue;
    e.world = env_int(n.world, -1, 1, data::kMaxRanks);
    if (e.world < 0) throw RankSetupError(std::string("environment: ") + n.rank + " is set but " + n.world + " is not");
    e.rank = env_int(n.rank, 0, 0, e.world - 1);
    e.local_world = env_int(n.local_world, 1, 1, e.world);
    e.local_rank = env_int(n.local_rank, 0, 0, e.local_world - 1);
    return;
  }
}

}  // namespace

DistEnv dist_env_from_environment() {
  DistEnv e;
  read_ranks(e);
  if (e.world == 1) return e;
  e.master_addr = getenv_or("MASTER_ADDR");
  if (e.master_addr.empty()) {
    throw RankSetupError("environment: WORLD_SIZE = " + std::to_string(e.world) +
                      " but MASTER_ADDR is not set (torchrun sets it; with srun or mpirun export MASTER_ADDR and "
                      "MASTER_PORT)");
  }
  e.master_port = env_int("MASTER_PORT", 29500, 1, 65535);
  e.agent_store = getenv_or("TORCHELASTIC_USE_AGENT_STORE") == "True";
  e.restart = getenv_or("TORCHELASTIC_RESTART_COUNT", "0");
  return e;
}

}  // namespace pinfeed::engine
