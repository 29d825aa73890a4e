#include "service/shutdown.h"

#include <spdlog/spdlog.h>

namespace perserve::service {

void Shutdown::Begin(Clock::time_point now, const CheckpointDriver& checkpoints) {
  stopping_ = true;
  deadline_ = checkpoints.final_unfinished() ? Clock::time_point::max() : now + kGrace;
}

void Shutdown::Step(Clock::time_point now, const CheckpointDriver& checkpoints) {
  if (stopping_ && deadline_ == Clock::time_point::max() && !checkpoints.final_unfinished()) {
    deadline_ = now + kGrace;
  }
}

Status Shutdown::Refusal(const CheckpointDriver& checkpoints) {
  const CheckpointWriter* writer = checkpoints.writer();
  std::string where;
  if (checkpoints.writing_final()) {
    where = "; its final checkpoint, holding everything acknowledged before this, is being written to " +
            writer->path();
  } else if (writer != nullptr && !writer->last_path().empty()) {
    where = "; its last checkpoint: " + writer->last_path();
  }
  return Status::Unavailable("the server has stopped serving (SIGTERM)" + where);
}

void Shutdown::Log(int open_clients, const std::string& checkpoint_dir, const CheckpointDriver& checkpoints) {
  const CheckpointWriter* writer = checkpoints.writer();
  spdlog::info("SIGTERM: no longer serving; every request is answered UNAVAILABLE until the {} open clients "
               "close, or for {} s{}{}",
               open_clients, kGrace.count(),
               checkpoints.writing_final() ? " after its final checkpoint is complete" : "",
               writer != nullptr && (writer->active() || !writer->last_path().empty())
                   ? "; restore with --restore " + checkpoint_dir
                   : "");
  // A launcher kills this rank a fixed time after SIGTERM (docs/checkpoints.md):
  // which checkpoint a restore takes if the final one is cut short.
  if (checkpoints.writing_final()) {
    spdlog::info("SIGTERM: if this rank is killed before {} is complete, --restore takes {}", writer->path(),
                 writer->last_path().empty() ? "nothing (no checkpoint is complete yet)" : writer->last_path());
  }
}

}  // namespace perserve::service
