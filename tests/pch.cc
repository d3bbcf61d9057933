// The translation unit that holds the test executables' precompiled header
// (tests/CMakeLists.txt, shmtrain_test_pch).
