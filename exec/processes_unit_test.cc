#include "exec/processes.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace thunky {
namespace {

ProcessPlace place(const std::map<std::string, std::string>& vars) {
  return place_from_environment([&](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(ProcessPlace, TheLaunchersVariablesSayWhereAProcessStands) {
  // No variables: one process.
  EXPECT_EQ(place({}).count, 1);
  // mpirun's beat an enclosing srun's.
  auto p = place({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(p.index, 3);
  EXPECT_EQ(p.count, 4);
  EXPECT_EQ(p.local, 1);
  EXPECT_EQ(p.from, "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE");
  p = place({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}});
  EXPECT_EQ(p.index, 5);
  EXPECT_EQ(p.local, 1);
  p = place({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(p.count, 2);
  EXPECT_EQ(p.local, 0);  // LOCAL_RANK unset
  // A value that is not a number, or an index past the count, is an error.
  EXPECT_THROW(place({{"PMI_RANK", "x"}, {"PMI_SIZE", "2"}}), ThunkyError);
  EXPECT_THROW(place({{"PMI_RANK", "2"}, {"PMI_SIZE", "2"}}), ThunkyError);
}

TEST(ProcessPlace, RanksGoToProcessesInContiguousBlocks) {
  // 8 ranks on 4 processes: process 2 runs ranks 4 and 5; rank 7 is process 3's.
  const RankBlock b = rank_block(8, 2, 4);
  EXPECT_EQ(b.first, 4);
  EXPECT_EQ(b.n, 2);
  EXPECT_TRUE(b.holds(5));
  EXPECT_FALSE(b.holds(6));
  EXPECT_EQ(process_of(7, 8, 4), 3);
  // A launch's key depends on its members and its sequence number.
  EXPECT_EQ(launch_key({0, 1}, 3), launch_key({0, 1}, 3));
  EXPECT_NE(launch_key({0, 1}, 3), launch_key({0, 1}, 4));
  EXPECT_NE(launch_key({0, 1}, 3), launch_key({0, 2}, 3));
}

}  // namespace
}  // namespace thunky
