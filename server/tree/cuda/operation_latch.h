// OperationLatch: when the CUDA tree refuses work after an error, and when it
// does not. Plain C++ (no CUDA), so host tests hold the rule without a device.
//
// An operation has three phases:
//   prepare: set the device, grow staging or scratch. Queues no device work,
//            so an error here leaves the tree exactly as it was: it is
//            returned as it is (kResourceExhausted for memory that could not
//            be had) and the next operation runs normally;
//   queue:   copies and kernel launches on the tree's stream;
//   wait:    waits for the stream; always run once queue has started, even
//            after queue failed, so that nothing is left running.
// An error in queue or wait may have left new leaves under stale sums, or a
// lost context: the latch then closes for good, and every later operation is
// refused with kInternal naming that first error, rather than served from a
// tree nobody can vouch for.
//
// Thread safety: none (as the tree).
#pragma once

#include <string>
#include <utility>

#include "perserve/status.h"

namespace perserve::cuda {

class OperationLatch {
 public:
  // Ok while open; once closed, kInternal naming the error that closed it.
  // Public methods call this before anything else (validation included).
  Status Refusal() const;
  bool closed() const { return !failure_.empty(); }

  // Closes the latch with `cause` (not Ok); the first cause is the one kept.
  void Close(const Status& cause);

  // Runs one operation's phases (each returns Status) under the rule above:
  // nothing at all when closed, wait only when queue was entered.
  template <typename Prepare, typename Queue, typename Wait>
  Status Run(Prepare&& prepare, Queue&& queue, Wait&& wait) {
    PERSERVE_RETURN_IF_ERROR(Refusal());
    PERSERVE_RETURN_IF_ERROR(std::forward<Prepare>(prepare)());
    Status status = std::forward<Queue>(queue)();
    const Status waited = std::forward<Wait>(wait)();
    if (status.ok()) status = waited;
    if (!status.ok()) Close(status);
    return status;
  }

 private:
  std::string failure_;
};

}  // namespace perserve::cuda
