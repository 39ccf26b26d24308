// Where this process sits among the ranks of a run, read from the launcher's environment (torchrun, srun, mpirun).
#pragma once

#include <string>

namespace pinfeed::engine {

// Where this process sits, from the launcher's environment.
struct DistEnv {
  int rank = 0, world = 1;              // RANK, WORLD_SIZE (SLURM_PROCID/NTASKS, OMPI_COMM_WORLD_*)
  int local_rank = 0, local_world = 1;  // LOCAL_RANK, LOCAL_WORLD_SIZE: this host's share
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: torchrun hosts the store, every rank is a client
  std::string restart = "0";  // TORCHELASTIC_RESTART_COUNT: keys of an earlier attempt are never read

  bool hosts_store() const { return rank == 0 && !agent_store; }  // rank 0 serves the store, unless torchrun does
};
// Throws RankSetupError for a partial or malformed set of variables.
DistEnv dist_env_from_environment();

}  // namespace pinfeed::engine
