// The processes of one training job: a single process normally, the ranks of an MPI job when
// started by a launcher (mpirun, srun, mpiexec: one process per GPU, possibly across machines).
// Usable in every build: a build without MPI refuses to run as one of several processes.
#pragma once
#include <iosfwd>
#include <string>

#include "trident/core/error.h"
#include "trident/core/job.h"

namespace trident {

#ifdef TRIDENT_HAVE_MPI
// Under a launcher that started more than one process: initialises MPI (once; finalised at
// exit) and returns this process's place in the job. Otherwise a group of one, MPI untouched.
// A process that cannot join the others (launcher_refusal) gets a UsageError.
ProcessGroup join_process_group();
// Every process's settings compared (before the first step, by every process at once); a
// difference is a UsageError naming each setting and every process's value. Bounded, like every
// wait for the others, by TRIDENT_COLLECTIVE_TIMEOUT_S.
void agree_on_settings(const ProcessGroup& group, const JobSettings& mine);
// After a failure on this process: prints it with the rank to `err` and ends the whole job
// (MPI_Abort), since the other processes would wait for this one's next all-reduce. Call it
// while the Trainer is still alive: destroying it first may wait for peers that never come.
[[noreturn]] void abort_process_group(const ProcessGroup& group, const std::string& message,
                                      int status, std::ostream& err);
#else
inline ProcessGroup join_process_group() {
  const std::string refusal = launcher_refusal(detect_launcher(), 0);
  if (!refusal.empty()) throw UsageError(refusal);
  return {};
}
inline void agree_on_settings(const ProcessGroup&, const JobSettings&) {}
[[noreturn]] inline void abort_process_group(const ProcessGroup&, const std::string& message,
                                             int, std::ostream&) {
  throw Error(message);  // unreachable: a group of one never aborts others
}
#endif

}  // namespace trident
