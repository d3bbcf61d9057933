#include <gtest/gtest.h>

#include "tests/proc_util.h"
