// Multi-process tests of shmtrain (being written).
#include "gtest/gtest.h"
