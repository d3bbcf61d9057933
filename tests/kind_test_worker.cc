// The workers' side of the kind of run tests/kind_test.cc adds: shmtrain-worker's table
// (worker/worker_kinds.h) and one line more. Its loop is sync's, run under the kind's own mode
// word (kShadowSync in tests/kind_test.cc), which no --mode names.
#include <iterator>
#include <vector>

#include "worker/worker_kinds.h"

int main(int argc, char** argv) {
  using namespace shmtrain;
  std::vector<worker::WorkerKind> kinds(std::begin(worker::kWorkerKinds),
                                        std::end(worker::kWorkerKinds));
  kinds.push_back({static_cast<Mode>(100), worker::RunSync});  // the kind's one line
  return worker::WorkerMain(argc, argv, kinds);
}
