// Reading a file without holding a stop signal: the opens and waits of the data loaders
// (data/byte_stream.h, data/line_blocks.h). A FIFO nobody writes would hold open(2), and a pipe
// whose writer stalls would hold read(2), past any signal (the master's handlers restart system
// calls, SA_RESTART). Internal to data/.
#pragma once

#include <string>

#include "shmtrain/status.h"

namespace shmtrain::data {

// open(2) for reading without waiting for a FIFO's writer (O_NONBLOCK, cleared once open, so
// that reads wait as usual, through WaitReadable). -1 and errno as open(2) on failure.
int OpenForReading(const std::string& path);

// Waits until fd has bytes to read (or its end, or an error for read() to name), in rounds of
// 200 ms between which a stop signal ends the wait (kInterrupted, data/dataset.h): a pipe or
// FIFO whose writer stalls holds a load for at most one round after a stop. A regular file is
// always ready. `name` names the file in the message.
Status WaitReadable(int fd, const std::string& name);

}  // namespace shmtrain::data
