package service

// TestClockOffsetEnv names a test-only environment variable: a duration
// (e.g. "-700ms") by which this node's scheduler clock runs ahead of the
// real one. The cluster tests use it to prove the clock-skew tolerance with
// real processes. Only a binary built with the bexttest tag reads it (see
// clock_bexttest.go): in the shipped one a stray value in a production
// environment cannot shift a node's clock.
const TestClockOffsetEnv = "BEXT_TEST_CLOCK_OFFSET"
