// shmtrain-worker <segment> <rank> <incarnation>: a worker of the kinds of run in kWorkerKinds
// (worker/worker_kinds.h); the process itself is WorkerMain (worker/worker_main.cc).
#include "worker/worker_kinds.h"

int main(int argc, char** argv) {
  return shmtrain::worker::WorkerMain(argc, argv, shmtrain::worker::kWorkerKinds);
}
